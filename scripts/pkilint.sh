#!/usr/bin/env bash
# Installs DigiCert's pkilint (PyPI) and pyca/cryptography (PyPI) into target/venv-pkilint for the
# tests that lint what the internal CA signs (tests/tests/it/pki_lint.rs), once; prints the venv path.
# Two strict tools nobody here wrote: pkilint checks DER and RFC 5280/6960 rules, cryptography
# parses like certbot and most Python TLS tooling do (openssl is lenient and hides encoding faults).
# Its own venv: pkilint's pins must not move moto's or schemathesis's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKILINT=0.13.3
CRYPTOGRAPHY=48.0.0
VENV="$ROOT/target/venv-pkilint"
installed() {
    "$VENV/bin/python" - "$PKILINT" "$CRYPTOGRAPHY" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(version("pkilint") != sys.argv[1] or version("cryptography") != sys.argv[2])
PY
}
if ! installed || [ ! -x "$VENV/bin/lint_pkix_cert" ]; then
    command -v python3 >/dev/null || { echo "pkilint.sh: needs python3 (apt-get install python3-venv)" >&2; exit 1; }
    python3 -m venv "$VENV" || { echo "pkilint.sh: python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
    "$VENV/bin/pip" install -q "pkilint==$PKILINT" "cryptography==$CRYPTOGRAPHY" >&2
fi
echo "$VENV"
