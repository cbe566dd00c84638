/* p_oom: a failing allocation through three nested calls.
 *   p_oom malloc FIRST FAIL   cudaMalloc(FIRST) succeeds, cudaMalloc(FAIL)
 *                             must return 2; then cudaMalloc(4096) succeeds
 *                             (the program caught the OOM and ran on)
 *   p_oom malloc FIRST FAIL fatal
 *                             ... then exits 1 at once, allocating nothing
 *                             more (a job the OOM ended)
 *   p_oom malloc FIRST FAIL kill
 *                             ... cudaMalloc(4096) succeeds, then SIGKILL:
 *                             ran on, but the trace is never closed
 *   p_oom async               cudaMallocAsync(4096) then cudaMallocAsync(8192)
 *                             on stream 0x42 (run with
 *                             MOCK_CUDA_FAIL=cudaMallocAsync@2=2)
 * Output: "oom_rc=2 last_error=2 site=ADDR" where ADDR is oom_level3. */
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "prog_util.h"

static int g_async;

__attribute__((noinline)) static int
oom_level3(size_t bytes)
{
    void *p = NULL;
    int rc = g_async ? (int)cudaMallocAsync(&p, bytes, STREAM(0x42)) : (int)cudaMalloc(&p, bytes);
    __asm__ volatile("" ::: "memory");
    return rc;
}

__attribute__((noinline)) static int
oom_level2(size_t bytes)
{
    int rc = oom_level3(bytes);
    __asm__ volatile("" ::: "memory");
    return rc + 0;
}

__attribute__((noinline)) static int
oom_level1(size_t bytes)
{
    int rc = oom_level2(bytes);
    __asm__ volatile("" ::: "memory");
    return rc;
}

int
main(int argc, char **argv)
{
    void *a = NULL, *c = NULL;
    size_t first, fail;
    if (argc >= 2 && strcmp(argv[1], "async") == 0) {
        g_async = 1;
        OK(cudaMallocAsync(&a, 4096, STREAM(0x42)));
        fail = 8192;
    } else if ((argc == 4 || argc == 5) && strcmp(argv[1], "malloc") == 0) {
        first = strtoull(argv[2], NULL, 0);
        fail = strtoull(argv[3], NULL, 0);
        OK(cudaMalloc(&a, first));
    } else {
        printf("FAIL: usage\n");
        return 3;
    }
    int rc = oom_level1(fail);
    int last = (int)cudaGetLastError();
    printf("oom_rc=%d last_error=%d site=%p\n", rc, last, (void *)(uintptr_t)&oom_level3);
    if (rc != 2) {
        printf("FAIL: expected error 2\n");
        return 3;
    }
    const char *end = argc == 5 ? argv[4] : "";
    if (strcmp(end, "fatal") == 0) {
        printf("fatal\n");
        return 1;
    }
    OK(cudaMalloc(&c, 4096));
    if (strcmp(end, "kill") == 0) {
        printf("killed\n");
        fflush(stdout);
        raise(SIGKILL);
    }
    OK(cudaFree(c));
    if (g_async)
        OK(cudaFreeAsync(a, STREAM(0x42)));
    else
        OK(cudaFree(a));
    printf("done\n");
    return 0;
}
