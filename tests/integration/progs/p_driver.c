/* p_driver: driver-API allocations through every route a job uses to get
 * driver entry points (argv[1] picks one; see test_driver.c):
 *   vmm      PyTorch's expandable segments: cuMem* VMM calls obtained with
 *            cudaGetDriverEntryPointByVersion(name, 12000), with the default
 *            flag and then the per-thread flag
 *   async    cuMemAllocAsync/FreeAsync, cuMemAlloc/Free, cuMemGetInfo
 *            through cudaGetDriverEntryPoint*, plain and _ptsz getters
 *   procaddr cuGetProcAddress (4 arguments, from dlsym on libcuda.so.1) and
 *            cuGetProcAddress_v2 (5, from the runtime getter) for base names
 *   dlsym    NCCL's static cudart: dlopen("libcuda.so.1") + dlsym of ABI names
 *   ctx      cuCtxSetCurrent between devices; cuMemCreate on another device
 *   oom      cuMemCreate over capacity (run with a small MOCK_CUDA_CAPACITY)
 *   shared   one device memory state for runtime and driver (issue 13): a
 *            cudaMalloc leaves a cuMemCreate no room, cudaMemGetInfo counts
 *            the handle (run with a 64 MiB capacity, no context bytes)
 *   module   argv[2] is a library loaded now that allocates (drvmod.c)
 * Device addresses are the mock libcuda's (tests/doubles/cuda_driver.c). */
#include "drv_util.h"

/* PyTorch < CUDA 12.5 builds and NCCL 12.x still call the deprecated getter. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define MIB 1048576ull

static CUmemAllocationProp
prop_on(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* ExpandableSegment: reserve 4 pages of 20 MiB, map two, unmap, release. */
static void
expandable(unsigned long long flags)
{
    reserve_fn reserve = (reserve_fn)drv_by_version("cuMemAddressReserve", flags);
    create_fn create = (create_fn)drv_by_version("cuMemCreate", flags);
    map_fn map = (map_fn)drv_by_version("cuMemMap", flags);
    setaccess_fn setaccess = (setaccess_fn)drv_by_version("cuMemSetAccess", flags);
    unmap_fn unmap = (unmap_fn)drv_by_version("cuMemUnmap", flags);
    release_fn release = (release_fn)drv_by_version("cuMemRelease", flags);
    vafree_fn vafree = (vafree_fn)drv_by_version("cuMemAddressFree", flags);
    size_t seg = 20 * MIB;
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h[2];
    CUmemAllocationProp p = prop_on(0);
    CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    OK(reserve(&va, seg * 4, 0, 0, 0));
    for (int i = 0; i < 2; i++)
        OK(create(&h[i], seg, &p, 0));
    for (int i = 0; i < 2; i++)
        OK(map(va + i * seg, seg, 0, h[i], 0));
    OK(setaccess(va, 2 * seg, &desc, 1));
    for (int i = 0; i < 2; i++) {
        OK(unmap(va + i * seg, seg));
        OK(release(h[i]));
    }
    OK(vafree(va, seg * 4));
    printf("va=%#llx h0=%#llx h1=%#llx\n", (unsigned long long)va, (unsigned long long)h[0],
           (unsigned long long)h[1]);
}

static void
mode_async(void)
{
    CUdeviceptr p;
    alloc_async_fn aa = (alloc_async_fn)drv_by_version("cuMemAllocAsync", cudaEnableDefault);
    free_async_fn fa = (free_async_fn)drv_by_version("cuMemFreeAsync", cudaEnableDefault);
    OK(aa(&p, 4096, (CUstream)0x1234));
    OK(fa(p, (CUstream)0x1234));

    aa = (alloc_async_fn)drv_by_version("cuMemAllocAsync", cudaEnablePerThreadDefaultStream);
    fa = (free_async_fn)drv_by_version("cuMemFreeAsync", cudaEnablePerThreadDefaultStream);
    OK(aa(&p, 8192, (CUstream)0x5678));
    OK(fa(p, (CUstream)0x5678));

    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    OK(cudaGetDriverEntryPoint("cuMemAllocAsync", &fn, cudaEnableDefault, &q));
    OK(((alloc_async_fn)fn)(&p, 512, (CUstream)0x9abc));
    OK(cudaGetDriverEntryPoint("cuMemFreeAsync", &fn, cudaEnableDefault, &q));
    OK(((free_async_fn)fn)(p, (CUstream)0x9abc));

    /* a runtime built with per-thread default streams: default means _ptsz */
    OK(cudaGetDriverEntryPointByVersion_ptsz("cuMemAllocAsync", &fn, 12000, cudaEnableDefault, &q));
    OK(((alloc_async_fn)fn)(&p, 1024, (CUstream)0xdef0));
    OK(cudaGetDriverEntryPoint_ptsz("cuMemFreeAsync", &fn, cudaEnableDefault, &q));
    OK(((free_async_fn)fn)(p, (CUstream)0xdef0));

    alloc_fn a = (alloc_fn)drv_by_version("cuMemAlloc", cudaEnableDefault);
    free_fn f = (free_fn)drv_by_version("cuMemFree", cudaEnableDefault);
    OK(a(&p, MIB));
    OK(f(p));
    EXPECT_RC(f((CUdeviceptr)0xdead000), CUDA_ERROR_INVALID_VALUE);

    meminfo_fn mi = (meminfo_fn)drv_by_version("cuMemGetInfo", cudaEnableDefault);
    size_t fr = 0, tot = 0;
    OK(mi(&fr, &tot));
    printf("meminfo free=%zu total=%zu\n", fr, tot);

    /* a name the driver lacks and a version too old: passed through */
    fn = (void *)1;
    q = cudaDriverEntryPointSuccess;
    OK(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &q));
    if (fn || q != cudaDriverEntryPointSymbolNotFound)
        DRV_FAIL("cuNoSuchFunction: fn %p status %d", fn, (int)q);
    OK(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 10000, cudaEnableDefault, &q));
    if (fn || q != cudaDriverEntryPointVersionNotSufficent)
        DRV_FAIL("cuMemCreate@10000: fn %p status %d", fn, (int)q);
}

static void
mode_procaddr(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        DRV_FAIL("dlopen libcuda.so.1: %s", dlerror());
    OK(((init_fn)dlsym(h, "cuInit"))(0));
    gpa4_fn gpa4 = (gpa4_fn)dlsym(h, "cuGetProcAddress");
    if (!gpa4)
        DRV_FAIL("no cuGetProcAddress");
    void *fa = NULL, *ff = NULL;
    OK(gpa4("cuMemAlloc", &fa, 12000, CU_GET_PROC_ADDRESS_DEFAULT));
    OK(gpa4("cuMemFree", &ff, 12000, CU_GET_PROC_ADDRESS_DEFAULT));
    CUdeviceptr p;
    OK(((alloc_fn)fa)(&p, 4096));
    OK(((free_fn)ff)(p));
    void *old = (void *)1;
    EXPECT_RC(gpa4("cuMemAlloc", &old, 3000, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_ERROR_NOT_FOUND);
    if (old)
        DRV_FAIL("cuMemAlloc@3000 gave %p", old);

    gpa5_fn gpa5 = (gpa5_fn)drv_by_version("cuGetProcAddress", cudaEnableDefault);
    CUdriverProcAddressQueryResult st;
    OK(gpa5("cuMemAllocAsync", &fa, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    OK(gpa5("cuMemFreeAsync", &ff, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    OK(((alloc_async_fn)fa)(&p, 8192, (CUstream)0x42));
    OK(((free_async_fn)ff)(p, (CUstream)0x42));
    OK(gpa5("cuMemAllocAsync", &fa, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    OK(gpa5("cuMemFreeAsync", &ff, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    OK(((alloc_async_fn)fa)(&p, 512, (CUstream)0x43));
    OK(((free_async_fn)ff)(p, (CUstream)0x43));

    void *fc = NULL, *fr = NULL;
    OK(gpa5("cuMemCreate", &fc, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    OK(gpa5("cuMemRelease", &fr, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CUmemAllocationProp pr = prop_on(0);
    CUmemGenericAllocationHandle hd;
    OK(((create_fn)fc)(&hd, 2 * MIB, &pr, 0));
    OK(((release_fn)fr)(hd));
    EXPECT_RC(gpa5("cuNoSuchFunction", &fc, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    if (fc || st != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        DRV_FAIL("cuNoSuchFunction: %p %d", fc, (int)st);
}

static void
mode_dlsym(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        DRV_FAIL("dlopen libcuda.so.1: %s", dlerror());
    OK(((init_fn)dlsym(h, "cuInit"))(0));
    alloc_fn a = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
    free_fn f = (free_fn)dlsym(h, "cuMemFree_v2");
    alloc_async_fn aa = (alloc_async_fn)dlsym(h, "cuMemAllocAsync_ptsz");
    free_async_fn fa = (free_async_fn)dlsym(h, "cuMemFreeAsync_ptsz");
    gpa5_fn gpa = (gpa5_fn)dlsym(h, "cuGetProcAddress_v2");
    version_fn ver = (version_fn)dlsym(h, "cuDriverGetVersion");
    if (!a || !f || !aa || !fa || !gpa || !ver)
        DRV_FAIL("dlsym on libcuda.so.1 failed");
    char w[256];
    drv_where((void *)ver, w, sizeof w);
    printf("where_cuDriverGetVersion=%s\n", w);
    int v = 0;
    OK(ver(&v));
    printf("driver_version=%d\n", v);
    if (dlsym(h, "cuNoSuchFunction"))
        DRV_FAIL("dlsym of a missing name succeeded");
    CUdeviceptr p, q;
    OK(a(&p, 2 * MIB));
    OK(aa(&q, 4096, (CUstream)0x77));
    OK(fa(q, (CUstream)0x77));
    OK(f(p));
    void *fc = NULL, *fr = NULL;
    CUdriverProcAddressQueryResult st;
    OK(gpa("cuMemCreate", &fc, 12000, 0, &st));
    OK(gpa("cuMemRelease", &fr, 12000, 0, &st));
    CUmemAllocationProp pr = prop_on(0);
    CUmemGenericAllocationHandle hd;
    OK(((create_fn)fc)(&hd, 2 * MIB, &pr, 0));
    OK(((release_fn)fr)(hd));
}

static void
mode_ctx(void)
{
    ctxset_fn set = (ctxset_fn)drv_by_version("cuCtxSetCurrent", cudaEnableDefault);
    retain_fn retain = (retain_fn)drv_by_version("cuDevicePrimaryCtxRetain", cudaEnableDefault);
    alloc_fn a = (alloc_fn)drv_by_version("cuMemAlloc", cudaEnableDefault);
    free_fn f = (free_fn)drv_by_version("cuMemFree", cudaEnableDefault);
    create_fn create = (create_fn)drv_by_version("cuMemCreate", cudaEnableDefault);
    release_fn release = (release_fn)drv_by_version("cuMemRelease", cudaEnableDefault);
    CUcontext c0, c1;
    OK(retain(&c0, 0));
    OK(retain(&c1, 1));
    CUdeviceptr p;
    OK(set(c1));
    OK(a(&p, 512));
    EXPECT_RC(set((CUcontext)0xbad000), CUDA_ERROR_INVALID_CONTEXT);
    OK(f(p));
    OK(set(c0));
    OK(a(&p, 512));
    OK(f(p));
    CUmemAllocationProp pr = prop_on(1);
    CUmemGenericAllocationHandle hd;
    OK(create(&hd, 2 * MIB, &pr, 0));
    OK(release(hd));
    printf("ctx0=%p ctx1=%p\n", (void *)c0, (void *)c1);
}

static void
mode_oom(void)
{
    create_fn create = (create_fn)drv_by_version("cuMemCreate", cudaEnableDefault);
    release_fn release = (release_fn)drv_by_version("cuMemRelease", cudaEnableDefault);
    CUmemAllocationProp pr = prop_on(0);
    CUmemGenericAllocationHandle h1, h2 = 0, h3;
    OK(create(&h1, 40 * MIB, &pr, 0));
    EXPECT_RC(create(&h2, 40 * MIB, &pr, 0), CUDA_ERROR_OUT_OF_MEMORY);
    OK(release(h1));
    OK(create(&h3, 40 * MIB, &pr, 0));
    OK(release(h3));
}

static void
mode_shared(void)
{
    create_fn create = (create_fn)drv_by_version("cuMemCreate", cudaEnableDefault);
    release_fn release = (release_fn)drv_by_version("cuMemRelease", cudaEnableDefault);
    CUmemAllocationProp pr = prop_on(0);
    CUmemGenericAllocationHandle h1 = 0, h2;
    void *p = NULL;
    size_t fr = 0, tot = 0;
    OK(cudaMalloc(&p, 40 * MIB));
    EXPECT_RC(create(&h1, 40 * MIB, &pr, 0), CUDA_ERROR_OUT_OF_MEMORY);
    OK(create(&h2, 20 * MIB, &pr, 0));
    OK(cudaMemGetInfo(&fr, &tot));
    printf("free=%zu total=%zu\n", fr, tot);
    if (cudaMalloc(&p, 8 * MIB) != cudaErrorMemoryAllocation)
        DRV_FAIL("cudaMalloc of 8 MiB with 4 MiB free succeeded");
    (void)cudaGetLastError();
    OK(release(h2));
    OK(cudaMalloc(&p, 8 * MIB));
}

static void
mode_module(const char *path)
{
    alloc_fn a = (alloc_fn)drv_by_version("cuMemAlloc", cudaEnableDefault);
    free_fn f = (free_fn)drv_by_version("cuMemFree", cudaEnableDefault);
    CUdeviceptr p;
    OK(a(&p, 4096));
    OK(f(p));
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        DRV_FAIL("dlopen %s: %s", path, dlerror());
    int (*run)(void) = (int (*)(void))dlsym(h, "drvmod_run");
    if (!run || run() != 0)
        DRV_FAIL("drvmod_run");
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "vmm")) {
        expandable(cudaEnableDefault);
        expandable(cudaEnablePerThreadDefaultStream);
    } else if (!strcmp(mode, "async"))
        mode_async();
    else if (!strcmp(mode, "procaddr"))
        mode_procaddr();
    else if (!strcmp(mode, "dlsym"))
        mode_dlsym();
    else if (!strcmp(mode, "ctx"))
        mode_ctx();
    else if (!strcmp(mode, "oom"))
        mode_oom();
    else if (!strcmp(mode, "shared"))
        mode_shared();
    else if (!strcmp(mode, "module") && argc > 2)
        mode_module(argv[2]);
    else
        DRV_FAIL("usage: p_driver vmm|async|procaddr|dlsym|ctx|oom|shared|module LIB");
    printf("done\n");
    return 0;
}
