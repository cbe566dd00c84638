/* cudart_driver.c: mock libcudart driver entry points, done like the real
 * runtime: the first call dlopen()s "libcuda.so.1", looks up cuInit and
 * cuGetProcAddress_v2 with dlsym (so a preloaded dlsym sees these lookups)
 * and asks cuGetProcAddress_v2 for the symbol. cudaGetDriverEntryPoint asks
 * for the runtime's own version (13000); ...ByVersion for the given one.
 * The _ptsz variants treat cudaEnableDefault as per-thread, as a runtime
 * built with per-thread default streams does. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "mock_state.h"

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*init_fn)(unsigned int);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static gpa_v2_fn g_gpa;

static void
load_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "mock-cudart: dlopen libcuda.so.1: %s\n", dlerror());
        return;
    }
    init_fn init = (init_fn)dlsym(h, "cuInit");
    gpa_v2_fn gpa = (gpa_v2_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!init || !gpa || init(0) != CUDA_SUCCESS) {
        fprintf(stderr, "mock-cudart: libcuda.so.1 lacks cuInit/cuGetProcAddress_v2\n");
        return;
    }
    g_gpa = gpa;
}

static cudaError_t
entry_point(const char *symbol, void **funcPtr, int version, unsigned long long flags,
            enum cudaDriverEntryPointQueryResult *driverStatus, int ptsz)
{
    if (!symbol || !funcPtr || (flags & ~3ull))
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *funcPtr = NULL;
    pthread_once(&g_once, load_driver);
    if (!g_gpa)
        return (cudaError_t)mock_set_error(cudaErrorInsufficientDriver);
    cuuint64_t cuflags = CU_GET_PROC_ADDRESS_DEFAULT;
    if (flags & cudaEnableLegacyStream)
        cuflags = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    else if ((flags & cudaEnablePerThreadDefaultStream) || ptsz)
        cuflags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = g_gpa(symbol, funcPtr, version, cuflags, &st);
    if (driverStatus)
        *driverStatus = rc == CUDA_SUCCESS ? cudaDriverEntryPointSuccess
                        : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? cudaDriverEntryPointVersionNotSufficent
                                                                           : cudaDriverEntryPointSymbolNotFound;
    if (rc != CUDA_SUCCESS) {
        *funcPtr = NULL;
        return driverStatus ? cudaSuccess : (cudaError_t)mock_set_error(cudaErrorSymbolNotFound);
    }
    return cudaSuccess;
}

#define CHECK_FAIL(fn)                       \
    do {                                     \
        int injected_ = mock_fail_check(fn); \
        if (injected_)                       \
            return (cudaError_t)mock_set_error(injected_); \
    } while (0)

cudaError_t CUDARTAPI
cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                        enum cudaDriverEntryPointQueryResult *driverStatus)
{
    CHECK_FAIL("cudaGetDriverEntryPoint");
    return entry_point(symbol, funcPtr, MOCK_RUNTIME_VERSION, flags, driverStatus, 0);
}

cudaError_t CUDARTAPI
cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
    CHECK_FAIL("cudaGetDriverEntryPoint_ptsz");
    return entry_point(symbol, funcPtr, MOCK_RUNTIME_VERSION, flags, driverStatus, 1);
}

cudaError_t CUDARTAPI
cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                 unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus)
{
    CHECK_FAIL("cudaGetDriverEntryPointByVersion");
    return entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus, 0);
}

cudaError_t CUDARTAPI
cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                      unsigned long long flags,
                                      enum cudaDriverEntryPointQueryResult *driverStatus)
{
    CHECK_FAIL("cudaGetDriverEntryPointByVersion_ptsz");
    return entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus, 1);
}
