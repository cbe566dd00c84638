/* test_allocs: every allocation API of p_basic, exact records. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdint.h>

#include "itest.h"

#define GIB 1073741824ull
#define CAP (80 * GIB)
#define CTX 536870912ull

/* Expected ALLOC/FREE/MEMINFO/SET_DEVICE/POOL_ATTR records of p_basic, with
 * the host pointers it printed. The managed block's FREE is checked on its
 * own (basic_managed_free_kind), so it is left out here. */
static void
basic_expected(const char *out, char exp[32][256], size_t *n, char *mfree_ptr, size_t mcap)
{
    char m[64], h[64], h2[64];
    cr_assert(it_out_field(out, "managed", m, sizeof m) && it_out_field(out, "host", h, sizeof h) &&
                  it_out_field(out, "host2", h2, sizeof h2),
              "program output lacks pointers:\n%s", out);
    snprintf(mfree_ptr, mcap, "%s", m);
    size_t k = 0;
#define E(...) snprintf(exp[k++], 256, __VA_ARGS__)
    E("ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000000 size=1048576 stream=0x0 status=0");
    E("ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000100000 size=1000 stream=0x0 status=0");
    E("MEMINFO reason=app dev=0 free=%llu total=%llu status=0", CAP - CTX - 1048576 - 1000, CAP);
    E("FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000000 stream=0x0 status=0");
    E("ALLOC api=cudaMallocAsync mem=device dev=0 ptr=0x7e0000100400 size=4096 stream=0x1234 status=0");
    E("FREE api=cudaFreeAsync mem=device dev=0 ptr=0x7e0000100400 stream=0x1234 status=0");
    E("ALLOC api=cudaMallocAsync_ptsz mem=device dev=0 ptr=0x7e0000101400 size=8192 stream=0x5678 status=0");
    E("FREE api=cudaFreeAsync_ptsz mem=device dev=0 ptr=0x7e0000101400 stream=0x5678 status=0");
    E("ALLOC api=cudaMallocFromPoolAsync mem=device dev=0 ptr=0x7e0000103400 size=2048 stream=0x9abc status=0");
    E("POOL_ATTR pool=0x7d0000000000 attr=7 value=2048 status=0");
    E("ALLOC api=cudaMallocFromPoolAsync_ptsz mem=device dev=0 ptr=0x7e0000103c00 size=3072 stream=0xdef0 status=0");
    E("FREE api=cudaFreeAsync mem=device dev=0 ptr=0x7e0000103400 stream=0x9abc status=0");
    E("FREE api=cudaFreeAsync_ptsz mem=device dev=0 ptr=0x7e0000103c00 stream=0xdef0 status=0");
    E("ALLOC api=cudaMallocManaged mem=managed dev=0 ptr=%s size=65536 stream=0x0 status=0", m);
    E("ALLOC api=cudaMallocHost mem=host_pinned dev=0 ptr=%s size=4096 stream=0x0 status=0", h);
    E("ALLOC api=cudaHostAlloc mem=host_pinned dev=0 ptr=%s size=8192 stream=0x0 status=0", h2);
    E("FREE api=cudaFreeHost mem=host_pinned dev=0 ptr=%s stream=0x0 status=0", h);
    E("FREE api=cudaFreeHost mem=host_pinned dev=0 ptr=%s stream=0x0 status=0", h2);
    E("FREE api=cudaFree mem=device dev=0 ptr=0x7e0000100000 stream=0x0 status=0");
    E("FREE api=cudaFree mem=device dev=0 ptr=0xdead000 stream=0x0 status=1");
    E("SET_DEVICE dev=1 status=0");
    E("ALLOC api=cudaMalloc mem=device dev=1 ptr=0x1010000000000 size=512 stream=0x0 status=0");
    E("MEMINFO reason=app dev=1 free=%llu total=%llu status=0", CAP - CTX - 512, CAP);
    E("FREE api=cudaFree mem=device dev=1 ptr=0x1010000000000 stream=0x0 status=0");
#undef E
    *n = k;
}

Test(allocs, basic_sequence)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_basic")), NULL);

    char exp[32][256], m[64];
    size_t ne;
    basic_expected(r.out, exp, &ne, m, sizeof m);
    const char *expv[33];
    for (size_t i = 0; i < ne; i++)
        expv[i] = exp[i];
    expv[ne] = NULL;

    /* all records of these kinds, minus the managed block's FREE */
    char **got;
    size_t n = it_select(&d, "ALLOC FREE MEMINFO SET_DEVICE POOL_ATTR OOM", 0, &got);
    char needle[96];
    snprintf(needle, sizeof needle, " ptr=%s ", m);
    size_t k = 0, dropped = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strncmp(got[i], "FREE ", 5) && strstr(got[i], needle)) {
            free(got[i]);
            dropped++;
            continue;
        }
        got[k++] = got[i];
    }
    cr_expect_eq(dropped, 1, "one FREE of the managed block %s, got %zu", m, dropped);
    int same = k == ne;
    for (size_t i = 0; same && i < k; i++)
        same = !strcmp(got[i], expv[i]);
    if (!same) {
        for (size_t i = 0; i < (k > ne ? k : ne); i++)
            cr_log_error("#%zu\n  expected: %s\n  got:      %s", i, i < ne ? expv[i] : "(none)",
                         i < k ? got[i] : "(none)");
    }
    cr_assert(same, "p_basic records differ from the expected %zu (got %zu); see log", ne, k);
    it_free_lines(got, k);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(allocs, basic_managed_free_kind)
{
    /* cudaFree of a cudaMallocManaged block must be recorded as managed
     * memory (DESIGN §1: managed is recorded as such, kept out of device
     * peaks), not as device memory. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_basic")), NULL);
    char m[64], want[256];
    cr_assert(it_out_field(r.out, "managed", m, sizeof m));
    snprintf(want, sizeof want, "FREE api=cudaFree mem=managed dev=0 ptr=%s stream=0x0 status=0", m);
    char **got;
    size_t n = it_select(&d, "FREE", 0, &got);
    char needle[96], seen[256] = "(none)";
    snprintf(needle, sizeof needle, " ptr=%s ", m);
    for (size_t i = 0; i < n; i++)
        if (strstr(got[i], needle))
            snprintf(seen, sizeof seen, "%s", got[i]);
    cr_expect_str_eq(seen, want, "managed free\n  expected: %s\n  got:      %s", want, seen);
    it_free_lines(got, n);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(allocs, basic_callers)
{
    /* Every ALLOC/FREE comes from the program itself: a non-zero caller
     * that the module map resolves to itp_basic. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_basic")), NULL);
    size_t seen = 0;
    for (size_t i = 0; i < d.nlines; i++) {
        char kind[32], buf[128];
        it_kind(d.lines[i], kind, sizeof kind);
        if (strcmp(kind, "ALLOC") && strcmp(kind, "FREE"))
            continue;
        seen++;
        cr_expect(it_field(d.lines[i], "caller", buf, sizeof buf) && strtoull(buf, NULL, 0) != 0,
                  "no caller: %s", d.lines[i]);
        cr_expect(it_field(d.lines[i], "caller_lib", buf, sizeof buf) && !strncmp(buf, "itp_basic+0x", 12),
                  "caller_lib not itp_basic+OFF: %s", d.lines[i]);
    }
    cr_assert_eq(seen, 21, "ALLOC+FREE records: %zu", seen);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(allocs, basic_thread_and_meta)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_basic")), NULL);
    char want[256];
    /* one THREAD record for the only thread, before its first event */
    char **got;
    size_t n = it_select(&d, "THREAD", 0, &got);
    cr_assert_eq(n, 1, "THREAD records: %zu", n);
    cr_expect(strstr(got[0], "name=\"itp_basic\" rename=0") != NULL, "%s", got[0]);
    snprintf(want, sizeof want, "THREAD thread_tid=%d ", (int)r.pid);
    cr_expect(!strncmp(got[0], want, strlen(want)), "%s", got[0]);
    it_free_lines(got, n);
    size_t first_thread = SIZE_MAX, first_alloc = SIZE_MAX;
    for (size_t i = 0; i < d.nlines; i++) {
        if (first_thread == SIZE_MAX && !strncmp(d.lines[i], "THREAD ", 7))
            first_thread = i;
        if (first_alloc == SIZE_MAX && !strncmp(d.lines[i], "ALLOC ", 6))
            first_alloc = i;
    }
    cr_expect(first_thread < first_alloc, "THREAD must precede the thread's first ALLOC");
    /* the executable is in the module map and the command line recorded */
    snprintf(want, sizeof want, "path=\"%s\"", IT_PROG("p_basic"));
    cr_expect_eq(it_count_sub(&d, want), 1, "MODULE for %s", IT_PROG("p_basic"));
    snprintf(want, sizeof want, "META key=exe value=\"%s\"", IT_PROG("p_basic"));
    cr_expect_eq(it_count_rec(&d, want), 1, "%s", want);
    snprintf(want, sizeof want, "META key=cmdline value=\"%s\"", IT_PROG("p_basic"));
    cr_expect_eq(it_count_rec(&d, want), 1, "%s", want);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

static void
check_mock_output(const char *out)
{
    char want[512];
    snprintf(want, sizeof want,
             "meminfo0 free=%llu total=%llu\npool=0x7d0000000000 used=2048\n", CAP - CTX - 1048576 - 1000, CAP);
    cr_expect(strstr(out, want) != NULL, "want:\n%s\ngot:\n%s", want, out);
    snprintf(want, sizeof want, "meminfo1 free=%llu total=%llu\n", CAP - CTX - 512, CAP);
    cr_expect(strstr(out, want) != NULL, "want:\n%s\ngot:\n%s", want, out);
    const char *ptrs = "a=0x7e0000000000 b=0x7e0000100000 c=0x7e0000100400 d=0x7e0000101400 "
                       "e=0x7e0000103400 f=0x7e0000103c00 x=0x1010000000000\ndone\n";
    cr_expect(strstr(out, ptrs) != NULL, "want:\n%s\ngot:\n%s", ptrs, out);
}

Test(allocs, mock_alone)
{
    /* The double by itself (no shim at all): deterministic addresses, pool
     * accounting and cudaMemGetInfo arithmetic. */
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_basic")), IT_ENV("LD_PRELOAD="));
    cr_assert(r.exited && r.code == 0, "exit %d\n%s%s", r.code, r.out, r.err);
    check_mock_output(r.out);
    cr_expect_eq(it_count_files(c.out), 0);
    it_run_free(&r);
    it_fini(&c);
}

Test(allocs, disabled_no_trace)
{
    /* RECOMPSHIM_DISABLE=1: the program runs unchanged, no trace at all. */
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_basic")), IT_ENV("RECOMPSHIM_DISABLE=1"));
    cr_assert(r.exited && r.code == 0, "exit %d\n%s%s", r.code, r.out, r.err);
    check_mock_output(r.out);
    cr_expect_eq(it_count_files(c.out), 0, "files under %s", c.out);
    cr_expect_str_empty(r.err, "stderr: %s", r.err);
    it_run_free(&r);
    it_fini(&c);
}

Test(allocs, injected_free_error)
{
    /* MOCK_CUDA_FAIL makes p_minimal's only cudaFree fail with 1: the
     * program sees the error, and the FREE is still recorded, status=1. */
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_minimal")), IT_ENV("MOCK_CUDA_FAIL=cudaFree@1=1"));
    cr_assert(r.exited && r.code == 3, "the program must see the injected error: exit %d\n%s", r.code, r.out);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 1);
    it_dump d;
    it_dump_trace(&d, paths[0]);
    cr_assert_eq(d.rc, 0, "%s", d.err);
    it_expect_seq(&d, "ALLOC FREE", 0,
                  IT_SEQ("ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000000 size=1048576 stream=0x0 status=0",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000000 stream=0x0 status=1"),
                  "injected cudaFree error");
    it_free_paths(paths, n);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(allocs, set_device_beyond_count)
{
    /* MOCK_CUDA_DEVICES=1: p_basic's cudaSetDevice(1) fails with
     * cudaErrorInvalidDevice (101); the failed call is still recorded. */
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_basic")), IT_ENV("MOCK_CUDA_DEVICES=1"));
    cr_assert(r.exited && r.code == 3, "exit %d\n%s", r.code, r.out);
    cr_expect(strstr(r.out, "cudaSetDevice(1) returned 101") != NULL, "%s", r.out);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 1);
    it_dump d;
    it_dump_trace(&d, paths[0]);
    cr_assert_eq(d.rc, 0, "%s", d.err);
    char **got;
    size_t ng = it_select(&d, "SET_DEVICE", 0, &got);
    cr_expect(ng == 1 && !strcmp(got[0], "SET_DEVICE dev=1 status=101"), "SET_DEVICE records: %zu (%s)", ng,
              ng ? got[0] : "");
    it_free_lines(got, ng);
    it_free_paths(paths, n);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}
