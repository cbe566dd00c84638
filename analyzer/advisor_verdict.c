/* advisor_verdict.c: the advisor's driver and its one verdict per job
 * (DESIGN.md §4.6, docs/advisor.md).
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
#include "report.h"
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
    }
    return "?";
}

void
adv_finding_add(adv_verdict *v, const char *code, const char *subtype, int rank,
                const char *fmt, ...)
{
    adv_finding *q = realloc(v->findings, (v->nfindings + 1) * sizeof *q);
    if (!q)
        return;
    v->findings = q;
    adv_finding *f = &q[v->nfindings++];
    memset(f, 0, sizeof *f);
    snprintf(f->code, sizeof f->code, "%s", code);
    snprintf(f->subtype, sizeof f->subtype, "%s", subtype);
    f->rank = rank;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->evidence, sizeof f->evidence, fmt, ap);
    va_end(ap);
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
} eval_ctx;

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

/* evaluate one setting on every rank: the current setting is the measured
 * trace; with recompute on, every other setting rewrites the trace without it */
static void
evaluate(adv_verdict *v, const eval_ctx *e, const adv_setting *s, adv_cand *c)
{
    memset(c, 0, sizeof *c);
    name_setting(s, c);
    c->fails_rank = -1;
    int64_t worst_over = INT64_MIN;
    int cur = e->t0 && same_setting(s, e->active);
    for (size_t i = 0; i < v->nranks; i++) {
        uint8_t ph = 0;
        if (cur)
            c->peak[i] = adv_counterfactual(&e->tr[i], &v->cfg, &(adv_setting){0}, e->extra[i],
                                            &ph);
        else
            c->peak[i] = adv_counterfactual(e->t0 ? &e->t0[i] : &e->tr[i], &v->cfg, s,
                                            e->extra[i], &ph);
        if (c->peak[i] > c->max_peak)
            c->max_peak = c->peak[i];
        int64_t over = (int64_t)c->peak[i] - (int64_t)v->budget[i];
        if (over > 0 && over > worst_over) {
            worst_over = over;
            c->fails_rank = v->rank_id[i];
            c->fails_phase = ph;
        }
    }
    c->saving = (int64_t)e->ref_max - (int64_t)c->max_peak;
    c->cost = (s->labels || s->full_method) ? adv_replay_cost(&v->cfg, s, e->stage_layers) : 0;
    c->valid = adv_valid(&v->cfg, s, c->reason, sizeof c->reason);
    int64_t small = small_of(e->ref_max);
    if (c->fails_rank < 0)
        c->effect = ADV_E_FITS;
    else if (c->saving < -(int64_t)((uint64_t)16 << 20))
        c->effect = ADV_E_COUNTER;
    else if (c->saving < small && (s->labels || s->full_method))
        c->effect = ADV_E_INEFFECTIVE;
    else
        c->effect = ADV_E_INSUFFICIENT;
    if (!c->reason[0]) {
        if (c->effect == ADV_E_FITS)
            snprintf(c->reason, sizeof c->reason, "every rank within its budget%s",
                     cur ? " (the current setting, measured)" : "");
        else
            snprintf(c->reason, sizeof c->reason, "rank %d over its budget by %s (in %s)%s",
                     c->fails_rank, GB((uint64_t)worst_over), am_phase_name(c->fails_phase),
                     cur ? " (the current setting, measured)" : "");
    }
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
     * activation-model.md §3; Adam adds m and v like the main params (4+4, or
     * 2+2 with bf16 moments), sharded like them */
    double d = c->dist_opt ? (c->dp > 0 ? c->dp : 1) : 1;
    double per = (c->bf16 || c->fp16 ? 2 : 4) + 4 + 4 / d;
    double P = (double)init_bytes / per;
    double mv = c->exp_avg_bf16 ? 4 : 8;
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

int
adv_run(am_job *j, const adv_opts *o, adv_verdict *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    v->chosen = -1;
    v->headroom = o->headroom;
    if (!j->nranks)
        return 0;
    v->nranks = j->nranks < ADV_MAX_RANKS ? j->nranks : ADV_MAX_RANKS;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", j->ranks[0].path);
    char *sl = strrchr(dir, '/');
    if (sl)
        *sl = 0;
    else
        snprintf(dir, sizeof dir, ".");
    adv_config_read(&j->ranks[0].src->meta, o->config, dir, &v->cfg);
    adv_cfg *cfg = &v->cfg;
    snprintf(v->cost_source, sizeof v->cost_source,
             "FLOP model of the replayed forward (no GPU kernel times in the trace)");

    int tensor = 1;
    for (size_t i = 0; i < v->nranks; i++)
        if (!(j->ranks[i].levels & AM_LVL_TENSOR))
            tensor = 0;
    adv_trace *tr = calloc(v->nranks, sizeof *tr);
    uint64_t *extra = calloc(v->nranks, sizeof *extra);
    if (!tr || !extra) {
        free(tr);
        free(extra);
        snprintf(err, errlen, "advisor: out of memory");
        return -1;
    }
    int rc = 0;
    adv_trace *t0 = NULL;
    for (size_t i = 0; i < v->nranks; i++) {
        am_rank *r = &j->ranks[i];
        const am_meta *m = &r->src->meta;
        v->rank_id[i] = r->rank;
        if (tensor && adv_trace_build(r, cfg, &tr[i], err, errlen) < 0) {
            rc = -1;
            goto out;
        }
        if (tensor && getenv("RECOMP_ADVISOR_DEBUG"))
            adv_trace_debug(&tr[i]);
        uint64_t capy = o->budget ? o->budget
                        : m->device_capacity ? m->device_capacity
                                             : r->meminfo_total;
        v->capacity[i] = capy;
        /* outside PyTorch: device live - PyTorch reserved (max over the trace),
         * else the device-level bytes of non-PyTorch owners; plus the context
         * and other processes from cudaMemGetInfo samples */
        uint64_t out = tr[i].max_outside;
        const am_peak *dp = &r->peak[AM_L_DEVICE];
        if (!out && dp->known)
            out = dp->by_lib[AM_LIB_NCCL] + dp->by_lib[AM_LIB_CUBLAS] + dp->by_lib[AM_LIB_CUDNN];
        out += r->max_other;
        v->outside[i] = out;
        /* the caching allocator's own need beyond allocated (reserved - allocated at the
         * tensor peak): what the same allocation pattern will want again */
        const am_peak *tp = &r->peak[AM_L_TENSOR];
        v->cache[i] = tp->known && tp->reserved_bytes > tp->bytes ? tp->reserved_bytes - tp->bytes
                                                                  : 0;
        uint64_t keep = out + v->cache[i] + o->headroom;
        v->budget[i] = capy > keep ? capy - keep : 0;
        if (tensor && cfg->megatron && !tr[i].optimizer_seen) {
            extra[i] = adv_predict_optimizer_state(cfg, tr[i].init_bytes, v->next_wall,
                                                   sizeof v->next_wall);
        }
        if (tensor) {
            uint8_t ph;
            v->baseline[i] = adv_counterfactual(&tr[i], cfg, &(adv_setting){0}, extra[i], &ph);
        } else {
            v->baseline[i] = dp->known ? dp->bytes : 0;
        }
        v->predicted[i] = v->baseline[i];
    }
    v->available = 1;
    int primary = adv_triage(j, tr, v);
    uint64_t base_max = 0;
    int base_fits = 1;
    for (size_t i = 0; i < v->nranks; i++) {
        if (v->baseline[i] > base_max)
            base_max = v->baseline[i];
        if (v->baseline[i] > v->budget[i])
            base_fits = 0;
    }
    /* hot pipeline stage */
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
        }
    }
    int can_cf = tensor && cfg->megatron && cfg->num_layers > 0;
    for (size_t i = 0; i < v->nranks && can_cf; i++)
        if (!tr[i].megatron_ranges || !tr[i].nlayers)
            can_cf = 0;
    if (!cfg->megatron) {
        snprintf(v->level_note, sizeof v->level_note,
                 "not a Megatron job (no Megatron flags, config or frames recorded): triage "
                 "only, no recompute flags; the Python functions holding the most activation "
                 "bytes at the peak are listed");
        hot_functions(v, j);
    } else if (!tensor) {
        snprintf(v->level_note, sizeof v->level_note,
                 "device-level trace: the counterfactuals need tensor-level allocations "
                 "(PyTorch's allocator report hook reaching the shim, or RECOMPSHIM_TENSORS=async "
                 "or nocache at launch) and Megatron's layer ranges (--profile --nvtx-ranges "
                 "with --profile-step-start/--profile-step-end covering the traced steps)");
    } else if (!can_cf) {
        snprintf(v->level_note, sizeof v->level_note,
                 "no Megatron layer ranges in the trace (or the model size is unknown: %.200s): the "
                 "counterfactuals need --profile --nvtx-ranges covering the traced steps and "
                 "--num-layers/--hidden-size/... on the command line or in --config",
                 cfg->unknown[0] ? cfg->unknown : "none missing");
    }
    /* recompute already on: the trace without it (its replays matched to the
     * forward regions and undone); candidates are complete settings on it */
    adv_setting active;
    adv_setting_of_cfg(cfg, &active);
    uint64_t ref_max = base_max;
    if (can_cf && cfg->granularity) {
        int matched = 0, units = 0;
        t0 = calloc(v->nranks, sizeof *t0);
        if (!t0) {
            snprintf(err, errlen, "advisor: out of memory");
            rc = -1;
            goto out;
        }
        size_t nextra = 0;
        uint64_t extra_max = 0;
        for (size_t i = 0; i < v->nranks; i++) {
            int m = 0, u = 0;
            if (adv_trace_undo(&tr[i], cfg, &t0[i], &m, &u) < 0) {
                snprintf(err, errlen, "advisor: out of memory");
                rc = -1;
                goto out;
            }
            matched += m;
            units += u;
            nextra += t0[i].nxr;
            if (getenv("RECOMP_ADVISOR_DEBUG"))
                for (size_t r = 0; r < t0[i].nxr; r++)
                    fprintf(stderr, "advisor: rank %d replay extra %u (%llu bytes) at %u, free %u\n",
                            v->rank_id[i], t0[i].xr[r].id,
                            (unsigned long long)t0[i].a[t0[i].xr[r].id].size, t0[i].xr[r].a_anchor,
                            t0[i].xr[r].f_anchor);
            if (t0[i].xr_bytes > extra_max)
                extra_max = t0[i].xr_bytes;
        }
        ref_max = 0;
        for (size_t i = 0; i < v->nranks; i++) {
            uint64_t p = adv_counterfactual(&t0[i], cfg, &(adv_setting){0}, extra[i], NULL);
            if (p > ref_max)
                ref_max = p;
        }
        char cur[96];
        adv_cand tmp;
        name_setting(&active, &tmp);
        snprintf(cur, sizeof cur, "%s", tmp.name);
        snprintf(v->level_note, sizeof v->level_note,
                 "recompute is already on (%s, %s replayed on the backward thread): its replays "
                 "were matched to the forward regions (%d of %d units on all ranks) and undone "
                 "(%s without recompute); candidates are complete settings (keep, remove or "
                 "add labels) evaluated on that trace, the current setting is the measured one",
                 cur, GB(tr[0].replay_bytes), matched, units, GB(ref_max));
        if (nextra) {
            size_t l = strlen(v->level_note);
            snprintf(v->level_note + l, sizeof v->level_note - l,
                     "; the replays did more than their forward: %zu allocations without a "
                     "forward twin (up to %s in one replay) were taken out and are made again by "
                     "every candidate that replays those layer groups",
                     nextra, GB(extra_max));
        }
    }
    eval_ctx ec = {tr, t0, &active, extra, base_max, ref_max, stage_layers_of(cfg)};
    unsigned ineff = 0;       /* labels judged ineffective */
    if (can_cf) {
        unsigned have = adv_model_labels(cfg);
        adv_cand c;
        if (t0) {
            /* the current setting (measured) and no recompute at all */
            try_setting(v, &ec, &active);
            try_setting(v, &ec, &(adv_setting){0});
        }
        /* single labels */
        int singles[ADV_NLABELS], ns = 0;
        for (int l = 0; l < ADV_NLABELS; l++) {
            if (!(have & (1u << l)))
                continue;
            adv_setting s = {1u << l, 0, 0};
            const adv_cand *cc = try_setting(v, &ec, &s);
            if (!cc)
                continue;
            c = *cc;
            if (c.effect != ADV_E_INEFFECTIVE && c.effect != ADV_E_COUNTER &&
                c.saving >= small_of(ref_max)) {
                singles[ns++] = l;
                continue;
            }
            ineff |= 1u << l;
            char code[64];
            snprintf(code, sizeof code, "R:INEFFECTIVE[%s]", adv_label_name(l));
            adv_finding_add(v, code, c.saving < -(int64_t)((uint64_t)16 << 20)
                                         ? "counter-productive" : "ineffective",
                            c.fails_rank,
                            "predicted peak %s against %s without it (%s%s): %s",
                            GB(c.max_peak), GB(ref_max), c.saving >= 0 ? "-" : "+",
                            GB((uint64_t)(c.saving >= 0 ? c.saving : -c.saving)),
                            l == ADV_L_core_attn && cfg->fused_attn
                                ? "with TE fused/flash attention core_attn frees only the "
                                  "softmax statistics; Q, K, V and O stay saved"
                                : l == ADV_L_layernorm
                                      ? "the norms are fused into the linears "
                                        "(IdentityOp) or hold little"
                                      : "its region holds little at the peak");
        }
        /* the active selective setting: without each of its labels, with each other one */
        if (t0 && active.labels) {
            /* an index, not a pointer: try_setting() may grow (realloc) v->cands */
            const adv_cand *cur0 = find_cand(v, &active);
            ptrdiff_t cur_i = cur0 ? cur0 - v->cands : -1;
            for (int l = 0; l < ADV_NLABELS; l++) {
                if (!(have & (1u << l)))
                    continue;
                adv_setting s = {active.labels ^ (1u << l), 0, 0};
                const adv_cand *cc = try_setting(v, &ec, &s);
                const adv_cand *cur = cur_i >= 0 ? &v->cands[cur_i] : NULL;
                if (cc && cur && (active.labels & (1u << l)) && !(ineff & (1u << l)) &&
                    (int64_t)cc->max_peak - (int64_t)cur->max_peak < small_of(ref_max)) {
                    ineff |= 1u << l;
                    char code[64];
                    snprintf(code, sizeof code, "R:INEFFECTIVE[%s]", adv_label_name(l));
                    adv_finding_add(v, code, "ineffective", -1,
                                    "active label: without it the predicted peak is %s against "
                                    "%s measured with it; it only adds replay cost (%.1f%%)",
                                    GB(cc->max_peak), GB(cur->max_peak),
                                    100 * (cur->cost - cc->cost));
                }
            }
        }
        /* combinations of the effective singles (pairs, then all of them) */
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
        /* the full-recompute family: every n, every stage, one best member each */
        for (int meth = 1; meth <= 2; meth++) {
            adv_cand best;
            int have_best = 0;
            int lpc = adv_cfg_layers_per_chunk(cfg);
            for (int nl = 1; nl <= lpc; nl++) {
                if (meth == 1 && nl > 1 && lpc % nl && nl != lpc)
                    continue;
                adv_setting s = {0, meth, nl};
                if (t0 && same_setting(&s, &active))
                    continue; /* listed as the current setting */
                evaluate(v, &ec, &s, &c);
                int better = !have_best ||
                             (c.effect == ADV_E_FITS && best.effect != ADV_E_FITS) ||
                             (c.effect == ADV_E_FITS && best.effect == ADV_E_FITS &&
                              c.cost < best.cost) ||
                             (c.effect != ADV_E_FITS && best.effect != ADV_E_FITS &&
                              c.max_peak < best.max_peak);
                if (better) {
                    best = c;
                    have_best = 1;
                }
            }
            if (have_best) {
                best.family_best = 1;
                add_cand(v, &best);
            }
        }
    }
    /* the verdict */
    if (v->ncands > 1)
        am_sort(v->cands, v->ncands, sizeof *v->cands, cand_cost_cmp);
    /* the least replay cost that fits; a setting holding a label judged
     * ineffective only when nothing else fits */
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; pass++)
        for (size_t k = 0; k < v->ncands; k++)
            if (v->cands[k].valid && v->cands[k].effect == ADV_E_FITS &&
                (pass || !(v->cands[k].labels & ineff))) {
                pick = (int)k;
                break;
            }
    const adv_cand *curc = t0 ? find_cand(v, &active) : NULL;
    int cur_idx = curc ? (int)(curc - v->cands) : -1;
    /* primary triage finding */
    const adv_finding *prim = NULL;
    static const char *const order[] = {"X:CUDA_GRAPH_POOL", "X:NCCL_BUFFERS",
                                        "X:FRAGMENTATION", "X:OPTIMIZER_STATE",
                                        "X:PARAM_STATE", "X:RETENTION"};
    for (size_t q = 0; q < sizeof order / sizeof order[0] && !prim; q++)
        for (size_t k = 0; k < v->nfindings; k++)
            if (strcmp(v->findings[k].code, order[q]) == 0) {
                prim = &v->findings[k];
                break;
            }
    (void)primary;
    if (prim && !(strcmp(prim->code, "X:OPTIMIZER_STATE") == 0 && pick >= 0 &&
                  strcmp(prim->subtype, "state_dominates") == 0 && 0)) {
        snprintf(v->code, sizeof v->code, "%s", prim->code);
        snprintf(v->why, sizeof v->why, "%s (rank %d)", prim->evidence, prim->rank);
        const char *ch = strstr(prim->code, "FRAGMENTATION")
                             ? "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
                         : strstr(prim->code, "CUDA_GRAPH")
                             ? "narrow --cuda-graph-modules (drop moe_* first) or "
                               "--cuda-graph-impl none"
                         : strstr(prim->code, "NCCL") && strcmp(prim->subtype, "other_process") == 0
                             ? "free the device: another process (or context) holds the memory "
                               "outside PyTorch the job needs"
                         : strstr(prim->code, "NCCL")
                             ? "leave NCCL a margin: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
                               "True, fewer communicators or smaller NCCL buffers"
                         : strstr(prim->code, "RETENTION")
                             ? "drop the references that keep last iteration's activations "
                               "alive"
                             : "--use-distributed-optimizer over more ranks, "
                               "--use-precision-aware-optimizer --exp-avg-dtype bf16 "
                               "--exp-avg-sq-dtype bf16, or optimizer CPU offload";
        snprintf(v->change, sizeof v->change, "%s", ch);
        snprintf(v->config_diff, sizeof v->config_diff, "%s", ch);
        if (pick >= 0 && !strstr(prim->code, "STATE")) {
            size_t l = strlen(v->why);
            snprintf(v->why + l, sizeof v->why - l,
                     ". Fallback at a compute cost: %s (%.1f%% replay)", v->cands[pick].code,
                     100 * v->cands[pick].cost);
        }
    } else if (base_fits && !(curc && pick >= 0 && pick != cur_idx &&
                              v->cands[pick].cost < curc->cost - 1e-4)) {
        snprintf(v->code, sizeof v->code, "OK:FITS");
        snprintf(v->why, sizeof v->why,
                 "every rank's predicted peak is within its budget (capacity - outside "
                 "PyTorch - %s headroom)",
                 GB(v->headroom));
        snprintf(v->change, sizeof v->change, "none");
        if (curc) {
            size_t l = strlen(v->why);
            snprintf(v->why + l, sizeof v->why - l,
                     "; the current setting %s is the cheapest that fits", curc->name);
            snprintf(v->change, sizeof v->change, "none (keep %s)", curc->name);
        }
    } else if (pick >= 0) {
        adv_cand *c = &v->cands[pick];
        v->chosen = pick;
        snprintf(v->code, sizeof v->code, "%s", c->code);
        config_diff(v, c, v->config_diff, sizeof v->config_diff, v->change, sizeof v->change);
        for (size_t i = 0; i < v->nranks; i++)
            v->predicted[i] = c->peak[i];
        if (curc)
            snprintf(v->why, sizeof v->why,
                     "the least replay cost (%.1f%% of the step, %s) among the settings that "
                     "fit every rank: predicted max peak %s; the current %s costs %.1f%% and "
                     "peaks at %s (%s)",
                     100 * c->cost, "FLOP model", GB(c->max_peak), curc->name,
                     100 * curc->cost, GB(curc->max_peak),
                     curc->effect == ADV_E_FITS ? "fits" : "does not fit");
        else
            snprintf(v->why, sizeof v->why,
                     "the least replay cost (%.1f%% of the step, %s) among the settings that "
                     "fit every rank: predicted max peak %s against %s without it",
                     100 * c->cost, "FLOP model", GB(c->max_peak), GB(base_max));
    } else if (v->ncands) {
        /* nothing fits: the setting that saves most, never one holding a label
         * judged ineffective (its replay buys nothing), marked insufficient */
        size_t best = (size_t)-1;
        for (int pass = 0; pass < 2 && best == (size_t)-1; pass++)
            for (size_t k = 0; k < v->ncands; k++) {
                const adv_cand *x = &v->cands[k];
                if (!x->valid || (!pass && (x->labels & ineff)) ||
                    (!x->labels && !x->full_method))
                    continue;
                if (best == (size_t)-1 || x->max_peak < v->cands[best].max_peak ||
                    (x->max_peak == v->cands[best].max_peak && x->cost < v->cands[best].cost))
                    best = k;
            }
        if (best == (size_t)-1)
            best = 0;
        adv_cand *c = &v->cands[best];
        snprintf(v->code, sizeof v->code, "%s", c->code);
        config_diff(v, c, v->config_diff, sizeof v->config_diff, v->change, sizeof v->change);
        snprintf(v->why, sizeof v->why,
                 "no recompute setting fits every rank: the best, %s, still peaks at %s (%s). "
                 "Recompute alone is insufficient: add memory-saving parallelism (TP/PP/CP, "
                 "distributed optimizer) as well",
                 c->name, GB(c->max_peak), c->reason);
    } else {
        snprintf(v->code, sizeof v->code, base_fits ? "OK:FITS" : "n/a");
        snprintf(v->why, sizeof v->why, "%.760s",
                 v->level_note[0] ? v->level_note : "no counterfactual could be evaluated");
        snprintf(v->change, sizeof v->change, "none");
    }
    if (v->chosen >= 0) {
        adv_cand *c = &v->cands[v->chosen];
        snprintf(v->confirm, sizeof v->confirm,
                 "rerun the same job (same data and seed) under the shim with %.300s for at "
                 "least the first optimizer step and two steady iterations, then "
                 "`recomp-analyze RUNDIR`: expected peak <= %s on every rank (margin >= %s)",
                 v->change, GB(c->max_peak), GB(v->headroom));
    } else if (strncmp(v->code, "X:", 2) == 0) {
        snprintf(v->confirm, sizeof v->confirm,
                 "rerun the same job under the shim with %.300s and compare `recomp-analyze "
                 "RUNDIR` of both runs",
                 v->change);
    }
out:
    for (size_t i = 0; i < v->nranks; i++) {
        adv_trace_free(&tr[i]);
        if (t0)
            adv_trace_free(&t0[i]);
    }
    free(t0);
    free(tr);
    free(extra);
    return rc;
}
