/* Every field a summary must carry comes back (analyzer/report/summary.c;
 * docs/summary-format.md), so a field added to the advisor's configuration
 * (adv_cfg), the op trace's scalars (adv_trace) or the analysed rank
 * (am_rank) and forgotten by the summary fails here, not in a user's merge
 * (issue 14: a 5.0 summary of an uneven pipeline gave another verdict than
 * its traces, because adv_cfg's placement fields were not carried).
 *
 * Each struct is filled with a byte pattern (0x5a) in every byte, then the
 * fields that cannot take it are set by name: pointers and the counts of
 * arrays (their contents are covered by tests/summary/test_summary.py),
 * enumerations (a summary refuses values outside the vocabulary), char
 * arrays (NUL-terminated strings of their full length). Written as a
 * one-rank summary and read back, the struct must equal the original byte for
 * byte once padding is cleared (__builtin_clear_padding) and the fields a
 * summary does not carry BY DESIGN, each listed below with why, are zeroed
 * in both. A new field is therefore either carried or listed here. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "summary.h"

#define PATTERN 0x5a

/* a char array as a string of its full length */
#define FILL_STR(a) (memset((a), 'a', sizeof(a) - 1), (a)[sizeof(a) - 1] = 0)

static void
fill_cfg(adv_cfg *c)
{
    memset(c, PATTERN, sizeof *c);
#define X(f) FILL_STR(c->f);
    AM_SUMMARY_CFG_STRS(X)
#undef X
}

/* an am_peak whose pointers are NULL and enumerations valid */
static void
fix_peak(am_peak *p)
{
    p->reason = NULL;
    p->groups = NULL;
    p->ngroups = 0;
    p->blocks = NULL;   /* --peak-blocks: merge refuses it (cli.c) */
    p->nblocks = 0;
    p->phase = p->program_phase = 1;
    p->setter.attr.phase = p->setter.attr.boundary = 1;
    p->setter.attr.first = 1;
    p->setter.lib = 1;
    FILL_STR(p->setter.where);
    FILL_STR(p->setter.python);
}

static void
fill_rank(am_rank *r, am_source *src)
{
    memset(r, PATTERN, sizeof *r);
    r->src = src;
    r->path = NULL;
    r->tensor_na = NULL;
    for (int l = 0; l < AM_NLEVELS; l++) {
        fix_peak(&r->peak[l]);
        fix_peak(&r->iter_peak[l]);
    }
    r->iters = NULL;
    r->niters = 0;
    r->steady_reason = NULL;
    r->oom = NULL;
    r->noom_fatal = 7;
    r->retries = NULL;
    r->nretries = 0;
    /* 6.1: the caught OOMs, appended after the last rank */
    static am_retry caught[2] = {{1234567, (uint64_t)100 << 30, -1, AM_PH_init},
                                 {7654321, (uint64_t)79 << 30, 3, AM_PH_forward}};
    r->caught = caught;
    r->ncaught = 2;
    r->sites = NULL;
    r->nsites = r->capsites = 0;
    r->site_hash = NULL;
    r->site_hcap = 0;
    r->stage_source = NULL;
    r->coverage.status = NULL;
    FILL_STR(r->coverage.summary);
    FILL_STR(r->coverage.meaning);
    r->notes = NULL;
    r->nnotes = 0;
}

/* the source's metadata: every scalar the pattern, strings short, the
 * string lists empty, exit_via and exit_sealed valid */
static void
fill_meta(am_meta *m)
{
    memset(m, PATTERN, sizeof *m);
    m->path = "rank0.rsshim";
    m->format = "recompshim trace v1.2";
    m->mode = "default";
    m->argc = m->nenv = m->nwarnings = 0;
    m->argv = m->env = m->warnings = NULL;
    FILL_STR(m->host);
    FILL_STR(m->torchelastic_run_id);
    FILL_STR(m->slurm_job_id);
    FILL_STR(m->master);
    FILL_STR(m->run_id);
    m->exit_via = 2;          /* _Exit */
    m->exit_sealed = 1;
}

static void
fill_part(adv_rank_part *p)
{
    memset(p, PATTERN, sizeof *p);
    adv_trace *t = &p->scal;
    /* the op trace's arrays: a part holds only its scalars */
    t->a = NULL;
    t->ops = NULL;
    t->layers = NULL;
    t->insts = NULL;
    t->py = NULL;
    t->xr = NULL;
    t->abwd = NULL;
    t->oom_phase = 1;
    t->oom_lib = 1;
    t->oom_boundary = 1;
    t->oom_load = AM_PYLOAD_COPY;
    p->findings = NULL;
    p->nfindings = 0;
    p->cf = NULL;
    p->ncf = 0;
    memset(p->label_seen, 1, sizeof p->label_seen); /* 0 or 1 */
}

/* The fields a summary does not carry by design, zeroed in both. */
static void
drop_uncarried_part(adv_rank_part *p)
{
    adv_trace *t = &p->scal;
    /* the op trace itself (allocations, ops, instances, Python frames, attention
     * backward calls) and its array bookkeeping: the per-rank part replaces it by
     * the counterfactual table; nlayers is kept as a count */
    t->na = t->capa = t->nops = t->capops = t->caplayers = 0;
    t->ninsts = t->capinsts = t->npyf = t->cappyf = t->nxr = t->nabwd = t->capabwd = 0;
    t->xr_bytes = 0;          /* the undone trace's: the part's undo_xr_bytes */
    t->undo_by_size = 0;      /* the undone trace's: the part's undo_by_size */
    t->departs = 0;           /* the undone trace's, set by the verdict after the undo: the
                               * part's cf table carries the steps computed from it */
    p->missing = 0;           /* set by merge */
}

/* The first differing byte of two objects of n bytes, or n. */
static size_t
first_diff(const void *a, const void *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (((const unsigned char *)a)[k] != ((const unsigned char *)b)[k])
            return k;
    return n;
}

/* x and y (of type T) equal once their padding is cleared */
#define SAME_BYTES(T, x, y, what)                                                           \
    do {                                                                                    \
        T a_ = (x), b_ = (y);                                                               \
        __builtin_clear_padding(&a_);                                                       \
        __builtin_clear_padding(&b_);                                                       \
        size_t k_ = first_diff(&a_, &b_, sizeof a_);                                        \
        cr_expect(k_ == sizeof a_, "%s: byte %zu of %zu does not come back from a summary: " \
                  "a field is missing from summary.c's visitor, or from this test's list "  \
                  "of what a summary does not carry", what, k_, sizeof a_);                 \
    } while (0)

static char *
tmp_path(void)
{
    static char path[512];
    const char *d = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/rssum-rt-%d.rssum", d && *d ? d : "/tmp", (int)getpid());
    return path;
}

Test(summary_roundtrip, every_field_comes_back)
{
    static adv_cfg cfg;
    static am_rank rank;
    static adv_rank_part part;
    am_source src;
    memset(&src, 0, sizeof src);
    fill_meta(&src.meta);
    fill_cfg(&cfg);
    fill_rank(&rank, &src);
    fill_part(&part);
    am_job job;
    memset(&job, 0, sizeof job);
    job.ranks = &rank;
    job.nranks = 1;
    am_summary_opts o;
    memset(&o, 0, sizeof o);
    o.iteration = -1;
    o.advice = 1;
    char err[1024] = "";
    const char *path = tmp_path();
    cr_assert_eq(am_summary_write(path, &job, &o, &cfg, &part, err, sizeof err), 0, "%s", err);
    static am_summary s;
    int rc = am_summary_read(path, &s, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(s.nranks, 1);

    SAME_BYTES(adv_cfg, cfg, s.cfg, "adv_cfg (AM_SUMMARY_CFG_INTS/STRS, summary.h)");

    /* am_meta: its strings by value, then every other byte (6.0 did not
     * carry ppid, so a merge could not set a forked child apart) */
    am_meta want = src.meta, have = s.ranks[0].src->meta;
    cr_expect_str_eq(have.path, want.path);
    cr_expect_str_eq(have.format, want.format);
    cr_expect_str_eq(have.mode, want.mode);
    want.path = want.format = want.mode = have.path = have.format = have.mode = NULL;
    SAME_BYTES(am_meta, want, have, "am_meta (v_meta, v_meta_61 in summary.c)");

    /* am_rank: its peaks, coverage and placement byte for byte; GCC 12.2's
     * __builtin_clear_padding leaves the padding after am_rank's first array of
     * structs set, so the rank's own scalars are compared one by one (JSON of
     * every scenario: invariant 32 of tests/advisor/test_properties.py) */
    am_rank *got = &s.ranks[0];
    for (int l = 0; l < AM_NLEVELS; l++) {
        SAME_BYTES(am_peak, rank.peak[l], got->peak[l], "am_rank.peak");
        SAME_BYTES(am_peak, rank.iter_peak[l], got->iter_peak[l], "am_rank.iter_peak");
    }
    SAME_BYTES(am_coverage, rank.coverage, got->coverage, "am_rank.coverage");
    SAME_BYTES(am_placement, rank.place, got->place, "am_rank.place");
#define SAME(f) cr_expect(memcmp(&rank.f, &got->f, sizeof rank.f) == 0, "am_rank." #f);
    SAME(rank) SAME(levels) SAME(iter_selected) SAME(init_end_ns) SAME(steady)
    SAME(opt_init_iteration) SAME(opt_state_preexisting) SAME(first_opt_iteration)
    SAME(opt_inferred) SAME(noom_fatal) SAME(nmeminfo) SAME(meminfo_total) SAME(min_free)
    SAME(max_other) SAME(layer_global) SAME(microbatches) SAME(first_fwd_offset) SAME(pp)
    SAME(stage) SAME(layers_per_stage) SAME(layers_per_chunk) SAME(nevents) SAME(nallocs)
    SAME(nfrees) SAME(nunmatched_frees) SAME(ncollectives) SAME(has_step_markers)
    SAME(layer_signal) SAME(by_site) SAME(device_lower_bound) SAME(ncaught)
#undef SAME
    for (size_t i = 0; i < rank.ncaught && i < got->ncaught; i++)
        cr_expect(got->caught[i].t_ns == rank.caught[i].t_ns &&
                      got->caught[i].size == rank.caught[i].size &&
                      got->caught[i].iteration == rank.caught[i].iteration &&
                      got->caught[i].phase == rank.caught[i].phase,
                  "am_rank.caught[%zu]", i);

    adv_rank_part got_part = s.parts[0];
    drop_uncarried_part(&part);
    drop_uncarried_part(&got_part);
    SAME_BYTES(adv_rank_part, part, got_part, "adv_rank_part (its adv_trace scalars: v_scal)");
    am_summary_free(&s);
}

/* Summary format 6.1 stores each rank's ppid and exit after the last rank;
 * a 6.0 summary (nothing there) reads with them unknown, as before, and a
 * later minor's bytes after them are ignored, while bytes after them in a
 * 6.1 summary are damage. */
Test(summary_roundtrip, minor_0_reads_and_later_minors_append)
{
    static am_rank rank;
    static am_summary s;
    am_source src;
    memset(&src, 0, sizeof src);
    fill_meta(&src.meta);
    src.meta.ppid = 77;
    src.meta.exit_via = 1;
    src.meta.exit_status = 3;
    fill_rank(&rank, &src);
    am_job job;
    memset(&job, 0, sizeof job);
    job.ranks = &rank;
    job.nranks = 1;
    am_summary_opts o;
    memset(&o, 0, sizeof o);
    o.iteration = -1;
    char err[1024] = "";
    const char *path = tmp_path();
    cr_assert_eq(am_summary_write(path, &job, &o, NULL, NULL, err, sizeof err), 0, "%s", err);
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    static unsigned char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    unlink(path);
    cr_assert_eq(am_summary_parse("s61", buf, len, &s, err, sizeof err), 0, "%s", err);
    cr_expect(s.ranks[0].src->meta.ppid == 77 && s.ranks[0].src->meta.exit_via == 1 &&
              s.ranks[0].src->meta.exit_status == 3 && s.ranks[0].src->meta.exit_sealed == 1);
    am_summary_free(&s);

    /* the payload as stored (flags 0) without what 6.1 appends after the last
     * rank: a 6.0 summary. 6.1: the rank's meta (13 bytes), then its caught
     * OOMs (a u64 count, 21 bytes each) */
    const size_t tail61 = 13 + 8 + 21 * rank.ncaught;
    uint64_t stored = 0;
    for (int b = 0; b < 8; b++)
        stored |= (uint64_t)buf[AM_SUMMARY_HEADER + b] << (8 * b);
    uLongf raw = (uLongf)stored;
    static unsigned char p[(1 << 20) + 64];
    memcpy(p, buf, AM_SUMMARY_HEADER);
    cr_assert_eq(uncompress(p + AM_SUMMARY_HEADER, &raw, buf + 40,
                            (uLong)(len - 40)), Z_OK);
    size_t plen = (size_t)raw;
    struct {
        unsigned minor;
        size_t cut;
        int extra, ok;
    } k[] = {{0, tail61, 0, 1}, {1, 0, 0, 1}, {1, 0, 8, 0}, {2, 0, 8, 1}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        size_t n = plen - k[i].cut + (size_t)k[i].extra;
        memset(p + AM_SUMMARY_HEADER + plen - k[i].cut, 0xab, (size_t)k[i].extra);
        p[10] = (unsigned char)k[i].minor;
        p[11] = 0;
        memset(p + 12, 0, 4); /* stored as it is */
        for (int b = 0; b < 8; b++)
            p[16 + b] = (unsigned char)((uint64_t)n >> (8 * b));
        uint64_t h = 1469598103934665603ull; /* summary.c's fnv64 */
        for (size_t b = 0; b < n; b++)
            h = (h ^ p[AM_SUMMARY_HEADER + b]) * 1099511628211ull;
        for (int b = 0; b < 8; b++)
            p[24 + b] = (unsigned char)(h >> (8 * b));
        int rc = am_summary_parse("sx", p, AM_SUMMARY_HEADER + n, &s, err, sizeof err);
        cr_expect_eq(rc, k[i].ok ? 0 : -1, "minor %u, %d bytes more: %s", k[i].minor,
                     k[i].extra, err);
        if (rc == 0) {
            const am_meta *m = &s.ranks[0].src->meta;
            cr_expect(k[i].minor ? m->ppid == 77 && m->exit_via == 1
                                 : m->ppid == 0 && m->exit_via == 0 && !m->exit_sealed,
                      "minor %u: ppid %d exit_via %d", k[i].minor, m->ppid, m->exit_via);
            am_summary_free(&s);
        } else {
            cr_expect(strstr(err, "bytes after the last rank"), "%s", err);
        }
    }
}

/* A 5.x summary is refused with what it lacks, not read into another verdict. */
Test(summary_roundtrip, major_5_refused_with_the_reason)
{
    unsigned char h[AM_SUMMARY_HEADER] = "RSSUMMRY";
    h[8] = 5;
    char err[1024] = "";
    am_summary s;
    cr_assert_eq(am_summary_parse("old.rssum", h, sizeof h, &s, err, sizeof err), -1);
    cr_expect(strstr(err, "summary format 5.0") && strstr(err, "summarize again") &&
                  strstr(err, "--decoder-first/last-pipeline-num-layers") &&
                  strstr(err, "hybrid layer pattern"),
              "%s", err);
}
