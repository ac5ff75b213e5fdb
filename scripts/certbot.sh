#!/usr/bin/env bash
# Installs certbot (PyPI, pinned) into target/venv-certbot for the ACME server tests
# (tests/tests/it/acme_server.rs), once; prints the certbot path. Its own venv: certbot's pins
# (josepy, cryptography) must not move schemathesis's or moto's. The venv's python also carries
# the `acme` library (key rollover) and `cryptography` (parsing issued chains).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=5.8.0
VENV="$ROOT/target/venv-certbot"
if ! "$VENV/bin/certbot" --version 2>/dev/null | grep -qx "certbot $VERSION"; then
    command -v python3 >/dev/null || { echo "certbot.sh: needs python3 (apt-get install python3-venv)" >&2; exit 1; }
    python3 -m venv "$VENV" || { echo "certbot.sh: python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
    "$VENV/bin/pip" install -q "certbot==$VERSION" "acme==$VERSION" >&2
fi
echo "$VENV/bin/certbot"
