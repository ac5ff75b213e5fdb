#!/usr/bin/env bash
# Runs several commands at once, each with its output in its own log, and reports them one after
# another once all have ended: how long each took, and the whole output of any that failed
# (`SIDE_BY_SIDE_SHOW_ALL=1` prints every log). Exits non-zero if any failed.
# Used by `make test` (test tools, and checks that mostly wait) and scripts/test-tools.sh.
# usage: side-by-side.sh LOG_DIR NAME COMMAND [NAME COMMAND ...]   (each COMMAND runs in bash -c)
set -uo pipefail
[ "$#" -ge 3 ] && [ $(( ($# - 1) % 2 )) -eq 0 ] || {
    echo "usage: $0 LOG_DIR NAME COMMAND [NAME COMMAND ...]" >&2
    exit 2
}
LOGS=$1
shift
mkdir -p "$LOGS"
NAMES=()
declare -A NAME_OF STATUS TOOK
while [ "$#" -gt 0 ]; do
    name=$1 command=$2
    shift 2
    NAMES+=("$name")
    bash -c "$command" >"$LOGS/$name.log" 2>&1 &
    NAME_OF[$!]=$name
done
# Each as it ends, so its time is its own.
for _ in "${NAMES[@]}"; do
    wait -n -p ended
    rc=$?
    name=${NAME_OF[$ended]}
    TOOK[$name]=$SECONDS
    if [ "$rc" -eq 0 ]; then STATUS[$name]=passed; else STATUS[$name]=FAILED; fi
done
failed=()
for name in "${NAMES[@]}"; do
    echo "side-by-side: $name ${STATUS[$name]} after ${TOOK[$name]} s (log $LOGS/$name.log)" >&2
    if [ "${STATUS[$name]}" = FAILED ]; then
        failed+=("$name")
    fi
    if [ "${STATUS[$name]}" = FAILED ] || [ "${SIDE_BY_SIDE_SHOW_ALL:-0}" = 1 ]; then
        sed "s/^/  $name | /" "$LOGS/$name.log" >&2
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "side-by-side: failed: ${failed[*]}" >&2
    exit 1
fi
