/* cudart_memory.c: mock libcudart synchronous allocation entry points. */
#include <cuda_runtime_api.h>

#include "mock_state.h"

#define CHECK_FAIL(fn)                       \
    do {                                     \
        int injected_ = mock_fail_check(fn); \
        if (injected_)                       \
            return (cudaError_t)mock_set_error(injected_); \
    } while (0)

cudaError_t CUDARTAPI
cudaMalloc(void **devPtr, size_t size)
{
    if (devPtr)
        *devPtr = NULL;
    CHECK_FAIL("cudaMalloc");
    if (!devPtr)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    uint64_t p = 0;
    int rc = mock_dev_alloc(mock_current_device(), size, MOCK_KIND_DEVICE, &p);
    *devPtr = (void *)(uintptr_t)p;
    return (cudaError_t)mock_set_error(rc);
}

cudaError_t CUDARTAPI
cudaFree(void *devPtr)
{
    CHECK_FAIL("cudaFree");
    mock_touch_device(mock_current_device());
    if (!devPtr)
        return cudaSuccess;
    int rc = mock_release((uint64_t)(uintptr_t)devPtr,
                          (1u << MOCK_KIND_DEVICE) | (1u << MOCK_KIND_ASYNC) | (1u << MOCK_KIND_MANAGED),
                          NULL);
    return (cudaError_t)mock_set_error(rc);
}

cudaError_t CUDARTAPI
cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    (void)flags;
    if (devPtr)
        *devPtr = NULL;
    CHECK_FAIL("cudaMallocManaged");
    if (!devPtr)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    mock_touch_device(mock_current_device());
    return (cudaError_t)mock_set_error(mock_host_alloc(size, MOCK_KIND_MANAGED, devPtr));
}

cudaError_t CUDARTAPI
cudaMallocHost(void **ptr, size_t size)
{
    if (ptr)
        *ptr = NULL;
    CHECK_FAIL("cudaMallocHost");
    if (!ptr)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    mock_touch_device(mock_current_device());
    return (cudaError_t)mock_set_error(mock_host_alloc(size, MOCK_KIND_HOST, ptr));
}

cudaError_t CUDARTAPI
cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    (void)flags;
    if (pHost)
        *pHost = NULL;
    CHECK_FAIL("cudaHostAlloc");
    if (!pHost)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    mock_touch_device(mock_current_device());
    return (cudaError_t)mock_set_error(mock_host_alloc(size, MOCK_KIND_HOST, pHost));
}

cudaError_t CUDARTAPI
cudaFreeHost(void *ptr)
{
    CHECK_FAIL("cudaFreeHost");
    if (!ptr)
        return cudaSuccess;
    return (cudaError_t)mock_set_error(
        mock_release((uint64_t)(uintptr_t)ptr, 1u << MOCK_KIND_HOST, NULL));
}
