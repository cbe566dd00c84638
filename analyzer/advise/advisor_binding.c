/* advisor_binding.c: which ranks bind, and which findings may speak for them
 * (issue 14 classes A and D, found replaying public OOM reports, hplay6):
 *
 *   binding ranks   the ranks that died of a fatal OOM; without one, the
 *                   ranks whose modelled reserved peak is over the budget
 *                   (a negative margin). The verdict's triage code comes from
 *                   a finding of a binding rank: a finding of a rank that ran
 *                   (state_dominates on ranks 0,1 of a resume whose ranks 2,3
 *                   died of the loaded checkpoint's cache) is not the job's
 *                   headline.
 *   real bytes      a rank whose allocated (tensor-level) peak alone, with its
 *                   failed request, is over the device (capacity - memory
 *                   outside PyTorch) cannot be fixed by the allocator:
 *                   fragmentation's fix (expandable segments, emptying the
 *                   cache) is never the headline while such a rank binds
 *                   (GPT-30B FP8, stage 0 16 GiB over on parameters while
 *                   stage 1's inactive split named expandable segments).
 *   in use          a fix the recorded configuration already has is no fix:
 *                   a lever naming it is dropped from every finding, and a
 *                   finding whose only fix is in use is not the verdict
 *                   (expandable segments told to a job that set them).
 */
#include <stdio.h>
#include <string.h>

#include "advisor.h"

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)

size_t
adv_binding_ranks(const am_job *j, const adv_verdict *v, uint8_t *bind)
{
    size_t n = 0;
    for (size_t i = 0; i < v->nranks; i++) {
        bind[i] = i < j->nranks && j->ranks[i].oom != NULL;
        n += bind[i];
    }
    if (n)
        return n;
    for (size_t i = 0; i < v->nranks; i++) {
        bind[i] = v->capacity[i] && v->reserved[i] > v->budget[i];
        n += bind[i];
    }
    return n;
}

int
adv_real_deficit(const adv_verdict *v, size_t i, uint64_t *over)
{
    if (!v->capacity[i])
        return 0;
    uint64_t dev = v->capacity[i] > v->outside[i] ? v->capacity[i] - v->outside[i] : 0;
    if (v->baseline[i] <= dev)
        return 0;
    if (over)
        *over = v->baseline[i] - dev;
    return 1;
}

int
adv_allocator_only(const adv_finding *f)
{
    return strcmp(f->code, "X:FRAGMENTATION") == 0 ||
           (strcmp(f->code, "X:NCCL_BUFFERS") == 0 && strcmp(f->subtype, "cache_starved") == 0);
}

/* One setting of the recorded configuration: whether the job has it on, and
 * the texts that name it as a change (a lever's change, a verdict's change).
 * A text names it when it contains the needle. */
typedef struct in_use_rule {
    const char *needle;
    int (*on)(const adv_cfg *c);
} in_use_rule;

static int on_expandable(const adv_cfg *c) { return c->alloc_expandable; }
static int on_dist_opt(const adv_cfg *c) { return c->megatron && c->dist_opt; }
static int on_bf16_moments(const adv_cfg *c) { return c->exp_avg_bf16; }
static int on_ce_fusion(const adv_cfg *c) { return ADV_CE_NO_COPY(c); }
static int on_ckpt_dist(const adv_cfg *c) { return c->megatron && !c->ckpt_torch; }
static int on_cpu_offload(const adv_cfg *c) { return c->optimizer_cpu_offload; }
static int on_recompute_act(const adv_cfg *c) { return c->granularity == 1 && c->modules ==
                                                       (1u << ADV_L_core_attn); }

/* Megatron's flag spellings and PyTorch's allocator setting ([M], [PT] in
 * docs/sources.md); one row per setting a fix can name. */
static const in_use_rule g_in_use[] = {
    {"expandable_segments:True", on_expandable},
    {"--use-distributed-optimizer", on_dist_opt},
    {"--exp-avg-dtype bf16", on_bf16_moments},
    {"--cross-entropy-fusion-impl te", on_ce_fusion},
    {"--ckpt-format torch_dist", on_ckpt_dist},
    {"optimizer CPU offload", on_cpu_offload},
    {"--recompute-activations", on_recompute_act},
};

int
adv_names_in_use(const char *text, const adv_cfg *c)
{
    for (size_t k = 0; k < sizeof g_in_use / sizeof g_in_use[0]; k++)
        if (g_in_use[k].on(c) && strstr(text, g_in_use[k].needle))
            return 1;
    return 0;
}

int
adv_fix_in_use(const adv_finding *f, const adv_cfg *c)
{
    /* fragmentation's fix is the allocator setting: with expandable segments
     * on, PyTorch unmaps the free pages of its segments before an OOM
     * (release_cached_blocks), so reserved-but-unallocated bytes are not
     * what the request missed */
    return strcmp(f->code, "X:FRAGMENTATION") == 0 && c->alloc_expandable;
}

void
adv_drop_levers_in_use(adv_verdict *v, const adv_cfg *c)
{
    size_t w = 0;
    for (size_t k = 0; k < v->nfindings; k++)
        if (!adv_fix_in_use(&v->findings[k], c))
            v->findings[w++] = v->findings[k];
    v->nfindings = w;
    for (size_t k = 0; k < v->nfindings; k++) {
        adv_finding *f = &v->findings[k];
        uint8_t keep = 0;
        int dropped_best = 0;
        for (uint8_t q = 0; q < f->nlevers; q++) {
            if (adv_names_in_use(f->levers[q].change, c)) {
                dropped_best |= f->levers[q].known && f->levers[q].bytes == f->fix_bytes;
                continue;
            }
            f->levers[keep++] = f->levers[q];
        }
        f->nlevers = keep;
        if (dropped_best) {
            /* the best lever left: what the finding's fix now removes */
            uint64_t best = 0;
            for (uint8_t q = 0; q < f->nlevers; q++)
                if (f->levers[q].known && f->levers[q].bytes > best)
                    best = f->levers[q].bytes;
            f->fix_bytes = best;
        }
    }
}

int
adv_finding_eligible(const am_job *j, const adv_verdict *v, const uint8_t *bind, size_t nbind,
                     const adv_finding *f)
{
    if (adv_fix_in_use(f, &v->cfg))
        return 0;
    if (!nbind || f->rank < 0)
        return 1;
    int on_binding = 0;
    for (size_t i = 0; i < v->nranks; i++)
        if (bind[i] && v->rank_id[i] == f->rank)
            on_binding = 1;
    if (!on_binding)
        return 0;
    if (adv_allocator_only(f))
        for (size_t i = 0; i < v->nranks; i++)
            if (bind[i] && adv_real_deficit(v, i, NULL))
                return 0;
    (void)j;
    return 1;
}

/* a code triage may make the verdict (advisor_verdict.c primary_finding) */
static int
primary_capable(const adv_finding *f)
{
    static const char *const codes[] = {"X:CUDA_GRAPH_POOL", "X:NCCL_BUFFERS",
                                        "X:CHECKPOINT_SAVE", "X:FRAGMENTATION",
                                        "X:OPTIMIZER_STATE", "X:PARAM_STATE", "X:RETENTION",
                                        "X:LOGITS"};
    for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++)
        if (strcmp(f->code, codes[k]) == 0)
            return 1;
    return 0;
}

int
adv_binding_explained(const adv_verdict *v, const uint8_t *bind, const uint8_t *ok)
{
    for (size_t i = 0; i < v->nranks; i++) {
        if (!bind[i])
            continue;
        int has = 0;
        for (size_t k = 0; k < v->nfindings && !has; k++)
            has = (!ok || ok[k]) && v->findings[k].rank == v->rank_id[i] &&
                  primary_capable(&v->findings[k]);
        if (!has)
            return 0;
    }
    return 1;
}

/* What binds rank index i, in a few words (into out, without the rank): its
 * OOM or deficit, and the finding that explains it (prim when it is the
 * rank's, else the rank's own first X: cause), or that its allocated bytes
 * alone are over the device. */
static void
rank_binds(const am_job *j, const adv_verdict *v, size_t i, const adv_finding *prim,
           int real_any, char *out, size_t n, struct adv_bind *b)
{
    const am_rank *r = &j->ranks[i];
    memset(b, 0, sizeof *b);
    b->rank = v->rank_id[i];
    b->oom = r->oom != NULL;
    b->past_limit = r->oom && r->oom->past_limit;
    b->iteration = r->oom ? r->oom->iteration : -1;
    b->phase = r->oom ? r->oom->phase : 0;
    b->over_budget = !r->oom && v->reserved[i] > v->budget[i] ? v->reserved[i] - v->budget[i] : 0;
    char what[128];
    if (r->oom && r->oom->past_limit)
        snprintf(what, sizeof what, "OOM after the byte limit, iteration and phase unknown");
    else if (r->oom && r->oom->iteration >= 0)
        snprintf(what, sizeof what, "OOM in iteration %d, phase %s", r->oom->iteration,
                 am_phase_name(r->oom->phase));
    else if (r->oom)
        snprintf(what, sizeof what, "OOM before iteration 0, phase %s",
                 am_phase_name(r->oom->phase));
    else
        snprintf(what, sizeof what, "no OOM, reserved peak %s over its %s budget",
                 GB(v->reserved[i] - v->budget[i]), GB(v->budget[i]));
    const adv_finding *own = NULL;
    if (prim && prim->rank == v->rank_id[i])
        own = prim;
    for (size_t k = 0; k < v->nfindings && !own; k++)
        if (v->findings[k].rank == v->rank_id[i] && primary_capable(&v->findings[k]))
            own = &v->findings[k];
    uint64_t over = 0;
    int real = adv_real_deficit(v, i, &over);
    b->over_device = real ? over : 0;
    if (own) {
        snprintf(b->code, sizeof b->code, "%s", own->code);
        snprintf(b->subtype, sizeof b->subtype, "%s", own->subtype);
        b->allocator_only_aside = (uint8_t)(adv_allocator_only(own) && (real || real_any));
    }
    if (real)
        snprintf(out, n, "%s: its allocated bytes alone, %s with the failed request, are %s "
                 "over the device (capacity less memory outside PyTorch), so no allocator "
                 "setting fits them%s%s%s",
                 what, GB(v->baseline[i]), GB(over), own ? "; " : "", own ? own->code : "",
                 own && adv_allocator_only(own) ? " concerns its cache only" : "");
    else if (own)
        snprintf(out, n, "%s: %s %s%s", what, own->code, own->subtype,
                 real_any && adv_allocator_only(own)
                     ? ", an allocator fix for this rank's cache, not the job's verdict while "
                       "a binding rank is over its device in allocated bytes"
                     : "");
    else
        snprintf(out, n, "%s: no triage cause; its allocated peak %s", what,
                 GB(v->baseline[i]));
}

void
adv_binding_why(const am_job *j, adv_verdict *v, const uint8_t *bind,
                const adv_finding *prim, char *out, size_t n)
{
    v->nbinds = 0;
    v->binds_known = 1;
    /* ranks with the same statement are one group: "ranks 2,3 (...)" */
    char prev[512] = "", ranks[160] = "";
    size_t l = 0, groups = 0;
    int first = 1, real_any = 0;
    out[0] = 0;
    for (size_t i = 0; i < v->nranks; i++)
        real_any |= bind[i] && adv_real_deficit(v, i, NULL);
    for (size_t i = 0; i <= v->nranks; i++) {
        char one[512] = "";
        if (i < v->nranks && !bind[i])
            continue;
        if (i < v->nranks)
            rank_binds(j, v, i, prim, real_any, one, sizeof one, &v->binds[v->nbinds++]);
        if (i < v->nranks && prev[0] && strcmp(one, prev) == 0) {
            size_t rl = strlen(ranks);
            snprintf(ranks + rl, sizeof ranks - rl, ",%d", v->rank_id[i]);
            continue;
        }
        if (prev[0] && l < n) {
            if (groups < 6)
                l += (size_t)snprintf(out + l, n - l, "%s%s %s (%s)", first ? "BINDS: " : "; ",
                                      strchr(ranks, ',') ? "ranks" : "rank", ranks, prev);
            else if (groups == 6)
                l += (size_t)snprintf(out + l, n - l, "; and more ranks");
            groups++;
            first = 0;
        }
        if (i < v->nranks) {
            snprintf(prev, sizeof prev, "%s", one);
            snprintf(ranks, sizeof ranks, "%d", v->rank_id[i]);
        }
    }
}
