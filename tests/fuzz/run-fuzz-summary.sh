#!/bin/sh
# run-fuzz-summary.sh: build the summary-reader fuzz target with clang and run it.
#
# Usage: tests/fuzz/run-fuzz-summary.sh [SECONDS] [WORKDIR]
#   SECONDS   how long libFuzzer runs (default 60)
#   WORKDIR   binary, grown corpus and crash files (default /tmp/recomp-fuzz-summary)
# Seeds come from tests/fuzz/corpus_summary (never written to): the inflated
# payloads of the summaries of the megasim scenarios nccl-failing and R04
# (recomp-analyze summarize). Exits non-zero when
# libFuzzer finds a crash; replay with WORKDIR/fuzz_summary FILE.
set -eu
secs=${1:-60}
work=${2:-/tmp/recomp-fuzz-summary}
root=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CLANG:-clang}
a=$root/analyzer
mkdir -p "$work/corpus"
# the reader and what its records free: read/, model/, attribute/, advise/
# (am_rank_free, adv_rank_part_free), report/summary.c
"$cc" -g -O1 -std=gnu11 -D_GNU_SOURCE -DFUZZ_TARGET -Wno-missing-field-initializers \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$a/read" -I"$a/model" -I"$a/attribute" -I"$a/advise" -I"$a/report" \
    "$a"/read/*.c "$a"/model/*.c "$a"/attribute/*.c "$a"/advise/*.c "$a/report/summary.c" \
    "$root/shim/jobid_rules.c" "$root/tests/fuzz/fuzz_summary.c" \
    -lyajl -lz -lpthread -o "$work/fuzz_summary"
cd "$work"
exec ./fuzz_summary -max_total_time="$secs" -max_len="${FUZZ_MAX_LEN:-65536}" \
    -print_final_stats=1 "$work/corpus" "$root/tests/fuzz/corpus_summary"
