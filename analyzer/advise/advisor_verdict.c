/* advisor_verdict.c: the advisor's driver and its one verdict per job
 * (docs/architecture.md, docs/advisor.md).
 *
 *   budget per rank = capacity (trace header or --budget) - memory outside
 *                     PyTorch on that rank - headroom (default 2 GiB)
 *   triage (advisor_triage.c) --> findings; a finding whose fix alone makes
 *       every rank fit at no compute cost, or that recompute cannot fix, is
 *       the primary code
 *   candidates: every label the model has and the configuration allows
 *       (single labels, then combinations), full recompute uniform/block with
 *       one global recompute_num_layers 1..layers per stage (one family, its
 *       best member shown); each swept on every rank
 *   verdict: the valid candidate with the least replay cost that fits every
 *       rank (R:SELECTIVE[labels] / R:FULL[method,n]); else OK:FITS when the
 *       job already fits
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "grow.h"

void adv_trace_debug(const adv_trace *t);

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)

const char *
adv_effect_name(int e)
{
    switch (e) {
    case ADV_E_FITS: return "fits";
    case ADV_E_INSUFFICIENT: return "insufficient";
    case ADV_E_INEFFECTIVE: return "ineffective";
    case ADV_E_COUNTER: return "counter-productive";
    case ADV_E_MARGINAL: return "marginal";
    }
    return "?";
}

void
adv_verdict_free(adv_verdict *v)
{
    free(v->findings);
    free(v->cands);
    for (size_t i = 0; i < v->nhot_functions; i++)
        free(v->hot_functions[i]);
    free(v->hot_functions);
    free(v->hot);
    memset(v, 0, sizeof *v);
}

/* a - b as a signed byte difference, saturated at INT64_MIN/INT64_MAX: byte
 * figures read from a damaged summary can exceed any device (the summary's
 * checksum covers transport, not plausibility), and a difference must not
 * overflow. */
static int64_t
sdiff(uint64_t a, uint64_t b)
{
    if (a >= b)
        return a - b > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(a - b);
    return b - a > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)(b - a);
}

static void
labels_str(unsigned m, char *buf, size_t n, const char *sep)
{
    size_t o = 0;
    buf[0] = 0;
    for (int l = 0; l < ADV_NLABELS; l++)
        if (m & (1u << l))
            o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%s", o ? sep : "",
                                  adv_label_name(l));
}

static void
name_setting(const adv_setting *s, adv_cand *c)
{
    static const char *const meth[] = {"", "uniform", "block"};
    if (s->full_method) {
        snprintf(c->name, sizeof c->name, "full[%s,%d]", meth[s->full_method], s->full_n);
        snprintf(c->code, sizeof c->code, "R:FULL[%s,%d]", meth[s->full_method], s->full_n);
    } else if (!s->labels) {
        snprintf(c->name, sizeof c->name, "none");
        snprintf(c->code, sizeof c->code, "OK:FITS");
    } else {
        char l[80];
        labels_str(s->labels, l, sizeof l, ",");
        snprintf(c->name, sizeof c->name, "selective[%s]", l);
        snprintf(c->code, sizeof c->code, "R:SELECTIVE[%s]", l);
    }
    c->labels = s->labels;
    c->full_method = s->full_method;
    c->full_n = s->full_n;
}

static int
add_cand(adv_verdict *v, const adv_cand *c)
{
    adv_cand *q = realloc(v->cands, (v->ncands + 1) * sizeof *q);
    if (!q)
        return -1;
    v->cands = q;
    q[v->ncands++] = *c;
    return 0;
}

typedef struct eval_ctx {
    adv_trace *tr;            /* the measured traces */
    adv_trace *t0;            /* recompute on: the traces without it, else NULL */
    const adv_setting *active;
    uint64_t *extra;
    uint64_t base_max;        /* measured (current setting) */
    uint64_t ref_max;         /* without recompute: what effects are judged against */
    int stage_layers;
    adv_rank_part *const *parts; /* merge: each rank's part, the traces absent; else NULL */
} eval_ctx;

/* Rank i's counterfactual of setting s (undone: on the trace with the
 * recorded recompute undone): from its trace (adv_counterfactual_reserved),
 * or under merge from its part's table (a missing entry is marked in the
 * part and reads 0; adv_run_merge then fails). */
static uint64_t
cf_at(const adv_trace *t, adv_rank_part *const *parts, size_t i, int undone, const adv_cfg *c,
      const adv_setting *s, uint64_t extra, uint8_t *ph, uint64_t lim, uint64_t *res,
      uint64_t *step)
{
    if (!parts)
        return adv_counterfactual_model(t, c, s, extra, ph, lim, res, step);
    const adv_cf *f = adv_part_find(parts[i], undone, s);
    if (!f) {
        parts[i]->missing = 1;
        *ph = 0;
        *res = 0;
        if (step)
            *step = 0;
        return 0;
    }
    *ph = f->phase;
    *res = f->reserved;
    if (step)
        *step = f->step;
    return f->peak;
}

static int
same_setting(const adv_setting *a, const adv_setting *b)
{
    if (a->full_method || b->full_method)
        return a->full_method == b->full_method && a->full_n == b->full_n;
    return a->labels == b->labels;
}

static int64_t
small_of(uint64_t ref)
{
    return (int64_t)(ref / 200 > ((uint64_t)64 << 20) ? ref / 200 : ((uint64_t)64 << 20));
}

/* 1/ADV_PRED_ERR: the prediction error bound charged to a predicted (not
 * measured) setting's reserved peak before it is said to fit (2%) */
#define ADV_PRED_ERR 50

/* the device's limit for PyTorch's segments on rank i: capacity - outside
 * PyTorch (bytes; 0 unknown) */
static uint64_t
limit_of(const adv_verdict *v, size_t i)
{
    return v->capacity[i] > v->outside[i] ? v->capacity[i] - v->outside[i] : 0;
}

/* A full-recompute setting whose layer groups checkpoint forward code outside
 * Megatron's layer ranges (a module of the job's own: adv_foreign_bytes, at
 * least 1 MiB on some rank), predicted from a trace recorded without full
 * recompute: that code's replay was never seen, and replayed Python may do more
 * than its forward (R02: a user's module allocates 7 GiB only when replayed).
 * The prediction is unverified: a fit becomes marginal (recommended only when
 * nothing else fits, with "confirm with a run"), and the reason says why. */
static void
unverified_replay(const adv_verdict *v, const eval_ctx *e, const adv_setting *s, adv_cand *c)
{
    if (!s->full_method || (e->active && e->active->full_method) || c->effect != ADV_E_FITS)
        return;
    uint64_t most = 0;
    for (size_t i = 0; i < v->nranks; i++) {
        uint64_t b = 0;
        if (e->parts) { /* merge: the rank's part carries it (no traces) */
            const adv_cf *f = adv_part_find(e->parts[i], e->t0 != NULL, s);
            b = f ? f->foreign : 0;
        } else {
            b = adv_foreign_bytes(e->t0 ? &e->t0[i] : &e->tr[i], s);
        }
        if (b > most)
            most = b;
    }
    if (most < ((uint64_t)1 << 20))
        return;
    c->effect = ADV_E_MARGINAL;
    snprintf(c->reason, sizeof c->reason,
             "unverified: a layer group checkpoints %s of forward allocations made outside "
             "Megatron's layer ranges (code of the job's own) whose replay this trace, recorded "
             "without full recompute, never shows; a replay may do more than its forward",
             GB(most));
}

/* A predicted fit whose margin on some rank, after the 2% error bound, is
 * smaller than its reserved peak's uncertainty from the rewrite (adv_cand
 * step: one more segment for the largest block its replays allocate, or the
 * model serves from its cache after the rewrite leaves the recorded stream,
 * adv_counterfactual_model): whether the real run opens that segment depends
 * on bytes and an order the rewrite does not know exactly, so the fit is
 * unverified (marginal, recommended after every clear fit, "confirm with a
 * run"). Measured on the real Megatron-Core job (llama-pp2, docs/advisor.md
 * "Reserved uncertainty"): the rewrite under-predicts allocated bytes by up to
 * 1.9% (tensors the checkpoint keeps as its inputs: 7 MiB per layer and
 * microbatch there), and the run opens one more 256 MiB segment than the
 * model (-4.9% reserved for selective[core_attn], -10% for full[uniform,1]). */
/* The reserved peak's uncertainty from the rewrite under the allocator the
 * trace recorded (bytes), from the model's step for the largest replayed
 * block (adv_cache_step: its segment, native; its pages, expandable).
 * Native: one more segment for that block (cudaMalloc of the request
 * rounded). With expandable segments (adv_cfg alloc_expandable) there are no
 * per-request segments: PyTorch keeps one segment per stream and pool and,
 * when no free block holds a request, maps pages at its end for the bytes
 * its free tail lacks (c10/cuda/CUDACachingAllocator.cpp, Note [Expandable
 * Segments] and try_allocate_expandable_block: 2 MiB pages for the small
 * pool, 20 MiB for the large); a run that holds a little more than the
 * rewrite maps those bytes (inside the 2% bound) rounded up to one page.
 * Checked against megasim executing candidates with expandable segments
 * (docs/advisor.md "Reserved uncertainty"). */
static uint64_t
reserved_step(const adv_verdict *v, uint64_t step)
{
    const uint64_t large_page = (uint64_t)20 << 20;
    if (!v->cfg.alloc_expandable)
        return step;
    return step > large_page ? large_page : step; /* a small request's step is its page */
}

static void
unverified_segment(const adv_verdict *v, adv_cand *c)
{
    if (c->effect != ADV_E_FITS)
        return;
    int worst = -1;
    uint64_t short_by = 0, step = 0;
    for (size_t i = 0; i < v->nranks; i++) {
        uint64_t need = c->reserved[i] + c->reserved[i] / ADV_PRED_ERR + c->step[i];
        if (c->step[i] && need > v->budget[i] && need - v->budget[i] > short_by) {
            short_by = need - v->budget[i];
            worst = v->rank_id[i];
            step = c->step[i];
        }
    }
    if (worst < 0)
        return;
    c->effect = ADV_E_MARGINAL;
    if (v->cfg.alloc_expandable)
        snprintf(c->reason, sizeof c->reason,
                 "unverified reserved: rank %d fits with the 2%% bound, but not by one more "
                 "%s page of its expandable segment (%s short), which the run maps when it "
                 "holds a little more than the rewrite predicts",
                 worst, GB(step), GB(short_by));
    else
        snprintf(c->reason, sizeof c->reason,
                 "unverified reserved: rank %d fits with the 2%% bound, but not by one more %s "
                 "segment (%s short), which the run opens when it holds a little more than the "
                 "rewrite or its free blocks differ (real Megatron-Core: -4.9%% to -16.3%%)",
                 worst, GB(step), GB(short_by));
}

/* A fit on a rank whose trace ended before the allocator's cache was seen at
 * a steady state (adv_cache_history) rests on a cache term that is a lower
 * bound: the fit is unverified (marginal, recommended after every setting
 * that fits clearly, with "confirm with a run"); one that fits only without
 * the 2% error bound says so too and comes last. */
static void
unverified_cache(const adv_verdict *v, adv_cand *c)
{
    if (!v->cache_short || (c->effect != ADV_E_FITS && c->effect != ADV_E_MARGINAL) ||
        !strncmp(c->reason, "unverified", 10))
        return;
    snprintf(c->reason, sizeof c->reason, "unverified cache (a lower bound)%s: %.170s",
             c->effect == ADV_E_MARGINAL ? ", fits only without the 2% bound" : "",
             v->cache_why);
    c->effect = ADV_E_MARGINAL;
}

/* A setting whose validity depends on a configuration value that was not
 * recorded (add_bias_linear for `mlp` on dense layers: ADV_BIAS_MLP_REASON;
 * unknown when no Megatron configuration was read) is neither allowed nor
 * rejected silently: a fit becomes marginal with "unverified" (recommended
 * only when nothing else fits, with "confirm with a run"), and any other
 * candidate's reason says so too. The current setting (cur), measured, ran. */
static void
unverified_validity(const adv_verdict *v, const adv_setting *s, int cur, adv_cand *c)
{
    if (cur || v->cfg.bias_linear != -1 || !(s->labels & 1u << ADV_L_mlp) || !c->valid ||
        !(adv_model_labels(&v->cfg) & 1u << ADV_L_mlp))
        return;
    static const char why[] =
        "add_bias_linear was not recorded; with it (Megatron's default) mlp recompute never "
        "ends: pass --disable-bias-linear or confirm";
    size_t l = strlen(c->reason);
    if (c->effect == ADV_E_FITS)
        snprintf(c->reason, sizeof c->reason, "unverified validity: %s", why);
    else if (c->effect == ADV_E_MARGINAL && strncmp(c->reason, "unverified", 10) != 0)
        snprintf(c->reason, sizeof c->reason,
                 "unverified validity, fits only without the 2%% bound: %s", why);
    else
        snprintf(c->reason + l, sizeof c->reason - l, "; validity unverified: %s", why);
    if (c->effect == ADV_E_FITS)
        c->effect = ADV_E_MARGINAL;
}

/* evaluate one setting on every rank: the current setting is the measured
 * trace; with recompute on, every other setting rewrites the trace without it.
 * It fits when its reserved peak (allocated + the cache its own timeline
 * leaves, advisor_cache.c) is within the budget on every rank. */
static void
evaluate(adv_verdict *v, const eval_ctx *e, const adv_setting *s, adv_cand *c)
{
    memset(c, 0, sizeof *c);
    name_setting(s, c);
    c->fails_rank = -1;
    int64_t worst_over = INT64_MIN;
    int over_exact = 0;       /* a rank over its budget without the error bound */
    int cur = e->t0 && same_setting(s, e->active);
    for (size_t i = 0; i < v->nranks; i++) {
        uint8_t ph = 0;
        uint64_t lim = limit_of(v, i);
        if (cur)
            c->peak[i] = cf_at(&e->tr[i], e->parts, i, 0, &v->cfg, &(adv_setting){0},
                               e->extra[i], &ph, lim, &c->reserved[i], NULL);
        else
            c->peak[i] = cf_at(e->t0 ? &e->t0[i] : &e->tr[i], e->parts, i, e->t0 != NULL,
                               &v->cfg, s, e->extra[i], &ph, lim, &c->reserved[i],
                               &c->step[i]);
        c->step[i] = reserved_step(v, c->step[i]);
        if (c->peak[i] > c->max_peak)
            c->max_peak = c->peak[i];
        if (getenv("RECOMP_ADVISOR_DEBUG"))
            fprintf(stderr, "advisor: eval %s rank %d peak %llu reserved %llu (%s)\n",
                    c->name, v->rank_id[i], (unsigned long long)c->peak[i],
                    (unsigned long long)c->reserved[i], am_phase_name(ph));
        /* a prediction carries the model's error bound (2%, what the accuracy
         * tests hold it to against megasim executing the setting); the current
         * setting is measured */
        uint64_t need = cur ? c->reserved[i] : c->reserved[i] + c->reserved[i] / ADV_PRED_ERR;
        int64_t over = sdiff(need, v->budget[i]);
        over_exact |= c->reserved[i] > v->budget[i];
        if (over > 0 && over > worst_over) {
            worst_over = over;
            c->fails_rank = v->rank_id[i];
            c->fails_phase = ph;
        }
    }
    c->saving = sdiff(e->ref_max, c->max_peak);
    c->cost = (s->labels || s->full_method) ? adv_replay_cost(&v->cfg, s, e->stage_layers) : 0;
    c->valid = adv_valid(&v->cfg, s, c->reason, sizeof c->reason);
    int64_t small = small_of(e->ref_max);
    /* one rule for every candidate, the current setting included: one that
     * peaks above the job without recompute (ref) adds bytes, whether or
     * not it fits (its reason says which) */
    int adds = (s->labels || s->full_method) && c->saving < -(int64_t)((uint64_t)16 << 20);
    if (adds)
        c->effect = ADV_E_COUNTER;
    else if (c->fails_rank < 0)
        c->effect = ADV_E_FITS;
    else if (!over_exact && c->saving >= small)
        c->effect = ADV_E_MARGINAL;
    else if (c->saving < -(int64_t)((uint64_t)16 << 20))
        c->effect = ADV_E_COUNTER;
    else if (c->saving < small && (s->labels || s->full_method))
        c->effect = ADV_E_INEFFECTIVE;
    else
        c->effect = ADV_E_INSUFFICIENT;
    unverified_replay(v, e, s, c);
    unverified_cache(v, c);
    unverified_segment(v, c);
    if (!c->reason[0]) {
        if (adds && c->fails_rank < 0)
            snprintf(c->reason, sizeof c->reason,
                     "peaks %s above the job without recompute (%s against %s): it adds "
                     "bytes; within every budget%s",
                     GB((uint64_t)-c->saving), GB(c->max_peak), GB(e->ref_max),
                     cur ? " (the current setting, measured)" : "");
        else if (c->effect == ADV_E_FITS)
            snprintf(c->reason, sizeof c->reason, "every rank within its budget%s",
                     cur ? " (the current setting, measured)" : "");
        else if (c->effect == ADV_E_MARGINAL)
            snprintf(c->reason, sizeof c->reason,
                     "within every budget, but rank %d only inside the prediction's 2%% error "
                     "bound (%s short with it, in %s)",
                     c->fails_rank, GB((uint64_t)worst_over), am_phase_name(c->fails_phase));
        else
            snprintf(c->reason, sizeof c->reason,
                     "rank %d over its budget by %s (reserved, in %s)%s",
                     c->fails_rank, GB((uint64_t)worst_over), am_phase_name(c->fails_phase),
                     cur ? " (the current setting, measured)" : "");
    }
    unverified_validity(v, s, cur, c);
}

static const adv_cand *
find_cand(const adv_verdict *v, const adv_setting *s)
{
    for (size_t k = 0; k < v->ncands; k++) {
        adv_setting x = {v->cands[k].labels, v->cands[k].full_method, v->cands[k].full_n};
        if (same_setting(&x, s))
            return &v->cands[k];
    }
    return NULL;
}

/* evaluate and list a setting once; the listed candidate */
static const adv_cand *
try_setting(adv_verdict *v, const eval_ctx *e, const adv_setting *s)
{
    const adv_cand *have = find_cand(v, s);
    if (have)
        return have;
    adv_cand c;
    evaluate(v, e, s, &c);
    if (add_cand(v, &c) < 0)
        return NULL;
    return &v->cands[v->ncands - 1];
}

uint64_t
adv_predict_optimizer_state(const adv_cfg *c, uint64_t init_bytes, char *note, size_t n)
{
    /* init holds params (2 B/param bf16/fp16), the fp32 main-grad buffer (4),
     * the fp32 main params (4/d with the distributed optimizer, else 4):
     * [P] in docs/sources.md; Adam adds m and v like the main params (4+4, or
     * 2+2 with bf16 moments), sharded like them */
    double d = c->dist_opt ? (c->dp > 0 ? c->dp : 1) : 1;
    /* --optimizer-cpu-offload: only the share not offloaded keeps its fp32
     * copy and fp32 moments on the device (advisor_triage.c offload_lever) */
    double dev = c->optimizer_cpu_offload ? 1.0 - c->offload_fraction : 1.0;
    double per = (c->bf16 || c->fp16 ? 2 : 4) + 4 + 4 * dev / d;
    double P = (double)init_bytes / per;
    double mv = (c->exp_avg_bf16 && !c->optimizer_cpu_offload ? 4 : 8) * dev;
    uint64_t st = (uint64_t)(P * mv / d);
    snprintf(note, n,
             "the trace ends before the first optimizer step: %s of Adam state (exp_avg + "
             "exp_avg_sq, %.0f B/param%s) predicted from %s of parameter/grad/main-param bytes "
             "(%.2fG params at %.2f B/param) is added to every prediction",
             GB(st), mv / d, c->dist_opt ? ", distributed optimizer" : "", GB(init_bytes),
             P / 1e9, per);
    return st;
}

static int
stage_layers_of(const adv_cfg *c)
{
    return adv_cfg_layers_per_chunk(c) * (c->vpp > 1 ? c->vpp : 1);
}

static void
config_diff(const adv_verdict *v, const adv_cand *c, char *out, size_t n, char *change,
            size_t cn)
{
    char l[128], lq[160];
    if (c->full_method) {
        const char *m = c->full_method == 1 ? "uniform" : "block";
        snprintf(change, cn,
                 "--recompute-granularity full --recompute-method %s --recompute-num-layers %d",
                 m, c->full_n);
        snprintf(out, n,
                 "%s\ncfg.model.recompute_granularity = \"full\"\ncfg.model.recompute_method = "
                 "\"%s\"\ncfg.model.recompute_num_layers = %d",
                 change, m, c->full_n);
    } else if (!c->labels) {
        snprintf(change, cn, "remove --recompute-granularity/--recompute-method/"
                             "--recompute-num-layers/--recompute-modules (no recompute)");
        snprintf(out, n, "%s\ncfg.model.recompute_granularity = None", change);
    } else {
        labels_str(c->labels, l, sizeof l, " ");
        labels_str(c->labels, lq, sizeof lq, "\", \"");
        snprintf(change, cn, "--recompute-granularity selective --recompute-modules %s", l);
        snprintf(out, n,
                 "%s\ncfg.model.recompute_granularity = \"selective\"\n"
                 "cfg.model.recompute_modules = [\"%s\"]",
                 change, lq);
    }
    (void)v;
}

static int
cand_cost_cmp(const void *a, const void *b)
{
    const adv_cand *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost < y->cost ? -1 : 1;
    return x->max_peak < y->max_peak ? -1 : x->max_peak > y->max_peak;
}

static void
hot_line(adv_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
hot_line(adv_verdict *v, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **q = realloc(v->hot_functions, (v->nhot_functions + 1) * sizeof *q);
    if (!q)
        return;
    v->hot_functions = q;
    q[v->nhot_functions] = strdup(buf);
    if (q[v->nhot_functions])
        v->nhot_functions++;
}

static int
activation_phase(int ph)
{
    return ph == AM_PH_forward || ph == AM_PH_backward || ph == AM_PH_backward_replay ||
           ph == AM_PH_eval || ph == AM_PH_other;
}

/* non-Megatron jobs: the Python functions (allocation sites) holding the most
 * activation bytes (allocated in forward/backward, not parameters, grads of
 * init or optimizer state) at each rank's tensor-level peak; without sites,
 * the largest groups */
static void
hot_functions(adv_verdict *v, am_job *j)
{
    for (size_t i = 0; i < j->nranks && i < ADV_MAX_RANKS; i++) {
        am_rank *r = &j->ranks[i];
        const am_peak *p = &r->peak[AM_L_TENSOR];
        if (!p->known)
            p = &r->peak[AM_L_DEVICE];
        if (!p->known)
            continue;
        size_t before = v->nhot;
        if (r->by_site) {
            /* sum per site over the activation groups */
            for (size_t g = 0; g < p->ngroups; g++) {
                const am_group *x = &p->groups[g];
                const char *fn = am_site_name(r, x->site);
                if (!fn || !activation_phase(x->phase))
                    continue;
                size_t k = before;
                while (k < v->nhot && strcmp(v->hot[k].function, fn))
                    k++;
                if (k == v->nhot) {
                    struct adv_hotfn *q = realloc(v->hot, (v->nhot + 1) * sizeof *q);
                    if (!q)
                        return;
                    v->hot = q;
                    memset(&q[k], 0, sizeof q[k]);
                    q[k].rank = r->rank;
                    q[k].phase = x->phase;
                    snprintf(q[k].function, sizeof q[k].function, "%s", fn);
                    v->nhot++;
                }
                v->hot[k].bytes += x->bytes;
                v->hot[k].count += x->count;
            }
            /* largest first, at most 8 per rank */
            for (size_t a = before; a < v->nhot; a++)
                for (size_t b = a + 1; b < v->nhot; b++)
                    if (v->hot[b].bytes > v->hot[a].bytes) {
                        struct adv_hotfn t = v->hot[a];
                        v->hot[a] = v->hot[b];
                        v->hot[b] = t;
                    }
            if (v->nhot - before > 8)
                v->nhot = before + 8;
            for (size_t a = before; a < v->nhot; a++)
                hot_line(v, "rank %d: %s holds %s of activations (%" PRIu64 " tensors, %s)",
                         r->rank, v->hot[a].function, GB(v->hot[a].bytes), v->hot[a].count,
                         am_phase_name(v->hot[a].phase));
            if (v->nhot == before)
                hot_line(v, "rank %d: no activation bytes with a Python frame at the peak",
                         r->rank);
        } else {
            for (size_t g = 0; g < p->ngroups && g < 8; g++)
                hot_line(v, "rank %d: %s allocated in %s (%s), %" PRIu64 " tensors (no Python "
                            "frames recorded)",
                         r->rank, GB(p->groups[g].bytes), am_phase_name(p->groups[g].phase),
                         am_boundary_name(p->groups[g].boundary), p->groups[g].count);
        }
        if (p->setter.where[0])
            hot_line(v, "rank %d: the peak was set in %.400s", r->rank, p->setter.where);
    }
}

typedef struct build_ctx {
    am_job *j;
    const adv_cfg *cfg;
    adv_trace *tr;
    char (*errs)[1024];
} build_ctx;

static int
build_one(void *arg, size_t i)
{
    build_ctx *c = arg;
    return adv_trace_build(&c->j->ranks[i], c->cfg, &c->tr[i], c->errs[i], sizeof c->errs[i]);
}

/* Every rank's tensor-level timeline (adv_trace_build), `workers` ranks at
 * a time (am_parallel_for); each reads only its own source. 0, or -1 with
 * the error of the first failing rank in rank order, as in turn. */
static int
build_traces(am_job *j, const adv_cfg *cfg, adv_trace *tr, size_t n, int workers, char *err,
             size_t errlen)
{
    build_ctx c = {j, cfg, tr, calloc(n ? n : 1, sizeof *c.errs)};
    if (!c.errs) {
        snprintf(err, errlen, "advisor: out of memory");
        return -1;
    }
    size_t bad = am_parallel_for(n, workers, build_one, &c);
    if (bad < n)
        snprintf(err, errlen, "%s", c.errs[bad]);
    free(c.errs);
    return bad < n ? -1 : 0;
}

/* ---- the pipeline (adv_run): its shared state and its named steps ---- */

typedef struct run_state {
    am_job *j;
    const adv_opts *o;
    adv_verdict *v;
    adv_cfg *cfg;
    int tensor;               /* every rank has tensor-level allocations */
    int can_cf;               /* counterfactuals possible (Megatron ranges, model size) */
    adv_trace *tr;            /* the measured op streams, one per rank */
    adv_trace *t0;            /* recompute on: the streams without it, else NULL */
    uint64_t *extra;          /* predicted optimizer state per rank (bytes) */
    adv_setting active;       /* the recorded setting */
    uint64_t base_max;        /* max baseline peak over the ranks (bytes) */
    uint64_t ref_max;         /* max peak without recompute (bytes) */
    int base_fits;            /* every rank's baseline within its budget */
    unsigned ineff;           /* labels judged ineffective */
    int pick;                 /* the fitting candidate of least cost, -1 */
    int cur_idx;              /* the current setting's candidate, -1 */
    adv_rank_part *const *mparts; /* adv_run_merge: each rank's part (no traces); else NULL */
    const adv_cfg *mcfg;      /* adv_run_merge: the parts' configuration */
    adv_rank_part *sparts;    /* adv_run_summarize: the parts to fill; else NULL */
    size_t ntriage;           /* findings up to triage's last (the per-rank ones) */
    size_t triage_from;       /* ... and before its first: job-level ones made earlier (the
                               * budget's BUDGET:DEVICE_LIMIT), which merge makes again */
    int undo_matched, undo_units; /* recompute on: replay units matched / implied (all ranks) */
    int undo_short;           /* undo_matched < undo_units: the trace without recompute,
                               * and every setting but the current one, unknown */
    char *err;
    size_t errlen;
    char binds[768];          /* what binds each binding rank, when they differ or a
                               * finding was passed over (advisor_binding.c), "" none */
    int lever_chosen;         /* the verdict is a zero-replay lever (lever_verdict) */
} run_state;

/* Step 1: the configuration (command line, --config, overrides) of rank 0's
 * source; the trace directory resolves a relative --config. */
static void
run_read_config(run_state *st)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", st->j->ranks[0].path);
    char *sl = strrchr(dir, '/');
    if (sl)
        *sl = 0;
    else
        snprintf(dir, sizeof dir, ".");
    if (st->mcfg)
        st->v->cfg = *st->mcfg;
    else
        adv_config_read(&st->j->ranks[0].src->meta, st->o->config, dir, &st->v->cfg);
    st->cfg = &st->v->cfg;
    snprintf(st->v->cost_source, sizeof st->v->cost_source,
             "FLOP model of the replayed forward (no GPU kernel times in the trace)");
    st->tensor = 1;
    for (size_t i = 0; i < st->v->nranks; i++)
        if (!(st->j->ranks[i].levels & AM_LVL_TENSOR))
            st->tensor = 0;
}

/* 1 when the job's recorded command line (rank 0's) has no --nvtx-ranges:
 * Megatron pushed no ranges of its own, and the analysis placed replays
 * by Python frames alone (docs/python-frames.md). 0 when it has, or when
 * no command line was recorded (then nothing is claimed). */
static int
frames_only(const am_job *j)
{
    if (!j->nranks || !j->ranks[0].src || !j->ranks[0].src->meta.argc)
        return 0;
    const am_meta *m = &j->ranks[0].src->meta;
    for (size_t k = 0; k < m->argc; k++)
        if (m->argv[k] && strcmp(m->argv[k], "--nvtx-ranges") == 0)
            return 0;
    return 1;
}

/* The device capacity of a rank (bytes): --budget, the trace header,
 * cudaMemGetInfo's total, the total the failing call's cudaMemGetInfo saw;
 * 0 when none of them is known (the budget is then unknown, never 0 B). */
static uint64_t
rank_capacity(const am_rank *r, const adv_opts *o)
{
    if (o->budget)
        return o->budget;
    if (r->src->meta.device_capacity)
        return r->src->meta.device_capacity;
    if (r->meminfo_total)
        return r->meminfo_total;
    return r->oom ? r->oom->total_bytes : 0;
}

/* Step 2: per rank, the op stream (tensor level), the budget and the
 * baseline peak. budget = capacity - outside PyTorch - allocator cache -
 * headroom (bytes); the baseline holds a fatal OOM's failed request. */
static int
run_build_traces(run_state *st)
{
    adv_verdict *v = st->v;
    if (st->mparts)
        for (size_t i = 0; i < v->nranks; i++)
            st->tr[i] = st->mparts[i]->scal;
    else if (st->tensor && build_traces(st->j, st->cfg, st->tr, v->nranks, st->o->workers,
                                        st->err, st->errlen) < 0)
        return -1;
    for (size_t i = 0; i < v->nranks; i++) {
        am_rank *r = &st->j->ranks[i];
        adv_trace *t = &st->tr[i];
        v->rank_id[i] = r->rank;
        if (st->tensor && getenv("RECOMP_ADVISOR_DEBUG"))
            adv_trace_debug(t);
        uint64_t capy = rank_capacity(r, st->o);
        /* an OOM with the request free: the budget ends at the limit it met */
        if (!st->o->budget)
            capy = adv_limit_finding(v, r, capy);
        /* device figures that contradict the trace give no capacity (issue 14 M) */
        uint64_t held, in_use;
        if (adv_device_inconsistent(r, &held, &in_use)) {
            if (!st->o->budget)
                capy = 0;
            if (!v->device_note[0])
                snprintf(v->device_note, sizeof v->device_note,
                         "device figures inconsistent on rank %d: allocated %s > in use %s "
                         "(cudaMemGetInfo at the OOM)", r->rank, GB(held), GB(in_use));
        }
        adv_budget_above_device(v, r, st->o->budget);
        v->capacity[i] = capy;
        if (!capy)
            v->budget_unknown++;
        /* outside PyTorch: device live - PyTorch reserved (max over the trace),
         * else the device-level bytes of non-PyTorch owners; plus the context
         * and other processes from cudaMemGetInfo samples */
        uint64_t out = t->max_outside;
        const am_peak *dp = &r->peak[AM_L_DEVICE];
        if (!out && dp->known)
            out = dp->by_lib[AM_LIB_NCCL] + dp->by_lib[AM_LIB_CUBLAS] + dp->by_lib[AM_LIB_CUDNN];
        out += r->max_other;
        v->outside[i] = out;
        /* the budget is the device's and the job's: the allocator's cache belongs
         * to each prediction (its own timeline), not to the budget */
        uint64_t keep = out + st->o->headroom;
        v->budget[i] = capy > keep ? capy - keep : 0;
        /* an OOM in model construction cut init short: its bytes are not the
         * whole model's parameters, grads and main params (a resume may have
         * made the optimizer state and the loaded copy already), so no
         * optimizer state is predicted from them: the prediction stays what was
         * recorded, a lower bound (a public report: 117 GiB predicted for a
         * resume that peaked at 78.87 GiB) */
        int cut_in_init = r->oom && !r->oom->past_limit && r->oom->iteration < 0;
        if (st->tensor && st->cfg->megatron && t->optimizer_seen != 1 && cut_in_init)
            snprintf(v->next_wall, sizeof v->next_wall,
                     "the trace ends in model construction (an OOM before iteration 0): the "
                     "optimizer state the first step creates is not predicted from an "
                     "unfinished construction and comes on top of every figure here");
        else if (st->tensor && st->cfg->megatron && t->optimizer_seen == 2)
            snprintf(v->next_wall, sizeof v->next_wall,
                     "the optimizer state was made while loading the checkpoint (by its "
                     "init_state_fn, in the recorded bytes): not predicted again");
        else if (st->tensor && st->cfg->megatron && !t->optimizer_seen)
            st->extra[i] = adv_predict_optimizer_state(st->cfg, t->init_bytes, v->next_wall,
                                                       sizeof v->next_wall);
        if (st->tensor) {
            uint8_t ph;
            v->baseline[i] = cf_at(t, st->mparts, i, 0, st->cfg, &(adv_setting){0},
                                   st->extra[i], &ph, limit_of(v, i), &v->reserved[i], NULL);
        } else {
            v->baseline[i] = dp->known ? dp->bytes : 0;
            /* the failed request enters the prediction (device level) */
            if (r->oom && r->oom->live[AM_L_DEVICE] + r->oom->requested > v->baseline[i])
                v->baseline[i] = r->oom->live[AM_L_DEVICE] + r->oom->requested;
            v->reserved[i] = v->baseline[i];
        }
        v->cache[i] = v->reserved[i] - v->baseline[i];
        v->predicted[i] = v->baseline[i];
        v->pred_reserved[i] = v->reserved[i];
        char cw[sizeof v->cache_why];
        if (adv_cache_history(r, cw, sizeof cw) && !v->cache_short++)
            snprintf(v->cache_why, sizeof v->cache_why, "%s", cw);
    }
    v->available = 1;
    return 0;
}


/* Core attention as the trace shows it, over the configuration's default:
 * Megatron's .core_attention regions that hold no TE fused/flash attention
 * call (nvte_flash_attn_fwd / nvte_fused_attn_fwd, always on in TE's C API)
 * are unfused attention -- Megatron-Core's local DotProductAttention or TE's
 * unfused backend -- which saves the s x s probabilities, so core_attn
 * recompute frees them (measured on Megatron-Core 0.19.2's local spec,
 * docs/validation/megatron-core.md). Every rank must agree; otherwise the
 * configuration stands. */
static void
attention_from_trace(run_state *st)
{
    adv_cfg *cfg = st->cfg;
    size_t regions = 0;
    if (!cfg->fused_attn || !st->tensor)
        return;
    for (size_t i = 0; i < st->v->nranks; i++) {
        if (st->tr[i].core_te_attn)
            return;
        regions += (size_t)st->tr[i].core_regions;
    }
    if (regions)
        cfg->fused_attn = 0;
}

/* No Transformer Engine, as the trace shows it: Megatron's layer ranges on
 * every rank and not one of TE's C API ranges (nvte_*, always on when TE
 * runs: nvte_cublas_gemm, norms, attention, optimizer). Settings that need TE
 * are then invalid (advisor_validity.c). */
static void
te_from_trace(run_state *st)
{
    if (!st->tensor || st->cfg->no_te)
        return;
    for (size_t i = 0; i < st->v->nranks; i++)
        if (!st->tr[i].megatron_ranges || st->tr[i].te_calls)
            return;
    st->cfg->no_te = 1;
}

/* Step 3: triage (advisor_triage.c), the baseline against the budgets, the
 * hot pipeline stage, and whether counterfactuals are possible (the note says
 * what is missing when not). */
static void
run_triage(run_state *st)
{
    adv_verdict *v = st->v;
    am_job *j = st->j;
    adv_cfg *cfg = st->cfg;
    st->triage_from = v->nfindings;
    if (st->mparts)
        for (size_t i = 0; i < v->nranks; i++)
            for (size_t f = 0; f < st->mparts[i]->nfindings; f++)
                adv_part_finding_append(v, &st->mparts[i]->findings[f]);
    else
        adv_triage(j, st->tr, v);
    st->ntriage = v->nfindings;
    st->base_max = 0;
    st->base_fits = 1;
    for (size_t i = 0; i < v->nranks; i++) {
        if (v->baseline[i] > st->base_max)
            st->base_max = v->baseline[i];
        if (v->reserved[i] > v->budget[i] || !v->capacity[i])
            st->base_fits = 0;
    }
    if (cfg->pp > 1 && j->hot >= 0) {
        size_t h = 0;
        uint64_t lo = UINT64_MAX;
        for (size_t i = 0; i < v->nranks; i++) {
            if (v->baseline[i] > v->baseline[h])
                h = i;
            if (v->baseline[i] < lo)
                lo = v->baseline[i];
        }
        int stage = j->ranks[h].stage;
        if (lo != UINT64_MAX && v->baseline[h] > lo + lo / 20 && stage >= 0) {
            char code[48];
            snprintf(code, sizeof code, "X:HOT_RANK[pp=%d]", stage);
            const am_peak *p = &j->ranks[h].peak[AM_L_TENSOR];
            adv_finding_add(v, code, "pipeline_stage", j->ranks[h].rank,
                            "stage %d peaks at %s against %s on the coolest rank (+%.1f%%); the "
                            "largest group there: %s %s. This is where the job trips, not why",
                            stage, GB(v->baseline[h]), GB(lo),
                            100.0 * (double)(v->baseline[h] - lo) / (double)(lo ? lo : 1),
                            p->ngroups ? am_boundary_name(p->groups[0].boundary) : "?",
                            p->ngroups ? GB(p->groups[0].bytes) : "");
            /* where, not why: its bytes are the stage's excess, no lever */
            adv_finding_held(v, code, v->baseline[h] - lo);
        }
    }
    st->can_cf = st->tensor && cfg->megatron && cfg->num_layers > 0;
    for (size_t i = 0; i < v->nranks && st->can_cf; i++)
        if (!st->tr[i].megatron_ranges || !st->tr[i].nlayers)
            st->can_cf = 0;
    attention_from_trace(st);
    te_from_trace(st);
    int salvaged = 0; /* chunks lost may have held the command line and config */
    for (size_t i = 0; i < j->nranks; i++)
        salvaged |= j->ranks[i].src && j->ranks[i].src->meta.salvaged_chunks;
    if (!cfg->megatron) {
        snprintf(v->level_note, sizeof v->level_note,
                 "%s: triage only, no recompute flags; the Python functions holding the most "
                 "activation bytes at the peak are listed",
                 salvaged ? "no Megatron flags, config or frames read, but --salvage skipped "
                            "chunks that may have held them: whether this is a Megatron job "
                            "is unknown"
                          : "not a Megatron job (no Megatron flags, config or frames recorded)");
        hot_functions(v, j);
    } else if (!st->tensor) {
        snprintf(v->level_note, sizeof v->level_note,
                 "device-level trace: the counterfactuals need tensor-level allocations "
                 "(PyTorch's allocator report hook reaching the shim, or RECOMPSHIM_TENSORS=async "
                 "or nocache at launch) and Megatron's layer ranges (--profile --nvtx-ranges "
                 "with --profile-step-start/--profile-step-end covering the traced steps)");
    } else if (!st->can_cf) {
        snprintf(v->level_note, sizeof v->level_note,
                 "no Megatron layer ranges in the trace (or the model size is unknown: %.200s): the "
                 "counterfactuals need --profile --nvtx-ranges covering the traced steps and "
                 "--num-layers/--hidden-size/... on the command line or in --config",
                 cfg->unknown[0] ? cfg->unknown : "none missing");
    }
}

/* Step 4: recompute already on: the trace without it (its replays matched to
 * the forward regions and undone); candidates are complete settings on it.
 * ref_max is the peak without recompute. 0, or -1 (out of memory). */
static int
run_undo_active(run_state *st)
{
    adv_verdict *v = st->v;
    adv_cfg *cfg = st->cfg;
    adv_setting_of_cfg(cfg, &st->active);
    st->ref_max = st->base_max;
    if (!st->can_cf || !cfg->granularity)
        return 0;
    int matched = 0, units = 0, by_size = 0;
    st->t0 = calloc(v->nranks, sizeof *st->t0);
    if (!st->t0)
        return -1;
    size_t nextra = 0;
    uint64_t extra_max = 0;
    for (size_t i = 0; i < v->nranks; i++) {
        adv_trace *t0 = &st->t0[i];
        int m = 0, u = 0;
        if (st->mparts) {
            const adv_rank_part *p = st->mparts[i];
            m = p->undo_matched;
            u = p->undo_units;
            t0->undo_by_size = p->undo_by_size;
            t0->nxr = p->undo_nxr;
            t0->xr_bytes = p->undo_xr_bytes;
        } else if (adv_trace_undo(&st->tr[i], cfg, t0, &m, &u) < 0) {
            return -1;
        } else {
            t0->departs = adv_trace_departure(&st->tr[i], t0);
        }
        matched += m;
        units += u;
        by_size += t0->undo_by_size;
        if (st->sparts) {
            st->sparts[i].undo_matched = m;
            st->sparts[i].undo_units = u;
            st->sparts[i].undo_by_size = t0->undo_by_size;
            st->sparts[i].undo_nxr = t0->nxr;
            st->sparts[i].undo_xr_bytes = t0->xr_bytes;
        }
        nextra += t0->nxr;
        if (getenv("RECOMP_ADVISOR_DEBUG") && t0->xr)
            for (size_t r = 0; r < t0->nxr; r++)
                fprintf(stderr, "advisor: rank %d replay extra %u (%llu bytes) at %u, free %u\n",
                        v->rank_id[i], t0->xr[r].id,
                        (unsigned long long)t0->a[t0->xr[r].id].size, t0->xr[r].a_anchor,
                        t0->xr[r].f_anchor);
        if (t0->xr_bytes > extra_max)
            extra_max = t0->xr_bytes;
    }
    st->ref_max = 0;
    for (size_t i = 0; i < v->nranks; i++) {
        uint64_t p = st->mparts ? st->mparts[i]->undone_peak
                                : adv_counterfactual(&st->t0[i], cfg, &(adv_setting){0},
                                                     st->extra[i], NULL);
        if (st->sparts)
            st->sparts[i].undone_peak = p;
        if (p > st->ref_max)
            st->ref_max = p;
    }
    adv_cand tmp;
    name_setting(&st->active, &tmp);
    st->undo_matched = matched;
    st->undo_units = units;
    st->undo_short = matched < units;
    if (st->undo_short) {
        st->ref_max = st->base_max;
        snprintf(v->level_note, sizeof v->level_note,
                 "recompute is already on (%s, %s replayed on the backward thread), but only "
                 "%d of the %d replay units the setting implies (layers x microbatches x "
                 "chunks recomputed, on all ranks) were matched to their forward regions: the "
                 "trace without recompute is UNKNOWN, so no other setting is predicted (no "
                 "removal, no cheaper or narrower setting, no label judged ineffective); only "
                 "the current setting, measured, is judged",
                 tmp.name, GB(st->tr ? st->tr[0].replay_bytes : 0), matched, units);
        if (frames_only(st->j)) {
            size_t l = strlen(v->level_note);
            snprintf(v->level_note + l, sizeof v->level_note - l,
                     ". A known cause: the job ran without Megatron's --nvtx-ranges, so "
                     "replays are placed by Python frames, and on Python before 3.12 the "
                     "shim sees the autograd "
                     "worker's frames only from its second backward (a profile function, "
                     "not sys.monitoring: docs/python-frames.md), so the first backward's "
                     "replays have none. Record with --profile --nvtx-ranges, or on "
                     "Python 3.12 or newer");
        }
        return 0;
    }
    snprintf(v->level_note, sizeof v->level_note,
             "recompute is already on (%s, %s replayed on the backward thread): its replays "
             "were matched to the forward regions (%d of %d units on all ranks) and undone "
             "(%s without recompute); candidates are complete settings (keep, remove or "
             "add labels) evaluated on that trace, the current setting is the measured one",
             tmp.name, GB(st->tr[0].replay_bytes), matched, units, GB(st->ref_max));
    if (by_size) {
        size_t l = strlen(v->level_note);
        snprintf(v->level_note + l, sizeof v->level_note - l,
                 "; %d core-attention or discarded-tensor replays were matched by allocation "
                 "size alone (fallback: no attention backward call per layer on the backward "
                 "thread to place them in their layer's backward)", by_size);
    }
    if (nextra) {
        size_t l = strlen(v->level_note);
        snprintf(v->level_note + l, sizeof v->level_note - l,
                 "; the replays did more than their forward: %zu allocations without a "
                 "forward twin (up to %s in one replay) were taken out and are made again by "
                 "every candidate that replays those layer groups",
                 nextra, GB(extra_max));
    }
    return 0;
}

/* Whether the traces recorded no region of label l in any layer it applies
 * to, on any rank (1), so the counterfactual could free nothing for it and
 * its saving is unknown, not zero; 0 when some layer has its region or the
 * label is one whose region is not marked by a range of its own (layernorm,
 * moe, shared_experts); a merge takes each rank's part's label_seen and
 * label_layers (adv_label_region_seen). The region
 * markers are those adv_trace_build sets from Megatron's NVTX ranges and TE's
 * calls: core_attn the layer's core-attention region (start and end),
 * mla_up_proj its Q/K/V up-projection (start, Q/K/V, the discard point),
 * mlp a dense layer's MLP range, moe_act an MoE layer's expert activation.
 * Found on the real Megatron-Core job (docs/validation/megatron-core.md, the
 * MLA row): megatron-core 0.19.2's MLASelfAttention emits no range inside
 * `self_attention`, and core_attn was called ineffective ("-0 B") where the
 * real run saves 256 MiB; mla_up_proj likewise (88,899,584 bytes saved). */
static int
label_unseen(const run_state *st, int l)
{
    if (!st->tr || (l != ADV_L_core_attn && l != ADV_L_mla_up_proj && l != ADV_L_mlp &&
                    l != ADV_L_moe_act))
        return 0;
    uint64_t applies = 0;
    for (size_t i = 0; i < st->v->nranks; i++) {
        uint32_t a = st->mparts ? st->mparts[i]->label_layers[l] : 0;
        int seen = st->mparts ? st->mparts[i]->label_seen[l]
                              : adv_label_region_seen(st->t0 ? &st->t0[i] : &st->tr[i], l, &a);
        if (seen)
            return 0;
        applies += a;
    }
    return applies > 0;
}

/* The candidate of a label whose region was never recorded (label_unseen):
 * not ineffective but of unknown effect; said in its reason and the level
 * note, no R:INEFFECTIVE finding. */
static void
unseen_single(run_state *st, int l, const adv_setting *s)
{
    adv_cand *c = (adv_cand *)find_cand(st->v, s);
    if (c && (c->effect == ADV_E_INEFFECTIVE || c->effect == ADV_E_COUNTER))
        c->effect = ADV_E_INSUFFICIENT;
    if (c)
        snprintf(c->reason, sizeof c->reason,
                 "unknown effect: no %s region was recorded in any layer (no range of its own "
                 "in the layers' code), so nothing of it was freed: a lower bound of its saving",
                 adv_label_name(l));
    size_t n = strlen(st->v->level_note);
    snprintf(st->v->level_note + n, sizeof st->v->level_note - n,
             "%s%s: no region recorded in any layer (the layers' code emits no range for it), "
             "its saving is unknown, not zero; predicted as if it freed nothing",
             n ? "; " : "", adv_label_name(l));
}

/* an R:INEFFECTIVE[label] finding for a single label that saves too little */
static void
ineffective_single(run_state *st, int l, const adv_cand *c)
{
    char code[64];
    snprintf(code, sizeof code, "R:INEFFECTIVE[%s]", adv_label_name(l));
    adv_finding_add(st->v, code, c->saving < -(int64_t)((uint64_t)16 << 20)
                                     ? "counter-productive" : "ineffective",
                    c->fails_rank,
                    "predicted peak %s against %s without it (%s%s): %s",
                    GB(c->max_peak), GB(st->ref_max), c->saving >= 0 ? "-" : "+",
                    GB((uint64_t)(c->saving >= 0 ? c->saving : -c->saving)),
                    l == ADV_L_core_attn && st->cfg->fused_attn && st->cfg->cp > 1
                        ? "with context parallelism core_attn frees what TE's CP attention "
                          "saves (its exchanged K/V or copies, the softmax statistics) while "
                          "its checkpoint keeps q, k and the QKV buffer its value view pins; "
                          "the exchange's buffers (cp_comm) come back in the replay"
                    : l == ADV_L_core_attn && st->cfg->fused_attn
                        ? "with TE fused/flash attention core_attn frees only the "
                          "softmax statistics; Q, K, V and O stay saved, and its checkpoint "
                          "keeps the fused QKV buffer its value view pins"
                    : l == ADV_L_layernorm
                        ? "the norms are fused into the linears (IdentityOp) or hold little"
                        : "its region holds little at the peak");
}

/* the active selective setting: without each of its labels, with each other
 * one; an active label whose removal costs less than the threshold is
 * ineffective (it only adds replay cost) */
static void
sweep_active_variants(run_state *st, const eval_ctx *ec, unsigned have)
{
    adv_verdict *v = st->v;
    /* an index, not a pointer: try_setting() may grow (realloc) v->cands */
    const adv_cand *cur0 = find_cand(v, &st->active);
    ptrdiff_t cur_i = cur0 ? cur0 - v->cands : -1;
    for (int l = 0; l < ADV_NLABELS; l++) {
        if (!(have & (1u << l)))
            continue;
        adv_setting s = {st->active.labels ^ (1u << l), 0, 0};
        const adv_cand *cc = try_setting(v, ec, &s);
        const adv_cand *cur = cur_i >= 0 ? &v->cands[cur_i] : NULL;
        if (cc && cur && (st->active.labels & (1u << l)) && !(st->ineff & (1u << l)) &&
            sdiff(cc->max_peak, cur->max_peak) < small_of(st->ref_max)) {
            st->ineff |= 1u << l;
            char code[64];
            snprintf(code, sizeof code, "R:INEFFECTIVE[%s]", adv_label_name(l));
            adv_finding_add(v, code, "ineffective", -1,
                            "active label: without it the predicted peak is %s against "
                            "%s measured with it; it only adds replay cost (%.1f%%)",
                            GB(cc->max_peak), GB(cur->max_peak), 100 * (cur->cost - cc->cost));
        }
    }
}

/* The order in which fitting candidates are recommended, by how much of
 * the prediction's margin is in doubt (docs/advisor.md rule 46): 0 fits
 * clearly (with the 2% error bound and the reserved step); 1 fits with the
 * 2% bound but is short of one reserved step and of nothing else
 * ("unverified reserved", unverified_segment: the run may open one more
 * segment, a doubt of at most that step, and it keeps at least the 2% bound);
 * 2 marginal by the 2% error bound (fits only without it); 3 unverified for
 * a doubt of unknown size (a replay never recorded, unverified_replay; a
 * cache term from a short history, unverified_cache; a validity not
 * recorded, unverified_validity; or a step short with one of those); 4
 * unverified and within the budget only without the error bound; 5 no fit. */
static int
choose_tier(const adv_cand *c)
{
    if (c->effect == ADV_E_FITS)
        return 0;
    if (c->effect != ADV_E_MARGINAL)
        return 5;
    if (strncmp(c->reason, "unverified", 10) != 0)
        return 2;
    if (!strncmp(c->reason, "unverified reserved", 19) &&
        !strstr(c->reason, "validity unverified"))
        return 1;
    return strstr(c->reason, "fits only without the 2% bound") ? 4 : 3;
}

/* A zero-replay lever's tier (adv_lever_fit.tier: 0 fits, 1 only without
 * the 2% bound, 2 and 3 the same on a cache term that is a lower bound) on
 * choose_tier's scale, so that the two are compared by one order. */
static int
lever_rank(int lever_tier)
{
    static const int scale[4] = {0, 2, 3, 4};
    return lever_tier >= 0 && lever_tier < 4 ? scale[lever_tier] : 5;
}


/* the full-recompute family of one method: every n, one best member listed
 * (the cheapest of the best tier, choose_tier); and when a cheaper member
 * fits only marginally (tiers 1-4: within a reserved step, inside the 2%
 * bound, unverified), the cheapest such member too, so that what was judged
 * marginal, and why, is in the list and the why (cheaper_marginal_note) */
static void
sweep_full_family(run_state *st, const eval_ctx *ec, int meth)
{
    adv_cand best, c, cheap;
    int have_best = 0, have_cheap = 0;
    int lpc = adv_cfg_max_chunk_layers(st->cfg);
    for (int nl = 1; nl <= lpc; nl++) {
        if (meth == 1 && nl > 1 && lpc % nl && nl != lpc)
            continue;
        adv_setting s = {0, meth, nl};
        if (st->t0 && same_setting(&s, &st->active))
            continue; /* listed as the current setting */
        evaluate(st->v, ec, &s, &c);
        int rc = choose_tier(&c), rb = have_best ? choose_tier(&best) : 6;
        int better = !have_best || rc < rb || (rc == rb && rc < 5 && c.cost < best.cost) ||
                     (rc == rb && rc == 5 && c.max_peak < best.max_peak);
        if (better) {
            best = c;
            have_best = 1;
        }
        if (rc >= 1 && rc <= 4 && (!have_cheap || c.cost < cheap.cost ||
                                   (c.cost == cheap.cost && rc < choose_tier(&cheap)))) {
            cheap = c;
            have_cheap = 1;
        }
    }
    if (have_best) {
        best.family_best = 1;
        add_cand(st->v, &best);
    }
    if (have_best && have_cheap && cheap.cost < best.cost - 1e-4)
        add_cand(st->v, &cheap);
}

/* Step 5: the candidates: the current setting and none (recompute on), every
 * label the model has alone, the active setting's variants, pairs and all of
 * the effective labels, the full-recompute families; each on every rank. */
static void
run_sweep_candidates(run_state *st)
{
    if (!st->can_cf)
        return;
    adv_verdict *v = st->v;
    eval_ctx ec = {st->tr, st->t0, &st->active, st->extra, st->base_max, st->ref_max,
                   stage_layers_of(st->cfg), st->mparts};
    unsigned have = adv_model_labels(st->cfg);
    if (st->t0) {
        try_setting(v, &ec, &st->active);
        if (st->undo_short)
            return; /* undo unknown: only the measured setting is known */
        try_setting(v, &ec, &(adv_setting){0});
    }
    int singles[ADV_NLABELS], ns = 0;
    for (int l = 0; l < ADV_NLABELS; l++) {
        if (!(have & (1u << l)))
            continue;
        adv_setting s = {1u << l, 0, 0};
        const adv_cand *cc = try_setting(v, &ec, &s);
        if (!cc)
            continue;
        adv_cand c = *cc;
        if (c.effect != ADV_E_INEFFECTIVE && c.effect != ADV_E_COUNTER &&
            c.saving >= small_of(st->ref_max)) {
            singles[ns++] = l;
            continue;
        }
        if (label_unseen(st, l)) {
            unseen_single(st, l, &s);
            continue;
        }
        st->ineff |= 1u << l;
        ineffective_single(st, l, &c);
    }
    if (st->t0 && st->active.labels)
        sweep_active_variants(st, &ec, have);
    for (int a = 0; a < ns; a++)
        for (int b = a + 1; b < ns; b++) {
            adv_setting s = {1u << singles[a] | 1u << singles[b], 0, 0};
            if ((s.labels & (1u << ADV_L_moe)) &&
                (s.labels & (1u << ADV_L_moe_act | 1u << ADV_L_shared_experts)))
                continue; /* moe contains them */
            try_setting(v, &ec, &s);
        }
    if (ns > 2) {
        adv_setting s = {0, 0, 0};
        for (int a = 0; a < ns; a++)
            s.labels |= 1u << singles[a];
        if (s.labels & (1u << ADV_L_moe))
            s.labels &= ~(1u << ADV_L_moe_act | 1u << ADV_L_shared_experts);
        try_setting(v, &ec, &s);
    }
    for (int meth = 1; meth <= 2; meth++)
        sweep_full_family(st, &ec, meth);
}

/* the change for a primary triage code, within what the job's configuration
 * allows (no moe_* on a dense model, no --cuda-graph-modules with
 * full_iteration graphs) */
static const char *
triage_change(const adv_finding *prim, const adv_cfg *cfg, char *buf, size_t n)
{
    if (strstr(prim->code, "FRAGMENTATION") && strcmp(prim->subtype, "inactive_split_unseen") == 0)
        return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, unless memory the trace did "
               "not see is a memory pool in this process (a colocated engine's "
               "torch.cuda.MemPool, e.g. vLLM sleep mode, refuses it): then the "
               "max_split_size_mb the why names";
    if (strstr(prim->code, "FRAGMENTATION") && strcmp(prim->subtype, "load_cache") == 0)
        return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or "
               "torch.cuda.empty_cache() right after the checkpoint load (before the first "
               "forward)";
    if (strstr(prim->code, "FRAGMENTATION"))
        return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
    if (strstr(prim->code, "CUDA_GRAPH")) {
        if (strcmp(cfg->cuda_graph_impl, "full_iteration") == 0)
            return "--cuda-graph-impl none (full_iteration graphs capture the whole step; "
                   "the graph-modules list does not apply to them)";
        return cfg->num_experts > 0 ? "narrow --cuda-graph-modules (drop moe_* first) or "
                                      "--cuda-graph-impl none"
                                    : "narrow --cuda-graph-modules (capture fewer modules) or "
                                      "--cuda-graph-impl none";
    }
    if (strstr(prim->code, "NCCL") && strcmp(prim->subtype, "other_process") == 0)
        return "free the device: another process (or context) holds the memory outside "
               "PyTorch the job needs";
    if (strstr(prim->code, "NCCL") && strcmp(prim->subtype, "cache_starved") == 0)
        return "release PyTorch's cache before NCCL allocates: torch.cuda.empty_cache() after "
               "the one-off peak (checkpoint loading) and before the first collective, or "
               "create the NCCL communicators eagerly (init_process_group(device_id=...))";
    if (strstr(prim->code, "NCCL") && cfg->alloc_expandable)
        return "leave NCCL a margin: fewer communicators or smaller NCCL buffers (expandable "
               "segments are already on)";
    if (strstr(prim->code, "NCCL"))
        return "leave NCCL a margin: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, fewer "
               "communicators or smaller NCCL buffers";
    if (strcmp(prim->subtype, "init_transient") == 0)
        return "fewer parameters per rank during model construction (more TP/PP, EP for "
               "experts, or sharded parameters: FSDP); torch.cuda.empty_cache() after "
               "construction returns what the transient leaves cached (recompute and "
               "optimizer levers cannot help: the peak is before the first step)";
    if (strcmp(prim->subtype, "loaded_state") == 0)
        return cfg->megatron && !cfg->ckpt_torch
                   ? "load the checkpoint to CPU (map_location='cpu') or drop the loaded "
                     "state dict's references before the first step (del, gc.collect(), "
                     "torch.cuda.empty_cache()); the job already loads a distributed "
                     "checkpoint format"
               : cfg->megatron
                   ? "load the checkpoint to CPU (map_location='cpu'), drop the loaded state "
                     "dict's references before the first step (del, gc.collect(), "
                     "torch.cuda.empty_cache()), or a distributed checkpoint format "
                     "(--ckpt-format torch_dist)"
                   : "load the checkpoint to CPU (map_location='cpu'), drop the loaded state "
                     "dict's references before the first step (del, gc.collect(), "
                     "torch.cuda.empty_cache()), or a distributed checkpoint "
                     "(torch.distributed.checkpoint)";
    if (strstr(prim->code, "LOGITS"))
        return ADV_CE_NO_COPY(cfg) ? "BF16 logits or a chunked cross-entropy, more TP for the "
                                     "vocabulary-parallel logits, or fewer layers on the last "
                                     "pipeline stage"
                                   : ADV_CE_CHANGE(cfg);
    if (prim->lever[0])
        return prim->lever;
    if (strstr(prim->code, "RETENTION"))
        return "drop the references that keep last iteration's activations alive";
    /* levers already in use, or without effect, are not offered (public
     * reports: the distributed optimizer recommended to a job that had it
     * on, and to a job with one data-parallel rank, where it shards nothing) */
    if (strstr(prim->code, "PARAM_STATE"))
        return !cfg->megatron ? "shard the parameters and gradients (FSDP/ZeRO-3, tensor or "
                                "pipeline parallelism) or use a larger device"
               : cfg->dist_opt || cfg->dp <= 1
                   ? "shard the parameters and gradients: more TP/PP (EP for experts), "
                     "the distributed optimizer over more data-parallel ranks, or a larger "
                     "device (recompute cannot help: the activations are not what fills it)"
                   : "shard the parameters and gradients: more TP/PP (EP for experts), "
                     "--use-distributed-optimizer, or a larger device (recompute cannot "
                     "help: the activations are not what fills it)";
    if (!cfg->megatron)
        return "shard the optimizer state (ZeRO/FSDP), keep its moments in bf16, or offload it "
               "to the CPU";
    snprintf(buf, n, "%s%s%s%s",
             cfg->dist_opt || cfg->dp <= 1 ? "the distributed optimizer over more data-parallel "
                                             "ranks"
                                           : "--use-distributed-optimizer",
             cfg->exp_avg_bf16 ? "" : ", --use-precision-aware-optimizer --exp-avg-dtype bf16 "
                                      "--exp-avg-sq-dtype bf16",
             cfg->optimizer_cpu_offload ? ", or a larger --optimizer-offload-fraction"
                                        : ", or optimizer CPU offload",
             cfg->exp_avg_bf16 ? " (the moments are already bf16)" : "");
    return buf;
}

/* Among the findings ranked by their bytes (state growth, logits, loaded
 * state, construction transient, kept outputs, checkpoint save): the one
 * whose best lever alone covers its rank's deficit (adv_finding_deficit; the
 * most bytes removed), else the one holding the most bytes; NULL when none is
 * ranked (issue 14 item 6). An unknown deficit is covered by nothing. */
static const adv_finding *
primary_by_bytes(const adv_verdict *v, const uint8_t *ok)
{
    const adv_finding *best = NULL;
    int best_covers = 0;
    for (size_t k = 0; k < v->nfindings; k++) {
        const adv_finding *f = &v->findings[k];
        if (!f->ranked || (ok && !ok[k]))
            continue;
        uint64_t deficit = 0;
        int known = adv_finding_deficit(v, f, &deficit);
        int covers = known && f->fix_bytes && f->fix_bytes >= deficit;
        if (!best || covers > best_covers ||
            (covers == best_covers &&
             (covers ? f->fix_bytes > best->fix_bytes : f->bytes > best->bytes))) {
            best = f;
            best_covers = covers;
        }
    }
    return best;
}

/* The primary triage finding among those ok[] allows (NULL: all; a finding
 * of a rank that binds, advisor_binding.c), or NULL: retention that grows
 * every iteration
 * and reaches the budget before the job ends decides the OOM whatever else
 * holds bytes (removing any other cause only delays it); else the first in
 * the order graph pools, NCCL/outside PyTorch, fragmentation, optimizer
 * state, parameter state, retention; a finding with bytes gives way to the
 * one whose fix covers the deficit (issue 14 items 6, 9). */
static const adv_finding *
primary_finding(const adv_verdict *v, const uint8_t *ok)
{
    static const char *const order[] = {"X:CUDA_GRAPH_POOL", "X:NCCL_BUFFERS",
                                        "X:CHECKPOINT_SAVE", "X:FRAGMENTATION", "X:OPTIMIZER_STATE",
                                        "X:PARAM_STATE", "X:RETENTION"};
    const adv_finding *prim = NULL;
    for (size_t k = 0; k < v->nfindings && !prim; k++)
        if (strcmp(v->findings[k].code, "X:RETENTION") == 0 &&
            strcmp(v->findings[k].subtype, "growth") == 0 && (!ok || ok[k]))
            prim = &v->findings[k];
    for (size_t q = 0; q < sizeof order / sizeof order[0] && !prim; q++)
        for (size_t k = 0; k < v->nfindings; k++)
            if (strcmp(v->findings[k].code, order[q]) == 0 && (!ok || ok[k])) {
                prim = &v->findings[k];
                break;
            }
    if (!prim || prim->ranked) {
        const adv_finding *best = primary_by_bytes(v, ok);
        if (best)
            prim = best;
    }
    return prim;
}

/* append to why (a sentence) */
static void
why_add(adv_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
why_add(adv_verdict *v, const char *fmt, ...)
{
    size_t l = strlen(v->why);
    if (l + 3 >= sizeof v->why)
        return;
    if (l)
        l += (size_t)snprintf(v->why + l, sizeof v->why - l, ". ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why + l, sizeof v->why - l, fmt, ap);
    va_end(ap);
}

/* nothing fits: recompute alone cannot help. The code says so
 * (R:INSUFFICIENT); the why names the setting that saves most (never one
 * holding a label judged ineffective: its replay buys nothing) and its peak,
 * but the change is not a setting judged insufficient. */
static void
choose_fallback(run_state *st)
{
    adv_verdict *v = st->v;
    size_t best = (size_t)-1;
    for (int pass = 0; pass < 2 && best == (size_t)-1; pass++)
        for (size_t k = 0; k < v->ncands; k++) {
            const adv_cand *x = &v->cands[k];
            if (!x->valid || (!pass && (x->labels & st->ineff)) ||
                (!x->labels && !x->full_method))
                continue;
            if (best == (size_t)-1 || x->max_peak < v->cands[best].max_peak ||
                (x->max_peak == v->cands[best].max_peak && x->cost < v->cands[best].cost))
                best = k;
        }
    if (best == (size_t)-1)
        best = 0;
    adv_cand *c = &v->cands[best];
    snprintf(v->code, sizeof v->code, "R:INSUFFICIENT");
    snprintf(v->why, sizeof v->why,
             "no recompute setting fits every rank: the best, %s, still peaks at %s (%s). "
             "Recompute alone is insufficient: add memory-saving parallelism (TP/PP/CP, "
             "distributed optimizer) as well",
             c->name, GB(c->max_peak), c->reason);
    snprintf(v->change, sizeof v->change,
             "recompute alone cannot fit: add memory-saving parallelism (more TP/PP/CP, the "
             "distributed optimizer over more ranks) or a larger device, then re-analyse");
    snprintf(v->config_diff, sizeof v->config_diff, "%s", v->change);
}

/* the recommended candidate: code, config diff, predictions, why */
/* The cheapest valid candidate that costs less than ref (a clear fit) but
 * fits only marginally (choose_tier 1-4: within its reserved step, inside
 * the 2% bound, unverified), or NULL: what "cheapest" passed over. */
static const adv_cand *
cheaper_marginal(const adv_verdict *v, const adv_cand *ref)
{
    const adv_cand *m = NULL;
    for (size_t k = 0; k < v->ncands; k++) {
        const adv_cand *x = &v->cands[k];
        int t = choose_tier(x);
        if (x->valid && t >= 1 && t <= 4 && x->cost < ref->cost - 1e-4 &&
            (!m || x->cost < m->cost))
            m = x;
    }
    return m;
}

/* Appends to the why the cheaper setting judged marginal (cheaper_marginal)
 * that a clear fit ref was chosen over, with its cost, margin and reason;
 * returns 1 when there is one. */
static int
cheaper_marginal_note(adv_verdict *v, const adv_cand *ref)
{
    const adv_cand *m = cheaper_marginal(v, ref);
    if (!m)
        return 0;
    why_add(v, "Cheaper, but judged marginal, not a clear fit: %s (%.1f%% replay, predicted "
               "max peak %s): %s",
            m->name, 100 * m->cost, GB(m->max_peak), m->reason);
    return 1;
}

static void
choose_candidate(run_state *st, const adv_cand *curc)
{
    adv_verdict *v = st->v;
    adv_cand *c = &v->cands[st->pick];
    v->chosen = st->pick;
    snprintf(v->code, sizeof v->code, "%s", c->code);
    config_diff(v, c, v->config_diff, sizeof v->config_diff, v->change, sizeof v->change);
    for (size_t i = 0; i < v->nranks; i++) {
        v->predicted[i] = c->peak[i];
        v->pred_reserved[i] = c->reserved[i];
        v->cache[i] = c->reserved[i] - c->peak[i];
    }
    char adds[96] = "";
    if (curc && curc->effect == ADV_E_COUNTER)
        snprintf(adds, sizeof adds, "; it adds %s over no recompute",
                 GB((uint64_t)-curc->saving));
    if (curc)
        snprintf(v->why, sizeof v->why,
                 "the least replay cost (%.1f%% of the step, %s) among the settings that "
                 "fit every rank: predicted max peak %s; the current %s costs %.1f%% and "
                 "peaks at %s (%s%s)",
                 100 * c->cost, "FLOP model", GB(c->max_peak), curc->name, 100 * curc->cost,
                 GB(curc->max_peak), curc->fails_rank < 0 ? "fits" : "does not fit", adds);
    else
        snprintf(v->why, sizeof v->why,
                 "the least replay cost (%.1f%% of the step, %s) among the settings that "
                 "fit every rank: predicted max peak %s against %s without it",
                 100 * c->cost, "FLOP model", GB(c->max_peak), GB(st->base_max));
    if (c->effect == ADV_E_FITS)
        cheaper_marginal_note(v, c);
    if (c->effect == ADV_E_MARGINAL && !strncmp(c->reason, "unverified cache", 16))
        why_add(v, "CACHE UNVERIFIED: %s, so the allocator's cache in every prediction here "
                   "is a lower bound%s: confirm with a run before relying on it",
                v->cache_why, choose_tier(c) == 4 ? " (and this setting fits only without the "
                                                    "2% error bound)" : "");
    else if (c->effect == ADV_E_MARGINAL && !strncmp(c->reason, "unverified", 10))
        why_add(v, "MARGINAL: no other setting fits; this one is %s: confirm with a run "
                   "before relying on it", c->reason);
    else if (c->effect == ADV_E_MARGINAL)
        why_add(v, "MARGINAL: no setting fits with the prediction's 2%% error bound added; "
                   "this one fits without it (%s): confirm with a run before relying on it",
                c->reason);
}

/* The verdict of a lever that costs no replay and fits every rank
 * (adv_zero_replay_lever, rule 45): its finding's code, the lever as the
 * change, its predictions, and the cheapest recompute setting that would also
 * fit (st->pick) with its replay cost, or that none does. */
static void
lever_verdict(run_state *st, const adv_lever_fit *zr)
{
    adv_verdict *v = st->v;
    const adv_finding *f = &v->findings[zr->finding];
    size_t i = (size_t)zr->rank;
    snprintf(v->code, sizeof v->code, "%s", f->code);
    snprintf(v->change, sizeof v->change, "%s", zr->change);
    snprintf(v->config_diff, sizeof v->config_diff, "%s", zr->change);
    v->chosen = -1;
    for (size_t k = 0; k < v->nranks; k++) {
        v->predicted[k] = zr->predicted[k];
        v->pred_reserved[k] = zr->reserved[k];
        v->cache[k] = zr->reserved[k] - zr->predicted[k];
    }
    char alt[512];
    const adv_cand *c = st->pick >= 0 ? &v->cands[st->pick] : NULL;
    if (c)
        snprintf(alt, sizeof alt, "the cheapest recompute setting that would also fit is %s "
                 "(%.1f%% of the step in replay, FLOP model; predicted max peak %s%s%.200s)",
                 c->name, 100 * c->cost, GB(c->max_peak), c->effect == ADV_E_FITS ? "" : ": ",
                 c->effect == ADV_E_FITS ? "" : c->reason);
    else
        snprintf(alt, sizeof alt, "no recompute setting fits");
    /* over the budget only by the headroom, on a job that ran (as a triage
     * verdict says, run_choose) */
    uint64_t spare = 0;
    int at = adv_job_oomed(st->j) ? -1 : adv_device_spare(v, &spare);
    char ran[320] = "";
    if (at >= 0)
        snprintf(ran, sizeof ran, "MARGINAL, not an OOM: the job ran without one; its "
                 "reserved peak left %s of rank %d's device spare (capacity less memory "
                 "outside PyTorch), inside the %s headroom. ",
                 GB(spare), v->rank_id[at], GB(v->headroom));
    snprintf(v->why, sizeof v->why,
             "%sZERO REPLAY: %s removes %s from rank %d's peak at no replay cost (%s, %s): its "
             "predicted reserved peak %s (the baseline's modelled reserved peak less those "
             "bytes) is within the %s budget %s the 2%% error bound, on every rank, so it "
             "ranks ahead of every recompute setting",
             ran, zr->change, GB(v->baseline[i] - zr->predicted[i]), v->rank_id[i], f->code,
             f->subtype, GB(zr->reserved[i]), GB(v->budget[i]),
             zr->tier % 2 ? "only without" : "with");
    why_add(v, "%s", alt);
    why_add(v, "The finding's evidence (rank %d, in the findings): %.300s...", f->rank,
            f->evidence);
    if (zr->tier >= 2)
        why_add(v, "CACHE UNVERIFIED: %s, so the allocator's cache in every prediction here "
                   "is a lower bound%s: confirm with a run before relying on it",
                v->cache_why, zr->tier == 3 ? " (and the lever fits only without the 2% error "
                                              "bound)" : "");
    else if (zr->tier == 1)
        why_add(v, "MARGINAL: the lever fits only without the prediction's 2%% error bound: "
                   "confirm with a run before relying on it");
    st->lever_chosen = 1;
}

/* The verdict when recompute is on and its undo is incomplete (undo_short)
 * and the current setting does not fit: no other setting was predicted, so
 * neither a recompute fix nor "recompute cannot help" can be claimed (a cause
 * that yields to a fitting recompute setting, prim, stays a finding). Says
 * what could not be matched and what is known: the current setting's
 * measured peak against the budget. */
static void
undo_unknown_verdict(run_state *st, const adv_finding *prim)
{
    adv_verdict *v = st->v;
    const adv_cand *curc = find_cand(v, &st->active);
    snprintf(v->code, sizeof v->code, "n/a");
    snprintf(v->why, sizeof v->why,
             "UNKNOWN: recompute is on (%s) but only %d of the %d replay units it implies were "
             "matched to their forward regions (%d unmatched), so the job without it and every "
             "other setting are unknown. Known: the current setting, measured, peaks at %s "
             "(%s)%s%s%s",
             curc ? curc->name : "the recorded setting", st->undo_matched, st->undo_units,
             st->undo_units - st->undo_matched, GB(st->base_max),
             curc ? curc->reason : "over the budget", prim ? "; finding " : "",
             prim ? prim->code : "", prim ? " stays a finding: whether recompute could offset "
                                            "it is unknown" : "");
    snprintf(v->change, sizeof v->change,
             "none (unknown: the recompute replays could not all be matched; rerun with "
             "--profile --nvtx-ranges covering the steps, or without recompute for one "
             "iteration, and re-analyse)");
    snprintf(v->config_diff, sizeof v->config_diff, "%s", v->change);
    v->chosen = -1;
}

/* The per-rank statement of what binds (adv_binding_why), kept for the why
 * when it says more than the headline: the binding ranks are bound by
 * different things, or a cause was passed over for the verdict (a rank that
 * does not bind, an allocator-only fix beside a rank over its device in
 * allocated bytes, a fix the job already has). */
static void
binding_note(run_state *st, const uint8_t *bind, const uint8_t *ok, const adv_finding *prim,
             int unexplained)
{
    adv_verdict *v = st->v;
    st->binds[0] = 0;
    int passed_over = unexplained && v->nfindings;
    for (size_t k = 0; ok && k < v->nfindings; k++)
        passed_over |= !ok[k] && !strncmp(v->findings[k].code, "X:", 2) &&
                       (!strcmp(v->findings[k].code, "X:FRAGMENTATION") ||
                        !strcmp(v->findings[k].code, "X:OPTIMIZER_STATE") ||
                        !strcmp(v->findings[k].code, "X:PARAM_STATE") ||
                        !strcmp(v->findings[k].code, "X:NCCL_BUFFERS") ||
                        !strcmp(v->findings[k].code, "X:CUDA_GRAPH_POOL") ||
                        !strcmp(v->findings[k].code, "X:CHECKPOINT_SAVE") ||
                        !strcmp(v->findings[k].code, "X:LOGITS") ||
                        !strcmp(v->findings[k].code, "X:RETENTION"));
    char text[sizeof st->binds];
    adv_binding_why(st->j, v, bind, prim, text, sizeof text);
    if (passed_over || strstr(text, "; rank"))
        snprintf(st->binds, sizeof st->binds, "%s", text);
}

/* Step 6: the verdict: a primary triage finding, else the valid fitting
 * candidate of least replay cost (a setting holding an ineffective label
 * only when nothing else fits), else OK:FITS when the job fits as it is,
 * else the fallback that saves most. */
static void
run_choose(run_state *st)
{
    adv_verdict *v = st->v;
    if (v->ncands > 1)
        am_sort(v->cands, v->ncands, sizeof *v->cands, cand_cost_cmp);
    /* in choose_tier's order: clear fits first, then fits short only of one
     * reserved step, then settings that fit only without the error bound
     * (marginal, said so), then unverified ones (a replay of the job's own
     * code never recorded: unverified_replay), then unverified ones that fit
     * only without the bound; each without an ineffective label first */
    st->pick = -1;
    for (int pass = 0; pass < 10 && st->pick < 0; pass++)
        for (size_t k = 0; k < v->ncands; k++)
            if (v->cands[k].valid && choose_tier(&v->cands[k]) == pass / 2 &&
                (pass % 2 || !(v->cands[k].labels & st->ineff))) {
                st->pick = (int)k;
                break;
            }
    const adv_cand *curc = st->t0 ? find_cand(v, &st->active) : NULL;
    st->cur_idx = curc ? (int)(curc - v->cands) : -1;
    /* issue 14 A, D: only a finding of a rank that binds may be the verdict,
     * never an allocator-only fix while a binding rank is over its device in
     * allocated bytes, never a fix the job already has (advisor_binding.c) */
    adv_drop_levers_in_use(v, st->cfg);
    uint8_t bind[ADV_MAX_RANKS];
    size_t nbind = adv_binding_ranks(st->j, v, bind);
    uint8_t *ok = v->nfindings ? malloc(v->nfindings) : NULL;
    for (size_t k = 0; ok && k < v->nfindings; k++)
        ok[k] = (uint8_t)adv_finding_eligible(st->j, v, bind, nbind, &v->findings[k]);
    const adv_finding *prim = primary_finding(v, ok);
    /* a binding rank no eligible cause explains needs the counterfactuals:
     * the triage code is then no verdict for the job (a finding, in BINDS) */
    int unexplained = nbind && !adv_binding_explained(v, bind, ok);
    if (unexplained)
        prim = NULL;
    binding_note(st, bind, ok, prim, unexplained);
    free(ok);
    /* rule 45: a lever that costs no replay and fits every rank ranks ahead
     * of every recompute setting (advisor_lever.c) */
    adv_lever_fit zr;
    int zr_ok = adv_zero_replay_lever(v, bind, &zr) && !st->base_fits && !st->undo_short;
    if (zr.change[0] && zr.finding >= 0 && !st->base_fits && !st->undo_short) {
        snprintf(v->lever_fit, sizeof v->lever_fit, "%s", zr.change);
        snprintf(v->lever_code, sizeof v->lever_code, "%s", v->findings[zr.finding].code);
        v->lever_tier = zr.tier;
        memcpy(v->lever_reserved, zr.reserved, sizeof v->lever_reserved);
    }
    /* state created by the first optimizer step that decides a later OOM
     * (state_growth), or logits, stay findings with their levers when a
     * recompute setting also fits: the verdict is then the narrowest
     * recompute fix */
    if (prim && st->pick >= 0 && prim->ranked &&
        (strcmp(prim->subtype, "state_growth") == 0 || strcmp(prim->code, "X:LOGITS") == 0))
        prim = NULL;
    /* a triage code is the verdict only with an OOM or a negative margin
     * (issue 14 B): on a job that fits its budget and ran out of memory
     * nowhere the finding stays a warning with its bytes; retention growth
     * that passes the budget before the job ends is a negative margin to come */
    const adv_finding *warn = NULL;
    int oomed = adv_job_oomed(st->j);
    if (prim && st->base_fits && !oomed && strcmp(prim->subtype, "growth") != 0) {
        warn = prim;
        prim = NULL;
    }
    if (st->undo_short && !st->base_fits &&
        (!prim || strcmp(prim->subtype, "state_growth") == 0 ||
         strcmp(prim->code, "X:LOGITS") == 0)) {
        undo_unknown_verdict(st, prim);
        return;
    }
    if (zr_ok && (!prim || prim == &v->findings[zr.finding]) &&
        (st->pick < 0 || lever_rank(zr.tier) <= choose_tier(&v->cands[st->pick]))) {
        lever_verdict(st, &zr);
        return;
    }
    if (prim) {
        snprintf(v->code, sizeof v->code, "%s", prim->code);
        /* over the budget only by the headroom, on a job that ran: it did
         * not run out of memory, it is marginal (issue 14 B) */
        uint64_t spare = 0;
        int at = oomed || st->base_fits ? -1 : adv_device_spare(v, &spare);
        char ran[320] = "";
        if (at >= 0)
            snprintf(ran, sizeof ran, "MARGINAL, not an OOM: the job ran without one; its "
                     "reserved peak left %s of rank %d's device spare (capacity less memory "
                     "outside PyTorch), inside the %s headroom. What fills it: ",
                     GB(spare), v->rank_id[at], GB(v->headroom));
        snprintf(v->why, sizeof v->why, "%s%s (rank %d)", ran, prim->evidence, prim->rank);
        char chb[320];
        const char *ch = triage_change(prim, st->cfg, chb, sizeof chb);
        snprintf(v->change, sizeof v->change, "%s", ch);
        snprintf(v->config_diff, sizeof v->config_diff, "%s", ch);
        if (st->pick >= 0 && !strstr(prim->code, "STATE")) {
            /* under fragmentation the cheapest setting that fits with the gap
             * the finding saw, else the pick marked as needing the fix (C) */
            int fb = st->pick;
            char gap[512];
            if (adv_fallback_with_gap(v, prim, &v->cands[fb], gap, sizeof gap) == 0)
                for (size_t k = 0; k < v->ncands; k++)
                    if (v->cands[k].valid && v->cands[k].fails_rank < 0 &&
                        !(v->cands[k].labels & st->ineff) &&
                        adv_fallback_with_gap(v, prim, &v->cands[k], gap, sizeof gap) == 1) {
                        fb = (int)k;
                        break;
                    }
            int fbok = adv_fallback_with_gap(v, prim, &v->cands[fb], gap, sizeof gap);
            /* "none" from a run with recompute on is removing it, not OK:FITS */
            const char *fbname = strncmp(v->cands[fb].code, "OK:", 3) == 0
                                     ? "no recompute (none)" : v->cands[fb].code;
            size_t l = strlen(v->why);
            snprintf(v->why + l, sizeof v->why - l,
                     fbok == 0 ? ". No recompute setting runs without the allocator fix; "
                                 "the cheapest with it: %s (%.1f%% replay)%s"
                               : ". Fallback at a compute cost: %s (%.1f%% replay)%s",
                     fbname, 100 * v->cands[fb].cost, gap);
        }
    } else if (st->base_fits && !(curc && st->pick >= 0 && st->pick != st->cur_idx &&
                                  v->cands[st->pick].cost < curc->cost - 1e-4)) {
        snprintf(v->code, sizeof v->code, "OK:FITS");
        snprintf(v->why, sizeof v->why,
                 "every rank's predicted peak is within its budget (capacity - outside "
                 "PyTorch - %s headroom)",
                 GB(v->headroom));
        snprintf(v->change, sizeof v->change, "none");
        if (curc) {
            size_t l = strlen(v->why);
            snprintf(v->why + l, sizeof v->why - l,
                     "; the current setting %s is the cheapest %s", curc->name,
                     cheaper_marginal(v, curc) ? "clear fit" : "that fits");
            cheaper_marginal_note(v, curc);
            snprintf(v->change, sizeof v->change, "none (keep %s)", curc->name);
        }
        if (st->undo_short)
            why_add(v, "UNKNOWN whether a cheaper setting (or none) also fits: only %d of the "
                       "%d replay units the current setting implies were matched to their "
                       "forward regions, so the job without it was not predicted%s",
                    st->undo_matched, st->undo_units,
                    frames_only(st->j) ? " (the note says why and what to record)" : "");
    } else if (st->pick >= 0) {
        choose_candidate(st, curc);
    } else if (v->ncands) {
        choose_fallback(st);
    } else {
        snprintf(v->code, sizeof v->code, st->base_fits ? "OK:FITS" : "n/a");
        snprintf(v->why, sizeof v->why, "%.760s",
                 v->level_note[0] ? v->level_note : "no counterfactual could be evaluated");
        snprintf(v->change, sizeof v->change, "none");
    }
    if (warn)
        why_add(v, "WARNING %s (rank %d, %s) is not the verdict: no rank ran out of memory "
                   "and every rank's reserved peak is within its budget; its bytes and "
                   "levers are in the findings",
                warn->code, warn->rank, warn->subtype);
}

/* withhold the verdict: code n/a, no change, no recommendation */
static void
withhold(adv_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
withhold(adv_verdict *v, const char *fmt, ...)
{
    char buf[sizeof v->why];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(v->code, sizeof v->code, "n/a");
    snprintf(v->why, sizeof v->why, "%s", buf);
    v->chosen = -1;
    for (size_t i = 0; i < v->nranks; i++) {
        v->predicted[i] = v->baseline[i];
        v->pred_reserved[i] = v->reserved[i];
        v->cache[i] = v->reserved[i] - v->baseline[i];
    }
}

/* 1 when o failed at one page of PyTorch's expandable segments: its request
 * is the pages the allocator created for it before the failed one plus that
 * one, a lower bound (source_native.c page_run; PyTorch's "Tried to
 * allocate" in the job's stderr is the exact size) */
static int
oom_page_request(const run_state *st, const am_oom *o)
{
    return st->cfg->alloc_expandable && o->lib == AM_LIB_PYTORCH && !o->past_limit;
}

/* The first fatal OOM of the job, explained: rank, iteration, phase, the
 * request, what was live (allocated, reserved, device, the largest groups). */
static void
explain_oom(run_state *st, const am_rank *r, size_t i)
{
    adv_verdict *v = st->v;
    const am_oom *o = r->oom;
    const adv_trace *t = st->tensor ? &st->tr[i] : NULL;
    char when[160], groups[320];
    if (o->past_limit)
        snprintf(when, sizeof when, "after the byte limit stopped recording (iteration and "
                                    "phase unknown; the last recorded event was in %s)",
                 am_phase_name(o->phase));
    else if (o->iteration >= 0)
        snprintf(when, sizeof when, "in iteration %d, phase %s", o->iteration,
                 am_phase_name(o->phase));
    else
        snprintf(when, sizeof when, "before iteration 0 (phase %s: model and buffer "
                                    "construction or checkpoint loading)",
                 am_phase_name(o->phase));
    size_t g = 0;
    groups[0] = 0;
    /* the layer too: two layers' groups read "2.78 GiB forward/mlp" twice (hnew2) */
    for (size_t k = 0; k < o->ngroups && k < 3; k++) {
        char layer[24] = "";
        if (o->groups[k].layer > 0)
            snprintf(layer, sizeof layer, " layer %d", (int)o->groups[k].layer);
        g += (size_t)snprintf(groups + g, g < sizeof groups ? sizeof groups - g : 0,
                              "%s%s %s/%s%s", k ? ", " : "", GB(o->groups[k].bytes),
                              am_phase_name(o->groups[k].phase),
                              am_boundary_name(o->groups[k].boundary), layer);
    }
    if (o->past_limit) {
        /* the live set at the OOM was not recorded: only cudaMemGetInfo's
         * figures in the OOM record are of that moment (issue 14 D) */
        char use[128] = "the device's use then unknown";
        if (o->total_bytes && o->total_bytes >= o->free_bytes)
            snprintf(use, sizeof use, "%s of the %s device in use (cudaMemGetInfo at the OOM)",
                     GB(o->total_bytes - o->free_bytes), GB(o->total_bytes));
        why_add(v,
                "The job ran out of memory: rank %d %s: a request of %s failed with %s; what "
                "was live then was not recorded (at the last recorded event PyTorch had %s "
                "allocated, %s live on the device: lower bounds); that request is in rank %d's "
                "baseline peak %s",
                r->rank, when, GB(o->requested), use, GB(o->live[AM_L_TENSOR]),
                GB(o->live[AM_L_DEVICE]), r->rank, GB(v->baseline[i]));
    } else
    why_add(v,
            "The job ran out of memory: rank %d %s: a request of %s%s failed with %s allocated "
            "by PyTorch (%s reserved), %s live on the device%s%s (largest device-level groups: "
            "%s); that request is in rank %d's baseline peak %s",
            r->rank, when, oom_page_request(st, o) ? "at least " : "",
            GB(t && t->oom ? t->oom_request : o->requested),
            GB(t && t->oom ? t->oom_allocated : o->live[AM_L_TENSOR]),
            GB(t && t->oom ? t->oom_reserved : 0), GB(o->live[AM_L_DEVICE]),
            v->capacity[i] ? " of " : "", v->capacity[i] ? GB(v->capacity[i]) : "",
            groups[0] ? groups : "no groups recorded", r->rank, GB(v->baseline[i]));
    if (strcmp(v->code, "OK:FITS") == 0)
        withhold(v, "%s. The job ran out of memory although every prediction fits its budget: "
                    "the trace misses bytes the device held (or --budget exceeds the device); "
                    "no fit can be claimed",
                 v->why);
}

static void coverage_guard(run_state *st);
static void cutoff_guard(run_state *st);

/* Step 7: the guards that keep the verdict from being confidently wrong
 * (docs/advisor.md "Rules"): an unknown budget, ranks without memory events, a
 * trace that ends before iteration 0, incomplete coverage, a fatal OOM. */
static void
run_guards(run_state *st)
{
    adv_verdict *v = st->v;
    am_job *j = st->j;
    for (size_t i = 0; i < v->nranks; i++) {
        const am_rank *r = &j->ranks[i];
        if (!r->peak[AM_L_TENSOR].known && !r->peak[AM_L_DEVICE].known) {
            v->baseline[i] = v->predicted[i] = 0;
            withhold(v, "rank %d recorded no memory events: no peak, so no fit can be judged "
                        "(the trace holds %" PRIu64 " events)",
                     r->rank, r->nevents);
            snprintf(v->change, sizeof v->change, "none");
            break;
        }
        if (!r->oom && !r->src->meta.closed && !r->niters) {
            withhold(v, "rank %d's trace ends before iteration 0 and was not closed: the job "
                        "failed (or was killed) before its first iteration; no fit can be "
                        "claimed",
                     r->rank);
            snprintf(v->change, sizeof v->change, "none");
            break;
        }
    }
    if (v->budget_unknown && strncmp(v->code, "n/a", 3) != 0) {
        int oom = 0;
        for (size_t i = 0; i < v->nranks; i++)
            oom |= j->ranks[i].oom != NULL;
        if (!oom) {
            char was[sizeof v->code];
            snprintf(was, sizeof was, "%s", v->code);
            withhold(v, "budget unknown: pass --budget (the trace records no device capacity: "
                        "no header capacity, cudaMemGetInfo or device properties); without it "
                        "no fit or shortfall can be judged (%s holds only if the budget is "
                        "below the peak %s)",
                     was, GB(st->base_max));
            snprintf(v->change, sizeof v->change, "pass --budget BYTES (the device's memory)");
            snprintf(v->config_diff, sizeof v->config_diff, "%s", v->change);
        } else if (v->device_note[0]) {
            why_add(v, "%s; budget unknown: pass --budget", v->device_note);
        } else {
            why_add(v, "budget unknown: pass --budget (no device capacity recorded)");
        }
    } else if (v->budget_unknown) {
        if (v->device_note[0])
            why_add(v, "%s; budget unknown: pass --budget", v->device_note);
        else
            why_add(v, "budget unknown: pass --budget (no device capacity recorded)");
    } else if (v->device_note[0]) {
        why_add(v, "%s: not used as the budget (--budget given)", v->device_note);
    }
    coverage_guard(st);
    if (strncmp(v->code, "n/a", 3) != 0)
        cutoff_guard(st);
    if (v->cache_short && !strcmp(v->code, "OK:FITS")) {
        withhold(v, "CACHE UNVERIFIED: every rank's recorded peak is within its budget, but %s: "
                    "the cache term is a lower bound, so no fit is claimed; record two or more "
                    "complete iterations after the first optimizer step to confirm",
                 v->cache_why);
        snprintf(v->change, sizeof v->change, "none (record a steady-state iteration first)");
        snprintf(v->config_diff, sizeof v->config_diff, "%s", v->change);
    }
    for (size_t i = 0; i < v->nranks; i++)
        if (j->ranks[i].oom) {
            explain_oom(st, &j->ranks[i], i);
            break;
        }
    if (st->binds[0])
        why_add(v, "%s", st->binds);
}

/* a capped or windowed trace: codes decided from the live set (fits,
 * recompute, fragmentation, state, retention) are withheld, since the live
 * set was not all recorded; codes decided by the failing call itself (NCCL's
 * own allocation, an OOM inside a capture) are qualified. Says what window
 * would be needed. */
static void
coverage_guard(run_state *st)
{
    adv_verdict *v = st->v;
    const am_rank *r = NULL;
    for (size_t i = 0; i < v->nranks && !r; i++)
        if (!st->j->ranks[i].coverage.complete)
            r = &st->j->ranks[i];
    if (!r)
        return;
    const am_meta *m = &r->src->meta;
    char need[400];
    int it = r->oom ? r->oom->iteration : r->peak[AM_L_TENSOR].known
                                              ? r->peak[AM_L_TENSOR].iteration
                                              : -1;
    if (m->salvaged_chunks) /* hnew finding 3: not a window's advice */
        snprintf(need, sizeof need,
                 "analyse an undamaged copy of the trace, or rerun the job under the shim "
                 "(--salvage skipped %" PRIu32 " damaged or missing chunk(s), about %s of "
                 "records; what they held is unknown)", m->salvaged_chunks,
                 GB(m->salvage_lost_bytes));
    else if (r->coverage.capped)
        snprintf(need, sizeof need,
                 "rerun with RECOMPSHIM_MAX_BYTES unset or well above %s (recording stopped at "
                 "%.3f s, %" PRIu64 " records dropped), so the window recorded runs from the "
                 "job's start through %s",
                 m->max_bytes ? GB(m->max_bytes) : "the cap", (double)m->limit_ns / 1e9,
                 m->dropped_records, r->oom ? "the OOM" : "the last iteration");
    else
        snprintf(need, sizeof need,
                 "rerun with RECOMPSHIM_WINDOW unset or a window that opens before model "
                 "construction (memory allocated before the window is missing) and closes "
                 "after %s",
                 it >= 0 ? "the iteration of the peak/OOM" : "the OOM");
    /* salvage lost chunks anywhere in the run: no code is decided by bytes
     * it never saw (the memory "outside PyTorch" is the device's use less the
     * segments read, so lost segments read as another process's) */
    int keep = !m->salvaged_chunks &&
               ((strncmp(v->code, "X:NCCL_BUFFERS", 14) == 0 && st->tensor && r->oom &&
                 r->oom->lib != AM_LIB_PYTORCH) ||
                (strncmp(v->code, "X:CUDA_GRAPH_POOL", 17) == 0 && st->tr[0].graph_capture_oom));
    char was[sizeof v->code], why[sizeof v->why];
    snprintf(was, sizeof was, "%s", v->code);
    snprintf(why, sizeof why, "%s", v->why);
    if (keep) {
        snprintf(v->why, sizeof v->why,
                 "COVERAGE: INCOMPLETE (rank %d: %s): the failing call decides this code, the "
                 "byte figures are of the recorded part only; for the whole live set %s. %.700s",
                 r->rank, r->coverage.summary, need, why);
        return;
    }
    /* a reading from the recorded part is dropped where the OOM came after the
     * limit (its live set there is not the OOM's); a capped trace without an
     * OOM may have lost it (the shim's reserved tail was full) (issue 14 D) */
    char reading[384];
    int past = r->oom && r->oom->past_limit, lost = !r->oom && r->coverage.capped;
    if (past)
        snprintf(reading, sizeof reading, "the OOM came after the limit, so no reading is "
                                          "given from the recorded part");
    else
        snprintf(reading, sizeof reading, "%sfrom the recorded part alone it would read %s, "
                 "which the missing bytes may contradict",
                 lost ? "OOM not recorded: an OOM after the limit is kept only while the "
                        "shim's reserved tail has room, so none here is not no OOM; " : "",
                 was);
    withhold(v,
             "COVERAGE: INCOMPLETE (rank %d: %s): the verdict is withheld because the live set "
             "at the peak/OOM was not all recorded (%s); to diagnose, %s",
             r->rank, r->coverage.summary, reading, need);
    snprintf(v->change, sizeof v->change, "none (record the whole live set first)");
    snprintf(v->config_diff, sizeof v->config_diff, "%s", v->change);
}

/* 1 when the rank's fatal OOM cut its trace before one forward and backward
 * had completed: during model construction (before iteration 0), or in an
 * activation phase (or an unknown one) of the first iteration the trace
 * records, with no earlier iteration finished. The rest of that forward
 * (later layers, the logits and loss) and the whole backward were never
 * recorded, so every prediction built from the trace is a lower bound. */
static int
oom_cut_first_step(const am_rank *r)
{
    const am_oom *o = r->oom;
    if (!o || o->past_limit)
        return 0;
    if (o->iteration < 0)
        return 1;
    if (r->niters && o->iteration > r->iters[0].number)
        return 0;
    return activation_phase(o->phase) || o->phase == AM_PH_unknown;
}

/* The candidate whose predicted reserved peak, over the ranks, is lowest:
 * the setting that saves the most; NULL when none was evaluated. */
static const adv_cand *
most_saving(const adv_verdict *v)
{
    const adv_cand *best = NULL;
    uint64_t best_max = 0;
    for (size_t k = 0; k < v->ncands; k++) {
        const adv_cand *c = &v->cands[k];
        if (!c->valid || (!c->labels && !c->full_method))
            continue;
        uint64_t mx = 0;
        for (size_t i = 0; i < v->nranks; i++)
            mx = c->reserved[i] > mx ? c->reserved[i] : mx;
        if (!best || mx < best_max) {
            best = c;
            best_max = mx;
        }
    }
    return best;
}

/* An OOM before the first forward and backward completed (oom_cut_first_step):
 * the predictions are lower bounds. A setting whose lower bound fits may
 * still not fit, so a recommended setting (R:<setting>) is withheld and the
 * change becomes the run that would show a whole iteration: the setting that
 * saves the most. Codes that lower bounds cannot overturn (no setting fits:
 * R:INSUFFICIENT; a triage code decided by what was live) stay, with their
 * byte figures called lower bounds. Found by replaying public OOM reports
 * (an OOM at layer 30 of 32 in the first forward: full[block,11] predicted
 * at 73.95 GiB, 85.14 GiB when executed). */
/* What the OOM that cut rank i's first step left unrecorded, in words, as
 * the trace shows it (issue 14 E: a job that OOMed on the loss's own request
 * was told the logits and the loss were never recorded): a stage without the
 * output layer (not the last pipeline stage) has only later layers to come;
 * where the output layer or the loss made the failed request, what follows
 * it; else later layers, the logits and the loss. */
static void
unrecorded_rest(const run_state *st, size_t i, char *buf, size_t n)
{
    const am_rank *r = &st->j->ranks[i];
    const adv_trace *t = st->tr ? &st->tr[i] : NULL; /* merge: the part's scalars */
    uint8_t b = t && t->oom && !t->oom_past_limit ? t->oom_boundary : AM_BD_unknown;
    if (r->pp > 1 && r->stage >= 0 && r->stage != r->pp - 1)
        snprintf(buf, n, "the rest of that forward (this stage's later layers; the output "
                         "layer and the loss are on the last stage) and the backward");
    else if (b == AM_BD_loss)
        snprintf(buf, n, "the rest of the loss (its own request failed, with the logits live) "
                         "and the backward");
    else if (b == AM_BD_output_layer)
        snprintf(buf, n, "the rest of that forward (the output layer's request failed; the "
                         "loss) and the backward");
    else
        snprintf(buf, n, "the rest of that forward (later layers, logits and loss) and the "
                         "backward");
}

static void
cutoff_guard(run_state *st)
{
    adv_verdict *v = st->v;
    const am_rank *r = NULL;
    size_t ri = 0;
    for (size_t i = 0; i < v->nranks && !r; i++)
        if (oom_cut_first_step(&st->j->ranks[i])) {
            r = &st->j->ranks[i];
            ri = i;
        }
    if (!r)
        return;
    char rest[192];
    unrecorded_rest(st, ri, rest, sizeof rest);
    char where[160];
    if (r->oom->iteration < 0)
        snprintf(where, sizeof where, "before iteration 0 (model and buffer construction or "
                                      "checkpoint loading)");
    else
        snprintf(where, sizeof where, "in the %s of iteration %d, the first the trace records",
                 am_phase_name(r->oom->phase), r->oom->iteration);
    int recommends = (strncmp(v->code, "R:", 2) == 0 && strcmp(v->code, "R:INSUFFICIENT") != 0) ||
                     st->lever_chosen;
    if (!recommends) {
        size_t l = strlen(v->why);
        snprintf(v->why + l, sizeof v->why - l,
                 ". The OOM cut rank %d's trace %s, before one forward and backward had "
                 "completed: the byte figures here are lower bounds",
                 r->rank, where);
        return;
    }
    const adv_cand *best = most_saving(v);
    char was[sizeof v->code], flags[512], diff[1024];
    snprintf(was, sizeof was, "%s", v->code);
    uint64_t was_max = 0, base_max = 0, budget = 0;
    for (size_t i = 0; i < v->nranks; i++) {
        was_max = v->pred_reserved[i] > was_max ? v->pred_reserved[i] : was_max;
        base_max = v->reserved[i] > base_max ? v->reserved[i] : base_max;
        budget = !budget || (v->budget[i] && v->budget[i] < budget) ? v->budget[i] : budget;
    }
    flags[0] = diff[0] = 0;
    if (best)
        config_diff(v, best, diff, sizeof diff, flags, sizeof flags);
    char lever[96] = "";
    if (st->lever_chosen)
        snprintf(lever, sizeof lever, "%s", v->lever_fit);
    withhold(v,
             "the job ran out of memory on rank %d %s, before one forward and backward had "
             "completed: %s were never recorded, so every prediction is a lower bound (%s%s%s: at "
             "least %s reserved; no recompute: at least %s; budget %s) and no setting can be "
             "claimed to fit. To diagnose, rerun with the setting that saves the most%s%s so "
             "that one iteration completes, and analyse that run: the advisor undoes its "
             "recompute to predict every other setting from it",
             r->rank, where, rest, was, lever[0] ? ", " : "", lever[0] ? lever : "",
             GB(was_max), GB(base_max), GB(budget), best ? ", " : "", best ? best->name : "");
    if (lever[0]) {
        /* rule 45: the lever that costs no replay is the first diagnosis run */
        why_add(v, "First rerun with %s: it costs no replay and its lower bound fits; if that "
                   "run runs out of memory too, rerun with %s",
                lever, best ? best->name : "the setting that saves the most");
        snprintf(v->change, sizeof v->change, "rerun with %s (no replay cost; to record one "
                 "whole iteration), or if that runs out of memory with %.300s, then "
                 "recomp-analyze that run", lever, best ? flags : "the setting that saves most");
        snprintf(v->config_diff, sizeof v->config_diff, "%s", lever);
    } else if (best) {
        snprintf(v->change, sizeof v->change, "rerun with %.400s (to record one whole "
                 "iteration), then recomp-analyze that run", flags);
        snprintf(v->config_diff, sizeof v->config_diff, "%s", diff);
    } else {
        snprintf(v->change, sizeof v->change, "none (record one whole iteration first)");
        snprintf(v->config_diff, sizeof v->config_diff, "%s", v->change);
    }
}

/* Step 8: the matched run that would confirm the verdict */
static void
run_confirm(run_state *st)
{
    adv_verdict *v = st->v;
    if (v->chosen >= 0) {
        adv_cand *c = &v->cands[v->chosen];
        snprintf(v->confirm, sizeof v->confirm,
                 "rerun the same job (same data and seed) under the shim with %.200s for at "
                 "least the first optimizer step and two steady iterations, then "
                 "`recomp-analyze RUNDIR`: expected allocated peak <= %s and PyTorch "
                 "reserved within the budget on every rank (headroom %s; the prediction's "
                 "error bound is 2%%)",
                 v->change, GB(c->max_peak), GB(v->headroom));
    } else if (v->lever_fit[0] && strcmp(v->change, v->lever_fit) == 0) {
        /* a zero-replay lever (rule 45): its own predictions */
        uint64_t most = 0;
        for (size_t i = 0; i < v->nranks; i++)
            most = v->pred_reserved[i] > most ? v->pred_reserved[i] : most;
        snprintf(v->confirm, sizeof v->confirm,
                 "rerun the same job (same data and seed) under the shim with %.200s for at "
                 "least the first optimizer step and two steady iterations, then "
                 "`recomp-analyze RUNDIR`: expected PyTorch reserved peak <= %s and within "
                 "the budget on every rank (headroom %s; the prediction's error bound is 2%%)",
                 v->change, GB(most), GB(v->headroom));
    } else if (strncmp(v->code, "X:", 2) == 0) {
        /* v->change is a sentence for X: codes, not a list of flags (hnew
         * finding 3: "rerun ... with free the device: ...") */
        snprintf(v->confirm, sizeof v->confirm,
                 "make the change above (%.300s), rerun the same job under the shim and "
                 "compare `recomp-analyze RUNDIR` of both runs",
                 v->change);
    }
}

/* adv_run_summarize, rank i: its part's scalars and counterfactual table
 * (every setting adv_part_settings lists, as evaluate() would compute it). */
static int
fill_part(void *arg, size_t i)
{
    run_state *st = arg;
    adv_rank_part *p = &st->sparts[i];
    const adv_trace *t = &st->tr[i];
    p->scal = *t;
    p->scal.a = NULL;
    p->scal.ops = NULL;
    p->scal.layers = NULL;
    p->scal.insts = NULL;
    p->scal.xr = NULL;
    p->scal.py = NULL;
    p->scal.npyf = p->scal.cappyf = 0;
    p->scal.abwd = NULL;
    p->scal.nabwd = p->scal.capabwd = 0;
    p->scal.na = p->scal.capa = p->scal.nops = p->scal.capops = p->scal.caplayers = 0;
    p->scal.ninsts = p->scal.capinsts = p->scal.nxr = 0;
    for (int l = 0; l < ADV_NLABELS; l++)
        p->label_seen[l] = (uint8_t)adv_label_region_seen(st->t0 ? &st->t0[i] : t, l,
                                                          &p->label_layers[l]);
    if (!st->tensor)
        return 0;
    size_t max = 2 + (1u << ADV_NLABELS) + 2 * 1024;
    adv_setting *set = malloc(max * sizeof *set);
    size_t ns = st->can_cf ? adv_part_settings(st->cfg, &st->active, set, max) : 0;
    p->cf = calloc(ns + 1, sizeof *p->cf);
    if (!set || !p->cf) {
        free(set);
        return -1;
    }
    uint64_t lim = limit_of(st->v, i);
    adv_cf *f = &p->cf[p->ncf++];
    f->peak = adv_counterfactual_model(t, st->cfg, &f->s, st->extra[i], &f->phase, lim,
                                       &f->reserved, &f->step);
    for (size_t k = 0; k < ns; k++) {
        if (!st->t0 && !set[k].labels && !set[k].full_method)
            continue; /* (0, none) is the first entry */
        f = &p->cf[p->ncf++];
        f->s = set[k];
        f->undone = st->t0 != NULL;
        f->peak = adv_counterfactual_model(st->t0 ? &st->t0[i] : t, st->cfg, &f->s,
                                           st->extra[i], &f->phase, lim, &f->reserved,
                                           &f->step);
        f->foreign = adv_foreign_bytes(st->t0 ? &st->t0[i] : t, &f->s);
    }
    free(set);
    return 0;
}

/* adv_run_summarize: every rank's part (after the undo, before the sweep);
 * triage's findings go to the rank they name. 0, or -1 (out of memory). */
static int
run_fill_parts(run_state *st)
{
    adv_verdict *v = st->v;
    if (am_parallel_for(v->nranks, st->o->workers, fill_part, st) < v->nranks)
        return -1;
    for (size_t f = st->triage_from; f < st->ntriage; f++) {
        size_t i = 0;
        while (i < v->nranks && st->j->ranks[i].rank != v->findings[f].rank)
            i++;
        if (i == v->nranks)
            i = 0; /* triage names the rank of every finding; kept with the first */
        adv_rank_part *p = &st->sparts[i];
        adv_finding *q = realloc(p->findings, (p->nfindings + 1) * sizeof *q);
        if (!q)
            return -1;
        p->findings = q;
        q[p->nfindings++] = v->findings[f];
    }
    return 0;
}

/* The peak that ranks a rank for the advisor's selection (bytes): tensor
 * level, else device level, else 0. */
static uint64_t
select_key(const am_rank *r)
{
    return r->peak[AM_L_TENSOR].known ? r->peak[AM_L_TENSOR].bytes
           : r->peak[AM_L_DEVICE].known ? r->peak[AM_L_DEVICE].bytes
                                          : 0;
}

/* one rank in select_ranks' order */
typedef struct sel_ent {
    size_t i;                 /* index into j->ranks */
    int stage;
    int oom;                  /* the rank ran out of memory */
    uint64_t key;             /* select_key */
    size_t nth;               /* its place among its stage's ranks by peak, 0 first */
} sel_ent;

static int
sel_by_stage_peak(const void *a, const void *b)
{
    const sel_ent *x = a, *y = b;
    if (x->stage != y->stage)
        return x->stage < y->stage ? -1 : 1;
    if (x->oom != y->oom)
        return x->oom ? -1 : 1;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int
sel_by_round(const void *a, const void *b)
{
    const sel_ent *x = a, *y = b;
    if (x->nth != y->nth)
        return x->nth < y->nth ? -1 : 1;
    if (x->stage != y->stage)
        return x->stage < y->stage ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int
size_cmp(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* A job of more ranks than the advisor evaluates (ADV_MAX_RANKS): the ranks
 * it takes, as indices into j->ranks in rank order, into idx (max entries):
 * round by round, each pipeline stage's next rank, those that ran out of
 * memory first, then by highest peak, so that every stage is represented by
 * its failing and heaviest ranks (the ranks of one stage run the same code on the same shapes;
 * the last stage's logits or the first stage's in-flight microbatches are
 * never left out because of their rank numbers). Returns how many. */
static size_t
select_ranks(const am_job *j, size_t *idx, size_t max)
{
    size_t n = j->nranks, k = 0;
    sel_ent *e = malloc(n * sizeof *e);
    if (!e) {
        for (k = 0; k < max && k < n; k++)
            idx[k] = k;
        return k;
    }
    for (size_t i = 0; i < n; i++)
        e[i] = (sel_ent){i, j->ranks[i].stage, j->ranks[i].oom != NULL,
                         select_key(&j->ranks[i]), 0};
    am_sort(e, n, sizeof *e, sel_by_stage_peak);
    for (size_t i = 1; i < n; i++)
        e[i].nth = e[i].stage == e[i - 1].stage ? e[i - 1].nth + 1 : 0;
    am_sort(e, n, sizeof *e, sel_by_round);
    for (size_t i = 0; i < n && k < max; i++)
        idx[k++] = e[i].i;
    free(e);
    am_sort(idx, k, sizeof *idx, size_cmp);
    return k;
}

/* adv_run's pipeline over st (adv_run, adv_run_summarize, adv_run_merge). */
static int run_pipeline_on(run_state st);

static int run_pipeline_sel(run_state st);

/* run_pipeline_sel; on failure the verdict's allocations are freed, so that no
 * caller's error path leaks them (a merge of damaged summaries did, under
 * LeakSanitizer). */
static int
run_pipeline(run_state st)
{
    int rc = run_pipeline_sel(st);
    if (rc < 0)
        adv_verdict_free(st.v);
    return rc;
}

/* A job larger than ADV_MAX_RANKS: the pipeline on the ranks select_ranks
 * takes (a job of those ranks, their parts under merge), and the verdict says
 * which; otherwise the pipeline on the job as it is. */
static int
run_pipeline_sel(run_state st)
{
    am_job *j = st.j;
    if (j->nranks <= ADV_MAX_RANKS || st.sparts)
        return run_pipeline_on(st);
    size_t idx[ADV_MAX_RANKS];
    size_t n = select_ranks(j, idx, ADV_MAX_RANKS);
    am_rank *sub = malloc(n * sizeof *sub);
    adv_rank_part **subp = st.mparts ? malloc(n * sizeof *subp) : NULL;
    if (!sub || (st.mparts && !subp)) {
        free(sub);
        free(subp);
        snprintf(st.err, st.errlen, "advisor: out of memory");
        return -1;
    }
    am_job sj = *j;
    sj.ranks = sub;
    sj.nranks = n;
    sj.hot = -1;
    for (size_t k = 0; k < n; k++) {
        sub[k] = j->ranks[idx[k]]; /* shallow: the advisor reads ranks, never frees them */
        if ((int)idx[k] == j->hot)
            sj.hot = (int)k;
        if (subp)
            subp[k] = st.mparts[idx[k]];
        if (subp && !subp[k]) {
            snprintf(st.err, st.errlen,
                     "advisor: rank %d is among the ranks the advisor evaluates, but its "
                     "summary holds no advisor part (a summary keeps them for its first %d "
                     "ranks: summarize per node)",
                     sub[k].rank, ADV_MAX_RANKS);
            free(sub);
            free(subp);
            return -1;
        }
    }
    st.j = &sj;
    if (subp)
        st.mparts = subp;
    int rc = run_pipeline_on(st);
    if (rc == 0) {
        adv_verdict *v = st.v;
        size_t l = strlen(v->level_note);
        snprintf(v->level_note + l, sizeof v->level_note - l,
                 "%sthe advisor evaluated %zu of the job's %zu ranks: from every pipeline "
                 "stage in turn, its ranks that ran out of memory, then those with the highest "
                 "peaks (the ranks of one stage run the same code on the same shapes)",
                 l ? "; " : "", n, j->nranks);
    }
    free(sub);
    free(subp);
    return rc;
}

static int
run_pipeline_on(run_state st)
{
    am_job *j = st.j;
    const adv_opts *o = st.o;
    adv_verdict *v = st.v;
    char *err = st.err;
    size_t errlen = st.errlen;
    memset(v, 0, sizeof *v);
    v->chosen = -1;
    v->headroom = o->headroom;
    if (!j->nranks)
        return 0;
    v->nranks = j->nranks < ADV_MAX_RANKS ? j->nranks : ADV_MAX_RANKS;
    int rc = -1;
    st.tr = calloc(v->nranks, sizeof *st.tr);
    st.extra = calloc(v->nranks, sizeof *st.extra);
    if (!st.tr || !st.extra) {
        snprintf(err, errlen, "advisor: out of memory");
        goto out;
    }
    run_read_config(&st);
    if (run_build_traces(&st) < 0)
        goto out;
    run_triage(&st);
    if (run_undo_active(&st) < 0) {
        snprintf(err, errlen, "advisor: out of memory");
        goto out;
    }
    if (st.sparts && run_fill_parts(&st) < 0) {
        snprintf(err, errlen, "advisor: out of memory");
        goto out;
    }
    run_sweep_candidates(&st);
    run_choose(&st);
    run_guards(&st);
    run_confirm(&st);
    rc = 0;
out:
    for (size_t i = 0; i < v->nranks; i++) {
        if (st.tr)
            adv_trace_free(&st.tr[i]);
        if (st.t0)
            adv_trace_free(&st.t0[i]);
    }
    free(st.t0);
    free(st.tr);
    free(st.extra);
    if (!rc && st.mparts)
        for (size_t i = 0; i < v->nranks; i++)
            if (st.mparts[i]->missing) {
                snprintf(err, errlen, "advisor: the summary of rank %d lacks a counterfactual "
                                      "the candidate sweep asks for (written by another build "
                                      "of recomp-analyze? summarize again)",
                         j->ranks[i].rank);
                rc = -1;
                break;
            }
    return rc;
}

int
adv_run(am_job *j, const adv_opts *o, adv_verdict *v, char *err, size_t errlen)
{
    return run_pipeline((run_state){.j = j, .o = o, .v = v, .pick = -1, .cur_idx = -1,
                                    .err = err, .errlen = errlen});
}

int
adv_run_summarize(am_job *j, const adv_opts *o, adv_verdict *v, adv_rank_part *parts,
                  char *err, size_t errlen)
{
    return run_pipeline((run_state){.j = j, .o = o, .v = v, .pick = -1, .cur_idx = -1,
                                    .sparts = parts, .err = err, .errlen = errlen});
}

int
adv_run_merge(am_job *j, const adv_opts *o, const adv_cfg *cfg, adv_rank_part *const *parts,
              adv_verdict *v, char *err, size_t errlen)
{
    return run_pipeline((run_state){.j = j, .o = o, .v = v, .pick = -1, .cur_idx = -1,
                                    .mparts = parts, .mcfg = cfg, .err = err,
                                    .errlen = errlen});
}
