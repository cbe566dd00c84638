#!/usr/bin/env bash
# gpu-validate.sh: the shim on real PyTorch training, every allocator mode.
#
#   tools/gpu-validate.sh [--dry-run | --fake] [OUTDIR]
#
# On a GPU machine (CUDA, PyTorch and nvcc preinstalled; no network, no apt;
# maybe no meson, JSON library or criterion): builds only the shim, runs
# tools/gpu_validate/train.py under LD_PRELOAD with torchrun (world size 1,
# NCCL) once per mode -- native, expandable_segments:True,
# RECOMPSHIM_TENSORS=async, RECOMPSHIM_TENSORS=nocache -- plus one run forced
# to OOM, and leaves traces, PyTorch's own counters and logs in OUTDIR
# (default ./gpu-validate-out). The comparison runs where the project is
# built:  tools/gpu-validate-check.py OUTDIR  (PASS/FAIL table; oracles in
# docs/validation/README.md).
#
# --dry-run: the same steps here, against the test doubles, with megasim
# standing in for the PyTorch loop, then the check -- so CI keeps the script
# working without a GPU.
#
# --fake: the real PyTorch workload here, on the fake GPU: the pinned wheel
# (tools/fake_gpu/install-torch.sh, into build/torch-cache; exit 77 = SKIP when
# PyPI is out of reach, unless RECOMPSHIM_REQUIRE_TORCH=1) with the test
# doubles' CUDA libraries first on LD_LIBRARY_PATH (tests/doubles/fake_gpu),
# then the check. docs/validation/README.md says what this proves.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dry=0 fake=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
if [ "${1:-}" = "--fake" ]; then fake=1; shift; fi
local_build=$((dry || fake))
out="$(mkdir -p "${1:-$PWD/gpu-validate-out}" && cd "${1:-$PWD/gpu-validate-out}" && pwd)"
log() { printf 'gpu-validate: %s\n' "$*" | tee -a "$out/validate.log" >&2; }
: > "$out/validate.log"
cuda="${CUDA_HOME:-/usr/local/cuda}"

# ---- build the shim only ----
py="$(command -v python3)"
extra_inc=()
if [ ! -f "$cuda/include/nccl.h" ]; then
    inc="$("$py" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "include"))' 2>/dev/null || true)"
    [ -n "$inc" ] && [ -f "$inc/nccl.h" ] && extra_inc+=("-I$inc")
fi
if [ ! -d "$cuda/include/nvtx3" ]; then
    inc="$("$py" -c 'import nvidia.nvtx, os; print(os.path.join(list(nvidia.nvtx.__path__)[0], "include"))' 2>/dev/null || true)"
    [ -n "$inc" ] && extra_inc+=("-I$inc")
fi
bdir="$out/build-shim"
shim="$bdir/shim/librecompshim.so"
if [ "$local_build" = 1 ] && [ -n "${RS_BUILD_DIR:-}" ]; then
    # Inside `meson test`: the build directory is already built.
    bdir="$RS_BUILD_DIR"
    shim="$bdir/shim/librecompshim.so"
elif [ "$local_build" = 1 ]; then
    # Here the project builds as usual (doubles, megasim, analyzer).
    eval "$("$root/tools/bootstrap.sh")" || exit 2
    bdir="$root/build"
    [ -f "$bdir/build.ninja" ] || meson setup "$bdir" >/dev/null || exit 2
    ninja -C "$bdir" >>"$out/validate.log" 2>&1 || { log "build failed (see validate.log)"; exit 2; }
    shim="$bdir/shim/librecompshim.so"
elif command -v meson >/dev/null && command -v ninja >/dev/null; then
    CFLAGS="${extra_inc[*]:-}" meson setup "$bdir" -Dshim_only=true -Dcudahome="$cuda" \
        --buildtype=release >>"$out/validate.log" 2>&1 &&
        ninja -C "$bdir" shim/librecompshim.so >>"$out/validate.log" 2>&1 ||
        { log "meson build of the shim failed (see validate.log)"; exit 2; }
else
    log "no meson: building the shim with cc"
    mkdir -p "$bdir/shim"
    srcs=("$root"/shim/*.c "$root"/shim/*.S)
    [ -f "$cuda/include/nccl.h" ] || [ ${#extra_inc[@]} -gt 0 ] ||
        srcs=("${srcs[@]/$root\/shim\/hooks_nccl.c/}")
    cc -shared -fPIC -O2 -std=gnu11 -fvisibility=hidden -D_GNU_SOURCE \
        -DRS_SHIM_VERSION='"gpu-validate"' -I"$root/include" -I"$root/shim" \
        -isystem "$cuda/include" "${extra_inc[@]}" "${srcs[@]}" -o "$shim" \
        -ldl -lpthread -Wl,-z,nodelete >>"$out/validate.log" 2>&1 ||
        { log "cc build of the shim failed (see validate.log)"; exit 2; }
fi
log "shim: $shim"
fake_env=()
if [ "$fake" = 1 ]; then
    site="$("$root/tools/fake_gpu/install-torch.sh" "${RECOMPSHIM_TORCH_CACHE:-$root/build/torch-cache}")"
    rc=$?
    [ $rc = 0 ] || { log "no pinned PyTorch (install-torch.sh exit $rc)"; exit $rc; }
    fake_dir="$bdir/tests/doubles/fake_gpu"
    [ -f "$fake_dir/libcudart.so.13" ] || { log "fake GPU not built: $fake_dir"; exit 2; }
    fake_env=(LD_LIBRARY_PATH="$fake_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
              PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONWARNINGS=ignore::UserWarning
              # the mock NCCL maps this much per communicator through the
              # driver entry points, as NCCL's cuMem path does (nccl_mock.c)
              MOCK_NCCL_BUFFER_BYTES=$((64 << 20)))
    log "fake GPU: $fake_dir, PyTorch from $site"
fi
if [ "$dry" = 0 ]; then
    if ! env "${fake_env[@]}" "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
            >>"$out/validate.log" 2>&1; then
        log "no usable PyTorch with CUDA here ($py): run this on the GPU machine, or use --dry-run"
        exit 2
    fi
fi

# ---- the workload, once per mode ----
modes=(native expandable async nocache oom)
run_mode() {
    local mode="$1" env_extra=()
    case "$mode" in
        expandable) env_extra=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) ;;
        async) env_extra=(RECOMPSHIM_TENSORS=async) ;;
        nocache) env_extra=(RECOMPSHIM_TENSORS=nocache) ;;
    esac
    local tdir="$out/traces/$mode"
    rm -rf "$tdir" && mkdir -p "$tdir" && chmod 700 "$tdir"
    local cmd
    if [ "$dry" = 1 ]; then
        # megasim on one simulated 80 GiB GPU: a small Llama-3-like model,
        # 3 iterations, mlp recompute (replays on the backward thread), the
        # allocator's own counters as the oracle; 2 GiB forces the OOM.
        env_extra+=(MEGASIM_LIB_DIR="$bdir/tests/megasim" PYTHONPATH="$root/tools/megasim")
        cmd=("$py" -m megasim --sim-preset llama3-8b --num-layers 4 --seq-length 2048
             --micro-batch-size 1 --global-batch-size 2 --train-iters 3 --sim-world-size 1
             --recompute-granularity selective --recompute-modules mlp
             --profile --nvtx-ranges --profile-step-start 0 --profile-step-end 3
             --sim-nccl-buffers-mib 64 --sim-quiet --sim-counters-out "$out/counters-$mode.json")
        [ "$mode" = oom ] && cmd+=(--sim-capacity-gib 2)
    else
        cmd=("$py" -m torch.distributed.run --standalone --nproc-per-node 1
             "$root/tools/gpu_validate/train.py" --mode "$mode" --out "$out")
        # the fake GPU has no cuDNN (only load-only stubs): switch it off
        # explicitly rather than trust that nothing reaches it
        [ "$fake" = 1 ] && cmd+=(--no-cudnn)
    fi
    log "run $mode: ${env_extra[*]:-} ${cmd[*]}"
    env "${fake_env[@]}" "${env_extra[@]}" RECOMPSHIM_OUT="$tdir" LD_PRELOAD="${RS_SANITIZER_RUNTIME:+$RS_SANITIZER_RUNTIME }$shim" \
        timeout 300 "${cmd[@]}" >"$out/run-$mode.log" 2>&1
    local rc=$?
    echo "$rc" > "$out/rc-$mode"
    log "run $mode: exit $rc"
}
for m in "${modes[@]}"; do run_mode "$m"; done
missing=0
for m in "${modes[@]}"; do
    [ -f "$out/counters-$m.json" ] || { log "run $m left no counters-$m.json (see run-$m.log)"; missing=1; }
done

# ---- the check (here when dry or fake; on the build machine after a real run) ----
if [ "$fake" = 1 ]; then
    touch "$out/fake-gpu"
    "$py" "$root/tools/gpu-validate-check.py" --build-dir "$bdir" --markdown "$out/validation.md" "$out"
    exit $?
fi
if [ "$dry" = 1 ]; then
    touch "$out/dry-run"
    "$py" "$root/tools/gpu-validate-check.py" --build-dir "$bdir" --markdown "$out/validation.md" "$out"
    exit $?
fi
log "done: bring $out back and run tools/gpu-validate-check.py on it"
exit $missing
