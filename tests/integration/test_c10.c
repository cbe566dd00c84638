/* test_c10: PyTorch's allocator report (c10::reportMemoryUsageToProfiler,
 * both 5-argument signatures) through the libc10/libc10_cuda doubles:
 * TENSOR records for CUDA devices only, with PyTorch's totals, every call
 * forwarded to the real function unchanged, no trace for CPU-only use. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "itest_fields.h"

#define C10_ENV IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_DIR)

/* What p_c10 passes, in order (the real functions' log must equal it). */
static const char *const real_calls[] = {
    "real0 ptr=0x7e0000000000 size=2097152 alloc=2097152 reserved=20971520 type=1 index=0",
    "real1 ptr=0x7e0000200000 size=512 alloc=2097664 reserved=20971520 type=1 index=0",
    "real2 ptr=0x1000 size=4096 alloc=4096 reserved=8192 type=0 index=-1",
    "real3 ptr=0x7e0000000000 size=-2097152 alloc=512 reserved=20971520 type=1 index=0",
    "real4 ptr=0x7f0000000000 size=1048576 alloc=1048576 reserved=2097152 type=1 index=3",
    "real5 ptr=0x2000 size=128 alloc=128 reserved=128 type=11 index=0",
    "real_i64_0 ptr=0x7e0000400000 size=4194304 alloc=4194816 reserved=20971520 type=1 index=0",
    "real_i64_1 ptr=0x3000 size=64 alloc=64 reserved=64 type=0 index=-1",
    "real_i64_2 ptr=0x7e0000400000 size=-4194304 alloc=512 reserved=20971520 type=1 index=0",
    NULL,
};

static void
expect_out_line(const char *out, const char *line)
{
    size_t l = strlen(line);
    int found = 0;
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, line, l) && (p[l] == '\n' || p[l] == '\0'))
            found = 1;
    cr_expect(found, "the real function did not see: %s\nprogram output:\n%s", line, out);
}

Test(c10, tensor_records_cuda_only)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_c10")), C10_ENV);
    it_expect_fields(&d, "TENSOR", 0,
        IT_SEQ("TENSOR ptr=0x7e0000000000 size=2097152 allocated=2097152 reserved=20971520 device_type=1 dev=0 signature=1",
               "TENSOR ptr=0x7e0000200000 size=512 allocated=2097664 reserved=20971520 device_type=1 dev=0 signature=1",
               "TENSOR ptr=0x7e0000000000 size=-2097152 allocated=512 reserved=20971520 device_type=1 dev=0 signature=1",
               "TENSOR ptr=0x7f0000000000 size=1048576 allocated=1048576 reserved=2097152 device_type=1 dev=3 signature=1",
               "TENSOR ptr=0x7e0000400000 size=4194304 allocated=4194816 reserved=20971520 device_type=1 dev=0 signature=2",
               "TENSOR ptr=0x7e0000400000 size=-4194304 allocated=512 reserved=20971520 device_type=1 dev=0 signature=2"),
        "p_c10");
    /* nothing else from these calls */
    cr_expect_eq(it_count_sub(&d, "ALLOC "), 0);
    cr_expect_eq(it_count_sub(&d, "FREE "), 0);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(c10, real_function_called_every_time)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_c10")), C10_ENV);
    char n[32], n64[32];
    cr_assert(it_out_field(r.out, "calls", n, sizeof n) && it_out_field(r.out, "calls_i64", n64, sizeof n64),
              "%s", r.out);
    cr_expect_str_eq(n, "6", "size_t-totals libc10 saw %s calls, expected 6", n);
    cr_expect_str_eq(n64, "3", "int64_t-totals libc10 saw %s calls, expected 3", n64);
    for (size_t i = 0; real_calls[i]; i++)
        expect_out_line(r.out, real_calls[i]);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(c10, callers_are_libc10_cuda)
{
    /* The caller of each TENSOR record is the allocator's call site in
     * libc10_cuda (through the PLT), resolved by the module map. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_c10")), C10_ENV);
    size_t n = 0, k = 0;
    for (size_t i = 0; i < d.nlines; i++) {
        char kind[32], lib[256] = "(none)", sig[8] = "";
        it_kind(d.lines[i], kind, sizeof kind);
        if (strcmp(kind, "TENSOR"))
            continue;
        n++;
        it_field(d.lines[i], "caller_lib", lib, sizeof lib);
        it_field(d.lines[i], "signature", sig, sizeof sig);
        const char *want = !strcmp(sig, "2") ? "libc10_cuda_i64.so+0x" : "libc10_cuda.so+0x";
        k += !strncmp(lib, want, strlen(want));
        cr_expect(!strncmp(lib, want, strlen(want)), "caller_lib %s, expected %s...: %s", lib, want, d.lines[i]);
    }
    cr_expect_eq(n, 6);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(c10, cpu_only_process_has_no_trace)
{
    /* A process whose only report calls are for CPU blocks (PyTorch's CPU
     * allocator reports too) never touches CUDA: no trace file at all, and
     * the real function still sees every call. */
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_c10"), "cpu"), C10_ENV);
    cr_assert(r.exited && r.code == 0, "exit %d\n%s\n%s", r.code, r.out, r.err);
    cr_expect_eq(it_count_files(c.out), 0, "files under RECOMPSHIM_OUT for a CPU-only process");
    char n[32], n64[32];
    cr_assert(it_out_field(r.out, "calls", n, sizeof n) && it_out_field(r.out, "calls_i64", n64, sizeof n64));
    cr_expect_str_eq(n, "2");
    cr_expect_str_eq(n64, "1");
    expect_out_line(r.out, "real0 ptr=0x1000 size=4096 alloc=4096 reserved=8192 type=0 index=-1");
    expect_out_line(r.out, "real1 ptr=0x1000 size=-4096 alloc=0 reserved=8192 type=0 index=-1");
    expect_out_line(r.out, "real_i64_0 ptr=0x3000 size=64 alloc=64 reserved=64 type=0 index=-1");
    cr_expect_eq(it_count_prefix(r.err, "recompshim:"), 0, "stderr:\n%s", r.err);
    it_run_free(&r);
    it_fini(&c);
}

Test(c10, without_shim_same_calls)
{
    /* Reference: the doubles alone (no preload) see the same calls. */
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, NULL, IT_ARGV(IT_PROG("p_c10")), IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_DIR, "LD_PRELOAD="));
    cr_assert(r.exited && r.code == 0, "exit %d\n%s\n%s", r.code, r.out, r.err);
    for (size_t i = 0; real_calls[i]; i++)
        expect_out_line(r.out, real_calls[i]);
    it_run_free(&r);
    it_fini(&c);
}
