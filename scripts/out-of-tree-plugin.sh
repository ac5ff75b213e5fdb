#!/usr/bin/env bash
# A plugin as a third party writes it, outside this repository: copies
# examples/rest-ca-connector to a temporary directory, points its SDK dependency at this
# checkout's sdk/ by path, runs its native tests (`cargo test`), builds it with the documented
# command (`scripts/build-plugins.sh <dir>`), then installs and runs the component in the
# real binary (the ignored black-box test `plugins_out_of_tree`).
# Usage: scripts/out-of-tree-plugin.sh   (after `cargo build -p trellis --bin trellis`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp -r "$ROOT/examples/rest-ca-connector" "$WORK/"
CRATE="$WORK/rest-ca-connector"
rm -rf "$CRATE/target"
sed -i "s|path = \"../../sdk\"|path = \"$ROOT/sdk\"|" "$CRATE/Cargo.toml"
# The same dependency versions as this checkout: a speed-up (its build cache applies), not a need.
cp "$ROOT/Cargo.lock" "$CRATE/Cargo.lock"

echo "out-of-tree: native tests in $CRATE" >&2
(cd "$CRATE" && CARGO_TARGET_DIR="$ROOT/target/out-of-tree" cargo test --quiet)

echo "out-of-tree: building the component" >&2
WASM="$("$ROOT/scripts/build-plugins.sh" "$CRATE")"

echo "out-of-tree: installing and running $WASM" >&2
cd "$ROOT"
# The Makefile's package set, so that the test build is the one `make test` already made.
WORKSPACE=(--workspace --exclude 'trellis-fixture-*')
TEST_RUNNER="cargo test"
if cargo nextest --version >/dev/null 2>&1; then TEST_RUNNER="cargo nextest run"; fi
if [ "$TEST_RUNNER" = "cargo test" ]; then
    TRELLIS_OUT_OF_TREE_WASM="$WASM" cargo test "${WORKSPACE[@]}" --test it plugins_out_of_tree -- --ignored
else
    TRELLIS_OUT_OF_TREE_WASM="$WASM" cargo nextest run "${WORKSPACE[@]}" --test it --run-ignored only plugins_out_of_tree
fi
