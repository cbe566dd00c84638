/* test_compact.c: compact ALLOC/FREE records (formats 1.4 and 1.5: packed
 * ALLOC_P/FREE_P, with ALLOC_C/FREE_C for pointers past 2^48 and sizes
 * past 2^32) written by the
 * shim's tracker core and read back with the real reader.
 *
 * GIVEN a stream of allocations and frees over more call sites than the
 * writer's site table holds (16 per chunk), with failed frees, times that go back and
 * gaps wider than a 32-bit delta, spread over several chunks, WHEN it is
 * written with compact records on (the default) or off
 * (RECOMPSHIM_COMPACT=0), THEN the reader hands out exactly the ALLOC and
 * FREE records that were written, field for field, and the compact file
 * takes about half the chunks. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "record.h"
#include "trace_reader.h"
#include "writer.h"

/* The writer calls these NVTX hooks; the NVTX module is not linked here. */
void rs_nvtx_replay_definitions(void) {}
void rs_nvtx_thread_attach(void) {}
void rs_nvtx_atfork_prepare(void) {}
void rs_nvtx_atfork_prepare_leaf(void) {}
void rs_nvtx_atfork_parent(void) {}
void rs_nvtx_atfork_child(void) {}
void rs_nvtx_setup_env(void) {}
const char *rs_nvtx_foreign_path(void) { return NULL; }

static char g_dir[256];
static char g_path[1200]; /* the trace open_trace opened */

static void
setup_env(const char *compact)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/rs-compact-XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    setenv("RECOMPSHIM_OUT", g_dir, 1);
    unsetenv("RECOMPSHIM_RUN_ID");
    unsetenv("RECOMPSHIM_MAX_BYTES");
    unsetenv("RECOMPSHIM_WINDOW");
    setenv("RECOMPSHIM_MEMINFO_MS", "0", 1);
    if (compact)
        setenv("RECOMPSHIM_COMPACT", compact, 1);
    else
        unsetenv("RECOMPSHIM_COMPACT");
    rs_config_load();
    rs_writer_init();
    cr_assert_eq(rs_trace_open(), 1);
}

static rs_reader *
open_trace(void)
{
    char run[600] = "", path[1200] = "", err[512];
    DIR *d = opendir(g_dir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            snprintf(run, sizeof run, "%s/%s", g_dir, e->d_name);
    closedir(d);
    d = opendir(run);
    cr_assert_not_null(d, "no run directory under %s", g_dir);
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".rstrace"))
            snprintf(path, sizeof path, "%s/%s", run, e->d_name);
    closedir(d);
    rs_reader *r = NULL;
    cr_assert_eq(rs_reader_open(path, &r, err, sizeof err), RS_READ_OK, "reader: %s", err);
    snprintf(g_path, sizeof g_path, "%s", path);
    return r;
}

/* Count the records of each kind as they lie in the file (the reader hands
 * compact ones out expanded): n[kind] for kinds below 64. */
static void
raw_kind_counts(const char *path, uint64_t n[64])
{
    memset(n, 0, 64 * sizeof *n);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    rs_file_header fh;
    cr_assert_eq(fread(&fh, sizeof fh, 1, f), 1);
    unsigned char *c = malloc(fh.chunk_size);
    cr_assert_not_null(c);
    for (uint32_t k = 0; k < fh.chunks_published; k++) {
        cr_assert_eq(fseek(f, (long)(fh.header_size + (uint64_t)k * fh.chunk_size), SEEK_SET), 0);
        cr_assert_eq(fread(c, fh.chunk_size, 1, f), 1);
        const rs_chunk_header *ch = (const void *)c;
        for (uint32_t pos = 0; pos < ch->used;) {
            const rs_record_header *h = (const void *)(c + sizeof *ch + pos);
            n[h->kind < 64 ? h->kind : 0]++;
            pos += h->size;
        }
    }
    free(c);
    fclose(f);
}

/* One ALLOC or FREE as written. Allocations take their time from the
 * clock: [t_lo, t_hi] brackets it; frees are given theirs (t_lo == t_hi). */
typedef struct want {
    int is_alloc;
    uint64_t ptr, size, stream, caller, t_lo, t_hi;
    uint16_t api;
    uint8_t mem;
    int8_t device;
    int status;
} want;

#define NOPS 60000
#define NSITES 40 /* more than the writer's 16-slot table: evictions */

static uint64_t g_rng = 88172645463325252ull;
static uint32_t
rnd(uint32_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

/* Write NOPS records and return what was written. */
static want *
write_ops(void)
{
    want *w = calloc(NOPS, sizeof *w);
    cr_assert_not_null(w);
    uint64_t last_free_t = rs_now_ns();
    for (int i = 0; i < NOPS; i++) {
        uint32_t k = rnd(NSITES);
        want *x = &w[i];
        x->is_alloc = rnd(2);
        /* pointers past 48 bits (and the largest below) and sizes past
         * 32 bits (and the largest below) take 1.4's ALLOC_C/FREE_C */
        uint32_t wide = rnd(16);
        x->ptr = wide == 0   ? 0xffff800000000000ull + (uint64_t)i * 512
                 : wide == 1 ? RS_PACKED_PTR_MASK - (uint64_t)i
                 : wide == 2 ? RS_PACKED_PTR_MASK + 1 + (uint64_t)i
                             : 0x7f0000000000ull + (uint64_t)i * 512;
        x->caller = 0x400000 + k * 16;
        x->stream = k % 3 ? 0x5500 + k : 0;
        x->api = k % 2 ? RS_API_cudaMallocAsync : RS_API_cudaMalloc;
        x->mem = (uint8_t)(k % 3);
        x->device = (int8_t)(k % 5) - 1; /* -1 .. 3 */
        t_rs.device = x->device;
        if (x->is_alloc) {
            uint32_t big = rnd(12);
            x->size = big == 0   ? (1ull << 32) + rnd(1u << 20)
                      : big == 1 ? UINT32_MAX
                                 : 512 + rnd(1u << 20);
            x->t_lo = rs_now_ns();
            rs_record_alloc(x->api, x->mem, x->ptr, x->size, x->stream, x->caller, 0);
            x->t_hi = rs_now_ns();
            continue;
        }
        /* frees: mostly a little later, sometimes earlier than the chunk's
         * previous record, sometimes more than 2^32 ns later; some fail */
        uint32_t pick = rnd(20);
        uint64_t t = last_free_t + 1000;
        if (pick == 0)
            t = last_free_t - 5000;
        else if (pick == 1)
            t = last_free_t + 5000000000ull;
        last_free_t = t;
        x->t_lo = x->t_hi = t;
        x->status = pick == 2 ? 2 : 0;
        rs_record_free_at(t, x->api, x->mem, x->ptr, x->stream, x->caller, x->status);
    }
    rs_writer_close();
    return w;
}

#define SITE_SLOTS 16 /* the writer's site table (shim/record.c) */

/* A chunk names each site at most once, and at most SITE_SLOTS of them:
 * past that its records are full ones (no site thrashes another out). */
static void
check_site(const rs_event *ev, uint32_t *chunk, rs_rec_site *seen, int *nseen)
{
    const rs_rec_site *st = (const void *)ev->rec;
    if (ev->chunk_index != *chunk) {
        *chunk = ev->chunk_index;
        *nseen = 0;
    }
    for (int k = 0; k < *nseen; k++)
        cr_assert(!(seen[k].caller == st->caller && seen[k].stream == st->stream &&
                    seen[k].api == st->api && seen[k].mem == st->mem &&
                    seen[k].device == st->device),
                  "chunk %u names site (caller 0x%llx) twice", *chunk,
                  (unsigned long long)st->caller);
    cr_assert_lt(*nseen, SITE_SLOTS, "chunk %u names more than %d sites", *chunk, SITE_SLOTS);
    seen[(*nseen)++] = *st;
}

/* The reader's ALLOC/FREE records, in file order (one thread: the merge
 * keeps a stream's order), against what was written. Returns SITE count. */
static uint64_t
check_read(rs_reader *r, const want *w)
{
    rs_iter *it = rs_iter_new(r);
    cr_assert_not_null(it);
    rs_event ev;
    uint64_t sites = 0;
    int i = 0, nseen = 0;
    uint32_t chunk = UINT32_MAX;
    rs_rec_site seen[SITE_SLOTS];
    while (rs_iter_next(it, &ev) == 1) {
        const rs_record_header *h = ev.rec;
        if (h->kind == RS_REC_SITE) {
            check_site(&ev, &chunk, seen, &nseen);
            sites++;
        }
        if (h->kind != RS_REC_ALLOC && h->kind != RS_REC_FREE)
            continue;
        cr_assert_lt(i, NOPS);
        const want *x = &w[i];
        cr_assert_eq(h->kind == RS_REC_ALLOC, x->is_alloc, "record %d kind", i);
        cr_assert(h->t_ns >= x->t_lo && h->t_ns <= x->t_hi, "record %d time %llu not in [%llu, %llu]",
                  i, (unsigned long long)h->t_ns, (unsigned long long)x->t_lo,
                  (unsigned long long)x->t_hi);
        if (x->is_alloc) {
            const rs_rec_alloc *a = (const void *)h;
            cr_assert_eq(a->h.size, sizeof *a);
            cr_assert_eq(a->ptr, x->ptr, "record %d", i);
            cr_assert_eq(a->size, x->size, "record %d", i);
            cr_assert_eq(a->stream, x->stream, "record %d", i);
            cr_assert_eq(a->caller, x->caller, "record %d", i);
            cr_assert_eq(a->api, x->api, "record %d", i);
            cr_assert_eq(a->mem, x->mem, "record %d", i);
            cr_assert_eq(a->device, x->device, "record %d", i);
            cr_assert_eq(a->status, 0, "record %d", i);
            cr_assert_eq(a->h.aux, 0, "record %d", i);
        } else {
            const rs_rec_free *f = (const void *)h;
            cr_assert_eq(f->h.size, sizeof *f);
            cr_assert_eq(f->ptr, x->ptr, "record %d", i);
            cr_assert_eq(f->stream, x->stream, "record %d", i);
            cr_assert_eq(f->caller, x->caller, "record %d", i);
            cr_assert_eq(f->api, x->api, "record %d", i);
            cr_assert_eq(f->mem, x->mem, "record %d", i);
            cr_assert_eq(f->device, x->device, "record %d", i);
            cr_assert_eq(f->status, x->status, "record %d", i);
        }
        i++;
    }
    cr_assert_eq(i, NOPS, "read %d of %d records", i, NOPS);
    rs_iter_free(it);
    return sites;
}

Test(compact, reader_returns_every_record_as_written)
{
    setup_env(NULL);
    want *w = write_ops();
    rs_reader *r = open_trace();
    uint64_t sites = check_read(r, w);
    /* 40 sites drawn at random: every chunk fills its 16-site table */
    cr_assert_geq(sites, (uint64_t)SITE_SLOTS * rs_reader_chunk_count(r) - SITE_SLOTS,
                  "%llu sites", (unsigned long long)sites);
    rs_reader_close(r);
    free(w);
    /* each layout was written: packed (1.5), compact (1.4: wide pointers
     * and sizes) and full (failed calls, time gaps, full site tables) */
    uint64_t n[64];
    raw_kind_counts(g_path, n);
    uint16_t kinds[] = {RS_REC_ALLOC_P, RS_REC_FREE_P, RS_REC_ALLOC_C, RS_REC_FREE_C,
                        RS_REC_ALLOC, RS_REC_FREE};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        cr_assert_gt(n[kinds[k]], 100, "kind %u written %llu times", kinds[k],
                     (unsigned long long)n[kinds[k]]);
}

Test(compact, off_writes_full_records_only)
{
    setup_env("0");
    want *w = write_ops();
    rs_reader *r = open_trace();
    cr_assert_eq(check_read(r, w), 0);
    rs_reader_close(r);
    free(w);
}

/* One call site each for allocations and frees: 50,000 pairs take 40
 * bytes per pair packed (ALLOC_P 24 + FREE_P 16, format 1.5; ALLOC_C 32 +
 * FREE_C 24 in 1.4) against 104 in full. */
static uint32_t
chunks_for_pairs(const char *compact)
{
    setup_env(compact);
    for (int i = 0; i < 50000; i++) {
        rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000 + (uint64_t)i * 512, 512, 0,
                        0x401000, 0);
        rs_record_free(RS_API_cudaFree, RS_MEM_DEVICE, 0x1000 + (uint64_t)i * 512, 0, 0x402000, 0);
    }
    rs_writer_close();
    rs_reader *r = open_trace();
    uint32_t n = rs_reader_chunk_count(r);
    rs_reader_close(r);
    return n;
}

Test(compact, pairs_take_40_bytes)
{
    /* 2.0 MB of records: 8 chunks of 256 KiB, 9 with the startup records */
    uint32_t n = chunks_for_pairs(NULL);
    cr_assert(n >= 8 && n <= 9, "%u chunks", n);
}

Test(compact, pairs_take_104_bytes_when_off)
{
    /* 5.2 MB: 20 chunks, 21 with the startup records */
    uint32_t n = chunks_for_pairs("0");
    cr_assert(n >= 20 && n <= 21, "%u chunks", n);
}

/* Two sites used in turn never evict each other, wherever their addresses
 * hash (the input that showed it: under valgrind the bench's cudaMalloc and
 * cudaFree return addresses, 0x10a50d and 0x10a51f, shared a slot of the
 * first, direct-mapped table, and every record named its site again: 68
 * bytes per event instead of 28). 64 pairs of callers, 300 pairs of calls
 * each: every chunk names each of its sites once. */
Test(compact, alternating_sites_named_once_per_chunk)
{
    setup_env(NULL);
    for (uint64_t k = 0; k < 64; k++) {
        uint64_t a = 0x10a000 + k * 0x1234 + 0xd, b = a + 0x12 + k;
        for (int i = 0; i < 300; i++) {
            rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000, 512, 0, a, 0);
            rs_record_free(RS_API_cudaFree, RS_MEM_DEVICE, 0x1000, 0, b, 0);
        }
    }
    rs_writer_close();
    rs_reader *r = open_trace();
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    int nseen = 0;
    uint32_t chunk = UINT32_MAX;
    rs_rec_site seen[SITE_SLOTS];
    uint64_t events = 0;
    while (rs_iter_next(it, &ev) == 1) {
        if (ev.rec->kind == RS_REC_SITE)
            check_site(&ev, &chunk, seen, &nseen);
        events += ev.rec->kind == RS_REC_ALLOC || ev.rec->kind == RS_REC_FREE;
    }
    rs_iter_free(it);
    cr_assert_eq(events, 64 * 600);
    /* 38,400 events at 28 bytes: 5 chunks, 6 with the startup records and
     * the full records of sites past a chunk's 16 */
    cr_assert_leq(rs_reader_chunk_count(r), 6, "%u chunks", rs_reader_chunk_count(r));
    rs_reader_close(r);
}
