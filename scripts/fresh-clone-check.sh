#!/usr/bin/env bash
# Runs the README's first command the way a new user does: a fresh clone, an empty target
# directory, `make run`, then probes /health and /api/openapi.json and stops the server.
# (The README's second command, `make test`, is what CI runs on a fresh clone.) Packages are
# installed by the clone's own scripts/install-deps.sh, as on a fresh machine; a fully fresh
# machine is CI's. Takes a full build (10-20 minutes on 2 cores).
# Usage: scripts/fresh-clone-check.sh [REPO]   (default: this checkout's HEAD)
set -euo pipefail
REPO="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
WORK="$(mktemp -d)"
trap 'kill "${PID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
git clone -q "$REPO" "$WORK/trellis"
cd "$WORK/trellis"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TRELLIS_LISTEN="127.0.0.1:$PORT" make run > "$WORK/run.log" 2>&1 &
PID=$!
for _ in $(seq 1800); do
    if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$PID" 2>/dev/null; then echo "make run exited:"; tail -n 40 "$WORK/run.log"; exit 1; fi
    sleep 1
done
curl -fsS "http://127.0.0.1:$PORT/health"; echo
curl -fsS "http://127.0.0.1:$PORT/api/openapi.json" | head -c 200; echo
grep -q 'installed first-party plugin' "$WORK/run.log" || { echo "first-party plugins were not installed"; exit 1; }
echo "fresh-clone-check: make run serves on a fresh clone"
