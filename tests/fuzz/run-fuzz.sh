#!/bin/sh
# run-fuzz.sh: build the trace-reader fuzz target with clang and run it.
#
# Usage: tests/fuzz/run-fuzz.sh [SECONDS] [WORKDIR]
#   SECONDS  how long libFuzzer runs (default 60)
#   WORKDIR  where the binary, the grown corpus and crash files go
#            (default /tmp/recomp-fuzz)
# meson's default compiler (gcc) has no -fsanitize=fuzzer, hence this
# script. It builds analyzer/read/trace_reader.c + tests/fuzz/fuzz_reader.c with
# -fsanitize=fuzzer,address,undefined, seeds from tests/fuzz/corpus (never
# written to) and exits non-zero when libFuzzer finds a crash; the input is
# then WORKDIR/crash-* (replay it: WORKDIR/fuzz_reader WORKDIR/crash-...).
set -eu
secs=${1:-60}
work=${2:-/tmp/recomp-fuzz}
root=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CLANG:-clang}
mkdir -p "$work/corpus"
"$cc" -g -O1 -std=gnu11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$root/analyzer/read" -I"$root/analyzer/model" \
    "$root/analyzer/read/trace_reader.c" "$root/tests/fuzz/fuzz_reader.c" \
    -o "$work/fuzz_reader"
cd "$work"
exec ./fuzz_reader -max_total_time="$secs" -max_len=16384 -print_final_stats=1 \
    "$work/corpus" "$root/tests/fuzz/corpus"
