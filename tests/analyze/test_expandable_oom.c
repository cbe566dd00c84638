/* test_expandable_oom: an OOM under expandable segments, and device figures
 * that contradict the trace (issue 14 cases C and M), on hand-made traces.
 *
 * C: PyTorch's expandable segments grow by pages (20 MiB in the large pool),
 * one cuMemCreate each (c10/cuda/CUDACachingAllocator.cpp,
 * ExpandableSegment::map); when one fails the request fails, and the pages
 * made for it are released. The failed call is one page, not the request:
 * the analyzer used to take 20 MiB for a request of 15.16 GiB and gave a
 * job that died of an OOM a positive margin. The request is at least the
 * pages the same thread created for it plus the failed one.
 *
 * M: cudaMemGetInfo at the OOM said 512 MiB in use on a device where PyTorch
 * had 10 GiB allocated (a driver double that answered for device 0); the
 * advisor read a device limit at 512 MiB and a 0 B budget from it. Such a
 * reading is said, never used as a capacity or a limit.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abuild.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define PAGE (20 * MIB)
#define C10_LO 0x10000000ull
#define C10_CALL (C10_LO + 0x100)
#define TL "megatron.core.transformer.transformer_layer.TransformerLayer."

static char *
trace_path(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return ab_keep(p);
}

static yajl_val
analyze(const char *path, char **text)
{
    char *out = NULL, *err = NULL;
    const char *args[] = {"--json", path, NULL};
    int rc = ab_run(args, &out, &err);
    cr_assert(rc == 0 || rc == 1 || rc == 3, "recomp-analyze exit %d: %s", rc, err);
    yajl_val j = ab_json(out);
    cr_assert(j, "JSON parses: %s", out);
    free(err);
    *text = out;
    return j;
}

/* n pages of PyTorch's large pool created from handle h0 on, at t.. */
static uint64_t
pages(ab *a, uint64_t t, uint64_t h0, int n)
{
    for (int i = 0; i < n; i++)
        ab_vmm(a, AB_MAIN, t++, RS_REC_VMM_CREATE, h0 + (uint64_t)i, PAGE, C10_CALL, 0);
    return t;
}

/* One attempt at a request whose pages run out after n: n pages, the failed
 * one with the shim's OOM record (cudaMemGetInfo: free, total), then the
 * n pages released (ExpandableSegment::map). Returns the next time. */
static uint64_t
failed_attempt(ab *a, uint64_t t, uint64_t h0, int n, uint64_t free_b, uint64_t total)
{
    t = pages(a, t, h0, n);
    ab_vmm(a, AB_MAIN, t++, RS_REC_VMM_CREATE, 0, PAGE, C10_CALL, 2);
    ab_oom_api(a, AB_MAIN, t++, PAGE, free_b, total, RS_API_cuMemCreate, C10_CALL);
    for (int i = 0; i < n; i++)
        ab_vmm(a, AB_MAIN, t++, RS_REC_VMM_RELEASE, h0 + (uint64_t)i, 0, C10_CALL, 0);
    return t;
}

/* A 1 GiB device, a 64 MiB context, 200 MiB allocated by PyTorch in 10
 * pages; then a 900 MiB request in the forward: 38 pages fit, the 39th
 * fails, twice (the retry after release_cached_blocks). */
Test(expandable_oom, request_is_its_pages_not_the_failed_page)
{
    char *dir = ab_tmpdir(), *f = trace_path(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_env(a, 1, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
    ab_module(a, 2, C10_LO, C10_LO + 0x100000, "/site/torch/lib/libc10_cuda.so");
    ab_thread(a, AB_MAIN, 3, "python");
    uint64_t t = pages(a, 10, 1, 10);
    ab_tensor(a, AB_MAIN, t++, 0x500000000000ull, (int64_t)(200 * MIB), 200 * MIB, 200 * MIB);
    ab_meminfo(a, AB_MAIN, t++, GIB - 64 * MIB - 200 * MIB, GIB);
    ab_push(a, AB_MAIN, 100, TL "_run_mlp.mlp");
    t = failed_attempt(a, 101, 100, 38, 0, GIB);
    t = failed_attempt(a, t, 200, 38, 0, GIB);
    ab_write(a, f, 0);
    char *text;
    yajl_val j = analyze(f, &text);
    cr_expect_eq(ab_int(j, "ranks[0].oom_count"), 1, "one OOM: %s", text);
    /* the request: 38 pages created for it + the failed one, not 20 MiB */
    cr_expect_eq(ab_int(j, "ranks[0].oom.requested_bytes"), 39 * PAGE);
    /* the first attempt was retried (the same page size): an alloc retry */
    yajl_val r = ab_get(j, "ranks[0].alloc_retries");
    cr_expect(r && YAJL_IS_ARRAY(r) && r->u.array.len == 1);
    const char *code = ab_str(j, "verdict.code"), *why = ab_str(j, "verdict.why");
    cr_expect(strcmp(code, "OK:FITS") != 0, "an OOMed job never fits: %s", code);
    cr_expect(strstr(why, "a request of at least 780.00 MiB"), "why: %s", why);
    free(text);
    yajl_tree_free(j);
}

/* Pages of another library (NCCL's cuMem buffers) never make a request:
 * the same run from a caller outside PyTorch keeps the failed call's size. */
Test(expandable_oom, pages_outside_pytorch_are_no_request)
{
    char *dir = ab_tmpdir(), *f = trace_path(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_env(a, 1, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
    ab_module(a, 2, C10_LO, C10_LO + 0x100000, "/site/nvidia/nccl/lib/libnccl.so.2");
    ab_thread(a, AB_MAIN, 3, "python");
    failed_attempt(a, 10, 1, 5, 0, GIB);
    ab_write(a, f, 0);
    char *text;
    yajl_val j = analyze(f, &text);
    cr_expect_eq(ab_int(j, "ranks[0].oom.requested_bytes"), PAGE, "%s", text);
    free(text);
    yajl_tree_free(j);
}

/* M: 10 GiB allocated by PyTorch, an OOM whose cudaMemGetInfo says 512 MiB
 * in use of 26 GiB: no device limit, no capacity from it; said. */
Test(expandable_oom, inconsistent_device_figures_are_said_not_used)
{
    char *dir = ab_tmpdir(), *f = trace_path(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 3, "python");
    ab_alloc(a, AB_MAIN, 10, 0x7e0000000000ull, 10 * GIB);
    ab_tensor(a, AB_MAIN, 11, 0x7e0000000000ull, (int64_t)(10 * GIB), 10 * GIB, 10 * GIB);
    ab_push(a, AB_MAIN, 100, TL "_run_mlp.mlp");
    ab_oom(a, AB_MAIN, 101, 2 * GIB, 26 * GIB - 512 * MIB, 26 * GIB, NULL, 0);
    ab_write(a, f, 0);
    char *text;
    yajl_val j = analyze(f, &text);
    cr_expect(!strstr(text, "BUDGET:DEVICE_LIMIT"), "no limit from the reading: %s", text);
    const char *code = ab_str(j, "verdict.code"), *why = ab_str(j, "verdict.why");
    cr_expect(strcmp(code, "OK:FITS") != 0, "%s", code);
    cr_expect(strstr(why, "device figures inconsistent on rank 0: allocated 10.00 GiB > in use "
                          "512.00 MiB"), "why: %s", why);
    cr_expect(strstr(why, "budget unknown: pass --budget"), "why: %s", why);
    free(text);
    yajl_tree_free(j);
}
