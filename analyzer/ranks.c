/* ranks.c: job identity, command-line flags, pipeline stages, hot rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"

/* The value of a command-line flag ("--flag value" or "--flag=value"; "" when
 * it has none), NULL when absent. A flag given twice takes the last value,
 * as argparse does. */
const char *
am_argv_value(const am_meta *m, const char *flag)
{
    size_t fl = strlen(flag);
    const char *last = NULL;
    for (size_t i = 0; i < m->argc; i++) {
        const char *a = m->argv[i];
        if (strncmp(a, flag, fl) != 0)
            continue;
        if (a[fl] == '=')
            last = a + fl + 1;
        else if (a[fl] == 0)
            last = i + 1 < m->argc && strncmp(m->argv[i + 1], "--", 2) != 0 ? m->argv[i + 1]
                                                                             : "";
    }
    return last;
}

void
am_job_key(const am_meta *m, char *buf, size_t n)
{
    if (!n)
        return;
    buf[0] = 0;
    size_t k = 0;
#define ADD(...)                                                                               \
    do {                                                                                       \
        if (k < n) {                                                                           \
            int w_ = snprintf(buf + k, n - k, __VA_ARGS__);                                    \
            k += w_ > 0 ? (size_t)w_ : 0;                                                      \
        }                                                                                      \
    } while (0)
    if (m->torchelastic_run_id[0])
        ADD("torchelastic_run_id=%s", m->torchelastic_run_id);
    else if (m->slurm_job_id[0])
        ADD("slurm_job_id=%s", m->slurm_job_id);
    else if (m->master[0])
        ADD("master=%s", m->master);
    /* the run (RECOMPSHIM_OUT's run directory) and the elastic attempt: one
     * job name can cover several runs, which must never be merged */
    if (m->run_id[0])
        ADD("%srun_id=%s", k ? " " : "", m->run_id);
    if (m->attempt >= 0)
        ADD("%sattempt=%d", k ? " " : "", m->attempt);
#undef ADD
}

static uint64_t
rank_peak(const am_rank *r, int level)
{
    return r->peak[level].known ? r->peak[level].bytes : 0;
}

void
am_job_finish(am_job *j)
{
    j->hot = -1;
    if (!j->nranks)
        return;
    /* compare at the finest level every rank has */
    int all_tensor = 1;
    for (size_t i = 0; i < j->nranks; i++)
        all_tensor &= j->ranks[i].peak[AM_L_TENSOR].known;
    j->hot_level = all_tensor ? AM_L_TENSOR : AM_L_DEVICE;
    int any = 0;
    for (size_t i = 0; i < j->nranks; i++) {
        const am_rank *r = &j->ranks[i];
        if (!r->peak[j->hot_level].known)
            continue;
        uint64_t b = rank_peak(r, j->hot_level);
        if (!any || b > j->max_peak) {
            j->max_peak = b;
            j->hot = (int)i;
        }
        if (!any || b < j->min_peak)
            j->min_peak = b;
        any = 1;
    }
    am_job_key(&j->ranks[0].src->meta, j->id, sizeof j->id);
    if (j->rank_selected)
        for (size_t i = 0; i < j->nranks; i++)
            am_note(&j->ranks[i], "--rank %d: only this rank of the %zu trace(s) given was "
                                  "analysed; the job-level hot rank and spread cover only it",
                    j->rank_filter, j->nfiles);
    /* a subset of the ranks is a partial job: say so (importers: Kineto) */
    int w = j->ranks[0].src->meta.world_size;
    if (w > 0 && j->nranks < (size_t)w)
        for (size_t i = 0; i < j->nranks; i++)
            am_note(&j->ranks[i], "partial job: %zu of the job's %d ranks analysed", j->nranks,
                    w);
}
