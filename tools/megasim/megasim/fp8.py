"""FP8 memory of Transformer Engine's linears under --fp8-format/--fp8-recipe.

Derived from Transformer Engine v2.9 (module/linear.py, module/layernorm_linear.py,
module/base.py, quantization.py, tensor/float8_tensor.py, tensor/mxfp8_tensor.py,
tensor/float8_blockwise_tensor.py) on Hopper, where FP8 GEMMs are TN only, so
Float8 tensors keep a transposed copy for the backward's GEMMs. The derivation
is written out in docs/megasim.md, "FP8 (derivation)". All sizes are bytes.
"""
from .cuda import Tensor

FLOAT8 = ("delayed", "tensorwise")      # Float8Tensor (per-tensor scale)
BLOCK = 128                             # blockwise: 1x128 (activations), 128x128 (weights)
MX_BLOCK = 32                           # MXFP8_BLOCK_SCALING_SIZE


def _ru(x, m):
    return (x + m - 1) // m * m


def _cdiv(x, m):
    return (x + m - 1) // m


def part_bytes(recipe, M, K, columnwise, weight=False):
    """Bytes of the torch tensors of one usage (row-wise data, or the column-wise
    copy) of an M x K tensor quantized with `recipe`: [data, scale_inv, ...].

    Float8 (delayed, tensorwise): M*K bytes of data; the shared fp32 scale_inv
    is counted by `shared_bytes`. MXFP8 (tensor/mxfp8_tensor.py make_empty): M*K
    data plus uint8 scales of (ru(M,128), ru(K/32,4)) row-wise or
    (ru(M/32,4), ru(K,128)) column-wise. Blockwise (float8_blockwise_tensor.py
    get_scale_shape): M*K data plus fp32 scales, 1x128 blocks for activations
    ((ceil(K/128), ru(M,4)) row-wise, (ceil(M/128), ru(K,4)) column-wise) and
    128x128 blocks for weights ((ceil(M/128), ru(ceil(K/128),4)) row-wise,
    (ceil(K/128), ru(ceil(M/128),4)) column-wise)."""
    data = M * K
    if recipe in FLOAT8:
        return [data]
    if recipe == "mxfp8":
        if columnwise:
            return [data, _ru(M // MX_BLOCK, 4) * _ru(K, 128)]
        return [data, _ru(M, 128) * _ru(K // MX_BLOCK, 4)]
    if recipe == "blockwise":
        if weight:
            if columnwise:
                return [data, 4 * _cdiv(K, BLOCK) * _ru(_cdiv(M, BLOCK), 4)]
            return [data, 4 * _cdiv(M, BLOCK) * _ru(_cdiv(K, BLOCK), 4)]
        if columnwise:
            return [data, 4 * _cdiv(M, BLOCK) * _ru(K, 4)]
        return [data, 4 * _cdiv(K, BLOCK) * _ru(M, 4)]
    raise ValueError("megasim: --fp8-recipe %s is not modelled" % recipe)


def shared_bytes(recipe):
    """Float8Tensor's scale_inv: torch.empty(1, float32), one per tensor (4 bytes)."""
    return [4] if recipe in FLOAT8 else []


def state_bytes(recipe, history_len, num_gemms=1):
    """Per TE module, made at its first forward (base.py init_fp8_meta_tensors):
    delayed: DelayedScalingRecipeState per mode, scale (n,) and amax_history
    (history_len, n) fp32, n = 3*num_gemms forward and 2*num_gemms backward;
    tensorwise: each Float8CurrentScalingQuantizer (5 per GEMM) holds a scale and
    an amax, torch.empty(1, float32); MXFP8 and blockwise keep no state."""
    if recipe == "delayed":
        out = []
        for n in (3 * num_gemms, 2 * num_gemms):
            out += [4 * n, 4 * history_len * n]
        return out
    if recipe == "tensorwise":
        return [4] * (2 * 5 * num_gemms)
    return []


def keeps_rowwise_for_gather(recipe, gathered):
    """Float8 row-wise data is what TE all-gathers with SP (linear.py: 'All-gather
    is not supported with FP8 column-wise data'): a column-parallel linear under SP
    saves its local input row-wise; MXFP8 and blockwise save column-wise."""
    return gathered and recipe in FLOAT8


class Quantized:
    """One quantized tensor: its row-wise and column-wise parts and shared scale,
    each a torch tensor (allocator block) of its own."""

    def __init__(self, recipe, M, K, name, rowwise=True, columnwise=True, weight=False,
                 kind="act"):
        self.row = [Tensor(n, name + ".fp8", kind)
                    for n in part_bytes(recipe, M, K, False, weight)] if rowwise else []
        self.col = [Tensor(n, name + ".fp8_t", kind)
                    for n in part_bytes(recipe, M, K, True, weight)] if columnwise else []
        self.shared = [Tensor(n, name + ".scale_inv", kind) for n in shared_bytes(recipe)]

    def drop_rowwise(self):
        """update_usage(rowwise_usage=False): the row-wise data is freed."""
        self.row = []

    def tensors(self):
        return self.row + self.col + self.shared


class ModuleState:
    """What one TE linear module holds under FP8 across iterations: its FP8
    meta state and its cached weight workspace (`_fp8_workspaces["weight"]`:
    Megatron passes is_first_microbatch, so the quantized weight, row-wise and
    column-wise, is kept and refreshed in place on each first microbatch)."""

    def __init__(self):
        self.state = None
        self.weight = None

    def ensure(self, args, out_features, in_features, name):
        if self.state is not None:
            return
        self.ensure_state(args, name)
        self.weight = Quantized(args.fp8_recipe, out_features, in_features, name + ".weight",
                                weight=True, kind="param")

    def ensure_state(self, args, name, num_gemms=1):
        """The module's FP8 scaling state (state_bytes), made at its first
        forward under FP8 and kept. A linear has one GEMM; TE's
        DotProductAttention initialises its FP8 metadata for 3 GEMMs
        (dot_product_attention.py: prepare_forward_ctx(num_gemms=3) ->
        init_fp8_metadata) whenever FP8 autocast is on, also without FP8
        attention (--fp8-dot-product-attention): checked against Megatron-Core
        0.19.2 + TE 2.12.0 on the fake GPU, 4*(4*10 + 30) B per layer under
        tensorwise scaling (docs/validation/megatron-core.md, FP8)."""
        if self.state is None:
            self.state = [Tensor(n, name + ".fp8_meta", "param")
                          for n in state_bytes(args.fp8_recipe, args.fp8_amax_history_len,
                                               num_gemms)]


def weight_workspace_bytes(recipe, out_features, in_features):
    """Bytes of one linear's cached quantized weight (row-wise + column-wise + scale)."""
    return (sum(part_bytes(recipe, out_features, in_features, False, True))
            + sum(part_bytes(recipe, out_features, in_features, True, True))
            + sum(shared_bytes(recipe)))
