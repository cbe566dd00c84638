/* test_pool: am_parallel_for (analyzer/attribute/parallel.c) calls every
 * item exactly once for every worker count and reports the lowest failing
 * item, whichever worker saw it first. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "analysis.h"

#define N 2000

typedef struct ctx {
    int calls[N];
    const int *fail; /* indices that fail, -1 ended */
} ctx;

static int
visit(void *arg, size_t i)
{
    ctx *c = arg;
    __atomic_fetch_add(&c->calls[i], 1, __ATOMIC_RELAXED);
    for (const int *f = c->fail; *f >= 0; f++)
        if ((size_t)*f == i)
            return -1;
    return 0;
}

static void
check(int workers, const int *fail, size_t want_first)
{
    ctx *c = calloc(1, sizeof *c);
    cr_assert(c);
    c->fail = fail;
    size_t first = am_parallel_for(N, workers, visit, c);
    cr_expect_eq(first, want_first, "workers %d: first failure %zu, want %zu", workers, first,
                 want_first);
    for (size_t i = 0; i < N; i++)
        cr_expect_eq(c->calls[i], 1, "workers %d: item %zu called %d times", workers, i,
                     c->calls[i]);
    free(c);
}

Test(pool, every_item_once_lowest_failure)
{
    static const int none[] = {-1};
    static const int some[] = {1900, 37, 1200, 38, -1};
    static const int last[] = {N - 1, -1};
    for (int w = 0; w <= 9; w++) {
        check(w, none, N);
        check(w, some, 37);
        check(w, last, N - 1);
    }
}

Test(pool, no_items)
{
    ctx c = {{0}, (const int[]){-1}};
    cr_expect_eq(am_parallel_for(0, 4, visit, &c), 0);
}
