/* report_groups.c's grouping as a property over random jobs: every rank in
 * exactly one group; a group's ranks share stage and outcome and their
 * peaks lie within AM_GROUP_TOL_PCT of the group's highest; each stage has
 * exactly one majority, a largest group; the rank list names exactly the
 * group's ranks. Plus one job with known groups. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t
next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static am_oom an_oom;

/* n ranks, pp stages; peaks from a few bands per stage; some OOM. */
static void
make_job(am_job *j, size_t n, int pp)
{
    memset(j, 0, sizeof *j);
    j->ranks = calloc(n, sizeof *j->ranks);
    j->nranks = n;
    j->hot_level = AM_L_TENSOR;
    for (size_t i = 0; i < n; i++) {
        am_rank *r = &j->ranks[i];
        r->rank = (int)i;
        r->pp = pp;
        r->stage = pp > 1 ? (int)(i / ((n + (size_t)pp - 1) / (size_t)pp)) : 0;
        uint64_t band = (uint64_t)(40 + 5 * r->stage + (int)(next() % 3) * 2) << 30;
        r->peak[AM_L_TENSOR].known = next() % 16 != 0;
        r->peak[AM_L_TENSOR].bytes = band + next() % (band / 400);
        r->peak[AM_L_DEVICE].known = 1;
        r->peak[AM_L_DEVICE].bytes = r->peak[AM_L_TENSOR].bytes + (1u << 30);
        r->oom = next() % 8 == 0 ? &an_oom : NULL;
    }
}

/* The ranks "0-3,5" names, as a bitmap. */
static void
parse_list(const char *s, unsigned char *seen, size_t n)
{
    while (*s) {
        char *e;
        long a = strtol(s, &e, 10), b = a;
        if (*e == '-')
            b = strtol(e + 1, &e, 10);
        for (long k = a; k <= b; k++)
            if (k >= 0 && (size_t)k < n)
                seen[k]++;
        s = *e == ',' ? e + 1 : e;
    }
}

Test(groups, property_over_random_jobs)
{
    for (int trial = 0; trial < 300; trial++) {
        am_job j;
        size_t n = 1 + next() % 64;
        int pp = 1 << (next() % 4);
        make_job(&j, n, pp);
        am_rank_group *g;
        long ng = am_rank_groups(&j, &g);
        cr_assert_geq(ng, 1);
        unsigned char *in = calloc(n, 1), *listed = calloc(n, 1);
        for (long k = 0; k < ng; k++) {
            const am_rank *r0 = &j.ranks[g[k].idx[0]];
            uint64_t hi = 0;
            for (size_t m = 0; m < g[k].n; m++) {
                const am_rank *r = &j.ranks[g[k].idx[m]];
                in[g[k].idx[m]]++;
                cr_expect_eq(r->pp > 1 ? r->stage : -1, g[k].stage);
                cr_expect_eq(!r->oom, !r0->oom);
                cr_expect_eq(r->peak[AM_L_TENSOR].known, r0->peak[AM_L_TENSOR].known);
                if (r->peak[AM_L_TENSOR].known && r->peak[AM_L_TENSOR].bytes > hi)
                    hi = r->peak[AM_L_TENSOR].bytes;
            }
            for (size_t m = 0; m < g[k].n; m++) {
                const am_peak *p = &j.ranks[g[k].idx[m]].peak[AM_L_TENSOR];
                if (p->known)
                    cr_expect_leq((double)(hi - p->bytes), (double)hi * AM_GROUP_TOL_PCT / 100.0);
            }
            char list[4096];
            parse_list(am_rank_list(&j, &g[k], list, sizeof list), listed, n);
            int majorities = 0, largest = 1;
            for (long m = 0; m < ng; m++)
                if (g[m].stage == g[k].stage) {
                    majorities += g[m].majority;
                    if (g[m].n > g[k].n)
                        largest = 0;
                }
            cr_expect_eq(majorities, 1, "stage %d", g[k].stage);
            if (g[k].majority)
                cr_expect(largest);
        }
        for (size_t i = 0; i < n; i++) {
            cr_expect_eq(in[i], 1, "rank %zu in %d groups", i, in[i]);
            cr_expect_eq(listed[i], 1, "rank %zu listed %d times", i, listed[i]);
        }
        free(in), free(listed);
        am_rank_groups_free(g, (size_t)ng);
        free(j.ranks);
    }
}

Test(groups, known_job)
{
    am_job j;
    make_job(&j, 8, 2);
    for (size_t i = 0; i < 8; i++) {
        j.ranks[i].peak[AM_L_TENSOR].known = 1;
        j.ranks[i].peak[AM_L_TENSOR].bytes = i < 4 ? (uint64_t)77 << 30 : (uint64_t)60 << 30;
        j.ranks[i].oom = NULL;
    }
    j.ranks[2].oom = &an_oom;                             /* stage 0: rank 2 OOMs */
    j.ranks[6].peak[AM_L_TENSOR].bytes = (uint64_t)58 << 30; /* stage 1: rank 6 3% lower */
    am_rank_group *g;
    long ng = am_rank_groups(&j, &g);
    cr_assert_eq(ng, 4);
    char list[64];
    cr_expect_str_eq(am_rank_list(&j, &g[0], list, sizeof list), "0-1,3");
    cr_expect(g[0].majority);
    cr_expect_str_eq(am_rank_list(&j, &g[1], list, sizeof list), "2");
    cr_expect(!g[1].majority && g[1].oom);
    cr_expect_str_eq(am_rank_list(&j, &g[2], list, sizeof list), "4-5,7");
    cr_expect_str_eq(am_rank_list(&j, &g[3], list, sizeof list), "6");
    cr_expect(!g[3].majority);
    am_rank_groups_free(g, (size_t)ng);
    free(j.ranks);
}
