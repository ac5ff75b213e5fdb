#!/usr/bin/env bash
# Incremental rebuild time of the `trellis` binary after a one-line change in an HTTP handler
# (issue 7's figure). Edits a message literal in the certificates handler module, rebuilds,
# reverts; RUNS times (default 5), prints each time and the median.
# Usage: scripts/rebuild-probe.sh [RUNS]
#
# PROBE_FILE and PROBE_LITERAL edit another file instead (issue 22's figure, a change in the
# domain: PROBE_FILE=crates/core/src/issuance/mod.rs PROBE_LITERAL='unreadable certificate').
# PROBE_TREE measures another checkout (a `git worktree` of the commit to compare, with its own
# CARGO_TARGET_DIR).
set -euo pipefail
cd "${PROBE_TREE:-$(dirname "$0")/..}"
RUNS=${1:-5}
FILE=${PROBE_FILE:-crates/http/src/certificates.rs}
# The first occurrence of LITERAL (text inside a string literal) gets the run number appended.
LITERAL=${PROBE_LITERAL:-\"pem}
PKG=trellis
[ -f "$FILE" ] || { FILE=host/src/api/certificates.rs; PKG=trellis-host; }   # before the crate split
cargo build -q -p "$PKG" --bin trellis
cp "$FILE" "$FILE.probe-backup"
trap 'mv "$FILE.probe-backup" "$FILE"' EXIT
times=()
for i in $(seq "$RUNS"); do
    # A real code change (a string the handler returns), not just a comment.
    sed -i "0,/$LITERAL/s//&$i/" "$FILE"
    start=$(date +%s.%N)
    cargo build -q -p "$PKG" --bin trellis
    end=$(date +%s.%N)
    cp "$FILE.probe-backup" "$FILE"
    t=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}')
    times+=("$t")
    echo "run $i: ${t} s"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print "median:", a[int((NR+1)/2)], "s"}'
