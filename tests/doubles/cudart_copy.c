/* cudart_copy.c: mock libcudart copies, memsets and pointer attributes.
 *
 * Device memory is not backed (no host memory behind device addresses), so:
 *   copies into device memory are dropped; copies out of it give zeros;
 *   host-to-host copies are real (whatever cudaMemcpyKind says);
 *   memsets of device memory are dropped, of host memory real.
 * A pointer is device memory when its page is not mapped in this process
 * (mincore() fails with ENOMEM): every address the mocks hand out for device
 * memory (mock_range_base: ranges the kernel does not map, see mock_state.h)
 * is unmapped, and every host buffer is mapped. Its device is read back from
 * those ranges (mock_range_device). Everything completes at once
 * (cudart_stream.c), so the async variants are the sync ones.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mock_state.h"

/* 1 when `p` is (fake) device memory: its page is not mapped here. */
static int
is_device(const void *p)
{
    static long page;
    if (!page)
        page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);
    unsigned char vec;
    return mincore((void *)a, 1, &vec) != 0 && errno == ENOMEM;
}

/* The device whose address range holds `p`, or the current device. */
static int
device_of(const void *p)
{
    int d = mock_range_device((uint64_t)(uintptr_t)p);
    return d >= 0 && d < mock_device_count() ? d : mock_current_device();
}

static cudaError_t
copy(void *dst, const void *src, size_t count)
{
    if (count == 0)
        return cudaSuccess;
    if (!dst || !src)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (is_device(dst))
        return cudaSuccess;                 /* dropped */
    if (is_device(src))
        memset(dst, 0, count);              /* device memory reads as zeros */
    else
        memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t
cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    (void)kind;
    return copy(dst, src, count);
}

cudaError_t
cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    (void)kind, (void)stream;
    return copy(dst, src, count);
}

cudaError_t
cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                    cudaStream_t stream)
{
    (void)dstDevice, (void)srcDevice, (void)stream;
    return copy(dst, src, count);
}

cudaError_t
cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    (void)kind, (void)stream;
    if (width > dpitch || width > spitch)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    for (size_t r = 0; r < height; r++) {
        cudaError_t rc = copy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
        if (rc != cudaSuccess)
            return rc;
    }
    return cudaSuccess;
}

static cudaError_t
set(void *p, int value, size_t count)
{
    if (count == 0)
        return cudaSuccess;
    if (!p)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    if (!is_device(p))
        memset(p, value, count);
    return cudaSuccess;
}

cudaError_t
cudaMemset(void *devPtr, int value, size_t count)
{
    return set(devPtr, value, count);
}

cudaError_t
cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    (void)stream;
    return set(devPtr, value, count);
}

/* Device memory for unmapped addresses, else unregistered host memory. */
cudaError_t
cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    if (!attributes)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    memset(attributes, 0, sizeof *attributes);
    if (ptr && is_device(ptr)) {
        attributes->type = cudaMemoryTypeDevice;
        attributes->device = device_of(ptr);
        attributes->devicePointer = (void *)ptr;
    } else {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;    /* cudaInvalidDeviceId */
        attributes->hostPointer = (void *)ptr;
    }
    return cudaSuccess;
}

/* Page-locking host memory: nothing to do; the memory stays usable. */
cudaError_t
cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    (void)flags;
    return ptr && size ? cudaSuccess : (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
}

cudaError_t
cudaHostUnregister(void *ptr)
{
    return ptr ? cudaSuccess : (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
}
