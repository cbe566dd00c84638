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

/* A trace's end for the overlap chain: its clean close, or, for a trace
 * that was killed (not closed, no known end), the latest time possible: it
 * joins every later trace (README: "has no known end and joins without that
 * check"). */
static uint64_t
span_end(const am_meta *m)
{
    return m->real_end_ns ? m->real_end_ns : UINT64_MAX;
}

/* The launch a trace records: RECOMPSHIM_RUN_ID, which the first shim of a
 * launcher's process tree sets and every rank it starts inherits ("" none). */
static const char *
launch_id(const am_meta *m)
{
    static const char k[] = "RECOMPSHIM_RUN_ID=";
    for (size_t i = 0; i < m->nenv; i++)
        if (!strncmp(m->env[i], k, sizeof k - 1))
            return m->env[i] + sizeof k - 1;
    return "";
}

static size_t
uf_find(size_t *up, size_t x)
{
    while (up[x] != x)
        x = up[x] = up[up[x]];
    return x;
}

static void
uf_join(size_t *up, size_t a, size_t b)
{
    a = uf_find(up, a);
    b = uf_find(up, b);
    if (a != b)
        up[a > b ? a : b] = a < b ? a : b;
}

/* qsort_r comparators of indices into the sources (ctx) */
static int
cmp_idx_start(const void *a, const void *b, void *ctx)
{
    am_source *const *srcs = ctx;
    uint64_t x = srcs[*(const size_t *)a]->meta.real_start_ns,
             y = srcs[*(const size_t *)b]->meta.real_start_ns;
    return x < y ? -1 : x > y;
}

static int
cmp_idx_launch(const void *a, const void *b, void *ctx)
{
    am_source *const *srcs = ctx;
    return strcmp(launch_id(&srcs[*(const size_t *)a]->meta),
                  launch_id(&srcs[*(const size_t *)b]->meta));
}

int
am_job_run_groups(am_source *const *srcs, size_t n, int *group)
{
    size_t *v = malloc((n ? n : 1) * sizeof *v), *up = malloc((n ? n : 1) * sizeof *up);
    int *num = malloc((n ? n : 1) * sizeof *num);
    if (!v || !up || !num) {
        free(v);
        free(up);
        free(num);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        up[i] = i;
        num[i] = 0;
        if (srcs[i]->meta.real_start_ns)
            v[k++] = i;
    }
    /* one run: wall-clock spans that overlap in one chain (the ranks of one
     * job are alive together) ... */
    qsort_r(v, k, sizeof *v, cmp_idx_start, (void *)srcs);
    uint64_t reach = 0; /* the furthest end of the current chain */
    for (size_t i = 0; i < k; i++) {
        const am_meta *b = &srcs[v[i]]->meta;
        if (i && b->real_start_ns <= reach)
            uf_join(up, v[i - 1], v[i]);
        if (!i || b->real_start_ns > reach || span_end(b) > reach)
            reach = span_end(b);
    }
    /* ... or one launch (the same RECOMPSHIM_RUN_ID: one launcher's process
     * tree, whose short ranks need not overlap) */
    qsort_r(v, k, sizeof *v, cmp_idx_launch, (void *)srcs);
    for (size_t i = 1; i < k; i++)
        if (launch_id(&srcs[v[i]]->meta)[0] &&
            !strcmp(launch_id(&srcs[v[i]]->meta), launch_id(&srcs[v[i - 1]]->meta)))
            uf_join(up, v[i - 1], v[i]);
    /* runs numbered by their first start */
    qsort_r(v, k, sizeof *v, cmp_idx_start, (void *)srcs);
    int g = 0;
    for (size_t i = 0; i < k; i++) {
        size_t root = uf_find(up, v[i]);
        if (!num[root])
            num[root] = ++g;
        group[v[i]] = num[root];
    }
    for (size_t i = 0; i < n; i++)
        if (!srcs[i]->meta.real_start_ns)
            group[i] = 0;
    free(v);
    free(up);
    free(num);
    return g;
}

int
am_job_check_concurrent(am_source *const *srcs, size_t n, char *err, size_t errn)
{
    /* One rule wherever the files come from: the ranks of one job are alive
     * together or share their launch, in one directory or in several (a run
     * directory per node). Two runs copied into one folder, or a run
     * directory reused, are two jobs (issue 14, hnew finding 1: the check was
     * skipped when every file shared a directory). A trace without a start
     * time is left out. */
    int *g = malloc((n ? n : 1) * sizeof *g);
    if (!g)
        return 0;
    int runs = am_job_run_groups(srcs, n, g);
    if (runs <= 1) {
        free(g);
        return 0;
    }
    /* the two traces at the first gap: the first start of run 2, and the
     * trace of run 1 that ended last before it (runs do not overlap, so run
     * 1's first trace ended before run 2 began) */
    const am_meta *a = NULL, *b = NULL;
    for (size_t i = 0; i < n; i++) {
        const am_meta *m = &srcs[i]->meta;
        if (g[i] == 2 && (!b || m->real_start_ns < b->real_start_ns))
            b = m;
    }
    for (size_t i = 0; i < n; i++) {
        const am_meta *m = &srcs[i]->meta;
        if (g[i] == 1 && span_end(m) < b->real_start_ns && (!a || span_end(m) > span_end(a)))
            a = m;
    }
    free(g);
    char key[256];
    am_job_join_key(b, key, sizeof key);
    snprintf(err, errn,
             "traces of one job id (%s) that did not run at the same time (%d runs): %s ended "
             "%.3f s before %s started; they are different runs (two runs in one "
             "directory, a reused run directory, or an id naming several jobs: a "
             "fixed --rdzv-id, the static rendezvous's MASTER_ADDR:MASTER_PORT, a "
             "recycled job id), never ranks of one job: analyse one run at a time",
             key, runs, a->path, (double)(b->real_start_ns - a->real_end_ns) / 1e9, b->path);
    return -1;
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
    /* a subset of the ranks is a partial job: say so, naming the ranks
     * missing (importers: Kineto; hnew finding 9) */
    int w = j->ranks[0].src->meta.world_size;
    char miss[256];
    if (w > 0 && j->nranks < (size_t)w)
        for (size_t i = 0; i < j->nranks; i++) {
            if (am_job_missing_ranks(j, miss, sizeof miss))
                am_note(&j->ranks[i], "partial job: %zu of the job's %d ranks analysed; "
                        "missing: %s", j->nranks, w, miss);
            else
                am_note(&j->ranks[i], "partial job: %zu of the job's %d ranks analysed",
                        j->nranks, w);
        }
}

size_t
am_job_missing_ranks(const am_job *j, char *buf, size_t n)
{
    if (n)
        buf[0] = 0;
    if (!j->nranks || j->rank_selected)
        return 0;
    int w = j->ranks[0].src ? j->ranks[0].src->meta.world_size : 0;
    if (w <= 0 || j->nranks >= (size_t)w)
        return 0;
    unsigned char *have = calloc((size_t)w, 1);
    if (!have)
        return 0;
    for (size_t i = 0; i < j->nranks; i++)
        if (j->ranks[i].rank >= 0 && j->ranks[i].rank < w)
            have[j->ranks[i].rank] = 1;
    size_t missing = 0, k = 0;
    for (int r = 0; r < w; r++) {
        if (have[r])
            continue;
        int e = r;
        while (e + 1 < w && !have[e + 1])
            e++;
        missing += (size_t)(e - r + 1);
        if (k < n) {
            int wr = e > r ? snprintf(buf + k, n - k, "%s%s %d-%d", k ? ", " : "",
                                      "ranks", r, e)
                           : snprintf(buf + k, n - k, "%srank %d", k ? ", " : "", r);
            k += wr > 0 ? (size_t)wr : 0;
        }
        r = e;
    }
    free(have);
    return missing;
}
