"""The simulated Megatron-Core GPT model: classes and methods named like
MCore's (so Python frames match), Megatron's NVTX ranges ([M] in docs/sources.md,
gated like --profile --nvtx-ranges), TE's nvte_* ranges (te.py), tensors
sized by sizes.Shapes, and recompute by executing its mechanism
(autograd.py). One instance per model chunk (virtual pipeline stage).
"""
from . import autograd as ag
from . import te
from . import fp8 as F8
from .cuda import Tensor, DEV_REF, GIB
from .sizes import Shapes, layer_kind, cp_comm_of
from .hybrid import MambaLayer

TL = "megatron.core.transformer.transformer_layer."
ATT = "megatron.core.transformer.attention.forward."
MLPN = "megatron.core.transformer.mlp.forward."
SWIGLU = "megatron.core.fusions.fused_bias_swiglu."
EMB = "megatron.core.models.common.embeddings.language_model_embedding.forward"


class _NV:
    enabled = False     # megatron.core.utils._nvtx_enabled
    drop = ()           # --sim-drop-nvtx-range: name suffixes never emitted


NV = _NV()


class nvtx_range:
    """megatron.core.utils.nvtx_range_push/pop: nothing unless enabled."""
    __slots__ = ("name", "on")

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.on = NV.enabled and not (NV.drop and self.name.endswith(NV.drop))
        if self.on:
            DEV_REF[0].push(self.name)

    def __exit__(self, *a):
        if self.on:
            DEV_REF[0].pop()
        return False


RESIDUAL = []   # grads stashed by BDA backward for the residual add


def _nccl(fn, nbytes, comm="ep"):
    DEV_REF[0].collective(fn, nbytes, comm, "bf16")


def _cp_p2p_comm(nbytes):
    """flash_attn_p2p_communicate: send this rank's chunk to the next CP rank,
    receive the previous one's (batched isend/irecv on the CP group)"""
    d = DEV_REF[0]
    r, cp = d.comms.get("cp", (-1, 1, 0))[2], max(d.comms.get("cp", (-1, 1, 0))[1], 1)
    d.collective("ncclSend", nbytes, "cp", "bf16", (r + 1) % cp)
    d.collective("ncclRecv", nbytes, "cp", "bf16", (r - 1) % cp)


def _cp_all_to_all(sizes, name, kind="act"):
    """flash_attn_a2a_communicate: per tensor a contiguous copy (kept until the
    call returns), the all-to-all output, and the reordered result (index_select)"""
    copies, outs = [], []
    for n in sizes:
        copies.append(Tensor(n, "cp_a2a_in", kind))
        raw = Tensor(n, "cp_a2a_out", kind)
        DEV_REF[0].collective("ncclAllToAll", n, "cp", "bf16")
        outs.append(Tensor(n, name, kind))
        del raw
    del copies
    return outs


def _cp_gather(nbytes, name):
    """gather_along_first_dim over CP (cp x nbytes), then the chunk reordering
    (torch.index_select: a second copy; the gathered one is freed)"""
    S_cp = DEV_REF[0].comms.get("cp", (-1, 1, 0))[1]
    ag_ = Tensor(S_cp * nbytes, name + "_raw")
    DEV_REF[0].collective("ncclAllGather", S_cp * nbytes, "cp", "bf16")
    out = Tensor(S_cp * nbytes, name)
    del ag_
    return out


# ---------------------------------------------------------------- TE modules
class TELayerNormColumnParallelLinear:
    def __init__(self, S, out_bytes, rms, name, owns_residual=False):
        self.S, self.out_bytes, self.rms, self.name = S, out_bytes, rms, name
        self.owns_residual = owns_residual   # first op of a sub-block: adds the residual grad
        self.fp8 = F8.ModuleState()

    def forward(self, x, ln_bytes=None, full_bytes=None):
        with te.py_range("TELayerNormColumnParallelLinear forward"):
            if self.S.args.fp8:
                return self._forward_fp8(x, ln_bytes or self.S.x, full_bytes or self.S.x_full)
            return self._forward(x, ln_bytes, full_bytes)

    def _forward_fp8(self, x, ln_bytes, full_bytes):
        """layernorm_linear.py under FP8: the norm writes its output quantized
        (with_quantized_norm); the GEMM reads the row-wise data; the column-wise
        copy is saved for wgrad, or, with SP and Float8, the local row-wise data
        (gathered again in backward). The bf16 norm input is saved as before."""
        S, A = self.S, self.S.args
        tok = S.s * S.b
        K, N = full_bytes // (S.beta * tok), self.out_bytes // (S.beta * tok)
        self.fp8.ensure(A, N, K, self.name)
        row_gather = F8.keeps_rowwise_for_gather(A.fp8_recipe, S.ts > 1)
        fn = "nvte_rmsnorm_fwd" if self.rms else "nvte_layernorm_fwd"
        with te.py_range("transformer_engine._LayerNormLinear.forward.norm"):
            ln_out = F8.Quantized(A.fp8_recipe, ln_bytes // (S.beta * K), K, self.name + ".ln_out",
                                  columnwise=not row_gather)
            te.nvte(fn)
            ws = Tensor(te.NORM_WS, "norm_ws", "workspace")
            te.nvte(fn)
            del ws
        total = (F8.Quantized(A.fp8_recipe, tok, K, "ag_input", columnwise=False)
                 if S.ts > 1 else None)
        with te.py_range("transformer_engine._LayerNormLinear.forward.gemm"):
            out = te.gemm(self.out_bytes, self.name + ".out")
        del total
        if not row_gather:
            ln_out.drop_rowwise()
        ag.record("_LayerNormLinearBackward", [x] + ln_out.tensors(),
                  lambda node, g: self.backward(node, g, ln_bytes, full_bytes))
        return out

    def _forward(self, x, ln_bytes, full_bytes):
        S = self.S
        ln_bytes = ln_bytes or S.x
        full_bytes = full_bytes or S.x_full
        with te.py_range("transformer_engine._LayerNormLinear.forward.norm"):
            ln_out = te.norm_fwd(self.rms, ln_bytes, self.name + ".ln_out")
        total = Tensor(full_bytes, "ag_input") if S.ts > 1 else None   # SP all-gather
        with te.py_range("transformer_engine._LayerNormLinear.forward.gemm"):
            out = te.gemm(self.out_bytes, self.name + ".out")
        del total
        ag.record("_LayerNormLinearBackward", [x, ln_out],
                  lambda node, g: self.backward(node, g, ln_bytes, full_bytes))
        return out

    def backward(self, node, g, ln_bytes, full_bytes):
        with te.py_range("_LayerNormLinear_backward"):
            return self._backward(node, g, ln_bytes, full_bytes)

    def _backward(self, node, g, ln_bytes, full_bytes):
        S = self.S
        total = Tensor(full_bytes, "ag_ln_out", "grad") if S.ts > 1 else None
        gq = _fp8_grad_output(S, self.out_bytes)
        with te.py_range("transformer_engine._LayerNormLinear.backward.dgrad_gemm"):
            dgrad = te.gemm(full_bytes, "dgrad", "grad")
        with te.py_range("transformer_engine._LayerNormLinear.backward.wgrad_gemm"):
            te.wgrad_gemm()
        del total, g, gq
        if S.ts > 1:
            d = Tensor(ln_bytes, "dgrad_rs", "grad")
            del dgrad
            dgrad = d
        with te.py_range("transformer_engine._LayerNormLinear.backward.norm"):
            dx = te.norm_bwd(self.rms, ln_bytes)
        del dgrad
        return _add_residual(dx, ln_bytes) if self.owns_residual else dx


class TEColumnParallelLinear:
    def __init__(self, S, out_bytes, in_local, in_full, name, grouped=False):
        self.S, self.out_bytes, self.in_local, self.in_full = S, out_bytes, in_local, in_full
        self.name, self.grouped = name, grouped
        self.fp8 = F8.ModuleState()

    def forward(self, x):
        cls = "TEColumnParallelGroupedLinear" if self.grouped else "TEColumnParallelLinear"
        with te.py_range(cls + " forward"):
            if self.S.args.fp8 and not self.grouped:
                return self._forward_fp8(x)
            gathered = self.in_full != self.in_local
            total = Tensor(self.in_full, "ag_input") if gathered else None
            with te.py_range("transformer_engine._Linear.forward.gemm") if not self.grouped else te._NO:
                out = (te.grouped_gemm if self.grouped else te.gemm)(self.out_bytes, self.name + ".out")
            del total
            ag.record("_LinearBackward", [x], self.backward)
            return out

    def backward(self, node, g):
        with te.py_range("_GroupedLinear_backward" if self.grouped else "_Linear_backward"):
            return self._backward(node, g)

    def _forward_fp8(self, x):
        """linear.py under FP8: the input is quantized (row-wise for the GEMM,
        column-wise for wgrad) and only the quantized input is saved, column-wise,
        or, with SP and Float8, the local row-wise data."""
        S, A = self.S, self.S.args
        tok = S.s * S.b
        K, N = self.in_full // (S.beta * tok), self.out_bytes // (S.beta * tok)
        self.fp8.ensure(A, N, K, self.name)
        gathered = self.in_full != self.in_local
        row_gather = F8.keeps_rowwise_for_gather(A.fp8_recipe, gathered)
        xq = F8.Quantized(A.fp8_recipe, self.in_local // (S.beta * K), K, self.name + ".input",
                          columnwise=not row_gather)
        total = (F8.Quantized(A.fp8_recipe, tok, K, "ag_input", columnwise=False)
                 if gathered else None)
        with te.py_range("transformer_engine._Linear.forward.gemm"):
            out = te.gemm(self.out_bytes, self.name + ".out")
        del total
        if not row_gather:
            xq.drop_rowwise()
        ag.record("_LinearBackward", xq.tensors(), self.backward)
        return out

    def _backward(self, node, g):
        gathered = self.in_full != self.in_local
        total = Tensor(self.in_full, "ag_input", "grad") if gathered else None
        gq = None if self.grouped else _fp8_grad_output(self.S, self.out_bytes)
        dgrad = (te.grouped_gemm if self.grouped else te.gemm)(self.in_full, "dgrad")
        if self.grouped:
            te.grouped_call()
        else:
            te.wgrad_gemm()
        del total, g, gq
        if gathered:
            d = Tensor(self.in_local, "dgrad_rs", "grad")
            del dgrad
            return d
        return dgrad


class TERowParallelLinear:
    def __init__(self, S, in_bytes, out_full, out_local, name, grouped=False):
        self.S, self.in_bytes, self.out_full, self.out_local = S, in_bytes, out_full, out_local
        self.name, self.grouped = name, grouped
        self.fp8 = F8.ModuleState()
        self.save_original_input = False     # Megatron's set_save_original_input

    def forward(self, x):
        cls = "TERowParallelGroupedLinear" if self.grouped else "TERowParallelLinear"
        with te.py_range(cls + " forward"):
            if self.S.args.fp8 and not self.grouped:
                return self._forward_fp8(x)
            g = te.grouped_gemm if self.grouped else te.gemm
            with te.py_range("transformer_engine._Linear.forward.gemm") if not self.grouped else te._NO:
                out = g(self.out_full, self.name + ".out")
            if self.out_local != self.out_full:        # SP reduce-scatter
                o = Tensor(self.out_local, self.name + ".out_rs")
                del out
                out = o
            ag.record("_LinearBackward", [x], self.backward)
            return out

    def backward(self, node, g):
        with te.py_range("_GroupedLinear_backward" if self.grouped else "_Linear_backward"):
            return self._backward(node, g)

    def _forward_fp8(self, x):
        """linear.py under FP8, row-parallel (the input is local): quantized
        row-wise and column-wise, the column-wise copy saved; with
        save_original_input only row-wise, and the bf16 input is saved instead."""
        S, A = self.S, self.S.args
        tok = S.s * S.b
        K, N = self.in_bytes // (S.beta * tok), self.out_full // (S.beta * tok)
        self.fp8.ensure(A, N, K, self.name)
        xq = F8.Quantized(A.fp8_recipe, tok, K, self.name + ".input",
                          columnwise=not self.save_original_input)
        with te.py_range("transformer_engine._Linear.forward.gemm"):
            out = te.gemm(self.out_full, self.name + ".out")
        if self.out_local != self.out_full:        # SP reduce-scatter
            o = Tensor(self.out_local, self.name + ".out_rs")
            del out
            out = o
        if self.save_original_input:
            del xq
            saved = [x]
        else:
            xq.drop_rowwise()
            saved = xq.tensors()
        ag.record("_LinearBackward", saved, self.backward)
        return out

    def _backward(self, node, g):
        gathered = self.out_local != self.out_full
        gfull = Tensor(self.out_full, "ag_grad", "grad") if gathered else None
        gq = None if self.grouped else _fp8_grad_output(self.S, self.out_full)
        dgrad = (te.grouped_gemm if self.grouped else te.gemm)(self.in_bytes, "dgrad")
        if self.grouped:
            te.grouped_call()
        else:
            te.wgrad_gemm()
        del gfull, g, gq
        return dgrad


def _fp8_grad_output(S, out_bytes):
    """linear.py backward under FP8: the (gathered) output gradient is quantized
    row-wise (dgrad) and column-wise (wgrad) and lives until both GEMMs ran."""
    if not S.args.fp8:
        return None
    tok = S.s * S.b
    return F8.Quantized(S.args.fp8_recipe, tok, out_bytes // (S.beta * tok), "grad_output",
                        kind="grad")


def _add_residual(dx, nbytes):
    res = RESIDUAL.pop() if RESIDUAL else None
    if res is None:
        return dx
    out = Tensor(nbytes, "dx_plus_residual", "grad")
    del dx, res
    return out


class TENorm:
    def __init__(self, S, rms, name, owns_residual=False):
        self.S, self.rms, self.name = S, rms, name
        self.owns_residual = owns_residual

    def forward(self, x):
        out = te.norm_fwd(self.rms, self.S.x, self.name)
        ag.record("TENormBackward", [x], self.backward)
        return out

    def backward(self, node, g):
        dx = te.norm_bwd(self.rms, self.S.x)
        del g
        return _add_residual(dx, self.S.x) if self.owns_residual else dx


# ------------------------------------------------------------------ attention
class TEDotProductAttention:
    def __init__(self, S, q_bytes, k_bytes, v_bytes):
        self.S, self.qb, self.kb, self.vb = S, q_bytes, k_bytes, v_bytes
        self.fp8 = F8.ModuleState()

    def forward(self, q, k, v):
        S = self.S
        with te.py_range("TEDotProductAttention forward"):
            if S.args.fp8:       # FP8 metadata for 3 GEMMs (fp8.ModuleState.ensure_state)
                self.fp8.ensure_state(S.args, "core_attention", num_gemms=3)
            if S.unfused:
                return self._unfused(q, k, v)
            if S.cp > 1:
                return self._cp_forward(q, k, v)
            v_c = Tensor(self.vb, "v_contiguous") if v.name == "qkv_view" else v
            with te.py_range("transformer_engine.FusedAttnFunc.forward"):
                o, lse = te.fused_attn_fwd(S.o, S.lse)
            ag.record("FusedAttnFuncBackward", [q, k, v_c, o, lse], self.backward)
            return o

    # -- context parallelism (TE 2.9 context_parallel.py, bf16, causal, sbhd;
    # docs/megasim.md "Context parallelism") --
    def _cp_forward(self, q, k, v):
        kind = self.S.cp_comm
        if kind not in ("p2p", "a2a", "all_gather"):
            raise ValueError("Unsupported communication type: %s!" % kind)
        return getattr(self, "_cp_" + kind)(q, k, v)

    def _cp_step(self, i):
        """share of this rank's query chunk a ring step attends with (causal
        load balancing: half the queries for steps past the rank)"""
        return 1.0 if (i == 0 or i <= self.S.cp_rank) else 0.5

    def _cp_p2p(self, q, k, v):
        S = self.S
        with te.py_range("transformer_engine.AttnFuncWithCPAndKVP2P.forward"):
            bufs = [Tensor(2 * S.kv, "cp_kv_chunk")]           # torch.cat((k, v))
            steps = []
            for i in range(S.cp):
                if i < S.cp - 1:
                    bufs.append(Tensor(2 * S.kv, "cp_kv_chunk"))   # the next KV chunk
                    _cp_p2p_comm(2 * S.kv)
                f = self._cp_step(i)
                steps.append(te.fused_attn_fwd(int(S.o * f), int(S.lse * f)))
            lse = Tensor(S.lse, "softmax_lse")                 # clone of step 0's
            out = Tensor(S.o, "core_attn_out")                 # out correction
            kv = bufs[-1]
            del bufs, steps
        ag.record("AttnFuncWithCPAndKVP2PBackward", [q, kv, out, lse], self._cp_p2p_backward)
        return out

    def _cp_p2p_backward(self, node, g):
        S = self.S
        with te.py_range("transformer_engine.AttnFuncWithCPAndKVP2P.backward"):
            dq = Tensor(S.q, "dq", "grad")                     # dq_buffer
            bufs = [Tensor(4 * S.kv, "cp_kv_dkv_chunk", "grad") for _ in range(2)]
            for i in range(S.cp):
                if i < S.cp - 1:
                    _cp_p2p_comm(2 * S.kv)                     # KV to the next step
                if i > 0:
                    _cp_p2p_comm(2 * S.kv)                     # dKV of the last step
                f = self._cp_step(i)
                kvf = 0.5 if (0 < i <= S.cp_rank) else 1.0
                parts = te.fused_attn_bwd(int(S.q * f), int(S.kv * kvf), int(S.kv * kvf))
                del parts
            dkv = bufs[S.cp % 2]                               # dk, dv: views of it
            del bufs, g
        return (dq, dkv, None)

    def _cp_a2a(self, q, k, v):
        S = self.S
        with te.py_range("transformer_engine.AttnFuncWithCPAndQKVOA2A.forward"):
            qkv = _cp_all_to_all([S.q, S.kv, S.kv], "qkv_a2a")
            o, lse = te.fused_attn_fwd(S.o, S.lse)            # out_part
            out = _cp_all_to_all([S.o], "core_attn_out")[0]
        ag.record("AttnFuncWithCPAndQKVOA2ABackward", qkv + [o, lse], self._cp_a2a_backward)
        return out

    def _cp_a2a_backward(self, node, g):
        S = self.S
        with te.py_range("transformer_engine.AttnFuncWithCPAndQKVOA2A.backward"):
            dout = _cp_all_to_all([S.o], "dout_a2a")
            parts = te.fused_attn_bwd(S.q, S.kv, S.kv)
            del dout, g
            dq, dk, dv = _cp_all_to_all([S.q, S.kv, S.kv], "dqkv_a2a", "grad")
            del parts
        return (dq, dk, dv)

    def _cp_all_gather(self, q, k, v):
        S = self.S
        with te.py_range("transformer_engine.AttnFuncWithCPAndKVAllGather.forward"):
            v_c = Tensor(S.kv, "v_contiguous") if getattr(v, "name", "") == "qkv_view" else v
            gathered = [_cp_gather(S.kv, n) for n in ("k_ag", "v_ag")]
            out = Tensor(S.o, "core_attn_out")                 # torch.empty_like(q)
            steps = [te.fused_attn_fwd(S.o // 2, S.lse // 2) for _ in range(2)]
            del gathered
        saved = [q, k, v_c] + [t for st in steps for t in st]
        ag.record("AttnFuncWithCPAndKVAllGatherBackward", saved, self._cp_all_gather_backward)
        return out

    def _cp_all_gather_backward(self, node, g):
        S = self.S
        with te.py_range("transformer_engine.AttnFuncWithCPAndKVAllGather.backward"):
            gathered = [_cp_gather(S.kv, n) for n in ("k_ag", "v_ag")]
            dq = Tensor(S.q, "dq", "grad")
            dkv_ag = [Tensor(S.cp * S.kv, n, "grad") for n in ("dk_ag", "dv_ag")]
            for _ in range(2):
                parts = te.fused_attn_bwd(S.q // 2, S.cp * S.kv, S.cp * S.kv)
                del parts
            del gathered
            dk, dv = [Tensor(S.kv, n, "grad") for n in ("dk", "dv")]   # reduce-scatter
            for _ in range(2):
                DEV_REF[0].collective("ncclReduceScatter", S.cp * S.kv, "cp", "bf16")
            del dkv_ag, g
        return (dq, dk, dv)

    def _unfused(self, q, k, v):
        S = self.S
        v_c = Tensor(self.vb, "v_contiguous") if v.name == "qkv_view" else v
        k_rep = Tensor(S.kv_repeat, "k_repeat") if S.kv_repeat else None
        v_rep = Tensor(S.kv_repeat, "v_repeat") if S.kv_repeat else None
        scores = Tensor(S.probs, "attention_scores")
        probs = Tensor(S.probs, "attention_probs")
        if S.te:
            # TE's unfused backend (FusedScaleMaskSoftmax -> ScaledMaskedSoftmax):
            # one C API call after the softmax output is made (megatron-core
            # 0.19.2 + TE 2.12.0 on the fake GPU, docs/validation/megatron-core.md)
            te.nvte("nvte_scaled_masked_softmax_forward")
        del scores
        mask = Tensor(S.probs_mask, "attention_dropout_mask") if S.probs_mask else None
        dropped = Tensor(S.probs, "attention_probs_dropped") if S.probs_mask else None
        o = Tensor(S.o, "context")
        ag.record("UnfusedAttentionBackward", [q, k, v_c, k_rep, v_rep, probs, mask, dropped],
                  self.backward_unfused)
        return o

    def backward(self, node, g):
        with te.py_range("transformer_engine.FusedAttnFunc.backward"):
            dq, dk, dv = te.fused_attn_bwd(self.qb, self.kb, self.vb)
        del g
        return (dq, dk, dv)

    def backward_unfused(self, node, g):
        S = self.S
        dprobs = Tensor(S.probs, "dprobs", "grad")
        if S.te:
            te.nvte("nvte_scaled_softmax_backward")     # TE 2.12.0's softmax backward
        dscores = Tensor(S.probs, "dscores", "grad")
        del dprobs
        dq = Tensor(self.qb, "dq", "grad")
        dk = Tensor(self.kb, "dk", "grad")
        dv = Tensor(self.vb, "dv", "grad")
        del dscores, g
        return (dq, dk, dv)


class Attention:
    """megatron/core/transformer/attention.py (SelfAttention, TE spec)."""

    def __init__(self, args, S, recompute):
        self.args, self.S = args, S
        self.rms = args.normalization == "RMSNorm"
        self.checkpoint_core_attention = "core_attn" in recompute
        fused_ln = S.te
        self.linear_qkv = TELayerNormColumnParallelLinear(S, S.qkv_buf, self.rms, "linear_qkv", True) \
            if fused_ln else TEColumnParallelLinear(S, S.qkv_buf, S.x, S.x_full, "linear_qkv")
        self.core_attention = TEDotProductAttention(S, S.q, S.kv, S.kv)
        self.linear_proj = TERowParallelLinear(S, S.o, S.x_full, S.x, "linear_proj")
        # attention.py: under FP8 with a recipe other than delayed (TE >= 2.6), linear_proj
        # saves the bf16 core-attention output (kept by attention anyway), not an FP8 copy
        self.linear_proj.save_original_input = bool(args.fp8) and args.fp8_recipe != "delayed"
        self.rope = args.position_embedding_type == "rope"

    def _checkpointed_attention_forward(self, q, k, v):
        # attention.py _checkpointed_attention_forward: CheckpointFunction saves
        # query, key and value as they are, to the end of its backward. With
        # RoPE, query and key are tensors of their own and the value, a view
        # of the fused QKV output, pins that whole buffer (checked against
        # megatron-core 0.19.2 on the fake GPU: docs/megasim.md "Checked
        # against the real Megatron-Core"); a contiguous copy, where the
        # attention needs one, is made inside the region and replayed.
        # Without RoPE megasim's query and key stand for slices of that buffer
        # (views in Megatron-Core): they and a contiguous V are its bytes.
        if not self.rope and getattr(v, "name", "") == "qkv_view":
            v = Tensor(self.S.kv, "v_contiguous")

        def custom_forward(q, k, v):
            return self.core_attention.forward(q, k, v)
        return ag.checkpoint(custom_forward, False, q, k, v)

    def forward(self, hidden_states):
        S = self.S
        with nvtx_range(ATT + "qkv"):
            qkv = self.linear_qkv.forward(hidden_states)
        with nvtx_range(ATT + "adjust_key_value"):
            pass
        with nvtx_range(ATT + "rotary_pos_emb"):
            if self.rope:
                q = self.apply_rotary_pos_emb(S.q, "query")
                k = self.apply_rotary_pos_emb(S.kv, "key")
            else:
                q = Tensor(S.q, "query")
                k = Tensor(S.kv, "key")
            ag.record("RotaryBackward", [], self._rope_backward)
        v = _View(qkv, "qkv_view")
        with nvtx_range(ATT + "core_attention"):
            if self.checkpoint_core_attention:
                core_attn_out = self._checkpointed_attention_forward(q, k, v)
            else:
                core_attn_out = self.core_attention.forward(q, k, v)
        del q, k, v, qkv
        with nvtx_range(ATT + "linear_proj"):
            output = self.linear_proj.forward(core_attn_out)
        return output

    def apply_rotary_pos_emb(self, nbytes, name):
        if self.args.apply_rope_fusion:
            return te.fused_rope(nbytes, name)
        return Tensor(nbytes, name)

    def _rope_backward(self, node, g):
        S = self.S
        dq, dk, dv = g
        if self.rope and self.args.apply_rope_fusion:
            dq2 = te.fused_rope(S.q, "dq_rope", backward=True)
            dk2 = te.fused_rope(S.kv, "dk_rope", backward=True)
            del dq, dk
            dq, dk = dq2, dk2
        dqkv = Tensor(S.qkv_buf, "dqkv", "grad")
        del dq, dk, dv, g
        return dqkv


class _View(Tensor):
    """a view: no storage of its own, keeps its base alive"""
    __slots__ = ("base",)

    def __init__(self, base, name):
        self.base = base
        self.nbytes = 0
        self.ptr = 0
        self.name = name
        self.kind = "view"


class MLASelfAttention:
    """multi_latent_attention.py: no Megatron NVTX range inside
    `self_attention` (megatron-core 0.19.2's MLASelfAttention.forward pushes
    none); TE's nvte_* calls only. Checked against the real library
    (docs/megasim.md "Checked since")."""

    def __init__(self, args, S, recompute):
        self.args, self.S = args, S
        rms = args.normalization == "RMSNorm"
        self.rms = rms
        self.recompute_up_proj = "mla_up_proj" in recompute
        self.checkpoint_core_attention = "core_attn" in recompute
        s, b, ts = S.s, S.b, S.ts
        if S.rq:
            self.linear_q_down_proj = TEColumnParallelLinear(S, S.q_latent, S.x, S.x, "linear_q_down_proj")
            self.linear_q_up_proj = TELayerNormColumnParallelLinear(S, S.mla_q_proj_out, rms,
                                                                    "linear_q_up_proj")
        elif args.qk_layernorm:
            # megatron-core 0.19.2 (transformer/mla_qk_norm_config.py,
            # QKNormConfigResolver._resolve_mla_qk_layernorm): with qk_layernorm
            # and no q_lora_rank the q norm is fused into linear_q_proj, a
            # TELayerNormColumnParallelLinear over the hidden state (its norm
            # output saved for backward, s*b*h bytes)
            self.linear_q_proj = TELayerNormColumnParallelLinear(S, S.mla_q_proj_out, rms,
                                                                 "linear_q_proj")
        else:
            self.linear_q_proj = TEColumnParallelLinear(S, S.mla_q_proj_out, S.x, S.x_full,
                                                        "linear_q_proj")
        self.linear_kv_down_proj = TEColumnParallelLinear(S, S.kv_latent, S.x, S.x, "linear_kv_down_proj")
        self.linear_kv_up_proj = TELayerNormColumnParallelLinear(S, S.mla_kv_up_out, rms,
                                                                 "linear_kv_up_proj")
        self.core_attention = TEDotProductAttention(S, S.mla_q, S.mla_q, S.mla_v)
        self.linear_proj = TERowParallelLinear(S, S.o, S.x_full, S.x, "linear_proj")
        # attention.py: under FP8 with a recipe other than delayed (TE >= 2.6), linear_proj
        # saves the bf16 core-attention output (kept by attention anyway), not an FP8 copy
        self.linear_proj.save_original_input = bool(args.fp8) and args.fp8_recipe != "delayed"

    def qkv_up_proj_and_rope_apply(self, q_compressed, kv_compressed, k_pos_emb):
        """q (up-)projection, kv up-projection (kv LN fused), RoPE, and the
        concatenations into Q, K, V (multi_latent_attention.py)."""
        S = self.S
        if S.rq:
            q = self.linear_q_up_proj.forward(q_compressed, S.q_ln_out, S.q_ln_out * S.ts)
        else:
            q = self.linear_q_proj.forward(q_compressed)
        # kv_compressed is a slice of the down-projection's output (not
        # contiguous): TE's prepare_forward makes a contiguous copy, which the
        # norm saves for backward instead of the down-projection's output
        # (megatron-core 0.19.2 + TE 2.12.0, docs/validation/megatron-core.md)
        kv_in = Tensor(S.kv_ln_out, "kv_compressed_contiguous") \
            if isinstance(kv_compressed, _View) else kv_compressed
        kv = self.linear_kv_up_proj.forward(kv_in, S.kv_ln_out, S.kv_ln_out * S.ts)
        del kv_in
        q_pe, k_pe, rope_saved = self._rope()
        query = Tensor(S.mla_q, "query")
        key = Tensor(S.mla_q, "key")
        value = Tensor(S.mla_v, "value")
        del q_pe, k_pe, kv, q
        if rope_saved:
            ag.record("RoPEMulBackward", rope_saved, lambda node, g: g)
        del rope_saved
        ag.record("MLAUpProjRopeBackward", [], self._up_backward)
        return [query, key, value]

    def _rope(self):
        """RoPE on the q and k positional parts: (q_pos_emb, k_pos_emb, saved).
        Fused (MLA needs YaRN for it): Megatron's own Triton kernels
        (fusions/fused_mla_yarn_rope_apply.py), no TE call, nothing saved per
        layer. Unfused: apply_rotary_pos_emb (rope_utils.py
        _apply_rotary_pos_emb_bshd) per call makes cos and sin of the
        frequencies ([s, 1, 1, dr] in the activation dtype), which its
        products save for backward: four per layer, s*dr*beta bytes each."""
        S = self.S
        q_pe = Tensor(S.beta * S.s * S.b * (S.a // S.t) * S.dr, "q_pos_emb")
        if self.args.apply_rope_fusion:
            return q_pe, Tensor(S.beta * S.s * S.b * S.dr, "k_pos_emb_rope"), []
        cs = S.beta * S.s * S.dr
        saved = [Tensor(cs, "rope_cos_q"), Tensor(cs, "rope_sin_q")]
        saved += [Tensor(cs, "rope_cos_k"), Tensor(cs, "rope_sin_k")]
        return q_pe, Tensor(S.beta * S.s * S.b * S.dr, "k_pos_emb_rope"), saved

    def _up_backward(self, node, g):
        S = self.S
        dq, dk, dv = g
        dkv = Tensor(S.mla_kv_up_out, "dkv_up", "grad")
        del dk, dv, g
        return (dq, dkv)

    def forward(self, hidden_states):
        S = self.S
        # q_lora_rank None: the q projection reads the LN output directly
        q_compressed = self.linear_q_down_proj.forward(hidden_states) if S.rq else hidden_states
        kv_latent = self.linear_kv_down_proj.forward(hidden_states)
        kv_compressed = _View(kv_latent, "kv_compressed")
        # k_pos_emb is gathered over the sequence-parallel region before the up-projection
        k_pos_emb = Tensor(S.beta * S.s * S.b * S.dr, "k_pos_emb") if S.ts > 1 \
            else _View(kv_latent, "k_pos_emb")
        if self.recompute_up_proj:
            self.qkv_up_checkpoint = ag.CheckpointWithoutOutput()
            q, k, v = self.qkv_up_checkpoint.checkpoint(self.qkv_up_proj_and_rope_apply,
                                                        q_compressed, kv_compressed, k_pos_emb)
        else:
            q, k, v = self.qkv_up_proj_and_rope_apply(q_compressed, kv_compressed, k_pos_emb)
        del q_compressed, kv_latent, kv_compressed, k_pos_emb
        if self.checkpoint_core_attention:
            core_attn_out = ag.checkpoint(lambda q, k, v: self.core_attention.forward(q, k, v),
                                          False, q, k, v)
        else:
            core_attn_out = self.core_attention.forward(q, k, v)
        if self.recompute_up_proj:
            self.qkv_up_checkpoint.discard_output_and_register_recompute(core_attn_out)
        del q, k, v
        ag.record("MLAQKVBackward", [], self._qkv_split_backward)
        output = self.linear_proj.forward(core_attn_out)
        return output

    def _qkv_split_backward(self, node, g):
        return g

    # backward of the q/kv projections: the two grads of the up-projection
    # are merged into the hidden-state grad by the linears' backward


# ------------------------------------------------------------------ MLP / MoE
class MLP:
    """megatron/core/transformer/mlp.py (dense; SharedExpertMLP subclasses it)."""

    def __init__(self, args, S, f, fused_ln, name="mlp"):
        self.args, self.S, self.f = args, S, f
        rms = args.normalization == "RMSNorm"
        if fused_ln:
            self.linear_fc1 = TELayerNormColumnParallelLinear(S, S.fc1_out(f), rms, name + ".linear_fc1",
                                                              True)
        else:
            self.linear_fc1 = TEColumnParallelLinear(S, S.fc1_out(f), S.x, S.x_full, name + ".linear_fc1")
        self.linear_fc2 = TERowParallelLinear(S, S.act_out(f), S.x_full, S.x, name + ".linear_fc2")
        self.swiglu = args.swiglu

    def forward(self, hidden_states):
        S = self.S
        with nvtx_range(MLPN + "linear_fc1"):
            fc1 = self.linear_fc1.forward(hidden_states)
        with nvtx_range(MLPN + "activation"):
            if self.swiglu:
                act = SwiGLUFunction.forward(self)
            else:
                act = Tensor(S.act_out(self.f), "gelu_out")
            ag.record("SwiGLUFunctionBackward" if self.swiglu else "GeLUFunctionBackward",
                      [fc1], self._act_backward)
        del fc1
        with nvtx_range(MLPN + "linear_fc2"):
            out = self.linear_fc2.forward(act)
        return out

    def _act_backward(self, node, g):
        if self.swiglu:
            d = SwiGLUFunction.backward(self, g)
        else:
            d = Tensor(self.S.fc1_out(self.f), "dgelu", "grad")
        del g
        return d


class SwiGLUFunction:
    """megatron/core/fusions/fused_bias_swiglu.py: the activation's autograd
    function, so that its forward and backward run as Python frames of these
    qualified names, as Megatron-Core's do (docs/python-frames.md)."""

    @staticmethod
    def forward(mlp):
        with nvtx_range(SWIGLU + "forward"):
            return Tensor(mlp.S.act_out(mlp.f), "swiglu_out")

    @staticmethod
    def backward(mlp, g):
        with nvtx_range(SWIGLU + "backward"):
            return Tensor(mlp.S.fc1_out(mlp.f), "dswiglu", "grad")


class SharedExpertMLP(MLP):
    pass


class TopKRouter:
    def __init__(self, S):
        self.S = S

    def forward(self, hidden_states):
        S = self.S
        logits = Tensor(S.router_logits, "router_logits")      # gating GEMM (fp32 out)
        probs = Tensor(S.router_logits, "router_probs")
        routing_map = Tensor(S.routing_map, "routing_map")
        ag.record("TopKRouterBackward", [hidden_states, logits, probs, routing_map], self.backward)
        return probs, routing_map

    def backward(self, node, g):
        d = Tensor(self.S.router_logits, "dlogits", "grad")
        del d
        return g


class MoEAlltoAllTokenDispatcher:
    def __init__(self, S):
        self.S = S

    def _all_to_all(self, combine):
        """token_dispatcher.py all_to_all(ep_group, x, output_splits,
        input_splits): balanced, one even split; with --sim-moe-imbalance the
        per-peer splits (dispatch: send input_splits, receive output_splits;
        combine and the dispatch's backward: the other way round)"""
        S = self.S
        if not S.args.sim_moe_imbalance:
            _nccl("ncclAllToAll", S.permuted)
            return
        row = S.beta * S.h
        send, recv = S.a2a_send, S.a2a_recv
        if combine:
            send, recv = recv, send
        DEV_REF[0].all_to_all_v([row * t for t in send], [row * t for t in recv], "ep", "bf16")

    def token_dispatch(self, hidden_states, probs):
        S = self.S
        permuted = Tensor(S.permuted, "permuted_tokens")
        permuted_probs = Tensor(4 * S.n * S.k, "permuted_probs")
        a2a = Tensor(S.beta * S.Nr // S.etp * S.h, "a2a_out")
        self._all_to_all(False)
        del permuted
        probs_a2a = Tensor(4 * S.Nr // S.etp, "a2a_probs")
        del permuted_probs
        if S.etp > 1:
            g = Tensor(S.expert_in, "etp_allgather")
            _nccl("ncclAllGather", S.expert_in, "tp")
            del a2a
            a2a = g
        expert_in = Tensor(S.expert_in, "sorted_tokens")       # sort_chunks_by_idxs
        expert_probs = Tensor(S.expert_probs, "sorted_probs")
        del a2a, probs_a2a
        ag.record("DispatchBackward", [], self._dispatch_backward)
        return expert_in, expert_probs

    def _dispatch_backward(self, node, g):
        S = self.S
        t = Tensor(S.beta * S.Nr // S.etp * S.h, "a2a_grad", "grad")
        self._all_to_all(True)
        del g
        d = Tensor(S.x, "dunpermute", "grad")
        del t
        return d

    def token_combine(self, expert_out):
        S = self.S
        unsorted = Tensor(S.beta * S.Nr * S.h, "unsorted")
        del expert_out
        if S.etp > 1:
            rs = Tensor(S.beta * S.Nr // S.etp * S.h, "etp_rs")
            _nccl("ncclReduceScatter", S.beta * S.Nr * S.h, "tp")
            del unsorted
            unsorted = rs
        back = Tensor(S.permuted, "a2a_back")
        self._all_to_all(True)
        del unsorted
        out = Tensor(S.x, "moe_out")
        del back
        ag.record("CombineBackward", [], self._combine_backward)
        return out

    def _combine_backward(self, node, g):
        S = self.S
        back = Tensor(S.permuted, "a2a_back_grad", "grad")
        self._all_to_all(False)
        del g
        d = Tensor(S.beta * S.Nr * S.h, "dexpert_out", "grad")
        del back
        return d


class TEGroupedMLP:
    """moe/experts.py TEGroupedMLP (no Megatron ranges)."""

    def __init__(self, args, S, recompute):
        self.S = S
        self.activation_recompute = "moe_act" in recompute
        self.linear_fc1 = TEColumnParallelLinear(S, S.expert_fc1_out, S.expert_in, S.expert_in,
                                                 "experts.linear_fc1", grouped=True)
        self.linear_fc2 = TERowParallelLinear(S, S.expert_act_out, S.beta * S.Nr * S.h,
                                              S.beta * S.Nr * S.h, "experts.linear_fc2", grouped=True)

    def bias_act_func(self, fc1_output, probs):
        """experts.py bias_act_func: with bias_activation_fusion (Megatron-LM's
        default) weighted_bias_swiglu_impl, whose autograd function saves its
        input and the probabilities and makes only its output; with
        --no-bias-swiglu-fusion the unfused GLU, whose ops autograd saves
        (_unfused_glu)."""
        if not self.S.args.bias_swiglu_fusion:
            return self._unfused_glu(fc1_output, probs)
        out = Tensor(self.S.expert_act_out, "moe_act_out")
        ag.record("WeightedSwiGLUFunctionBackward", [fc1_output, probs], self._act_backward)
        return out

    def _act_backward(self, node, g):
        d = Tensor(self.S.expert_fc1_out, "dmoe_act", "grad")
        del g
        return d

    def _unfused_glu(self, fc1_output, probs):
        """megatron-core 0.19.2 TEGroupedMLP.bias_act_func without fusion, a
        gated linear unit: glu(x) = silu(x_glu) * (x_linear + glu_linear_offset),
        then * permuted_probs, then .to(dtype). Each is one [tokens, ffn] tensor
        of the activation's dtype (the probabilities are the router's dtype,
        bf16 by default, so the product is bf16 and .to() makes no copy;
        measured on the real library: docs/validation/megatron-core.md). With
        grad, autograd keeps silu's output, the offset linear half and their
        product (saved by the two multiplications; silu saves its input, a view
        of fc1's output) and fc2 keeps the result: four [tokens, ffn] tensors
        per layer and microbatch. Under no_grad (moe_act's checkpoint) silu's
        output and the linear half go when glu returns, the product when the
        result is made."""
        n = self.S.expert_act_out
        silu_out = Tensor(n, "moe_glu_silu")
        linear = Tensor(n, "moe_glu_linear")
        glu_out = Tensor(n, "moe_glu_out")
        ag.record("GLUBackward", [fc1_output, silu_out, linear, glu_out, probs],
                  self._unfused_glu_backward)
        del silu_out, linear
        out = Tensor(n, "moe_act_out")
        del glu_out
        return out

    def _unfused_glu_backward(self, node, g):
        """the unfused GLU's backward, in the real run's order: mul(glu, probs)
        (the grad of the product, g*glu for the probabilities' grad, summed),
        mul(silu, linear) (both grads), silu's backward, chunk's cat into the
        [tokens, 2*ffn] input grad; each saved tensor freed when its op has run
        (node.saved: fc1 output, silu, linear, product, probs)."""
        n, sv = self.S.expert_act_out, node.saved
        d_glu = Tensor(n, "dmoe_glu", "grad")
        tmp = Tensor(n, "dmoe_probs_tmp", "grad")
        d_probs = Tensor(2 * self.S.Nr, "dmoe_probs", "grad")
        del tmp, g
        sv[3] = sv[4] = None                  # the product and the probabilities
        d_silu = Tensor(n, "dmoe_silu", "grad")
        d_linear = Tensor(n, "dmoe_linear", "grad")
        del d_glu
        sv[1] = sv[2] = None                  # silu's output and the linear half
        d_x_glu = Tensor(n, "dmoe_x_glu", "grad")
        del d_silu
        sv[0] = None                          # fc1's output (silu's saved input)
        d = Tensor(self.S.expert_fc1_out, "dmoe_act", "grad")
        del d_x_glu, d_linear, d_probs
        return d

    def forward(self, permuted_local_hidden_states, tokens_per_expert, permuted_probs):
        fc1_output = self.linear_fc1.forward(permuted_local_hidden_states)
        if self.activation_recompute:
            self.activation_checkpoint = ag.CheckpointWithoutOutput()
            intermediate = self.activation_checkpoint.checkpoint(self.bias_act_func, fc1_output,
                                                                 permuted_probs)
            output = self.linear_fc2.forward(intermediate)
            self.activation_checkpoint.discard_output_and_register_recompute(output)
        else:
            intermediate = self.bias_act_func(fc1_output, permuted_probs)
            output = self.linear_fc2.forward(intermediate)
        return output


class MoELayer:
    def __init__(self, args, S, recompute):
        self.args, self.S = args, S
        self.moe_layer_recompute = "moe" in recompute
        self.shared_expert_recompute = "shared_experts" in recompute and not args.moe_shared_expert_overlap
        self.router = TopKRouter(S)
        self.token_dispatcher = MoEAlltoAllTokenDispatcher(S)
        self.experts = TEGroupedMLP(args, S, recompute)
        self.shared_experts = SharedExpertMLP(args, S, S.fsh, False, "shared_experts") if S.fsh else None

    def shared_experts_compute(self, hidden_states):
        if self.shared_experts is None:
            return None
        if self.shared_expert_recompute:
            return ag.checkpoint(self.shared_experts.forward, False, hidden_states)
        return self.shared_experts.forward(hidden_states)

    def forward(self, hidden_states):
        def custom_forward(hidden_states):
            shared = self.shared_experts_compute(hidden_states)
            probs, routing_map = self.router.forward(hidden_states)
            dispatched, dprobs = self.token_dispatcher.token_dispatch(hidden_states, probs)
            expert_out = self.experts.forward(dispatched, None, dprobs)
            # moe_layer.py custom_forward keeps dispatched_input and probs bound
            # until it returns (no del): under a checkpoint's no_grad forward
            # they live to the region's exit
            out = self.token_dispatcher.token_combine(expert_out)
            del expert_out
            if shared is not None:
                o = Tensor(self.S.x, "moe_plus_shared")
                del out, shared
                out = o
            ag.record("MoEOutputBackward", [], self._split_grad)
            return out

        if self.moe_layer_recompute:
            return ag.checkpoint(custom_forward, False, hidden_states)
        return custom_forward(hidden_states)

    def _split_grad(self, node, g):
        return g


# ----------------------------------------------------------------- CUDA graphs
class GraphedLayer:
    """One layer x microbatch captured by TE's make_graphed_callables: the
    forward and backward graphs share a private memory pool that keeps the
    static input/output, the saved-for-backward tensors and the grads. After
    capture the layer replays with cudaGraphLaunch: no Python, no Megatron or
    TE ranges, no allocations."""

    def __init__(self, layer, extra_bytes):
        dev = DEV_REF[0]
        S = layer.S
        self.pool = dev.lib.ms_alloc_pool_begin()
        try:
            self.static_input = Tensor(S.x, "graph_static_input", "graph")
            dev.lib.ms_graph_capture_begin()
            self.extra = Tensor(extra_bytes, "graph_saved_buffers", "graph") if extra_bytes else None
            tape = []
            with ag.tape_scope(tape):
                self.static_output = layer.forward_eager(self.static_input)
            self.fwd_exec = dev.lib.ms_graph_capture_end()
            self.static_grad_output = Tensor(S.x, "graph_static_grad_output", "graph")
            dev.lib.ms_graph_capture_begin()
            self.static_grad_input = ag.run_backward(tape, self.static_grad_output)
            self.bwd_exec = dev.lib.ms_graph_capture_end()
        finally:
            dev.lib.ms_alloc_pool_end()

    def replay(self, hidden_states):
        DEV_REF[0].lib.ms_graph_launch(self.fwd_exec)
        ag.record("GraphedBackward", [], self._backward)
        return self.static_output

    def _backward(self, node, g):
        DEV_REF[0].lib.ms_graph_launch(self.bwd_exec)
        return self.static_grad_input


# ------------------------------------------------- a user's extra module (R02)
class AuxEmbedding:
    """Fault --sim-aux-module-gib SAVED [--sim-aux-module-transient-gib T]: a
    user's custom embedding-like module (scenario R02, docs/sources.md) called at the
    start of the first layer on the first stage. It has no Megatron NVTX range
    and no TE call (a plain Python module). Each call computes its large-batch
    activations (SAVED bytes, saved for its backward under grad; dropped at
    once under no_grad, i.e. inside full recompute's checkpointed first pass).
    When a checkpoint replays it in backward, it first allocates and frees T
    more (the replay's large-batch transient the reported job hit in backward).
    Both are allocated in pieces of at most 512 MiB."""

    def __init__(self, saved_bytes, transient_bytes):
        self.saved_bytes, self.transient_bytes = saved_bytes, transient_bytes

    PIECE = 512 << 20        # the larger batch is processed in pieces of at most 512 MiB

    def _pieces(self, nbytes, name):
        out = []
        while nbytes > 0:
            out.append(Tensor(min(nbytes, self.PIECE), name))
            nbytes -= self.PIECE
        return out

    def forward(self, hidden_states):
        work = self._pieces(self.transient_bytes, "aux_embed_replay_work") \
            if ag.ST.replay else []
        out = self._pieces(self.saved_bytes, "aux_embed_activations")
        del work
        ag.record("AuxEmbeddingBackward", out, self._backward)
        del out
        return hidden_states

    def _backward(self, node, g):
        return g


# ---------------------------------------------------------------------- layer
class TransformerLayer:
    def __init__(self, args, layer_number):
        self.args = args
        self.layer_number = layer_number
        self.S = S = Shapes(args)
        S.cp_comm = cp_comm_of(args, layer_number)
        g = args.recompute_granularity
        recompute = args.recompute_modules if g == "selective" else []
        self.kind = layer_kind(args, layer_number)
        rms = args.normalization == "RMSNorm"
        self.rms = rms
        # TE spec: input LN fused into linear_qkv (IdentityOp) unless MLA or local spec
        self.standalone_input_ln = S.mla or not S.te
        self.standalone_pre_mlp_ln = self.kind == "moe" or not S.te
        self.input_layernorm = TENorm(S, rms, "input_layernorm", True) if self.standalone_input_ln else None
        self.pre_mlp_layernorm = TENorm(S, rms, "pre_mlp_layernorm", True) \
            if self.standalone_pre_mlp_ln else None
        # a hybrid stack's layers (--hybrid-layer-pattern) have one half each: the other
        # is IdentityOp, whose ranges Megatron still pushes (transformer_layer.py)
        hybrid = getattr(args, "hybrid_kinds", None)
        has_attention = not hybrid or self.kind == "attention"
        has_mlp = not hybrid or self.kind in ("mlp", "moe")
        if not has_attention:
            self.standalone_input_ln, self.input_layernorm = False, None
        self.recompute_input_layernorm = "layernorm" in recompute and self.standalone_input_ln
        self.recompute_pre_mlp_layernorm = "layernorm" in recompute and self.standalone_pre_mlp_ln
        self.self_attention = None
        if has_attention:
            self.self_attention = MLASelfAttention(args, S, recompute) if S.mla else \
                Attention(args, S, recompute)
        self.recompute_mlp = False
        if not has_mlp:
            self.mlp = None
        elif self.kind == "moe":
            self.mlp = MoELayer(args, S, recompute)
        else:
            self.mlp = MLP(args, S, args.ffn_hidden_size, fused_ln=not self.standalone_pre_mlp_ln)
            self.recompute_mlp = "mlp" in recompute

    graphs = None            # [GraphedLayer per microbatch] after capture
    graph_calls = 0

    def forward(self, hidden_states):
        if self.graphs:
            g = self.graphs[self.graph_calls % len(self.graphs)]
            self.graph_calls += 1
            return g.replay(hidden_states)
        return self.forward_eager(hidden_states)

    aux = None               # AuxEmbedding (fault --sim-aux-module-gib), first layer of stage 0

    def forward_eager(self, hidden_states):
        if self.aux is not None:
            hidden_states = self.aux.forward(hidden_states)
        hidden_states = self._forward_attention(hidden_states)
        return self._forward_mlp(hidden_states)

    def _forward_attention(self, hidden_states):
        residual = hidden_states
        if self.input_layernorm is not None:
            if self.recompute_input_layernorm:
                self.input_layernorm_checkpoint = ag.CheckpointWithoutOutput()
                input_layernorm_output = self.input_layernorm_checkpoint.checkpoint(
                    self.input_layernorm.forward, hidden_states)
            else:
                input_layernorm_output = self.input_layernorm.forward(hidden_states)
        else:
            input_layernorm_output = hidden_states
        if self.self_attention is None:      # IdentityOp and IdentityFuncOp: no tensor
            with nvtx_range(TL + "_forward_attention.self_attention"):
                pass
            with nvtx_range(TL + "_apply_self_attn_bda_step.self_attn_bda"):
                pass
            return hidden_states
        with nvtx_range(TL + "_forward_attention.self_attention"):
            attention_output = self.self_attention.forward(input_layernorm_output)
            if ag.GRAD_WORKSPACE[0] and ag.ST.grad:
                Tensor(ag.GRAD_WORKSPACE[0], "grad_only_workspace")   # made and freed
        if self.recompute_input_layernorm:
            self.input_layernorm_checkpoint.discard_output_and_register_recompute(attention_output)
        del input_layernorm_output
        return self._apply_self_attn_bda_step(attention_output, residual)

    def _bda(self, out, residual, name):
        S = self.S
        new = Tensor(S.x, name)
        mask = Tensor(S.mask, name + ".dropout_mask") if S.mask else None
        ag.record("BiasDropoutAddBackward", [mask], self._bda_backward)
        return new

    def _bda_backward(self, node, g):
        RESIDUAL.append(g)
        if self.S.mask:
            return Tensor(self.S.x, "dbda", "grad")
        return g

    def _apply_self_attn_bda_step(self, attention_output, residual):
        with nvtx_range(TL + "_apply_self_attn_bda_step.self_attn_bda"):
            hidden_states = self._bda(attention_output, residual, "self_attn_bda_out")
            del attention_output, residual
        return hidden_states

    def _forward_mlp(self, hidden_states):
        if self.mlp is None:                 # attention-only hybrid layer: IdentityOp MLP
            with nvtx_range(TL + "_run_mlp.mlp"):
                pass
            with nvtx_range(TL + "_apply_mlp_bda_step.mlp_bda"):
                pass
            return hidden_states
        pre_mlp_layernorm_output = self._forward_pre_mlp_layernorm(hidden_states)
        mlp_output = self._run_mlp(pre_mlp_layernorm_output)
        del pre_mlp_layernorm_output
        return self._apply_mlp_bda_step(mlp_output, hidden_states)

    def _forward_pre_mlp_layernorm(self, hidden_states):
        if self.pre_mlp_layernorm is None:
            return hidden_states
        if self.recompute_pre_mlp_layernorm:
            self.pre_mlp_norm_checkpoint = ag.CheckpointWithoutOutput()
            return self.pre_mlp_norm_checkpoint.checkpoint(self.pre_mlp_layernorm.forward, hidden_states)
        return self.pre_mlp_layernorm.forward(hidden_states)

    def _run_mlp(self, pre_mlp_layernorm_output):
        with nvtx_range(TL + "_run_mlp.mlp"):
            if self.recompute_mlp:
                mlp_output = ag.checkpoint(self.mlp.forward, False, pre_mlp_layernorm_output)
            else:
                mlp_output = self.mlp.forward(pre_mlp_layernorm_output)
        return mlp_output

    def _apply_mlp_bda_step(self, mlp_output, residual):
        with nvtx_range(TL + "_apply_mlp_bda_step.mlp_bda"):
            if self.recompute_pre_mlp_layernorm:
                self.pre_mlp_norm_checkpoint.discard_output_and_register_recompute(mlp_output)
            hidden_states = self._bda(mlp_output, residual, "mlp_bda_out")
            del mlp_output, residual
        return hidden_states


class TransformerBlock:
    def __init__(self, args, layer_numbers):
        self.args = args
        self.layers = [MambaLayer(args, i) if layer_kind(args, i) == "mamba"
                       else TransformerLayer(args, i) for i in layer_numbers]
        self.num_layers_per_pipeline_rank = len(self.layers)
        self.layer_bytes = []     # --sim-print-layer-bytes

    def _checkpointed_forward(self, hidden_states):
        a = self.args
        n = a.recompute_num_layers
        dist = a.tensor_model_parallel_size if a.distribute_saved_activations else False

        def custom(start, end):
            def custom_forward(hidden_states):
                for layer in self.layers[start:end]:
                    hidden_states = layer.forward(hidden_states)
                return hidden_states
            return custom_forward

        if a.recompute_method == "uniform":
            l = 0
            while l < self.num_layers_per_pipeline_rank:
                hidden_states = ag.checkpoint(custom(l, l + n), dist, hidden_states)
                l += n
        else:  # block
            for l in range(self.num_layers_per_pipeline_rank):
                if l < n:
                    hidden_states = ag.checkpoint(custom(l, l + 1), dist, hidden_states)
                else:
                    hidden_states = custom(l, l + 1)(hidden_states)
        return hidden_states

    def forward(self, hidden_states, measure=False):
        if self.args.recompute_granularity == "full" and ag.ST.grad:
            return self._checkpointed_forward(hidden_states)
        from .cuda import LIVE
        for layer in self.layers:
            before = LIVE[0]
            hidden_states = layer.forward(hidden_states)
            if measure:
                self.layer_bytes.append((layer.layer_number, layer.kind, LIVE[0] - before))
        return hidden_states


class LanguageModelEmbedding:
    def __init__(self, args, S):
        self.args, self.S = args, S

    def forward(self, input_ids, position_ids):
        S = self.S
        with nvtx_range(EMB):
            emb = Tensor(S.x_full, "word_embeddings_out")
            if self.args.position_embedding_type == "learned_absolute":
                pos = Tensor(S.x_full, "position_embeddings_out")
                e = Tensor(S.x_full, "embeddings")
                del pos, emb
                emb = e
            if S.ts > 1:                       # scatter to the sequence-parallel region
                e = Tensor(S.x, "embeddings_sp")
                del emb
                emb = e
            mask = Tensor(S.mask, "embedding_dropout_mask") if S.mask else None
            ag.record("EmbeddingBackward", [input_ids, mask], self.backward)
        return emb

    def backward(self, node, g):
        S = self.S
        if S.ts > 1:
            full = Tensor(S.x_full, "dembedding_gathered", "grad")
            del full
        return None


class OutputLayer:
    """final_layernorm + output_layer (ColumnParallelLinear) + vocab-parallel CE."""

    def __init__(self, args, S):
        self.args, self.S = args, S
        self.final_layernorm = TENorm(S, args.normalization == "RMSNorm", "final_layernorm")
        # --sim-keep-outputs: the training step's forward_data_store (a list), else None
        self.kept = None

    def forward(self, hidden_states, labels):
        S = self.S
        ln = self.final_layernorm.forward(hidden_states)
        total = Tensor(S.x_full, "output_ag_input") if S.ts > 1 else None
        logits = te.gemm(S.logits, "logits")   # cuBLAS through torch matmul
        del total
        if self.kept is not None:
            # fault: the loss function returns the logits undetached (for metrics) and
            # the schedule's forward_data_store keeps them until the step returns
            self.kept.append(logits)
        ag.record("ColumnParallelLinearBackward", [ln], self._linear_backward)
        del ln
        if self.args.cross_entropy_loss_fusion and self.args.cross_entropy_fusion_impl == "te":
            # --cross-entropy-loss-fusion --cross-entropy-fusion-impl te: Transformer
            # Engine's parallel_cross_entropy computes the loss on the logits in their
            # own dtype and writes the grad in place into them, saved for the
            # backward: no fp32 copy. The native impl (Megatron-Core's default,
            # fused_vocab_parallel_cross_entropy) makes the fp32 copy
            # (calculate_logits_max's .float()) and saves the fp32 softmax as the
            # unfused loss below does (megatron-core 0.19.2 fusions/fused_cross_entropy.py)
            loss = Tensor(4 * S.s * S.b, "loss")
            ag.record("FusedVocabParallelCrossEntropyBackward", [logits, labels],
                      self._ce_backward_fused)
            del logits
            return loss
        # vocab_parallel_cross_entropy (and the native fused loss): fp32 copy,
        # softmax in place, saved
        logits32 = Tensor(S.logits_fp32, "logits_fp32")
        del logits
        loss = Tensor(4 * S.s * S.b, "loss")
        ag.record("VocabParallelCrossEntropyBackward", [logits32, labels], self._ce_backward)
        del logits32
        return loss

    def _ce_backward_fused(self, node, g):
        return node.saved[0]  # the grad overwrites the saved logits (same tensor)

    def _ce_backward(self, node, g):
        S = self.S
        # grad computed in place in the saved fp32 softmax, then cast to bf16
        d = Tensor(S.logits, "dlogits", "grad")
        return d

    def _linear_backward(self, node, g):
        S = self.S
        total = Tensor(S.x_full, "output_ag_input", "grad") if S.ts > 1 else None
        dgrad = te.gemm(S.x_full, "dgrad", "grad")
        te.wgrad_gemm()
        del total, g
        if S.ts > 1:
            d = Tensor(S.x, "dgrad_rs", "grad")
            del dgrad
            dgrad = d
        return dgrad


class GPTModel:
    """One model chunk: pre_process (embedding) on the first stage's first
    chunk, post_process (output layer + loss) on the last stage's last chunk."""

    def __init__(self, args, layer_numbers, pre_process, post_process):
        self.args = args
        self.S = Shapes(args)
        self.pre_process, self.post_process = pre_process, post_process
        self.embedding = LanguageModelEmbedding(args, self.S) if pre_process else None
        self.decoder = TransformerBlock(args, layer_numbers)
        if pre_process and getattr(args, "sim_aux_module_gib", 0) and self.decoder.layers:
            self.decoder.layers[0].aux = AuxEmbedding(
                int(args.sim_aux_module_gib * GIB),
                int(getattr(args, "sim_aux_module_transient_gib", 0) * GIB))
        self.output = OutputLayer(args, self.S) if post_process else None
        self.input_tensor = None

    def set_input_tensor(self, t):
        self.input_tensor = t

    def forward(self, input_ids, position_ids, labels, measure=False):
        if self.pre_process:
            hidden_states = self.embedding.forward(input_ids, position_ids)
        else:
            hidden_states = self.input_tensor
            self.input_tensor = None
        hidden_states = self.decoder.forward(hidden_states, measure)
        if self.post_process:
            return self.output.forward(hidden_states, labels)
        return hidden_states
