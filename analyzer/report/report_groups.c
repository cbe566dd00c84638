/* report_groups.c: ranks grouped for the scalable reports (report_text.c,
 * report_md.c): one group per pipeline stage and outcome whose peaks lie
 * within a tolerance; the largest group of a stage is its majority, the
 * others are the ranks that differ. */
#include <stdlib.h>

#include "grow.h"
#include "report.h"

static const am_job *g_job; /* qsort context (reporters are single-threaded) */

static int
stage_of(const am_rank *r)
{
    return r->pp > 1 ? r->stage : -1;
}

static uint64_t
peak_of(const am_rank *r, int level)
{
    return r->peak[level].known ? r->peak[level].bytes : 0;
}

/* stage, OOM, known, then peak descending, then rank */
static int
cmp_idx(const void *a, const void *b)
{
    const am_rank *x = &g_job->ranks[*(const size_t *)a], *y = &g_job->ranks[*(const size_t *)b];
    int l = g_job->hot_level;
    if (stage_of(x) != stage_of(y))
        return stage_of(x) < stage_of(y) ? -1 : 1;
    if (!x->oom != !y->oom)
        return x->oom ? 1 : -1;
    if (x->peak[l].known != y->peak[l].known)
        return x->peak[l].known ? -1 : 1;
    if (peak_of(x, l) != peak_of(y, l))
        return peak_of(x, l) > peak_of(y, l) ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int
cmp_rank(const void *a, const void *b)
{
    int x = g_job->ranks[*(const size_t *)a].rank, y = g_job->ranks[*(const size_t *)b].rank;
    return x < y ? -1 : x > y;
}

/* Does rank i join group g (same stage, outcome, level known, peak within
 * the tolerance of the group's highest)? */
static int
joins(const am_job *j, const am_rank_group *g, size_t i)
{
    const am_rank *r = &j->ranks[i], *first = &j->ranks[g->idx[0]];
    int l = j->hot_level;
    if (stage_of(r) != g->stage || !r->oom != !g->oom ||
        r->peak[l].known != first->peak[l].known)
        return 0;
    if (!r->peak[l].known)
        return 1;
    double top = (double)peak_of(first, l);
    return top - (double)peak_of(r, l) <= top * AM_GROUP_TOL_PCT / 100.0;
}

static void
finish_group(const am_job *j, am_rank_group *g)
{
    for (int l = 0; l < AM_NLEVELS; l++) {
        g->known[l] = 1;
        int any = 0;
        for (size_t k = 0; k < g->n; k++) {
            const am_peak *p = &j->ranks[g->idx[k]].peak[l];
            if (!p->known) {
                g->known[l] = 0;
                continue;
            }
            if (!any || p->bytes < g->lo[l])
                g->lo[l] = p->bytes;
            if (!any || p->bytes > g->hi[l])
                g->hi[l] = p->bytes;
            any = 1;
        }
    }
    g_job = j;
    am_sort(g->idx, g->n, sizeof *g->idx, cmp_rank);
}

long
am_rank_groups(const am_job *j, am_rank_group **out)
{
    *out = NULL;
    size_t *order = malloc((j->nranks ? j->nranks : 1) * sizeof *order);
    am_rank_group *g = calloc(j->nranks ? j->nranks : 1, sizeof *g);
    if (!order || !g) {
        free(order);
        free(g);
        return -1;
    }
    for (size_t i = 0; i < j->nranks; i++)
        order[i] = i;
    g_job = j;
    am_sort(order, j->nranks, sizeof *order, cmp_idx);
    size_t ng = 0;
    for (size_t k = 0; k < j->nranks; k++) {
        size_t i = order[k];
        if (!ng || !joins(j, &g[ng - 1], i)) {
            am_rank_group *x = &g[ng++];
            x->stage = stage_of(&j->ranks[i]);
            x->oom = j->ranks[i].oom != NULL;
            x->idx = malloc(j->nranks * sizeof *x->idx);
            if (!x->idx) {
                am_rank_groups_free(g, ng);
                free(order);
                return -1;
            }
        }
        g[ng - 1].idx[g[ng - 1].n++] = i;
    }
    free(order);
    for (size_t k = 0; k < ng; k++) {
        finish_group(j, &g[k]);
        g[k].majority = 1; /* the largest group of its stage (the first on ties) */
        for (size_t m = 0; m < ng; m++)
            if (m != k && g[m].stage == g[k].stage &&
                (g[m].n > g[k].n || (g[m].n == g[k].n && m < k)))
                g[k].majority = 0;
    }
    *out = g;
    return (long)ng;
}

void
am_rank_groups_free(am_rank_group *g, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(g[k].idx);
    free(g);
}

const char *
am_rank_list(const am_job *j, const am_rank_group *g, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t k = 0; k < g->n && at < n;) {
        int a = j->ranks[g->idx[k]].rank, b = a;
        size_t e = k + 1;
        while (e < g->n && j->ranks[g->idx[e]].rank == b + 1)
            b = j->ranks[g->idx[e++]].rank;
        if (b > a)
            at += (size_t)snprintf(buf + at, n - at, "%s%d-%d", k ? "," : "", a, b);
        else
            at += (size_t)snprintf(buf + at, n - at, "%s%d", k ? "," : "", a);
        k = e;
    }
    return buf;
}
