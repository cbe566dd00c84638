/* cudart_async.c: mock libcudart stream-ordered allocation and memory pools.
 * Only the default pool of each device exists; stream values are opaque. */
#include <cuda_runtime_api.h>

#include "cudart_ptsz.h"
#include "mock_state.h"

#define CHECK_FAIL(fn)                       \
    do {                                     \
        int injected_ = mock_fail_check(fn); \
        if (injected_)                       \
            return (cudaError_t)mock_set_error(injected_); \
    } while (0)

static cudaError_t
malloc_on(int dev, void **devPtr, size_t size)
{
    if (!devPtr)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    uint64_t p = 0;
    int rc = mock_dev_alloc(dev, size, MOCK_KIND_ASYNC, &p);
    *devPtr = (void *)(uintptr_t)p;
    return (cudaError_t)mock_set_error(rc);
}

static cudaError_t
free_async(void *devPtr)
{
    mock_touch_device(mock_current_device());
    if (!devPtr)
        return cudaSuccess;
    return (cudaError_t)mock_set_error(mock_release(
        (uint64_t)(uintptr_t)devPtr, (1u << MOCK_KIND_ASYNC) | (1u << MOCK_KIND_DEVICE), NULL));
}

static cudaError_t
from_pool(void **ptr, size_t size, cudaMemPool_t memPool)
{
    int dev = mock_pool_device((uint64_t)(uintptr_t)memPool);
    if (dev < 0)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    return malloc_on(dev, ptr, size);
}

cudaError_t CUDARTAPI
cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    (void)hStream;
    if (devPtr)
        *devPtr = NULL;
    CHECK_FAIL("cudaMallocAsync");
    return malloc_on(mock_current_device(), devPtr, size);
}

cudaError_t CUDARTAPI
cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    (void)hStream;
    if (devPtr)
        *devPtr = NULL;
    CHECK_FAIL("cudaMallocAsync_ptsz");
    return malloc_on(mock_current_device(), devPtr, size);
}

cudaError_t CUDARTAPI
cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    (void)hStream;
    CHECK_FAIL("cudaFreeAsync");
    return free_async(devPtr);
}

cudaError_t CUDARTAPI
cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    (void)hStream;
    CHECK_FAIL("cudaFreeAsync_ptsz");
    return free_async(devPtr);
}

cudaError_t CUDARTAPI
cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    (void)stream;
    if (ptr)
        *ptr = NULL;
    CHECK_FAIL("cudaMallocFromPoolAsync");
    return from_pool(ptr, size, memPool);
}

cudaError_t CUDARTAPI
cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    (void)stream;
    if (ptr)
        *ptr = NULL;
    CHECK_FAIL("cudaMallocFromPoolAsync_ptsz");
    return from_pool(ptr, size, memPool);
}

cudaError_t CUDARTAPI
cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    CHECK_FAIL("cudaDeviceGetDefaultMemPool");
    if (!memPool)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!mock_valid_device(device))
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_DEVICE);
    mock_touch_device(device);
    *memPool = (cudaMemPool_t)(uintptr_t)mock_default_pool(device);
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    CHECK_FAIL("cudaMemPoolGetAttribute");
    int dev = mock_pool_device((uint64_t)(uintptr_t)memPool);
    if (dev < 0 || !value)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    switch (attr) {
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
        *(unsigned long long *)value = mock_pool_live(dev);
        break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
        *(unsigned long long *)value = mock_pool_high(dev);
        break;
    case cudaMemPoolAttrReleaseThreshold:
        *(unsigned long long *)value = mock_pool_release_threshold(dev);
        break;
    default:
        *(int *)value = 0;   /* reuse flags and the rest: int attributes */
        break;
    }
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    CHECK_FAIL("cudaMemPoolSetAttribute");
    int dev = mock_pool_device((uint64_t)(uintptr_t)memPool);
    if (dev < 0 || !value)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
        mock_pool_set_release_threshold(dev, *(unsigned long long *)value);
        break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
        if (*(unsigned long long *)value != 0)
            return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
        mock_pool_reset_high(dev);
        break;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    default:
        break;
    }
    return cudaSuccess;
}
