#!/bin/sh
# bench-ranks.sh [BUILD_DIR] [RANKS] [EVENTS] [WORKERS]: recomp-analyze on a
# generated job of RANKS traces of about EVENTS events each (gen_trace), with
# --jobs 1 (in turn) and --jobs WORKERS (default: the online CPUs): wall
# time, peak RSS (incl. the file mappings) and whether the outputs are
# identical. No timing assertions: numbers for docs/performance.md
# (## Many ranks).
set -eu
BUILD=${1:-build}
RANKS=${2:-256}
EVENTS=${3:-100000}
WORKERS=${4:-$(getconf _NPROCESSORS_ONLN)}
GEN="$BUILD/tools/bench/gen_trace"
ANA="$BUILD/analyzer/recomp-analyze"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rs-bench-ranks-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/job"
r=0
while [ "$r" -lt "$RANKS" ]; do
    "$GEN" "$TMP/job/rank$r.rstrace" "$EVENTS" 8 200 "$r" "$RANKS" >/dev/null
    r=$((r + 1))
done
du -sk "$TMP/job" | awk -v n="$RANKS" '{printf "traces: %d ranks, %.1f MiB\n", n, $1/1024}'
echo "cpus: $(getconf _NPROCESSORS_ONLN), load: $(cut -d' ' -f1-3 /proc/loadavg)"
for j in 1 "$WORKERS"; do
    for mode in text json; do
        flag=""
        [ "$mode" = json ] && flag=--json
        python3 -c 'import resource, subprocess, sys, time
t = time.monotonic()
with open(sys.argv[1], "wb") as f:
    subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.DEVNULL)
print("%.2f %d" % (time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))' \
            "$TMP/out-$j-$mode" "$ANA" --jobs "$j" $flag "$TMP/job" >"$TMP/time"
        read -r secs kib <"$TMP/time"
        echo "--jobs $j $mode: $secs s, max RSS $((kib / 1024)) MiB"
    done
done
for mode in text json; do
    if cmp -s "$TMP/out-1-$mode" "$TMP/out-$WORKERS-$mode"; then
        echo "$mode: --jobs $WORKERS identical to --jobs 1"
    else
        echo "$mode: --jobs $WORKERS DIFFERS from --jobs 1"
    fi
done
