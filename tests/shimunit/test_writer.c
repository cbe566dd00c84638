/* test_writer.c: the shim's tracker core called directly (no LD_PRELOAD),
 * read back with the real reader. Criterion runs each test in its own
 * process, so each starts with a fresh writer.
 *
 * GIVEN a configuration in the environment, WHEN records are written
 * through the record API, THEN the reader sees exactly those records. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void
setup_env(const char *max_bytes, const char *window)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/rs-unit-XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
    setenv("RECOMPSHIM_OUT", g_dir, 1);
    unsetenv("RECOMPSHIM_RUN_ID");
    if (max_bytes)
        setenv("RECOMPSHIM_MAX_BYTES", max_bytes, 1);
    else
        unsetenv("RECOMPSHIM_MAX_BYTES");
    if (window)
        setenv("RECOMPSHIM_WINDOW", window, 1);
    else
        unsetenv("RECOMPSHIM_WINDOW");
    setenv("RECOMPSHIM_MEMINFO_MS", "0", 1);
    setenv("RANK", "3", 1);
    rs_config_load();
    rs_writer_init();
}

/* The one trace file under g_dir/<run>/. */
static void
find_trace(char *out, size_t cap)
{
    DIR *d = opendir(g_dir);
    cr_assert_not_null(d);
    struct dirent *e;
    char run[600] = "";
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            snprintf(run, sizeof run, "%s/%s", g_dir, e->d_name);
    closedir(d);
    cr_assert(run[0], "no run directory under %s", g_dir);
    d = opendir(run);
    cr_assert_not_null(d);
    out[0] = '\0';
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".rstrace"))
            snprintf(out, cap, "%s/%s", run, e->d_name);
    closedir(d);
    cr_assert(out[0], "no trace in %s", run);
}

static rs_reader *
open_trace(void)
{
    char path[512], err[512];
    find_trace(path, sizeof path);
    rs_reader *r = NULL;
    int rc = rs_reader_open(path, &r, err, sizeof err);
    cr_assert_eq(rc, RS_READ_OK, "reader: %s", err);
    return r;
}

/* Count records of `kind` and sum ALLOC sizes. */
static uint64_t
count_kind(rs_reader *r, uint16_t kind, uint64_t *size_sum)
{
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    uint64_t n = 0, sum = 0;
    while (rs_iter_next(it, &ev) == 1) {
        if (ev.rec->kind != kind)
            continue;
        n++;
        if (kind == RS_REC_ALLOC)
            sum += ((const rs_rec_alloc *)ev.rec)->size;
    }
    rs_iter_free(it);
    if (size_sum)
        *size_sum = sum;
    return n;
}

Test(writer, no_file_before_first_cuda_call)
{
    setup_env(NULL, NULL);
    rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000, 512, 0, 0, 0);
    cr_assert_eq(rs_writer_state(), RS_W_NONE);
    DIR *d = opendir(g_dir);
    int entries = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        entries += e->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(entries, 0, "a run directory exists before any CUDA call");
}

struct worker_arg {
    int index;
    int n;
};

static void *
worker(void *p)
{
    struct worker_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        uint64_t ptr = 0x7e0000000000ull + ((uint64_t)a->index << 32) + (uint64_t)i * 512;
        rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, ptr, 512u * (uint64_t)(a->index + 1), 0,
                        0, 0);
        rs_record_free(RS_API_cudaFree, RS_MEM_DEVICE, ptr, 0, 0, 0);
    }
    return NULL;
}

Test(writer, four_threads_every_record_exact_and_sealed)
{
    setup_env(NULL, NULL);
    cr_assert_eq(rs_trace_open(), 1);
    enum { THREADS = 4, PER = 40000 };
    pthread_t t[THREADS];
    struct worker_arg a[THREADS];
    for (int i = 0; i < THREADS; i++) {
        a[i] = (struct worker_arg){i, PER};
        pthread_create(&t[i], NULL, worker, &a[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    rs_writer_close();

    rs_reader *r = open_trace();
    cr_assert_eq(rs_reader_closed(r), 1);
    cr_assert_eq(rs_reader_header(r)->rank, 3);
    cr_assert_eq(rs_reader_header(r)->rank_source, RS_RANK_TORCHRUN);
    uint64_t sum = 0;
    cr_assert_eq(count_kind(r, RS_REC_ALLOC, &sum), (uint64_t)THREADS * PER);
    /* sizes 512, 1024, 1536, 2048 per thread */
    cr_assert_eq(sum, (uint64_t)PER * 512u * (1 + 2 + 3 + 4));
    cr_assert_eq(count_kind(r, RS_REC_FREE, NULL), (uint64_t)THREADS * PER);
    /* one THREAD record per writing thread: the workers and the main
     * thread, which wrote the startup records */
    cr_assert_eq(count_kind(r, RS_REC_THREAD, NULL), THREADS + 1);
    /* 320000 records, 40 bytes per pair packed (ALLOC_P 24 + FREE_P 16,
     * format 1.5; 56+48 in full): 6.4 MB, at least 25 chunks of 256 KiB,
     * every one sealed */
    cr_assert_geq(rs_reader_chunk_count(r), 25);
    cr_assert_eq(rs_reader_warning_count(r), 0, "warning: %s", rs_reader_warning(r, 0));
    rs_reader_close(r);
}

Test(writer, per_thread_time_order_and_free_before_reuse)
{
    setup_env(NULL, NULL);
    cr_assert_eq(rs_trace_open(), 1);
    uint64_t t0 = rs_now_ns();
    rs_record_free_at(t0, RS_API_cudaFree, RS_MEM_DEVICE, 0xabc000, 0, 0, 0);
    rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0xabc000, 4096, 0, 0, 0);
    rs_writer_close();
    rs_reader *r = open_trace();
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    int saw_free = 0, order_ok = 0;
    while (rs_iter_next(it, &ev) == 1) {
        if (ev.rec->kind == RS_REC_FREE) {
            saw_free = 1;
            cr_assert_eq(ev.rec->t_ns, t0);
        }
        if (ev.rec->kind == RS_REC_ALLOC)
            order_ok = saw_free;
    }
    cr_assert(order_ok, "the free must come before the reuse");
    rs_iter_free(it);
    rs_reader_close(r);
}

Test(writer, byte_limit_stops_events_but_oom_lands_in_tail)
{
    /* header + 16 chunks: 14 usable before the reserved tail of 16/8 = 2 */
    char max[32];
    snprintf(max, sizeof max, "%u", RS_HEADER_SIZE + 16u * RS_CHUNK_SIZE);
    setup_env(max, NULL);
    cr_assert_eq(rs_trace_open(), 1);
    /* one call site: every ALLOC after a chunk's first is a 24-byte ALLOC_P */
    for (int i = 0; i < 200000; i++)
        rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000 + (uint64_t)i, 512, 0, 0, 0);
    cr_assert_eq(rs_writer_limit_hit(), 1);
    rs_record_oom(RS_API_cudaMalloc, RS_MEM_DEVICE, 1ull << 40, 0x1234, 2, 100, 200, 0);
    rs_writer_close();

    rs_reader *r = open_trace();
    const rs_file_header *h = rs_reader_header(r);
    cr_assert(h->flags & RS_HDR_LIMIT_HIT);
    cr_assert_neq(h->limit_hit_ns, 0);
    cr_assert_eq(h->reserved_chunks, 2);
    uint64_t allocs = count_kind(r, RS_REC_ALLOC, NULL);
    cr_assert_eq(allocs + h->dropped_records, 200000, "allocs %lu dropped %lu",
                 (unsigned long)allocs, (unsigned long)h->dropped_records);
    /* 14 chunks before the tail; chunk 0 also holds the startup records */
    cr_assert_leq(allocs, (uint64_t)14 * (RS_CHUNK_PAYLOAD / sizeof(rs_rec_alloc_p)));
    cr_assert_gt(allocs, (uint64_t)13 * (RS_CHUNK_PAYLOAD / sizeof(rs_rec_alloc_p)));
    /* the file never exceeds the limit */
    char path[512];
    find_trace(path, sizeof path);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_leq((uint64_t)st.st_size, (uint64_t)RS_HEADER_SIZE + 16u * RS_CHUNK_SIZE);
    cr_assert_eq(count_kind(r, RS_REC_LIMIT, NULL), 1);
    cr_assert_eq(count_kind(r, RS_REC_OOM, NULL), 1);
    rs_reader_close(r);
}

static void *
short_worker(void *p)
{
    uint64_t ptr = 0x7f0000000000ull + ((uint64_t)(uintptr_t)p << 20);
    rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, ptr, 4096, 0, 0, 0);
    rs_record_free(RS_API_cudaFree, RS_MEM_DEVICE, ptr, 0, 0, 0);
    return NULL;
}

/* hnew2: 5,000 short threads, one allocation each, wrote a 1.31 GB trace
 * (each held a 256 KiB chunk to the end), and under RECOMPSHIM_MAX_BYTES=2M
 * recording stopped after 7 threads. A thread's exit gives its chunk's
 * unused tail back and keeps one 4 KiB page (its records): 100 such threads,
 * two at a time, under a 2 MiB limit (6 chunks before its reserved tail: the
 * main thread's, 2 live ones and 100 pages), record every event, and the
 * file's blocks on disk stay within the limit (before: the limit was hit at
 * the fifth thread). */
Test(writer, short_threads_give_back_their_chunk_tails)
{
    setup_env("2M", NULL);
    cr_assert_eq(rs_trace_open(), 1);
    enum { THREADS = 100, WAVE = 2 };
    for (int i = 0; i < THREADS; i += WAVE) {
        pthread_t t[WAVE];
        for (int j = 0; j < WAVE; j++)
            cr_assert_eq(pthread_create(&t[j], NULL, short_worker, (void *)(uintptr_t)(i + j)), 0);
        for (int j = 0; j < WAVE; j++)
            pthread_join(t[j], NULL);
    }
    cr_assert_eq(rs_writer_limit_hit(), 0, "the limit was hit by %d short threads", THREADS);
    rs_writer_close();
    char path[512];
    find_trace(path, sizeof path);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    /* hole punching is what gives the space back; on a file system without
     * it (EOPNOTSUPP) the limit is hit as before, and this test says so */
    cr_assert_leq((uint64_t)st.st_blocks * 512u, (uint64_t)2 << 20,
                  "%llu bytes on disk", (unsigned long long)st.st_blocks * 512u);
    rs_reader *r = open_trace();
    cr_assert_eq(count_kind(r, RS_REC_ALLOC, NULL), THREADS);
    cr_assert_eq(count_kind(r, RS_REC_FREE, NULL), THREADS);
    cr_assert_eq(count_kind(r, RS_REC_THREAD, NULL), THREADS + 1);
    cr_assert_eq(rs_reader_header(r)->dropped_records, 0);
    cr_assert_eq(rs_reader_warning_count(r), 0, "warning: %s", rs_reader_warning(r, 0));
    rs_reader_close(r);
}

Test(writer, steps_window_records_only_inside)
{
    setup_env(NULL, "steps:2-3");
    cr_assert_eq(rs_trace_open(), 1);
    for (int step = 1; step <= 5; step++) {
        char name[32];
        int n = snprintf(name, sizeof name, "ProfilerStep#%d", step);
        rs_window_step_marker(name, (size_t)n);
        /* one alloc of size = step * 512 in each step */
        rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000u * (unsigned)step,
                        512u * (unsigned)step, 0, 0, 0);
    }
    rs_writer_close();
    rs_reader *r = open_trace();
    uint64_t sum = 0;
    cr_assert_eq(count_kind(r, RS_REC_ALLOC, &sum), 2);
    cr_assert_eq(sum, 512u * (2 + 3));
    cr_assert_eq(count_kind(r, RS_REC_WINDOW, NULL), 2); /* open at 2, close at 4 */
    rs_reader_close(r);
}

Test(writer, events_window)
{
    setup_env(NULL, "events:10-19");
    cr_assert_eq(rs_trace_open(), 1);
    for (int i = 0; i < 50; i++)
        rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000u + (unsigned)i, 512, 0, 0, 0);
    rs_writer_close();
    rs_reader *r = open_trace();
    cr_assert_eq(count_kind(r, RS_REC_ALLOC, NULL), 10);
    rs_reader_close(r);
}

Test(writer, intern_same_id_and_replayed_at_open)
{
    setup_env(NULL, NULL);
    uint32_t a = rs_intern("forward", 7);
    uint32_t b = rs_intern("backward", 8);
    cr_assert_eq(a, 1);
    cr_assert_eq(b, 2);
    cr_assert_eq(rs_intern("forward", 7), a);
    cr_assert_eq(rs_intern("", 0), 0);
    cr_assert_eq(rs_trace_open(), 1);
    uint32_t c = rs_intern("optimizer", 9);
    cr_assert_eq(c, 3);
    rs_writer_close();
    rs_reader *r = open_trace();
    const char *text;
    uint32_t len;
    cr_assert_eq(rs_reader_string(r, 1, &text, &len), 1);
    cr_assert_eq(len, 7);
    cr_assert_eq(memcmp(text, "forward", 7), 0);
    cr_assert_eq(rs_reader_string(r, 3, &text, &len), 1);
    cr_assert_eq(memcmp(text, "optimizer", 9), 0);
    rs_reader_close(r);
}

/* The per-thread memo of interned names (NVTX pushes): a hit only when the
 * bytes at the address are still the string interned; a buffer reused for
 * another name of the same length gets that name's id, never the old one. */
Test(writer, intern_memo_never_returns_a_stale_id)
{
    setup_env(NULL, NULL);
    char buf[16];
    memcpy(buf, "layer_0", 8);
    cr_assert_eq(rs_intern_memo_get(buf, 7), 0, "nothing memoised yet");
    uint32_t a = rs_intern(buf, 7);
    cr_assert_neq(a, 0);
    rs_intern_memo_put(buf, 7, a);
    cr_assert_eq(rs_intern_memo_get(buf, 7), a, "same address, same bytes: hit");
    cr_assert_eq(rs_intern_memo_get(buf, 6), 0, "same address, other length: miss");
    char copy[16];
    memcpy(copy, buf, 8);
    cr_assert_eq(rs_intern_memo_get(copy, 7), 0, "same bytes elsewhere: miss (rs_intern finds it)");
    cr_assert_eq(rs_intern(copy, 7), a);
    memcpy(buf, "layer_1", 8); /* the job reused its buffer */
    cr_assert_eq(rs_intern_memo_get(buf, 7), 0, "same address, other bytes: miss");
    uint32_t b = rs_intern(buf, 7);
    cr_assert_neq(b, a);
    rs_intern_memo_put(buf, 7, b);
    cr_assert_eq(rs_intern_memo_get(buf, 7), b);
    rs_intern_memo_put(buf, 7, 0); /* rs_intern's 0 (table full) is never memoised */
    cr_assert_eq(rs_intern_memo_get(buf, 7), b);
}

Test(writer, world_writable_out_dir_refused)
{
    setup_env(NULL, NULL);
    chmod(g_dir, 0777);
    cr_assert_eq(rs_trace_open(), 0);
    cr_assert_eq(rs_writer_state(), RS_W_DISABLED);
    /* the shim stays off: later records are no-ops */
    rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000, 512, 0, 0, 0);
    cr_assert_eq(rs_trace_open(), 0);
}

Test(writer, sticky_world_writable_out_dir_accepted)
{
    setup_env(NULL, NULL);
    chmod(g_dir, 01777);
    cr_assert_eq(rs_trace_open(), 1);
    rs_writer_close();
}

Test(writer, trace_file_is_private_and_named_by_rank)
{
    setup_env(NULL, NULL);
    cr_assert_eq(rs_trace_open(), 1);
    rs_writer_close();
    char path[512];
    find_trace(path, sizeof path);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    char want[64];
    snprintf(want, sizeof want, "-%d.rstrace", (int)getpid());
    cr_assert_not_null(strstr(path, "/rank3-"), "%s", path);
    cr_assert_not_null(strstr(path, want), "%s", path);
}

Test(writer, tiny_byte_limit_keeps_header_and_two_chunks)
{
    /* below two chunks: one for events, one reserved for OOM records */
    setup_env("100", NULL);
    cr_assert_eq(rs_trace_open(), 1);
    for (int i = 0; i < 20000; i++)
        rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000 + (uint64_t)i, 512, 0, 0, 0);
    rs_record_oom(RS_API_cudaMalloc, RS_MEM_DEVICE, 1ull << 40, 0x1234, 2, 100, 200, 0);
    rs_writer_close();
    rs_reader *r = open_trace();
    const rs_file_header *h = rs_reader_header(r);
    cr_assert_eq(h->reserved_chunks, 1);
    cr_assert(h->flags & RS_HDR_LIMIT_HIT);
    cr_assert_eq(count_kind(r, RS_REC_OOM, NULL), 1);
    uint64_t allocs = count_kind(r, RS_REC_ALLOC, NULL);
    cr_assert_gt(allocs, 0);
    cr_assert_leq(allocs, (uint64_t)(RS_CHUNK_PAYLOAD / sizeof(rs_rec_alloc_p)));
    rs_reader_close(r);
    char path[512];
    find_trace(path, sizeof path);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq((uint64_t)st.st_size, (uint64_t)RS_HEADER_SIZE + 2u * RS_CHUNK_SIZE);
}

Test(writer, steps_window_that_never_opens_says_so)
{
    setup_env(NULL, "steps:2-3");
    cr_assert_eq(rs_trace_open(), 1);
    rs_record_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, 0x1000, 512, 0, 0, 0);
    rs_writer_close();
    rs_reader *r = open_trace();
    cr_assert_eq(count_kind(r, RS_REC_ALLOC, NULL), 0);
    int found = 0;
    for (size_t i = 0; i < rs_reader_meta_count(r); i++) {
        uint32_t key, len;
        const char *v;
        rs_reader_meta(r, i, &key, &v, &len);
        if (key == RS_META_NOTE && memmem(v, len, "never opened", 12))
            found = 1;
    }
    cr_assert(found, "a META note says the window never opened");
    rs_reader_close(r);
}
