#!/usr/bin/env bash
# fuzz.sh: the fuzz tier. Builds each libFuzzer target with clang
# (-fsanitize=fuzzer,address,undefined) and runs it for SECONDS (default 60;
# longer on demand: tools/fuzz.sh 3600): the trace reader
# (tests/fuzz/run-fuzz.sh), the Kineto and snapshot importers
# (tests/fuzz/run-fuzz-import.sh) and the summary reader
# (tests/fuzz/run-fuzz-summary.sh), seeded from the corpora in tests/fuzz/.
# A target passes when libFuzzer finds no crash; a crash input is copied to
# tests/fuzz/crashes/TARGET/ (commit it into the target's corpus: the suite's
# test_fuzz_corpus and the next fuzz run replay it) and the target fails.
# Prints each target's executions per second, then "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
eval "$(RS_NEED_CLANG=1 tools/bootstrap.sh)" || exit 2
work="$(mktemp -d "${TMPDIR:-/tmp}/rs-fuzz-XXXXXX")"
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
for target in reader kineto snapshot summary; do
    w="$work/$target"
    mkdir -p "$w"
    if [ "$target" = reader ]; then
        tests/fuzz/run-fuzz.sh "$secs" "$w" >"$w/log" 2>&1
    elif [ "$target" = summary ]; then
        tests/fuzz/run-fuzz-summary.sh "$secs" "$w" >"$w/log" 2>&1
    else
        tests/fuzz/run-fuzz-import.sh "$target" "$secs" "$w" >"$w/log" 2>&1
    fi
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$w/log" | grep -o '[0-9]*$')
    rate=$(( ${runs:-0} / (secs > 0 ? secs : 1) ))
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1))
        echo "fuzz $target: ${runs:-0} executions in $secs s (~$rate/s), no crash"
    else
        fail=$((fail + 1))
        mkdir -p "tests/fuzz/crashes/$target"
        cp "$w"/crash-* "$w"/leak-* "$w"/timeout-* "$w"/oom-* "tests/fuzz/crashes/$target/" 2>/dev/null
        echo "fuzz $target: FAILED (exit $rc); inputs in tests/fuzz/crashes/$target/"
        tail -40 "$w/log"
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
