#!/usr/bin/env bash
# Installs moto (PyPI `moto[server]`, a local AWS API server with IAM and SigV4 checks) into
# target/venv-moto for the aws-pca tests (tests/src/moto.rs), once; prints the moto_server path.
# Its own venv: moto's pins (werkzeug, jsonschema, …) must not move schemathesis's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=5.2.1
VENV="$ROOT/target/venv-moto"
if ! "$VENV/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$VERSION')" 2>/dev/null; then
    command -v python3 >/dev/null || { echo "moto.sh: needs python3 (apt-get install python3-venv)" >&2; exit 1; }
    python3 -m venv "$VENV" || { echo "moto.sh: python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
    "$VENV/bin/pip" install -q "moto[server]==$VERSION" >&2
fi
echo "$VENV/bin/moto_server"
