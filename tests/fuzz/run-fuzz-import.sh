#!/bin/sh
# run-fuzz-import.sh: build an importer fuzz target with clang and run it.
#
# Usage: tests/fuzz/run-fuzz-import.sh kineto|snapshot [SECONDS] [WORKDIR]
#   kineto    torch.profiler/Kineto JSON importer (yajl, zlib) + analysis
#   snapshot  restricted unpickler + PyTorch snapshot importer + analysis
#   SECONDS   how long libFuzzer runs (default 60)
#   WORKDIR   binary, grown corpus and crash files (default /tmp/recomp-fuzz-import-TARGET)
# Seeds come from tests/fuzz/corpus_import/TARGET (never written to). Exits
# non-zero when libFuzzer finds a crash; replay with WORKDIR/fuzz_import_TARGET FILE.
set -eu
target=${1:?usage: run-fuzz-import.sh kineto|snapshot [SECONDS] [WORKDIR]}
secs=${2:-60}
work=${3:-/tmp/recomp-fuzz-import-$target}
root=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CLANG:-clang}
case $target in kineto|snapshot) ;; *) echo "unknown target $target" >&2; exit 1 ;; esac
a=$root/analyzer
mkdir -p "$work/corpus"
# the importers and everything below them: read/ (symbolize.c without libdw:
# frames stay module+offset), model/, attribute/, and the shim's launcher
# rules that the job identity shares
"$cc" -g -O1 -std=gnu11 -D_GNU_SOURCE -DFUZZ_TARGET -Wno-missing-field-initializers \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$a/read" -I"$a/model" -I"$a/attribute" \
    "$a"/read/*.c "$a"/model/*.c "$a"/attribute/*.c "$root/shim/jobid_rules.c" \
    "$root/tests/fuzz/fuzz_import_$target.c" \
    -lyajl -lz -lpthread -o "$work/fuzz_import_$target"
cd "$work"
# Small inputs run fast and still reach every event kind; a dictionary of
# the importer's keys (kineto.dict) lets mutations hit them.
maxlen=${FUZZ_MAX_LEN:-8192}
dict=
[ -f "$root/tests/fuzz/$target.dict" ] && dict=-dict="$root/tests/fuzz/$target.dict"
exec ./fuzz_import_$target -max_total_time="$secs" -max_len="$maxlen" $dict -print_final_stats=1 \
    "$work/corpus" "$root/tests/fuzz/corpus_import/$target"
