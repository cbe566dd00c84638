/* nccl_mock.c: mock NCCL, libnccl.so.2 (prototypes from the toolkit's
 * nccl.h). No communication: communicators are heap objects remembering
 * nranks, rank, device and the unique id; collectives check their
 * arguments and return ncclSuccess.
 *
 *   ncclGetUniqueId: bytes 0x01, 0x02, ... 0x80 (first 8 bytes as a
 *                    little-endian u64: 0x0807060504030201)
 *   ncclCommInitRank/Config: nranks >= 1, 0 <= rank < nranks
 *   ncclCommInitAll: ranks 0..ndev-1 on devlist (or 0..ndev-1)
 *   ncclCommSplit: color < 0 (NCCL_SPLIT_NOCOLOR) gives NULL; else a
 *                  communicator of the same size with rank = key
 *   ncclGroupEnd without ncclGroupStart: ncclInvalidUsage
 *   a NULL comm, bad peer/root or datatype: ncclInvalidArgument
 *
 * Buffers: with MOCK_NCCL_BUFFER_BYTES=N (bytes; unset or 0: none, as
 * before) every communicator maps N bytes (rounded up to 2 MiB) on its
 * device at init and unmaps them at destroy/abort, the way NCCL >= 2.19
 * allocates its channel buffers with NCCL_CUMEM_ENABLE=1 (its default): it
 * links cudart statically, so the calls reach the driver through
 * dlopen("libcuda.so.1") + cuGetProcAddress_v2 and cuMemAddressReserve/
 * cuMemCreate/cuMemMap/cuMemSetAccess. A failed cuMemCreate (the device is
 * full) fails the init with ncclUnhandledCudaError, as NCCL does. The size is
 * a parameter because NCCL's own depends on channels, peers and protocols
 * (NCCL_BUFFSIZE, 4 MiB default, per channel and peer).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct ncclComm {
    int nranks;
    int rank;
    int device;
    ncclUniqueId id;
    CUdeviceptr buf;          /* MOCK_NCCL_BUFFER_BYTES mapped at init, 0 none */
    size_t buf_bytes;
    CUmemGenericAllocationHandle buf_handle;
};

/* ---- channel buffers through the driver (MOCK_NCCL_BUFFER_BYTES) ---- */

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);

static struct {
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*addr_free)(CUdeviceptr, size_t);
    CUresult (*ctx_device)(CUdevice *);
    int ok;
} g_drv;
static pthread_once_t g_drv_once = PTHREAD_ONCE_INIT;

static void
drv_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    gpa_fn gpa = h ? (gpa_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!gpa)
        return;
    CUdriverProcAddressQueryResult q;
    const struct { const char *name; void **fn; } want[] = {
        {"cuMemAddressReserve", (void **)&g_drv.reserve}, {"cuMemCreate", (void **)&g_drv.create},
        {"cuMemMap", (void **)&g_drv.map},                {"cuMemSetAccess", (void **)&g_drv.access},
        {"cuMemUnmap", (void **)&g_drv.unmap},            {"cuMemRelease", (void **)&g_drv.release},
        {"cuMemAddressFree", (void **)&g_drv.addr_free},  {"cuCtxGetDevice", (void **)&g_drv.ctx_device},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (gpa(want[i].name, want[i].fn, 12000, 0, &q) != CUDA_SUCCESS || !*want[i].fn)
            return;
    g_drv.ok = 1;
}

/* MOCK_NCCL_BUFFER_BYTES rounded up to 2 MiB; 0 when unset or not a number. */
static size_t
buffer_bytes(void)
{
    const char *v = getenv("MOCK_NCCL_BUFFER_BYTES");
    char *end;
    unsigned long long n = v ? strtoull(v, &end, 10) : 0;
    if (!v || *end || !n)
        return 0;
    return (size_t)((n + (2u << 20) - 1) / (2u << 20) * (2u << 20));
}

/* Map the communicator's buffers on the current device: ncclSuccess, or
 * ncclUnhandledCudaError when the driver refuses (out of memory). */
static ncclResult_t
buffers_map(struct ncclComm *c)
{
    size_t n = buffer_bytes();
    if (!n)
        return ncclSuccess;
    pthread_once(&g_drv_once, drv_load);
    if (!g_drv.ok)
        return ncclSystemError;
    CUdevice dev = 0;
    if (g_drv.ctx_device(&dev) != CUDA_SUCCESS)
        dev = c->device;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    if (g_drv.reserve(&va, n, 0, 0, 0) != CUDA_SUCCESS)
        return ncclUnhandledCudaError;
    if (g_drv.create(&h, n, &prop, 0) != CUDA_SUCCESS) {
        g_drv.addr_free(va, n);
        return ncclUnhandledCudaError;
    }
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location = prop.location;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (g_drv.map(va, n, 0, h, 0) != CUDA_SUCCESS || g_drv.access(va, n, &d, 1) != CUDA_SUCCESS) {
        g_drv.release(h);
        g_drv.addr_free(va, n);
        return ncclUnhandledCudaError;
    }
    c->buf = va;
    c->buf_bytes = n;
    c->buf_handle = h;
    return ncclSuccess;
}

static void
buffers_unmap(struct ncclComm *c)
{
    if (!c->buf)
        return;
    g_drv.unmap(c->buf, c->buf_bytes);
    g_drv.release(c->buf_handle);
    g_drv.addr_free(c->buf, c->buf_bytes);
    c->buf = 0;
}

static __thread int t_group_depth;

EXPORT ncclResult_t
ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId)
        return ncclInvalidArgument;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        uniqueId->internal[i] = (char)(i + 1);
    return ncclSuccess;
}

EXPORT const char *
ncclGetErrorString(ncclResult_t result)
{
    return result == ncclSuccess ? "no error" : "mock nccl error";
}

static ncclResult_t
make_comm(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank, int device)
{
    if (!comm)
        return ncclInvalidArgument;
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return ncclSystemError;
    c->nranks = nranks;
    c->rank = rank;
    c->device = device;
    if (id)
        c->id = *id;
    ncclResult_t rc = buffers_map(c);
    if (rc != ncclSuccess) {
        free(c);
        return rc;
    }
    *comm = c;
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return make_comm(comm, nranks, &commId, rank, 0);
}

EXPORT ncclResult_t
ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    (void)config;
    return make_comm(comm, nranks, &commId, rank, 0);
}

EXPORT ncclResult_t
ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    if (!comm || ndev < 1)
        return ncclInvalidArgument;
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    for (int i = 0; i < ndev; i++) {
        ncclResult_t rc = make_comm(&comm[i], ndev, &id, i, devlist ? devlist[i] : i);
        if (rc != ncclSuccess)
            return rc;
    }
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    (void)config;
    if (!comm || !newcomm)
        return ncclInvalidArgument;
    *newcomm = NULL;
    if (color < 0)
        return ncclSuccess;
    return make_comm(newcomm, comm->nranks, &comm->id, key < comm->nranks && key >= 0 ? key : 0,
                     comm->device);
}

EXPORT ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    buffers_unmap(comm);
    free(comm);
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclCommAbort(ncclComm_t comm)
{
    return ncclCommDestroy(comm);
}

/* No communication, so no asynchronous error ever: ProcessGroupNCCL's
 * watchdog polls this. */
EXPORT ncclResult_t
ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError)
        return ncclInvalidArgument;
    *asyncError = ncclSuccess;
    return ncclSuccess;
}

EXPORT const char *
ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "";
}

/* Nothing in flight: finalizing completes at once. */
EXPORT ncclResult_t
ncclCommFinalize(ncclComm_t comm)
{
    return comm ? ncclSuccess : ncclInvalidArgument;
}

/* Pre-multiplied sums (ProcessGroupNCCL's averaging): a new op number after
 * the built-in ones (ncclNumOps), destroyed without state. */
EXPORT ncclResult_t
ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                         ncclScalarResidence_t residence, ncclComm_t comm)
{
    (void)datatype, (void)residence;
    if (!op || !scalar || !comm)
        return ncclInvalidArgument;
    *op = (ncclRedOp_t)ncclNumOps;
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    return comm && (int)op >= (int)ncclNumOps ? ncclSuccess : ncclInvalidArgument;
}

EXPORT ncclResult_t
ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm || !device)
        return ncclInvalidArgument;
    *device = comm->device;
    return ncclSuccess;
}

static ncclResult_t
check(ncclComm_t comm, ncclDataType_t dt, int peer)
{
    if (!comm || (unsigned)dt >= (unsigned)ncclNumTypes)
        return ncclInvalidArgument;
    if (peer != -1 && (peer < 0 || peer >= comm->nranks))
        return ncclInvalidArgument;
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
              ncclComm_t comm, cudaStream_t stream)
{
    (void)sendbuff, (void)recvbuff, (void)count, (void)op, (void)stream;
    return check(comm, datatype, -1);
}

EXPORT ncclResult_t
ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    (void)sendbuff, (void)recvbuff, (void)recvcount, (void)op, (void)stream;
    return check(comm, datatype, -1);
}

EXPORT ncclResult_t
ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
              cudaStream_t stream)
{
    (void)sendbuff, (void)recvbuff, (void)sendcount, (void)stream;
    return check(comm, datatype, -1);
}

EXPORT ncclResult_t
ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream)
{
    (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
    return check(comm, datatype, root);
}

/* In-place broadcast: PyTorch's ProcessGroupNCCL::broadcast calls it
 * (Megatron-Core's DistributedDataParallel.broadcast_params, issue 16). */
EXPORT ncclResult_t
ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    (void)buff, (void)count, (void)stream;
    return check(comm, datatype, root);
}

EXPORT ncclResult_t
ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
           ncclComm_t comm, cudaStream_t stream)
{
    (void)sendbuff, (void)recvbuff, (void)count, (void)op, (void)stream;
    return check(comm, datatype, root);
}

EXPORT ncclResult_t
ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream)
{
    (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
    return check(comm, datatype, -1);
}

EXPORT ncclResult_t
ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream)
{
    (void)sendbuff, (void)count, (void)stream;
    return check(comm, datatype, peer);
}

EXPORT ncclResult_t
ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)
{
    (void)recvbuff, (void)count, (void)stream;
    return check(comm, datatype, peer);
}

EXPORT ncclResult_t
ncclGroupStart(void)
{
    t_group_depth++;
    return ncclSuccess;
}

EXPORT ncclResult_t
ncclGroupEnd(void)
{
    if (t_group_depth == 0)
        return ncclInvalidUsage;
    t_group_depth--;
    return ncclSuccess;
}
