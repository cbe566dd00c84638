/* test_merge.c: time-order merge of per-thread chunk streams, and reading
 * a trace that was not closed (killed or still running). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_dump.h"
#include "trace_builder.h"
#include "trace_reader.h"

#define T0 1000000ull

static void
put_set_device(tb_trace *t, uint32_t c, uint64_t rel_ns, int dev)
{
    rs_rec_set_device s = {.h = {.kind = RS_REC_SET_DEVICE, .t_ns = T0 + rel_ns},
                           .device = dev};
    tb_put(t, c, &s, sizeof s, NULL, 0);
}

/* GIVEN three threads whose chunks interleave in the file:
 *   chunk 0 tid 1: t=1,4,7     chunk 1 tid 2: t=2,5,8    chunk 2 tid 3: t=3,6,9
 *   chunk 3 tid 1: t=10,13     chunk 4 tid 2: t=11       chunk 5 tid 3: t=10,12
 * `dev` carries a sequence tag (chunk*10 + position) to check tie order. */
static tb_trace *
build_three_threads(void)
{
    static const struct { uint32_t tid; uint64_t t[3]; int n; } k_chunks[] = {
        {1, {1, 4, 7}, 3}, {2, {2, 5, 8}, 3}, {3, {3, 6, 9}, 3},
        {1, {10, 13}, 2},  {2, {11}, 1},      {3, {10, 12}, 2},
    };
    tb_trace *t = tb_new(0, 6);
    for (int i = 0; i < 6; i++) {
        uint32_t c = tb_chunk(t, k_chunks[i].tid);
        for (int j = 0; j < k_chunks[i].n; j++)
            put_set_device(t, c, k_chunks[i].t[j], i * 10 + j);
        if (i < 3)
            tb_seal(t, c);
    }
    return t;
}

Test(merge, three_threads_in_time_order)
{
    tb_trace *t = build_three_threads();
    size_t len = tb_finish(t, 1);
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(t->buf, len, "merge", &r, err, sizeof err), 0, "%s", err);

    /* THEN: by t; the tie at t=10 goes to the lower chunk index (3 before 5) */
    static const struct { int64_t t; uint32_t tid; int tag; } want[] = {
        {1, 1, 0},   {2, 2, 10},  {3, 3, 20},  {4, 1, 1},   {5, 2, 11},  {6, 3, 21},
        {7, 1, 2},   {8, 2, 12},  {9, 3, 22},  {10, 1, 30}, {10, 3, 50}, {11, 2, 40},
        {12, 3, 51}, {13, 1, 31},
    };
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    size_t n = 0;
    while (rs_iter_next(it, &ev) > 0) {
        cr_assert_lt(n, sizeof want / sizeof want[0]);
        const rs_rec_set_device *s = (const void *)ev.rec;
        cr_assert_eq(rs_reader_rel_ns(r, ev.rec->t_ns), want[n].t, "event %zu", n);
        cr_assert_eq(ev.tid, want[n].tid, "event %zu", n);
        cr_assert_eq(s->device, want[n].tag, "event %zu", n);
        cr_assert_eq(ev.chunk_index, (uint32_t)want[n].tag / 10);
        cr_assert_eq(ev.record_index, (uint32_t)want[n].tag % 10);
        cr_assert_eq(ev.offset, tb_chunk_offset(t, ev.chunk_index) + sizeof(rs_chunk_header) +
                                    ev.record_index * sizeof(rs_rec_set_device));
        n++;
    }
    cr_assert_eq(n, sizeof want / sizeof want[0]);
    rs_iter_free(it);
    rs_reader_close(r);
    tb_free(t);
}

Test(merge, recomp_dump_prints_merged_order)
{
    tb_trace *t = build_three_threads();
    size_t len = tb_finish(t, 1);
    char *path = tb_tmpname();
    cr_assert_eq(tb_write(t, path, len), 0);
    char *out, *err;
    cr_assert_eq(run_dump(RECOMP_DUMP_PATH, path, &out, &err), 0, "%s", err);
    const char *body = strstr(out, "\nSET_DEVICE");
    cr_assert_not_null(body);
    static const char first[] = "SET_DEVICE t=1 tid=1 dev=0 status=0\n"
                                "SET_DEVICE t=2 tid=2 dev=10 status=0\n"
                                "SET_DEVICE t=3 tid=3 dev=20 status=0\n";
    cr_assert(!strncmp(body + 1, first, sizeof first - 1), "%s", body);
    cr_assert(strstr(out, "SET_DEVICE t=10 tid=1 dev=30 status=0\n"
                          "SET_DEVICE t=10 tid=3 dev=50 status=0\n"
                          "SET_DEVICE t=11 tid=2 dev=40 status=0\n"));
    cr_assert(strstr(out, " chunks=6\n"));
    free(out);
    free(err);
    unlink(path);
    free(path);
    tb_free(t);
}

/* GIVEN a killed process's file: not closed, its last chunks unsealed, one
 * chunk claimed but never initialised, and a chunk that is not published
 * yet (beyond chunks_published). */
static tb_trace *
build_killed(size_t *len)
{
    tb_trace *t = tb_new(0, 5);
    uint32_t a = tb_chunk(t, 7);
    put_set_device(t, a, 1, 0);
    put_set_device(t, a, 2, 1);
    tb_seal(t, a);
    uint32_t b = tb_chunk(t, 8);
    put_set_device(t, b, 3, 2);
    uint32_t z = tb_chunk(t, 9);
    memset(tb_chunk_header(t, z), 0, sizeof(rs_chunk_header)); /* claimed, magic 0 */
    uint32_t c = tb_chunk(t, 7);
    put_set_device(t, c, 4, 3);
    tb_chunk_header(t, c)->record_count = 0; /* used published, count not yet */
    *len = tb_finish(t, 0);
    uint32_t d = tb_chunk(t, 7); /* initialised but not published */
    put_set_device(t, d, 5, 4);
    return t;
}

Test(merge, unclosed_trace_reads_to_last_published_record)
{
    size_t len;
    tb_trace *t = build_killed(&len);
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(t->buf, len + RS_CHUNK_SIZE, "killed", &r, err,
                                    sizeof err), 0, "%s", err);
    cr_assert_not(rs_reader_closed(r));
    cr_assert_eq(rs_reader_warning_count(r), 3);
    cr_assert(strstr(rs_reader_warning(r, 0), "killed: not closed: the process was killed or "
                                               "is still running; read to its last published "
                                               "record"));
    cr_assert(strstr(rs_reader_warning(r, 1), "claimed but not initialised"));
    /* the records read without a checksum are counted (#11) */
    cr_assert(strstr(rs_reader_warning(r, 2), "unsealed chunk(s)") &&
                  strstr(rs_reader_warning(r, 2), "record(s) were each checked"),
              "%s", rs_reader_warning(r, 2));
    cr_assert_eq(rs_reader_chunk_count(r), 3);
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    int n = 0;
    while (rs_iter_next(it, &ev) > 0) {
        cr_assert_eq(((const rs_rec_set_device *)(const void *)ev.rec)->device, n);
        n++;
    }
    cr_assert_eq(n, 4);
    rs_iter_free(it);
    rs_reader_close(r);

    /* and recomp-dump: exit 0, the warning on stderr, closed=no */
    char *path = tb_tmpname();
    cr_assert_eq(tb_write(t, path, len + RS_CHUNK_SIZE), 0);
    char *out, *e;
    cr_assert_eq(run_dump(RECOMP_DUMP_PATH, path, &out, &e), 0, "%s", e);
    cr_assert(strstr(e, "recomp-dump: warning: "), "%s", e);
    cr_assert(strstr(e, ": not closed: the process was killed or is still running"), "%s", e);
    cr_assert(strstr(out, "closed=no"));
    cr_assert(strstr(out, "SET_DEVICE t=4 tid=7 dev=3 status=0\n"));
    cr_assert_null(strstr(out, "dev=4 "));
    free(out);
    free(e);
    unlink(path);
    free(path);
    tb_free(t);
}

Test(merge, empty_trace)
{
    tb_trace *t = tb_new(0, 1);
    size_t len = tb_finish(t, 1);
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(t->buf, len, "empty", &r, err, sizeof err), 0, "%s", err);
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    cr_assert_eq(rs_iter_next(it, &ev), 0);
    rs_iter_free(it);
    rs_reader_close(r);
    tb_free(t);
}
