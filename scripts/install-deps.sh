#!/usr/bin/env bash
# Installs the Debian packages Trellis needs, and checks what it got. The one place that knows
# the install steps: scripts/build-plugins.sh, scripts/postgres.sh and .ci/run call it.
#
# Usage: scripts/install-deps.sh GROUP...
#   wasm      Debian's rustc-web toolchain for the wasm plugins (when rustup lacks wasm32-wasip2)
#   postgres  a PostgreSQL server for the test suite's second pass
#   test      tools the tests and CI use (sqlite3, openssl, curl, python3-venv for schemathesis,
#             chromium and npm for the OIDC sign-in tests)
#   tpm       the device agent's TPM stack (libtss2-dev, pkg-config) and the software TPM its tests
#             run against (swtpm, swtpm-tools with swtpm_localca, tpm2-tools)
#
# A fresh machine's package lists are stale: without `apt-get update` Debian offers
# rustc-web 1.85, too old for the plugins. So the lists are refreshed first, once, and only
# when something is missing; the compiler version is checked after installing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The plugins' minimum compiler: the workspace's rust-version.
NEED_RUSTC="$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)"

missing=()
want() { # want PACKAGE TEST-COMMAND...
    local package=$1; shift
    "$@" >/dev/null 2>&1 || missing+=("$package")
}
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
debian_rustc_ok() {
    [ -x /usr/bin/rustc ] && version_ge "$(/usr/bin/rustc -V | awk '{print $2}')" "$NEED_RUSTC"
}

for group in "$@"; do
    case "$group" in
        wasm)
            debian_rustc_ok || missing+=(rustc-web)
            want cargo-web test -x /usr/bin/cargo
            want rust-web-src test -d /usr/lib/rustlib/src/rust/library
            want wasi-libc test -d /usr/lib/wasm32-wasi
            ;;
        postgres)
            want postgresql bash -c 'ls -d /usr/lib/postgresql/*/bin'
            want postgresql-contrib bash -c 'ls /usr/share/postgresql/*/extension/pg_trgm.control'
            want postgresql-client command -v psql
            ;;
        test)
            want sqlite3 command -v sqlite3
            want openssl command -v openssl
            want curl command -v curl
            # The README's first steps use jq; scripts/readme-walkthrough.sh runs them.
            want jq command -v jq
            # schemathesis (PyPI) runs from a venv under target/.
            want python3-venv python3 -c 'import ensurepip'
            # The webhook signature snippets (docs/webhooks) run under Node in tests/it/webhooks.rs.
            want nodejs command -v node
            # tests/src/pebble.rs: a real ACME CA (pebble) and its DNS/challenge test server.
            want pebble command -v pebble-challtestsrv
            # tests/it/acme_server.rs: lego, an ACME client of Trellis's ACME server.
            want lego command -v lego
            # tests/it/oidc.rs signs in once in a real browser: Debian's Chromium, driven by
            # playwright-core (npm, scripts/oidc-provider.sh) with executablePath, no download.
            want chromium test -x /usr/bin/chromium
            # npm installs oidc-provider and playwright-core (scripts/oidc-provider.sh).
            want npm command -v npm
            ;;
        tpm)
            # trellis-agent links libtss2 (tss-esapi finds it with pkg-config).
            want libtss2-dev test -f /usr/include/tss2/tss2_esys.h
            want pkg-config command -v pkg-config
            # tests/src/swtpm.rs: a software TPM with EK certificates from swtpm's local CA.
            want swtpm command -v swtpm
            want swtpm-tools command -v swtpm_localca
            want tpm2-tools command -v tpm2_pcrextend
            ;;
        *) echo "install-deps: unknown group '$group' (wasm, postgres, test, tpm)" >&2; exit 2 ;;
    esac
done

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing Debian packages: ${missing[*]}" >&2
        echo "  run as root:  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

for group in "$@"; do
    if [ "$group" = wasm ] && ! debian_rustc_ok; then
        got="$( [ -x /usr/bin/rustc ] && /usr/bin/rustc -V || echo 'no /usr/bin/rustc')"
        echo "install-deps: the plugins need rustc >= $NEED_RUSTC; Debian gave: $got." >&2
        echo "  Debian's security archive carries a newer rustc-web: check that it is in your apt sources" >&2
        echo "  (deb http://security.debian.org/debian-security bookworm-security main), run apt-get update," >&2
        echo "  then this script again. Or use rustup: rustup target add wasm32-wasip2." >&2
        exit 1
    fi
done
