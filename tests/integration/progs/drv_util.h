/* drv_util.h: driver-API helpers for the part-2 test programs: typed
 * pointers of the driver functions they obtain by name, and the runtime
 * getters' _ptsz variants (cuda_runtime_api.h declares them only under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM). */
#ifndef ITEST_DRV_UTIL_H
#define ITEST_DRV_UTIL_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <libgen.h>
#include <string.h>

#include "prog_util.h"

#undef cuGetProcAddress

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*meminfo_fn)(size_t *, size_t *);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*vafree_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*setaccess_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*ctxset_fn)(CUcontext);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*version_fn)(int *);
typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*gpa4_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa5_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

extern cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
                                                          unsigned long long flags,
                                                          enum cudaDriverEntryPointQueryResult *driverStatus);
extern cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus);

#define DRV_FAIL(...)                                  \
    do {                                               \
        printf("FAIL: %s:%d: ", __FILE__, __LINE__);   \
        printf(__VA_ARGS__);                           \
        printf("\n");                                  \
        fflush(stdout);                                \
        exit(3);                                       \
    } while (0)

/* PyTorch's c10::cuda::DriverAPI::get_symbol: by version 12000. */
static inline void *
drv_by_version(const char *name, unsigned long long flags)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = (enum cudaDriverEntryPointQueryResult)99;
    OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, flags, &q));
    if (q != cudaDriverEntryPointSuccess || !fn)
        DRV_FAIL("cudaGetDriverEntryPointByVersion(%s): status %d fn %p", name, (int)q, fn);
    return fn;
}

/* "LIB:SYMBOL" of a function pointer (basename of the object), or "none". */
static inline void
drv_where(const void *fn, char *buf, size_t n)
{
    Dl_info di;
    if (!fn || !dladdr(fn, &di) || !di.dli_fname) {
        snprintf(buf, n, "none");
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s", di.dli_fname);
    snprintf(buf, n, "%s:%s", basename(path), di.dli_sname ? di.dli_sname : "?");
}

#endif
