/* test_peak_journal.c: the live set at each peak, taken in the one sweep
 * from the peak's journal (analyzer/attribute/peak_journal.h), equals the
 * one a second pass takes by replaying the source (am_opts.replay_peaks).
 *
 * Each test: GIVEN a hand-made trace where what was live at the peak
 * changes after it (freed, replaced at the same address, attributed only
 * after its free, relabelled when the first optimizer step turns out to
 * initialise nothing), WHEN analysed both ways, THEN every peak's
 * contributors, blocks, untracked bytes and setter are identical, and hold
 * the values the trace was built to give. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abuild.h"
#include "analysis.h"
#include "catalog.h"
#include "model.h"

static void
analyse(const char *path, int iteration, int replay, am_rank *r)
{
    am_source *s;
    char err[1024];
    memset(r, 0, sizeof *r);
    cr_assert_eq(am_source_open(path, &s, err, sizeof err), 0, "%s", err);
    am_opts o = {.iteration = iteration, .phase_spans = 1, .peak_blocks = 1,
                 .replay_peaks = replay};
    cr_assert_eq(am_analyze(s, &o, r, err, sizeof err), 0, "%s", err);
}

static void
same_peak(const am_peak *a, const am_peak *b, const char *what)
{
    cr_assert_eq(a->known, b->known, "%s known", what);
    cr_assert_eq(a->bytes, b->bytes, "%s bytes", what);
    cr_assert_eq(a->event_index, b->event_index, "%s event", what);
    cr_assert_eq(a->untracked_bytes, b->untracked_bytes, "%s untracked", what);
    cr_assert_eq(a->setter.attr.phase, b->setter.attr.phase, "%s setter phase", what);
    cr_assert_eq(a->setter.attr.boundary, b->setter.attr.boundary, "%s setter boundary", what);
    cr_assert_eq(a->setter.attr.layer, b->setter.attr.layer, "%s setter layer", what);
    cr_assert_eq(a->ngroups, b->ngroups, "%s groups", what);
    for (size_t i = 0; i < a->ngroups; i++) {
        const am_group *x = &a->groups[i], *y = &b->groups[i];
        cr_assert(x->phase == y->phase && x->boundary == y->boundary && x->layer == y->layer &&
                      x->site == y->site && x->bytes == y->bytes && x->count == y->count,
                  "%s group %zu: %s/%s/%d %llu x%llu vs %s/%s/%d %llu x%llu", what, i,
                  am_phase_name(x->phase), am_boundary_name(x->boundary), x->layer,
                  (unsigned long long)x->bytes, (unsigned long long)x->count,
                  am_phase_name(y->phase), am_boundary_name(y->boundary), y->layer,
                  (unsigned long long)y->bytes, (unsigned long long)y->count);
    }
    cr_assert_eq(a->nblocks, b->nblocks, "%s blocks", what);
    for (size_t i = 0; i < a->nblocks; i++)
        cr_assert(a->blocks[i].addr == b->blocks[i].addr && a->blocks[i].size == b->blocks[i].size,
                  "%s block %zu", what, i);
}

/* Analyse path both ways into one[0] (journal) and one[1] (replay); the
 * peaks must be identical. The caller frees both. */
static void
both(const char *path, int iteration, am_rank one[2])
{
    analyse(path, iteration, 0, &one[0]);
    analyse(path, iteration, 1, &one[1]);
    for (int l = 0; l < AM_NLEVELS; l++) {
        same_peak(&one[0].peak[l], &one[1].peak[l], l ? "tensor peak" : "device peak");
        same_peak(&one[0].iter_peak[l], &one[1].iter_peak[l],
                  l ? "tensor iteration peak" : "device iteration peak");
    }
}

/* The group of the device peak with this phase and boundary (bytes), or 0. */
static uint64_t
group_bytes(const am_peak *p, int phase, int boundary)
{
    for (size_t i = 0; i < p->ngroups; i++)
        if (p->groups[i].phase == phase && p->groups[i].boundary == boundary)
            return p->groups[i].bytes;
    return 0;
}

static char *
trace_path(void)
{
    char *dir = ab_tmpdir();
    char *p = malloc(strlen(dir) + 16);
    sprintf(p, "%s/r0.rstrace", dir);
    return p;
}

static void
done(char *f, am_rank one[2])
{
    am_rank_free(&one[0]);
    am_rank_free(&one[1]);
    unlink(f);
    char *slash = strrchr(f, '/');
    *slash = '\0';
    rmdir(f);
    free(f);
}

/* An allocation made just before a TE call is attributed when that call's
 * range opens (nearest range): here it is the peak and is freed before
 * the range opens, so only the journal still holds it then. */
Test(peak_journal, attributed_after_its_free)
{
    char *f = trace_path();
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 1, "python");
    ab_push(a, AB_MAIN, 10, "nvte_rmsnorm_fwd");
    ab_alloc(a, AB_MAIN, 11, 0x100000, 64);                  /* layernorm */
    ab_pop(a, AB_MAIN, 12);
    ab_alloc(a, AB_MAIN, 20, 0x200000, 4096);                /* the peak: 4160 */
    ab_free(a, AB_MAIN, 21, 0x200000);
    ab_push(a, AB_MAIN, 22, "nvte_flash_attn_fwd");
    ab_alloc(a, AB_MAIN, 23, 0x300000, 128);                 /* core_attn */
    ab_pop(a, AB_MAIN, 24);
    ab_free(a, AB_MAIN, 25, 0x100000);
    ab_free(a, AB_MAIN, 26, 0x300000);
    ab_write(a, f, 1);
    am_rank one[2];
    both(f, -1, one);
    const am_peak *p = &one[0].peak[AM_L_DEVICE];
    cr_expect_eq(p->bytes, 4160);
    cr_expect_eq(p->nblocks, 2);
    cr_expect_eq(group_bytes(p, AM_PH_forward, AM_BD_core_attn), 4096);
    cr_expect_eq(group_bytes(p, AM_PH_forward, AM_BD_layernorm), 64);
    done(f, one);
}

/* After the peak, an address live at it is allocated again without a free
 * (the second replaces the first in the live set) and another is freed:
 * the peak's blocks are the ones live then. */
Test(peak_journal, replaced_and_freed_after_the_peak)
{
    char *f = trace_path();
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 1, "python");
    ab_alloc(a, AB_MAIN, 10, 0x100000, 1000);
    ab_alloc(a, AB_MAIN, 11, 0x200000, 2000);                /* the peak: 3000 */
    ab_alloc(a, AB_MAIN, 12, 0x100000, 10);                  /* replaces the 1000 */
    ab_free(a, AB_MAIN, 13, 0x200000);
    ab_alloc(a, AB_MAIN, 14, 0x300000, 500);
    ab_write(a, f, 1);
    am_rank one[2];
    both(f, -1, one);
    const am_peak *p = &one[0].peak[AM_L_DEVICE];
    cr_expect_eq(p->bytes, 3000);
    cr_assert_eq(p->nblocks, 2);
    cr_expect(p->blocks[0].addr == 0x100000 && p->blocks[0].size == 1000);
    cr_expect(p->blocks[1].addr == 0x200000 && p->blocks[1].size == 2000);
    done(f, one);
}

/* The first optimizer step allocates and frees a buffer (the peak) and
 * leaves nothing live: it initialised no state, so the buffer's phase is
 * the plain optimizer, in the journal as in the replay. */
Test(peak_journal, first_optimizer_step_relabelled)
{
    char *f = trace_path();
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 1, "python");
    ab_alloc(a, AB_MAIN, 10, 0x100000, 100);
    ab_push(a, AB_MAIN, 20, "Optimizer.step#Adam.step");
    ab_alloc(a, AB_MAIN, 21, 0x800000, 4000);                /* the peak: 4100 */
    ab_free(a, AB_MAIN, 22, 0x800000);
    ab_pop(a, AB_MAIN, 23);
    ab_write(a, f, 1);
    am_rank one[2];
    both(f, -1, one);
    const am_peak *p = &one[0].peak[AM_L_DEVICE];
    cr_expect_eq(p->bytes, 4100);
    cr_expect(one[0].opt_state_preexisting);
    cr_expect_eq(group_bytes(p, AM_PH_optimizer, AM_BD_optimizer_state), 4000);
    cr_expect_eq(group_bytes(p, AM_PH_optimizer_state_init, AM_BD_optimizer_state), 0);
    done(f, one);
}

/* Three iterations with --iteration 1: the overall and the iteration's
 * peak each keep their own journal (the iteration's peak is earlier and
 * its activations are freed after it). */
Test(peak_journal, selected_iteration_and_overall_peak)
{
    char *f = trace_path();
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 1, "python");
    ab_thread(a, AB_BWD, 2, "pt_autograd_0");
    uint64_t t = 100;
    for (int it = 0; it < 3; it++, t += 1000) {
        uint64_t base = 0x1000000 + (uint64_t)it * 0x100000;
        ab_push(a, AB_MAIN, t, "megatron.core.transformer.mlp.forward.linear_fc1");
        ab_alloc(a, AB_MAIN, t + 1, base, 100 + (uint64_t)it);
        ab_alloc(a, AB_MAIN, t + 2, base + 0x10000, 200);
        ab_pop(a, AB_MAIN, t + 3);
        ab_free(a, AB_BWD, t + 52, base);
        ab_free(a, AB_BWD, t + 53, base + 0x10000);
        ab_push(a, AB_MAIN, t + 60, "Optimizer.step#Adam.step");
        if (it == 0)
            ab_alloc(a, AB_MAIN, t + 61, 0x8000000, 4000);     /* Adam state, once */
        ab_pop(a, AB_MAIN, t + 62);
    }
    ab_write(a, f, 1);
    am_rank one[2];
    both(f, 1, one);
    cr_expect_eq(one[0].peak[AM_L_DEVICE].bytes, 4000 + 102 + 200);
    cr_expect_eq(one[0].iter_peak[AM_L_DEVICE].bytes, 4000 + 101 + 200);
    cr_expect_eq(one[0].iter_peak[AM_L_DEVICE].nblocks, 3);
    cr_expect_eq(group_bytes(&one[0].iter_peak[AM_L_DEVICE], AM_PH_forward, AM_BD_mlp), 301);
    done(f, one);
}
