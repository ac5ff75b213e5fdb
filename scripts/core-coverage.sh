#!/usr/bin/env bash
# How much of crates/core its unit tests run: line coverage of `cargo test -p trellis-core --lib`
# (the use-case tests over the in-memory fakes), with rustc's own instrumentation and the
# toolchain's llvm-tools. Prints the test count, then covered/total lines of core's production
# code (test modules, `*_tests.rs`, the fakes and `testing/` left out) and of every core file.
# COVERAGE_TARGET_DIR keeps the instrumented build apart from the normal one (default
# target/coverage), so measuring another commit reuses its dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=$(realpath -m "${COVERAGE_TARGET_DIR:-target/coverage}")
host=$(rustc -vV | sed -n 's/^host: //p')
bin="$(rustc --print sysroot)/lib/rustlib/$host/bin"
[ -x "$bin/llvm-cov" ] || rustup component add llvm-tools-preview
rm -rf "$TARGET/profiles"
mkdir -p "$TARGET/profiles"
export CARGO_TARGET_DIR="$TARGET" CARGO_INCREMENTAL=0 RUSTFLAGS="-C instrument-coverage"
export LLVM_PROFILE_FILE="$TARGET/profiles/core-%p-%m.profraw"
cargo test -p trellis-core --lib --quiet 2>&1 | grep -E '^test result' || { echo "core-coverage: the tests failed" >&2; exit 1; }
"$bin/llvm-profdata" merge -sparse "$TARGET"/profiles/*.profraw -o "$TARGET/core.profdata"
test_binary=$(cargo test -p trellis-core --lib --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "trellis_core" and message.get("executable"):
        print(message["executable"])')
"$bin/llvm-cov" export -summary-only -instr-profile="$TARGET/core.profdata" "$test_binary" | python3 -c '
import json, re, sys
files = json.load(sys.stdin)["data"][0]["files"]
test_code = re.compile(r"(_tests\.rs$|/tests\.rs$|/fake\.rs$|/testing/)")
rows = []
for f in files:
    name = f["filename"]
    at = name.find("crates/core/src/")
    if at < 0:
        continue
    lines = f["summary"]["lines"]
    rows.append((name[at + len("crates/core/src/"):], lines["covered"], lines["count"]))
production = [r for r in rows if not test_code.search("/" + r[0])]
covered, total = sum(r[1] for r in production), sum(r[2] for r in production)
print(f"core production lines run by its unit tests: {covered} of {total} ({100 * covered / max(total, 1):.1f} %)")
if "--files" in sys.argv:
    for name, c, t in sorted(production):
        print(f"  {100 * c / max(t, 1):5.1f} %  {c:5} / {t:5}  {name}")
' "$@"
