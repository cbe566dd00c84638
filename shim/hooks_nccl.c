/* hooks_nccl.c: NCCL API calls as COLLECTIVE records — the grad-sync and
 * param-sync signal, and the communicators a rank joins (pipeline peers).
 * pip PyTorch links libnccl.so.2 dynamically, so ProcessGroupNCCL's calls
 * go through the PLT and these definitions interpose them ([PT] in docs/sources.md
 * §8); a statically linked NCCL is invisible here. NCCL's own memory is
 * seen by hooks_driver.c. */
#include <nccl.h>
#include <string.h>

#include "record.h"
#include "resolve.h"
#include "writer.h"

#define U64(x) ((uint64_t)(uintptr_t)(x))

/* Bytes per element of ncclDataType_t (nccl.h's enum order). */
static uint64_t
dtype_size(ncclDataType_t t)
{
    switch ((int)t) {
    case 0: case 1: return 1;           /* int8, uint8 */
    case 2: case 3: return 4;           /* int32, uint32 */
    case 4: case 5: return 8;           /* int64, uint64 */
    case 6: return 2;                   /* float16 */
    case 7: return 4;                   /* float32 */
    case 8: return 8;                   /* float64 */
    case 9: return 2;                   /* bfloat16 */
    case 10: case 11: return 1;         /* fp8 e4m3, e5m2 */
    default: return 0;
    }
}

#define ENTER(name)                                                                             \
    __typeof__(&name) real = RS_REAL(name);                                                   \
    if (!real)                                                                                \
        return ncclSystemError;                                                               \
    if (t_rs.guard || !rs_enabled())                                                         \
        return

static void
coll(uint32_t op, uint16_t api, ncclComm_t comm, size_t count, ncclDataType_t dt, int redop,
     int peer, cudaStream_t stream, ncclResult_t rc)
{
    t_rs.guard++;
    if (rs_trace_open())
        rs_record_collective(op, api, U64(comm), count, count * dtype_size(dt), U64(stream), 0,
                             (int)dt, redop, peer, -1, -1, (int)rc);
    t_rs.guard--;
}

RS_EXPORT ncclResult_t
ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    ENTER(ncclAllReduce) real(sendbuff, recvbuff, count, datatype, op, comm, stream);
    ncclResult_t rc = real(sendbuff, recvbuff, count, datatype, op, comm, stream);
    coll(RS_COLL_ALL_REDUCE, RS_API_ncclAllReduce, comm, count, datatype, (int)op, -1, stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    ENTER(ncclReduceScatter) real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
    ncclResult_t rc = real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
    coll(RS_COLL_REDUCE_SCATTER, RS_API_ncclReduceScatter, comm, recvcount, datatype, (int)op, -1,
         stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
              ncclComm_t comm, cudaStream_t stream)
{
    ENTER(ncclAllGather) real(sendbuff, recvbuff, sendcount, datatype, comm, stream);
    ncclResult_t rc = real(sendbuff, recvbuff, sendcount, datatype, comm, stream);
    coll(RS_COLL_ALL_GATHER, RS_API_ncclAllGather, comm, sendcount, datatype, -1, -1, stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
              int root, ncclComm_t comm, cudaStream_t stream)
{
    ENTER(ncclBroadcast) real(sendbuff, recvbuff, count, datatype, root, comm, stream);
    ncclResult_t rc = real(sendbuff, recvbuff, count, datatype, root, comm, stream);
    coll(RS_COLL_BROADCAST, RS_API_ncclBroadcast, comm, count, datatype, -1, root, stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
           ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    ENTER(ncclReduce) real(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
    ncclResult_t rc = real(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
    coll(RS_COLL_REDUCE, RS_API_ncclReduce, comm, count, datatype, (int)op, root, stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream)
{
    ENTER(ncclSend) real(sendbuff, count, datatype, peer, comm, stream);
    ncclResult_t rc = real(sendbuff, count, datatype, peer, comm, stream);
    coll(RS_COLL_SEND, RS_API_ncclSend, comm, count, datatype, -1, peer, stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream)
{
    ENTER(ncclRecv) real(recvbuff, count, datatype, peer, comm, stream);
    ncclResult_t rc = real(recvbuff, count, datatype, peer, comm, stream);
    coll(RS_COLL_RECV, RS_API_ncclRecv, comm, count, datatype, -1, peer, stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
             ncclComm_t comm, cudaStream_t stream)
{
    ENTER(ncclAlltoAll) real(sendbuff, recvbuff, count, datatype, comm, stream);
    ncclResult_t rc = real(sendbuff, recvbuff, count, datatype, comm, stream);
    coll(RS_COLL_ALL_TO_ALL, RS_API_ncclAlltoAll, comm, count, datatype, -1, -1, stream, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclGroupStart(void)
{
    ENTER(ncclGroupStart) real();
    ncclResult_t rc = real();
    coll(RS_COLL_GROUP_START, RS_API_ncclGroupStart, NULL, 0, (ncclDataType_t)-1, -1, -1, NULL,
         rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclGroupEnd(void)
{
    ENTER(ncclGroupEnd) real();
    ncclResult_t rc = real();
    coll(RS_COLL_GROUP_END, RS_API_ncclGroupEnd, NULL, 0, (ncclDataType_t)-1, -1, -1, NULL, rc);
    return rc;
}

/* Communicator creation: nranks, rank and the unique id's first 8 bytes,
 * which every rank of the communicator shares. */
static void
comm_event(uint32_t op, uint16_t api, ncclComm_t comm, uint64_t hash, int peer, int nranks,
           int rank, ncclResult_t rc)
{
    t_rs.guard++;
    if (rs_trace_open())
        rs_record_collective(op, api, U64(comm), 0, 0, 0, hash, -1, -1, peer, nranks, rank,
                             (int)rc);
    t_rs.guard--;
}

static uint64_t
id_hash(const ncclUniqueId *id)
{
    uint64_t h;
    memcpy(&h, id->internal, sizeof h);
    return h;
}

RS_EXPORT ncclResult_t
ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    ENTER(ncclCommInitRank) real(comm, nranks, commId, rank);
    ncclResult_t rc = real(comm, nranks, commId, rank);
    comm_event(RS_COLL_COMM_INIT, RS_API_ncclCommInitRank, comm ? *comm : NULL, id_hash(&commId),
               -1, nranks, rank, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                       ncclConfig_t *config)
{
    ENTER(ncclCommInitRankConfig) real(comm, nranks, commId, rank, config);
    ncclResult_t rc = real(comm, nranks, commId, rank, config);
    comm_event(RS_COLL_COMM_INIT, RS_API_ncclCommInitRankConfig, comm ? *comm : NULL,
               id_hash(&commId), -1, nranks, rank, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    ENTER(ncclCommInitAll) real(comm, ndev, devlist);
    ncclResult_t rc = real(comm, ndev, devlist);
    for (int i = 0; comm && i < ndev; i++)
        comm_event(RS_COLL_COMM_INIT, RS_API_ncclCommInitAll, comm[i], 0, -1, ndev, i, rc);
    return rc;
}

/* COMM_SPLIT: comm = the new communicator, comm_hash = the parent's
 * handle, peer = color, rank = key. */
RS_EXPORT ncclResult_t
ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    ENTER(ncclCommSplit) real(comm, color, key, newcomm, config);
    ncclResult_t rc = real(comm, color, key, newcomm, config);
    comm_event(RS_COLL_COMM_SPLIT, RS_API_ncclCommSplit, newcomm ? *newcomm : NULL, U64(comm),
               color, -1, key, rc);
    return rc;
}

RS_EXPORT ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
    ENTER(ncclCommDestroy) real(comm);
    ncclResult_t rc = real(comm);
    comm_event(RS_COLL_COMM_DESTROY, RS_API_ncclCommDestroy, comm, 0, -1, -1, -1, rc);
    return rc;
}
