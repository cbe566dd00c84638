/* advisor_lever.c: levers that cost no replay, ranked against recompute
 * (advisor.h "zero-replay levers"; docs/advisor.md rule 45).
 *
 * The mission is the narrowest fix at the least replay cost. A finding's
 * lever that costs no replay and clears the peak on every rank beats every
 * recompute setting, whose replay is never free. Which levers cost nothing is
 * a property of the lever (the table below); whether one fits is judged with
 * the margin rules of the recompute candidates (advisor_verdict.c evaluate):
 * a predicted reserved peak plus its 2% error bound within every rank's
 * budget.
 */
#include <stdio.h>
#include <string.h>

#include "advisor.h"

/* The levers that cost no replay: a switch that adds no compute, changes
 * neither the model's numerics nor its parallel layout or device count, and
 * whose bytes its finding states as what it removes from the allocated
 * (tensor-level) peak. Left out, each for its reason: bf16 optimizer moments
 * (a change of precision), more TP/PP/DP or an uneven layout (the parallel
 * layout), the distributed optimizer (its saving needs data-parallel ranks and
 * changes the gradient communication), allocator settings (their bytes are
 * reserved, not allocated: the fragmentation findings already rank them),
 * dropping references (a change of the job's code, not a setting). */
static const char *const zero_replay[] = {
    /* Transformer Engine's fused cross-entropy computes the same loss on the
     * bf16 logits with no fp32 copy of them (ADV_CE_LEVER; Megatron's native
     * fused loss keeps the copy; megasim's model in docs/megasim.md "Output
     * layer and loss") */
    ADV_CE_LEVER,
    ADV_CE_IMPL,
};

int
adv_lever_zero_replay(const char *change)
{
    for (size_t k = 0; k < sizeof zero_replay / sizeof *zero_replay; k++)
        if (!strcmp(change, zero_replay[k]))
            return 1;
    return 0;
}

/* the most bytes a known lever named `change` removes from rank index i's
 * peak among v's findings of that rank (0 none) */
static uint64_t
lever_bytes_on(const adv_verdict *v, size_t i, const char *change, int *finding)
{
    uint64_t most = 0;
    for (size_t k = 0; k < v->nfindings; k++) {
        const adv_finding *f = &v->findings[k];
        if (f->rank != v->rank_id[i])
            continue;
        for (int q = 0; q < f->nlevers; q++)
            if (f->levers[q].known && f->levers[q].bytes > most &&
                !strcmp(f->levers[q].change, change)) {
                most = f->levers[q].bytes;
                if (finding)
                    *finding = (int)k;
            }
    }
    return most;
}

/* lever `change`'s tier on every rank (bind: the binding ranks), as the
 * recompute candidates are tiered (advisor_verdict.c choose_tier): 0 within
 * every budget with the 2% error bound, 1 only without it (marginal); +2 when
 * a cache term is a lower bound (v->cache_short: unverified); -1 no fit.
 * Fills out's per-rank predictions, rank and finding (the rank of least
 * margin that a finding offers it for). */
static int
lever_tier(const adv_verdict *v, const uint8_t *bind, const char *change, adv_lever_fit *out)
{
    int64_t least = INT64_MAX;
    int tier = 0;
    for (size_t i = 0; i < v->nranks; i++) {
        int fk = -1;
        uint64_t b = lever_bytes_on(v, i, change, &fk);
        uint64_t res = v->reserved[i], alloc = v->baseline[i];
        b = b > alloc ? alloc : b;
        b = b > res ? res : b;
        out->predicted[i] = alloc - b;
        out->reserved[i] = res - b;
        /* a prediction carries the 2% bound; a rank the lever leaves alone is
         * the measured run */
        uint64_t need = b ? out->reserved[i] + out->reserved[i] / 50 : res;
        int64_t margin = (int64_t)v->budget[i] - (int64_t)need;
        if (!v->capacity[i] || (bind[i] && !b) || out->reserved[i] > v->budget[i])
            tier = -1;
        else if (margin < 0 && tier >= 0)
            tier = 1;
        if (b && margin < least) {
            least = margin;
            out->rank = (int)i;
            out->finding = fk;
        }
    }
    if (out->rank < 0 || tier < 0)
        return -1;
    return tier + (v->cache_short ? 2 : 0);
}

int
adv_zero_replay_lever(const adv_verdict *v, const uint8_t *bind, adv_lever_fit *out)
{
    adv_lever_fit cur;
    memset(out, 0, sizeof *out);
    out->finding = out->rank = out->tier = -1;
    if (v->budget_unknown || !v->nranks)
        return 0;
    for (size_t k = 0; k < v->nfindings; k++) {
        const adv_finding *f = &v->findings[k];
        for (int q = 0; q < f->nlevers; q++) {
            if (!f->levers[q].known || !f->levers[q].bytes ||
                !adv_lever_zero_replay(f->levers[q].change) ||
                adv_names_in_use(f->levers[q].change, &v->cfg))
                continue;
            memset(&cur, 0, sizeof cur);
            cur.finding = cur.rank = -1;
            snprintf(cur.change, sizeof cur.change, "%s", f->levers[q].change);
            cur.tier = lever_tier(v, bind, cur.change, &cur);
            if (!out->change[0] || (cur.tier >= 0 && (out->tier < 0 || cur.tier < out->tier)))
                *out = cur;
        }
    }
    return out->tier >= 0;
}
