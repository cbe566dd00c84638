/* ms_nccl.c: libmegasim_nccl.so, megasim's NCCL side.
 *
 * Collectives: with the mock libnccl.so.2 (tests/doubles, MS_HAVE_NCCL) the
 * real NCCL API is called through this library's PLT (ncclCommInitRank,
 * ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclSend/ncclRecv in
 * groups), as ProcessGroupNCCL in libtorch_cuda calls the dynamically
 * linked libnccl. NCCL's own NVTX ranges (domain "NCCL", the API name as a
 * registered string) are emitted here around each call, as libnccl does.
 *
 * Buffers: NCCL allocates its channel buffers itself, outside PyTorch. With
 * the mock libcuda (MS_HAVE_VMM) the NCCL_CUMEM_ENABLE path is modelled: NCCL
 * links cudart statically, so its driver calls come from dlopen("libcuda.so.1")
 * + dlsym("cuGetProcAddress_v2") and cuMemCreate/cuMemAddressReserve/cuMemMap/
 * cuMemSetAccess through the returned pointers (only a dlsym/cuGetProcAddress
 * hook sees them). Without it: a cudaMalloc from this module (the
 * NCCL_CUMEM_ENABLE=0 path with a dynamically linked cudart). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <string.h>
#ifdef MS_HAVE_NCCL
#include <nccl.h>
#endif

#define EXPORT __attribute__((visibility("default")))
#define MAX_COMMS 1024

static nvtxDomainHandle_t g_nccl_domain;

static void
nccl_range(const char *fn)
{
    if (!g_nccl_domain)
        g_nccl_domain = nvtxDomainCreateA("NCCL");
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = nvtxDomainRegisterStringA(g_nccl_domain, fn);
    nvtxDomainRangePushEx(g_nccl_domain, &a);
}

static void
nccl_range_end(void)
{
    nvtxDomainRangePop(g_nccl_domain);
}

#ifdef MS_HAVE_NCCL
static ncclComm_t g_comms[MAX_COMMS];
static int g_nranks[MAX_COMMS], g_rank[MAX_COMMS];
static int g_ncomms;
#endif

/* returns a communicator index >= 0, or -1 */
EXPORT int
ms_nccl_comm_init(int nranks, int rank)
{
    nccl_range("ncclCommInitRank");
    int idx = -1;
#ifdef MS_HAVE_NCCL
    if (g_ncomms < MAX_COMMS) {
        ncclUniqueId id;
        ncclGetUniqueId(&id);
        ncclComm_t c = NULL;
        if (ncclCommInitRank(&c, nranks, id, rank) == ncclSuccess) {
            idx = g_ncomms++;
            g_comms[idx] = c;
            g_nranks[idx] = nranks;
            g_rank[idx] = rank;
        }
    }
#else
    (void)nranks, (void)rank;
#endif
    nccl_range_end();
    return idx;
}

/* fn: ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclSend, ncclRecv,
 * ncclAllToAll (send+recv to every peer in a group); dtype 0 u8, 1 f32, 2 bf16 */
EXPORT int
ms_nccl_collective(const char *fn, uint64_t bytes, int comm, int dtype, int peer)
{
#ifdef MS_HAVE_NCCL
    static const ncclDataType_t types[] = { ncclUint8, ncclFloat32, ncclBfloat16 };
    static const size_t esz[] = { 1, 4, 2 };
    if (comm < 0 || comm >= g_ncomms || dtype < 0 || dtype > 2)
        return -1;
    ncclComm_t c = g_comms[comm];
    ncclDataType_t t = types[dtype];
    size_t count = bytes / esz[dtype];
    int rc = 0;
    if (!strcmp(fn, "ncclAllToAll")) {
        nccl_range("ncclGroupStart");
        ncclGroupStart();
        nccl_range_end();
        size_t per = count / (size_t)g_nranks[comm];
        for (int p = 0; p < g_nranks[comm]; p++) {
            nccl_range("ncclSend");
            rc |= ncclSend(NULL, per, t, p, c, 0);
            nccl_range_end();
            nccl_range("ncclRecv");
            rc |= ncclRecv(NULL, per, t, p, c, 0);
            nccl_range_end();
        }
        nccl_range("ncclGroupEnd");
        rc |= ncclGroupEnd();
        nccl_range_end();
        return rc;
    }
    nccl_range(fn);
    if (!strcmp(fn, "ncclAllReduce"))
        rc = ncclAllReduce(NULL, NULL, count, t, ncclSum, c, 0);
    else if (!strcmp(fn, "ncclReduceScatter"))
        rc = ncclReduceScatter(NULL, NULL, count / (size_t)g_nranks[comm], t, ncclSum, c, 0);
    else if (!strcmp(fn, "ncclAllGather"))
        rc = ncclAllGather(NULL, NULL, count / (size_t)g_nranks[comm], t, c, 0);
    else if (!strcmp(fn, "ncclSend"))
        rc = ncclSend(NULL, count, t, peer, c, 0);
    else if (!strcmp(fn, "ncclRecv"))
        rc = ncclRecv(NULL, count, t, peer, c, 0);
    nccl_range_end();
    return rc;
#else
    (void)bytes, (void)comm, (void)dtype, (void)peer;
    nccl_range(fn);
    nccl_range_end();
    return 0;
#endif
}

/* An all-to-all with uneven per-peer splits, as PyTorch's all_to_all_single
 * with input/output split sizes runs it on NCCL (torch/csrc/cuda/nccl.cpp,
 * all2all_single_unequal_split): one group, and for each peer in rank order a
 * ncclSend of its send bytes and a ncclRecv of its receive bytes, each only
 * when non-zero (self included). send[p], recv[p]: bytes for peer p of the
 * communicator's n ranks; dtype as ms_nccl_collective. Returns 0, or the
 * OR of the NCCL results; -1 for a bad communicator or dtype. */
EXPORT int
ms_nccl_all_to_all_v(const uint64_t *send, const uint64_t *recv, int n, int comm, int dtype)
{
#ifdef MS_HAVE_NCCL
    static const ncclDataType_t types[] = { ncclUint8, ncclFloat32, ncclBfloat16 };
    static const size_t esz[] = { 1, 4, 2 };
    if (comm < 0 || comm >= g_ncomms || dtype < 0 || dtype > 2 || n != g_nranks[comm])
        return -1;
    ncclComm_t c = g_comms[comm];
    ncclDataType_t t = types[dtype];
    int rc = 0;
    nccl_range("ncclGroupStart");
    ncclGroupStart();
    nccl_range_end();
    for (int p = 0; p < n; p++) {
        if (send[p]) {
            nccl_range("ncclSend");
            rc |= ncclSend(NULL, send[p] / esz[dtype], t, p, c, 0);
            nccl_range_end();
        }
        if (recv[p]) {
            nccl_range("ncclRecv");
            rc |= ncclRecv(NULL, recv[p] / esz[dtype], t, p, c, 0);
            nccl_range_end();
        }
    }
    nccl_range("ncclGroupEnd");
    rc |= ncclGroupEnd();
    nccl_range_end();
    return rc;
#else
    (void)send, (void)recv, (void)n, (void)comm, (void)dtype;
    nccl_range("ncclGroupStart");
    nccl_range_end();
    return 0;
#endif
}

#ifdef MS_HAVE_VMM
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static struct {
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    int loaded;
} g_cu;

static int
load_cu(void)
{
    if (g_cu.loaded)
        return g_cu.loaded > 0 ? 0 : -1;
    g_cu.loaded = -1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return -1;
    gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa)
        return -1;
    CUdriverProcAddressQueryResult q;
    if (gpa("cuMemAddressReserve", (void **)&g_cu.reserve, 12000, 0, &q) ||
        gpa("cuMemCreate", (void **)&g_cu.create, 12000, 0, &q) ||
        gpa("cuMemMap", (void **)&g_cu.map, 12000, 0, &q) ||
        gpa("cuMemSetAccess", (void **)&g_cu.access, 12000, 0, &q))
        return -1;
    g_cu.loaded = 1;
    return 0;
}
#endif

/* NCCL's buffers for one communicator: 0 ok, else a CUDA error */
EXPORT int
ms_nccl_buffer_alloc(uint64_t size, uint64_t *ptr)
{
#ifdef MS_HAVE_VMM
    if (load_cu() == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        size = (size + (2u << 20) - 1) / (2u << 20) * (2u << 20);
        CUdeviceptr va = 0;
        if (g_cu.reserve(&va, size, 0, 0, 0))
            return 2;
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        CUmemGenericAllocationHandle h;
        if (g_cu.create(&h, size, &prop, 0))
            return 2;
        if (g_cu.map(va, size, 0, h, 0))
            return 2;
        CUmemAccessDesc d;
        memset(&d, 0, sizeof d);
        d.location = prop.location;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        g_cu.access(va, size, &d, 1);
        *ptr = va;
        return 0;
    }
#endif
    void *p = NULL;
    int rc = (int)cudaMalloc(&p, (size_t)size);
    if (rc)
        (void)cudaGetLastError();
    *ptr = (uint64_t)(uintptr_t)p;
    return rc;
}
