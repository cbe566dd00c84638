/* advisor_counterfactual.c: rewrite a rank's tensor-level op stream with a
 * recompute setting's real semantics and sweep it again (DESIGN.md §4.2).
 *
 * Units. A setting becomes units, each owning allocations by identity (an
 * allocation belongs to at most one unit: full > checkpoint-style >
 * discard-style, so nested labels never add savings):
 *
 *   checkpoint-style (core_attn, mlp, moe, shared_experts, full): the region's
 *     allocations that live on into backward (freed on the backward thread at
 *     or after the region's backward starts) are internals: freed at the
 *     region's forward exit; at the start of the region's backward the whole
 *     region is replayed (its transients allocated and freed again, its
 *     internals allocated and kept until their original free). Allocations of
 *     the region freed by later regions' backward are its output (kept by the
 *     consumer).
 *   discard-style (layernorm, moe_act, mla_up_proj): the output is freed at
 *     the discard point (after the consumer ran) and allocated again when the
 *     hook on the hook tensor fires: the moment the backward reaches the
 *     discard point; mla_up_proj also runs its region under no_grad (its
 *     saved internals are freed at its exit and replayed).
 *
 * "The backward reaches forward position P" (R(P)): just after the last
 * backward free of the instance's allocations made after P (the autograd
 * tape runs in reverse); when nothing made after P lives into backward, the
 * start of the instance's backward job (after the main thread's last op before
 * its first backward free).
 *
 * The sweep covers the whole recorded trace (optimizer included). When the
 * trace stops early, the last complete iteration is projected onto the next
 * one with the persistent bytes it created (optimizer state) present from the
 * start; before any optimizer step the predicted optimizer state is added.
 */
#include <stdlib.h>
#include <string.h>

#include "advisor.h"

enum { C_T = 1, C_O, C_I, C_D };

typedef struct unit {
    uint32_t b, e;            /* region ops to replay */
    uint32_t R;               /* replay position, ADV_NONE never */
    int32_t inst;
} unit;

typedef struct ins {
    uint32_t pos;
    int kind;                 /* 0 discard, 1 replay */
    uint32_t v;               /* alloc id or unit index */
} ins;

typedef struct cf {
    const adv_trace *t;
    uint32_t *owner;
    uint8_t *cls;
    unit *u;
    size_t nu, capu;
    ins *in;
    size_t nin, capin;
    /* survivors per instance, sorted by a_pos, with suffix max of f_pos */
    uint32_t **sv_a, **sv_f;
    size_t *nsv;
    uint32_t *bwd_start;
} cf;

static int
push_unit(cf *c, unit u)
{
    if (c->nu == c->capu) {
        size_t n = c->capu ? c->capu * 2 : 64;
        unit *q = realloc(c->u, n * sizeof *q);
        if (!q)
            return -1;
        c->u = q;
        c->capu = n;
    }
    c->u[c->nu++] = u;
    return 0;
}

static int
push_ins(cf *c, uint32_t pos, int kind, uint32_t v)
{
    if (pos == ADV_NONE)
        return 0;
    if (c->nin == c->capin) {
        size_t n = c->capin ? c->capin * 2 : 256;
        ins *q = realloc(c->in, n * sizeof *q);
        if (!q)
            return -1;
        c->in = q;
        c->capin = n;
    }
    c->in[c->nin++] = (ins){pos, kind, v};
    return 0;
}

static int
survivor(const adv_alloc *x)
{
    return x->inst >= 0 && !x->bwd && x->fbwd && x->f_pos != ADV_NONE;
}

static int
prep(cf *c)
{
    const adv_trace *t = c->t;
    size_t ni = t->ninsts;
    c->sv_a = calloc(ni ? ni : 1, sizeof *c->sv_a);
    c->sv_f = calloc(ni ? ni : 1, sizeof *c->sv_f);
    c->nsv = calloc(ni ? ni : 1, sizeof *c->nsv);
    c->bwd_start = malloc((ni ? ni : 1) * sizeof *c->bwd_start);
    if (!c->sv_a || !c->sv_f || !c->nsv || !c->bwd_start)
        return -1;
    for (size_t i = 0; i < t->na; i++)
        if (survivor(&t->a[i]) && (size_t)t->a[i].inst < ni)
            c->nsv[t->a[i].inst]++;
    for (size_t k = 0; k < ni; k++) {
        c->sv_a[k] = malloc((c->nsv[k] + 1) * sizeof **c->sv_a);
        c->sv_f[k] = malloc((c->nsv[k] + 1) * sizeof **c->sv_f);
        if (!c->sv_a[k] || !c->sv_f[k])
            return -1;
        c->nsv[k] = 0;
    }
    for (size_t i = 0; i < t->na; i++) {
        const adv_alloc *x = &t->a[i];
        if (survivor(x) && (size_t)x->inst < ni) {
            size_t k = (size_t)x->inst;
            c->sv_a[k][c->nsv[k]] = x->a_pos;
            c->sv_f[k][c->nsv[k]] = x->f_pos;
            c->nsv[k]++;
        }
    }
    for (size_t k = 0; k < ni; k++) {
        uint32_t mx = 0, mn = ADV_NONE;
        for (size_t j = c->nsv[k]; j-- > 0;) {
            if (c->sv_f[k][j] > mx)
                mx = c->sv_f[k][j];
            if (c->sv_f[k][j] < mn)
                mn = c->sv_f[k][j];
            c->sv_f[k][j] = mx; /* suffix max */
        }
        /* start of the instance's backward job */
        uint32_t bs = ADV_NONE;
        if (mn != ADV_NONE) {
            uint32_t p = mn;
            while (p > 0) {
                int32_t v = t->ops[p - 1];
                const adv_alloc *x = &t->a[(v > 0 ? v : -v) - 1];
                int bwd = v > 0 ? x->bwd : x->fbwd;
                if (!bwd)
                    break;
                p--;
            }
            bs = p;
        }
        c->bwd_start[k] = bs;
    }
    return 0;
}

/* R(P) for instance k */
static uint32_t
reach(const cf *c, int32_t k, uint32_t P)
{
    if (k < 0 || (size_t)k >= c->t->ninsts)
        return ADV_NONE;
    size_t n = c->nsv[k], lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->sv_a[k][mid] < P)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n)
        return c->sv_f[k][lo] + 1;
    return c->bwd_start[k];
}

/* A checkpoint-style unit over ops [b, e) of instance k; member(x) selects
 * which allocations of the region it owns. */
typedef int (*member_fn)(const adv_alloc *x, const adv_layer *L);

static int
m_all(const adv_alloc *x, const adv_layer *L)
{
    (void)x;
    (void)L;
    return 1;
}

static int
m_core(const adv_alloc *x, const adv_layer *L)
{
    (void)L;
    return (x->ctx & ADV_C_ATTN2) != 0;
}

static int
m_shared(const adv_alloc *x, const adv_layer *L)
{
    (void)L;
    return (x->ctx & ADV_C_SUBMLP) != 0;
}

static int
checkpoint_unit(cf *c, int32_t k, uint32_t b, uint32_t e, const adv_layer *L, member_fn mf,
                int unfused_core)
{
    const adv_trace *t = c->t;
    if (b == ADV_NONE || e == ADV_NONE || e <= b)
        return 0;
    uint32_t R = reach(c, k, e);
    uint32_t ui = (uint32_t)c->nu;
    int any = 0;
    uint32_t last_surv = ADV_NONE;
    for (uint32_t p = b; p < e; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        const adv_alloc *x = &t->a[id];
        if (x->inst != k || x->bwd || c->owner[id] != ADV_NONE || !mf(x, L))
            continue;
        c->owner[id] = ui;
        any = 1;
        if (x->f_pos != ADV_NONE && x->f_pos < e) {
            c->cls[id] = C_T;
        } else if (x->f_pos != ADV_NONE && R != ADV_NONE && x->f_pos < R) {
            c->cls[id] = C_O;
        } else if (x->f_pos == ADV_NONE || x->fbwd) {
            c->cls[id] = C_I;
            last_surv = id;
        } else {
            c->cls[id] = C_O;
        }
    }
    if (unfused_core && last_surv != ADV_NONE)
        c->cls[last_surv] = C_O; /* the attention output stays with linear_proj */
    if (!any)
        return 0;
    for (uint32_t p = b; p < e; p++) {
        int32_t v = t->ops[p];
        if (v > 0 && c->owner[v - 1] == ui && c->cls[v - 1] == C_I)
            if (push_ins(c, e, 0, (uint32_t)v - 1) < 0)
                return -1;
    }
    if (push_unit(c, (unit){b, e, R, k}) < 0)
        return -1;
    return push_ins(c, R, 1, ui);
}

/* discard-style: output `id` freed at `disc`, allocated again at R(disc) */
static int
discard_unit(cf *c, uint32_t id, uint32_t disc)
{
    const adv_trace *t = c->t;
    if (id == ADV_NONE || disc == ADV_NONE || c->owner[id] != ADV_NONE)
        return 0;
    const adv_alloc *x = &t->a[id];
    if (x->f_pos != ADV_NONE && x->f_pos <= disc)
        return 0;
    uint32_t R = reach(c, x->inst, disc);
    if (x->f_pos != ADV_NONE && R != ADV_NONE && x->f_pos < R)
        return 0; /* freed before the hook fires anyway */
    uint32_t ui = (uint32_t)c->nu;
    c->owner[id] = ui;
    c->cls[id] = C_D;
    if (push_unit(c, (unit){x->a_pos, x->a_pos + 1, R, x->inst}) < 0)
        return -1;
    if (push_ins(c, disc, 0, id) < 0)
        return -1;
    return push_ins(c, R, 1, ui);
}

/* mla_up_proj: region [b, V] under no_grad, Q/K/V discarded after attention */
static int
mla_unit(cf *c, const adv_layer *L)
{
    const adv_trace *t = c->t;
    if (L->mla_q == ADV_NONE || L->mla_v == ADV_NONE || L->mla_up_b == ADV_NONE ||
        L->core_e == ADV_NONE)
        return 0;
    uint32_t b = L->mla_up_b, qpos = t->a[L->mla_q].a_pos, e = t->a[L->mla_v].a_pos + 1;
    uint32_t disc = L->core_e;
    uint32_t R = reach(c, L->inst, disc);
    uint32_t ui = (uint32_t)c->nu;
    for (uint32_t p = b; p < e; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        const adv_alloc *x = &t->a[id];
        if (x->inst != L->inst || x->bwd || c->owner[id] != ADV_NONE)
            continue;
        c->owner[id] = ui;
        if (id == L->mla_q || id == L->mla_k || id == L->mla_v) {
            c->cls[id] = C_D;
            if (push_ins(c, disc, 0, id) < 0)
                return -1;
        } else if (x->f_pos != ADV_NONE && x->f_pos < e) {
            c->cls[id] = C_T;
        } else if (x->f_pos != ADV_NONE && R != ADV_NONE && x->f_pos < R) {
            c->cls[id] = C_O;
        } else {
            c->cls[id] = C_I;
            if (push_ins(c, qpos, 0, id) < 0)
                return -1;
        }
    }
    if (push_unit(c, (unit){b, e, R, L->inst}) < 0)
        return -1;
    return push_ins(c, R, 1, ui);
}

static int
ins_cmp(const void *a, const void *b)
{
    const ins *x = a, *y = b;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind - y->kind; /* discards first */
    return x->v < y->v ? -1 : x->v > y->v;
}

static void
cf_free(cf *c)
{
    if (c->sv_a)
        for (size_t k = 0; k < c->t->ninsts; k++) {
            free(c->sv_a[k]);
            free(c->sv_f[k]);
        }
    free(c->sv_a);
    free(c->sv_f);
    free(c->nsv);
    free(c->bwd_start);
    free(c->owner);
    free(c->cls);
    free(c->u);
    free(c->in);
}

static int
build_units(cf *c, const adv_cfg *cfg, const adv_setting *s)
{
    const adv_trace *t = c->t;
    if (s->full_method) {
        /* per instance: groups of n layers (uniform) or the first n (block) */
        size_t i = 0;
        while (i < t->nlayers) {
            const adv_layer *L = &t->layers[i];
            size_t j = i;
            while (j < t->nlayers && t->layers[j].inst == L->inst)
                j++;
            size_t nl = j - i, n = (size_t)s->full_n;
            if (s->full_method == 1) {
                for (size_t g = 0; g < nl; g += n) {
                    size_t last = g + n < nl ? g + n : nl;
                    if (checkpoint_unit(c, L->inst, t->layers[i + g].begin,
                                        t->layers[i + last - 1].end, &t->layers[i + g], m_all, 0) < 0)
                        return -1;
                }
            } else {
                for (size_t g = 0; g < n && g < nl; g++)
                    if (checkpoint_unit(c, L->inst, t->layers[i + g].begin, t->layers[i + g].end,
                                        &t->layers[i + g], m_all, 0) < 0)
                        return -1;
            }
            i = j;
        }
        return 0;
    }
    unsigned m = s->labels;
    for (size_t i = 0; i < t->nlayers; i++) {
        const adv_layer *L = &t->layers[i];
        if ((m & (1u << ADV_L_moe)) && L->moe)
            if (checkpoint_unit(c, L->inst, L->mlp_b, L->mlp_e, L, m_all, 0) < 0)
                return -1;
        if ((m & (1u << ADV_L_mlp)) && !L->moe)
            if (checkpoint_unit(c, L->inst, L->mlp_b, L->mlp_e, L, m_all, 0) < 0)
                return -1;
        if ((m & (1u << ADV_L_shared_experts)) && L->moe && !cfg->shared_overlap)
            if (checkpoint_unit(c, L->inst, L->mlp_b, L->mlp_e, L, m_shared, 0) < 0)
                return -1;
        if (m & (1u << ADV_L_core_attn)) {
            if (cfg->fused_attn)
                checkpoint_unit(c, L->inst, L->core_b, L->core_e, L, m_core, 0);
            else
                checkpoint_unit(c, L->inst, L->core_b, L->core_e, L, m_all, 1);
        }
    }
    for (size_t i = 0; i < t->nlayers; i++) {
        const adv_layer *L = &t->layers[i];
        if ((m & (1u << ADV_L_mla_up_proj)) && L->mla)
            if (mla_unit(c, L) < 0)
                return -1;
        if ((m & (1u << ADV_L_moe_act)) && L->moe && L->moe_act != ADV_NONE)
            if (discard_unit(c, L->moe_act, L->moe_act_discard) < 0)
                return -1;
        if (m & (1u << ADV_L_layernorm)) {
            if (discard_unit(c, L->in_ln, L->attn_e) < 0)
                return -1;
            if (discard_unit(c, L->pre_ln, L->mlp_e) < 0)
                return -1;
        }
    }
    return 0;
}

uint64_t
adv_counterfactual(const adv_trace *t, const adv_cfg *cfg, const adv_setting *s,
                   uint64_t extra_state, uint8_t *phase_out)
{
    cf c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.owner = malloc((t->na ? t->na : 1) * sizeof *c.owner);
    c.cls = calloc(t->na ? t->na : 1, 1);
    uint8_t *alive = calloc(t->na ? t->na : 1, 1); /* 1 live, 2 discarded */
    uint64_t best = 0;
    uint8_t best_phase = AM_PH_other;
    if (!c.owner || !c.cls || !alive || prep(&c) < 0)
        goto out;
    memset(c.owner, 0xff, (t->na ? t->na : 1) * sizeof *c.owner);
    if ((s->labels || s->full_method) && build_units(&c, cfg, s) < 0)
        goto out;
    qsort(c.in, c.nin, sizeof *c.in, ins_cmp);

    /* projection window: the last complete iteration, or the last iteration
     * when no optimizer step happened */
    int proj_it = -2;
    uint64_t D = 0;
    uint32_t wb = ADV_NONE, we = ADV_NONE;
    if (t->trunc && t->last_complete_iter >= 0)
        proj_it = t->last_complete_iter;
    else if (extra_state) {
        int mx = -1;
        for (size_t i = 0; i < t->na; i++)
            if (t->a[i].iteration > mx)
                mx = t->a[i].iteration;
        proj_it = mx;
    }
    if (proj_it >= -1) {
        for (size_t i = 0; i < t->na; i++) {
            const adv_alloc *x = &t->a[i];
            if (x->iteration == proj_it && wb == ADV_NONE)
                wb = x->a_pos;
            if (x->iteration > proj_it && we == ADV_NONE && wb != ADV_NONE)
                we = x->a_pos;
        }
        if (we == ADV_NONE)
            we = (uint32_t)t->nops;
        if (t->trunc && t->last_complete_iter >= 0)
            for (size_t i = 0; i < t->na; i++) {
                const adv_alloc *x = &t->a[i];
                if (x->a_pos >= wb && x->a_pos < we && (x->f_pos == ADV_NONE || x->f_pos >= we))
                    D += x->size;
            }
        D += extra_state;
    }
    uint64_t live = 0, dalloc = 0;
    size_t k = 0;
    uint32_t *outs = NULL;
    size_t nouts = 0, capouts = 0;
    for (uint32_t p = 0; p <= t->nops; p++) {
        for (; k < c.nin && c.in[k].pos == p; k++) {
            const ins *n = &c.in[k];
            if (n->kind == 0) {
                uint32_t id = n->v;
                if (alive[id] == 1) {
                    live -= t->a[id].size;
                    alive[id] = 2;
                }
                continue;
            }
            /* replay of unit n->v */
            const unit *u = &c.u[n->v];
            nouts = 0;
            for (uint32_t q = u->b; q < u->e; q++) {
                int32_t v = t->ops[q];
                uint32_t id = (uint32_t)(v > 0 ? v : -v) - 1;
                if (c.owner[id] != n->v)
                    continue;
                const adv_alloc *x = &t->a[id];
                if (v > 0) {
                    live += x->size;
                    uint64_t proj = live;
                    if (p >= wb && p < we)
                        proj += D - dalloc;
                    if (proj > best) {
                        best = proj;
                        best_phase = AM_PH_backward_replay;
                    }
                    if (c.cls[id] == C_I || c.cls[id] == C_D) {
                        alive[id] = 1;
                    } else if (c.cls[id] == C_O || (c.cls[id] == C_T && x->f_pos >= u->e)) {
                        if (nouts == capouts) {
                            size_t nc = capouts ? capouts * 2 : 64;
                            uint32_t *qq = realloc(outs, nc * sizeof *qq);
                            if (!qq)
                                goto out2;
                            outs = qq;
                            capouts = nc;
                        }
                        outs[nouts++] = id;
                    }
                } else if (c.cls[id] == C_T) {
                    live -= x->size;
                }
            }
            for (size_t z = 0; z < nouts; z++)
                live -= t->a[outs[z]].size;
        }
        if (p == t->nops)
            break;
        int32_t v = t->ops[p];
        uint32_t id = (uint32_t)(v > 0 ? v : -v) - 1;
        const adv_alloc *x = &t->a[id];
        if (v > 0) {
            live += x->size;
            alive[id] = 1;
            if (p >= wb && p < we && (x->f_pos == ADV_NONE || x->f_pos >= we))
                dalloc += x->size;
            uint64_t proj = live;
            if (p >= wb && p < we)
                proj += D - dalloc;
            if (proj > best) {
                best = proj;
                best_phase = x->phase;
            }
        } else if (alive[id] == 1) {
            live -= x->size;
            alive[id] = 0;
        } else {
            alive[id] = 0;
        }
    }
out2:
    free(outs);
out:
    cf_free(&c);
    free(alive);
    if (phase_out)
        *phase_out = best_phase;
    return best;
}
