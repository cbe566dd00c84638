/* ms_cumem.c: libmegasim_cumem_allocator.so, a colocated inference engine's
 * memory pool in the training process (docs/megasim.md, faults table).
 *
 * What it stands for: an RL job that keeps its rollout engine in the same
 * process, whose weights and KV cache live in a torch.cuda.MemPool backed by
 * a CUDAPluggableAllocator: vLLM's sleep mode (CuMemAllocator, the
 * cumem_allocator extension). That allocator maps memory with the driver's
 * VMM calls (cuMemCreate, cuMemAddressReserve, cuMemMap, cuMemSetAccess),
 * called directly: the extension links against libcuda.so.1. Here the same
 * calls go to the mock libcuda through this library's PLT. The shim hooks
 * driver entry points handed out as pointers (cudaGetDriverEntryPoint*,
 * cuGetProcAddress, dlsym), not direct links, so a trace does not see this
 * memory except in cudaMemGetInfo (the one device memory state of the
 * doubles counts it). */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define GRANULARITY (2ull << 20)

/* Maps `size` bytes (rounded up to the 2 MiB granularity) on device `dev`;
 * *ptr gets the virtual address. Returns 0, else the failing CUresult. */
EXPORT int
ms_cumem_alloc(int dev, uint64_t size, uint64_t *ptr)
{
    size = (size + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle h;
    CUresult rc = cuMemCreate(&h, size, &prop, 0);
    if (rc != CUDA_SUCCESS)
        return (int)rc;
    CUdeviceptr va = 0;
    if ((rc = cuMemAddressReserve(&va, size, 0, 0, 0)) != CUDA_SUCCESS ||
        (rc = cuMemMap(va, size, 0, h, 0)) != CUDA_SUCCESS)
        return (int)rc;
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location = prop.location;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((rc = cuMemSetAccess(va, size, &d, 1)) != CUDA_SUCCESS)
        return (int)rc;
    *ptr = va;
    return 0;
}
