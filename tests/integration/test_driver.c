/* test_driver: driver-API allocations reached through every route a job
 * uses (cudaGetDriverEntryPoint*, cuGetProcAddress*, dlsym on libcuda),
 * exact records, one per call; another preloaded interposer's dlsym and
 * dlvsym answers unchanged (p_driver, p_preload, tests/doubles/cuda_driver.c).
 *
 * Mock driver values: cuMemAlloc* on device 0 from 0x600000000000, device
 * d >= 1 from (2 << 48) + (d << 40) (512-aligned), VA reservations on device
 * 0 from 0x500000000000, d >= 1 from (3 << 48) + (d << 40) (2 MiB aligned;
 * tests/doubles/mock_state.h), handles 0x5a0001 up, primary contexts 0x5c000000 + d*0x1000,
 * every thread starts with device 0's context current. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "itest_fields.h"

#ifndef RS_DRVMOD_PATH
#error "RS_DRVMOD_PATH must be defined by meson"
#endif

#define DRV_ENV(...) IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_DIR, __VA_ARGS__)
#define DRV_KINDS "ALLOC FREE OOM MEMINFO VMM_CREATE VMM_RELEASE VMM_MAP VMM_UNMAP VA_RESERVE VA_FREE CTX_SET"

static void
run_mode(it_ctx *c, it_run *r, it_dump *d, const char *mode, const char *const *env)
{
    it_init(c);
    it_run_traced(c, r, d, IT_ARGV(IT_PROG("p_driver"), mode),
                  env ? env : DRV_ENV("RS_UNUSED=1"));
}

static void
done(it_ctx *c, it_run *r, it_dump *d)
{
    it_dump_free(d);
    it_run_free(r);
    it_fini(c);
}

/* The VMM records of one ExpandableSegment round at VA base `va` with
 * handles h and h+1 (20 MiB pages, 4 reserved, 2 mapped). */
#define VMM_ROUND(va, va1, h0, h1)                                                                   \
    "VA_RESERVE api=cuMemAddressReserve ptr=" va " size=83886080 offset=0 status=0",                 \
    "VMM_CREATE api=cuMemCreate dev=0 handle=" h0 " size=20971520 status=0",                         \
    "VMM_CREATE api=cuMemCreate dev=0 handle=" h1 " size=20971520 status=0",                         \
    "VMM_MAP api=cuMemMap handle=" h0 " ptr=" va " size=20971520 offset=0 status=0",                 \
    "VMM_MAP api=cuMemMap handle=" h1 " ptr=" va1 " size=20971520 offset=0 status=0",                \
    "VMM_UNMAP api=cuMemUnmap ptr=" va " size=20971520 status=0",                                    \
    "VMM_RELEASE api=cuMemRelease handle=" h0 " status=0",                                           \
    "VMM_UNMAP api=cuMemUnmap ptr=" va1 " size=20971520 status=0",                                   \
    "VMM_RELEASE api=cuMemRelease handle=" h1 " status=0",                                           \
    "VA_FREE api=cuMemAddressFree ptr=" va " size=83886080 status=0"

Test(driver, expandable_segments_by_version)
{
    /* PyTorch's expandable segments: cudaGetDriverEntryPointByVersion(name,
     * 12000), default flag then per-thread flag (the VMM calls have no
     * _ptsz variants: same records). One record per call: the runtime's
     * own dlsym/cuGetProcAddress lookups must not wrap twice. */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "vmm", NULL);
    it_expect_fields(&d, DRV_KINDS, 0,
                     IT_SEQ(VMM_ROUND("0x500000000000", "0x500001400000", "0x5a0001", "0x5a0002"),
                            VMM_ROUND("0x500005000000", "0x500006400000", "0x5a0003", "0x5a0004")),
                     "p_driver vmm");
    done(&c, &r, &d);
}

Test(driver, expandable_segments_sample_memory)
{
    /* A job whose device memory comes only from cuMemCreate (PyTorch's
     * expandable segments; found by the first real PyTorch run on the fake
     * GPU, issue 13) still gets its memory sample: the first successful
     * cuMemCreate is followed by one MEMINFO sample taken, like the runtime
     * hooks' samples, with cudaMemGetInfo, which p_driver itself never
     * calls. The mock runtime and driver share one device memory state
     * (tests/doubles/README.md), so its answer counts the 20 MiB handle:
     * 80 GiB - the 512 MiB context - 20 MiB. */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "vmm", DRV_ENV("RECOMPSHIM_MEMINFO_MS=1000000"));
    /* One sample (the first of the file is due at once, the next not for
     * 1000 s), right after the first handle: (it_select leaves samples out,
     * so they are counted here.) */
    cr_expect_eq(it_count_fields(&d, "MEMINFO reason=sample"), 1);
    cr_expect_eq(it_count_fields(&d, "MEMINFO reason=sample dev=0 free=85341503488 total=85899345920 status=0"), 1,
                 "the sample after the first cuMemCreate: capacity - context - the handle");
    done(&c, &r, &d);
}

Test(driver, async_and_linear_by_runtime_getters)
{
    /* cuMemAllocAsync/FreeAsync by the default and per-thread flags, the
     * deprecated cudaGetDriverEntryPoint, the _ptsz getters (default means
     * per-thread there), cuMemAlloc/cuMemFree (ABI _v2), a failed free. */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "async", NULL);
    it_expect_fields(&d, "ALLOC FREE OOM", 0,
        IT_SEQ("ALLOC api=cuMemAllocAsync mem=device ptr=0x600000000000 size=4096 stream=0x1234 status=0",
               "FREE api=cuMemFreeAsync mem=device ptr=0x600000000000 stream=0x1234 status=0",
               "ALLOC api=cuMemAllocAsync_ptsz mem=device ptr=0x600000001000 size=8192 stream=0x5678 status=0",
               "FREE api=cuMemFreeAsync_ptsz mem=device ptr=0x600000001000 stream=0x5678 status=0",
               "ALLOC api=cuMemAllocAsync mem=device ptr=0x600000003000 size=512 stream=0x9abc status=0",
               "FREE api=cuMemFreeAsync mem=device ptr=0x600000003000 stream=0x9abc status=0",
               "ALLOC api=cuMemAllocAsync_ptsz mem=device ptr=0x600000003200 size=1024 stream=0xdef0 status=0",
               "FREE api=cuMemFreeAsync_ptsz mem=device ptr=0x600000003200 stream=0xdef0 status=0",
               "ALLOC api=cuMemAlloc_v2 mem=device ptr=0x600000003600 size=1048576 stream=0x0 status=0",
               "FREE api=cuMemFree_v2 mem=device ptr=0x600000003600 stream=0x0 status=0",
               "FREE api=cuMemFree_v2 mem=device ptr=0xdead000 stream=0x0 status=1"),
        "p_driver async");
    done(&c, &r, &d);
}

Test(driver, meminfo_v2)
{
    /* cuMemGetInfo_v2 through the runtime getter: a MEMINFO (reason app)
     * with the driver's answer (capacity - context, nothing live). */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "async", NULL);
    char fr[64], tot[64], want[256];
    cr_assert(it_out_field(r.out, "free", fr, sizeof fr) && it_out_field(r.out, "total", tot, sizeof tot));
    cr_expect_str_eq(fr, "85362475008");
    snprintf(want, sizeof want, "MEMINFO reason=app free=%s total=%s status=0", fr, tot);
    it_expect_fields(&d, "MEMINFO", 0, IT_SEQ(want), "cuMemGetInfo_v2");
    done(&c, &r, &d);
}

Test(driver, cu_get_proc_address_routes)
{
    /* cuGetProcAddress (4 arguments) from dlsym on libcuda.so.1 and
     * cuGetProcAddress_v2 from the runtime getter, with base names; the
     * per-thread flag gives _ptsz; a too-old version and a missing name
     * fail as the driver says (checked by the program). */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "procaddr", NULL);
    it_expect_fields(&d, DRV_KINDS, 0,
        IT_SEQ("ALLOC api=cuMemAlloc_v2 mem=device ptr=0x600000000000 size=4096 stream=0x0 status=0",
               "FREE api=cuMemFree_v2 mem=device ptr=0x600000000000 stream=0x0 status=0",
               "ALLOC api=cuMemAllocAsync_ptsz mem=device ptr=0x600000001000 size=8192 stream=0x42 status=0",
               "FREE api=cuMemFreeAsync_ptsz mem=device ptr=0x600000001000 stream=0x42 status=0",
               "ALLOC api=cuMemAllocAsync mem=device ptr=0x600000003000 size=512 stream=0x43 status=0",
               "FREE api=cuMemFreeAsync mem=device ptr=0x600000003000 stream=0x43 status=0",
               "VMM_CREATE api=cuMemCreate dev=0 handle=0x5a0001 size=2097152 status=0",
               "VMM_RELEASE api=cuMemRelease handle=0x5a0001 status=0"),
        "p_driver procaddr");
    done(&c, &r, &d);
}

Test(driver, dlsym_on_libcuda)
{
    /* NCCL's static cudart: dlopen("libcuda.so.1") + dlsym(ABI name).
     * Functions without a wrapper come back unchanged (libcuda's own). */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "dlsym", NULL);
    char w[256];
    cr_assert(it_out_field(r.out, "where_cuDriverGetVersion", w, sizeof w), "%s", r.out);
    cr_expect_str_eq(w, "libcuda.so.1:cuDriverGetVersion");
    it_expect_fields(&d, DRV_KINDS, 0,
        IT_SEQ("ALLOC api=cuMemAlloc_v2 mem=device ptr=0x600000000000 size=2097152 stream=0x0 status=0",
               "ALLOC api=cuMemAllocAsync_ptsz mem=device ptr=0x600000200000 size=4096 stream=0x77 status=0",
               "FREE api=cuMemFreeAsync_ptsz mem=device ptr=0x600000200000 stream=0x77 status=0",
               "FREE api=cuMemFree_v2 mem=device ptr=0x600000000000 stream=0x0 status=0",
               "VMM_CREATE api=cuMemCreate dev=0 handle=0x5a0001 size=2097152 status=0",
               "VMM_RELEASE api=cuMemRelease handle=0x5a0001 status=0"),
        "p_driver dlsym");
    done(&c, &r, &d);
}

Test(driver, current_device_of_driver_records)
{
    /* The device of every record (DESIGN §1 Devices): the thread's current
     * context is device 0's (the mock's cuCtxGetDevice says 0), so driver
     * allocations and VA/map records name device 0, not -1 (unknown). */
    const char *modes[] = { "async", "vmm" };
    for (int m = 0; m < 2; m++) {
        it_ctx c;
        it_run r;
        it_dump d;
        run_mode(&c, &r, &d, modes[m], NULL);
        size_t bad = 0, seen = 0;
        for (size_t i = 0; i < d.nlines; i++) {
            char kind[32], dev[16];
            it_kind(d.lines[i], kind, sizeof kind);
            if (strcmp(kind, "ALLOC") && strcmp(kind, "FREE") && strcmp(kind, "VA_RESERVE") &&
                strcmp(kind, "VA_FREE") && strcmp(kind, "VMM_MAP") && strcmp(kind, "VMM_UNMAP") &&
                strcmp(kind, "VMM_CREATE") && strcmp(kind, "VMM_RELEASE"))
                continue;
            seen++;
            if (!it_field(d.lines[i], "dev", dev, sizeof dev) || strcmp(dev, "0")) {
                bad++;
                cr_log_error("p_driver %s: dev=%s, expected dev=0: %s", modes[m], dev, d.lines[i]);
            }
        }
        cr_expect_gt(seen, 0);
        cr_expect_eq(bad, 0, "p_driver %s: %zu of %zu driver records lack the current device 0 (see log)",
                     modes[m], bad, seen);
        done(&c, &r, &d);
    }
}

Test(driver, ctx_set_current)
{
    /* cuCtxSetCurrent to device 1's context: CTX_SET dev=1 and the next
     * allocations on device 1; an invalid context fails (201, dev -1) and
     * changes nothing; back to device 0. cuMemCreate names its location's
     * device (1) whatever the current device is. */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "ctx", NULL);
    it_expect_fields(&d, DRV_KINDS, 0,
        IT_SEQ("CTX_SET ctx=0x5c001000 dev=1 status=0",
               "ALLOC api=cuMemAlloc_v2 mem=device dev=1 ptr=0x2010000000000 size=512 stream=0x0 status=0",
               "CTX_SET ctx=0xbad000 dev=-1 status=201",
               "FREE api=cuMemFree_v2 mem=device dev=1 ptr=0x2010000000000 stream=0x0 status=0",
               "CTX_SET ctx=0x5c000000 dev=0 status=0",
               "ALLOC api=cuMemAlloc_v2 mem=device dev=0 ptr=0x600000000000 size=512 stream=0x0 status=0",
               "FREE api=cuMemFree_v2 mem=device dev=0 ptr=0x600000000000 stream=0x0 status=0",
               "VMM_CREATE api=cuMemCreate dev=1 handle=0x5a0001 size=2097152 status=0",
               "VMM_RELEASE api=cuMemRelease handle=0x5a0001 status=0"),
        "p_driver ctx");
    done(&c, &r, &d);
}

Test(driver, runtime_and_driver_share_the_device)
{
    /* One device memory state (issue 13): on a 64 MiB device without
     * context bytes, a 40 MiB cudaMalloc leaves a 40 MiB cuMemCreate no room
     * (CUDA_ERROR_OUT_OF_MEMORY: recorded with no handle, and an OOM); a 20 MiB handle
     * fits, cudaMemGetInfo then reports 4 MiB free and an 8 MiB cudaMalloc
     * fails (an OOM record) until the handle is released. */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "shared",
             DRV_ENV("MOCK_CUDA_CAPACITY=67108864", "MOCK_CUDA_CONTEXT_BYTES=0"));
    char fr[64];
    cr_assert(it_out_field(r.out, "free", fr, sizeof fr), "p_driver shared ran: %s", r.out);
    cr_expect_str_eq(fr, "4194304");
    it_expect_fields(&d, "ALLOC OOM VMM_CREATE VMM_RELEASE", 0,
        IT_SEQ("ALLOC api=cudaMalloc mem=device size=41943040 status=0",
               "VMM_CREATE api=cuMemCreate dev=0 handle=0x0 size=41943040 status=2",
               "OOM api=cuMemCreate mem=device dev=0 size=41943040 status=2",
               "VMM_CREATE api=cuMemCreate dev=0 handle=0x5a0001 size=20971520 status=0",
               "OOM api=cudaMalloc mem=device dev=0 size=8388608 status=2 free=4194304 "
               "total=67108864",
               "VMM_RELEASE api=cuMemRelease handle=0x5a0001 status=0",
               "ALLOC api=cudaMalloc mem=device size=8388608 status=0"),
        "p_driver shared");
    done(&c, &r, &d);
}

Test(driver, vmm_create_out_of_memory)
{
    /* The expandable-segments OOM: a cuMemCreate over capacity is recorded
     * with CUDA_ERROR_OUT_OF_MEMORY (2) and no handle; capacity 64 MiB, no
     * context bytes, 40 MiB pages. */
    it_ctx c;
    it_run r;
    it_dump d;
    run_mode(&c, &r, &d, "oom",
             DRV_ENV("MOCK_CUDA_CAPACITY=67108864", "MOCK_CUDA_CONTEXT_BYTES=0"));
    it_expect_fields(&d, "VMM_CREATE VMM_RELEASE", 0,
        IT_SEQ("VMM_CREATE api=cuMemCreate dev=0 handle=0x5a0001 size=41943040 status=0",
               "VMM_CREATE api=cuMemCreate dev=0 handle=0x0 size=41943040 status=2",
               "VMM_RELEASE api=cuMemRelease handle=0x5a0001 status=0",
               "VMM_CREATE api=cuMemCreate dev=0 handle=0x5a0002 size=41943040 status=0",
               "VMM_RELEASE api=cuMemRelease handle=0x5a0002 status=0"),
        "p_driver oom");
    done(&c, &r, &d);
}

Test(driver, callers_resolve_to_their_library)
{
    /* Every driver record's caller is the code that called the wrapper:
     * the program, or a library loaded after start (the module map is
     * refreshed when new modules appear). */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_driver"), "module", RS_DRVMOD_PATH),
                  DRV_ENV("RS_UNUSED=1"));
    it_expect_fields(&d, "ALLOC FREE", 0,
        IT_SEQ("ALLOC api=cuMemAlloc_v2 ptr=0x600000000000 size=4096 status=0",
               "FREE api=cuMemFree_v2 ptr=0x600000000000 status=0",
               "ALLOC api=cuMemAlloc_v2 ptr=0x600000001000 size=8192 status=0",
               "FREE api=cuMemFree_v2 ptr=0x600000001000 status=0"),
        "p_driver module");
    const char *want[] = { "itp_driver+0x", "itp_driver+0x", "libitdrvmod.so+0x", "libitdrvmod.so+0x" };
    size_t k = 0;
    for (size_t i = 0; i < d.nlines && k < 4; i++) {
        char kind[32], lib[256] = "(none)";
        it_kind(d.lines[i], kind, sizeof kind);
        if (strcmp(kind, "ALLOC") && strcmp(kind, "FREE"))
            continue;
        it_field(d.lines[i], "caller_lib", lib, sizeof lib);
        cr_expect(!strncmp(lib, want[k], strlen(want[k])), "record %zu: caller_lib %s, expected %s...: %s", k, lib,
                  want[k], d.lines[i]);
        k++;
    }
    /* and for the VMM route of p_driver vmm */
    done(&c, &r, &d);
    run_mode(&c, &r, &d, "vmm", NULL);
    size_t n = 0;
    for (size_t i = 0; i < d.nlines; i++) {
        char kind[32], lib[256] = "(none)";
        it_kind(d.lines[i], kind, sizeof kind);
        if (strncmp(kind, "VMM_", 4) && strncmp(kind, "VA_", 3))
            continue;
        n++;
        it_field(d.lines[i], "caller_lib", lib, sizeof lib);
        cr_expect(!strncmp(lib, "itp_driver+0x", 13), "caller_lib %s: %s", lib, d.lines[i]);
    }
    cr_expect_eq(n, 20);
    done(&c, &r, &d);
}

/* ---- a second preloaded interposer (pre2.c) ---- */

typedef struct pre2_view {
    char next_malloc[128], next_cuda_malloc[128], next_dlsym[128], default_cuda_malloc[128];
    char dlvsym_dlsym[128], dlvsym_malloc[128], calls[16];
} pre2_view;

static void
pre2_run(const char *preload, pre2_view *v, it_dump *d, int traced)
{
    it_ctx c;
    it_run r;
    char pre[1024];
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s", preload);
    it_init(&c);
    if (traced) {
        it_run_traced(&c, &r, d, IT_ARGV(IT_PROG("p_preload")), IT_ENV(pre));
    } else {
        it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_preload")), IT_ENV(pre));
        cr_assert(r.exited && r.code == 0, "p_preload: exit %d\n%s\n%s", r.code, r.out, r.err);
    }
    struct { const char *k; char *v; size_t n; } f[] = {
        { "next_malloc", v->next_malloc, sizeof v->next_malloc },
        { "next_cudaMalloc", v->next_cuda_malloc, sizeof v->next_cuda_malloc },
        { "next_dlsym", v->next_dlsym, sizeof v->next_dlsym },
        { "default_cudaMalloc", v->default_cuda_malloc, sizeof v->default_cuda_malloc },
        { "dlvsym_dlsym", v->dlvsym_dlsym, sizeof v->dlvsym_dlsym },
        { "dlvsym_malloc", v->dlvsym_malloc, sizeof v->dlvsym_malloc },
        { "pre2_calls", v->calls, sizeof v->calls },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        cr_assert(it_out_field(r.out, f[i].k, f[i].v, f[i].n), "p_preload (%s) printed no %s:\n%s", preload, f[i].k,
                  r.out);
    it_run_free(&r);
    it_fini(&c);
}

#define PRE2 RS_PRE2_PATH
#define SHIM RS_SHIM_PATH

Test(driver, other_preloader_dlsym_unchanged)
{
    /* RTLD_NEXT is relative to the caller: pre2's lookups must land where
     * they land without the shim, the shim's own position in the preload
     * list taken into account; dlvsym never changes. */
    pre2_view none, first, second;
    it_dump d1, d2;
    pre2_run(PRE2, &none, NULL, 0);
    pre2_run(SHIM ":" PRE2, &first, &d1, 1);
    pre2_run(PRE2 ":" SHIM, &second, &d2, 1);

    /* without the shim */
    cr_expect_str_eq(none.next_malloc, "libc.so.6:malloc");
    cr_expect_str_eq(none.next_cuda_malloc, "libcudart.so.13:cudaMalloc");
    cr_expect_str_eq(none.next_dlsym, "libc.so.6:dlsym");
    cr_expect_str_eq(none.default_cuda_malloc, "libitpre2.so:cudaMalloc");
    cr_expect_str_eq(none.dlvsym_dlsym, "libc.so.6:dlsym");

    /* shim first, then pre2: after pre2 comes what came after it before */
    cr_expect_str_eq(first.next_malloc, none.next_malloc);
    cr_expect_str_eq(first.next_cuda_malloc, none.next_cuda_malloc, "shim:pre2 next cudaMalloc: %s, without shim %s",
                     first.next_cuda_malloc, none.next_cuda_malloc);
    cr_expect_str_eq(first.next_dlsym, none.next_dlsym);
    cr_expect_str_eq(first.default_cuda_malloc, "librecompshim.so:cudaMalloc");
    cr_expect_str_eq(first.dlvsym_dlsym, none.dlvsym_dlsym);
    cr_expect_str_eq(first.dlvsym_malloc, none.dlvsym_malloc);
    cr_expect_str_eq(first.calls, "1");

    /* pre2 first, then the shim: the shim is pre2's next cudaMalloc/dlsym */
    cr_expect_str_eq(second.next_malloc, none.next_malloc);
    cr_expect_str_eq(second.next_cuda_malloc, "librecompshim.so:cudaMalloc");
    cr_expect_str_eq(second.next_dlsym, "librecompshim.so:dlsym");
    cr_expect_str_eq(second.default_cuda_malloc, none.default_cuda_malloc);
    cr_expect_str_eq(second.dlvsym_dlsym, none.dlvsym_dlsym);
    cr_expect_str_eq(second.dlvsym_malloc, none.dlvsym_malloc);
    cr_expect_str_eq(second.calls, "1");

    /* the one cudaMalloc went through both interposers: one record each way */
    const char *const exp[] = { "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000000 size=4096 stream=0x0 status=0",
                                "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000000 stream=0x0 status=0", NULL };
    it_expect_fields(&d1, "ALLOC FREE OOM", 0, exp, "shim:pre2");
    it_expect_fields(&d2, "ALLOC FREE OOM", 0, exp, "pre2:shim");
    it_dump_free(&d1);
    it_dump_free(&d2);
}
