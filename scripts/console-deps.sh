#!/usr/bin/env bash
# Installs what the console's browser tests (tests/it/console.rs, tests/console/browser.mjs) need
# into target/console-deps/node_modules, once: playwright-core (npm), which drives Debian's
# /usr/bin/chromium (scripts/install-deps.sh test) through executablePath, no browser download
# (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD), and axe-core (npm), the accessibility checker run in each
# page. Prints the node_modules path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLAYWRIGHT_CORE=1.65.1
AXE_CORE=4.10.3
DIR="$ROOT/target/console-deps"
installed() { # installed PACKAGE VERSION
    node -e "process.exit(require('$DIR/node_modules/$1/package.json').version === '$2' ? 0 : 1)" 2>/dev/null
}
if ! installed playwright-core "$PLAYWRIGHT_CORE" || ! installed axe-core "$AXE_CORE"; then
    command -v npm >/dev/null || { echo "console-deps.sh: needs npm (scripts/install-deps.sh test)" >&2; exit 1; }
    mkdir -p "$DIR"
    [ -f "$DIR/package.json" ] || echo '{"name":"trellis-console-test-deps","private":true}' > "$DIR/package.json"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$DIR" --no-audit --no-fund --save-exact \
        "playwright-core@$PLAYWRIGHT_CORE" "axe-core@$AXE_CORE" >&2
fi
echo "$DIR/node_modules"
