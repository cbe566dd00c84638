/* test_import.c: the importers on the real fixtures (recorded by others on
 * real GPUs; kept beside the source tree, not in the repository: CI has them),
 * damaged inputs, and the fuzz seed corpus. Fixture tests skip visibly when
 * the fixtures are absent: a "SKIP" line on stderr, which tools/test-summary.py
 * counts and prints above its summary line. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "analysis.h"
#include "pickle.h"

#define MiB (1024.0 * 1024.0)

int LLVMFuzzerTestOneInputKineto(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInputSnapshot(const uint8_t *data, size_t size);

/* The fixture's path under RECOMP_FIXTURES_DIR (default FIXTURES_DIR); skips
 * the test, visibly, when it is absent. */
static const char *
fixture(const char *rel)
{
    static char path[4096];
    const char *dir = getenv("RECOMP_FIXTURES_DIR");
    if (!dir || !*dir)
        dir = FIXTURES_DIR;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "SKIP real fixtures absent (%s): fixture tests skipped\n", dir);
        cr_skip_test("fixture %s is absent (the real fixtures beside the source tree): skipped",
                     path);
    }
    return path;
}

/* Open and analyse one file, keeping phase spans or not; the rank owns the
 * source. */
static void
analyse_spans(const char *path, am_rank *r, int spans)
{
    am_source *s;
    char err[1024];
    memset(r, 0, sizeof *r);
    cr_assert_eq(am_source_open(path, &s, err, sizeof err), 0, "%s", err);
    am_opts o = {.iteration = -1, .phase_spans = spans};
    cr_assert_eq(am_analyze(s, &o, r, err, sizeof err), 0, "%s", err);
}

/* These tests read the spans. */
static void
analyse(const char *path, am_rank *r)
{
    analyse_spans(path, r, 1);
}

static int
has_warning(const am_rank *r, const char *sub)
{
    for (size_t i = 0; i < r->src->meta.nwarnings; i++)
        if (strstr(r->src->meta.warnings[i], sub))
            return 1;
    return 0;
}

static size_t
count_spans(const am_iteration *it, int phase)
{
    size_t n = 0;
    for (size_t k = 0; k < it->nphases; k++)
        n += it->phases[k].phase == phase && it->phases[k].end_ns > it->phases[k].start_ns;
    return n;
}

static size_t
count_spans_all(const am_rank *r, int phase)
{
    size_t n = 0;
    for (size_t i = 0; i < r->niters; i++)
        n += count_spans(&r->iters[i], phase);
    return n;
}

static double
mib(uint64_t b)
{
    return (double)b / MiB;
}

/* ---- Kineto ---- */

Test(kineto, hta_df_index_resolver)
{
    am_rank r;
    analyse(fixture("hta/df_index_resolver.json.gz"), &r);
    cr_expect_eq(r.rank, 1);
    cr_expect_eq(r.src->meta.world_size, 2);
    cr_expect_eq(r.src->meta.device, 1);
    cr_assert_eq(r.niters, 5);
    for (size_t i = 0; i < r.niters; i++) {
        cr_expect_eq(r.iters[i].number, (int)i + 2);
        cr_expect_float_eq(mib(r.iters[i].peak[AM_L_TENSOR]), 6322.4, 0.05,
                           "iteration %d peaks at %.2f MiB", r.iters[i].number,
                           mib(r.iters[i].peak[AM_L_TENSOR]));
    }
    const am_peak *p = &r.peak[AM_L_TENSOR];
    cr_assert(p->known);
    cr_expect_float_eq(mib(p->bytes), 6322.4, 0.05);
    cr_expect_float_eq(mib(p->reserved_bytes), 12190.0, 0.001);
    cr_expect_float_eq(mib(r.peak[AM_L_DEVICE].bytes), 12190.0, 0.001, "reserved");
    cr_expect_eq(p->phase, AM_PH_backward, "peak phase %s", am_phase_name(p->phase));
    cr_expect_gt(p->ngroups, 0, "contributors reported");
    cr_expect_gt(p->untracked_bytes, 0, "memory from before the trace");
    /* the trace starts at step 2, and the first optimizer step leaves nothing
     * allocated: the Adam state existed before the trace (a plain step) */
    cr_expect_eq(r.opt_init_iteration, -1);
    cr_expect_eq(count_spans_all(&r, AM_PH_optimizer_state_init), 0);
    cr_expect(r.opt_state_preexisting);
    for (size_t i = 0; i < r.niters; i++) {
        cr_expect_eq(count_spans(&r.iters[i], AM_PH_forward), 1);
        cr_expect_eq(count_spans(&r.iters[i], AM_PH_backward), 1);
    }
    am_rank_free(&r);
}

Test(kineto, legacy_bytes_only_running_sum)
{
    am_rank r;
    analyse(fixture("kineto/worker0.1623143089861.pt.trace.json.gz"), &r);
    cr_expect_eq(r.niters, 6);
    cr_expect(has_warning(&r, "baseline: window_start"));
    const am_peak *p = &r.peak[AM_L_TENSOR];
    cr_assert(p->known);
    /* SOURCES.md: the cumulative peak is 2662 MiB above the level at trace start */
    cr_expect_float_eq(mib(p->bytes), 2662.3, 0.1, "%.2f", mib(p->bytes));
    cr_expect_gt(count_spans_all(&r, AM_PH_backward), 0);
    am_rank_free(&r);
}

Test(kineto, rocm_inference_only)
{
    am_rank r;
    analyse(fixture("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"), &r);
    const am_peak *p = &r.peak[AM_L_TENSOR];
    cr_assert(p->known, "ROCm (Device Type 6) memory events read");
    cr_expect_float_eq(mib(p->bytes), 2116.2, 0.05, "%.2f", mib(p->bytes));
    cr_expect_float_eq(mib(p->reserved_bytes), 2416.0, 0.001);
    cr_expect_eq(count_spans_all(&r, AM_PH_backward), 0);
    cr_expect_eq(count_spans_all(&r, AM_PH_backward_replay), 0);
    cr_expect_eq(count_spans_all(&r, AM_PH_optimizer), 0);
    cr_expect_eq(count_spans_all(&r, AM_PH_optimizer_state_init), 0);
    cr_expect_eq(r.opt_init_iteration, -1);
    am_rank_free(&r);
}

Test(kineto, activation_checkpoint_replay_once_per_block_per_step)
{
    am_rank r;
    analyse(fixture("tracelens/resnet_act_checkpoint.json.gz"), &r);
    cr_assert_eq(r.niters, 3);
    for (size_t i = 0; i < r.niters; i++)
        cr_expect_eq(count_spans(&r.iters[i], AM_PH_backward_replay), 4,
                     "iteration %d: 4 checkpointed blocks", r.iters[i].number);
    /* no memory events: peak null, still iterations and phases */
    cr_expect(!r.peak[AM_L_TENSOR].known && !r.peak[AM_L_DEVICE].known);
    cr_expect(has_warning(&r, "no GPU memory events"));
    cr_expect_eq(r.src->meta.world_size, 8);
    am_rank_free(&r);
}

/* Without phase spans (the text report: only the JSON lists them) the
 * analysis keeps none, and every figure is the same as with them. */
Test(kineto, without_phase_spans_same_figures_no_spans_kept)
{
    const char *path = fixture("hta/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
    am_rank a, b;
    analyse_spans(path, &a, 1);
    analyse_spans(path, &b, 0);
    cr_assert_eq(a.niters, b.niters);
    size_t spans = 0;
    for (size_t i = 0; i < a.niters; i++) {
        spans += a.iters[i].nphases;
        cr_expect_eq(b.iters[i].nphases, 0, "iteration %zu kept spans", i);
        for (int l = 0; l < AM_NLEVELS; l++)
            cr_expect_eq(a.iters[i].peak[l], b.iters[i].peak[l]);
    }
    cr_assert_gt(spans, 0, "the fixture has phase spans");
    for (int l = 0; l < AM_NLEVELS; l++) {
        cr_expect_eq(a.peak[l].known, b.peak[l].known);
        cr_expect_eq(a.peak[l].bytes, b.peak[l].bytes);
        cr_expect_eq(a.peak[l].time_ns, b.peak[l].time_ns);
        cr_expect_eq(a.peak[l].ngroups, b.peak[l].ngroups);
        cr_expect_eq(a.peak[l].iteration, b.peak[l].iteration);
        cr_expect_eq(a.peak[l].phase, b.peak[l].phase);
    }
    am_rank_free(&a);
    am_rank_free(&b);
}

/* hta/rank-0: >= 95% of each explicitly labelled interval carries the
 * phase its label says. The labels are read through the importer itself. */
Test(kineto, explicit_labels_match_phases)
{
    const char *path = fixture("hta/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
    am_source *s;
    char err[1024];
    cr_assert_eq(am_source_open(path, &s, err, sizeof err), 0, "%s", err);
    struct { uint64_t start, end; int phase; uint32_t span; } lab[64];
    size_t nl = 0;
    am_event ev;
    while (am_next(s, &ev) == 1) {
        if (ev.kind == AM_EV_RANGE_PUSH && ev.name_len > 3 && !memcmp(ev.name, "## ", 3) &&
            nl < 64) {
            int ph = !memcmp(ev.name, "## forward", 10)    ? AM_PH_forward
                     : !memcmp(ev.name, "## backward", 11) ? AM_PH_backward
                                                           : AM_PH_optimizer;
            lab[nl++] = (typeof(lab[0])){ev.t_ns, 0, ph, ev.domain_id};
        } else if (ev.kind == AM_EV_RANGE_POP) {
            for (size_t i = 0; i < nl; i++)
                if (lab[i].span == ev.domain_id && !lab[i].end)
                    lab[i].end = ev.t_ns;
        }
    }
    cr_assert_eq(am_rewind(s), 0);
    cr_assert_eq(nl, 15, "5 steps x forward/backward/optimizer labels");
    am_rank r;
    memset(&r, 0, sizeof r);
    am_opts o = {.iteration = -1, .phase_spans = 1};
    cr_assert_eq(am_analyze(s, &o, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(r.niters, 5);
    cr_expect(!r.peak[AM_L_TENSOR].known, "no memory events: peak null");
    for (size_t i = 0; i < nl; i++) {
        uint64_t cover = 0;
        for (size_t k = 0; k < r.niters; k++)
            for (size_t q = 0; q < r.iters[k].nphases; q++) {
                const am_phase_span *sp = &r.iters[k].phases[q];
                int ok = sp->phase == lab[i].phase ||
                         (lab[i].phase == AM_PH_optimizer &&
                          sp->phase == AM_PH_optimizer_state_init);
                uint64_t a = sp->start_ns > lab[i].start ? sp->start_ns : lab[i].start;
                uint64_t b = sp->end_ns < lab[i].end ? sp->end_ns : lab[i].end;
                if (ok && b > a)
                    cover += b - a;
            }
        double frac = (double)cover / (double)(lab[i].end - lab[i].start);
        cr_expect_geq(frac, 0.95, "label %zu (%s) covered %.3f", i, am_phase_name(lab[i].phase),
                      frac);
    }
    am_rank_free(&r);
}

/* ---- snapshots ---- */

Test(snapshot, cs336_training_one_step)
{
    am_rank r;
    analyse(fixture("cs336/Wedsonlin/medium_128_training_memory_snapshot.pickle"), &r);
    cr_assert_eq(r.niters, 1, "one full step");
    const am_peak *p = &r.peak[AM_L_TENSOR];
    cr_assert(p->known);
    /* absolute: memory from before the recording window counted */
    /* block sizes rebuilt from the layout (unsplit rests counted, as PyTorch's
     * allocated counter does): 2.8 MiB above the rounded requests' 7021691392 */
    cr_expect_eq(p->bytes, 7024640512ull, "peak %llu (%.2f MiB)", (unsigned long long)p->bytes,
                 mib(p->bytes));
    cr_expect_eq(p->phase, AM_PH_optimizer_state_init, "%s", am_phase_name(p->phase));
    cr_expect_eq(r.opt_init_iteration, 0);
    cr_expect_float_eq(mib(r.peak[AM_L_DEVICE].bytes), 6900.0, 0.001, "reserved (segments)");
    cr_expect_float_eq(mib(p->reserved_bytes), 6900.0, 0.001);
    const am_iteration *it = &r.iters[0];
    cr_expect_eq(count_spans(it, AM_PH_forward), 1);
    cr_expect_eq(count_spans(it, AM_PH_backward), 1);
    cr_expect_eq(count_spans(it, AM_PH_optimizer_state_init), 1);
    int opt_state = 0, bwd = 0;
    for (size_t g = 0; g < p->ngroups; g++) {
        opt_state |= p->groups[g].phase == AM_PH_optimizer_state_init &&
                     p->groups[g].boundary == AM_BD_optimizer_state;
        bwd |= p->groups[g].phase == AM_PH_backward;
    }
    cr_expect(opt_state && bwd, "optimizer state and gradients among the contributors");
    cr_expect(has_warning(&r, "approximate"));
    /* not Megatron: contributors are grouped by the allocating Python function
     * (issue 5); the warning-line workaround is gone */
    cr_expect(r.by_site, "grouped by allocation site");
    cr_expect(!has_warning(&r, "functions holding"));
    /* the Adam moments, lazily created by the optimizer's step (frames
     * cs336_basics/optimizer.py(76)/(77): step), are optimizer_state_init, never
     * backward: optimizer frames mean optimizer */
    static const struct {
        const char *fn;
        uint64_t bytes, count;
        uint8_t phase;
    } want[] = {
        {"cs336_basics/optimizer.py:76:step", 1694699520ull, 219, AM_PH_optimizer_state_init},
        {"cs336_basics/optimizer.py:77:step", 1694699520ull, 219, AM_PH_optimizer_state_init},
        {"cs336_basics/optimizer.py:80:step", 125829120ull, 3, AM_PH_optimizer_state_init},
        {"cs336_basics/model.py:39:forward", 20480000ull, 1, AM_PH_forward},
        {"cs336_basics/nn_utils.py:18:cross_entropy", 512ull, 1, AM_PH_forward},
    };
    uint64_t sited = 0, unsited = 0;
    for (size_t g = 0; g < p->ngroups; g++) {
        const char *fn = am_site_name(&r, p->groups[g].site);
        if (!fn) {
            unsited += p->groups[g].bytes;
            /* no Python frame: parameters from before the window, and the
             * gradients (stack-less, between forward and the optimizer) */
            cr_expect(p->groups[g].phase == AM_PH_init || p->groups[g].phase == AM_PH_backward,
                      "frameless group in %s", am_phase_name(p->groups[g].phase));
            continue;
        }
        sited += p->groups[g].bytes;
        cr_expect(strstr(fn, "optimizer.py") == NULL ||
                      p->groups[g].phase == AM_PH_optimizer_state_init,
                  "%s in %s", fn, am_phase_name(p->groups[g].phase));
    }
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int found = 0;
        for (size_t g = 0; g < p->ngroups; g++) {
            const char *fn = am_site_name(&r, p->groups[g].site);
            if (fn && !strcmp(fn, want[k].fn)) {
                found = 1;
                cr_expect_eq(p->groups[g].bytes, want[k].bytes, "%s bytes %llu", want[k].fn,
                             (unsigned long long)p->groups[g].bytes);
                cr_expect_eq(p->groups[g].count, want[k].count, "%s count", want[k].fn);
                cr_expect_eq(p->groups[g].phase, want[k].phase, "%s phase %s", want[k].fn,
                             am_phase_name(p->groups[g].phase));
            }
        }
        cr_expect(found, "%s among the contributors", want[k].fn);
    }
    /* the top group with a function is the first Adam moment */
    for (size_t g = 0; g < p->ngroups; g++)
        if (am_site_name(&r, p->groups[g].site)) {
            cr_expect_str_eq(am_site_name(&r, p->groups[g].site),
                             "cs336_basics/optimizer.py:76:step");
            break;
        }
    cr_expect_eq(sited + unsited, p->bytes);
    cr_expect_eq(unsited, 1793740800ull + 1695191040ull, "params + grads without a frame: %llu",
                 (unsigned long long)unsited);
    am_rank_free(&r);
}

Test(kineto, python_functions_are_allocation_sites)
{
    am_rank r;
    analyse(fixture("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"), &r);
    const am_peak *p = &r.peak[AM_L_TENSOR];
    cr_assert(p->known);
    cr_expect(r.by_site);
    cr_assert_geq(p->ngroups, 2);
    /* the KV cache and the rotary embedding of the Qwen2 attention hold the most */
    cr_expect_str_eq(am_site_name(&r, p->groups[0].site),
                     "transformers/models/qwen2/modeling_qwen2.py:150:forward");
    cr_expect_eq(p->groups[0].bytes, 439615488ull);
    cr_expect_eq(p->groups[0].count, 24);
    cr_expect_str_eq(am_site_name(&r, p->groups[1].site),
                     "transformers/models/qwen2/modeling_qwen2.py:68:apply_rotary_pos_emb");
    cr_expect_eq(p->groups[1].bytes, 439615488ull);
    for (size_t g = 0; g < p->ngroups; g++) {
        const char *fn = am_site_name(&r, p->groups[g].site);
        cr_expect(fn == NULL || strncmp(fn, "torch/", 6) != 0, "torch frame %s", fn);
    }
    am_rank_free(&r);
}

Test(kineto, no_python_frames_no_sites)
{
    am_rank r;
    analyse(fixture("hta/df_index_resolver.json.gz"), &r);
    cr_expect_eq(r.nsites, 0);
    cr_expect_eq(r.by_site, 0);
    am_rank_free(&r);
}

Test(snapshot, cs336_inference_no_backward_no_optimizer)
{
    am_rank r;
    analyse(fixture("cs336/Wedsonlin/medium_128_inference_memory_snapshot.pickle"), &r);
    cr_expect(r.peak[AM_L_TENSOR].known);
    cr_expect_eq(count_spans_all(&r, AM_PH_backward), 0);
    cr_expect_eq(count_spans_all(&r, AM_PH_optimizer), 0);
    cr_expect_eq(count_spans_all(&r, AM_PH_optimizer_state_init), 0);
    cr_expect_eq(r.opt_init_iteration, -1);
    am_rank_free(&r);
}

/* A minimal pickle writer (protocol 2) for derived fixtures. */
typedef struct wbuf { unsigned char *b; size_t n, cap; } wbuf;

static void
put(wbuf *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2;
        w->b = realloc(w->b, w->cap);
        cr_assert_not_null(w->b);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void
putc_(wbuf *w, int c)
{
    unsigned char ch = (unsigned char)c;
    put(w, &ch, 1);
}

static int
cpp_frame(const pk_val *fr)
{
    const pk_val *f = pk_get(fr, "filename");
    return !(f && f->type == PK_STR && f->u.str.n >= 3 &&
             !memcmp(f->u.str.s + f->u.str.n - 3, ".py", 3));
}

/* Write v; with strip, C++ frames are dropped from "frames" lists. */
static void
write_val(wbuf *w, const pk_val *v, int strip_frames)
{
    switch (v->type) {
    case PK_NONE: putc_(w, 'N'); break;
    case PK_BOOL: putc_(w, v->u.i ? 0x88 : 0x89); break;
    case PK_INT: {
        unsigned char b[9];
        b[0] = 8;
        for (int i = 0; i < 8; i++)
            b[1 + i] = (unsigned char)((uint64_t)v->u.i >> (8 * i));
        putc_(w, 0x8a);
        put(w, b, 9);
        break;
    }
    case PK_FLOAT: {
        uint64_t bits;
        memcpy(&bits, &v->u.f, 8);
        putc_(w, 'G');
        for (int i = 7; i >= 0; i--)
            putc_(w, (int)(bits >> (8 * i)) & 0xff);
        break;
    }
    case PK_STR:
    case PK_BYTES: {
        uint32_t n = (uint32_t)v->u.str.n;
        unsigned char b[4] = {n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, n >> 24};
        putc_(w, v->type == PK_STR ? 'X' : 'B');
        put(w, b, 4);
        put(w, v->u.str.s, n);
        break;
    }
    case PK_LIST:
    case PK_TUPLE:
        putc_(w, '(');
        for (size_t i = 0; i < v->u.seq.n; i++)
            if (!(strip_frames == 2 && cpp_frame(v->u.seq.v[i])))
                write_val(w, v->u.seq.v[i], strip_frames == 2 ? 1 : strip_frames);
        putc_(w, v->type == PK_LIST ? 'l' : 't');
        break;
    case PK_DICT:
        putc_(w, '(');
        for (size_t i = 0; i + 1 < v->u.seq.n; i += 2) {
            write_val(w, v->u.seq.v[i], strip_frames);
            int fr = strip_frames && pk_streq(v->u.seq.v[i], "frames");
            write_val(w, v->u.seq.v[i + 1], fr ? 2 : strip_frames);
        }
        putc_(w, 'd');
        break;
    }
}

static unsigned char *
read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n ? (size_t)n : 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static char *
write_tmp(const char *name, const void *data, size_t n)
{
    static char dir[64];
    if (!dir[0]) {
        strcpy(dir, "/tmp/recomp-import-XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
    }
    char *p = malloc(4200);
    snprintf(p, 4200, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    return p;
}

/* Megatron records Python stacks only: the same step with its C++ frames
 * stripped still has a backward (stack-less allocations between the forward
 * and the optimizer annotation) and the same peak. */
Test(snapshot, python_stacks_only_backward_from_stackless_allocations)
{
    const char *path = fixture("cs336/Wedsonlin/medium_128_training_memory_snapshot.pickle");
    size_t n;
    unsigned char *buf = read_all(path, &n);
    pk_val *root;
    char err[512];
    pk_doc *d = pk_load(buf, n, &root, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    wbuf w = {0};
    put(&w, "\x80\x02", 2);
    write_val(&w, root, 1);
    putc_(&w, '.');
    pk_free(d);
    free(buf);
    char *p = write_tmp("snapshot_3.pickle", w.b, w.n);
    free(w.b);
    am_rank r;
    analyse(p, &r);
    cr_expect_eq(r.rank, 3, "rank from Megatron's snapshot_{rank}.pickle");
    cr_expect(has_warning(&r, "no C++ frames"));
    cr_expect_eq(r.niters, 1);
    cr_expect_eq(r.peak[AM_L_TENSOR].bytes, 7024640512ull);
    cr_expect_eq(r.peak[AM_L_TENSOR].phase, AM_PH_optimizer_state_init);
    cr_expect_eq(count_spans(&r.iters[0], AM_PH_backward), 1);
    uint64_t bwd = 0;
    for (size_t g = 0; g < r.peak[AM_L_TENSOR].ngroups; g++)
        if (r.peak[AM_L_TENSOR].groups[g].phase == AM_PH_backward)
            bwd += r.peak[AM_L_TENSOR].groups[g].bytes;
    cr_expect_gt(bwd, 1000ull * 1024 * 1024, "gradients attributed to backward");
    am_rank_free(&r);
    unlink(p);
    free(p);
}

/* ---- damaged inputs: clear errors naming the file, exit code 2 ---- */

static int
cli(const char *path, char *errbuf, size_t n)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' --json '%s' 2>&1 >/dev/null", RECOMP_ANALYZE_PATH, path);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    size_t got = fread(errbuf, 1, n - 1, f);
    errbuf[got] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
expect_damaged(const char *name, const void *data, size_t n, const char *what)
{
    char *p = write_tmp(name, data, n);
    char err[4096];
    int rc = cli(p, err, sizeof err);
    cr_expect_eq(rc, 2, "%s: exit %d: %s", name, rc, err);
    cr_expect(strstr(err, p) != NULL, "%s: error names the file: %s", name, err);
    cr_expect(strstr(err, "offset") != NULL, "%s: error names the offset: %s", name, err);
    cr_expect(strstr(err, what) != NULL, "%s: want \"%s\" in: %s", name, what, err);
    unlink(p);
    free(p);
}

Test(damaged, truncated_gzip)
{
    const char *path = fixture("hta/df_index_resolver.json.gz");
    size_t n;
    unsigned char *buf = read_all(path, &n);
    expect_damaged("cut.json.gz", buf, n / 2, "gzip");
    free(buf);
}

Test(damaged, malformed_json)
{
    const char *j = "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1,, }]}";
    expect_damaged("bad.json", j, strlen(j), "malformed JSON");
    const char *t = "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": 1";
    expect_damaged("short.json", t, strlen(t), "malformed JSON");
}

Test(damaged, wrong_types_and_absurd_sizes)
{
    const char *a = "{\"traceEvents\": [{\"ph\": \"i\", \"name\": \"[memory]\", \"ts\": 1, "
                    "\"args\": {\"Bytes\": \"many\", \"Device Type\": 1}}]}";
    expect_damaged("types.json", a, strlen(a), "Bytes");
    const char *b = "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\", \"ts\": \"soon\"}]}";
    expect_damaged("ts.json", b, strlen(b), "ts");
    const char *c = "{\"traceEvents\": [{\"ph\": \"i\", \"name\": \"[memory]\", \"ts\": 1, "
                    "\"args\": {\"Bytes\": 1000000000000000000, \"Device Type\": 1}}]}";
    expect_damaged("absurd.json", c, strlen(c), "absurd");
    /* a snapshot whose trace says a block is 2^60 bytes */
    static const unsigned char pk[] =
        "\x80\x02}(X\x08\x00\x00\x00" "segments]X\x0d\x00\x00\x00" "device_traces](](}("
        "X\x06\x00\x00\x00" "actionX\x05\x00\x00\x00" "alloc"
        "X\x04\x00\x00\x00" "addr\x8a\x01\x10"
        "X\x04\x00\x00\x00" "size\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x10"
        "ueeu.";
    expect_damaged("absurd.pickle", pk, sizeof pk - 1, "absurd");
}

Test(damaged, pickle_class_lookup_refused)
{
    /* pickle.dumps(os.system) style: GLOBAL then REDUCE */
    static const char pk[] = "\x80\x02}(X\x08\x00\x00\x00segments]u"
                             "cos\nsystem\nX\x02\x00\x00\x00id\x85R.";
    expect_damaged("evil.pickle", pk, sizeof pk - 1, "refused opcode 0x63 GLOBAL");
    static const char sg[] = "\x80\x04\x8c\x02os\x8c\x06system\x93.";
    expect_damaged("evil2.pickle", sg, sizeof sg - 1, "STACK_GLOBAL");
    static const char un[] = "\x80\x02}\xff.";
    expect_damaged("unknown.pickle", un, sizeof un - 1, "unknown opcode 0xff");
    static const char cut[] = "\x80\x02}X\x08\x00\x00\x00segm";
    expect_damaged("cut.pickle", cut, sizeof cut - 1, "past the end");
}

Test(cli, no_memory_events_exit_0_peak_null_and_baseline_in_json)
{
    const char *path = fixture("hta/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' --json '%s' 2>/dev/null", RECOMP_ANALYZE_PATH, path);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    cr_expect_eq(WEXITSTATUS(pclose(f)), 0);
    cr_expect(strstr(out, "\"peak\":null"), "peak null");
    cr_expect(strstr(out, "\"peak_note\""));
    path = fixture("kineto/worker0.1623143089861.pt.trace.json.gz");
    snprintf(cmd, sizeof cmd, "'%s' --json '%s' 2>/dev/null", RECOMP_ANALYZE_PATH, path);
    f = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    cr_expect_eq(WEXITSTATUS(pclose(f)), 0);
    cr_expect(strstr(out, "baseline: window_start"), "the baseline reaches the JSON document");
}

/* Traces that start mid-training (HTA rank 0: ProfilerStep 101..105, no
 * memory events; worker0: steps 5..10, its first optimizer step allocates
 * nothing): the first optimizer step is not optimizer_state_init, and the
 * steady-state statement says why. */
Test(kineto, mid_run_first_optimizer_step_is_not_state_init)
{
    am_rank r;
    analyse(fixture("hta/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"), &r);
    cr_expect_eq(r.iters[0].number, 101);
    cr_expect_eq(r.opt_init_iteration, -1);
    cr_expect_eq(count_spans_all(&r, AM_PH_optimizer_state_init), 0);
    cr_expect_gt(count_spans_all(&r, AM_PH_optimizer), 0);
    cr_expect_eq(r.steady, 0);
    cr_expect(strstr(r.steady_reason, "unknown: the trace has no memory events"), "%s",
              r.steady_reason);
    am_rank_free(&r);
    analyse(fixture("kineto/worker0.1623143089861.pt.trace.json.gz"), &r);
    cr_expect_eq(r.iters[0].number, 5);
    cr_expect_eq(r.opt_init_iteration, -1);
    cr_expect_eq(count_spans_all(&r, AM_PH_optimizer_state_init), 0);
    cr_expect(r.steady);
    cr_expect(strstr(r.steady_reason, "allocates no state"), "%s", r.steady_reason);
    am_rank_free(&r);
}

/* Report details on the Kineto fixtures: no host known prints "host ?";
 * iterations without memory events say n/a instead of an empty "peak". */
Test(cli, kineto_text_host_and_no_memory_iterations)
{
    const char *path = fixture("hta/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz");
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' --no-advice --ranks all '%s' 2>/dev/null", RECOMP_ANALYZE_PATH, path);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    cr_expect_eq(WEXITSTATUS(pclose(f)), 0);
    cr_expect(strstr(out, "host ?, pid 1102"), "%s", out);
    cr_expect(!strstr(out, "host ,"), "%s", out);
    cr_expect(strstr(out, "iteration 101: 1 microbatch(es), peak n/a (no memory events)\n"), "%s",
              out);
    cr_expect(!strstr(out, "steady state: reached"), "%s", out);
}

/* Memory that existed before the trace is of unknown phase, never an
 * allocation of the program: the cs336 snapshot's segments from before its
 * window (not `init params`, since they hold optimizer state and
 * activations), and the reserved amount df_index_resolver shows at its
 * first memory event (not an 11.90 GiB forward allocation). The iteration
 * line agrees with the overall statement (held from before the iteration). */
Test(snapshot, memory_from_before_the_trace_is_of_unknown_phase)
{
    am_rank r;
    analyse(fixture("cs336/Wedsonlin/medium_128_training_memory_snapshot.pickle"), &r);
    const am_peak *d = &r.peak[AM_L_DEVICE];
    cr_assert(d->known);
    cr_expect_eq(d->iteration, -1);
    cr_expect_eq(d->phase, AM_PH_unknown, "%s", am_phase_name(d->phase));
    cr_expect(d->setter.pretrace);
    cr_expect_eq(d->ngroups, 1);
    cr_expect_eq(d->groups[0].phase, AM_PH_unknown);
    cr_expect_eq(d->groups[0].boundary, AM_BD_unknown);
    cr_expect_eq(r.iters[0].peak[AM_L_DEVICE], d->bytes);
    cr_expect(r.iters[0].peak_carried[AM_L_DEVICE]);
    am_rank_free(&r);
    analyse(fixture("hta/df_index_resolver.json.gz"), &r);
    d = &r.peak[AM_L_DEVICE];
    cr_expect(d->setter.pretrace);
    cr_expect_eq(d->phase, AM_PH_unknown, "%s", am_phase_name(d->phase));
    cr_expect_eq(d->setter.attr.boundary, AM_BD_unknown);
    am_rank_free(&r);
}

/* ---- fuzz seed corpus replay ---- */

static void
replay_dir(const char *dir, int (*fn)(const uint8_t *, size_t))
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        unsigned char *buf = read_all(path, &len);
        fn(buf, len);
        for (size_t cut = 0; cut < len; cut += 37)
            fn(buf, cut);
        free(buf);
        files++;
    }
    closedir(d);
    cr_expect_gt(files, 0);
}

Test(fuzz_corpus, replay_kineto_seeds)
{
    replay_dir(CORPUS_DIR "/kineto", LLVMFuzzerTestOneInputKineto);
}

Test(fuzz_corpus, replay_snapshot_seeds)
{
    replay_dir(CORPUS_DIR "/snapshot", LLVMFuzzerTestOneInputSnapshot);
}

/* Found by adversarial testing: one multi-GiB JSON string inside a small
 * .json.gz made parsing quadratic (hours). Strings over 16 MiB are refused
 * with the offset, at once. */
Test(kineto, huge_string_refused_quickly)
{
    char path[] = "/tmp/rs-kineto-big-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    gzFile g = gzopen(path, "wb1");
    cr_assert(g);
    gzputs(g, "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"");
    static char block[1 << 20];
    memset(block, 'a', sizeof block);
    for (int i = 0; i < 20; i++)
        gzwrite(g, block, sizeof block);
    gzputs(g, "\",\"ts\":1,\"dur\":1,\"pid\":1,\"tid\":1}]}");
    gzclose(g);
    am_source *s = NULL;
    char err[1024] = "";
    int rc = am_source_open(path, &s, err, sizeof err);
    cr_expect_eq(rc, -1, "the file was accepted");
    cr_expect(strstr(err, "longer than 16 MiB") != NULL, "%s", err);
    if (s)
        am_source_close(s);
    unlink(path);
}

/* z gets k bytes at src (flush: Z_NO_FLUSH or Z_FINISH) into out. */
static void
gz_feed(z_stream *z, const void *src, size_t k, int flush, unsigned char **out, size_t *cap,
        size_t *len)
{
    z->next_in = (unsigned char *)src;
    z->avail_in = (uInt)k;
    do {
        if (*cap - *len < 65536)
            *out = realloc(*out, *cap *= 2);
        z->next_out = *out + *len;
        z->avail_out = (uInt)(*cap - *len);
        deflate(z, flush);
        *len = *cap - z->avail_out;
    } while (z->avail_in || (flush == Z_FINISH && z->avail_out == 0));
}

/* A Kineto trace whose event list holds n bytes of JSON whitespace,
 * gzip-compressed (about 1000:1). */
static unsigned char *
gzip_of_blanks(size_t n, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = 1 << 17, len = 0;
    unsigned char *out = malloc(cap), in[65536];
    memset(in, ' ', sizeof in);
    static const char head[] = "{\"traceEvents\": [", tail[] = "]}";
    gz_feed(&z, head, sizeof head - 1, Z_NO_FLUSH, &out, &cap, &len);
    for (size_t done = 0; done < n; done += sizeof in)
        gz_feed(&z, in, n - done < sizeof in ? n - done : sizeof in, Z_NO_FLUSH, &out, &cap,
                &len);
    gz_feed(&z, tail, sizeof tail - 1, Z_FINISH, &out, &cap, &len);
    deflateEnd(&z);
    *out_len = len;
    return out;
}

/* #11: a gzip bomb is refused once it inflates past the limit, with the
 * offset reached and the setting that raises it. */
Test(damaged, gzip_bomb_refused_at_the_decompression_limit)
{
    size_t n;
    unsigned char *gz = gzip_of_blanks((size_t)64 << 20, &n);
    cr_assert(n < ((size_t)1 << 20), "compressed %zu bytes", n);
    setenv("RECOMP_IMPORT_MAX_BYTES", "16M", 1);
    expect_damaged("bomb.json.gz", gz, n, "more than 16777216 bytes after decompression");
    free(gz);
}

/* #11: the import time limit stops an import with a clear error. */
Test(damaged, import_time_limit)
{
    const char *path = fixture("hta/df_index_resolver.json.gz");
    size_t n;
    unsigned char *buf = read_all(path, &n);
    setenv("RECOMP_IMPORT_MAX_SECONDS", "0", 1);
    expect_damaged("slow.json.gz", buf, n, "import stopped after");
    free(buf);
}

/* An import limit set to what is not a size (nan, garbage, 0) or not a
 * number of seconds refuses the import naming the setting and its value; it
 * was read as "unset" (nan, garbage) and the default limit applied silently. */
Test(damaged, import_limit_settings_that_are_not_values_refuse)
{
    size_t n;
    unsigned char *gz = gzip_of_blanks((size_t)1 << 16, &n);
    static const char *const bytes[] = {"nan", "16Q", "-1G", "0"};
    for (size_t i = 0; i < sizeof bytes / sizeof *bytes; i++) {
        char want[64];
        setenv("RECOMP_IMPORT_MAX_BYTES", bytes[i], 1);
        snprintf(want, sizeof want, "RECOMP_IMPORT_MAX_BYTES=%s: ", bytes[i]);
        expect_damaged("limit.json.gz", gz, n, want);
    }
    unsetenv("RECOMP_IMPORT_MAX_BYTES");
    setenv("RECOMP_IMPORT_MAX_SECONDS", "soon", 1);
    expect_damaged("limit.json.gz", gz, n, "RECOMP_IMPORT_MAX_SECONDS=soon: not a number");
    unsetenv("RECOMP_IMPORT_MAX_SECONDS");
    free(gz);
}

/* A Kineto trace of `pairs` [memory] alloc/free pairs inside cpu_op ranges,
 * written in reverse time order in blocks of 1000 events (so the sorted
 * runs interleave, as Kineto's grouping by kind and thread makes them), to
 * a new file under /tmp. */
static void
write_shuffled_kineto(char *path, int pairs)
{
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    gzFile g = gzopen(path, "wb1");
    cr_assert(g);
    gzputs(g, "{\"traceEvents\":[");
    int blocks = (pairs + 999) / 1000;
    for (int b = blocks - 1; b >= 0; b--)
        for (int i = b * 1000; i < (b + 1) * 1000 && i < pairs; i++) {
            long t = 1000 + 10L * i;
            gzprintf(g, "%s{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::empty\",\"pid\":1,"
                        "\"tid\":1,\"ts\":%ld,\"dur\":5,\"args\":{}}",
                     b == blocks - 1 && i == b * 1000 ? "" : ",", t);
            for (int sign = 1; sign >= -1; sign -= 2)
                gzprintf(g, ",{\"ph\":\"i\",\"cat\":\"cpu_instant_event\",\"name\":\"[memory]\","
                            "\"pid\":1,\"tid\":1,\"ts\":%ld,\"s\":\"t\",\"args\":{\"Device Type\":1,"
                            "\"Device Id\":0,\"Addr\":%ld,\"Bytes\":%ld,\"Total Allocated\":%d,"
                            "\"Total Reserved\":1073741824}}",
                         t + (sign > 0 ? 1 : 3), 0x7f0000000000L + i * 512L,
                         sign * (4096L + i % 7 * 512), sign > 0 ? 8192 : 4096);
        }
    gzputs(g, "]}");
    gzclose(g);
}

/* Every event of path in the importer's order, folded into a hash (time,
 * kind, thread, address, size, name); *n = their count. Checks that time
 * never goes back. */
static uint64_t
kineto_event_hash(const char *path, uint64_t *n)
{
    am_source *s = NULL;
    char err[1024] = "";
    cr_assert_eq(am_source_open(path, &s, err, sizeof err), 0, "%s", err);
    am_event ev;
    uint64_t h = 0xcbf29ce484222325ull, last = 0;
    int rc;
    *n = 0;
    while ((rc = s->ops->next(s, &ev)) == 1) {
        cr_assert_geq(ev.t_ns, last, "event %" PRIu64 " goes back in time", *n);
        last = ev.t_ns;
        uint64_t f[6] = {ev.t_ns, ev.kind, ev.tid, ev.addr, ev.size, ev.name_len};
        for (int i = 0; i < 6; i++)
            h = (h ^ f[i]) * 0x100000001b3ull;
        for (uint32_t i = 0; i < ev.name_len; i++)
            h = (h ^ (unsigned char)ev.name[i]) * 0x100000001b3ull;
        (*n)++;
    }
    cr_assert_eq(rc, 0, "%s", s->error);
    am_source_close(s);
    return h;
}

/* #19: the sorted runs stay in memory up to a limit and go to a temporary
 * file past it. The events come out the same, in the same order, whether
 * every run is in memory, every run is in the file, or the limit is crossed
 * in the middle of the parse (runs moved from memory to the file). 100,000
 * pairs make 400,000 records (7 runs of up to 65,536) and 400,001 events
 * (the first Total Reserved adds one segment). */
Test(kineto, runs_in_memory_or_in_the_file_same_events)
{
    char path[] = "/tmp/rs-kineto-runs-XXXXXX";
    write_shuffled_kineto(path, 100000);
    uint64_t n_mem, n_file, n_mid;
    uint64_t h_mem = kineto_event_hash(path, &n_mem);
    am_kineto_set_memory_limit(0);
    uint64_t h_file = kineto_event_hash(path, &n_file);
    am_kineto_set_memory_limit(12u << 20); /* about 2 of the 7 runs */
    uint64_t h_mid = kineto_event_hash(path, &n_mid);
    am_kineto_set_memory_limit(192u << 20);
    unlink(path);
    cr_expect_eq(n_mem, 400001, "%" PRIu64 " events", n_mem);
    cr_expect_eq(n_file, n_mem);
    cr_expect_eq(n_mid, n_mem);
    cr_expect_eq(h_file, h_mem, "the file's order differs from memory's");
    cr_expect_eq(h_mid, h_mem, "crossing the limit mid-parse changed the events");
}

/* #19: the string guard skips to the next quote or backslash instead of
 * stepping byte by byte: an escaped backslash right before a closing quote
 * must close the string (else the 17 MiB of white space after it would
 * count as one string and the file would be refused), and an escaped quote
 * must not. */
Test(kineto, string_guard_follows_escapes)
{
    char path[] = "/tmp/rs-kineto-esc-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    gzFile g = gzopen(path, "wb1");
    cr_assert(g);
    gzputs(g, "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"a\\\\\",\"pid\":1,"
              "\"tid\":1,\"ts\":1,\"dur\":1}");
    static char blank[1 << 20];
    memset(blank, ' ', sizeof blank);
    for (int i = 0; i < 17; i++)
        gzwrite(g, blank, sizeof blank);
    gzputs(g, ",{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"b\\\"\",\"pid\":1,\"tid\":1,\"ts\":2,"
              "\"dur\":1}]}");
    gzclose(g);
    am_source *s = NULL;
    char err[1024] = "";
    int rc = am_source_open(path, &s, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "refused: %s", err);
    am_event ev;
    int names = 0;
    while (s->ops->next(s, &ev) == 1)
        if (ev.kind == AM_EV_RANGE_PUSH) {
            names++;
            cr_expect(ev.name_len == 2 && !memcmp(ev.name, names == 1 ? "a\\" : "b\"", 2),
                      "range %d is %.*s", names, (int)ev.name_len, ev.name);
        }
    cr_expect_eq(names, 2);
    am_source_close(s);
}

/* Writes a .json.gz: head, then pad bytes of fill so that the byte after
 * them is at decompressed offset `at` (pad computed from head's length),
 * then mid, then big MiB of big_fill, then tail. Returns the path (static). */
static const char *
guard_doc(const char *head, char fill, size_t at, const char *mid, int big, char big_fill,
          const char *tail)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/rs-kineto-guard-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    gzFile g = gzopen(path, "wb1");
    cr_assert(g);
    gzputs(g, head);
    static char block[1 << 20];
    cr_assert(at >= strlen(head));
    memset(block, fill, at - strlen(head));
    gzwrite(g, block, (unsigned)(at - strlen(head)));
    gzputs(g, mid);
    memset(block, big_fill, sizeof block);
    for (int i = 0; i < big; i++)
        gzwrite(g, block, sizeof block);
    gzputs(g, tail);
    gzclose(g);
    return path;
}

/* #19: the string guard finds quotes and backslashes eight bytes at a time
 * and counts a string from its first byte's offset. The offset it names is
 * the byte that makes the string too long (its first byte + 16 MiB), as the
 * byte-by-byte count named; an escaped quote whose backslash is the last
 * byte of one 64 KiB parse buffer does not close the string (the escape is
 * carried to the next buffer), and an escaped backslash pair across the
 * same boundary lets the quote after it close the string. */
Test(kineto, string_guard_offset_and_escapes_across_buffers)
{
    const char *head = "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"";
    size_t first = strlen(head); /* the name's first byte */
    char err[1024] = "", want[64];
    am_source *s = NULL;
    /* backslash at 65535, the quote it escapes at 65536: one 17 MiB name */
    const char *path = guard_doc(head, 'x', 65535, "\\\"", 17, 'a', "\"}]}");
    int rc = am_source_open(path, &s, err, sizeof err);
    unlink(path);
    cr_expect_eq(rc, -1, "the file was accepted");
    snprintf(want, sizeof want, "offset %zu: a JSON string longer than 16 MiB",
             first + (16u << 20));
    cr_expect(strstr(err, want) != NULL, "want '%s' in: %s", want, err);
    if (rc == 0)
        am_source_close(s);
    /* "\\" at 65534-65535 then the closing quote at 65536, 17 MiB of white
     * space after it: accepted (the name is cut to 1024 bytes) */
    s = NULL;
    path = guard_doc(head, 'x', 65534, "\\\\\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1}", 17,
                     ' ', "]}");
    rc = am_source_open(path, &s, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "refused: %s", err);
    am_event ev;
    int names = 0;
    while (s->ops->next(s, &ev) == 1)
        if (ev.kind == AM_EV_RANGE_PUSH) {
            names++;
            cr_expect(ev.name_len == 1024 && ev.name[0] == 'x', /* names are cut */
                      "name of %u bytes", (unsigned)ev.name_len);
        }
    cr_expect_eq(names, 1);
    am_source_close(s);
}

/* #19: each run of records is sorted by an index merge sort (insertion-
 * sorted blocks of 32, then merges) instead of qsort. 5,000 complete events
 * in a shuffled file order, many at the same start and end times: the
 * ranges come out in time order, at equal times pops before pushes, outer
 * ranges pushed first and inner ones popped first, and ranges equal in both
 * times pushed in file order and popped in reverse; the same in memory and
 * with the runs in the temporary file (each run written in pieces). */
Test(kineto, run_sort_order_property)
{
    enum { N = 5000 };
    static unsigned ts[N], dur[N];
    char path[] = "/tmp/rs-kineto-sort-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    cr_assert(f);
    srand(19);
    fputs("{\"traceEvents\":[", f);
    for (int i = 0; i < N; i++) {
        ts[i] = (unsigned)(rand() % 40);
        dur[i] = 1 + (unsigned)(rand() % 4);
        fprintf(f, "%s{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"op\",\"pid\":1,\"tid\":1,"
                   "\"ts\":%u,\"dur\":%u}", i ? "," : "", ts[i], dur[i]);
    }
    fputs("]}", f);
    fclose(f);
    unsigned tmin = ts[0];
    for (int i = 1; i < N; i++)
        tmin = ts[i] < tmin ? ts[i] : tmin;
    for (int mode = 0; mode < 2; mode++) {
        am_kineto_set_memory_limit(mode ? 0 : (uint64_t)1 << 30);
        am_source *s = NULL;
        char err[1024] = "";
        int rc = am_source_open(path, &s, err, sizeof err);
        cr_assert_eq(rc, 0, "%s", err);
        am_event ev;
        uint64_t last_t = 0;
        int last_kind = -1, last_i = -1, n = 0, bad = 0;
        while (s->ops->next(s, &ev) == 1) {
            if (ev.kind != AM_EV_RANGE_PUSH && ev.kind != AM_EV_RANGE_POP)
                continue;
            int i = (int)ev.domain_id - 1; /* the span id is the event's file order */
            cr_assert(i >= 0 && i < N, "span %u", (unsigned)ev.domain_id);
            int push = ev.kind == AM_EV_RANGE_PUSH, ok = 1;
            if (n && ev.t_ns < last_t) {
                ok = 0; /* time goes back */
            } else if (n && ev.t_ns == last_t && last_kind == AM_EV_RANGE_PUSH && !push) {
                ok = 0; /* a pop after a push at the same time */
            } else if (n && ev.t_ns == last_t && last_kind == (int)ev.kind) {
                unsigned ea = ts[last_i] + dur[last_i], eb = ts[i] + dur[i];
                if (push) /* outer (later end) first, then file order */
                    ok = ea > eb || (ea == eb && last_i < i);
                else      /* inner (later start) first, then reverse file order */
                    ok = ts[last_i] > ts[i] || (ts[last_i] == ts[i] && last_i > i);
            }
            cr_expect(ok, "mode %d: event %d (%s of range %d) after range %d", mode, n,
                      push ? "push" : "pop", i, last_i);
            bad += !ok;
            cr_expect_eq(ev.t_ns, (uint64_t)((push ? ts[i] : ts[i] + dur[i]) - tmin) * 1000,
                         "event %d", n);
            last_t = ev.t_ns;
            last_kind = (int)ev.kind;
            last_i = i;
            n++;
            if (bad > 3)
                break;
        }
        cr_expect_eq(n, 2 * N, "mode %d", mode);
        am_source_close(s);
    }
    am_kineto_set_memory_limit((uint64_t)192 << 20);
    unlink(path);
}
