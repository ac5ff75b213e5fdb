#!/usr/bin/env bash
# Compiles the plugins the test suite loads into the build tree's compiled-code cache
# (target/plugin-cache) once, before the tests. Otherwise the suite's first servers all compile
# the same components at the same moment, and each test of a Python or JavaScript plugin pays
# Cranelift's 20-60 s for its large guest. Installs into a scratch data directory, then drops it:
# the first-party plugins, and the Python and JavaScript plugins scripts/build-plugins.sh built
# (not their fixtures).
# usage: scripts/warm-plugin-cache.sh [TRELLIS_BINARY]   (default target/debug/trellis)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/debug/trellis}"
LOG="$ROOT/target/plugin-cache-warm.log"
DATA="$(mktemp -d)"
trap 'rm -rf "$DATA"' EXIT
cd "$ROOT"
started=$SECONDS
if ! {
    # The scratch directory holds the database too (its default is ./data/trellis.db, which
    # would keep what an earlier run installed).
    export TRELLIS_DATA_DIR="$DATA" TRELLIS_DATABASE_URL="sqlite://$DATA/trellis.db"
    "$BIN" plugin install-first-party
    for wasm in target/plugins/py-*.wasm target/plugins/js-*.wasm; do
        # Fixtures (an endless loop, …) are loaded only by the plugin host's own tests, which
        # compile them into the same cache; the other Python and JavaScript plugins they load are
        # the ones compiled here.
        [ -e "$wasm" ] && [[ "$wasm" != *-fixture-* ]] || continue
        "$BIN" plugin install "$wasm"
    done
} >"$LOG" 2>&1; then
    echo "warm-plugin-cache: installing a plugin failed; its log ($LOG):" >&2
    sed 's/^/  /' "$LOG" >&2
    exit 1
fi
echo "warm-plugin-cache: $(find target/plugin-cache -name '*.cwasm' | wc -l) compiled plugins in target/plugin-cache ($(( SECONDS - started )) s)" >&2
