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
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct ncclComm {
    int nranks;
    int rank;
    int device;
    ncclUniqueId id;
};

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
