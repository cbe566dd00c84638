/* p_basic: every allocation API once, with known sizes and stream values.
 * Device addresses are deterministic (mock: device 0 from 0x7e0000000000,
 * device d >= 1 from (1 << 48) + (d << 40), 512-aligned); host and managed
 * pointers are printed. */
#include <stdint.h>
#include <string.h>

#include "cudart_ptsz.h"
#include "prog_util.h"

int
main(void)
{
    void *a, *b, *c, *d, *e, *f, *m, *h, *h2, *x;
    size_t fr = 0, tot = 0;
    unsigned long long used = 0;
    cudaMemPool_t pool;

    OK(cudaMalloc(&a, 1048576));
    OK(cudaMalloc(&b, 1000));
    OK(cudaMemGetInfo(&fr, &tot));
    printf("meminfo0 free=%zu total=%zu\n", fr, tot);
    OK(cudaFree(a));

    OK(cudaMallocAsync(&c, 4096, STREAM(0x1234)));
    OK(cudaFreeAsync(c, STREAM(0x1234)));
    OK(cudaMallocAsync_ptsz(&d, 8192, STREAM(0x5678)));
    OK(cudaFreeAsync_ptsz(d, STREAM(0x5678)));

    OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    OK(cudaMallocFromPoolAsync(&e, 2048, pool, STREAM(0x9abc)));
    OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    printf("pool=%p used=%llu\n", (void *)pool, used);
    OK(cudaMallocFromPoolAsync_ptsz(&f, 3072, pool, STREAM(0xdef0)));
    OK(cudaFreeAsync(e, STREAM(0x9abc)));
    OK(cudaFreeAsync_ptsz(f, STREAM(0xdef0)));

    OK(cudaMallocManaged(&m, 65536, cudaMemAttachGlobal));
    memset(m, 0x5a, 65536);
    OK(cudaMallocHost(&h, 4096));
    memset(h, 1, 4096);
    OK(cudaHostAlloc(&h2, 8192, cudaHostAllocDefault));
    memset(h2, 2, 8192);
    printf("managed=%p\nhost=%p\nhost2=%p\n", m, h, h2);
    OK(cudaFreeHost(h));
    OK(cudaFreeHost(h2));
    OK(cudaFree(m));
    OK(cudaFree(b));

    EXPECT_RC(cudaFree((void *)(uintptr_t)0xdead000), cudaErrorInvalidValue);
    EXPECT_RC(cudaGetLastError(), cudaErrorInvalidValue);

    OK(cudaSetDevice(1));
    OK(cudaMalloc(&x, 512));
    OK(cudaMemGetInfo(&fr, &tot));
    printf("meminfo1 free=%zu total=%zu\n", fr, tot);
    OK(cudaFree(x));
    printf("a=%p b=%p c=%p d=%p e=%p f=%p x=%p\n", a, b, c, d, e, f, x);
    printf("done\n");
    return 0;
}
