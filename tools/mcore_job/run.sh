#!/usr/bin/env bash
# run.sh OUTDIR [MEGATRON FLAGS...]: the real Megatron-Core job
# (tools/mcore_job/driver.py) under the shim on the fake GPU.
#
# Installs what it needs (tools/mcore_job/requirements.txt into
# $RECOMPSHIM_MCORE_CACHE, default build/mcore-cache; reused when present),
# puts the fake GPU's libraries (build/tests/doubles/fake_gpu) first on
# LD_LIBRARY_PATH, runs the driver under torchrun with LD_PRELOAD=the shim and
# leaves:
#   OUTDIR/traces/<run>/      the shim's run directory (recomp-analyze input)
#   OUTDIR/counters-rank<R>.json   PyTorch's own counters per rank (driver.py)
#   OUTDIR/job.log            the job's stdout and stderr
#   OUTDIR/exit-status        torchrun's exit status
# Ranks: --nproc-per-node N (default 2, this script's own flag, first).
# MOCK_CUDA_CAPACITY / MOCK_CUDA_DEVICES pass through to the fake GPU.
#
# Exit status: the job's (0, or 1 when a rank failed: each rank's own status
# is in its counters file, 3 = OutOfMemoryError); 77 SKIP when PyPI or
# CPython 3.12 is out of reach (a failure with RECOMPSHIM_REQUIRE_TORCH=1);
# 2 usage (flags the driver does not support, refused by name before
# torchrun starts), build or install problems.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: run.sh OUTDIR [--nproc-per-node N] [MEGATRON FLAGS...]}"
shift
nproc=2
if [ "${1:-}" = "--nproc-per-node" ]; then nproc="${2:?--nproc-per-node N}"; shift 2; fi
bdir="${RS_BUILD_DIR:-$root/build}"
shim="$bdir/shim/librecompshim.so"
fake="$bdir/tests/doubles/fake_gpu"
for f in "$shim" "$fake/libcudart.so.13" "$fake/libnccl.so.2"; do
    [ -e "$f" ] || { echo "mcore run: $f not built (meson setup build && ninja -C build)" >&2; exit 2; }
done
site="$("$root/tools/fake_gpu/install-torch.sh" "${RECOMPSHIM_MCORE_CACHE:-$bdir/mcore-cache}" \
        "$root/tools/mcore_job/requirements.txt")" || exit $?
py="${RECOMPSHIM_TORCH_PYTHON:-$("$root/tools/fake_gpu/find-python.sh" 3.12)}"
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 2
rm -rf "$out/traces" && mkdir -p "$out/traces" && chmod 700 "$out/traces"
rm -f "$out"/counters-rank*.json
export LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$site" PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}" PYTHONFAULTHANDLER=1
export TORCHINDUCTOR_CACHE_DIR="$out/.inductor" TRITON_CACHE_DIR="$out/.triton"
impl=(--transformer-impl local)
te=0 prev= backend=
for a in "$@"; do
    case "$a" in --transformer-impl|--transformer-impl=*) impl=() ;; esac
    case "$prev $a" in "--transformer-impl transformer_engine"|*" --transformer-impl=transformer_engine") te=1 ;; esac
    case "$a" in --attention-backend|--attention-backend=*) backend=given ;; esac
    prev="$a"
done
# Transformer Engine's spec (issue 16): TE 2.12.0 and its PyTorch extension,
# built once into build/te-cache (install-te.sh); its attention runs TE's
# unfused backend (--attention-backend unfused unless given: flash-attn is not
# installed, cuDNN is a load-only stub).
if [ $te = 1 ]; then
    te_cache="${RECOMPSHIM_TE_CACHE:-$bdir/te-cache}"
    te_site="$("$root/tools/mcore_job/install-te.sh" "$te_cache" "$site")" || exit $?
    # onnxscript/onnx, imported by transformer_engine.pytorch (te-import-requirements.txt)
    imp_site="$("$root/tools/fake_gpu/install-torch.sh" "$te_cache/imports" \
        "$root/tools/mcore_job/te-import-requirements.txt")" || exit $?
    export PYTHONPATH="$te_site:$imp_site:$site" MCORE_TE=1
    # TE's unfused attention: Megatron sets NVTE_{FLASH,FUSED,UNFUSED}_ATTN
    # from the config's attention_backend (and asserts they were not set)
    [ -n "$backend" ] || impl+=(--attention-backend unfused)
    # TE's loader opens cuDNN, NVRTC and cuRAND by path, from <LIB>_HOME, else
    # CUDA_HOME, else /usr/local/cuda (never LD_LIBRARY_PATH): point it at a
    # directory holding only the fake GPU's (fake_gpu/ also holds meson's
    # object directories, which its glob would pick).
    home="$out/.te-cuda-home"
    rm -rf "$home" && mkdir -p "$home/lib" || exit 2
    for l in libcudnn.so.9 libnvrtc.so.13 libcurand.so.10; do ln -s "$fake/$l" "$home/lib/$l"; done
    export CUDNN_HOME="$home" NVRTC_HOME="$home" CURAND_HOME="$home"
    # FP8 (--fp8-format): TE's fused norm with a Float8 output
    # (layernorm_linear.py apply_normalization) asks NVRTC for a runtime
    # kernel (common/util/rtc.cpp:
    # max_supported_sm_arch -> nvrtcGetNumSupportedArchs, a load-only stub of
    # the fake libnvrtc: "NVRTC Error: fake-gpu: not implemented" in the first
    # forward). TE's own switch selects its precompiled kernels instead; the
    # tensors allocated are the same (docs/validation/megatron-core.md, FP8).
    export NVTE_DISABLE_NVRTC=1
fi
"$py" "$root/tools/mcore_job/driver.py" --mcore-check-flags "${impl[@]}" "$@" || exit 2
port=$(( 20000 + $$ % 20000 ))
RECOMPSHIM_OUT="$out/traces" LD_PRELOAD="${RS_SANITIZER_RUNTIME:+$RS_SANITIZER_RUNTIME }$shim" \
    timeout "${RECOMPSHIM_MCORE_TIMEOUT:-600}" \
    "$py" -m torch.distributed.run --nnodes 1 --nproc-per-node "$nproc" \
        --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
        "$root/tools/mcore_job/driver.py" --mcore-out "$out" "${impl[@]}" "$@" >"$out/job.log" 2>&1
rc=$?
echo "$rc" >"$out/exit-status"
[ $rc = 0 ] || echo "mcore run: job exit status $rc (see $out/job.log)" >&2
exit $rc
