"""Transformer Engine stand-ins: TE's always-on C API ranges (NVTE_API_CALL:
one nvtxRangePush/Pop per nvte_* call, default domain) in TE's call order,
with TE's habit of allocating outputs and workspaces next to those ranges,
never inside them (docs/te-call-order.md has the order and its sources).

Pattern per TE PyTorch extension function (e.g. rmsnorm_fwd,
fused_attn_fwd): allocate outputs -> nvte_X (workspace-size query) ->
allocate workspace (+ aux outputs) -> nvte_X (launch) -> workspace freed on
return.
"""
from .cuda import Tensor, DEV_REF

NORM_WS = 16 * 1024            # normalization workspace (small pool)
ATTN_WS = 2 * 1024 * 1024      # cuDNN fused-attention workspace
CUBLAS_WS = 32 * 1024 * 1024 + 1024   # TE get_workspace(): one per device, kept

_ws = []
# TE >= 2.x: the PyTorch extension's gemm() calls nvte_cublas_gemm_v2 and
# grouped GEMMs go through nvte_multi_tensor_gemm (one nested
# nvte_cublas_gemm_v2 per GEMM); older releases: nvte_cublas_gemm and
# nvte_multi_stream_cublas_gemm (--sim-te-legacy).
NAMES = {"gemm": "nvte_cublas_gemm_v2", "grouped": "nvte_multi_tensor_gemm"}


def set_legacy(legacy):
    if legacy:
        NAMES.update(gemm="nvte_cublas_gemm", grouped="nvte_multi_stream_cublas_gemm")
FRAGMENT = [0.0, 12345]   # --sim-fragment: max MiB of the cast buffers, LCG state


def _cast_buffer():
    """fault --sim-fragment: a short-lived FP8 cast/transpose buffer of
    variable size (96 MiB .. max) allocated before a GEMM output and freed
    after it, leaving holes between long-lived activations (R09)."""
    mx = FRAGMENT[0]
    if not mx:
        return None
    FRAGMENT[1] = (FRAGMENT[1] * 1103515245 + 12345) & 0x7FFFFFFF
    lo = 96.0
    mib = lo + (FRAGMENT[1] % 10007) / 10007.0 * (mx - lo)
    return Tensor(int(mib * 1024 * 1024) // 512 * 512, "fp8_cast_buffer", "workspace")


class _NoRange:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


_NO = _NoRange()
PY_RANGES = [None]     # NVTE_NVTX_ENABLED, read once (TE: lru_cache)


class _Range:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        DEV_REF[0].push(self.name)

    def __exit__(self, *a):
        DEV_REF[0].pop()
        return False


def py_range(name):
    """TE's Python ranges (transformer_engine/pytorch/utils.py nvtx_range_push),
    only with NVTE_NVTX_ENABLED=1 ([TE] in docs/sources.md)."""
    if PY_RANGES[0] is None:
        import os
        PY_RANGES[0] = os.environ.get("NVTE_NVTX_ENABLED", "0") == "1"
    return _Range(name) if PY_RANGES[0] else _NO


def nvte(name):
    d = DEV_REF[0]
    d.push(name)
    d.pop()


def cublas_workspace():
    if not _ws:
        _ws.append(Tensor(CUBLAS_WS, "cublas_workspace", "workspace"))
    return _ws[0]


def norm_fwd(rms, out_bytes, name="ln_out"):
    fn = "nvte_rmsnorm_fwd" if rms else "nvte_layernorm_fwd"
    out = Tensor(out_bytes, name)
    nvte(fn)
    ws = Tensor(NORM_WS, "norm_ws", "workspace")
    nvte(fn)
    del ws
    return out


def norm_bwd(rms, dx_bytes):
    fn = "nvte_rmsnorm_bwd" if rms else "nvte_layernorm_bwd"
    dx = Tensor(dx_bytes, "dx", "grad")
    nvte(fn)
    ws = Tensor(NORM_WS, "norm_ws", "workspace")
    nvte(fn)
    del ws
    return dx


def gemm(out_bytes, name="gemm_out", kind="act"):
    cublas_workspace()
    cast = _cast_buffer() if kind == "act" else None
    out = Tensor(out_bytes, name, kind) if out_bytes else None
    del cast
    nvte(NAMES["gemm"])
    return out


def wgrad_gemm():
    """wgrad accumulated into main_grad (gradient_accumulation_fusion): no output."""
    nvte(NAMES["gemm"])


GROUPED_GEMMS = [1]    # local experts (one GEMM each)


def grouped_call():
    d = DEV_REF[0]
    d.push(NAMES["grouped"])
    if NAMES["grouped"] == "nvte_multi_tensor_gemm":
        for _ in range(GROUPED_GEMMS[0]):
            nvte("nvte_cublas_gemm_v2")
    d.pop()


def grouped_gemm(out_bytes, name="grouped_out"):
    cublas_workspace()
    out = Tensor(out_bytes, name) if out_bytes else None
    grouped_call()
    return out


def fused_rope(out_bytes, name="rope_out", backward=False):
    out = Tensor(out_bytes, name)
    nvte("nvte_fused_rope_backward" if backward else "nvte_fused_rope_forward")
    return out


def fused_attn_fwd(o_bytes, lse_bytes):
    """tex.fused_attn_fwd: O allocated, query call, workspace + softmax stats
    allocated, launch, workspace freed."""
    o = Tensor(o_bytes, "core_attn_out")
    nvte("nvte_flash_attn_fwd")
    ws = Tensor(ATTN_WS, "attn_ws", "workspace")
    lse = Tensor(lse_bytes, "softmax_stats")
    nvte("nvte_flash_attn_fwd")
    del ws
    return o, lse


def fused_attn_bwd(dq_bytes, dk_bytes, dv_bytes):
    dq = Tensor(dq_bytes, "dq", "grad")
    dk = Tensor(dk_bytes, "dk", "grad")
    dv = Tensor(dv_bytes, "dv", "grad")
    nvte("nvte_flash_attn_bwd")
    ws = Tensor(ATTN_WS, "attn_ws", "workspace")
    nvte("nvte_flash_attn_bwd")
    del ws
    return dq, dk, dv


def multi_tensor(name):
    nvte(name)
