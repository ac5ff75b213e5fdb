#!/usr/bin/env bash
# Checks the OpenAPI document against the running binary: a client generated from it with
# openapi-python-client (PyPI) is used as a consumer would (tests/openapi_client/check.py), then
# schemathesis (PyPI) fuzzes every operation with every check.
# Usage: scripts/schemathesis.sh [TRELLIS_BINARY] [extra schemathesis args...]
# Exits non-zero on any failure. Installs schemathesis into target/venv on first use.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-$ROOT/target/debug/trellis}"; shift || true
VERSION=4.32.5
CLIENT_GENERATOR_VERSION=0.29.1
VENV="$ROOT/target/venv"
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$VERSION"; then
    command -v python3 >/dev/null || { echo "schemathesis.sh: needs python3 (apt-get install python3-venv)" >&2; exit 1; }
    python3 -m venv "$VENV" || { echo "schemathesis.sh: python3 -m venv failed: apt-get install python3-venv" >&2; exit 1; }
    "$VENV/bin/pip" install -q "schemathesis==$VERSION"
fi
if ! "$VENV/bin/openapi-python-client" --version 2>/dev/null | grep -q "$CLIENT_GENERATOR_VERSION"; then
    "$VENV/bin/pip" install -q "openapi-python-client==$CLIENT_GENERATOR_VERSION"
fi
WORK="$(mktemp -d)"
trap 'kill "${PID:-0}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export TRELLIS_DATABASE_URL="sqlite://$WORK/trellis.db" TRELLIS_DATA_DIR="$WORK" TRELLIS_LOG_FORMAT=json RUST_LOG=warn
export TRELLIS_ADMIN_EMAIL=fuzz@example.com TRELLIS_ADMIN_PASSWORD=fuzz-password-123 TRELLIS_LISTEN="127.0.0.1:$PORT"
"$BIN" serve > "$WORK/server.log" 2>&1 &
PID=$!
for _ in $(seq 200); do curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
WS=$(curl -fsS -c "$WORK/jar" -H 'content-type: application/json' \
    -d '{"email":"fuzz@example.com","password":"fuzz-password-123"}' "http://127.0.0.1:$PORT/api/auth/login" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["user"]["currentWorkspaceId"])')
SCOPES=api-keys:read,api-keys:write,attestation:read,attestation:write,attestation:manage,audit:read,cas:read,cas:write,certificates:read,certificates:write,integrations:read,integrations:write,members:read,members:write,plugins:read,plugins:write
KEY=$("$BIN" api-key create --workspace "$WS" --name fuzz --scopes "$SCOPES" 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
status=0
run() {
    "$VENV/bin/schemathesis" run "http://127.0.0.1:$PORT/api/openapi.json" --checks all \
        -H "X-API-Key: $KEY" --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-25}" --seed 1 "$@" || status=$?
}
# Operations whose valid input depends on what no schema can say: registration ("a valid X.509
# certificate in PEM"), a CSR's signature, a CA or policy `type` that an installed plugin must
# serve and a `config` that plugin validates, a template's settings checked together, a webhook
# URL whose host must resolve to a public address, TPM structures, attestation policies, an
# e-mail address to add as a member (the server's rule: trimmed, one local part, a dotted domain,
# at most 254 bytes; a pattern would have to mirror Unicode case folding and byte counts), an API
# key's scopes (an agent key never carries `attestation:manage`: a rule across two members), an
# ACME directory's templates that must exist and a CA that must issue, an EAB key's name after
# trimming (and integers sent as `1.0`, which these bodies' i64 members refuse). Strings
# that match the documented shape but are none of these are rightly refused with 400, which
# `positive_data_acceptance` counts as a failure; they get every other check.
RUNTIME_CHECKED=(
    "POST /api/certificates" "POST /api/certificates/issue" "POST /api/certificate-requests"
    "POST /api/certificate-authorities" "PUT /api/certificate-authorities/{id}" "PATCH /api/certificate-authorities/{id}"
    "POST /api/issuance-policies" "POST /api/certificate-templates" "PUT /api/certificate-templates/{id}"
    "POST /api/discovery/scans"
    "POST /api/integrations/webhooks" "PATCH /api/integrations/webhooks/{id}"
    "POST /api/integrations/external" "PUT /api/integrations/external/{id}" "PATCH /api/integrations/external/{id}"
    "POST /api/attestation/policies" "PATCH /api/attestation/policies/{id}" "POST /api/attestation/trust-roots"
    "POST /api/iot/devices/{id}/enroll" "POST /api/iot/devices/{id}/enroll/activate"
    "POST /api/iot/devices/{id}/attest-and-provision" "POST /api/iot/devices/{id}/attest" "POST /api/iot/devices/{id}/attest-tpm"
    "POST /api/workspaces/{id}/members" "POST /api/api-keys"
    "PUT /api/certificate-authorities/{id}/acme" "POST /api/acme/eab-keys"
)
# OCSP is a binary protocol (application/ocsp-request); openssl ocsp tests it (tests/it/issuance.rs).
OCSP=("POST /pki/{ca_id}/ocsp" "GET /pki/{ca_id}/ocsp/{request}")
# Deleting API keys: the fuzzer lists keys and may delete the one it runs with, which leaves
# every later operation a 401. Fuzzed last, after the generated client's check.
LAST=("DELETE /api/api-keys/{id}")
exclude=(); include=()
for name in "${RUNTIME_CHECKED[@]}" "${OCSP[@]}" "${LAST[@]}"; do exclude+=(--exclude-name "$name"); done
for name in "${RUNTIME_CHECKED[@]}"; do include+=(--include-name "$name"); done
# Every operation, every check ...
run "${exclude[@]}" "$@"
# ... and the runtime-checked ones with every check but positive_data_acceptance.
run "${include[@]}" --exclude-checks positive_data_acceptance "$@"
# Then a client generated from the document, used as a consumer would
# (tests/openapi_client/check.py). After the fuzzing, so that the fuzzer meets no revoked
# certificate: revoking one again is a 400 by the spec, a state no schema can express.
curl -fsS "http://127.0.0.1:$PORT/api/openapi.json" > "$WORK/openapi.json"
"$VENV/bin/openapi-python-client" generate --path "$WORK/openapi.json" --output-path "$WORK/client" >/dev/null 2>&1 ||
    { echo "schemathesis.sh: openapi-python-client could not generate a client" >&2; status=1; }
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /dev/null -days 30 \
    -subj "/CN=client.example.com" -out "$WORK/client.pem" 2>/dev/null
PYTHONPATH="$WORK/client" "$VENV/bin/python" "$ROOT/tests/openapi_client/check.py" \
    "http://127.0.0.1:$PORT" "$KEY" "$WORK/client.pem" || status=1
run --include-name "${LAST[0]}" "$@"

if grep -q '"level":"ERROR"' "$WORK/server.log"; then
    echo "schemathesis.sh: the server logged errors:" >&2; grep '"level":"ERROR"' "$WORK/server.log" | head -20 >&2
    status=1
fi
exit $status
