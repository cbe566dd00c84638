#!/usr/bin/env bash
# run-main.sh: the README's main-job command. Bootstraps, builds into build/
# (if needed), runs a megasim job under the shim and prints recomp-analyze's
# report on its run directory.
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
# Usage: tools/run-main.sh [--keep] [MEGASIM/MEGATRON FLAGS...]
# Extra arguments go to megasim. The default job's layout (--sim-preset
# llama3-8b, PP=2, 4 ranks, distributed optimizer, global batch 8) applies only
# when no --sim-preset is given, and each default flag only when the same flag
# is not given: a preset's own layout wins unless a flag says otherwise. The
# banner is megasim's own description of the job that runs.
#
# Exit status: recomp-analyze's; 1 when the job failed before any rank
# completed an iteration (no analysable trace): the job's error is printed,
# each line prefixed with its rank; 2 bootstrap or build failure.
# Traces go to a fresh temporary directory, printed, and removed at the end
# unless --keep is given.
#
# --mcore (first argument): the real Megatron-Core job instead of megasim
# (tools/mcore_job/run.sh on the fake GPU, docs/validation/megatron-core.md):
# by default a dense Llama-like model on 2 ranks of 8 GiB fake devices
# (MOCK_CUDA_CAPACITY, unless set) whose baseline does not fit with the
# advisor's headroom; the flags given replace the defaults of the same name.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'USAGE'
usage: tools/run-main.sh [--mcore] [--keep] [MEGASIM/MEGATRON FLAGS...]
       tools/run-main.sh --help
  Build, run a megasim job under the shim, print recomp-analyze's report.
  Without flags: Llama-3 8B-like, 4 ranks (TP=1 PP=2 DP=2), 3 iterations.
  --mcore         (first) the real Megatron-Core job on the fake GPU instead
                  of megasim (docs/validation/megatron-core.md)
  --keep          keep the trace directory (default: removed at exit)
  -h, --help      this text
  Other flags go to megasim (Megatron spellings, --sim-* flags; see
  PYTHONPATH=tools/megasim python3 -m megasim --help). The default layout
  applies only without --sim-preset; a flag given replaces its default.
exit: recomp-analyze's status; 1 the job failed before any iteration (its
      error is printed, rank-prefixed) or megasim rejected the flags;
      2 bootstrap or build failure
USAGE
}
keep=0
mcore=0
if [ "${1:-}" = "--mcore" ]; then mcore=1; shift; fi
args=()
for a in "$@"; do
    case "$a" in
    --keep) keep=1 ;;
    -h|--help) usage; exit 0 ;;
    *) args+=("$a") ;;
    esac
done

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
builddir=$(cd "$builddir" && pwd)
shim="$builddir/shim/librecompshim.so"
libdir="$builddir/tests/megasim"
analyze="$builddir/analyzer/recomp-analyze"
for f in "$shim" "$libdir/libmegasim_cuda.so" "$analyze"; do
    [ -e "$f" ] || { echo "run-main: $f was not built (tests need libcriterion-dev)" >&2; exit 2; }
done

# The real Megatron-Core job (--mcore): run.sh into a temporary directory,
# then the same report as the default job's.
run_mcore() {
    default --num-layers 4
    default --hidden-size 1024
    default --ffn-hidden-size 2816
    default --num-attention-heads 16
    given --num-query-groups || flags+=(--group-query-attention --num-query-groups 4)
    default --seq-length 2048
    default --max-position-embeddings 2048
    default --micro-batch-size 2
    default --global-batch-size 4
    default --train-iters 3
    default --normalization RMSNorm
    given --swiglu || flags+=(--swiglu)
    given --bf16 || flags+=(--bf16)
    given --disable-bias-linear || flags+=(--disable-bias-linear)
    default --position-embedding-type rope
    given --untie-embeddings-and-output-weights || flags+=(--untie-embeddings-and-output-weights)
    given --use-distributed-optimizer || flags+=(--use-distributed-optimizer)
    default --attention-dropout 0
    default --hidden-dropout 0
    given --profile || flags+=(--profile)
    given --nvtx-ranges || flags+=(--nvtx-ranges)
    default --profile-step-start 0
    default --profile-step-end 3
    flags+=("${args[@]+"${args[@]}"}")
    local out  # mcore_out for the EXIT trap
    out=$(mktemp -d "${TMPDIR:-/tmp}/recomp-mcore.XXXXXX") || return 2
    mcore_out="$out"
    if [ $keep = 1 ]; then
        trap 'echo "== kept: $mcore_out"' EXIT
    else
        trap 'rm -rf "$mcore_out"' EXIT
    fi
    export MOCK_CUDA_CAPACITY="${MOCK_CUDA_CAPACITY:-8589934592}"
    echo "== real Megatron-Core (tools/mcore_job) under the shim, 2 ranks, fake GPU of $MOCK_CUDA_CAPACITY bytes"
    echo "== flags: ${flags[*]}"
    echo "== traces: $out ($([ $keep = 1 ] && echo "kept" || echo "removed at exit; --keep keeps it"))"
    RS_BUILD_DIR="$builddir" tools/mcore_job/run.sh "$out" "${flags[@]}"
    local rc=$?
    echo "== job exit status: $rc"
    [ $rc = 77 ] && return 77
    grep -h 'OutOfMemoryError' "$out/job.log" | head -2
    local run
    run=$(find "$out/traces" -mindepth 1 -maxdepth 1 -type d | head -1)
    if [ -z "$run" ]; then
        echo "run-main: no trace (see the job's log)" >&2
        tail -20 "$out/job.log" >&2
        return 1
    fi
    echo "== recomp-analyze $run"
    "$analyze" "$run"
}

given() {  # given FLAG: the user passed FLAG (or FLAG=VALUE)
    local a
    for a in "${args[@]+"${args[@]}"}"; do
        [ "$a" = "$1" ] || [ "${a%%=*}" = "$1" ] && return 0
    done
    return 1
}
flags=()
default() {  # default FLAG [VALUE]: add unless the user gave FLAG
    given "$1" || flags+=("$@")
}
if [ $mcore = 1 ]; then
    run_mcore
    exit $?
fi
if ! given --sim-preset; then
    flags+=(--sim-preset llama3-8b)
    default --pipeline-model-parallel-size 2
    default --sim-world-size 4
    default --use-distributed-optimizer
    default --global-batch-size 8
fi
default --train-iters 3
default --profile
default --nvtx-ranges
default --profile-step-start 0
default --profile-step-end 3
flags+=("${args[@]+"${args[@]}"}")

export MEGASIM_LIB_DIR="$libdir" PYTHONPATH="$PWD/tools/megasim"
if ! what=$(python3 -m megasim.describe "${flags[@]}" 2>&1); then
    echo "run-main: megasim rejects the flags: $what" >&2
    exit 1
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/recomp-main.XXXXXX") || exit 2
chmod 700 "$out"
if [ $keep = 1 ]; then
    trap 'echo "== kept: $out"' EXIT
else
    trap 'rm -rf "$out"' EXIT
fi
echo "== megasim under the shim: $what"
echo "== flags: ${flags[*]}"
echo "== traces: $out ($([ $keep = 1 ] && echo "kept" || echo "removed at exit; --keep keeps it"))"
MEGASIM_RANK_PREFIX=1 LD_PRELOAD="$shim" RECOMPSHIM_OUT="$out" \
    python3 -m megasim "${flags[@]}" --sim-quiet 2>"$out/job.stderr"
rc=$?
echo "== job exit status: $rc"
grep -h 'torch.OutOfMemoryError' "$out/job.stderr"
run=$(find "$out" -mindepth 1 -maxdepth 1 -type d | head -1)
iters=0
if [ -n "$run" ]; then
    iters=$("$analyze" --json --no-advice "$run" 2>/dev/null | python3 -c '
import json, sys
try:
    print(sum(len(r.get("iterations") or []) for r in json.load(sys.stdin)["ranks"]))
except Exception:
    print(0)')
fi
if [ "$iters" = 0 ]; then
    echo "run-main: the job failed before any rank completed an iteration (nothing to analyse); its error:" >&2
    # each distinct exception line once, with the ranks that raised it
    python3 - "$out/job.stderr" >&2 <<'PY' || tail -20 "$out/job.stderr" >&2
import re, sys
pat = re.compile(r"^\[rank (\d+)\]: ([A-Za-z_][\w.]*(Error|Exception|Interrupt)\b.*)$")
seen = {}
for line in open(sys.argv[1], errors="replace"):
    m = pat.match(line.rstrip("\n"))
    if m:
        seen.setdefault(m.group(2), []).append(int(m.group(1)))
if not seen:
    sys.exit(1)
def spans(rs):
    out = []
    for r in rs:
        if out and out[-1][1] == r - 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ", ".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in out)
for msg, ranks in sorted(seen.items(), key=lambda kv: min(kv[1])):
    ranks = sorted(set(ranks))
    more = " (also rank%s %s)" % ("s" if len(ranks) > 2 else "", spans(ranks[1:])) \
        if len(ranks) > 1 else ""
    print("[rank %d]: %s%s" % (ranks[0], msg, more))
PY
    exit 1
fi
echo "== recomp-analyze $run"
"$analyze" "$run"
