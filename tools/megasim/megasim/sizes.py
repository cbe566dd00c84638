"""Per-tensor sizes: [P] adapted to Megatron-Core with TE (docs/sources.md).

`Shapes` is the one place the byte counts come from: the simulated model
allocates exactly these, and `saved_table()` lists the tensors a layer keeps
for backward (one microbatch, one rank), with the same names as the worked
examples derived from [P] (docs/sources.md) so the tests can compare row by row.
"""


class Shapes:
    def __init__(self, args):
        self.args = args
        tp = args.tensor_model_parallel_size
        self.t = tp
        self.ts = tp if args.sequence_parallel else 1
        cp = args.context_parallel_size
        self.s = args.seq_length // cp          # CP: s -> s/cp in every term (§2.7.6)
        self.cp = cp
        # this rank's place in the CP group (Megatron's order tp-cp-ep-dp-pp)
        import os
        self.cp_rank = int(os.environ.get("RANK", "0")) // tp % cp
        ct = getattr(args, "cp_comm_type", "p2p")
        self.cp_comm = ct if isinstance(ct, str) else ct[0]   # per layer: cp_comm_of()
        self.b = args.micro_batch_size
        self.h = args.hidden_size
        self.a = args.num_attention_heads
        self.g = args.num_query_groups
        self.dh = args.kv_channels
        self.f = args.ffn_hidden_size
        self.gamma = 2 if args.swiglu else 1
        self.beta = 2 if (args.bf16 or args.fp16) else 4
        self.V = args.padded_vocab_size
        self.dropout = args.hidden_dropout > 0
        self.attn_dropout = args.attention_dropout > 0
        self.unfused = (args.attention_backend in ("unfused", "local")
                        or args.transformer_impl == "local")
        self.te = args.transformer_impl == "transformer_engine"
        # MoE
        self.E = args.num_experts or 0
        self.k = args.moe_router_topk
        self.fe = args.moe_ffn_hidden_size or 0
        self.fsh = args.moe_shared_expert_intermediate_size or 0
        self.etp = args.expert_tensor_parallel_size or tp
        self.ep = args.expert_model_parallel_size
        # MLA
        self.mla = args.multi_latent_attention
        self.rq = args.q_lora_rank
        self.rkv = args.kv_lora_rank
        self.dqk = args.qk_head_dim
        self.dr = args.qk_pos_emb_head_dim
        self.dv = args.v_head_dim

    # -- common --
    @property
    def x(self):
        """hidden states in the LN/residual region: beta*s*b*h/t_s"""
        return self.beta * self.s * self.b * self.h // self.ts

    @property
    def x_full(self):
        """hidden states gathered over TP (column-parallel GEMM input)"""
        return self.beta * self.s * self.b * self.h

    @property
    def mask(self):
        return self.s * self.b * self.h // self.ts if self.dropout else 0

    @property
    def rsigma(self):
        return 4 * self.s * self.b // self.ts

    # -- dense attention (TE fused / unfused) --
    @property
    def qkv_buf(self):
        return self.beta * self.s * self.b * (self.a + 2 * self.g) * self.dh // self.t

    @property
    def q(self):
        return self.beta * self.s * self.b * self.a * self.dh // self.t

    @property
    def kv(self):
        return self.beta * self.s * self.b * self.g * self.dh // self.t

    @property
    def o(self):
        return self.beta * self.s * self.b * self.a * (self.dv if self.mla else self.dh) // self.t

    @property
    def lse(self):
        return 4 * self.s * self.b * self.a // self.t

    @property
    def probs(self):
        """unfused softmax output b*np*s*s (beta bytes)"""
        return self.beta * self.a * self.s * self.s * self.b // self.t

    @property
    def probs_mask(self):
        return self.a * self.s * self.s * self.b // self.t if self.attn_dropout else 0

    @property
    def kv_repeat(self):
        """unfused GQA: K, V repeat-interleaved to a heads (each)"""
        return self.beta * self.s * self.b * self.a * self.dh // self.t if self.g < self.a else 0

    # -- dense MLP --
    def fc1_out(self, f=None):
        return self.beta * self.s * self.b * self.gamma * (f or self.f) // self.t

    def act_out(self, f=None):
        return self.beta * self.s * self.b * (f or self.f) // self.t

    # -- MoE (alltoall, dropless, balanced: N_r = ETP*n*k, §2.5) --
    @property
    def n(self):
        return self.s * self.b // self.t

    @property
    def Nr(self):
        a = self.args
        if a.moe_expert_capacity_factor is not None and a.moe_pad_expert_input_to_capacity:
            cap = -(-int(self.n * self.k * a.moe_expert_capacity_factor) // self.E)
            return self.E * cap * self.etp
        if getattr(a, "sim_moe_imbalance", None):
            return self.etp * self.ep * moe_send_tokens(a, self.n)[self.ep_rank]
        return self.etp * self.n * self.k

    @property
    def ep_rank(self):
        """this rank's place in the EP group (expert grid etp-ep-edp-pp)"""
        import os
        return int(os.environ.get("RANK", "0")) // self.etp % max(self.ep, 1)

    @property
    def a2a_send(self):
        """dropless all-to-all: tokens this rank sends to each EP peer (input_splits)"""
        if getattr(self.args, "sim_moe_imbalance", None):
            return moe_send_tokens(self.args, self.n)
        return [self.n * self.k // self.ep] * self.ep

    @property
    def a2a_recv(self):
        """tokens this rank receives from each EP peer (output_splits): every
        source sends the same split, so from each peer what it sends to us"""
        return [self.a2a_send[self.ep_rank]] * self.ep

    @property
    def expert_in(self):
        return self.beta * self.Nr * self.h

    @property
    def expert_fc1_out(self):
        return self.beta * self.Nr * self.gamma * self.fe // self.etp

    @property
    def expert_act_out(self):
        return self.beta * self.Nr * self.fe // self.etp

    @property
    def expert_probs(self):
        return 4 * self.Nr

    @property
    def permuted(self):
        """this rank's token copies before the all-to-all: n*k rows of h"""
        return self.beta * self.n * self.k * self.h

    @property
    def router_logits(self):
        return 4 * self.n * self.E

    @property
    def routing_map(self):
        return self.n * self.E

    # -- MLA (§2.6) --
    @property
    def q_latent(self):
        return self.beta * (self.s // self.ts) * self.b * self.rq if self.rq else 0

    @property
    def kv_latent(self):
        return self.beta * (self.s // self.ts) * self.b * (self.rkv + self.dr)

    @property
    def kv_ln_out(self):
        return self.beta * (self.s // self.ts) * self.b * self.rkv

    @property
    def q_ln_out(self):
        return self.beta * (self.s // self.ts) * self.b * self.rq if self.rq else 0

    @property
    def mla_q(self):
        return self.beta * self.s * self.b * (self.a // self.t) * (self.dqk + self.dr)

    @property
    def mla_v(self):
        return self.beta * self.s * self.b * (self.a // self.t) * self.dv

    @property
    def mla_q_proj_out(self):
        return self.mla_q

    @property
    def mla_kv_up_out(self):
        return self.beta * self.s * self.b * (self.a // self.t) * (self.dqk + self.dv)

    # -- embedding / output --
    @property
    def tokens(self):
        return 8 * self.s * self.b

    @property
    def logits(self):
        return self.beta * self.s * self.b * self.V // self.t

    @property
    def logits_fp32(self):
        return 4 * self.s * self.b * self.V // self.t


def moe_send_tokens(args, n):
    """--sim-moe-imbalance F (docs/megasim.md "MoE routing imbalance"): the
    token copies each source rank sends to each EP rank in a dropless
    all-to-all (Megatron-Core's input_splits), the same split on every source.
    EP rank 0 is the hottest and gets round(F*n*k) of the n*k copies; the
    other EP-1 ranks share the rest evenly, the first ones one more when it
    does not divide. Balanced is F = 1/EP. n: tokens per rank entering the MoE
    layer (s*b/t); k: --moe-router-topk. A source can send at most
    n*min(k, E/EP) copies to one rank (each token's k experts are distinct),
    which config.finalize enforces."""
    ep, k = args.expert_model_parallel_size, args.moe_router_topk
    total = n * k
    hot = int(round(args.sim_moe_imbalance * total))
    rest, extra = divmod(total - hot, ep - 1)
    return [hot] + [rest + (1 if i < extra else 0) for i in range(ep - 1)]


def cp_comm_of(args, layer_number):
    """--cp-comm-type of a 0-based global layer (one type, or one per layer)"""
    ct = getattr(args, "cp_comm_type", "p2p")
    return ct if isinstance(ct, str) else ct[layer_number]


def layer_kind(args, layer_number):
    """'dense' or 'moe' for a 0-based global layer index; in a hybrid model
    (--hybrid-layer-pattern) the pattern's kind: 'mamba', 'attention', 'mlp' or 'moe'."""
    kinds = getattr(args, "hybrid_kinds", None)
    if kinds:
        return kinds[layer_number]
    return "moe" if args.num_experts and args.moe_pattern[layer_number] else "dense"


def saved_table(args, kind):
    """Rows (name, bytes, approximate) of the tensors one layer saves for
    backward, without recompute ([P] in docs/sources.md: dense and MoE+MLA layers)."""
    S = Shapes(args)
    rows = []
    add = lambda name, b, approx=False: rows.append((name, b, approx)) if b else None
    if S.mla:
        add("input LN input", S.x)
        add("input LN output", S.x)
        add("q latent", S.q_latent)
        add("q-LN output", S.q_ln_out)
        # megatron-core 0.19.2 (mla_qk_norm_config.py): with qk_layernorm and no
        # q_lora_rank the q norm is fused into linear_q_proj
        add("q_proj LN output (inside linear_q_proj)",
            S.x if not S.rq and args.qk_layernorm else 0)
        # TE's contiguous copy of kv_compressed (a slice of kv_down's output),
        # saved by the kv norm; kv_down's output itself is freed
        add("kv-LN input (contiguous copy of kv_compressed)", S.kv_ln_out)
        add("kv-LN output (inside linear_kv_up_proj)", S.kv_ln_out)
        # unfused RoPE (rope_utils.py): cos and sin of q's and k's rotation,
        # [s, 1, 1, dr] each, saved by their products
        add("RoPE cos/sin (unfused, 4)",
            0 if args.apply_rope_fusion else 4 * S.beta * S.s * S.dr)
        add("Q", S.mla_q)
        add("K", S.mla_q)
        add("V", S.mla_v)
        add("O", S.o)
        add("LSE", S.lse)
    else:
        add("attention LN input x", S.x)
        add("attention LN output (QKV input)", S.x)
        if S.unfused:
            add("Q", S.q)
            add("K", S.kv)
            add("V", S.kv)
            add("K repeat-interleaved", S.kv_repeat)
            add("V repeat-interleaved", S.kv_repeat)
            add("softmax output", S.probs)
            add("softmax dropout mask", S.probs_mask)
            add("dropout output", S.probs if S.attn_dropout else 0)
            add("O", S.o)
        else:
            add("Q", S.q)
            add("K", S.kv)
            add("V", S.kv)
            add("O", S.o)
            add("LSE", S.lse)
    add("attention BDA mask", S.mask)
    if kind == "moe":
        add("pre-MLP LN input", S.x)
        add("pre-MLP LN output (MoE input)", S.x)
        add("expert fc1 input", S.expert_in)
        add("expert SwiGLU input", S.expert_fc1_out)
        add("expert fc2 input", S.expert_act_out)
        add("expert probs (fp32)", S.expert_probs)
        if S.fsh:
            add("shared SwiGLU input", S.fc1_out(S.fsh))
            add("shared fc2 input", S.act_out(S.fsh))
        add("router (approx.)", 2 * S.router_logits + S.routing_map, True)
    else:
        f = S.f
        add("MLP LN input x2", S.x)
        add("MLP LN output (fc1 input)", S.x)
        add("SwiGLU input" if S.gamma == 2 else "GeLU input", S.fc1_out(f))
        add("fc2 input", S.act_out(f))
    add("MLP BDA mask", S.mask)
    return rows
