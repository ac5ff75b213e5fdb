#!/usr/bin/env bash
# Builds the Python and JavaScript plugins (plugins-py/*, plugins-js/*) into components, after their
# native tests: target/plugins/py-<name>.wasm and js-<name>.wasm, beside the Rust plugins
# (scripts/build-plugins.sh calls this when it builds every plugin). Toolchains: scripts/polyglot.sh.
# A component newer than every file of its project and of its SDK is kept: Python and
# StarlingMonkey guests take 10 s or more each to build.
# Usage: scripts/build-polyglot-plugins.sh [OUT_DIR]   (default target/plugins)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/target/plugins}"
mkdir -p "$OUT"
mapfile -t TOOLS < <("$ROOT/scripts/polyglot.sh")
PYTHON="${TOOLS[0]}"
export TRELLIS_JCO_NODE_MODULES="${TOOLS[1]}"

# Whether $1 is missing or older than any file under the other arguments.
stale() {
    local out="$1"; shift
    # -L: the SDKs' `wit` is a link to wit/v0.2, whose changes count too.
    [ ! -f "$out" ] || [ -n "$(find -L "$@" \( -name node_modules -o -name target -o -name __pycache__ \) -prune \
        -o -type f -newer "$out" -print -quit)" ]
}

# The SDKs' template projects: their native tests (a template that no longer passes them would
# mislead every new plugin). The JS template imports the SDK by its package name, as it would
# after `npm install`; a link stands in for that install.
(cd "$ROOT/sdk-python/template" && PYTHONPATH="$ROOT/sdk-python:$ROOT/sdk-python/template" "$PYTHON" -m unittest discover -q -s tests 2>/dev/null) \
    || { echo "build-polyglot-plugins: sdk-python/template's tests fail" >&2; exit 1; }
mkdir -p "$ROOT/sdk-js/template/node_modules"
ln -sfn ../.. "$ROOT/sdk-js/template/node_modules/trellis-plugin-sdk"
(cd "$ROOT/sdk-js/template" && node --test test/ >/dev/null) \
    || { echo "build-polyglot-plugins: sdk-js/template's tests fail (cd sdk-js/template && node --test test/)" >&2; exit 1; }

for dir in "$ROOT"/plugins-py/*/; do
    dir="${dir%/}"; name="$(basename "$dir")"; out="$OUT/py-$name.wasm"
    (cd "$dir" && PYTHONPATH="$ROOT/sdk-python:$dir" "$PYTHON" -m unittest discover -q -s tests 2>/dev/null) \
        || { echo "build-polyglot-plugins: the native tests of plugins-py/$name fail" >&2; exit 1; }
    if stale "$out" "$dir" "$ROOT/sdk-python"; then
        PYTHONPATH="$ROOT/sdk-python" "$PYTHON" -m trellis_plugin build "$dir" -o "$out" >/dev/null
    fi
    printf 'build-polyglot-plugins: %-40s %9d bytes\n' "$out" "$(stat -c %s "$out")" >&2
done

for dir in "$ROOT"/plugins-js/*/; do
    dir="${dir%/}"; name="$(basename "$dir")"; out="$OUT/js-$name.wasm"
    (cd "$dir" && node --test test/ >/dev/null) \
        || { echo "build-polyglot-plugins: the native tests of plugins-js/$name fail (cd plugins-js/$name && node --test test/)" >&2; exit 1; }
    if stale "$out" "$dir" "$ROOT/sdk-js"; then
        node "$ROOT/sdk-js/bin/trellis-plugin.mjs" build "$dir" -o "$out" >/dev/null
    fi
    printf 'build-polyglot-plugins: %-40s %9d bytes\n' "$out" "$(stat -c %s "$out")" >&2
done
