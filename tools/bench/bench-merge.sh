#!/bin/sh
# bench-merge.sh [BUILD_DIR] [SUMMARY_RANKS] [TRACE_RANKS] [EVENTS] [NODES]:
# recomp-analyze summarize and merge (docs/performance.md, "Many nodes:
# summarize and merge"). No timing assertions: numbers for the docs.
#
# 1. The byte size of a summary: megasim's main job (4 ranks, the README's)
#    summarized.
# 2. merge of SUMMARY_RANKS (default 4096) synthetic rank summaries
#    (gen_summaries: copies of the main job's ranks renumbered into one job),
#    as 8 ranks per file (one file per 8-GPU node) and as one rank per file:
#    wall time and max RSS, text and --json.
# 3. TRACE_RANKS (default 256) generated traces of about EVENTS (default
#    100,000) events each (gen_trace, as bench-ranks.sh) in NODES (default 8)
#    run directories: recomp-analyze on all of them with --jobs 1 and with
#    --jobs of the online CPUs, then summarize per "node" and merge; the
#    outputs compared with the direct analysis.
set -eu
BUILD=${1:-build}
SRANKS=${2:-4096}
TRANKS=${3:-256}
EVENTS=${4:-100000}
NODES=${5:-8}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ANA="$BUILD/analyzer/recomp-analyze"
GEN="$BUILD/tools/bench/gen_trace"
GENS="$BUILD/tools/bench/gen_summaries"
CPUS=$(getconf _NPROCESSORS_ONLN)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rs-bench-merge-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
echo "cpus: $CPUS, load: $(cut -d' ' -f1-3 /proc/loadavg)"

# timed CMD...: "SECONDS MAX_RSS_KIB" of CMD (stdout to $TMP/out)
timed() {
    python3 -c 'import resource, subprocess, sys, time
t = time.monotonic()
with open(sys.argv[1], "wb") as f:
    rc = subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.DEVNULL).returncode
print("%.2f %d %d" % (time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc))' \
        "$TMP/out" "$@"
}

# 1. the main job under the shim, summarized
mkdir "$TMP/main"
PYTHONPATH="$ROOT/tools/megasim:$ROOT/tests" MEGASIM_LIB_DIR="$BUILD/tests/megasim" \
    LD_PRELOAD="$BUILD/shim/librecompshim.so" RECOMPSHIM_OUT="$TMP/main" \
    RECOMPSHIM_MEMINFO_MS=3600000 python3 -c 'import sys, scenarios, runpy
sys.argv = ["megasim"] + scenarios.MAIN + ["--sim-quiet"]
runpy.run_module("megasim", run_name="__main__")' >/dev/null 2>&1 || true
run=$(ls -d "$TMP"/main/*/)
"$ANA" summarize "$run" --out "$TMP/main.rssum"
size=$(stat -c %s "$TMP/main.rssum")
echo "summary of the main job (4 ranks): $size bytes, $((size / 4)) bytes per rank"

# 2. merge of SRANKS synthetic rank summaries
for per in 8 1; do
    rm -rf "$TMP/sums"
    mkdir "$TMP/sums"
    "$GENS" "$TMP/main.rssum" "$TMP/sums" "$SRANKS" "$per"
    files=$(ls "$TMP/sums" | wc -l)
    bytes=$(du -sb "$TMP/sums" | cut -f1)
    echo "$SRANKS ranks in $files summaries of $per rank(s): $((bytes / 1024)) KiB"
    for mode in text json; do
        flag=""
        [ "$mode" = json ] && flag=--json
        set -- $(timed "$ANA" merge $flag "$TMP/sums")
        echo "merge $mode ($files files): $1 s, max RSS $(($2 / 1024)) MiB, exit $3"
    done
done

# 3. TRANKS traces x EVENTS events in NODES run directories
per=$((TRANKS / NODES))
r=0
while [ "$r" -lt "$TRANKS" ]; do
    d="$TMP/job/node$((r / per))/run"
    mkdir -p "$d"
    "$GEN" "$d/rank$r.rstrace" "$EVENTS" 8 200 "$r" "$TRANKS" >/dev/null
    r=$((r + 1))
done
du -sk "$TMP/job" | awk -v n="$TRANKS" '{printf "traces: %d ranks, %.1f MiB\n", n, $1/1024}'
for j in 1 "$CPUS"; do
    set -- $(timed "$ANA" --jobs "$j" --json "$TMP"/job/node*/run)
    cp "$TMP/out" "$TMP/direct-$j.json"
    echo "direct --jobs $j --json: $1 s, max RSS $(($2 / 1024)) MiB"
done
cmp -s "$TMP/direct-1.json" "$TMP/direct-$CPUS.json" && echo "--jobs $CPUS identical to --jobs 1" ||
    echo "--jobs $CPUS DIFFERS from --jobs 1"
mkdir "$TMP/nsums"
max=0
n=0
for d in "$TMP"/job/node*/run; do
    set -- $(timed "$ANA" summarize --jobs "$CPUS" "$d" --out "$TMP/nsums/node$n.rssum")
    echo "summarize node$n ($per ranks): $1 s, max RSS $(($2 / 1024)) MiB"
    n=$((n + 1))
done
echo "summaries: $(du -sb "$TMP/nsums" | cut -f1) bytes for $TRANKS ranks"
set -- $(timed "$ANA" merge --json "$TMP/nsums")
echo "merge --json of $n summaries: $1 s, max RSS $(($2 / 1024)) MiB"
cmp -s "$TMP/out" "$TMP/direct-1.json" && echo "merge identical to the direct analysis" ||
    echo "merge DIFFERS from the direct analysis"
