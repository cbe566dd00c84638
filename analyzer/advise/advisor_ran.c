/* advisor_ran.c: where the job really stood (issue 14 B, E, C): whether it
 * ran out of memory and the margin it had on the device (a triage code is
 * the verdict only with an OOM or a negative margin); the limit an OOM with
 * the request free met (the budget ends there, not at the capacity); what a
 * recompute fallback needs under a fragmentation finding (the gap seen at
 * the OOM, not a nominal cache). */
#include <stdio.h>
#include <string.h>

#include "advisor.h"

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)

int
adv_job_oomed(const am_job *j)
{
    for (size_t i = 0; i < j->nranks; i++)
        if (j->ranks[i].oom)
            return 1;
    return 0;
}

int
adv_device_spare(const adv_verdict *v, uint64_t *spare)
{
    int at = -1;
    for (size_t i = 0; i < v->nranks; i++) {
        uint64_t used = v->outside[i] + v->reserved[i];
        if (!v->capacity[i])
            return -1;
        if (used > v->capacity[i])
            return -1;
        if (at < 0 || v->capacity[i] - used < *spare) {
            *spare = v->capacity[i] - used;
            at = (int)i;
        }
    }
    return at;
}

int
adv_device_inconsistent(const am_rank *r, uint64_t *held, uint64_t *in_use)
{
    const am_oom *o = r->oom;
    if (!o || o->past_limit || !o->total_bytes || o->free_bytes > o->total_bytes)
        return 0;
    uint64_t use = o->total_bytes - o->free_bytes, pt = o->live[AM_L_TENSOR];
    if (pt <= use)
        return 0;
    if (held)
        *held = pt;
    if (in_use)
        *in_use = use;
    return 1;
}

uint64_t
adv_oom_limit(const am_rank *r)
{
    const am_oom *o = r->oom;
    /* a reading below what PyTorch held on the device is no reading */
    if (adv_device_inconsistent(r, NULL, NULL))
        return 0;
    /* the driver's 2 MiB granularity: a request that fits the free bytes only
     * to the page may still fail for want of memory */
    if (!o || !o->total_bytes || o->free_bytes > o->total_bytes || !o->requested ||
        o->free_bytes < o->requested + ((uint64_t)2 << 20))
        return 0;
    return o->total_bytes - o->free_bytes;
}

uint64_t
adv_limit_finding(adv_verdict *v, const am_rank *r, uint64_t capacity)
{
    uint64_t lim = adv_oom_limit(r);
    if (!lim || !capacity || lim >= capacity)
        return capacity;
    const am_oom *o = r->oom;
    adv_finding_add(v, "BUDGET:DEVICE_LIMIT", "free_at_oom", r->rank,
                    "the request of %s failed with %s of the %s device free (cudaMemGetInfo at "
                    "the OOM): not the capacity but a limit at about %s in use stopped the job "
                    "-- a per-process memory fraction (torch.cuda.set_per_process_memory_"
                    "fraction), an MPS, MIG or container limit, or the driver's own. The budget "
                    "here is that limit: %s of the device are out of the job's reach",
                    GB(o->requested), GB(o->free_bytes), GB(o->total_bytes), GB(lim),
                    GB(capacity - lim));
    adv_finding_held(v, "BUDGET:DEVICE_LIMIT", capacity - lim);
    adv_finding_lever(v, "BUDGET:DEVICE_LIMIT", "raise or remove the limit (memory fraction, MPS "
                                           "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, container)",
                      capacity - lim, 1);
    return lim;
}

uint64_t
adv_ran_capacity(const am_rank *r)
{
    uint64_t cap = r->src->meta.device_capacity;
    if (!cap)
        cap = r->meminfo_total;
    if (!cap && r->oom)
        cap = r->oom->total_bytes;
    uint64_t lim = adv_oom_limit(r);
    return lim && cap && lim < cap ? lim : cap;
}

void
adv_budget_above_device(adv_verdict *v, const am_rank *r, uint64_t budget)
{
    uint64_t ran = adv_ran_capacity(r);
    if (!budget || !ran || budget <= ran)
        return;
    adv_finding_add(v, "BUDGET:ABOVE_DEVICE", "budget_over_capacity", r->rank,
                    "--budget %s is above the %s this rank's device had (as recorded): the fits "
                    "and predictions are for a larger device than the one traced; what happened "
                    "on the traced device (its OOM, fragmentation, memory outside PyTorch) is "
                    "judged against the %s it had, not against --budget",
                    GB(budget), GB(ran), GB(ran));
    adv_finding_held(v, "BUDGET:ABOVE_DEVICE", budget - ran);
}

int
adv_fallback_with_gap(const adv_verdict *v, const adv_finding *f, const adv_cand *c, char *out,
                      size_t n)
{
    out[0] = 0;
    if (strcmp(f->code, "X:FRAGMENTATION") != 0 || !f->bytes)
        return -1;
    for (size_t i = 0; i < v->nranks; i++) {
        if (v->rank_id[i] != f->rank || !v->capacity[i])
            continue;
        uint64_t need = c->peak[i] + f->bytes;
        int fits = need <= v->budget[i];
        snprintf(out, n, ", only together with the allocator fix "
                 "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): its projection (%s "
                 "reserved) assumes a nominal allocator cache; with the %s reserved but "
                 "unallocated seen at the OOM kept it needs %s allocated + %s = %s, %s the %s "
                 "budget%s",
                 GB(c->reserved[i]), GB(f->bytes), GB(c->peak[i]), GB(f->bytes), GB(need),
                 fits ? "within" : "over", GB(v->budget[i]),
                 fits ? ", but fragmentation does not keep its size when the allocations change "
                        "(no fit without the fix is claimed)"
                      : ": alone it runs out of memory again");
        return fits;
    }
    return -1;
}
