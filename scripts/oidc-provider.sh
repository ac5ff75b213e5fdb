#!/usr/bin/env bash
# Installs the OpenID Connect test peers into target/oidc-provider/node_modules, once:
#   oidc-provider (npm, panva's certified OpenID provider) run by tests/oidc/provider.mjs, and
#   playwright-core (npm), which drives Debian's /usr/bin/chromium (scripts/install-deps.sh
#   test) through executablePath: no browser is ever downloaded (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD).
# Prints the node_modules path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OIDC_PROVIDER=9.13.3
PLAYWRIGHT_CORE=1.65.1
DIR="$ROOT/target/oidc-provider"
installed() { # installed PACKAGE VERSION
    node -e "process.exit(require('$DIR/node_modules/$1/package.json').version === '$2' ? 0 : 1)" 2>/dev/null
}
if ! installed oidc-provider "$OIDC_PROVIDER" || ! installed playwright-core "$PLAYWRIGHT_CORE"; then
    command -v npm >/dev/null || { echo "oidc-provider.sh: needs npm (scripts/install-deps.sh test)" >&2; exit 1; }
    mkdir -p "$DIR"
    [ -f "$DIR/package.json" ] || echo '{"name":"trellis-oidc-test-peers","private":true}' > "$DIR/package.json"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$DIR" --no-audit --no-fund --save-exact \
        "oidc-provider@$OIDC_PROVIDER" "playwright-core@$PLAYWRIGHT_CORE" >&2
fi
echo "$DIR/node_modules"
