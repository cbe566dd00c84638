/* ms_nccl.c: libmegasim_nccl.so, megasim's stand-in for NCCL's own device
 * buffers. Real NCCL allocates its channel buffers itself (cuMem* through
 * driver entry points when NCCL_CUMEM_ENABLE resolves on, else cudaMalloc),
 * outside PyTorch's allocator. Until the mock libcuda/libnccl doubles land
 * (tests/doubles part 2) this library models the NCCL_CUMEM_ENABLE=0 path
 * with a dynamically linked cudart: a cudaMalloc whose caller is a module
 * other than the allocator's, so the memory is "outside PyTorch" by owner. */
#include <cuda_runtime_api.h>
#include <stdint.h>

__attribute__((visibility("default"))) int
ms_nccl_buffer_alloc(uint64_t size, uint64_t *ptr)
{
    void *p = NULL;
    int rc = (int)cudaMalloc(&p, (size_t)size);
    if (rc)
        (void)cudaGetLastError();
    *ptr = (uint64_t)(uintptr_t)p;
    return rc;
}

__attribute__((visibility("default"))) int
ms_nccl_buffer_free(uint64_t ptr)
{
    return (int)cudaFree((void *)(uintptr_t)ptr);
}

/* NCCL's own NVTX ranges: domain "NCCL", the API name as a registered string
 * (NCCL src/include/nvtx.h), pushed around each collective. The collective
 * itself is not simulated (no data moves); when the mock libnccl lands,
 * megasim calls ncclAllReduce & co. instead and NCCL's real ranges follow. */
#include <nvtx3/nvToolsExt.h>
#include <string.h>

static nvtxDomainHandle_t g_nccl_domain;

__attribute__((visibility("default"))) int
ms_nccl_collective(const char *fn, uint64_t bytes)
{
    (void)bytes;
    if (!g_nccl_domain)
        g_nccl_domain = nvtxDomainCreateA("NCCL");
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = nvtxDomainRegisterStringA(g_nccl_domain, fn);
    nvtxDomainRangePushEx(g_nccl_domain, &a);
    nvtxDomainRangePop(g_nccl_domain);
    return 0;
}
