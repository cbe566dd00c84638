/* cudart_device.c: mock libcudart devices, memory info, versions, errors. */
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "mock_state.h"

#define CHECK_FAIL(fn)                       \
    do {                                     \
        int injected_ = mock_fail_check(fn); \
        if (injected_)                       \
            return (cudaError_t)mock_set_error(injected_); \
    } while (0)

cudaError_t CUDARTAPI
cudaSetDevice(int device)
{
    CHECK_FAIL("cudaSetDevice");
    if (!mock_valid_device(device))
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_DEVICE);
    mock_set_current_device(device);
    mock_touch_device(device);   /* CUDA 12+: cudaSetDevice creates the primary context */
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaGetDevice(int *device)
{
    CHECK_FAIL("cudaGetDevice");
    if (!device)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *device = mock_current_device();
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaGetDeviceCount(int *count)
{
    CHECK_FAIL("cudaGetDeviceCount");
    if (!count)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *count = mock_device_count();
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaMemGetInfo(size_t *free, size_t *total)
{
    CHECK_FAIL("cudaMemGetInfo");
    int dev = mock_current_device();
    mock_touch_device(dev);
    uint64_t cap = mock_capacity(), used = mock_device_used(dev);
    if (free)
        *free = (size_t)(used >= cap ? 0 : cap - used);
    if (total)
        *total = (size_t)cap;
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaDeviceSynchronize(void)
{
    CHECK_FAIL("cudaDeviceSynchronize");
    mock_touch_device(mock_current_device());
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *runtimeVersion = MOCK_RUNTIME_VERSION;
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *driverVersion = MOCK_DRIVER_VERSION;
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaGetLastError(void)
{
    return (cudaError_t)mock_take_error();
}

cudaError_t CUDARTAPI
cudaPeekAtLastError(void)
{
    return (cudaError_t)mock_peek_error();
}

const char *CUDARTAPI
cudaGetErrorName(cudaError_t error)
{
    switch ((int)error) {
    case 0: return "cudaSuccess";
    case 1: return "cudaErrorInvalidValue";
    case 2: return "cudaErrorMemoryAllocation";
    case 101: return "cudaErrorInvalidDevice";
    default: return "cudaErrorUnknown";
    }
}

const char *CUDARTAPI
cudaGetErrorString(cudaError_t error)
{
    switch ((int)error) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 101: return "invalid device ordinal";
    default: return "unknown error";
    }
}

/* Profiler window (nsys capture range): accepted, nothing to capture. Megatron-LM's
 * --profile path (without --use-pytorch-profiler) calls them through
 * torch.cuda.cudart() at --profile-step-start/--profile-step-end (issue 16). */
cudaError_t CUDARTAPI
cudaProfilerStart(void)
{
    CHECK_FAIL("cudaProfilerStart");
    return cudaSuccess;
}

cudaError_t CUDARTAPI
cudaProfilerStop(void)
{
    CHECK_FAIL("cudaProfilerStop");
    return cudaSuccess;
}
