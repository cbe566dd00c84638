/* advisor_cost.c: replay cost of a recompute setting as a share of the
 * training step, from a FLOP model of the replayed forward (docs/architecture.md).
 *
 * CPU-side NVTX durations of an asynchronous GPU job measure kernel launches,
 * not compute, so the default is this model: per layer and microbatch, the
 * matrix-multiply FLOPs of each boundary's forward from the recorded shapes
 * (2·m·n·k per GEMM; attention 4·s²·b·heads·head_dim), memory-bound ops
 * (norms, activations) as bytes moved. Step = forward + backward (2× forward)
 * + replay. The share is replayed FLOPs / step FLOPs of the stage's layers.
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

double
adv_replay_cost(const adv_cfg *c, const adv_setting *s, int stage_layers)
{
    if (c->num_layers <= 0 || c->hidden <= 0)
        return 0;
    int lps = stage_layers > 0 ? stage_layers : adv_cfg_layers_per_chunk(c);
    if (lps <= 0)
        return 0;
    double fwd = 0, rep = 0;
    for (int l = 0; l < lps; l++) {
        int moe = adv_cfg_is_moe_layer(c, l);
        fl f = layer_flops(c, moe);
        double lf = total(&f);
        fwd += lf;
        if (s->full_method) {
            if (s->full_method == 1 || l < s->full_n)
                rep += lf;
            continue;
        }
        unsigned m = s->labels;
        if (m & (1u << ADV_L_core_attn))
            rep += f.core;
        if ((m & (1u << ADV_L_mlp)) && !moe)
            rep += f.mlp + f.ln / 2;
        if ((m & (1u << ADV_L_moe)) && moe)
            rep += f.router + f.experts + f.shared + f.act;
        else {
            if ((m & (1u << ADV_L_shared_experts)) && moe)
                rep += f.shared;
            if ((m & (1u << ADV_L_moe_act)) && moe)
                rep += f.act;
        }
        if (m & (1u << ADV_L_layernorm))
            rep += f.ln;
        if ((m & (1u << ADV_L_mla_up_proj)) && c->mla)
            rep += f.mla_up;
    }
    double step = 3 * fwd + rep;
    return step > 0 ? rep / step : 0;
}
