/* bench_shim_overhead.c: what the shim costs a job per event.
 *
 * Times N cudaMalloc/cudaFree pairs, N cudaMallocAsync/cudaFreeAsync pairs,
 * N NVTX push/pop pairs (the real NVTX3 API, so injection is what is
 * measured) and N malloc/free pairs (what heaptrack records) on each of T
 * threads, against the mock runtime (tests/doubles). Run it with and
 * without a tracer (LD_PRELOAD=librecompshim.so, heaptrack): run-all.sh
 * does all of them in one run and prints the ratios for
 * docs/performance.md.
 *
 *   bench_shim_overhead N THREADS [WORKLOAD]   (default: the three CUDA/NVTX ones)
 *
 * Output: one line per workload, "name cpu_ns wall_ns events": the
 * process's CPU time (user + system, all its threads, getrusage) and the
 * wall time, each divided by the number of events (a pair is two events).
 * CPU time is what the job pays even on a loaded machine.
 */
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static void *
malloc_pair(void *arg)
{
    (void)arg;
    for (long i = 0; i < g_n; i++) {
        void *volatile p = malloc(4096);
        if (!p)
            abort();
        free(p);
    }
    return NULL;
}

/* Process CPU time so far (user + system, every thread), in ns. */
static double
cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) * 1e9 +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e3;
}

static void
run(const char *name, void *(*fn)(void *), int threads)
{
    pthread_t t[64];
    double c0 = cpu_now(), t0 = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, fn, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double dt = now() - t0, dc = cpu_now() - c0;
    double events = 2.0 * (double)g_n * threads;
    printf("%s %.1f %.1f %.0f\n", name, dc / events, dt / events, events);
    fflush(stdout);
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
    const char *only = argc > 3 ? argv[3] : NULL;
    static const struct {
        const char *name;
        void *(*fn)(void *);
    } w[] = {{"cudaMalloc+cudaFree", malloc_free},
             {"cudaMallocAsync+cudaFreeAsync", async_pair},
             {"nvtxRangePushA+nvtxRangePop", nvtx_pair},
             {"malloc+free", malloc_pair}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (only ? strcmp(only, w[i].name) == 0 : w[i].fn != malloc_pair)
            run(w[i].name, w[i].fn, threads);
    return 0;
}
