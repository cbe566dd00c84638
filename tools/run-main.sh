#!/usr/bin/env bash
# run-main.sh: the README's main-job command. Bootstraps, builds into build/
# (if needed), runs megasim's default job under the shim and prints
# recomp-analyze's report on the run directory.
#
# Default job (docs/megasim.md): a Llama-3 8B-like model on 4 simulated
# 80 GiB GPUs (TP=1, PP=2, DP=2, distributed optimizer), 4 microbatches of
# 8192 tokens, 3 iterations, no recompute, --profile --nvtx-ranges. Stage 0
# (ranks 0 and 1) fits the first iteration but runs out of memory in the second's
# forward, once the first optimizer step has created the Adam moments. The
# advisor recommends full block recompute of 3 layers (R:FULL[block,3], the
# cheapest setting whose predicted reserved peak fits every rank); selective
# mlp also fits.
#
# Extra arguments are passed to megasim (Megatron flags override the default).
# Reads nothing outside the repository; writes the traces to a fresh temp dir
# (kept; its path is printed).
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tools/bootstrap.sh)" || exit 2
builddir="${BUILDDIR:-build}"
if [ ! -f "$builddir/build.ninja" ]; then
    meson setup "$builddir" >/dev/null || { echo "run-main: meson setup failed" >&2; exit 2; }
fi
if ! log=$(ninja -C "$builddir" 2>&1); then
    printf '%s\n' "$log" | tail -30 >&2
    echo "run-main: build failed" >&2
    exit 2
fi
shim="$PWD/$builddir/shim/librecompshim.so"
libdir="$PWD/$builddir/tests/megasim"
for f in "$shim" "$libdir/libmegasim_cuda.so" "$builddir/tools/recomp-dump"; do
    [ -e "$f" ] || { echo "run-main: $f was not built (tests need libcriterion-dev)" >&2; exit 2; }
done

out=$(mktemp -d "${TMPDIR:-/tmp}/recomp-main.XXXXXX") || exit 2
chmod 700 "$out"
default=(--sim-preset llama3-8b --pipeline-model-parallel-size 2 --sim-world-size 4
         --use-distributed-optimizer --global-batch-size 8 --train-iters 3
         --profile --nvtx-ranges --profile-step-start 0 --profile-step-end 3)
if [ $# -gt 0 ]; then
    echo "== megasim: Llama-3 8B-like, 4 ranks (TP=1 PP=2 DP=2), 3 iterations, with: $*, under the shim"
else
    echo "== megasim: Llama-3 8B-like, 4 ranks (TP=1 PP=2 DP=2), 3 iterations, no recompute, under the shim"
fi
echo "== traces: $out"
MEGASIM_LIB_DIR="$libdir" PYTHONPATH="$PWD/tools/megasim" \
    LD_PRELOAD="$shim" RECOMPSHIM_OUT="$out" \
    python3 -m megasim "${default[@]}" "$@" --sim-quiet 2>"$out/job.stderr"
rc=$?
echo "== job exit status: $rc (stderr in $out/job.stderr)"
grep -h '^torch.OutOfMemoryError' "$out/job.stderr" | cut -c1-200
run=$(find "$out" -mindepth 1 -maxdepth 1 -type d | head -1)
[ -n "$run" ] || { echo "run-main: no run directory under $out" >&2; exit 1; }
analyze="$builddir/analyzer/recomp-analyze"
if [ -x "$analyze" ]; then
    echo "== recomp-analyze $run"
    "$analyze" "$run"
    exit $?
fi
echo "== recomp-analyze is not built yet: recomp-dump summaries instead"
for t in "$run"/*.rstrace; do
    "$builddir/tools/recomp-dump" "$t" | awk -v f="$(basename "$t")" '
        /^header rank=/ { print f ": " $0 }
        /^ALLOC / { n++; for (i = 1; i <= NF; i++) if ($i ~ /^size=/) { s = substr($i, 6); live += s; if (live > peak) peak = live } ; split($0, a, "ptr="); split(a[2], p, " "); sz[p[1]] = s }
        /^FREE / { split($0, a, "ptr="); split(a[2], p, " "); live -= sz[p[1]] }
        /^OOM / { print "  " $0 }
        /^NVTX_PUSH/ { r++ }
        END { printf "  allocs=%d nvtx_ranges=%d device-level peak=%.2f GiB\n", n, r, peak / 2^30 }'
done
