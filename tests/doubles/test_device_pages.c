/* test_device_pages: physical pages belong to the device of their location,
 * and the driver acts on the thread's current device (issue 14 case M).
 *
 * The input that showed it: megasim under expandable_segments:True with 4
 * ranks; rank r runs on device r (cudaSetDevice(r)), maps its pages with
 * cuMemCreate(location r) and asks cuMemGetInfo at its OOM. The mock driver
 * kept its own current context per thread, device 0's until cuCtxSetCurrent,
 * so cudaSetDevice never reached it: ranks 1-3 were told "25.50 GiB free,
 * this process has 512 MiB in use" (device 0's figures) while PyTorch had
 * 10.79 GiB allocated on device 1. On a GPU cudaSetDevice makes the device's
 * primary context current on the calling thread (CUDA 12+), the driver's
 * calls act on that context, and a physical allocation is made on
 * CUmemAllocationProp.location.id (CUDA driver API, cuMemCreate).
 *
 * Linked against the fake GPU's libcudart.so.13 and libcuda.so.1; run with
 * MOCK_CUDA_CAPACITY=1 GiB, MOCK_CUDA_CONTEXT_BYTES=64 MiB. TAP on stdout:
 *   1. cudaSetDevice(1), 10 pages of 20 MiB cuMemCreate'd on device 1:
 *      cuMemGetInfo and cudaMemGetInfo on that thread both say device 1's
 *      free = 1 GiB - 64 MiB - 200 MiB;
 *   2. device 0 (cudaSetDevice(0)) still has all but its context free;
 *   3. cuMemCreate on device 1 while device 0 is current charges device 1;
 *   4. cuCtxSetCurrent(device 1's primary context) makes cudaGetDevice say 1,
 *      cuCtxSetCurrent(NULL) leaves the driver without a context;
 *   5. cuMemRelease gives device 1's pages back to device 1.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MIB (1ull << 20)
#define CAP (1024 * MIB)
#define CTX (64 * MIB)
#define PAGE (20 * MIB)

static int g_n, g_failed;

static void
ok(int cond, const char *what, unsigned long long got, unsigned long long want)
{
    printf("%s %d - %s (got %llu, want %llu)\n", cond ? "ok" : "not ok", ++g_n, what, got, want);
    g_failed += !cond;
}

static CUmemGenericAllocationHandle
page_on(int dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle h = 0;
    return cuMemCreate(&h, PAGE, &prop, 0) == CUDA_SUCCESS ? h : 0;
}

static uint64_t
drv_free(void)
{
    size_t f = 0, t = 0;
    return cuMemGetInfo(&f, &t) == CUDA_SUCCESS ? f : UINT64_MAX;
}

static uint64_t
rt_free(void)
{
    size_t f = 0, t = 0;
    return cudaMemGetInfo(&f, &t) == cudaSuccess ? f : UINT64_MAX;
}

int
main(void)
{
    CUmemGenericAllocationHandle h[11];
    cudaSetDevice(1);
    for (int i = 0; i < 10; i++)
        h[i] = page_on(1);
    uint64_t want1 = CAP - CTX - 10 * PAGE;
    ok(drv_free() == want1, "device 1 current: cuMemGetInfo counts its 10 pages", drv_free(),
       want1);
    ok(rt_free() == want1, "device 1 current: cudaMemGetInfo agrees", rt_free(), want1);
    cudaSetDevice(0);
    ok(drv_free() == CAP - CTX, "device 0 current: cuMemGetInfo counts none of device 1's pages",
       drv_free(), CAP - CTX);
    h[10] = page_on(1);
    ok(drv_free() == CAP - CTX, "a page on device 1 made while device 0 is current: not on 0",
       drv_free(), CAP - CTX);
    CUcontext c1 = NULL;
    cuDevicePrimaryCtxRetain(&c1, 1);
    cuCtxSetCurrent(c1);
    int d = -1;
    cudaGetDevice(&d);
    ok(d == 1, "cuCtxSetCurrent(device 1's context): cudaGetDevice says 1", (unsigned)d, 1);
    ok(drv_free() == want1 - PAGE, "... and cuMemGetInfo counts device 1's 11 pages", drv_free(),
       want1 - PAGE);
    cuCtxSetCurrent(NULL);
    size_t f = 0, t = 0;
    CUresult rc = cuMemGetInfo(&f, &t);
    ok(rc == CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent(NULL): no context", (unsigned)rc,
       CUDA_ERROR_INVALID_CONTEXT);
    cudaSetDevice(1);
    for (int i = 0; i < 11; i++)
        cuMemRelease(h[i]);
    ok(drv_free() == CAP - CTX, "released: device 1 all but its context free", drv_free(),
       CAP - CTX);
    printf("1..%d\n", g_n);
    return g_failed ? 1 : 0;
}
