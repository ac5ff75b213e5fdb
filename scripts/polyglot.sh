#!/usr/bin/env bash
# Installs the toolchains that build Python and JavaScript plugins (docs/plugin-authors.md), once:
#   componentize-py (PyPI) into target/venv-componentize-py, which sdk-python's
#     `python -m trellis_plugin build` wraps;
#   @bytecodealliance/jco and @bytecodealliance/componentize-js (npm) into target/jco/node_modules,
#     which sdk-js's `trellis-plugin build` wraps.
# Both build offline once installed (componentize-js's AOT option downloads and is never used).
# Prints two lines: the venv's python, then the node_modules path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMPONENTIZE_PY=0.25.1
JCO=1.35.0
COMPONENTIZE_JS=0.23.0
VENV="$ROOT/target/venv-componentize-py"
JS_DIR="$ROOT/target/jco"
# `make test` runs this in the background (scripts/test-tools.sh) while build-plugins.sh may call
# it too: one installer at a time, the second finds the tools installed.
mkdir -p "$ROOT/target"
exec 9>"$ROOT/target/.polyglot.lock"
flock 9

py_installed() {
    "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('componentize-py') != '$COMPONENTIZE_PY')" 2>/dev/null
}
if ! py_installed; then
    command -v python3 >/dev/null || { echo "polyglot.sh: needs python3 (apt-get install python3-venv)" >&2; exit 1; }
    python3 -m venv "$VENV" || { echo "polyglot.sh: python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
    "$VENV/bin/pip" install -q "componentize-py==$COMPONENTIZE_PY" >&2 \
        || { echo "polyglot.sh: pip install componentize-py==$COMPONENTIZE_PY failed" >&2; exit 1; }
    py_installed || { echo "polyglot.sh: componentize-py $COMPONENTIZE_PY not importable after install" >&2; exit 1; }
fi

js_installed() { # js_installed PACKAGE VERSION
    node -e "process.exit(require('$JS_DIR/node_modules/$1/package.json').version === '$2' ? 0 : 1)" 2>/dev/null
}
if ! js_installed @bytecodealliance/jco "$JCO" || ! js_installed @bytecodealliance/componentize-js "$COMPONENTIZE_JS"; then
    command -v npm >/dev/null || { echo "polyglot.sh: needs node and npm (scripts/install-deps.sh test)" >&2; exit 1; }
    mkdir -p "$JS_DIR"
    [ -f "$JS_DIR/package.json" ] || echo '{"name":"trellis-jco","private":true}' > "$JS_DIR/package.json"
    npm install --prefix "$JS_DIR" --no-audit --no-fund --save-exact \
        "@bytecodealliance/jco@$JCO" "@bytecodealliance/componentize-js@$COMPONENTIZE_JS" >&2 \
        || { echo "polyglot.sh: npm install of jco $JCO / componentize-js $COMPONENTIZE_JS failed" >&2; exit 1; }
    js_installed @bytecodealliance/jco "$JCO" && js_installed @bytecodealliance/componentize-js "$COMPONENTIZE_JS" \
        || { echo "polyglot.sh: jco $JCO / componentize-js $COMPONENTIZE_JS missing after install" >&2; exit 1; }
fi
echo "$VENV/bin/python"
echo "$JS_DIR/node_modules"
