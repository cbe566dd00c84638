/* bench_shim_overhead.c: what the shim costs a job per event.
 *
 * Times N cudaMalloc/cudaFree pairs, N cudaMallocAsync/cudaFreeAsync pairs
 * and N NVTX push/pop pairs (the real NVTX3 API, so injection is what is
 * measured) on T threads, against the mock runtime (tests/doubles). Run it
 * with and without LD_PRELOAD=librecompshim.so: run-shim-bench.sh does both
 * in one run and prints the ratios for docs/performance.md.
 *
 * Output: one line per workload, "name ns_per_op ops", ns per operation
 * pair summed over threads' wall time / ops.
 */
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long g_n;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *
malloc_free(void *arg)
{
    (void)arg;
    for (long i = 0; i < g_n; i++) {
        void *p;
        if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
            abort();
    }
    return NULL;
}

static void *
async_pair(void *arg)
{
    (void)arg;
    cudaStream_t s = (cudaStream_t)0x10;
    for (long i = 0; i < g_n; i++) {
        void *p;
        if (cudaMallocAsync(&p, 4096, s) != cudaSuccess || cudaFreeAsync(p, s) != cudaSuccess)
            abort();
    }
    return NULL;
}

static void *
nvtx_pair(void *arg)
{
    (void)arg;
    for (long i = 0; i < g_n; i++) {
        nvtxRangePushA("megatron.core.transformer.attention.forward.core_attention");
        nvtxRangePop();
    }
    return NULL;
}

static void
run(const char *name, void *(*fn)(void *), int threads)
{
    pthread_t t[64];
    double t0 = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, fn, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double dt = now() - t0;
    printf("%s %.1f %ld\n", name, dt / (double)(g_n * threads), g_n * threads);
}

int
main(int argc, char **argv)
{
    g_n = argc > 1 ? atol(argv[1]) : 1000000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    if (threads < 1 || threads > 64)
        threads = 1;
    void *warm;
    cudaMalloc(&warm, 512); /* creates the trace file outside the timing */
    cudaFree(warm);
    run("cudaMalloc+cudaFree", malloc_free, threads);
    run("cudaMallocAsync+cudaFreeAsync", async_pair, threads);
    run("nvtxRangePushA+nvtxRangePop", nvtx_pair, threads);
    return 0;
}
