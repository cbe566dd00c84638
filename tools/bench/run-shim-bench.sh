#!/usr/bin/env bash
# run-shim-bench.sh: the shim's per-event cost, as ratios measured in one run.
#   tools/bench/run-shim-bench.sh [N] [THREADS]
# Builds the project (build/), compiles bench_shim_overhead.c against the mock
# runtime, runs it without and with LD_PRELOAD=librecompshim.so (3 rounds each,
# alternating; the best of each kept) and prints a Markdown table.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
eval "$("$root/tools/bootstrap.sh")"
b="$root/build"
[ -f "$b/build.ninja" ] || meson setup "$b" >/dev/null
ninja -C "$b" >/dev/null
n="${1:-1000000}"; threads="${2:-1}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cc -O2 -std=gnu11 -isystem "$CUDA_HOME/include" "$root/tools/bench/bench_shim_overhead.c" \
    -L"$b/tests/doubles" -l:libcudart.so.13 -Wl,-rpath,"$b/tests/doubles" -ldl -lpthread \
    -o "$work/bench"
declare -A base shim
best() { # name value array
    local -n arr=$1
    if [ -z "${arr[$2]:-}" ] || awk "BEGIN{exit !($3 < ${arr[$2]})}"; then arr[$2]=$3; fi
}
for round in 1 2 3; do
    while read -r name ns ops; do best base "$name" "$ns"; done < <("$work/bench" "$n" "$threads")
    mkdir -p "$work/out$round" && chmod 700 "$work/out$round"
    while read -r name ns ops; do best shim "$name" "$ns"; done < <(
        RECOMPSHIM_OUT="$work/out$round" LD_PRELOAD="$b/shim/librecompshim.so" \
            "$work/bench" "$n" "$threads")
done
size=$(du -sb "$work/out3" | cut -f1)
echo "| workload ($n pairs x $threads thread(s)) | without shim (ns/pair) | with shim (ns/pair) | ratio | added (ns/pair) |"
echo "|---|---|---|---|---|"
for k in "cudaMalloc+cudaFree" "cudaMallocAsync+cudaFreeAsync" "nvtxRangePushA+nvtxRangePop"; do
    awk -v k="$k" -v a="${base[$k]}" -v s="${shim[$k]}" \
        'BEGIN{printf "| %s | %.1f | %.1f | %.2f | %.1f |\n", k, a, s, s/a, s-a}'
done
echo
echo "trace bytes for the run: $size ($(awk -v s="$size" -v n="$n" -v t="$threads" 'BEGIN{printf "%.1f", s/(n*t*6)}') bytes per recorded event)"
