"""Hybrid Mamba/attention models (Nemotron-H-like): Megatron-Core's HybridStack
at megatron-core 0.19.2 (megatron/core/models/hybrid/hybrid_layer_allocation.py,
hybrid_layer_specs.py, hybrid_block.py; megatron/core/ssm/mamba_layer.py,
mamba_mixer.py) with the Mamba-2 training kernel of mamba_ssm
(mamba_ssm/ops/triton/ssd_combined.py, MambaSplitConv1dScanCombinedFn;
layernorm_gated.py). The byte derivation is in docs/megasim.md, "Hybrid Mamba
layers (derivation)".

Each symbol of --hybrid-layer-pattern is one layer of the stack: M a MambaLayer,
* a TransformerLayer with attention only, - a TransformerLayer with the MLP only
(MLPLayer), E a MoE-only TransformerLayer. Megatron-Core emits no NVTX range of
its own inside a MambaLayer (the mixer and the Triton kernels have none); the
class and method names below are Megatron-Core's and mamba_ssm's, so the Python
frames a trace records name them.
"""
from . import autograd as ag
from .cuda import Tensor

# hybrid_layer_allocation.Symbols at megatron-core 0.19.2
VALID_LAYERS = set("MG*D+-E")
KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}   # the ones megasim models
CHUNK_SIZE = 128            # MambaMixer(chunk_size=128): the hybrid spec passes no other


class PatternError(ValueError):
    pass


def parse_pattern(args):
    """--hybrid-layer-pattern (or the deprecated --hybrid-override-pattern) ->
    one kind per layer ("mamba", "attention", "mlp", "moe"). Megatron's checks
    with its messages (arguments.py validate_args, hybrid_layer_allocation.py
    _validate_pattern); symbols Megatron accepts but megasim does not model (G, D,
    +, the '|' pipeline segments and '/' MTP depths) are refused by name.
    Raises ValueError (Megatron's) or PatternError (megasim's)."""
    pat = args.hybrid_layer_pattern
    if args.hybrid_override_pattern is not None:
        if pat is not None:
            raise AssertionError(
                "--hybrid-override-pattern and --hybrid-layer-pattern cannot both be specified. "
                "--hybrid-override-pattern is deprecated; use --hybrid-layer-pattern instead.")
        pat = args.hybrid_override_pattern
    for ch in pat:
        if ch not in VALID_LAYERS | {"|", "/"}:
            raise ValueError("In main pattern, '%s' is not a valid layer symbol. Valid symbols "
                             "are: %s" % (ch, sorted(VALID_LAYERS | {"|"})))
    if "*" in pat and ("D" in pat or "+" in pat):
        raise ValueError("Not supported to have both Attention and MLA/DSA in one model")
    for ch in pat:
        if ch not in KINDS:
            raise PatternError("megasim: hybrid layer symbol '%s' is not modelled (only M, *, - "
                               "and E; no GDN, DSA, MLA, pipe segments or MTP)" % ch)
    return [KINDS[ch] for ch in pat]


def check_mamba(args):
    """MambaMixer.__init__'s assertions (megatron/core/ssm/mamba_mixer.py, 0.19.2),
    with its messages, before any CUDA call."""
    d = MambaDims(args)
    tp = args.tensor_model_parallel_size
    if args.mamba_num_heads is None and (2 * args.hidden_size) % args.mamba_head_dim:
        raise AssertionError("d_inner must be evenly divisible by headdim")
    if d.H % tp:
        raise AssertionError("nheads must be evenly divisble by tp_size")
    if d.G % tp:
        raise AssertionError("ngroups must be evenly divisible by tp_size")
    if d.H % d.G:
        raise AssertionError("nheads must be evenly divisible by ngroups")
    if args.fp8 and (2 * d.d_inner + 2 * d.G * d.N + d.H) % 16:
        raise AssertionError("For FP8, the innermost dimension of the Mamba layer input "
                             "projection output tensor must be a multiple of 16.")
    if args.context_parallel_size > 1:
        raise PatternError("megasim: Mamba layers under context parallelism are not modelled")


class MambaDims:
    """A Mamba-2 mixer's sizes (MambaMixer.__init__): expand 2, so d_inner =
    2*h unless --mamba-num-heads fixes H (then d_inner = H*P). P head dim, N
    state dim, G groups, H heads; the _local values are per TP rank."""

    def __init__(self, args):
        h, tp = args.hidden_size, args.tensor_model_parallel_size
        self.P, self.N, self.G = args.mamba_head_dim, args.mamba_state_dim, args.mamba_num_groups
        if args.mamba_num_heads is not None:
            self.H = args.mamba_num_heads
        else:
            self.H = 2 * h // self.P
        self.d_inner = self.H * self.P
        self.d_local = self.d_inner // tp
        self.G_local = self.G // tp
        self.H_local = self.H // tp
        self.conv_dim = self.d_local + 2 * self.G_local * self.N          # x B C
        self.in_proj_dim = 2 * self.d_local + 2 * self.G_local * self.N + self.H_local  # z x B C dt

    def params(self, h, tp):
        """Parameters of one MambaLayer on a TP rank: in_proj (+ its fused norm
        weight), conv1d weight (width 4) and bias, dt_bias, A_log, D (per head),
        the gated RMSNorm's weight, out_proj."""
        return (h * self.in_proj_dim + h + self.conv_dim * 4 + self.conv_dim
                + 3 * self.H_local + self.d_local + self.d_local * h)


class MambaBytes:
    """Per-tensor bytes of one Mamba layer for one microbatch on one rank
    (docs/megasim.md, "Hybrid Mamba layers (derivation)"). s is the full
    sequence inside the mixer (the column-parallel in_proj gathers it under
    sequence parallelism), b the micro-batch, beta the activation dtype's bytes."""

    def __init__(self, S, args):
        self.S, self.d = S, MambaDims(args)
        self.tok = S.s * S.b
        self.nchunks = -(-S.s // CHUNK_SIZE)

    @property
    def zxbcdt(self):
        return self.S.beta * self.tok * self.d.in_proj_dim

    @property
    def xbc_conv(self):
        return self.S.beta * self.tok * self.d.conv_dim

    @property
    def y(self):
        """mixer output before out_proj, and out_x (the scan's ungated output)"""
        return self.S.beta * self.tok * self.d.d_local

    @property
    def rstd(self):
        """the gated RMSNorm's fp32 1/rms per token and group"""
        return 4 * self.tok * self.d.G_local

    @property
    def dt_fp32(self):
        """dt after softplus and its cumulative sum (fp32, per chunk-padded position and head)"""
        return 4 * self.S.b * self.d.H_local * self.nchunks * CHUNK_SIZE

    @property
    def states(self):
        """the chunk states (fp32, batch x chunks x heads x headdim x dstate)"""
        return 4 * self.S.b * self.nchunks * self.d.H_local * self.d.P * self.d.N

    @property
    def cb(self):
        """C^T B per chunk and group (fp32, chunk x chunk)"""
        return 4 * self.S.b * self.nchunks * self.d.G_local * CHUNK_SIZE * CHUNK_SIZE


def saved_table(args, S):
    """Rows (name, bytes) one MambaLayer keeps for backward, without recompute."""
    B = MambaBytes(S, args)
    rows = [("in_proj norm input x", S.x), ("in_proj norm output", S.x),
            ("zxbcdt (b l d copy)", B.zxbcdt), ("scan out_x", B.y),
            ("gated RMSNorm input", B.y), ("gated RMSNorm rstd", B.rstd),
            ("out_proj input", B.y)]
    if S.mask:
        rows.append(("mamba BDA mask", S.mask))
    return rows


class MambaSplitConv1dScanCombinedFn:
    """mamba_ssm's fused Mamba-2 training function (Triton kernels, no NVTX):
    forward splits z, xBC, dt out of zxbcdt, runs the causal conv1d, then the
    chunked scan, and saves zxbcdt and out_x; backward recomputes the conv."""

    @staticmethod
    def forward(B, zxbcdt):
        xbc = Tensor(B.xbc_conv, "xBC_conv")
        dt = Tensor(B.dt_fp32, "dt_out")
        dacs = Tensor(B.dt_fp32, "dA_cumsum")
        cb = Tensor(B.cb, "CB")
        states = Tensor(B.states, "states")
        out_x = Tensor(B.y, "out_x")
        out = Tensor(B.y, "ssd_out")
        del xbc, dt, dacs, cb, states
        ag.record("MambaSplitConv1dScanCombinedFnBackward", [zxbcdt, out_x],
                  lambda node, g: MambaSplitConv1dScanCombinedFn.backward(B, node, g))
        return out

    @staticmethod
    def backward(B, node, g):
        dz = Tensor(B.zxbcdt, "dzxbcdt", "grad")
        xbc = Tensor(B.xbc_conv, "xBC_conv_recompute", "grad")
        dxbc = Tensor(B.xbc_conv, "dxBC", "grad")
        dt = Tensor(B.dt_fp32, "dt_out", "grad")
        dacs = Tensor(B.dt_fp32, "dA_cumsum", "grad")
        states = Tensor(B.states, "states", "grad")
        dstates = Tensor(B.states, "dstates", "grad")
        del xbc, dxbc, dt, dacs, states, dstates, g
        return dz


class RMSNorm:
    """mamba_ssm.ops.triton.layernorm_gated.RMSNorm (Megatron's ExtendedRMSNorm),
    called without z: LayerNormFn saves its input and the fp32 rstd."""

    def __init__(self, B):
        self.B = B

    def forward(self, y):
        out = Tensor(self.B.y, "mixer_norm_out")
        rstd = Tensor(self.B.rstd, "mixer_norm_rstd")
        ag.record("LayerNormFnBackward", [y, rstd], self.backward)
        return out

    def backward(self, node, g):
        dx = Tensor(self.B.y, "dmixer_norm", "grad")
        del g
        return dx


def _transpose(nbytes, name):
    """rearrange(...).contiguous(): a copy, nothing saved; its backward copies the grad back"""
    out = Tensor(nbytes, name)
    ag.record("CloneBackward", [], lambda node, g: _transpose_backward(nbytes, g))
    return out


def _transpose_backward(nbytes, g):
    d = Tensor(nbytes, "dtranspose", "grad")
    del g
    return d


class MambaMixer:
    """megatron/core/ssm/mamba_mixer.py (training, use_mamba_mem_eff_path, CP 1):
    in_proj (TELayerNormColumnParallelLinear: the layer's norm is fused into it),
    l b d -> b l d copy, the fused conv + scan, b l d -> l b d copy, the gated
    RMSNorm, out_proj (TERowParallelLinear)."""

    def __init__(self, args, S):
        from . import model
        self.S, self.B = S, MambaBytes(S, args)
        rms = args.normalization == "RMSNorm"
        self.in_proj = model.TELayerNormColumnParallelLinear(S, self.B.zxbcdt, rms, "in_proj", True)
        self.norm = RMSNorm(self.B)
        self.out_proj = model.TERowParallelLinear(S, self.B.y, S.x_full, S.x, "out_proj")

    def forward(self, hidden_states):
        zxbcdt_lbd = self.in_proj.forward(hidden_states)
        y = self._ssm_training(zxbcdt_lbd)
        del zxbcdt_lbd
        return self.out_proj.forward(y)

    def _ssm_training(self, zxbcdt_lbd):
        zxbcdt = _transpose(self.B.zxbcdt, "zxbcdt")
        out = MambaSplitConv1dScanCombinedFn.forward(self.B, zxbcdt)
        del zxbcdt
        y = _transpose(self.B.y, "y")
        del out
        normed = self.norm.forward(y)
        del y
        return normed


class MambaLayer:
    """megatron/core/ssm/mamba_layer.py: norm (IdentityOp in the hybrid spec),
    mixer, mamba_bda (bias-dropout-add with the residual). No NVTX ranges."""

    def __init__(self, args, layer_number):
        from .sizes import Shapes
        self.args, self.layer_number, self.kind = args, layer_number, "mamba"
        self.S = S = Shapes(args)
        self.mixer = MambaMixer(args, S)

    graphs = None
    aux = None

    def forward(self, hidden_states):
        if self.aux is not None:
            hidden_states = self.aux.forward(hidden_states)
        residual = hidden_states
        out = self.mixer.forward(hidden_states)
        new = Tensor(self.S.x, "mamba_bda_out")
        mask = Tensor(self.S.mask, "mamba_bda.dropout_mask") if self.S.mask else None
        ag.record("BiasDropoutAddBackward", [mask], self._bda_backward)
        del out, residual
        return new

    def _bda_backward(self, node, g):
        from .model import RESIDUAL
        RESIDUAL.append(g)
        if self.S.mask:
            return Tensor(self.S.x, "dbda", "grad")
        return g
