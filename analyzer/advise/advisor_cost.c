/* advisor_cost.c: replay cost of a recompute setting as a share of the
 * training step, from a FLOP model of the replayed forward (docs/architecture.md).
 *
 * CPU-side NVTX durations of an asynchronous GPU job measure kernel launches,
 * not compute, so the default is this model: per layer and microbatch, the
 * matrix-multiply FLOPs of each boundary's forward from the recorded shapes
 * (2·m·n·k per GEMM; attention 4·s²·b·heads·head_dim), memory-bound ops
 * (norms, activations) as bytes moved. Step = forward + backward (2× forward)
 * + replay. The share is replayed FLOPs / step FLOPs of the model's layers,
 * each placed on its stage and chunk as Megatron places it.
 * (Measured GPU kernel time would replace it where a trace has CUPTI kernel
 * records; recompshim traces do not have them yet.)
 */
#include "advisor.h"

typedef struct fl {
    double qkv, core, proj, ln, mlp, router, experts, shared, act, mla_up;
} fl;

static fl
layer_flops(const adv_cfg *c, int moe)
{
    fl f = {0};
    double s = c->seq / (double)(c->cp > 0 ? c->cp : 1), b = c->mbs > 0 ? c->mbs : 1;
    double h = c->hidden, t = c->tp > 0 ? c->tp : 1, a = c->heads, g = c->groups ? c->groups : a;
    double dh = c->kv_channels ? c->kv_channels : (a ? h / a : 0);
    double gam = c->swiglu ? 2 : 1, ts = c->sp ? t : 1;
    if (c->mla) {
        double dqk = c->qk_head, dr = c->qk_pos, dv = c->v_head, rkv = c->kv_lora, rq = c->q_lora;
        f.qkv = 2 * s * b * h * (rkv + dr) + (rq ? 2 * s * b * h * rq : 0);
        f.mla_up = 2 * s * b * (rq ? rq : h) * a * (dqk + dr) / t + 2 * s * b * rkv * a * (dqk + dv) / t;
        f.core = 2 * s * s * b * a * (dqk + dr + dv) / t;
        f.proj = 2 * s * b * a * dv * h / t;
    } else {
        f.qkv = 2 * s * b * h * (a + 2 * g) * dh / t;
        f.core = 4 * s * s * b * a * dh / t;
        f.proj = 2 * s * b * a * dh * h / t;
    }
    f.ln = 10 * s * b * h / ts;
    if (moe) {
        double k = c->topk, fe = c->moe_ffn, fsh = c->shared_ffn, E = c->num_experts;
        f.router = 2 * s * b * h * E / t;
        f.experts = 2 * s * b * k * h * (gam + 1) * fe / t;
        f.shared = fsh ? 2 * s * b * h * (gam + 1) * fsh / t : 0;
        f.act = 8 * s * b * k * fe / t;
    } else {
        f.mlp = 2 * s * b * h * (gam + 1) * c->ffn / t;
    }
    return f;
}

static double
total(const fl *f)
{
    return f->qkv + f->core + f->proj + f->ln + f->mlp + f->router + f->experts + f->shared +
           f->act + f->mla_up;
}

/* one layer's forward FLOPs into *fwd and what setting s replays of it into
 * *rep; moe: an MoE layer, local: its index in its model chunk (full
 * recompute's block method counts layers per chunk: megatron-core 0.19.2
 * recompute.py, the block's own num_layers_per_pipeline_rank) */
static void
layer_cost(const adv_cfg *c, const adv_setting *s, int moe, int local, double *fwd,
           double *rep)
{
    fl f = layer_flops(c, moe);
    double lf = total(&f);
    *fwd += lf;
    if (s->full_method) {
        if (s->full_method == 1 || local < s->full_n)
            *rep += lf;
        return;
    }
    unsigned m = s->labels;
    if (m & (1u << ADV_L_core_attn))
        *rep += f.core;
    if ((m & (1u << ADV_L_mlp)) && !moe)
        *rep += f.mlp + f.ln / 2;
    if ((m & (1u << ADV_L_moe)) && moe)
        *rep += f.router + f.experts + f.shared + f.act;
    else {
        if ((m & (1u << ADV_L_shared_experts)) && moe)
            *rep += f.shared;
        if ((m & (1u << ADV_L_moe_act)) && moe)
            *rep += f.act;
    }
    if (m & (1u << ADV_L_layernorm))
        *rep += f.ln;
    if ((m & (1u << ADV_L_mla_up_proj)) && c->mla)
        *rep += f.mla_up;
}

/* forward and replayed FLOPs of every layer of the model, placed on its
 * stage and chunk (advisor_layers.c); -1 where the placement is unknown */
static int
model_cost(const adv_cfg *c, const adv_setting *s, double *fwd, double *rep)
{
    int pp = c->pp > 0 ? c->pp : 1, vp = c->vpp > 1 ? c->vpp : 1;
    for (int p = 0; p < pp; p++)
        for (int v = 0; v < vp; v++) {
            int off = adv_cfg_layer_offset(c, p, v), n = adv_cfg_chunk_layers(c, p);
            if (off < 0 || n <= 0)
                return -1;
            for (int l = 0; l < n; l++)
                layer_cost(c, s, adv_cfg_is_moe_layer(c, off + l), l, fwd, rep);
        }
    return 0;
}

/* Replay cost of setting s as a share of the training step (replayed FLOPs /
 * (3 x forward + replayed), no unit): over every layer of the model, each
 * placed on its stage and model chunk as Megatron places it
 * (advisor_layers.c), so a label reaches the layer types it reaches in
 * Megatron and full recompute's block method the first full_n layers of each
 * chunk. Where the placement is not modelled, the first stage_layers layers
 * (0: one chunk) stand for the stage. 0 when the model is unknown. */
double
adv_replay_cost(const adv_cfg *c, const adv_setting *s, int stage_layers)
{
    if (c->num_layers <= 0 || c->hidden <= 0)
        return 0;
    double fwd = 0, rep = 0;
    if (model_cost(c, s, &fwd, &rep) < 0)
        fwd = rep = 0;
    if (fwd <= 0) {
        int lps = stage_layers > 0 ? stage_layers : adv_cfg_layers_per_chunk(c);
        for (int l = 0; l < lps; l++)
            layer_cost(c, s, adv_cfg_is_moe_layer(c, l), l, &fwd, &rep);
    }
    double step = 3 * fwd + rep;
    return step > 0 ? rep / step : 0;
}
