/* parallel.c: ranks analysed by a pool of worker threads (analysis.h,
 * am_analyze_ranks). Each rank's analysis (am_analyze) reads only its own
 * source and writes only its own am_rank, so the results do not depend on
 * which worker ran which rank or when: the same bytes as in turn. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis.h"

typedef struct batch {
    am_source *const *srcs;
    am_rank *const *outs;
    size_t n;
    const am_opts *opts;
    size_t next;       /* next index to claim (atomic) */
    char (*errs)[1024];
    int *rcs;
} batch;

static void *
worker(void *arg)
{
    batch *b = arg;
    for (;;) {
        size_t i = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);
        if (i >= b->n)
            break;
        b->rcs[i] = am_analyze(b->srcs[i], b->opts, b->outs[i], b->errs[i], sizeof b->errs[i]);
    }
    return NULL;
}

int
am_workers_default(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

int
am_analyze_ranks(am_source *const *srcs, am_rank *const *outs, size_t n, const am_opts *opts,
                 int workers, size_t *failed, char *err, size_t errlen)
{
    *failed = n;
    if (!n)
        return 0;
    batch b = {srcs, outs, n, opts, 0, calloc(n, sizeof *b.errs), calloc(n, sizeof *b.rcs)};
    if (!b.errs || !b.rcs) {
        free(b.errs);
        free(b.rcs);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t nw = workers < 1 ? 1 : (size_t)workers;
    if (nw > n)
        nw = n;
    pthread_t *th = nw > 1 ? calloc(nw - 1, sizeof *th) : NULL;
    size_t started = 0;
    for (size_t w = 0; th && w + 1 < nw; w++)
        if (pthread_create(&th[w], NULL, worker, &b) == 0)
            started++;
    worker(&b); /* this thread is a worker too: never fewer than one */
    for (size_t w = 0; w < started; w++)
        pthread_join(th[w], NULL);
    free(th);
    int rc = 0;
    /* the first failure in input order, as a sequential run reports it */
    for (size_t i = 0; i < n && !rc; i++)
        if (b.rcs[i] < 0) {
            *failed = i;
            snprintf(err, errlen, "%s", b.errs[i]);
            rc = -1;
        }
    free(b.errs);
    free(b.rcs);
    return rc;
}
