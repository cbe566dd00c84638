/* ranks.c: job identity, pipeline stages, hot rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "analysis.h"
#include "recomp/jobid.h"

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

/* Lookup in the recorded environment ("NAME=value" strings). */
static const char *
meta_getenv(void *ctx, const char *name)
{
    const am_meta *m = ctx;
    size_t nl = strlen(name);
    for (size_t i = 0; i < m->nenv; i++)
        if (!strncmp(m->env[i], name, nl) && m->env[i][nl] == '=')
            return m->env[i] + nl + 1;
    return NULL;
}

void
am_job_join_key(const am_meta *m, char *buf, size_t n)
{
    rs_job_identity id;
    rs_job_identity_get(&id, meta_getenv, (void *)m);
    if (id.strength == RS_JOB_NONE)
        am_job_key(m, buf, n);
    else
        rs_job_identity_key(&id, buf, n);
}

static int
cmp_start(const void *a, const void *b)
{
    const am_meta *x = &(*(am_source *const *)a)->meta, *y = &(*(am_source *const *)b)->meta;
    return x->real_start_ns < y->real_start_ns ? -1 : x->real_start_ns > y->real_start_ns;
}

/* Length of the directory part of a path ("" when none). */
static size_t
dir_len(const char *path)
{
    const char *sl = strrchr(path, '/');
    return sl ? (size_t)(sl - path) : 0;
}

int
am_job_check_concurrent(am_source *const *srcs, size_t n, char *err, size_t errn)
{
    int several = 0;
    const char *p0 = srcs[0]->meta.path;
    for (size_t i = 0; i < n; i++) {
        const am_meta *m = &srcs[i]->meta;
        if (!m->real_start_ns || !m->real_end_ns)
            return 0; /* a span unknown: nothing to compare */
        /* one directory is one run (the shim keeps a reused id out of it);
         * a run directory of the same name on another node's disk is not */
        several |= dir_len(m->path) != dir_len(p0) || strncmp(m->path, p0, dir_len(p0)) != 0;
    }
    if (!several)
        return 0;
    am_source **v = malloc(n * sizeof *v);
    if (!v)
        return 0;
    memcpy(v, srcs, n * sizeof *v);
    am_sort(v, n, sizeof *v, cmp_start);
    size_t last = 0; /* the source that reaches furthest so far */
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++) {
        const am_meta *a = &v[last]->meta, *b = &v[i]->meta;
        if (b->real_start_ns > a->real_end_ns) {
            char key[256];
            am_job_join_key(b, key, sizeof key);
            snprintf(err, errn,
                     "traces of one job id (%s) that did not run at the same time: %s ended "
                     "%.3f s before %s started; the id names several jobs (a fixed "
                     "--rdzv-id, the static rendezvous's MASTER_ADDR:MASTER_PORT, a recycled "
                     "job id): analyse one run at a time",
                     key, a->path, (double)(b->real_start_ns - a->real_end_ns) / 1e9, b->path);
            rc = -1;
        } else if (b->real_end_ns > a->real_end_ns) {
            last = i;
        }
    }
    free(v);
    return rc;
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
    size_t runs = 1; /* run directories joined by the launcher's identity */
    for (size_t i = 1; i < j->nranks; i++) {
        size_t k = 0;
        while (k < i && strcmp(j->ranks[k].src->meta.run_id, j->ranks[i].src->meta.run_id))
            k++;
        runs += k == i;
    }
    if (runs > 1) {
        char key[64];
        am_job_join_key(&j->ranks[0].src->meta, key, sizeof key);
        snprintf(j->id, sizeof j->id, "%s (%zu run directories)", key, runs);
    }
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
