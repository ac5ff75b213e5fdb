# Trellis. The README's first two commands are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test build plugins bench bench-inventory lint fmt deps

## Serve on 127.0.0.1:8080 with SQLite at ./data/trellis.db and the first-party plugins.
run: plugins
	$(CARGO) run --release -p trellis-host --bin trellis -- serve

## Everything the tests need (plugins, binary), then the whole suite in parallel.
test: plugins
	$(CARGO) build -p trellis-host --bin trellis
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --no-fail-fast; \
	else \
		$(CARGO) test --workspace --no-fail-fast; \
	fi

build:
	$(CARGO) build --release -p trellis-host --bin trellis

## Builds every crate under plugins/ to target/plugins/*.wasm (picks the toolchain route itself).
plugins:
	@if [ -x scripts/build-plugins.sh ]; then scripts/build-plugins.sh; else echo "no plugins to build yet"; fi

## Inventory figures: register throughput, list latency at 1,000,000 rows, idle memory.
bench-inventory:
	$(CARGO) build --release -p trellis-host --bin trellis -p trellis-tests --bin inventory-bench
	./target/release/inventory-bench

bench: bench-inventory

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all
