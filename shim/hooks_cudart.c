/* hooks_cudart.c: CUDA runtime API hooks (allocation, release, device,
 * memory info). Every hook has one shape:
 *
 *   real = RS_REAL(fn)            missing -> the documented error, logged once
 *   guard held or shim off        -> return real(...)
 *   guard++; real call; record;   (a free's time is taken before the call,
 *   guard--                        so a reuse never precedes its free)
 *
 * The first hooked call creates the trace file (rs_trace_open): a process
 * that never calls CUDA gets none. Nothing here creates a CUDA context:
 * memory samples are taken only right after this thread's own successful
 * CUDA memory call, when its context is necessarily current.
 */
#include <cuda_runtime_api.h>
#include <stdatomic.h>

#include "clock.h"
#include "config.h"
#include "record.h"
#include "resolve.h"
#include "writer.h"

/* libcudart's per-thread-default-stream ABI variants (not in the headers
 * unless CUDA_API_PER_THREAD_DEFAULT_STREAM renames the plain ones). */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream);

#define CALLER() ((uint64_t)(uintptr_t)__builtin_return_address(0))

static _Atomic uint64_t g_last_sample_ns;

/* Managed allocations, so their cudaFree is recorded as managed. A small
 * open-addressing set; empty (one relaxed load per free) in jobs that never
 * use managed memory. When full, frees fall back to "device" and the
 * analyzer pairs them with their ALLOC by address. */
#define RS_MANAGED_SLOTS 4096u
static _Atomic uint64_t g_managed[RS_MANAGED_SLOTS];
static atomic_int g_managed_count;

static uint32_t
managed_slot(uint64_t p)
{
    return (uint32_t)((p >> 9) * 0x9e3779b97f4a7c15ull >> 52) & (RS_MANAGED_SLOTS - 1);
}

static void
managed_add(uint64_t p)
{
    for (uint32_t i = 0, k = managed_slot(p); i < RS_MANAGED_SLOTS; i++, k = (k + 1) & (RS_MANAGED_SLOTS - 1)) {
        uint64_t expect = 0;
        if (atomic_compare_exchange_strong(&g_managed[k], &expect, p)) {
            atomic_fetch_add(&g_managed_count, 1);
            return;
        }
    }
}

/* 1 when p was a managed allocation (and forget it). Tombstones are
 * UINT64_MAX so probing continues past freed slots. */
static int
managed_take(uint64_t p)
{
    if (atomic_load_explicit(&g_managed_count, memory_order_relaxed) == 0)
        return 0;
    for (uint32_t i = 0, k = managed_slot(p); i < RS_MANAGED_SLOTS; i++, k = (k + 1) & (RS_MANAGED_SLOTS - 1)) {
        uint64_t v = atomic_load(&g_managed[k]);
        if (v == 0)
            return 0;
        if (v == p && atomic_compare_exchange_strong(&g_managed[k], &v, UINT64_MAX)) {
            atomic_fetch_sub(&g_managed_count, 1);
            return 1;
        }
    }
    return 0;
}

/* The current device of this thread, asked once from the runtime when no
 * cudaSetDevice was seen (cudaGetDevice creates no context). */
static void
learn_device(void)
{
    static void *_Atomic getdev;
    rs_learn_device(&getdev, "cudaGetDevice", RS_LIB_CUDART);
}

/* Whether a memory sample is due now, and if so claimed by the caller:
 * at most one per RECOMPSHIM_MEMINFO_MS over all threads and all APIs, the
 * first of a file at once (it gives the capacity). Called right after a
 * successful device memory call of the runtime or the driver (record.h). */
int
rs_meminfo_due(void)
{
    uint64_t every = g_rs_cfg.meminfo_interval_ns;
    if (!every)
        return 0;
    /* The allocation record just written took the time: reuse it (clock
     * reads are a fifth of the shim's cost on some VMs). */
    uint64_t now = t_rs.last_ns ? t_rs.last_ns : rs_now_ns();
    uint64_t last = atomic_load_explicit(&g_last_sample_ns, memory_order_relaxed);
    rs_file_header *h = rs_writer_header();
    if (now - last < every &&
        !(h && !__atomic_load_n(&h->device_capacity, __ATOMIC_RELAXED)))
        return 0;
    return atomic_compare_exchange_strong(&g_last_sample_ns, &last, now);
}

/* Rate-limited cudaMemGetInfo after a successful memory call. The common
 * case (sampling off, or the last sample recent and the capacity known)
 * is decided here with three loads, the rest by rs_meminfo_due. */
static inline void
maybe_sample(void)
{
    uint64_t every = g_rs_cfg.meminfo_interval_ns, now = t_rs.last_ns;
    if (!every)
        return;
    rs_file_header *h = rs_writer_state() == RS_W_OPEN ? rs_w_hot.hdr : NULL;
    if (now && now - atomic_load_explicit(&g_last_sample_ns, memory_order_relaxed) < every &&
        h && __atomic_load_n(&h->device_capacity, __ATOMIC_RELAXED))
        return;
    if (!rs_meminfo_due())
        return;
    __typeof__(&cudaMemGetInfo) real = RS_REAL(cudaMemGetInfo);
    if (!real)
        return;
    size_t f = 0, t = 0;
    cudaError_t rc = real(&f, &t);
    rs_record_meminfo(RS_MEMINFO_SAMPLE, f, t, t_rs.device, rc);
}

/* The async mode took effect once a cudaMallocAsync succeeds. */
static atomic_int g_async_seen;

static int
stream_api(uint16_t api)
{
    return api == RS_API_cudaMallocAsync || api == RS_API_cudaMallocAsync_ptsz ||
           api == RS_API_cudaMallocFromPoolAsync || api == RS_API_cudaMallocFromPoolAsync_ptsz;
}

/* Record the outcome of an allocation call. */
static void
after_alloc(uint16_t api, uint8_t mem, cudaError_t rc, void **out, size_t size, uint64_t stream,
            uint64_t caller)
{
    if (!rs_trace_open())
        return;
    learn_device();
    if (rc == cudaSuccess) {
        /* load first: an exchange on every call would write this shared
         * cache line from every thread (107 ns per event at 64 threads) */
        if (stream_api(api) && !atomic_load_explicit(&g_async_seen, memory_order_relaxed) &&
            !atomic_exchange_explicit(&g_async_seen, 1, memory_order_relaxed))
            rs_writer_set_flags(RS_HDR_ASYNC_SEEN);
        if (mem == RS_MEM_MANAGED && out && *out)
            managed_add((uint64_t)(uintptr_t)*out);
        rs_record_alloc(api, mem, out ? (uint64_t)(uintptr_t)*out : 0, size, stream, caller, rc);
        if (mem == RS_MEM_DEVICE)
            maybe_sample();
        return;
    }
    size_t f = 0, t = 0;
    int ms = -1;
    __typeof__(&cudaMemGetInfo) meminfo = RS_REAL(cudaMemGetInfo);
    /* Out of memory implies an initialised context on this thread. */
    if (rc == cudaErrorMemoryAllocation && meminfo)
        ms = (int)meminfo(&f, &t);
    rs_record_oom(api, mem, size, caller, rc, f, t, ms);
}

static void
after_free(uint16_t api, uint8_t mem, cudaError_t rc, void *ptr, uint64_t stream, uint64_t caller,
           uint64_t t0)
{
    if (!rs_trace_open())
        return;
    rs_record_free_at(t0, api, mem, (uint64_t)(uintptr_t)ptr, stream, caller, rc);
}

static cudaError_t
missing(int code)
{
    (void)code;
    return cudaErrorNotSupported;
}

#define ENTER(name)                                                                             \
    __typeof__(&name) real = RS_REAL(name);                                                     \
    if (!real)                                                                                  \
        return missing(RS_API_##name);                                                          \
    if (t_rs.guard || !rs_enabled())                                                           \
        return

/* ---- device memory ---- */

RS_EXPORT cudaError_t
cudaMalloc(void **devPtr, size_t size)
{
    ENTER(cudaMalloc) real(devPtr, size);
    uint64_t caller = CALLER();
    t_rs.guard++;
    cudaError_t rc = real(devPtr, size);
    after_alloc(RS_API_cudaMalloc, RS_MEM_DEVICE, rc, devPtr, size, 0, caller);
    t_rs.guard--;
    return rc;
}

RS_EXPORT cudaError_t
cudaFree(void *devPtr)
{
    ENTER(cudaFree) real(devPtr);
    uint64_t caller = CALLER();
    t_rs.guard++;
    uint64_t t0 = rs_now_ns_inline();
    cudaError_t rc = real(devPtr);
    /* cudaFree(NULL) is the classic "initialise the context" call. */
    if (devPtr) {
        uint8_t mem = managed_take((uint64_t)(uintptr_t)devPtr) ? RS_MEM_MANAGED : RS_MEM_DEVICE;
        after_free(RS_API_cudaFree, mem, rc, devPtr, 0, caller, t0);
    }
    else
        rs_trace_open();
    t_rs.guard--;
    return rc;
}

#define ASYNC_ALLOC(name, ...)                                                                  \
    ENTER(name) real(devPtr, size, __VA_ARGS__);                                                \
    uint64_t caller = CALLER();                                                                 \
    t_rs.guard++;                                                                               \
    cudaError_t rc = real(devPtr, size, __VA_ARGS__);                                           \
    after_alloc(RS_API_##name, RS_MEM_DEVICE, rc, devPtr, size, (uint64_t)(uintptr_t)hStream,   \
                caller);                                                                        \
    t_rs.guard--;                                                                               \
    return rc

RS_EXPORT cudaError_t
cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    ASYNC_ALLOC(cudaMallocAsync, hStream);
}

RS_EXPORT cudaError_t
cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    ASYNC_ALLOC(cudaMallocAsync_ptsz, hStream);
}

RS_EXPORT cudaError_t
cudaMallocFromPoolAsync(void **devPtr, size_t size, cudaMemPool_t memPool, cudaStream_t hStream)
{
    ASYNC_ALLOC(cudaMallocFromPoolAsync, memPool, hStream);
}

RS_EXPORT cudaError_t
cudaMallocFromPoolAsync_ptsz(void **devPtr, size_t size, cudaMemPool_t memPool,
                             cudaStream_t hStream)
{
    ASYNC_ALLOC(cudaMallocFromPoolAsync_ptsz, memPool, hStream);
}

#define ASYNC_FREE(name)                                                                        \
    ENTER(name) real(devPtr, hStream);                                                          \
    uint64_t caller = CALLER();                                                                 \
    t_rs.guard++;                                                                               \
    uint64_t t0 = rs_now_ns_inline();                                                           \
    cudaError_t rc = real(devPtr, hStream);                                                     \
    after_free(RS_API_##name, RS_MEM_DEVICE, rc, devPtr, (uint64_t)(uintptr_t)hStream, caller,  \
               t0);                                                                             \
    t_rs.guard--;                                                                               \
    return rc

RS_EXPORT cudaError_t
cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    ASYNC_FREE(cudaFreeAsync);
}

RS_EXPORT cudaError_t
cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    ASYNC_FREE(cudaFreeAsync_ptsz);
}

/* ---- managed and host-pinned memory: recorded, never in device peaks ---- */

RS_EXPORT cudaError_t
cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    ENTER(cudaMallocManaged) real(devPtr, size, flags);
    uint64_t caller = CALLER();
    t_rs.guard++;
    cudaError_t rc = real(devPtr, size, flags);
    after_alloc(RS_API_cudaMallocManaged, RS_MEM_MANAGED, rc, devPtr, size, 0, caller);
    t_rs.guard--;
    return rc;
}

RS_EXPORT cudaError_t
cudaMallocHost(void **ptr, size_t size)
{
    ENTER(cudaMallocHost) real(ptr, size);
    uint64_t caller = CALLER();
    t_rs.guard++;
    cudaError_t rc = real(ptr, size);
    after_alloc(RS_API_cudaMallocHost, RS_MEM_HOST_PINNED, rc, ptr, size, 0, caller);
    t_rs.guard--;
    return rc;
}

RS_EXPORT cudaError_t
cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    ENTER(cudaHostAlloc) real(pHost, size, flags);
    uint64_t caller = CALLER();
    t_rs.guard++;
    cudaError_t rc = real(pHost, size, flags);
    after_alloc(RS_API_cudaHostAlloc, RS_MEM_HOST_PINNED, rc, pHost, size, 0, caller);
    t_rs.guard--;
    return rc;
}

RS_EXPORT cudaError_t
cudaFreeHost(void *ptr)
{
    ENTER(cudaFreeHost) real(ptr);
    uint64_t caller = CALLER();
    t_rs.guard++;
    uint64_t t0 = rs_now_ns();
    cudaError_t rc = real(ptr);
    if (ptr)
        after_free(RS_API_cudaFreeHost, RS_MEM_HOST_PINNED, rc, ptr, 0, caller, t0);
    t_rs.guard--;
    return rc;
}

/* ---- device selection and memory information ---- */

RS_EXPORT cudaError_t
cudaMemGetInfo(size_t *free, size_t *total)
{
    ENTER(cudaMemGetInfo) real(free, total);
    t_rs.guard++;
    cudaError_t rc = real(free, total);
    if (rs_trace_open()) {
        learn_device();
        rs_record_meminfo(RS_MEMINFO_APP, (rc == cudaSuccess && free) ? *free : 0,
                          (rc == cudaSuccess && total) ? *total : 0, t_rs.device, rc);
    }
    t_rs.guard--;
    return rc;
}

RS_EXPORT cudaError_t
cudaSetDevice(int device)
{
    ENTER(cudaSetDevice) real(device);
    t_rs.guard++;
    cudaError_t rc = real(device);
    if (rc == cudaSuccess && device >= 0 && device < 128)
        t_rs.device = (int8_t)device;
    if (rs_trace_open())
        rs_record_set_device(device, rc);
    t_rs.guard--;
    return rc;
}

RS_EXPORT cudaError_t
cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    ENTER(cudaMemPoolGetAttribute) real(memPool, attr, value);
    t_rs.guard++;
    cudaError_t rc = real(memPool, attr, value);
    /* The reserved/used byte counters (cuuint64_t); other attributes are
     * ints and flags the analysis does not need. */
    int bytes_attr = attr == cudaMemPoolAttrReservedMemCurrent ||
                     attr == cudaMemPoolAttrReservedMemHigh ||
                     attr == cudaMemPoolAttrUsedMemCurrent || attr == cudaMemPoolAttrUsedMemHigh ||
                     attr == cudaMemPoolAttrReleaseThreshold;
    if (bytes_attr && rs_trace_open())
        rs_record_pool_attr((uint64_t)(uintptr_t)memPool, (uint32_t)attr,
                            (rc == cudaSuccess && value) ? *(uint64_t *)value : 0, rc);
    t_rs.guard--;
    return rc;
}
