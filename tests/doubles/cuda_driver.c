/* cuda_driver.c: mock CUDA driver, libcuda.so.1 (soname libcuda.so.1).
 *
 * What real clients reach it by: cuGetProcAddress (4 arguments, CUDA 11.3+)
 * and cuGetProcAddress_v2 (5 arguments, CUDA 12.0+) map *base* names
 * ("cuMemAlloc") and a requested version to the ABI function
 * (cuMemAlloc_v2 for version >= 3020); the per-thread flag
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM gives the _ptsz variants of
 * the stream-ordered calls. Every function is also exported under its ABI
 * name, for dlsym (NCCL's static cudart, older PyTorch).
 *
 * State: the device memory state of mock_state.c (capacity, a context
 * counted from the first call on the device, live bytes), charged with the
 * live bytes of cuMemAlloc/cuMemAllocAsync blocks and cuMemCreate handles.
 * The state is compiled into this library only and exported
 * (MOCK_STATE_EXPORT); the mock libcudart (megasim's and the fake GPU's)
 * links against it: one device memory state for runtime and driver, as on
 * a GPU, so cudaMalloc and cuMemCreate draw from one capacity.
 *
 *   cuMemAlloc/cuMemAllocAsync on device d: mock_range_base(
 *                       MOCK_RANGE_DRV_ALLOC, d) up (device 0:
 *                       0x600000000000), 512-aligned, never reused
 *   cuMemAddressReserve on device d: mock_range_base(MOCK_RANGE_DRV_VA, d)
 *                       up (device 0: 0x500000000000), aligned to
 *                       max(alignment, 2 MiB), never reused
 *   cuMemCreate handles: 0x5a0001, 0x5a0002, ... (never reused); size must
 *                       be a non-zero multiple of 2 MiB (the granularity)
 *   contexts: the primary context of device d is 0x5c000000 + d * 0x1000;
 *             every thread starts with device 0's current; cudaSetDevice(d)
 *             makes device d's current and cuCtxSetCurrent(ctx) its device
 *             the runtime's, so driver calls (cuMemGetInfo, cuMemAlloc,
 *             cuMemAddressReserve) act on the thread's device as on a GPU
 *   over capacity: CUDA_ERROR_OUT_OF_MEMORY, nothing allocated
 *
 * MOCK_CUDA_FAIL applies to the ABI names ("cuMemCreate@2=2").
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "mock_state.h"

#undef cuGetProcAddress
#define EXPORT __attribute__((visibility("default")))

#define DRV_HANDLE_BASE  0x5a0000ull
#define DRV_CTX_BASE     0x5c000000ull
#define DRV_CTX_STRIDE   0x1000ull
#define DRV_GRANULARITY  2097152ull
/* Entries per table. Each expandable segment maps its pages one by one
 * (PyTorch's kLargeBuffer, 20 MiB, per page): 4096 capped every device that
 * used expandable_segments:True near 80 GiB whatever MOCK_CUDA_CAPACITY said
 * (a full table read as CUDA_ERROR_OUT_OF_MEMORY). 65536 pages of 20 MiB are
 * 1.25 TiB; a full table is now said on stderr, not passed off as an OOM. */
#define DRV_MAX_ENTRIES  65536

typedef struct drv_entry {
    uint64_t key;          /* pointer or handle; 0 = free slot */
    uint64_t size;
    uint64_t aux;          /* map: handle */
    int dev;
} drv_entry;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static drv_entry g_allocs[DRV_MAX_ENTRIES];   /* cuMemAlloc / cuMemAllocAsync */
static drv_entry g_handles[DRV_MAX_ENTRIES];  /* cuMemCreate */
static drv_entry g_vas[DRV_MAX_ENTRIES];      /* cuMemAddressReserve */
static drv_entry g_maps[DRV_MAX_ENTRIES];     /* cuMemMap */
static uint64_t g_next_alloc[MOCK_MAX_DEVICES];
static uint64_t g_next_va[MOCK_MAX_DEVICES];
static uint64_t g_next_handle = DRV_HANDLE_BASE + 1;
static int g_initialized;


#define CHECK_FAIL(fn)                          \
    do {                                        \
        int injected_ = mock_fail_check(fn);    \
        if (injected_)                          \
            return (CUresult)injected_;         \
    } while (0)

static int
cur_dev(void)
{
    /* one current context per thread for runtime and driver: cudaSetDevice
     * makes its device's primary context current (driver calls on a thread
     * that chose device 1 act on device 1, never on device 0) */
    return mock_context_device();
}

/* One past the highest slot index ever used in any table: scans stop there. */
static int g_hw;

static drv_entry *
find(drv_entry *t, uint64_t key)
{
    for (int i = 0; i < g_hw; i++)
        if (t[i].key == key && key)
            return &t[i];
    return NULL;
}

/* A free slot of table t (the caller fills its key), or NULL when all
 * DRV_MAX_ENTRIES are taken: said once on stderr, since the caller then
 * fails with CUDA_ERROR_OUT_OF_MEMORY although the device may have room. */
static drv_entry *
slot(drv_entry *t)
{
    for (int i = 0; i < DRV_MAX_ENTRIES; i++)
        if (!t[i].key) {
            if (i >= g_hw)
                g_hw = i + 1;
            return &t[i];
        }
    static int told;
    if (!told++)
        fprintf(stderr, "mock cuda driver: all %d entries of a table are in use (a limit of "
                        "the double, not of the device)\n", DRV_MAX_ENTRIES);
    return NULL;
}

/* Reserves size bytes of device memory on dev in the device memory state
 * (mock_state.c: the context from the first call, capacity checks). */
static CUresult
charge_locked(int dev, uint64_t size)
{
    return mock_charge(dev, size) == MOCK_OK ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult
dev_alloc(CUdeviceptr *dptr, size_t size)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr = 0;
    int dev = cur_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (!g_next_alloc[dev])
        g_next_alloc[dev] = mock_range_base(MOCK_RANGE_DRV_ALLOC, dev);
    drv_entry *e = slot(g_allocs);
    CUresult rc = e ? charge_locked(dev, size) : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        e->key = g_next_alloc[dev];
        e->size = size;
        e->dev = dev;
        *dptr = (CUdeviceptr)e->key;
        g_next_alloc[dev] += (size + MOCK_ALIGN - 1) & ~(MOCK_ALIGN - 1);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult
dev_free(CUdeviceptr p)
{
    if (!p)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g_lock);
    drv_entry *e = find(g_allocs, (uint64_t)p);
    if (e) {
        mock_uncharge(e->dev, e->size);
        e->key = 0;
    }
    pthread_mutex_unlock(&g_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- initialisation, versions ---- */

EXPORT CUresult CUDAAPI
cuInit(unsigned int Flags)
{
    CHECK_FAIL("cuInit");
    if (Flags)
        return CUDA_ERROR_INVALID_VALUE;
    g_initialized = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuDriverGetVersion(int *driverVersion)
{
    CHECK_FAIL("cuDriverGetVersion");
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = MOCK_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuDeviceGetCount(int *count)
{
    CHECK_FAIL("cuDeviceGetCount");
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = mock_device_count();
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuDeviceGet(CUdevice *device, int ordinal)
{
    CHECK_FAIL("cuDeviceGet");
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CHECK_FAIL("cuDeviceGetAttribute");
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = mock_device_attr((int)attrib, dev);
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CHECK_FAIL("cuDeviceGetUuid_v2");
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct cudaDeviceProp p;
    mock_device_props(dev, &p);
    memcpy(uuid->bytes, p.uuid.bytes, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

/* Error names: "CUDA_ERROR_<n>" for every code (the caller only prints them). */
EXPORT CUresult CUDAAPI
cuGetErrorName(CUresult error, const char **pStr)
{
    static __thread char buf[48];
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    if (error == CUDA_SUCCESS)
        *pStr = "CUDA_SUCCESS";
    else {
        snprintf(buf, sizeof buf, "CUDA_ERROR_%d", (int)error);
        *pStr = buf;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuGetErrorString(CUresult error, const char **pStr)
{
    static __thread char buf[64];
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(buf, sizeof buf, "mock driver error %d", (int)error);
    *pStr = error == CUDA_SUCCESS ? "no error" : buf;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

EXPORT CUresult CUDAAPI
cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CHECK_FAIL("cuDevicePrimaryCtxGetState");
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *active = mock_device_touched(dev);
    *flags = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CHECK_FAIL("cuDevicePrimaryCtxRetain");
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!mock_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    mock_touch_device(dev);
    *pctx = (CUcontext)(uintptr_t)(DRV_CTX_BASE + (uint64_t)dev * DRV_CTX_STRIDE);
    return CUDA_SUCCESS;
}

static int
ctx_device(CUcontext ctx)
{
    uint64_t v = (uint64_t)(uintptr_t)ctx;
    if (v < DRV_CTX_BASE || (v - DRV_CTX_BASE) % DRV_CTX_STRIDE)
        return -1;
    uint64_t d = (v - DRV_CTX_BASE) / DRV_CTX_STRIDE;
    return mock_valid_device((int)d) ? (int)d : -1;
}

EXPORT CUresult CUDAAPI
cuCtxSetCurrent(CUcontext ctx)
{
    CHECK_FAIL("cuCtxSetCurrent");
    if (!ctx) {
        mock_clear_current_context();
        return CUDA_SUCCESS;
    }
    int d = ctx_device(ctx);
    if (d < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    mock_set_current_device(d);   /* cudaGetDevice reports the context's device */
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuCtxGetCurrent(CUcontext *pctx)
{
    CHECK_FAIL("cuCtxGetCurrent");
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    int d = cur_dev();
    *pctx = d < 0 ? NULL : (CUcontext)(uintptr_t)(DRV_CTX_BASE + (uint64_t)d * DRV_CTX_STRIDE);
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuCtxGetDevice(CUdevice *device)
{
    CHECK_FAIL("cuCtxGetDevice");
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int d = cur_dev();
    if (d < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = d;
    return CUDA_SUCCESS;
}

/* ---- linear memory ---- */

EXPORT CUresult CUDAAPI
cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CHECK_FAIL("cuMemAlloc_v2");
    return dev_alloc(dptr, bytesize);
}

EXPORT CUresult CUDAAPI
cuMemFree_v2(CUdeviceptr dptr)
{
    CHECK_FAIL("cuMemFree_v2");
    return dev_free(dptr);
}

EXPORT CUresult CUDAAPI
cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    (void)hStream;
    CHECK_FAIL("cuMemAllocAsync");
    return dev_alloc(dptr, bytesize);
}

EXPORT CUresult CUDAAPI
cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    (void)hStream;
    CHECK_FAIL("cuMemAllocAsync_ptsz");
    return dev_alloc(dptr, bytesize);
}

EXPORT CUresult CUDAAPI
cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    (void)hStream;
    CHECK_FAIL("cuMemFreeAsync");
    return dev_free(dptr);
}

EXPORT CUresult CUDAAPI
cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    (void)hStream;
    CHECK_FAIL("cuMemFreeAsync_ptsz");
    return dev_free(dptr);
}

EXPORT CUresult CUDAAPI
cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CHECK_FAIL("cuMemGetInfo_v2");
    int d = cur_dev();
    if (d < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    mock_touch_device(d);
    uint64_t used = mock_device_used(d), cap = mock_capacity();
    *total = (size_t)cap;
    *free = (size_t)(used > cap ? 0 : cap - used);
    return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

EXPORT CUresult CUDAAPI
cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                              CUmemAllocationGranularity_flags option)
{
    (void)option;
    CHECK_FAIL("cuMemGetAllocationGranularity");
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = DRV_GRANULARITY;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                    unsigned long long flags)
{
    (void)addr;
    (void)flags;
    CHECK_FAIL("cuMemAddressReserve");
    if (!ptr || size == 0 || size % DRV_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    *ptr = 0;
    int dev = cur_dev();
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t al = alignment > DRV_GRANULARITY ? alignment : DRV_GRANULARITY;
    pthread_mutex_lock(&g_lock);
    if (!g_next_va[dev])
        g_next_va[dev] = mock_range_base(MOCK_RANGE_DRV_VA, dev);
    drv_entry *e = slot(g_vas);
    if (!e) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t base = (g_next_va[dev] + al - 1) & ~(al - 1);
    e->key = base;
    e->size = size;
    e->dev = dev;
    g_next_va[dev] = base + size;
    pthread_mutex_unlock(&g_lock);
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI
cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CHECK_FAIL("cuMemAddressFree");
    pthread_mutex_lock(&g_lock);
    drv_entry *e = find(g_vas, (uint64_t)ptr);
    CUresult rc = (e && e->size == size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        e->key = 0;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

EXPORT CUresult CUDAAPI
cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
            unsigned long long flags)
{
    CHECK_FAIL("cuMemCreate");
    if (!handle || !prop || flags || size == 0 || size % DRV_GRANULARITY ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = prop->location.id;
    if (!mock_valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    drv_entry *e = slot(g_handles);
    CUresult rc = e ? charge_locked(dev, size) : CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        e->key = g_next_handle++;
        e->size = size;
        e->dev = dev;
        *handle = (CUmemGenericAllocationHandle)e->key;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

EXPORT CUresult CUDAAPI
cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CHECK_FAIL("cuMemRelease");
    pthread_mutex_lock(&g_lock);
    drv_entry *e = find(g_handles, (uint64_t)handle);
    if (e) {
        mock_uncharge(e->dev, e->size);
        e->key = 0;
    }
    pthread_mutex_unlock(&g_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Whether [p, p+size) lies in one reservation (caller holds g_lock). */
static int
in_reservation(uint64_t p, uint64_t size)
{
    for (int i = 0; i < g_hw; i++)
        if (g_vas[i].key && p >= g_vas[i].key && size <= g_vas[i].size &&
            p - g_vas[i].key <= g_vas[i].size - size)
            return 1;
    return 0;
}

EXPORT CUresult CUDAAPI
cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
         unsigned long long flags)
{
    CHECK_FAIL("cuMemMap");
    if (flags || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    drv_entry *h = find(g_handles, (uint64_t)handle);
    CUresult rc = CUDA_SUCCESS;
    if (!h || offset > h->size || size > h->size - offset || !in_reservation((uint64_t)ptr, size) ||
        find(g_maps, (uint64_t)ptr))
        rc = CUDA_ERROR_INVALID_VALUE;
    drv_entry *m = rc == CUDA_SUCCESS ? slot(g_maps) : NULL;
    if (rc == CUDA_SUCCESS && !m)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (m) {
        m->key = (uint64_t)ptr;
        m->size = size;
        m->aux = (uint64_t)handle;
        m->dev = h->dev;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

EXPORT CUresult CUDAAPI
cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CHECK_FAIL("cuMemUnmap");
    pthread_mutex_lock(&g_lock);
    drv_entry *m = find(g_maps, (uint64_t)ptr);
    CUresult rc = (m && m->size == size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        m->key = 0;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

EXPORT CUresult CUDAAPI
cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CHECK_FAIL("cuMemSetAccess");
    if (!desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    int ok = in_reservation((uint64_t)ptr, size);
    pthread_mutex_unlock(&g_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- entry points by name ---- */

EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                            cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus);
EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

typedef struct proc {
    const char *base;      /* name cuGetProcAddress takes */
    int version;           /* first version with this ABI function */
    void *fn;              /* legacy / default-stream variant */
    void *fn_ptsz;         /* per-thread variant, or NULL (same as fn) */
} proc;

/* Newest version first for names with several ABI versions. */
static const proc procs[] = {
    { "cuInit", 2000, (void *)cuInit, NULL },
    { "cuDriverGetVersion", 2020, (void *)cuDriverGetVersion, NULL },
    { "cuDeviceGet", 2000, (void *)cuDeviceGet, NULL },
    { "cuDeviceGetCount", 2000, (void *)cuDeviceGetCount, NULL },
    { "cuGetProcAddress", 12000, (void *)cuGetProcAddress_v2, NULL },
    { "cuGetProcAddress", 11030, (void *)cuGetProcAddress, NULL },
    { "cuDevicePrimaryCtxRetain", 7000, (void *)cuDevicePrimaryCtxRetain, NULL },
    { "cuDevicePrimaryCtxGetState", 7000, (void *)cuDevicePrimaryCtxGetState, NULL },
    { "cuDeviceGetAttribute", 2000, (void *)cuDeviceGetAttribute, NULL },
    { "cuDeviceGetUuid", 11040, (void *)cuDeviceGetUuid_v2, NULL },
    { "cuGetErrorName", 6000, (void *)cuGetErrorName, NULL },
    { "cuGetErrorString", 6000, (void *)cuGetErrorString, NULL },
    { "cuCtxSetCurrent", 4000, (void *)cuCtxSetCurrent, NULL },
    { "cuCtxGetCurrent", 4000, (void *)cuCtxGetCurrent, NULL },
    { "cuCtxGetDevice", 2000, (void *)cuCtxGetDevice, NULL },
    { "cuMemAlloc", 3020, (void *)cuMemAlloc_v2, NULL },
    { "cuMemFree", 3020, (void *)cuMemFree_v2, NULL },
    { "cuMemGetInfo", 3020, (void *)cuMemGetInfo_v2, NULL },
    { "cuMemAllocAsync", 11020, (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz },
    { "cuMemFreeAsync", 11020, (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz },
    { "cuMemGetAllocationGranularity", 10020, (void *)cuMemGetAllocationGranularity, NULL },
    { "cuMemAddressReserve", 10020, (void *)cuMemAddressReserve, NULL },
    { "cuMemAddressFree", 10020, (void *)cuMemAddressFree, NULL },
    { "cuMemCreate", 10020, (void *)cuMemCreate, NULL },
    { "cuMemRelease", 10020, (void *)cuMemRelease, NULL },
    { "cuMemMap", 10020, (void *)cuMemMap, NULL },
    { "cuMemUnmap", 10020, (void *)cuMemUnmap, NULL },
    { "cuMemSetAccess", 10020, (void *)cuMemSetAccess, NULL },
};

/* A base name the table does not list: this library's own export of it,
 * newest ABI suffix first (name_v3, name_v2, name), so that everything the
 * library exports -- the fake GPU's generated stubs included -- is reachable
 * by entry point as by dlsym. NULL when it exports none of them. */
static void *
exported(const char *base)
{
    static void *self;
    Dl_info info;
    if (!self && dladdr((void *)exported, &info) && info.dli_fname)
        self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self)
        return NULL;
    static const char *const suffixes[] = { "_v3", "_v2", "" };
    char name[256];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        if (snprintf(name, sizeof name, "%s%s", base, suffixes[i]) >= (int)sizeof name)
            return NULL;
        void *fn = dlsym(self, name);
        if (fn)
            return fn;
    }
    return NULL;
}

EXPORT CUresult CUDAAPI
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus)
{
    CHECK_FAIL("cuGetProcAddress_v2");
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    int found = 0;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].base, symbol))
            continue;
        found = 1;
        if (cudaVersion < procs[i].version)
            continue;
        int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        *pfn = ptsz && procs[i].fn_ptsz ? procs[i].fn_ptsz : procs[i].fn;
        if (symbolStatus)
            *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (!found && (*pfn = exported(symbol)) != NULL) {
        if (symbolStatus)
            *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus)
        *symbolStatus = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult CUDAAPI
cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CHECK_FAIL("cuGetProcAddress");
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
