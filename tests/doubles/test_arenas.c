/* test_arenas: the mock runtime's per-thread arenas (MOCK_CUDA_THREAD_ARENAS=1,
 * mock_arena.c), the mode tools/bench/ measures the shim in.
 *
 * Run with MOCK_CUDA_THREAD_ARENAS=1 against the mock libcudart.so.13. TAP on
 * stdout. Checks:
 *   1. 8 threads, each 2,000 cudaMalloc and 2,000 cudaMallocAsync blocks of
 *      sizes 1..4096: every address is distinct, 512-byte aligned, in the
 *      upper half of device 0's runtime TiB (the arenas' half), and no two
 *      blocks overlap;
 *   2. cudaMemGetInfo counts them: free falls by exactly the bytes
 *      allocated; the default pool's used bytes are the async blocks' bytes;
 *   3. the main thread frees every block of the (exited) workers: each free
 *      succeeds once, a second free of the same pointer fails with
 *      cudaErrorInvalidValue, cudaFreeHost of a device block fails, and free
 *      memory is back where it started;
 *   4. more threads alive at once than there are arenas (70 > 64): the six
 *      without one fall back to the locked table (the lower half), and
 *      every address is still distinct.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 8
#define PER 2000
#define TIB (1ull << 40)
#define DEV0 0x7e0000000000ull
#define HALF (1ull << 39)
#define MANY 70

static int g_n, g_failed;

static void
ok(int cond, const char *what, unsigned long long a, unsigned long long b)
{
    printf("%s %d - ", cond ? "ok" : "not ok", ++g_n);
    printf(what, a, b);
    printf("\n");
    g_failed += !cond;
}

typedef struct block {
    uint64_t p, size;
    int async;
} block;

static block g_blocks[THREADS][2 * PER];
static int g_rc[THREADS];

static void *
worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < 2 * PER; i++) {
        void *p = NULL;
        size_t size = 1 + (size_t)((i * 2654435761u + (unsigned)t) % 4096);
        int async = i & 1;
        g_rc[t] |= async ? cudaMallocAsync(&p, size, (cudaStream_t)0) : cudaMalloc(&p, size);
        g_blocks[t][i] = (block){(uint64_t)(uintptr_t)p, size, async};
    }
    return NULL;
}

static int
by_address(const void *a, const void *b)
{
    uint64_t x = ((const block *)a)->p, y = ((const block *)b)->p;
    return x < y ? -1 : x > y;
}

static pthread_barrier_t g_bar;
static uint64_t g_many[MANY];

static void *
holder(void *arg)
{
    int i = (int)(intptr_t)arg;
    void *p = NULL;
    cudaMalloc(&p, 512);
    g_many[i] = (uint64_t)(uintptr_t)p;
    pthread_barrier_wait(&g_bar); /* every thread holds its arena until all allocated */
    return NULL;
}

static void
check_many(void)
{
    pthread_t th[MANY];
    pthread_barrier_init(&g_bar, NULL, MANY);
    for (int i = 0; i < MANY; i++)
        pthread_create(&th[i], NULL, holder, (void *)(intptr_t)i);
    for (int i = 0; i < MANY; i++)
        pthread_join(th[i], NULL);
    int upper = 0, lower = 0, distinct = 1;
    for (int i = 0; i < MANY; i++) {
        upper += g_many[i] >= DEV0 + HALF && g_many[i] < DEV0 + TIB;
        lower += g_many[i] >= DEV0 && g_many[i] < DEV0 + HALF;
        for (int j = 0; j < i; j++)
            distinct &= g_many[i] != g_many[j];
    }
    ok(upper == 64 && lower == MANY - 64 && distinct,
       "%llu threads alive at once: 64 blocks from arenas, %llu from the locked table, all "
       "distinct", MANY, (unsigned long long)lower);
    for (int i = 0; i < MANY; i++)
        cudaFree((void *)(uintptr_t)g_many[i]);
}

int
main(void)
{
    size_t free0 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    static block all[THREADS * 2 * PER];
    uint64_t bytes = 0, async_bytes = 0;
    int rc = 0, n = 0;
    for (int t = 0; t < THREADS; t++) {
        rc |= g_rc[t];
        for (int i = 0; i < 2 * PER; i++) {
            all[n++] = g_blocks[t][i];
            bytes += g_blocks[t][i].size;
            async_bytes += g_blocks[t][i].async ? g_blocks[t][i].size : 0;
        }
    }
    qsort(all, (size_t)n, sizeof all[0], by_address);
    int placed = 1, apart = 1;
    for (int i = 0; i < n; i++) {
        placed &= all[i].p % 512 == 0 && all[i].p >= DEV0 + HALF && all[i].p < DEV0 + TIB;
        if (i)
            apart &= all[i - 1].p + all[i - 1].size <= all[i].p;
    }
    ok(rc == 0 && placed, "%llu blocks on %llu threads: 512-byte aligned, in the arenas' half "
       "of device 0's range", (unsigned long long)n, THREADS);
    ok(apart, "%llu blocks: distinct and none overlaps the next (%llu)", (unsigned long long)n, 0);

    size_t free1 = 0;
    cudaMemGetInfo(&free1, &total);
    ok(free0 - free1 == bytes, "cudaMemGetInfo: free fell by %llu bytes (allocated %llu)",
       (unsigned long long)(free0 - free1), (unsigned long long)bytes);
    cudaMemPool_t pool;
    unsigned long long used = 0;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
    ok(used == async_bytes, "the pool's used bytes %llu are the async blocks' %llu", used,
       (unsigned long long)async_bytes);

    int frees = 0, again = 0, host = 0;
    host = cudaFreeHost((void *)(uintptr_t)all[0].p) == cudaErrorInvalidValue;
    for (int i = 0; i < n; i++)
        frees += (all[i].async ? cudaFreeAsync((void *)(uintptr_t)all[i].p, (cudaStream_t)0)
                               : cudaFree((void *)(uintptr_t)all[i].p)) == cudaSuccess;
    for (int i = 0; i < n; i += 97)
        again += cudaFree((void *)(uintptr_t)all[i].p) == cudaErrorInvalidValue;
    ok(frees == n && host, "another thread frees all %llu blocks once (cudaFreeHost of one: "
       "invalid value: %llu)", (unsigned long long)frees, (unsigned long long)host);
    ok(again == (n + 96) / 97, "%llu second frees: each cudaErrorInvalidValue (%llu)",
       (unsigned long long)((n + 96) / 97), (unsigned long long)again);
    size_t free2 = 0;
    cudaMemGetInfo(&free2, &total);
    used = 1;
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
    ok(free2 == free0 && used == 0, "all freed: free memory back to %llu, pool used %llu",
       (unsigned long long)free2, used);

    check_many();
    printf("1..%d\n", g_n);
    return g_failed ? 1 : 0;
}
