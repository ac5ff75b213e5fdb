#!/usr/bin/env bash
# Incremental rebuild time of the `trellis` binary after a one-line change in an HTTP handler
# (issue 7's figure). Edits a message literal in the certificates handler module, rebuilds,
# reverts; RUNS times (default 5), prints each time and the median.
# Usage: scripts/rebuild-probe.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
FILE=crates/http/src/certificates.rs
PKG=trellis
[ -f "$FILE" ] || { FILE=host/src/api/certificates.rs; PKG=trellis-host; }   # before the crate split
cargo build -q -p "$PKG" --bin trellis
cp "$FILE" "$FILE.probe-backup"
trap 'mv "$FILE.probe-backup" "$FILE"' EXIT
times=()
for i in $(seq "$RUNS"); do
    # A real code change (a string the handler returns), not just a comment.
    sed -i "0,/\"pem\"/s//\"pem$i\"/" "$FILE"
    start=$(date +%s.%N)
    cargo build -q -p "$PKG" --bin trellis
    end=$(date +%s.%N)
    cp "$FILE.probe-backup" "$FILE"
    t=$(echo "$end - $start" | bc)
    times+=("$t")
    echo "run $i: ${t} s"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print "median:", a[int((NR+1)/2)], "s"}'
