#!/usr/bin/env bash
# Runs the README's "First steps" block as written, so the walkthrough a new user follows cannot
# rot: the block is read from README.md at every run (nothing here repeats its commands).
#
# Usage: scripts/readme-walkthrough.sh [path/to/trellis]   (default: $TRELLIS_BIN, else
#        target/debug/trellis; the black-box suite runs it from tests/it/readme.rs)
#
# Each command runs in a scratch directory (the README's ./data/trellis.db is created there).
# Only these are substituted: `make run` by the given binary's `serve` (with the line's own
# variables) on a free port instead of 8080, `target/release/trellis` by the given binary, and
# the placeholders `ws_…` and `ck_…` by what the commands before printed (the workspaceId of
# `user create`, the key of `api-key create`), the CA id `1` by the id the CA got. `cert.pem`,
# "a certificate of yours", is made with openssl first. Every curl's HTTP status is checked
# (201 for a request with a body, 200 otherwise); at the end the issued certificate must verify
# against the CA certificate served at /pki/{caId}/ca.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${1:-${TRELLIS_BIN:-$ROOT/target/debug/trellis}}"
[ -x "$BIN" ] || { echo "readme-walkthrough: $BIN is not built (cargo build -p trellis --bin trellis)" >&2; exit 1; }
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
# As a new user's shell would be: none of the caller's settings (a test run's included) leak in.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^TRELLIS_' || true)
# `make run` finds the plugins beside its binary's target directory; a binary copied elsewhere
# gets this checkout's.
if [ ! -d "$(dirname "$BIN")/../plugins" ] && [ -d "$ROOT/target/plugins" ]; then
    export TRELLIS_FIRST_PARTY_PLUGIN_DIR="$ROOT/target/plugins"
fi
for tool in curl jq openssl python3; do
    command -v "$tool" >/dev/null || { echo "readme-walkthrough: needs $tool (scripts/install-deps.sh test)" >&2; exit 1; }
done

WORK="$(mktemp -d)"
SERVER=""
cleanup() {
    if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
# The port of the address in the server's `listening` log line, once it is there.
listening_port() {
    python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    if isinstance(event, dict) and event.get("message") == "listening":
        print(str(event.get("address", "")).rsplit(":", 1)[-1])
        break
PY
}
fail() {
    echo "readme-walkthrough: $*" >&2
    [ -f "$WORK/serve.log" ] && { echo "--- server log (tail)" >&2; tail -n 20 "$WORK/serve.log" >&2; }
    exit 1
}

# The fenced block after "## First steps", continuation lines joined, comment lines dropped.
mapfile -t COMMANDS < <(
    awk '/^## First steps/ { section = 1; next }
         section && /^```/ { if (inside) exit; inside = 1; next }
         inside' "$ROOT/README.md" |
        sed -e ':a' -e '/\\$/N; s/\\\n */ /; ta' |
        grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$'
)
[ "${#COMMANDS[@]}" -ge 5 ] || fail "no First steps block found in README.md"

PORT=""
WS="" KEY="" CA=""
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=mine.example.com \
    -keyout "$WORK/cert.key" -out "$WORK/cert.pem" 2>/dev/null

# curl as the README calls it, but every answer's status is checked before its body goes on.
curl() {
    local want=200 arg status
    for arg in "$@"; do [[ $arg == -d || $arg == --data* ]] && want=201; done
    status="$(command curl -sS -o "$WORK/.body" -w '%{http_code}' "$@")" || return 1
    if [ "$status" != "$want" ]; then
        echo "HTTP $status (expected $want): $(head -c 2000 "$WORK/.body")" >&2
        return 1
    fi
    cat "$WORK/.body"
}

for line in "${COMMANDS[@]}"; do
    case "$line" in
        *"make run")
            # The README's variables, the built binary instead of `make run`, and a port the
            # server binds itself and reports: a port picked here and released could be taken by
            # another test's server before this one binds it.
            vars="${line%make run}"
            (cd "$WORK" && eval "export $vars" && TRELLIS_LISTEN="127.0.0.1:0" exec "$BIN" serve) \
                >"$WORK/serve.log" 2>&1 &
            SERVER=$!
            for _ in $(seq 1200); do
                PORT="$(listening_port "$WORK/serve.log")"
                [ -n "$PORT" ] && break
                kill -0 "$SERVER" 2>/dev/null || fail "the server did not start"
                sleep 0.1
            done
            [ -n "$PORT" ] || fail "the server did not report its address within 120 s"
            echo "\$ ${line}   [as $BIN serve on port $PORT]"
            command curl -sSf -o /dev/null "http://127.0.0.1:$PORT/health" || fail "the server does not answer /health"
            continue
            ;;
    esac
    [ -n "$SERVER" ] || fail "the block runs a command before the server starts: $line"
    run="${line//target\/release\/trellis/\"\$BIN\"}"
    run="${run//127.0.0.1:8080/127.0.0.1:$PORT}"
    if [[ $run == *"ws_…"* ]]; then [ -n "$WS" ] || fail "no workspace id yet for: $line"; run="${run//ws_…/$WS}"; fi
    if [[ $run == *"ck_…"* ]]; then [ -n "$KEY" ] || fail "no API key yet for: $line"; run="${run//ck_…/$KEY}"; fi
    if [ -n "$CA" ]; then
        run="${run//\"caId\": 1/\"caId\": $CA}"
        run="${run//\/pki\/1\//\/pki\/$CA\/}"
    fi
    echo "\$ $line"
    stdin=""
    [[ $line == *--password-stdin* ]] && stdin="a walkthrough password"
    out="$(cd "$WORK" && printf '%s\n' "$stdin" | eval "$run")" || fail "this step failed: $line"
    [ -z "$out" ] || echo "$out" | head -c 600
    echo
    if [[ $line == *"trellis user create"* ]]; then
        WS="$(jq -r .workspaceId <<<"$out")"
    elif [[ $line == *"trellis api-key create"* ]]; then
        KEY="$(jq -r .key <<<"$out")"
    elif [[ $line == *"-d '{\"name\""*"/api/certificate-authorities"* ]]; then
        CA="$(jq -r .data.id "$WORK/.body")"
    fi
done

[ -n "$WS" ] && [ -n "$KEY" ] && [ -n "$CA" ] || fail "the block did not create a user, a key and a CA"
# The issued certificate verifies against what /pki/{caId}/ca serves, fetched here afresh.
command curl -sSf "http://127.0.0.1:$PORT/pki/$CA/ca" -o "$WORK/ca-check.pem" || fail "GET /pki/$CA/ca failed"
issued="$(ls "$WORK"/*.pem | grep -v -e '/cert.pem$' -e '/ca-check.pem$' | while read -r f; do
    openssl x509 -in "$f" -noout -ext basicConstraints 2>/dev/null | grep -q 'CA:TRUE' || echo "$f"; done)"
[ -n "$issued" ] || fail "the block saved no issued certificate"
for cert in $issued; do
    openssl verify -CAfile "$WORK/ca-check.pem" "$cert" || fail "$cert does not verify against /pki/$CA/ca"
done
echo "readme-walkthrough: ${#COMMANDS[@]} commands ran as written; the issued certificate verifies"
