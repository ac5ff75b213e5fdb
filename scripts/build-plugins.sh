#!/usr/bin/env bash
# Builds every plugin crate under plugins/ (first-party plugins and test fixtures) for
# wasm32-wasip2 and copies the components to target/plugins/<name>.wasm.
#
# Two toolchain routes (DESIGN.md, "Building plugins on these machines"):
#   1. rustup has the wasm32-wasip2 target installed -> plain `cargo build --target wasm32-wasip2`.
#   2. otherwise Debian's rustc-web (same release line, ships rust-src) builds std itself
#      (-Z build-std) against Debian's wasi-libc, linking with rustup's rust-lld and
#      wasm-component-ld.
# Usage: scripts/build-plugins.sh [crate-dir-name ...]   (default: every crate under plugins/)
#        scripts/build-plugins.sh PATH/TO/CRATE           (any plugin crate, anywhere)
# A crate outside plugins/ is built in its own workspace; its component is written to
# PATH/TO/CRATE/target/trellis/<package>.wasm and the path printed on stdout.
set -euo pipefail

# An argument naming a directory with a Cargo.toml (not a bare name of a crate under plugins/)
# is an external crate.
EXTERNAL=""
if [ "$#" -eq 1 ] && [[ "$1" == */* || "$1" == . ]] && [ -f "$1/Cargo.toml" ]; then
    EXTERNAL="$(cd "$1" && pwd)"
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/target/plugins"
# A separate target dir keeps the wasm build from contending for the host build's lock.
export CARGO_TARGET_DIR="${TRELLIS_WASM_TARGET_DIR:-$ROOT/target/wasm}"
TARGET=wasm32-wasip2

# Every crate directory holding a Cargo.toml under plugins/ (nested one level for fixtures).
mapfile -t DIRS < <(find plugins -mindepth 2 -maxdepth 3 -name Cargo.toml -printf '%h\n' | sort)
if [ "$#" -gt 0 ] && [ -z "$EXTERNAL" ]; then
    mapfile -t DIRS < <(printf '%s\n' "${DIRS[@]}" | grep -E "/($(IFS='|'; echo "$*"))\$")
fi
[ "${#DIRS[@]}" -gt 0 ] || { echo "build-plugins: no plugin crates found" >&2; exit 1; }

if [ -n "$EXTERNAL" ]; then
    DIRS=("$EXTERNAL")
fi

PKGS=()
for dir in "${DIRS[@]}"; do
    pkg="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -n1)"
    PKGS+=("-p" "$pkg")
done

if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
    echo "build-plugins: rustup has $TARGET; using plain cargo" >&2
    if [ -n "$EXTERNAL" ]; then
        cargo build --release --target "$TARGET" --manifest-path "$EXTERNAL/Cargo.toml" --config profile.release.codegen-units=16
    else
        cargo build --release --target "$TARGET" "${PKGS[@]}"
    fi
else
    # Debian's rustc-web route: install (after refreshing the package lists) and check the version.
    "$ROOT/scripts/install-deps.sh" wasm
    # rustup's rustc ships rust-lld and wasm-component-ld; Debian's does not.
    LLD_DIR="$(rustup run stable rustc --print sysroot 2>/dev/null || rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin"
    echo "build-plugins: using Debian rustc ($(/usr/bin/rustc -V)) with -Z build-std" >&2
    if [ -n "$EXTERNAL" ]; then
        # This workspace's release profile names codegen-units = 16, Cargo's default; Cargo tells
        # a named value from a default one when it hashes a build, so without this an outside
        # crate would build std and every shared dependency again (about 6 minutes here) instead
        # of reusing the first-party plugins' builds in the same target directory.
        WHAT=(--manifest-path "$EXTERNAL/Cargo.toml" --config profile.release.codegen-units=16)
    else
        WHAT=("${PKGS[@]}")
    fi
    PATH="/usr/bin:$PATH:$LLD_DIR" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
    RUSTFLAGS="-L /usr/lib/wasm32-wasi" \
        /usr/bin/cargo build --release --target "$TARGET" -Z build-std=std,panic_abort "${WHAT[@]}"
fi

if [ -n "$EXTERNAL" ]; then
    pkg="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$EXTERNAL/Cargo.toml" | head -n1)"
    mkdir -p "$EXTERNAL/target/trellis"
    out="$EXTERNAL/target/trellis/$pkg.wasm"
    cp "$CARGO_TARGET_DIR/$TARGET/release/${pkg//-/_}.wasm" "$out.tmp"
    mv "$out.tmp" "$out"
    printf 'build-plugins: %s %d bytes\n' "$out" "$(stat -c %s "$out")" >&2
    echo "$out"
    exit 0
fi

# First-party components are signed with the development key (wasmsign2 format, embedded), so
# that an operator who trusts that key (docs/plugin-operators.md) can run them with
# TRELLIS_PLUGIN_SIGNATURES=require. The signer is a tiny native bin (wasmsign2 only) built in its
# own target directory, so it never waits for the service's build that `make test` runs beside.
DEV_KEY="$ROOT/keys/INSECURE-dev-plugin-signing.secret.pem"
SIGN_TARGET="${TRELLIS_SIGN_TARGET_DIR:-$ROOT/target/sign}"
signer=""
sign_first_party() {
    if [ -z "$signer" ]; then
        CARGO_TARGET_DIR="$SIGN_TARGET" cargo build --quiet -p trellis-plugin-sign
        signer="$SIGN_TARGET/debug/trellis-plugin-sign"
    fi
    "$signer" sign "$DEV_KEY" "$1" "$1.signed"
    mv "$1.signed" "$1"
}

mkdir -p "$OUT"
for dir in "${DIRS[@]}"; do
    pkg="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -n1)"
    artifact="$CARGO_TARGET_DIR/$TARGET/release/${pkg//-/_}.wasm"
    # Fixture names keep a "fixture-" prefix so they never collide with real plugins.
    case "$dir" in
        plugins/fixtures/*) name="fixture-$(basename "$dir")" ;;
        *) name="$(basename "$dir")" ;;
    esac
    cp "$artifact" "$OUT/$name.wasm.tmp"
    case "$dir" in
        plugins/fixtures/*) ;;
        *) sign_first_party "$OUT/$name.wasm.tmp" ;;
    esac
    mv "$OUT/$name.wasm.tmp" "$OUT/$name.wasm"
    printf 'build-plugins: %-28s %8d bytes\n' "target/plugins/$name.wasm" "$(stat -c %s "$OUT/$name.wasm")" >&2
done

# Building every plugin includes the Python and JavaScript ones (plugins-py/, plugins-js/).
if [ "$#" -eq 0 ]; then
    "$ROOT/scripts/build-polyglot-plugins.sh" "$OUT"
fi
