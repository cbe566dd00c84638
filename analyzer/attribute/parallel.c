/* parallel.c: per-rank work on a pool of worker threads (analysis.h,
 * am_parallel_for, am_analyze_ranks, am_open_sources). Each rank's work reads only its own
 * source and writes only its own slot, so the results do not depend on
 * which worker ran which rank or when: the same bytes as in turn. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis.h"

typedef struct pool {
    size_t n;
    int (*fn)(void *ctx, size_t i);
    void *ctx;
    size_t next;  /* next index to claim (atomic) */
    size_t first; /* lowest failing index, n none (atomic min) */
} pool;

static void *
worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        size_t i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (i >= p->n)
            break;
        if (p->fn(p->ctx, i) < 0) {
            size_t cur = __atomic_load_n(&p->first, __ATOMIC_RELAXED);
            while (i < cur && !__atomic_compare_exchange_n(&p->first, &cur, i, 0,
                                                           __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                ;
        }
    }
    return NULL;
}

int
am_workers_default(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

size_t
am_parallel_for(size_t n, int workers, int (*fn)(void *ctx, size_t i), void *ctx)
{
    pool p = {n, fn, ctx, 0, n};
    size_t nw = workers < 1 ? 1 : (size_t)workers;
    if (nw > n)
        nw = n;
    pthread_t *th = nw > 1 ? calloc(nw - 1, sizeof *th) : NULL;
    size_t started = 0;
    for (size_t w = 0; th && w + 1 < nw; w++)
        if (pthread_create(&th[started], NULL, worker, &p) == 0)
            started++;
    worker(&p); /* this thread is a worker too: never fewer than one */
    for (size_t w = 0; w < started; w++)
        pthread_join(th[w], NULL);
    free(th);
    return p.first;
}

typedef struct analyze_ctx {
    am_source *const *srcs;
    am_rank *const *outs;
    const am_opts *opts;
    char (*errs)[1024];
} analyze_ctx;

static int
analyze_one(void *arg, size_t i)
{
    analyze_ctx *c = arg;
    return am_analyze(c->srcs[i], c->opts, c->outs[i], c->errs[i], sizeof c->errs[i]);
}

int
am_analyze_ranks(am_source *const *srcs, am_rank *const *outs, size_t n, const am_opts *opts,
                 int workers, size_t *failed, char *err, size_t errlen)
{
    *failed = n;
    if (!n)
        return 0;
    analyze_ctx c = {srcs, outs, opts, calloc(n, sizeof *c.errs)};
    if (!c.errs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t bad = am_parallel_for(n, workers, analyze_one, &c);
    if (bad < n) {
        /* the first failure in input order, as a sequential run reports it */
        *failed = bad;
        snprintf(err, errlen, "%s", c.errs[bad]);
    }
    free(c.errs);
    return bad < n ? -1 : 0;
}

typedef struct open_ctx {
    const char *const *paths;
    am_source **srcs;
    char (*errs)[1024];
} open_ctx;

static int
open_one(void *arg, size_t i)
{
    open_ctx *c = arg;
    if (am_source_open(c->paths[i], &c->srcs[i], c->errs[i], sizeof c->errs[i]) < 0) {
        c->srcs[i] = NULL;
        return -1;
    }
    return 0;
}

size_t
am_open_sources(const char *const *paths, size_t n, am_source **srcs, char (*errs)[1024],
                int workers)
{
    open_ctx c = {paths, srcs, errs};
    return am_parallel_for(n, workers, open_one, &c);
}
