/* hooks_driver.c: CUDA driver entry points handed out as pointers.
 *
 * PyTorch's expandable segments and NCCL never call cuMemCreate & co. by
 * symbol: they obtain pointers ([PT] in docs/sources.md) from
 *   cudaGetDriverEntryPoint[ByVersion][_ptsz]   (libc10_cuda, NCCL 12.x/13)
 *   cuGetProcAddress / cuGetProcAddress_v2      (libcudart, static cudart)
 *   dlsym(libcuda handle, "cu...")              (older PyTorch, static cudart)
 * Each route ends in wrap_base()/wrap_abi(), which hands back a wrapper from
 * the table below and keeps the real pointer. Wrappers are keyed by ABI
 * name: cuGetProcAddress takes base names and a version ("cuMemAlloc" at
 * 3020+ is cuMemAlloc_v2), dlsym takes ABI names, and the per-thread flag
 * selects the _ptsz variants of stream-taking functions. A pointer that is
 * already one of ours is never wrapped again.
 *
 * Runtime calls made by our own runtime hooks reach these wrappers with the
 * guard held (libcudart's cudaMalloc is cuMemAlloc_v2 inside), so a
 * runtime allocation is recorded once, at the runtime level.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "config.h"
#include "record.h"
#include "resolve.h"
#include "writer.h"

/* The runtime's per-thread-default-stream ABI variants of the entry-point
 * getters (exported by libcudart 12/13, not declared in its header). */
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
                                         unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus);

typedef CUresult (*fn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*fn_free)(CUdeviceptr);
typedef CUresult (*fn_alloc_async)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*fn_free_async)(CUdeviceptr, CUstream);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*fn_meminfo)(size_t *, size_t *);
typedef CUresult (*fn_ctx_set)(CUcontext);
typedef CUresult (*fn_getproc4)(const char *, void **, int, cuuint64_t);
typedef CUresult (*fn_getproc5)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

#define CALLER() ((uint64_t)(uintptr_t)__builtin_return_address(0))

/* ---- the wrapper table ---- */

enum drv_id {
    D_MEM_ALLOC,
    D_MEM_FREE,
    D_ALLOC_ASYNC,
    D_ALLOC_ASYNC_PTSZ,
    D_FREE_ASYNC,
    D_FREE_ASYNC_PTSZ,
    D_CREATE,
    D_RELEASE,
    D_MAP,
    D_UNMAP,
    D_RESERVE,
    D_ADDR_FREE,
    D_MEMINFO,
    D_CTX_SET,
    D_GETPROC4,
    D_GETPROC5,
    D_COUNT
};

static _Atomic(void *) g_real[D_COUNT];

static inline void *
real_of(enum drv_id id)
{
    return atomic_load_explicit(&g_real[id], memory_order_acquire);
}

/* The device of this thread's current context, asked once (cuCtxGetDevice
 * creates no context; a driver memory call that just succeeded proves one
 * is current). Runtime hooks learn it from cudaGetDevice the same way. */
static void *_Atomic g_ctx_get_device;

static void
learn_device(void)
{
    rs_learn_device(&g_ctx_get_device, "cuCtxGetDevice", RS_LIB_CUDA);
}

/* OOM or other failure of a driver allocation. */
static void
alloc_failed(uint16_t api, uint64_t size, uint64_t caller, CUresult rc)
{
    size_t f = 0, t = 0;
    int ms = -1;
    fn_meminfo mi = (fn_meminfo)real_of(D_MEMINFO);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && mi)
        ms = (int)mi(&f, &t);
    rs_record_oom(api, RS_MEM_DEVICE, size, caller, (int)rc, f, t, ms);
}

/* After a successful driver allocation: the rate-limited memory sample
 * (rs_meminfo_due). Without it a job whose device memory comes only from
 * the driver (PyTorch's expandable segments allocate with cuMemCreate,
 * never cudaMalloc) has no capacity or context in its trace. Taken like the
 * runtime hooks' samples, with cudaMemGetInfo (the runtime is loaded in
 * every PyTorch process), else with libcuda's cuMemGetInfo_v2. */
static void *_Atomic g_meminfo_sym;   /* cudaMemGetInfo or cuMemGetInfo_v2 */
static _Atomic int g_meminfo_is_runtime;

static void
driver_sample(int dev)
{
    void *q = atomic_load_explicit(&g_meminfo_sym, memory_order_acquire);
    if (!q) {
        int rt = 1;
        q = rs_resolve_sym("cudaMemGetInfo", RS_LIB_CUDART);
        if (!q) {
            rt = 0;
            q = real_of(D_MEMINFO);
            if (!q)
                q = rs_resolve_sym("cuMemGetInfo_v2", RS_LIB_CUDA);
        }
        if (!q)
            return;
        atomic_store_explicit(&g_meminfo_is_runtime, rt, memory_order_relaxed);
        atomic_store_explicit(&g_meminfo_sym, q, memory_order_release);
    }
    if (!rs_meminfo_due())
        return;
    size_t f = 0, t = 0;
    int rc = atomic_load_explicit(&g_meminfo_is_runtime, memory_order_relaxed)
                 ? (int)((__typeof__(&cudaMemGetInfo))q)(&f, &t)
                 : (int)((fn_meminfo)q)(&f, &t);
    rs_record_meminfo(RS_MEMINFO_SAMPLE, f, t, dev, rc);
}

#define PASS_THROUGH() (t_rs.guard || !rs_enabled())

static CUresult
w_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    fn_alloc real = (fn_alloc)real_of(D_MEM_ALLOC);
    if (PASS_THROUGH())
        return real(dptr, bytesize);
    uint64_t caller = CALLER();
    t_rs.guard++;
    CUresult rc = real(dptr, bytesize);
    if (rs_trace_open()) {
        learn_device();
        if (rc == CUDA_SUCCESS) {
            rs_record_alloc(RS_API_cuMemAlloc_v2, RS_MEM_DEVICE, dptr ? (uint64_t)*dptr : 0,
                            bytesize, 0, caller, 0);
            driver_sample(t_rs.device);
        } else
            alloc_failed(RS_API_cuMemAlloc_v2, bytesize, caller, rc);
    }
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuMemFree_v2(CUdeviceptr dptr)
{
    fn_free real = (fn_free)real_of(D_MEM_FREE);
    if (PASS_THROUGH())
        return real(dptr);
    uint64_t caller = CALLER();
    t_rs.guard++;
    uint64_t t0 = rs_now_ns();
    CUresult rc = real(dptr);
    if (dptr && rs_trace_open() && (learn_device(), 1))
        rs_record_free_at(t0, RS_API_cuMemFree_v2, RS_MEM_DEVICE, (uint64_t)dptr, 0, caller,
                          (int)rc);
    t_rs.guard--;
    return rc;
}

#define ALLOC_ASYNC(fname, id, api)                                                             \
    static CUresult fname(CUdeviceptr *dptr, size_t bytesize, CUstream stream)                \
    {                                                                                         \
        fn_alloc_async real = (fn_alloc_async)real_of(id);                                    \
        if (PASS_THROUGH())                                                                   \
            return real(dptr, bytesize, stream);                                              \
        uint64_t caller = CALLER();                                                           \
        t_rs.guard++;                                                                         \
        CUresult rc = real(dptr, bytesize, stream);                                           \
        if (rs_trace_open()) {                                                                \
            learn_device();                                                                   \
            if (rc == CUDA_SUCCESS)                                                           \
                rs_record_alloc(api, RS_MEM_DEVICE, dptr ? (uint64_t)*dptr : 0, bytesize,     \
                                (uint64_t)(uintptr_t)stream, caller, 0);                      \
            else                                                                              \
                alloc_failed(api, bytesize, caller, rc);                                      \
        }                                                                                     \
        t_rs.guard--;                                                                         \
        return rc;                                                                            \
    }
ALLOC_ASYNC(w_cuMemAllocAsync, D_ALLOC_ASYNC, RS_API_cuMemAllocAsync)
ALLOC_ASYNC(w_cuMemAllocAsync_ptsz, D_ALLOC_ASYNC_PTSZ, RS_API_cuMemAllocAsync_ptsz)

#define FREE_ASYNC(fname, id, api)                                                              \
    static CUresult fname(CUdeviceptr dptr, CUstream stream)                                  \
    {                                                                                         \
        fn_free_async real = (fn_free_async)real_of(id);                                      \
        if (PASS_THROUGH())                                                                   \
            return real(dptr, stream);                                                        \
        uint64_t caller = CALLER();                                                           \
        t_rs.guard++;                                                                         \
        uint64_t t0 = rs_now_ns();                                                            \
        CUresult rc = real(dptr, stream);                                                     \
        if (dptr && rs_trace_open() && (learn_device(), 1))                                   \
            rs_record_free_at(t0, api, RS_MEM_DEVICE, (uint64_t)dptr,                         \
                              (uint64_t)(uintptr_t)stream, caller, (int)rc);                  \
        t_rs.guard--;                                                                         \
        return rc;                                                                            \
    }
FREE_ASYNC(w_cuMemFreeAsync, D_FREE_ASYNC, RS_API_cuMemFreeAsync)
FREE_ASYNC(w_cuMemFreeAsync_ptsz, D_FREE_ASYNC_PTSZ, RS_API_cuMemFreeAsync_ptsz)

static CUresult
w_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
              unsigned long long flags)
{
    fn_create real = (fn_create)real_of(D_CREATE);
    if (PASS_THROUGH())
        return real(handle, size, prop, flags);
    uint64_t caller = CALLER();
    t_rs.guard++;
    CUresult rc = real(handle, size, prop, flags);
    int dev = (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) ? prop->location.id
                                                                          : -1;
    if (rs_trace_open()) {
        learn_device();
        rs_record_vmm(RS_REC_VMM_CREATE, RS_API_cuMemCreate,
                      (rc == CUDA_SUCCESS && handle) ? (uint64_t)*handle : 0, 0, size, 0, caller,
                      dev >= 0 ? dev : t_rs.device, (int)rc);
        /* Out of physical memory is the expandable-segments OOM. */
        if (rc == CUDA_ERROR_OUT_OF_MEMORY)
            alloc_failed(RS_API_cuMemCreate, size, caller, rc);
        else if (rc == CUDA_SUCCESS)
            driver_sample(dev >= 0 ? dev : t_rs.device);
    }
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    fn_release real = (fn_release)real_of(D_RELEASE);
    if (PASS_THROUGH())
        return real(handle);
    uint64_t caller = CALLER();
    t_rs.guard++;
    CUresult rc = real(handle);
    if (rs_trace_open())
        rs_record_vmm(RS_REC_VMM_RELEASE, RS_API_cuMemRelease, (uint64_t)handle, 0, 0, 0, caller,
                      t_rs.device, (int)rc);
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
           unsigned long long flags)
{
    fn_map real = (fn_map)real_of(D_MAP);
    if (PASS_THROUGH())
        return real(ptr, size, offset, handle, flags);
    uint64_t caller = CALLER();
    t_rs.guard++;
    CUresult rc = real(ptr, size, offset, handle, flags);
    if (rs_trace_open())
        rs_record_vmm(RS_REC_VMM_MAP, RS_API_cuMemMap, (uint64_t)handle, (uint64_t)ptr, size,
                      offset, caller, (learn_device(), t_rs.device), (int)rc);
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    fn_unmap real = (fn_unmap)real_of(D_UNMAP);
    if (PASS_THROUGH())
        return real(ptr, size);
    uint64_t caller = CALLER();
    t_rs.guard++;
    CUresult rc = real(ptr, size);
    if (rs_trace_open())
        rs_record_vmm(RS_REC_VMM_UNMAP, RS_API_cuMemUnmap, 0, (uint64_t)ptr, size, 0, caller,
                      t_rs.device, (int)rc);
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                      unsigned long long flags)
{
    fn_reserve real = (fn_reserve)real_of(D_RESERVE);
    if (PASS_THROUGH())
        return real(ptr, size, alignment, addr, flags);
    uint64_t caller = CALLER();
    t_rs.guard++;
    CUresult rc = real(ptr, size, alignment, addr, flags);
    if (rs_trace_open())
        rs_record_vmm(RS_REC_VA_RESERVE, RS_API_cuMemAddressReserve, 0,
                      (rc == CUDA_SUCCESS && ptr) ? (uint64_t)*ptr : 0, size, alignment, caller,
                      (learn_device(), t_rs.device), (int)rc);
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    fn_addr_free real = (fn_addr_free)real_of(D_ADDR_FREE);
    if (PASS_THROUGH())
        return real(ptr, size);
    uint64_t caller = CALLER();
    t_rs.guard++;
    CUresult rc = real(ptr, size);
    if (rs_trace_open())
        rs_record_vmm(RS_REC_VA_FREE, RS_API_cuMemAddressFree, 0, (uint64_t)ptr, size, 0, caller,
                      t_rs.device, (int)rc);
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    fn_meminfo real = (fn_meminfo)real_of(D_MEMINFO);
    if (PASS_THROUGH())
        return real(free_bytes, total_bytes);
    t_rs.guard++;
    CUresult rc = real(free_bytes, total_bytes);
    if (rs_trace_open())
        rs_record_meminfo(RS_MEMINFO_APP, (rc == CUDA_SUCCESS && free_bytes) ? *free_bytes : 0,
                          (rc == CUDA_SUCCESS && total_bytes) ? *total_bytes : 0, t_rs.device,
                          (int)rc);
    t_rs.guard--;
    return rc;
}

static CUresult
w_cuCtxSetCurrent(CUcontext ctx)
{
    fn_ctx_set real = (fn_ctx_set)real_of(D_CTX_SET);
    if (PASS_THROUGH())
        return real(ctx);
    t_rs.guard++;
    CUresult rc = real(ctx);
    int dev = -1;
    if (rc == CUDA_SUCCESS && ctx) {
        dev = rs_query_device(&g_ctx_get_device, "cuCtxGetDevice", RS_LIB_CUDA);
        if (dev >= 0)
            t_rs.device = (int8_t)dev;
    }
    if (rs_trace_open())
        rs_record_ctx((uint64_t)(uintptr_t)ctx, dev, (int)rc);
    t_rs.guard--;
    return rc;
}

static void *wrap_base(const char *symbol, void *real, int version, uint64_t flags);

static CUresult
w_cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    fn_getproc4 real = (fn_getproc4)real_of(D_GETPROC4);
    CUresult rc = real(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS && pfn && *pfn && symbol && !t_rs.guard)
        *pfn = wrap_base(symbol, *pfn, version, flags);
    return rc;
}

static CUresult
w_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                      CUdriverProcAddressQueryResult *status)
{
    fn_getproc5 real = (fn_getproc5)real_of(D_GETPROC5);
    CUresult rc = real(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && pfn && *pfn && symbol && !t_rs.guard)
        *pfn = wrap_base(symbol, *pfn, version, flags);
    return rc;
}

struct drv_wrapper {
    const char *abi;      /* name dlsym sees */
    void *wrapper;
};

static const struct drv_wrapper k_wrappers[D_COUNT] = {
    [D_MEM_ALLOC] = {"cuMemAlloc_v2", (void *)w_cuMemAlloc_v2},
    [D_MEM_FREE] = {"cuMemFree_v2", (void *)w_cuMemFree_v2},
    [D_ALLOC_ASYNC] = {"cuMemAllocAsync", (void *)w_cuMemAllocAsync},
    [D_ALLOC_ASYNC_PTSZ] = {"cuMemAllocAsync_ptsz", (void *)w_cuMemAllocAsync_ptsz},
    [D_FREE_ASYNC] = {"cuMemFreeAsync", (void *)w_cuMemFreeAsync},
    [D_FREE_ASYNC_PTSZ] = {"cuMemFreeAsync_ptsz", (void *)w_cuMemFreeAsync_ptsz},
    [D_CREATE] = {"cuMemCreate", (void *)w_cuMemCreate},
    [D_RELEASE] = {"cuMemRelease", (void *)w_cuMemRelease},
    [D_MAP] = {"cuMemMap", (void *)w_cuMemMap},
    [D_UNMAP] = {"cuMemUnmap", (void *)w_cuMemUnmap},
    [D_RESERVE] = {"cuMemAddressReserve", (void *)w_cuMemAddressReserve},
    [D_ADDR_FREE] = {"cuMemAddressFree", (void *)w_cuMemAddressFree},
    [D_MEMINFO] = {"cuMemGetInfo_v2", (void *)w_cuMemGetInfo_v2},
    [D_CTX_SET] = {"cuCtxSetCurrent", (void *)w_cuCtxSetCurrent},
    [D_GETPROC4] = {"cuGetProcAddress", (void *)w_cuGetProcAddress},
    [D_GETPROC5] = {"cuGetProcAddress_v2", (void *)w_cuGetProcAddress_v2},
};

/* Base names as cuGetProcAddress / cudaGetDriverEntryPoint take them,
 * with the CUDA version from which the wrapped ABI applies (cuda.h's
 * *_v2 defines; cuGetProcAddress itself is the 5-argument _v2 from 12000). */
struct drv_base {
    const char *base;
    int min_version;
    enum drv_id id;
    int ptsz_id;          /* -1: not stream-taking */
};

static const struct drv_base k_bases[] = {
    {"cuMemAlloc", 3020, D_MEM_ALLOC, -1},
    {"cuMemFree", 3020, D_MEM_FREE, -1},
    {"cuMemGetInfo", 3020, D_MEMINFO, -1},
    {"cuMemAllocAsync", 11020, D_ALLOC_ASYNC, D_ALLOC_ASYNC_PTSZ},
    {"cuMemFreeAsync", 11020, D_FREE_ASYNC, D_FREE_ASYNC_PTSZ},
    {"cuMemCreate", 10020, D_CREATE, -1},
    {"cuMemRelease", 10020, D_RELEASE, -1},
    {"cuMemMap", 10020, D_MAP, -1},
    {"cuMemUnmap", 10020, D_UNMAP, -1},
    {"cuMemAddressReserve", 10020, D_RESERVE, -1},
    {"cuMemAddressFree", 10020, D_ADDR_FREE, -1},
    {"cuCtxSetCurrent", 4000, D_CTX_SET, -1},
};

/* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM and
 * cudaEnablePerThreadDefaultStream share this bit. */
#define RS_PER_THREAD_FLAG 0x2u

static int
is_wrapper(void *p)
{
    for (int i = 0; i < D_COUNT; i++)
        if (k_wrappers[i].wrapper == p)
            return 1;
    return 0;
}

static void *
wrap_id(enum drv_id id, void *real)
{
    void *expect = NULL;
    if (!atomic_compare_exchange_strong(&g_real[id], &expect, real) && expect != real)
        return real; /* a second, different libcuda: leave it unwrapped */
    return k_wrappers[id].wrapper;
}

/* A pointer looked up by ABI name (dlsym). */
static void *
wrap_abi(const char *name, void *real)
{
    if (is_wrapper(real))
        return real;
    for (int i = 0; i < D_COUNT; i++)
        if (!strcmp(name, k_wrappers[i].abi))
            return wrap_id((enum drv_id)i, real);
    return real;
}

/* A pointer looked up by base name, CUDA version and flags. */
static void *
wrap_base(const char *symbol, void *real, int version, uint64_t flags)
{
    if (is_wrapper(real))
        return real;
    if (!strcmp(symbol, "cuGetProcAddress"))
        return wrap_id(version >= 12000 ? D_GETPROC5 : D_GETPROC4, real);
    for (size_t i = 0; i < sizeof k_bases / sizeof *k_bases; i++) {
        const struct drv_base *b = &k_bases[i];
        if (strcmp(symbol, b->base) != 0)
            continue;
        if (version < b->min_version)
            return real; /* an older ABI we do not wrap */
        if (b->ptsz_id >= 0 && (flags & RS_PER_THREAD_FLAG))
            return wrap_id((enum drv_id)b->ptsz_id, real);
        return wrap_id(b->id, real);
    }
    return real;
}

/* ---- dlsym (the exported symbol is the trampoline) ---- */

RS_HIDDEN void *rs_real_dlsym;
RS_HIDDEN void *rs_resolve_real_dlsym(void);
RS_HIDDEN void *rs_dlsym_handle(void *handle, const char *name);

/* Sanitizer runtimes (ASan, TSan) call dlsym(RTLD_NEXT, ...) from their
 * own start-up, before they can run instrumented code: the first such call
 * lands here through the trampoline, so this function is built without
 * sanitizer instrumentation and touches nothing else of the shim's. */
__attribute__((no_sanitize("address", "thread", "undefined"))) void *
rs_resolve_real_dlsym(void)
{
    void *p = __atomic_load_n(&rs_real_dlsym, __ATOMIC_ACQUIRE);
    if (p)
        return p;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !p && i < sizeof versions / sizeof *versions; i++)
        p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&rs_real_dlsym, p, __ATOMIC_RELEASE);
    return p;
}

void *
rs_dlsym_handle(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = (void *(*)(void *, const char *))rs_resolve_real_dlsym();
    if (!real)
        return NULL;
    void *p = real(handle, name);
    if (!p || !name || name[0] != 'c' || name[1] != 'u' || t_rs.guard || !rs_enabled())
        return p;
    return wrap_abi(name, p);
}

/* ---- the runtime's entry-point getters ---- */

static int
runtime_version(void)
{
    static atomic_int v;
    int x = atomic_load(&v);
    if (!x) {
        t_rs.guard++;
        x = rs_cuda_runtime_version();
        t_rs.guard--;
        if (!x)
            x = 12000; /* unknown: the oldest ABI these getters exist with */
        atomic_store(&v, x);
    }
    return x;
}

#define ENTRY_POINT(name, version_expr, ...)                                                    \
    __typeof__(&name) real = RS_REAL(name);                                                   \
    if (!real)                                                                                \
        return cudaErrorNotSupported;                                                         \
    cudaError_t rc = real(__VA_ARGS__);                                                       \
    if (rc == cudaSuccess && funcPtr && *funcPtr && symbol && !t_rs.guard && rs_enabled())   \
        *funcPtr = wrap_base(symbol, *funcPtr, (version_expr), flags);                        \
    return rc

/* Deprecated in CUDA 13 but still exported and used by NCCL and older
 * PyTorch built against 12.x. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
RS_EXPORT cudaError_t
cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                        enum cudaDriverEntryPointQueryResult *driverStatus)
{
    ENTRY_POINT(cudaGetDriverEntryPoint, runtime_version(), symbol, funcPtr, flags, driverStatus);
}
#pragma GCC diagnostic pop

RS_EXPORT cudaError_t
cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
    ENTRY_POINT(cudaGetDriverEntryPoint_ptsz, runtime_version(), symbol, funcPtr, flags,
                driverStatus);
}

RS_EXPORT cudaError_t
cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                 unsigned long long flags,
                                 enum cudaDriverEntryPointQueryResult *driverStatus)
{
    ENTRY_POINT(cudaGetDriverEntryPointByVersion, (int)cudaVersion, symbol, funcPtr, cudaVersion,
                flags, driverStatus);
}

RS_EXPORT cudaError_t
cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                      unsigned int cudaVersion, unsigned long long flags,
                                      enum cudaDriverEntryPointQueryResult *driverStatus)
{
    ENTRY_POINT(cudaGetDriverEntryPointByVersion_ptsz, (int)cudaVersion, symbol, funcPtr,
                cudaVersion, flags, driverStatus);
}
