/* advisor_trace.c: one more pass over a rank's source that keeps what the
 * counterfactuals need (advisor.h adv_trace):
 *
 *   - one compact record per tensor-level device allocation: size, op
 *     positions of its allocation and free, the thread (main/backward) of
 *     both, the analyzer's phase and boundary, the forward instance and layer
 *     it belongs to, the Megatron region it was made in, and the Transformer
 *     Engine call it belongs to (TE allocates just before its nvte_* calls, so
 *     the next nvte_* range on the same thread owns an allocation);
 *   - the op stream: +id allocation, -id free, in trace order;
 *   - per forward layer instance, the op positions of Megatron's regions
 *     (.self_attention, .core_attention, _run_mlp.mlp, .mlp_bda) and the
 *     tensors the discard-style labels act on (standalone norms, the expert
 *     activation, MLA's Q/K/V).
 *
 * Layers are counted on the main thread from Megatron's `.self_attention`
 * range (--profile --nvtx-ranges); a forward instance (one microbatch of one
 * model chunk) is layers_per_chunk consecutive layers. Memory: O(tensor
 * allocations) records.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "live.h"
#include "pyframes.h"
#include "timeline.h"

static int
grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 256;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int
suffix(const char *s, uint32_t n, const char *suf)
{
    size_t k = strlen(suf);
    return s && n >= k && memcmp(s + n - k, suf, k) == 0;
}

static int
prefix(const char *s, uint32_t n, const char *pre)
{
    size_t k = strlen(pre);
    return s && n >= k && memcmp(s, pre, k) == 0;
}

enum { R_NONE, R_ATTN, R_CORE, R_MLP, R_SUB, R_BDA, R_MLPBDA, R_MAMBA, R_QKV, R_MLAUP, R_MLACORE };

static int
region_of(const char *s, uint32_t n)
{
    if (suffix(s, n, ".self_attention"))
        return R_ATTN;
    if (suffix(s, n, ".core_attention"))
        return R_CORE;
    /* MLA's core attention and Q/K/V up-projection: megatron-core 0.19.2's
     * MLASelfAttention pushes no range inside .self_attention; the ranges made
     * from its Python frames (catalog.def: TEDotProductAttention.forward,
     * qkv_up_proj_and_rope_apply) mark them. Its core region bounds the
     * layer's core attention but sets no ADV_C_CORE: a full recompute's replay
     * on the backward thread is not given that frame range, and its twins are
     * matched by the range flags (advisor_counterfactual.c UU_CTX_FULL) */
    if (suffix(s, n, "py:MultiLatentAttention.core_attn"))
        return R_MLACORE;
    if (suffix(s, n, ".mla_up_proj"))
        return R_MLAUP;
    if (suffix(s, n, "._run_mlp.mlp") || suffix(s, n, "._forward_mlp.mlp"))
        return R_MLP;
    if (suffix(s, n, "mlp.forward.linear_fc1") || suffix(s, n, "mlp.forward.activation") ||
        suffix(s, n, "mlp.forward.linear_fc2"))
        return R_SUB;
    if (suffix(s, n, ".mlp_bda"))
        return R_MLPBDA;
    if (suffix(s, n, ".self_attn_bda"))
        return R_BDA;
    /* a hybrid model's Mamba layer: no Megatron range, the range made from its
     * Python frame (catalog.def) is the whole layer */
    if (suffix(s, n, "py:MambaLayer.forward"))
        return R_MAMBA;
    if (suffix(s, n, "attention.forward.qkv"))
        return R_QKV;
    return R_NONE;
}

static int
te_class(const char *s, uint32_t n)
{
    if (!prefix(s, n, "nvte_"))
        return ADV_T_NONE;
    if (prefix(s, n, "nvte_rmsnorm_fwd") || prefix(s, n, "nvte_layernorm_fwd"))
        return ADV_T_NORM;
    if (prefix(s, n, "nvte_flash_attn_fwd") || prefix(s, n, "nvte_fused_attn_fwd"))
        return ADV_T_ATTN;
    if (prefix(s, n, "nvte_multi_tensor_gemm") || prefix(s, n, "nvte_multi_stream_cublas_gemm"))
        return ADV_T_GROUPED;
    if (prefix(s, n, "nvte_cublas_gemm"))
        return ADV_T_GEMM;
    if (prefix(s, n, "nvte_fused_rope"))
        return ADV_T_ROPE;
    return ADV_T_OTHER;
}

/* allocation ids by address: the analyzer's live set (seq = id + 1) */
typedef live_set keymap;

static int
km_put(keymap *m, uint64_t addr, uint32_t id)
{
    live_ent e;
    memset(&e, 0, sizeof e);
    e.addr = addr;
    e.seq = (uint64_t)id + 1;
    return live_put(m, &e);
}

static int
km_take(keymap *m, uint64_t addr, uint32_t *id)
{
    live_ent old;
    if (!live_del(m, 0, addr, &old))
        return 0;
    *id = (uint32_t)(old.seq - 1);
    return 1;
}

void
adv_trace_free(adv_trace *t)
{
    free(t->a);
    free(t->ops);
    free(t->layers);
    free(t->insts);
    free(t->xr);
    free(t->py);
    free(t->abwd);
    memset(t, 0, sizeof *t);
}

typedef struct cap {
    adv_trace *t;
    const adv_cfg *cfg;
    am_rank *r;
    tl tl;
    keymap keys;
    uint32_t main_tid;
    int lpc, layer_seq, cur_layer;   /* cur_layer: index into t->layers, -1 */
    int fwd_iter, fwd_k;             /* iteration of the last forward instance, its
                                      * index among that iteration's forwards */
    int microbatches;                /* per iteration (adv_cfg_microbatches), 0 unknown */
    int depth_attn, depth_core, depth_mlp, depth_sub, depth_bda, depth_qkv;
    uint32_t pend[64];               /* main-thread allocations waiting for an nvte call */
    int npend;
    uint32_t last_norm;              /* standalone norm output candidate */
    int mamba_open;                  /* index of the Mamba layer whose range is open, -1 */
    uint32_t pre_b;                  /* op after the last main-thread range pop or
                                      * op outside the main thread's forward */
    int grouped_groups, flash_groups;
    uint64_t dev_live, reserved;
    uint64_t graph_live;
    int capture;
    uint32_t last_main_pos;          /* op position after the last main-thread op */
    uint64_t mla_in_sizes[3];        /* q latent, kv latent, gathered k_pos_emb (0: none) */
    int mla_in_layer;                /* the layer (index into t->layers) of mla_in_next */
    int mla_in_next;                 /* its next input to match (mla_region_input) */
    uint64_t mla_qk_size, mla_v_size; /* one MLA layer's query (= key) and value bytes */
    int mla_up_layer;                /* layer whose up-projection range was seen, -1 */
    struct pyslot { const uint32_t *chain; uint32_t off; } *pyh; /* stack -> t->py offset */
    size_t npyh, pyused;             /* slots (a power of two, 0 none yet), used */
    int bwd_in_attn;                 /* the backward thread's last nvte_* range was an
                                      * attention backward's */
} cap;

static adv_layer *
cur(cap *c)
{
    return c->cur_layer >= 0 ? &c->t->layers[c->cur_layer] : NULL;
}

/* The 0-based global layer of local layer li of a forward instance of model
 * chunk `chunk` on this rank's stage (advisor_layers.c: Megatron's placement);
 * a placement not modelled without VPP: stage x layers per stage + li (the
 * even split); -1 unknown (stage or chunk unknown, not modelled with VPP). */
static int32_t
global_layer_of(const cap *c, int32_t chunk, int li)
{
    int off = adv_cfg_layer_offset(c->cfg, c->r->stage, chunk);
    if (off >= 0)
        return li < adv_cfg_chunk_layers(c->cfg, c->r->stage) ? off + li : -1;
    return c->cfg->vpp > 1 || c->r->stage < 0 ? -1 : c->r->stage * c->lpc + li;
}

static int
new_layer(cap *c)
{
    adv_trace *t = c->t;
    if (!c->lpc)
        return 0;
    int inst = c->layer_seq / c->lpc, li = c->layer_seq % c->lpc;
    c->layer_seq++;
    if (li == 0) {
        if (grow((void **)&t->insts, &t->capinsts, t->ninsts + 1, sizeof *t->insts) < 0)
            return -1;
        c->fwd_k = t->ninsts && c->fwd_iter == c->tl.iteration ? c->fwd_k + 1 : 0;
        c->fwd_iter = c->tl.iteration;
        t->insts[t->ninsts++] = (adv_inst){c->tl.iteration, (uint32_t)t->nops, (uint32_t)t->nops,
                                           0, adv_cfg_fwd_chunk(c->cfg, c->fwd_k,
                                                                c->microbatches)};
    }
    if (grow((void **)&t->layers, &t->caplayers, t->nlayers + 1, sizeof *t->layers) < 0)
        return -1;
    adv_layer *L = &t->layers[t->nlayers];
    memset(L, 0xff, sizeof *L);
    L->inst = inst;
    L->layer = li;
    L->global_layer = global_layer_of(c, t->insts[inst].chunk, li);
    L->moe = adv_cfg_is_moe_layer(c->cfg, L->global_layer >= 0 ? L->global_layer : li);
    L->mla = c->cfg->mla;
    L->begin = (uint32_t)t->nops;
    L->pre_b = c->pre_b <= L->begin ? c->pre_b : L->begin;
    L->end = ADV_NONE;
    c->cur_layer = (int)t->nlayers++;
    t->insts[inst].nlayers++;
    c->grouped_groups = c->flash_groups = 0;
    return 0;
}

/* mla_up_proj's region (Megatron-Core's qkv_up_proj_and_rope_apply, the
 * function MLASelfAttention checkpoints whole) starts after the last of its
 * inputs, made in this order (get_query_key_value_tensors): the q latent
 * (q_lora_rank), the kv latent (kv_lora_rank + qk_pos_emb_head_dim) and, with
 * sequence parallelism, the gathered k_pos_emb (mla_in_sizes). They are
 * recognised by size in that order, each once per layer (one that is not seen
 * is passed over for the next): a block PyTorch reports is the request
 * rounded to 512 B, or a cached block up to 1 MiB larger that was not split
 * (CUDACachingAllocator.cpp, should_split: kSmallSize). The region's first
 * allocation, linear_q_up_proj's fused q LayerNorm output
 * (TELayerNormColumnParallelLinear, s·b·q_lora_rank), has the q latent's very
 * size: matched by size alone it was taken for the input (the latent itself
 * in a larger cached block, or a second latent), left outside the region as a
 * saved input where the no_grad forward frees it. 12 MiB per layer and
 * microbatch on DeepSeek-V3 (0.9 GiB on the PP4 VPP4 replay's rank 0) were
 * predicted in mla_up_proj's peak and missing from its undo, so the run with
 * that advice priced every other setting 0.5% lower and advised a cheaper one. */
static void
mla_region_input(cap *c, adv_layer *L, const adv_alloc *x)
{
    if (c->mla_in_layer != c->cur_layer) {
        c->mla_in_layer = c->cur_layer;
        c->mla_in_next = 0;
    }
    for (int k = c->mla_in_next; k < 3; k++) {
        uint64_t want = c->mla_in_sizes[k];
        if (want && x->size >= want && x->size - want <= ((uint64_t)1 << 20)) {
            c->mla_in_next = k + 1;
            L->mla_up_b = x->a_pos + 1;
            return;
        }
    }
}

/* A trace whose window (RECOMPSHIM_WINDOW) opened mid-iteration: its first
 * recorded iteration's forward instances were counted from the window's
 * start, so the first took chunk 0 of the interleaved order. When that
 * iteration went on to the next one, its n recorded instances are its last n
 * of microbatches x virtual stages: each is renumbered (M x VP - n) later and
 * its layers take the chunk's global numbers and layer types (new_layer's
 * rules); when the trace ends in it, their chunk is unknown (-1: global layer
 * unknown, as for a placement not modelled). The attribution shifts the same
 * way (peak.c first_fwd_offset). */
static void
window_chunks(cap *c, const am_meta *m)
{
    adv_trace *t = c->t;
    int vp = c->cfg->vpp > 1 ? c->cfg->vpp : 1;
    if (!m->window_kind || vp <= 1 || !t->ninsts)
        return;
    int it0 = t->insts[0].iteration, n = 0, later = 0;
    for (size_t i = 0; i < t->ninsts; i++) {
        n += t->insts[i].iteration == it0;
        later |= t->insts[i].iteration != it0;
    }
    int all = c->microbatches * vp;
    if (all > 0 && n == all)
        return;
    int off = all > 0 && n < all && later ? all - n : -1;
    for (int i = 0; i < n; i++)
        t->insts[i].chunk = off < 0 ? -1 : adv_cfg_fwd_chunk(c->cfg, i + off, c->microbatches);
    for (size_t k = 0; k < t->nlayers; k++) {
        adv_layer *L = &t->layers[k];
        if (L->inst < 0 || L->inst >= n)
            continue;
        L->global_layer = global_layer_of(c, t->insts[L->inst].chunk, L->layer);
        L->moe = adv_cfg_is_moe_layer(c->cfg, L->global_layer >= 0 ? L->global_layer : L->layer);
    }
}

static void
on_nvte(cap *c, int cls)
{
    adv_trace *t = c->t;
    adv_layer *L = cur(c);
    /* a grouped GEMM's nested per-expert GEMMs belong to it */
    for (int i = 0; i < c->npend; i++)
        t->a[c->pend[i]].te = (uint8_t)cls;
    /* a standalone norm's output: TE allocates it before the call's first
     * nvte_* range (the workspace-size query) and its small workspace before
     * the second (the launch): the larger one is the output */
    if (cls == ADV_T_NORM && c->npend && !c->depth_attn && !c->depth_mlp) {
        uint32_t cand = c->pend[c->npend - 1];
        if (c->last_norm == ADV_NONE || t->a[cand].size > t->a[c->last_norm].size)
            c->last_norm = cand;
    }
    if (L && L->end == ADV_NONE && c->tl.phase == AM_PH_forward) {
        if (cls == ADV_T_GROUPED && c->depth_mlp && !c->depth_sub) {
            c->grouped_groups++;
            /* the experts' activation: every allocation between the fc1 and
             * fc2 grouped GEMMs but the last, fc2's output (TE's
             * GroupedLinear allocates it just before its GEMM): the fused
             * weighted SwiGLU makes one (its output), the unfused GLU of
             * TEGroupedMLP.bias_act_func its intermediates too (silu's
             * output, the linear half plus the offset, their product, the
             * product with the probabilities) */
            if (c->grouped_groups == 2 && c->npend >= 2) {
                L->moe_act = c->pend[0];
                L->moe_act_e = t->a[c->pend[c->npend - 2]].a_pos + 1;
                L->moe_act_discard = (uint32_t)t->nops;
            }
        }
        if (cls == ADV_T_ATTN && c->depth_attn) {
            if (c->depth_core)
                t->core_te_attn++;
            c->flash_groups++;
            if (c->flash_groups == 1 && L->mla && L->mla_q == ADV_NONE && c->npend >= 4) {
                L->mla_q = c->pend[c->npend - 4];
                L->mla_k = c->pend[c->npend - 3];
                L->mla_v = c->pend[c->npend - 2];
            }
            if (c->flash_groups == 2) {
                /* core attention's own saved state: the allocations of the
                 * second call (workspace, softmax stats) */
                for (int i = 0; i < c->npend; i++)
                    t->a[c->pend[i]].ctx |= ADV_C_ATTN2;
                L->core_e = (uint32_t)t->nops;
                if (L->core_b == ADV_NONE && c->npend)
                    L->core_b = t->a[c->pend[0]].a_pos;
            }
        }
    }
    c->npend = 0;
}

/* A Mamba layer ends where its frame's range closes, which the Python-frame
 * ranges only do at the first allocation outside it (model/pyframes.h): after
 * the next layer's Megatron range was pushed. So the next layer's start ends it
 * too; its in_proj norm is no standalone norm of the next layer. */
static void
close_mamba(cap *c)
{
    if (c->mamba_open < 0)
        return;
    adv_layer *L = &c->t->layers[c->mamba_open];
    if (L->end == ADV_NONE) {
        L->end = (uint32_t)c->t->nops;
        c->t->insts[L->inst].end = L->end;
    }
    c->mamba_open = -1;
    c->last_norm = ADV_NONE;
}

/* 1 when the range named s (n bytes) is TE's attention backward call: the
 * fused backends' call, or the softmax backward of TE's unfused attention
 * (nvte_scaled_softmax_backward, nvte_scaled_masked_softmax_backward, ...:
 * one per layer, inside its attention backward; megatron-core 0.19.2 + TE
 * 2.12.0, docs/validation/megatron-core.md) */
static int
is_attn_bwd(const char *s, uint32_t n)
{
    return prefix(s, n, "nvte_flash_attn_bwd") || prefix(s, n, "nvte_fused_attn_bwd") ||
           (prefix(s, n, "nvte_scaled_") && suffix(s, n, "softmax_backward"));
}

/* The live allocation of layer L's instance made last in op positions
 * [lo, hi) with `size` bytes (any size when 0), or ADV_NONE; its position to
 * *at. */
static uint32_t
last_live(const cap *c, const adv_layer *L, uint32_t lo, uint32_t hi, uint64_t size,
          uint32_t *at)
{
    const adv_trace *t = c->t;
    for (uint32_t p = hi; p > lo; p--) {
        int32_t v = t->ops[p - 1];
        if (v <= 0)
            continue;
        const adv_alloc *x = &t->a[(uint32_t)v - 1];
        if (x->inst == L->inst && !x->bwd && x->f_pos == ADV_NONE &&
            (!size || x->size == size)) {
            *at = p - 1;
            return (uint32_t)v - 1;
        }
    }
    return ADV_NONE;
}

/* An MLA layer's Q, K and V when its core attention starts and no TE
 * attention call named them (TE's unfused backend makes none): the tensors
 * the up-projection region (R_MLAUP, from the Python frame of
 * qkv_up_proj_and_rope_apply) returned, still live: V the last of the
 * value's bytes, K the last of the query's bytes before it, Q the one before
 * K (the fused RoPE of Megatron writes Q in place into the q projection's
 * output, so Q need not be next to K). Shapes from the configuration
 * (multi_latent_attention.py: query and key [s, b, n/TP, qk_head_dim +
 * qk_pos_emb_head_dim], value [s, b, n/TP, v_head_dim]); without the
 * configuration's dimensions, the three last live ones. Nothing found:
 * unchanged (the label's effect is then unknown, advisor_verdict.c). */
static void
mla_qkv_before_core(cap *c, adv_layer *L)
{
    if (L->mla_q != ADV_NONE || L->mla_up_b == ADV_NONE ||
        c->mla_up_layer != c->cur_layer)
        return;
    uint32_t hi = (uint32_t)c->t->nops, pv = 0, pk = 0, pq = 0;
    int sized = c->mla_qk_size && c->mla_v_size;
    uint32_t v = last_live(c, L, L->mla_up_b, hi, sized ? c->mla_v_size : 0, &pv);
    uint32_t k = v == ADV_NONE ? ADV_NONE
                               : last_live(c, L, L->mla_up_b, pv, sized ? c->mla_qk_size : 0, &pk);
    uint32_t q = k == ADV_NONE ? ADV_NONE
                               : last_live(c, L, L->mla_up_b, pk, sized ? c->mla_qk_size : 0, &pq);
    if (q == ADV_NONE)
        return;
    L->mla_q = q;
    L->mla_k = k;
    L->mla_v = v;
}

static int
on_push(cap *c, const am_event *ev, tl_thread *th)
{
    /* the backward thread's attention backward calls bound each layer's
     * backward: the replays of a layer's core attention and discarded
     * tensors come after the next layer's call and before its own. One call
     * is TE's pair of ranges (the workspace-size query, then the launch:
     * docs/te-call-order.md), no other nvte_* range between them */
    if (th->role == AM_ROLE_BACKWARD && te_class(ev->name, ev->name_len) != ADV_T_NONE) {
        int ab = is_attn_bwd(ev->name, ev->name_len);
        adv_trace *t = c->t;
        if (ab && !c->bwd_in_attn) {
            if (grow((void **)&t->abwd, &t->capabwd, t->nabwd + 1, sizeof *t->abwd) < 0)
                return -1;
            t->abwd[t->nabwd++] = (uint32_t)t->nops;
        }
        c->bwd_in_attn = ab;
        return 0;
    }
    if (th->role != AM_ROLE_MAIN)
        return 0;
    const char *s = ev->name;
    uint32_t n = ev->name_len;
    int cls = te_class(s, n);
    if (cls != ADV_T_NONE) {
        c->t->te_calls++;
        on_nvte(c, cls);
        return 0;
    }
    int reg = region_of(s, n);
    adv_trace *t = c->t;
    if ((reg == R_ATTN || reg == R_MAMBA) && c->tl.phase != AM_PH_eval)
        close_mamba(c);
    if (reg == R_ATTN && c->tl.phase != AM_PH_eval) {
        t->megatron_ranges = 1;
        if (new_layer(c) < 0)
            return -1;
        adv_layer *L = cur(c);
        if (L) {
            L->attn_b = (uint32_t)t->nops;
            if (c->last_norm != ADV_NONE) {
                L->in_ln = c->last_norm;
                t->a[c->last_norm].layer = (int16_t)L->layer;
                t->a[c->last_norm].inst = L->inst;
                L->begin = t->a[c->last_norm].a_pos;
                if (L->pre_b > L->begin)
                    L->pre_b = L->begin;
            }
        }
        c->last_norm = ADV_NONE;
        c->depth_attn++;
    } else if (reg == R_QKV) {
        c->depth_qkv++;
    } else if (reg == R_MLAUP) {
        adv_layer *L = cur(c);
        if (L && L->mla && L->end == ADV_NONE && c->tl.phase == AM_PH_forward &&
            L->mla_q == ADV_NONE && c->mla_up_layer != c->cur_layer) {
            L->mla_up_b = (uint32_t)t->nops;
            c->mla_up_layer = c->cur_layer;
        }
    } else if (reg == R_CORE || reg == R_MLACORE) {
        adv_layer *L = cur(c);
        if (c->tl.phase == AM_PH_forward)
            t->core_regions++;
        if (L && L->mla && L->end == ADV_NONE && c->tl.phase == AM_PH_forward)
            mla_qkv_before_core(c, L);
        if (L && L->core_b == ADV_NONE)
            L->core_b = (uint32_t)t->nops;
        if (reg == R_CORE)
            c->depth_core++;
    } else if (reg == R_MLP) {
        adv_layer *L = cur(c);
        if (L) {
            L->mlp_b = (uint32_t)t->nops;
            if (c->last_norm != ADV_NONE)
                L->pre_ln = c->last_norm;
        }
        c->last_norm = ADV_NONE;
        c->depth_mlp++;
    } else if (reg == R_SUB) {
        c->depth_sub++;
    } else if (reg == R_BDA || reg == R_MLPBDA) {
        c->depth_bda++;
    } else if (reg == R_MAMBA && c->tl.phase != AM_PH_eval) {
        t->megatron_ranges = 1;
        if (new_layer(c) < 0)
            return -1;
        adv_layer *L = cur(c);
        if (L) {
            L->begin = (uint32_t)t->nops;
            if (L->pre_b > L->begin)
                L->pre_b = L->begin;
            c->mamba_open = c->cur_layer;
        }
    }
    if (reg != R_NONE)
        c->npend = 0;
    if (reg != R_ATTN && reg != R_MLP)
        c->last_norm = ADV_NONE;
    return 0;
}

static void
on_pop(cap *c, tl_thread *th, uint32_t domain)
{
    if (th->role != AM_ROLE_MAIN || !th->depth)
        return;
    size_t i = th->depth;
    while (i > 0 && th->stack[i - 1].domain_id != domain)
        i--;
    if (!i)
        return;
    const tl_frame *f = &th->stack[i - 1];
    int reg = region_of(f->name, f->len);
    adv_layer *L = cur(c);
    adv_trace *t = c->t;
    /* a layer's own code starts after the last range; a range made from a
     * Python frame inside a layer's frame range (model/pyframes.h: the
     * input norm in TransformerLayer._forward_attention) is the layer's own
     * code, as it is without frames */
    int in_layer = 0;
    if (f->domain_id == AM_PYF_DOMAIN_ID)
        for (size_t k = 0; k + 1 < i; k++)
            in_layer |= (th->stack[k].m.flags & AM_CF_LAYER) != 0;
    if (te_class(f->name, f->len) == ADV_T_NONE && !in_layer)
        c->pre_b = (uint32_t)t->nops;
    switch (reg) {
    case R_ATTN:
        if (c->depth_attn)
            c->depth_attn--;
        if (L)
            L->attn_e = (uint32_t)t->nops;
        break;
    case R_QKV:
        if (c->depth_qkv)
            c->depth_qkv--;
        break;
    case R_CORE:
    case R_MLACORE:
        if (reg == R_CORE && c->depth_core)
            c->depth_core--;
        if (L && c->flash_groups < 2)
            L->core_e = (uint32_t)t->nops;
        break;
    case R_MLP:
        if (c->depth_mlp)
            c->depth_mlp--;
        if (L)
            L->mlp_e = (uint32_t)t->nops;
        break;
    case R_SUB:
        if (c->depth_sub)
            c->depth_sub--;
        break;
    case R_MLPBDA:
        if (c->depth_bda)
            c->depth_bda--;
        if (L) {
            L->end = (uint32_t)t->nops;
            t->insts[L->inst].end = L->end;
        }
        break;
    case R_BDA:
        if (c->depth_bda)
            c->depth_bda--;
        break;
    case R_MAMBA:
        close_mamba(c);
        break;
    default:
        break;
    }
}

/* The timeline's TE nearest-range rule resolved a pending allocation: its
 * boundary and (the optimizer's lazily made state) its phase. */
static void
on_resolve(void *ctx, const tl_pending *p, uint8_t boundary, uint8_t phase)
{
    cap *c = ctx;
    live_ent *e = live_get(&c->keys, 0, p->addr);
    if (!e || !(p->levels & AM_LVL_TENSOR) || e->seq - 1 >= c->t->na)
        return;
    adv_alloc *x = &c->t->a[e->seq - 1];
    if (x->f_pos != ADV_NONE)
        return;
    x->boundary = boundary;
    if (phase != AM_PH_COUNT)
        x->phase = phase;
}

static int
op(cap *c, int32_t v)
{
    adv_trace *t = c->t;
    if (grow((void **)&t->ops, &t->capops, t->nops + 1, sizeof *t->ops) < 0)
        return -1;
    t->ops[t->nops++] = v;
    return 0;
}

/* The Megatron region flags (ADV_C_*) of the ranges open on a thread: a
 * backward thread's checkpoint replay re-emits its forward's ranges (full
 * recompute every layer range, mlp the mlp.forward.* ones; [M] in
 * docs/sources.md), so a replayed allocation carries its forward twin's range
 * path. */
static uint8_t
stack_ctx(const tl_thread *th)
{
    static const uint8_t flags[] = {
        [R_ATTN] = ADV_C_ATTN | ADV_C_MEGA, [R_CORE] = ADV_C_CORE | ADV_C_MEGA,
        [R_MLP] = ADV_C_MLP | ADV_C_MEGA, [R_SUB] = ADV_C_SUBMLP | ADV_C_MEGA,
        [R_BDA] = ADV_C_BDA | ADV_C_MEGA, [R_MLPBDA] = ADV_C_BDA | ADV_C_MEGA,
        [R_MAMBA] = ADV_C_MEGA, [R_QKV] = 0, [R_MLAUP] = 0, [R_MLACORE] = 0,
    };
    uint8_t ctx = 0;
    for (size_t i = 0; i < th->depth; i++)
        ctx |= flags[region_of(th->stack[i].name, th->stack[i].len)];
    return ctx;
}

/* Checkpoint loading (AM_PYLOAD_*): the reader's verdict over the Python
 * stack, else an NVTX range on the thread whose name ends in
 * "load_checkpoint" (a job that wraps Megatron's load_checkpoint in a range,
 * as it may wrap the save: docs/analysis.md). */
static uint8_t
load_kind(const am_event *ev, const tl_thread *th)
{
    static const char suffix[] = "load_checkpoint";
    const size_t ls = sizeof suffix - 1;
    if (ev->py_load)
        return ev->py_load;
    for (size_t i = 0; th && i < th->depth; i++) {
        const tl_frame *f = &th->stack[i];
        if (f->len >= ls && memcmp(f->name + f->len - ls, suffix, ls) == 0)
            return AM_PYLOAD_COPY;
    }
    return AM_PYLOAD_NONE;
}

/* x's Python stack (ev->pychain) into t->py, each distinct stack once (the
 * reader keeps one chain per stack for the whole pass); -1 out of memory */
static int
py_intern(cap *c, const am_event *ev, adv_alloc *x)
{
    adv_trace *t = c->t;
    if (c->npyh == 0 || c->pyused * 2 >= c->npyh) {
        /* (re)hash: at most half full, by the chain's address */
        size_t nn = c->npyh ? c->npyh * 2 : 256;
        struct pyslot *h = calloc(nn, sizeof *h);
        if (!h)
            return -1;
        for (size_t i = 0; i < c->npyh; i++)
            if (c->pyh[i].chain) {
                size_t k = ((uintptr_t)c->pyh[i].chain >> 3) & (nn - 1);
                while (h[k].chain)
                    k = (k + 1) & (nn - 1);
                h[k] = c->pyh[i];
            }
        free(c->pyh);
        c->pyh = h;
        c->npyh = nn;
    }
    size_t k = ((uintptr_t)ev->pychain >> 3) & (c->npyh - 1);
    while (c->pyh[k].chain && c->pyh[k].chain != ev->pychain)
        k = (k + 1) & (c->npyh - 1);
    if (!c->pyh[k].chain) {
        if (grow((void **)&t->py, &t->cappyf, t->npyf + ev->pychain_len, sizeof *t->py) < 0)
            return -1;
        memcpy(t->py + t->npyf, ev->pychain, ev->pychain_len * sizeof *t->py);
        c->pyh[k].chain = ev->pychain;
        c->pyh[k].off = (uint32_t)t->npyf;
        t->npyf += ev->pychain_len;
        c->pyused++;
    }
    x->py = c->pyh[k].off;
    x->npy = ev->pychain_len;
    return 0;
}

static int
on_alloc(cap *c, const am_event *ev, tl_thread *th, uint64_t seq)
{
    adv_trace *t = c->t;
    am_attr a = tl_attr(&c->tl, ev, seq);
    /* private pools keep their segments: bytes allocated in capture windows */
    if (c->capture && (ev->levels & AM_LVL_DEVICE)) {
        c->graph_live += ev->size;
        t->graph_pool_bytes = c->graph_live;
    }
    if (!(ev->levels & AM_LVL_TENSOR))
        return 0;
    if (grow((void **)&t->a, &t->capa, t->na + 1, sizeof *t->a) < 0)
        return -1;
    uint32_t id = (uint32_t)t->na++;
    adv_alloc *x = &t->a[id];
    memset(x, 0, sizeof *x);
    x->size = ev->size;
    x->a_pos = (uint32_t)t->nops;
    x->f_pos = ADV_NONE;
    x->phase = a.phase;
    x->boundary = a.boundary;
    x->bwd = th->role == AM_ROLE_BACKWARD;
    x->iteration = c->tl.iteration;
    x->graph = c->capture > 0;
    x->load = load_kind(ev, th);
    t->load_seen |= x->load != 0;
    t->py_seen |= ev->pystack != NULL;
    if (ev->pychain && ev->pychain_len && py_intern(c, ev, x) < 0)
        return -1;
    x->inst = -1;
    x->layer = -1;
    adv_layer *L = cur(c);
    if (th->role == AM_ROLE_MAIN && (a.phase == AM_PH_forward) && L && L->end == ADV_NONE) {
        x->inst = L->inst;
        x->layer = (int16_t)L->layer;
    }
    if (th->role == AM_ROLE_MAIN) {
        uint8_t ctx = 0;
        if (c->depth_attn)
            ctx |= ADV_C_ATTN | ADV_C_MEGA;
        if (c->depth_core)
            ctx |= ADV_C_CORE | ADV_C_MEGA;
        if (c->depth_mlp)
            ctx |= ADV_C_MLP | ADV_C_MEGA;
        if (c->depth_sub)
            ctx |= ADV_C_SUBMLP | ADV_C_MEGA;
        if (c->depth_bda)
            ctx |= ADV_C_BDA | ADV_C_MEGA;
        if (c->depth_qkv)
            ctx |= ADV_C_QKV;
        x->ctx = ctx;
        /* the up-projection's range (from its Python frame) bounds the region
         * where it was recorded; else its inputs, matched by size */
        if (L && L->mla && (ctx & ADV_C_ATTN) && L->mla_q == ADV_NONE && x->inst == L->inst &&
            c->mla_up_layer != c->cur_layer)
            mla_region_input(c, L, x);
        /* TE allocates just before its call: the pending allocations are the
         * latest ones of this phase (model construction's parameters, made
         * with no TE call after them, once filled the list, and the first
         * forward's standalone norm took a parameter for its output: MLA's
         * first layer began in construction, its embedding and norm counted
         * as code of the job's own outside Megatron's ranges) */
        if (c->npend && t->a[c->pend[c->npend - 1]].phase != x->phase)
            c->npend = 0;
        if (c->npend == 64) {
            memmove(c->pend, c->pend + 1, 63 * sizeof c->pend[0]);
            c->npend = 63;
        }
        c->pend[c->npend++] = id;
    } else if (th->role == AM_ROLE_BACKWARD) {
        x->ctx = stack_ctx(th);
    }
    if (a.phase == AM_PH_backward_replay)
        t->replay_bytes += ev->size;
    if (km_put(&c->keys, ev->addr, id) < 0)
        return -1;
    if (th->role == AM_ROLE_MAIN)
        c->last_main_pos = (uint32_t)t->nops + 1;
    if (th->role != AM_ROLE_MAIN || a.phase != AM_PH_forward)
        c->pre_b = (uint32_t)t->nops + 1;
    return op(c, (int32_t)(id + 1));
}

static int
on_free(cap *c, const am_event *ev, tl_thread *th)
{
    adv_trace *t = c->t;
    if (!(ev->levels & AM_LVL_TENSOR))
        return 0;
    uint32_t id;
    if (!km_take(&c->keys, ev->addr, &id))
        return 0;
    t->a[id].f_pos = (uint32_t)t->nops;
    t->a[id].fbwd = th->role == AM_ROLE_BACKWARD;
    if (th->role == AM_ROLE_MAIN)
        c->last_main_pos = (uint32_t)t->nops + 1;
    if (th->role != AM_ROLE_MAIN || c->tl.phase != AM_PH_forward)
        c->pre_b = (uint32_t)t->nops + 1;
    return op(c, -(int32_t)(id + 1));
}

/* one build's state around the capture (cap): the scratch rank the timeline
 * attributes into, the device-level bytes per address (for max(device live -
 * reserved)) and the phase before the current event */
typedef struct build {
    cap c;
    am_rank scratch;
    keymap dkeys;             /* device-level address -> index into dsz */
    uint64_t *dsz;            /* device-level allocation sizes, bytes */
    size_t ndsz, capdsz;
    uint64_t seq;             /* events read so far */
    int prev_phase;           /* timeline phase before the current event */
    int prev_iteration;       /* timeline iteration before the current event */
} build;

/* the capture's and the timeline's initial state for rank r; MLA's input
 * sizes (bytes) from the configuration */
static void
build_init(build *b, am_rank *r, const adv_cfg *cfg, adv_trace *t)
{
    memset(b, 0, sizeof *b);
    cap *c = &b->c;
    c->t = t;
    c->cfg = cfg;
    c->r = r;
    c->cur_layer = -1;
    c->mla_in_layer = -1;
    c->last_norm = ADV_NONE;
    c->mamba_open = -1;
    c->lpc = adv_cfg_chunk_layers(cfg, r->stage);
    c->microbatches = adv_cfg_microbatches(cfg);
    uint64_t beta = (cfg->bf16 || cfg->fp16) ? 2 : 4;
    uint64_t sq = (uint64_t)(cfg->seq / (cfg->cp > 0 ? cfg->cp : 1));
    uint64_t ts = cfg->sp ? (uint64_t)cfg->tp : 1, mbs = (uint64_t)cfg->mbs;
    c->mla_in_sizes[0] = beta * (sq / ts) * mbs * (uint64_t)cfg->q_lora;
    c->mla_in_sizes[1] = beta * (sq / ts) * mbs * (uint64_t)(cfg->kv_lora + cfg->qk_pos);
    c->mla_in_sizes[2] = ts > 1 ? beta * sq * mbs * (uint64_t)cfg->qk_pos : 0;
    uint64_t heads = cfg->tp > 0 ? (uint64_t)(cfg->heads / cfg->tp) : (uint64_t)cfg->heads;
    c->mla_qk_size = beta * sq * mbs * heads * (uint64_t)(cfg->qk_head + cfg->qk_pos);
    c->mla_v_size = beta * sq * mbs * heads * (uint64_t)cfg->v_head;
    c->mla_up_layer = -1;
    /* what the timeline's post-process rule needs (output layer, loss) */
    b->scratch.layers_per_chunk = r->layers_per_chunk;
    b->scratch.layers_per_stage = r->layers_per_stage;
    b->scratch.stage = r->stage;
    b->scratch.pp = r->pp;
    tl_init(&c->tl, r->src->meta.pid, &b->scratch);
    c->tl.resolve = on_resolve;
    c->tl.resolve_ctx = c;
    c->tl.no_spans = 1; /* scratch iterations: their spans are never read */
    b->scratch.opt_state_preexisting = r->opt_state_preexisting;
    b->prev_phase = AM_PH_init;
    b->prev_iteration = -1;
    live_init(&b->dkeys);
    live_init(&c->keys);
}

/* frees what build_init and the read made, except the trace */
static void
build_fini(build *b)
{
    live_fini(&b->dkeys);
    free(b->dsz);
    live_fini(&b->c.keys);
    free(b->c.pyh);
    tl_fini(&b->c.tl);
    for (size_t i = 0; i < b->scratch.niters; i++)
        free(b->scratch.iters[i].phases);
    free(b->scratch.iters);
}

/* a device-level allocation: its bytes join the device's live bytes (an
 * allocation that cannot be recorded is skipped) */
static void
device_alloc(build *b, const am_event *ev)
{
    if (grow((void **)&b->dsz, &b->capdsz, b->ndsz + 1, sizeof *b->dsz) == 0 &&
        km_put(&b->dkeys, ev->addr ^ ((uint64_t)ev->space << 63), (uint32_t)b->ndsz) == 0) {
        b->dsz[b->ndsz++] = ev->size;
        b->c.dev_live += ev->size;
    }
}

/* a device-level free: its bytes leave the device's live bytes */
static void
device_free(build *b, const am_event *ev)
{
    uint32_t id;
    if (km_take(&b->dkeys, ev->addr ^ ((uint64_t)ev->space << 63), &id))
        b->c.dev_live -= b->dsz[id];
}

/* the rank's fatal OOM event: where it happened, the request and the bytes
 * (tensor reserved, device live) at that moment */
static void
record_oom(build *b, const am_event *ev)
{
    cap *c = &b->c;
    adv_trace *t = c->t;
    am_attr oa = tl_attr(&c->tl, ev, 0);
    t->oom = 1;
    t->oom_pos = (uint32_t)t->nops;
    t->oom_phase = oa.phase;
    t->oom_boundary = oa.boundary;
    t->oom_lib = ev->lib;
    t->oom_in_capture = c->capture > 0;
    /* the rank's OOM (peak.c): for a page of expandable segments the
     * allocator's request, its pages at least, not the one page that failed */
    t->oom_request = c->r->oom && c->r->oom->t_ns == ev->t_ns ? c->r->oom->requested : ev->size;
    t->oom_reserved = c->reserved;
    t->oom_device_live = c->dev_live;
    if (c->capture)
        t->graph_capture_oom = 1;
    /* recorded after the byte limit: the ranges, the reserved bytes and the
     * live set here are the last recorded event's, not the OOM's (issue 14
     * E): none is the OOM's, so no rule reads them as such */
    if (am_past_limit(&c->r->src->meta, ev->t_ns)) {
        t->oom_past_limit = 1;
        t->oom_phase = AM_PH_unknown;
        t->oom_boundary = AM_BD_unknown;
        t->oom_reserved = 0;
        t->oom_device_live = 0;
    }
}

/* one event the timeline has seen, by kind: ranges, device memory (tensor
 * allocations become records and ops), the OOM, graph capture; -1 out of
 * memory */
static int
capture_event(build *b, const am_event *ev, tl_thread *th)
{
    cap *c = &b->c;
    switch ((am_ev_kind)ev->kind) {
    case AM_EV_RANGE_PUSH:
        return on_push(c, ev, th);
    case AM_EV_ALLOC:
        /* past the byte limit: the retry of an OOM's request, no live-set news */
        if (ev->mem != AM_MEM_DEVICE || am_past_limit(&c->r->src->meta, ev->t_ns))
            return 0;
        if (ev->levels & AM_LVL_DEVICE)
            device_alloc(b, ev);
        if (ev->has_totals)
            c->reserved = ev->total_reserved;
        return on_alloc(c, ev, th, b->seq);
    case AM_EV_FREE:
        if (ev->levels & AM_LVL_DEVICE)
            device_free(b, ev);
        if (ev->has_totals)
            c->reserved = ev->total_reserved;
        return on_free(c, ev, th);
    case AM_EV_OOM:
        if (!c->t->oom && c->r->oom && ev->t_ns == c->r->oom->t_ns) {
            record_oom(b, ev);
            c->t->oom_load = load_kind(ev, th);
        }
        return 0;
    case AM_EV_GRAPH_BEGIN:
        c->capture++;
        return 0;
    case AM_EV_GRAPH_END:
        if (c->capture)
            c->capture--;
        return 0;
    default:
        return 0;
    }
}

/* after an event: the bytes outside PyTorch, whether the backward replays,
 * and the iteration bookkeeping from the phase change */
static void
note_event(build *b, const am_event *ev, const tl_thread *th)
{
    cap *c = &b->c;
    adv_trace *t = c->t;
    /* outside PyTorch = device live - reserved, where PyTorch just reported its
     * reserved bytes (a new segment shows at the device level first) */
    if ((ev->kind == AM_EV_ALLOC || ev->kind == AM_EV_FREE) && ev->has_totals &&
        (ev->levels & AM_LVL_TENSOR) && c->dev_live > c->reserved &&
        c->dev_live - c->reserved > t->max_outside)
        t->max_outside = c->dev_live - c->reserved;
    if (th && th->role == AM_ROLE_BACKWARD && th->depth &&
        th->stack[th->depth - 1].replay)
        t->replays = 1;
    /* the first optimizer step ends when the next phase starts */
    if (b->prev_phase == AM_PH_optimizer_state_init && c->tl.phase != b->prev_phase &&
        t->opt_state_init_end == ADV_NONE)
        t->opt_state_init_end = (uint32_t)t->nops;
    if ((b->prev_phase == AM_PH_optimizer || b->prev_phase == AM_PH_optimizer_state_init ||
         b->prev_phase == AM_PH_param_sync) &&
        c->tl.phase == AM_PH_forward)
        t->last_complete_iter = c->tl.iteration - 1;
    /* an optimizer step without a range, inferred by the timeline when the
     * next iteration's forward began (timeline.c infer_optimizer_step) */
    if (b->prev_phase == AM_PH_grad_sync && c->tl.phase == AM_PH_forward &&
        c->tl.out->opt_inferred && c->tl.iteration > b->prev_iteration) {
        t->last_complete_iter = c->tl.iteration - 1;
        t->optimizer_seen = 1;
        if (t->opt_state_init_end == ADV_NONE && c->tl.out->opt_init_iteration >= 0)
            t->opt_state_init_end = (uint32_t)t->nops;
    }
    b->prev_iteration = c->tl.iteration;
    if (c->tl.phase == AM_PH_optimizer || c->tl.phase == AM_PH_optimizer_state_init)
        t->optimizer_seen = 1;
    b->prev_phase = c->tl.phase;
}

/* the source's events through the timeline into the capture, until its end
 * or the fatal OOM (then the trace is truncated: what follows is teardown);
 * am_next's last result (1 when stopped at the OOM), -1 on error */
static int
read_events(build *b, am_source *src)
{
    cap *c = &b->c;
    am_event ev;
    int rc;
    while ((rc = am_next(src, &ev)) == 1) {
        b->seq++;
        if (c->t->oom) {
            c->t->trunc = 1;
            break;
        }
        tl_thread *th = tl_thread_get(&c->tl, ev.tid);
        if (!th)
            return -1;
        if (ev.kind == AM_EV_RANGE_POP)
            on_pop(c, th, ev.domain_id);
        if (tl_event(&c->tl, &ev) < 0)
            return -1;
        th = tl_thread_get(&c->tl, ev.tid);
        if (capture_event(b, &ev, th) < 0)
            return -1;
        note_event(b, &ev, th);
    }
    return rc;
}

/* tensor bytes live at the OOM; bytes of init allocations never freed */
static void
trace_totals(adv_trace *t)
{
    uint64_t live = 0;
    for (size_t p = 0; p < t->nops; p++) {
        int32_t v = t->ops[p];
        if (t->oom && p == t->oom_pos)
            t->oom_allocated = live;
        live = v > 0 ? live + t->a[v - 1].size : live - t->a[-v - 1].size;
    }
    if (t->oom && t->oom_pos >= t->nops)
        t->oom_allocated = live;
    for (size_t i = 0; i < t->na; i++) {
        if (t->a[i].phase == AM_PH_init && t->a[i].f_pos == ADV_NONE)
            t->init_bytes += t->a[i].size;
        /* a resume's load made the Adam moments (Megatron's init_state_fn) */
        if (!t->optimizer_seen && t->a[i].load == AM_PYLOAD_STATE && t->a[i].f_pos == ADV_NONE)
            t->optimizer_seen = 2;
    }
}

/* instances without a finished last layer end at their last op */
static void
close_instances(adv_trace *t)
{
    for (size_t i = 0; i < t->nlayers; i++) {
        adv_layer *L = &t->layers[i];
        if (L->end == ADV_NONE)
            L->end = (uint32_t)t->nops;
        adv_inst *in = &t->insts[L->inst];
        if (L->end > in->end)
            in->end = L->end;
    }
}

/* Forward state (adv_alloc.state): a tensor the main thread made inside a
 * forward instance, outside any CUDA-graph capture, that is never freed in
 * the trace, or only at teardown (by the main thread, after every
 * allocation), although the trace saw that instance's backward free what it
 * had saved (an allocation of the instance freed on the backward thread), or
 * the instance belongs to an iteration whose optimizer step the trace saw
 * finish (t->last_complete_iter: the step runs after every microbatch's
 * backward). The second is the only evidence when the instance saved nothing
 * of its own: full recompute with one layer per model chunk (the interleaved
 * schedule) saves only the checkpoint's input, made before the instance's
 * first layer, and sends the output to the next stage, freed in forward; TE's
 * cuBLAS workspace, made in the first chunk's first forward, was then taken
 * for an activation that recompute makes again (dense-vpp, full[block,1]). A
 * tensor saved for backward dies with its autograd node; one that outlives
 * its instance's completed backward is held by a module or a hook:
 * Transformer Engine's FP8 weight copies and scaling state (made at the first
 * microbatch, kept for the run, docs/megasim.md "FP8 (derivation)"), TE's
 * cuBLAS workspace, a lazily made buffer, a leak. Recompute does not remove
 * it (a checkpointed forward under no_grad still makes it), and its bytes say
 * nothing about a microbatch's shape. An instance cut by the trace's end (an
 * OOM before its backward) marks nothing, and neither does the one a fatal
 * OOM cut in its backward (the instance whose backward freed last): its
 * backward never completed, so what it still holds is activations the
 * backward had not reached yet (bigcode 1B at 8192 tokens cut in iteration
 * 1's backward: 5.75 GiB of them taken for state, kept by every candidate). */
static void
mark_forward_state(adv_trace *t)
{
    uint8_t *seen = calloc(t->ninsts ? t->ninsts : 1, 1);
    if (!seen)
        return; /* unmarked: every never-freed tensor stays an activation, as before */
    uint32_t last_alloc = 0, last_bf = 0;
    int32_t cut = -1;
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (x->inst >= 0 && (size_t)x->inst < t->ninsts && x->fbwd && x->f_pos != ADV_NONE) {
            seen[x->inst] = 1;
            if (x->f_pos >= last_bf) {
                last_bf = x->f_pos;
                cut = x->inst;
            }
        }
        if (x->a_pos > last_alloc)
            last_alloc = x->a_pos;
    }
    for (size_t k = 0; k < t->ninsts; k++)
        if (t->insts[k].iteration >= 0 && t->insts[k].iteration <= t->last_complete_iter)
            seen[k] = 1;
    if (t->trunc && t->oom && cut >= 0 &&
        (t->oom_phase == AM_PH_backward || t->oom_phase == AM_PH_backward_replay))
        seen[cut] = 0;
    for (size_t q = 0; q < t->na; q++) {
        adv_alloc *x = &t->a[q];
        x->state = x->inst >= 0 && (size_t)x->inst < t->ninsts && seen[x->inst] && !x->bwd &&
                   !x->graph &&
                   (x->f_pos == ADV_NONE || (!x->fbwd && x->f_pos > last_alloc));
    }
    free(seen);
}

int
adv_trace_build(am_rank *r, const adv_cfg *cfg, adv_trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->last_complete_iter = -1;
    t->opt_state_init_end = ADV_NONE;
    am_source *src = r->src;
    if (am_rewind(src) < 0) {
        snprintf(err, errlen, "%s", src->error);
        return -1;
    }
    build b;
    build_init(&b, r, cfg, t);
    int rc = read_events(&b, src);
    if (rc == 0 && (b.prev_phase == AM_PH_optimizer || b.prev_phase == AM_PH_param_sync) &&
        !t->trunc)
        t->last_complete_iter = b.c.tl.iteration;
    if (rc == 0 && !src->meta.closed)
        t->trunc = 1;
    t->moe = b.c.tl.moe;      /* the MoE dispatches' token counts (moe_dispatch.c) */
    /* its layer as the report numbers it (the rank's placement) */
    t->moe.layer = am_rank_layer(r, t->moe.layer, t->moe.fwd, t->moe.first);
    if (rc == 0)
        window_chunks(&b.c, &src->meta);
    build_fini(&b);
    if (rc < 0) {
        snprintf(err, errlen, "%s", src->error[0] ? src->error : "advisor: out of memory");
        adv_trace_free(t);
        return -1;
    }
    trace_totals(t);
    close_instances(t);
    mark_forward_state(t);
    return 0;
}

/* RECOMP_ADVISOR_DEBUG=1: the layer table on stderr */
void adv_trace_debug(const adv_trace *t);
void
adv_trace_debug(const adv_trace *t)
{
    fprintf(stderr, "advisor: %zu allocs, %zu ops, %zu layers, %zu insts, ranges %d, trunc %d, "
                    "last complete %d, max_outside %llu, oom %d pos %u alloc %llu res %llu\n",
            t->na, t->nops, t->nlayers, t->ninsts, t->megatron_ranges, t->trunc,
            t->last_complete_iter, (unsigned long long)t->max_outside, t->oom, t->oom_pos,
            (unsigned long long)t->oom_allocated, (unsigned long long)t->oom_reserved);
    if (t->oom)
        fprintf(stderr, "advisor: oom phase %s boundary %s request %llu\n",
                am_phase_name(t->oom_phase), am_boundary_name(t->oom_boundary),
                (unsigned long long)t->oom_request);
    for (size_t i = 0; i < t->nlayers && i < 40; i++) {
        const adv_layer *L = &t->layers[i];
        fprintf(stderr, "  inst %d layer %d g %d moe %d pre %u [%u,%u) attn [%u,%u) core [%u,%u) mlp [%u,%u) "
                        "in_ln %u pre_ln %u moe_act %u@%u mla %u,%u,%u b %u\n",
                L->inst, L->layer, L->global_layer, L->moe, L->pre_b, L->begin, L->end, L->attn_b, L->attn_e,
                L->core_b, L->core_e, L->mlp_b, L->mlp_e, L->in_ln, L->pre_ln, L->moe_act,
                L->moe_act_discard, L->mla_q, L->mla_k, L->mla_v, L->mla_up_b);
    }
    const char *d = getenv("RECOMP_ADVISOR_DEBUG");
    if (d && d[0] == '2')
        for (size_t p = 0; p < t->nops; p++) {
            int32_t v = t->ops[p];
            const adv_alloc *x = &t->a[(v > 0 ? v : -v) - 1];
            fprintf(stderr, "  op %zu %c%d %.1fM (%llu) bwd %d fbwd %d inst %d layer %d ph %s bd %u ctx %x it %d a %u f %u\n",
                    p, v > 0 ? '+' : '-', (v > 0 ? v : -v) - 1, (double)x->size / 1048576.0, (unsigned long long)x->size,
                    x->bwd, x->fbwd, x->inst, x->layer, am_phase_name(x->phase), x->boundary, x->ctx,
                    x->iteration, x->a_pos, x->f_pos);
        }
}
