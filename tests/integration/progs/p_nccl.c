/* p_nccl: a communicator of 4 ranks (this is rank 1) and the collectives
 * of a training step: a group with all-reduce, reduce-scatter, all-gather,
 * send, recv and broadcast, then reduce and all-to-all, an InitRankConfig,
 * InitAll and Split communicator, destroy. Buffers are fake device
 * addresses; streams are opaque. The ncclUniqueId is bytes 0x11..0x90,
 * so its first 8 bytes read as 0x1817161514131211. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NOK(call)                                                                 \
    do {                                                                          \
        ncclResult_t r_ = (call);                                                 \
        if (r_ != ncclSuccess) {                                                  \
            printf("FAIL: %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_); \
            exit(3);                                                              \
        }                                                                         \
    } while (0)

#define BUF(x) ((void *)(uintptr_t)(x))
#define STRM(x) ((cudaStream_t)(uintptr_t)(x))

int
main(void)
{
    ncclUniqueId id;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        id.internal[i] = (char)(0x11 + i);
    ncclComm_t comm, comm2, split, all[2];
    NOK(ncclCommInitRank(&comm, 4, id, 1));
    printf("comm=%p\n", (void *)comm);

    NOK(ncclGroupStart());
    NOK(ncclAllReduce(BUF(0x7e0000000000), BUF(0x7e0000100000), 1024, ncclFloat, ncclSum, comm, STRM(0x1234)));
    NOK(ncclReduceScatter(BUF(0x7e0000000000), BUF(0x7e0000100000), 256, ncclBfloat16, ncclAvg, comm,
                          STRM(0x1234)));
    NOK(ncclAllGather(BUF(0x7e0000000000), BUF(0x7e0000100000), 128, ncclHalf, comm, STRM(0x1234)));
    NOK(ncclSend(BUF(0x7e0000000000), 64, ncclInt64, 2, comm, STRM(0x5678)));
    NOK(ncclRecv(BUF(0x7e0000100000), 64, ncclInt64, 0, comm, STRM(0x5678)));
    NOK(ncclBroadcast(BUF(0x7e0000000000), BUF(0x7e0000100000), 100, ncclUint8, 0, comm, STRM(0x1234)));
    NOK(ncclGroupEnd());
    NOK(ncclReduce(BUF(0x7e0000000000), BUF(0x7e0000100000), 10, ncclDouble, ncclMax, 3, comm, STRM(0x1234)));
    NOK(ncclAlltoAll(BUF(0x7e0000000000), BUF(0x7e0000100000), 32, ncclInt32, comm, STRM(0x1234)));
    if (ncclGroupEnd() != ncclInvalidUsage)   /* unmatched: the error passes through */
        exit(3);

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    NOK(ncclCommInitRankConfig(&comm2, 8, id, 5, &cfg));
    printf("comm2=%p\n", (void *)comm2);
    NOK(ncclCommSplit(comm, 0, 1, &split, NULL));
    printf("split=%p\n", (void *)split);
    int devs[2] = { 0, 1 };
    NOK(ncclCommInitAll(all, 2, devs));
    printf("all0=%p all1=%p\n", (void *)all[0], (void *)all[1]);
    NOK(ncclCommDestroy(all[0]));
    NOK(ncclCommDestroy(all[1]));
    NOK(ncclCommDestroy(split));
    NOK(ncclCommDestroy(comm2));
    NOK(ncclCommDestroy(comm));
    printf("done\n");
    return 0;
}
