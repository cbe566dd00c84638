/* test_graph_nccl: CUDA-graph capture windows, instantiation and launches
 * (p_graph), and NCCL collectives as COLLECTIVE records (p_nccl). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "itest_fields.h"

#define ENV IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_DIR)

Test(graph, capture_window_instantiate_launch)
{
    /* The IsCapturing calls answered "none" are not recorded; the
     * allocation inside the window is an ordinary ALLOC between begin and
     * end; the failed launch of an unknown exec is recorded with its error. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_graph")), ENV);
    it_expect_fields(&d, "GRAPH ALLOC FREE", 0,
        IT_SEQ("GRAPH op=begin_capture api=cudaStreamBeginCapture stream=0x1234 mode=1 status=0",
               "GRAPH op=is_capturing api=cudaStreamIsCapturing stream=0x1234 mode=1 status=0",
               "ALLOC api=cudaMallocAsync mem=device dev=0 ptr=0x7e0000000000 size=4096 stream=0x1234 status=0",
               "GRAPH op=end_capture api=cudaStreamEndCapture stream=0x1234 graph=0x67000100 status=0",
               "GRAPH op=instantiate api=cudaGraphInstantiate graph=0x67000100 exec=0x6e000100 status=0",
               "GRAPH op=instantiate api=cudaGraphInstantiateWithFlags graph=0x67000100 exec=0x6e000200 status=0",
               "GRAPH op=instantiate api=cudaGraphInstantiateWithParams graph=0x67000100 exec=0x6e000300 status=0",
               "GRAPH op=launch api=cudaGraphLaunch stream=0x1234 exec=0x6e000100 status=0",
               "GRAPH op=launch api=cudaGraphLaunch stream=0x1234 exec=0x6e000100 status=0",
               "GRAPH op=launch api=cudaGraphLaunch stream=0x5678 exec=0x6e000200 status=0",
               "GRAPH op=launch api=cudaGraphLaunch stream=0x5678 exec=0x99 status=400",
               "FREE api=cudaFreeAsync mem=device dev=0 ptr=0x7e0000000000 stream=0x1234 status=0"),
        "p_graph");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(graph, ptsz_entry_points)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_graph"), "ptsz"), ENV);
    it_expect_fields(&d, "GRAPH", 0,
        IT_SEQ("GRAPH op=begin_capture api=cudaStreamBeginCapture_ptsz stream=0x2222 mode=2 status=0",
               "GRAPH op=is_capturing api=cudaStreamIsCapturing_ptsz stream=0x2222 mode=1 status=0",
               "GRAPH op=end_capture api=cudaStreamEndCapture_ptsz stream=0x2222 graph=0x67000100 status=0",
               "GRAPH op=instantiate api=cudaGraphInstantiateWithParams_ptsz graph=0x67000100 exec=0x6e000100 status=0",
               "GRAPH op=launch api=cudaGraphLaunch_ptsz stream=0x2222 exec=0x6e000100 status=0"),
        "p_graph ptsz");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

#define NONE "datatype=-1 redop=-1 peer=-1 nranks=-1 rank=-1 comm_hash=0x0"

Test(nccl, collectives_of_a_step)
{
    /* bytes = count x datatype size; peer for send/recv, root for
     * broadcast/reduce; comm_hash = first 8 bytes of the ncclUniqueId at
     * comm init (0x11..0x18); group calls without a communicator; an
     * unmatched ncclGroupEnd recorded with its error (ncclInvalidUsage). */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_nccl")), ENV);
    char cm[64], cm2[64], sp[64], a0[64], a1[64];
    cr_assert(it_out_field(r.out, "comm", cm, sizeof cm) && it_out_field(r.out, "comm2", cm2, sizeof cm2) &&
                  it_out_field(r.out, "split", sp, sizeof sp) && it_out_field(r.out, "all0", a0, sizeof a0) &&
                  it_out_field(r.out, "all1", a1, sizeof a1),
              "%s", r.out);
    char e[24][320];
    size_t k = 0;
#define E(...) snprintf(e[k++], sizeof e[0], __VA_ARGS__)
    E("COLLECTIVE op=comm_init api=ncclCommInitRank comm=%s count=0 bytes=0 stream=0x0 datatype=-1 redop=-1 "
      "peer=-1 nranks=4 rank=1 comm_hash=0x1817161514131211 status=0", cm);
    E("COLLECTIVE op=group_start api=ncclGroupStart comm=0x0 count=0 bytes=0 stream=0x0 " NONE " status=0");
    E("COLLECTIVE op=all_reduce api=ncclAllReduce comm=%s count=1024 bytes=4096 stream=0x1234 datatype=7 redop=0 "
      "peer=-1 nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=reduce_scatter api=ncclReduceScatter comm=%s count=256 bytes=512 stream=0x1234 datatype=9 "
      "redop=4 peer=-1 nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=all_gather api=ncclAllGather comm=%s count=128 bytes=256 stream=0x1234 datatype=6 redop=-1 "
      "peer=-1 nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=send api=ncclSend comm=%s count=64 bytes=512 stream=0x5678 datatype=4 redop=-1 peer=2 "
      "nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=recv api=ncclRecv comm=%s count=64 bytes=512 stream=0x5678 datatype=4 redop=-1 peer=0 "
      "nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=broadcast api=ncclBroadcast comm=%s count=100 bytes=100 stream=0x1234 datatype=1 redop=-1 "
      "peer=0 nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=group_end api=ncclGroupEnd comm=0x0 count=0 bytes=0 stream=0x0 " NONE " status=0");
    E("COLLECTIVE op=reduce api=ncclReduce comm=%s count=10 bytes=80 stream=0x1234 datatype=8 redop=2 peer=3 "
      "nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=all_to_all api=ncclAlltoAll comm=%s count=32 bytes=128 stream=0x1234 datatype=2 redop=-1 "
      "peer=-1 nranks=-1 rank=-1 comm_hash=0x0 status=0", cm);
    E("COLLECTIVE op=group_end api=ncclGroupEnd comm=0x0 count=0 bytes=0 stream=0x0 " NONE " status=5");
    E("COLLECTIVE op=comm_init api=ncclCommInitRankConfig comm=%s count=0 bytes=0 stream=0x0 datatype=-1 redop=-1 "
      "peer=-1 nranks=8 rank=5 comm_hash=0x1817161514131211 status=0", cm2);
    /* split: the new communicator; the other fields are the shim's choice */
    E("COLLECTIVE op=comm_split api=ncclCommSplit comm=%s status=0", sp);
    E("COLLECTIVE op=comm_init api=ncclCommInitAll comm=%s nranks=2 rank=0 status=0", a0);
    E("COLLECTIVE op=comm_init api=ncclCommInitAll comm=%s nranks=2 rank=1 status=0", a1);
    E("COLLECTIVE op=comm_destroy api=ncclCommDestroy comm=%s status=0", a0);
    E("COLLECTIVE op=comm_destroy api=ncclCommDestroy comm=%s status=0", a1);
    E("COLLECTIVE op=comm_destroy api=ncclCommDestroy comm=%s status=0", sp);
    E("COLLECTIVE op=comm_destroy api=ncclCommDestroy comm=%s status=0", cm2);
    E("COLLECTIVE op=comm_destroy api=ncclCommDestroy comm=%s status=0", cm);
#undef E
    const char *ev[25];
    for (size_t i = 0; i < k; i++)
        ev[i] = e[i];
    ev[k] = NULL;
    it_expect_fields(&d, "COLLECTIVE", 0, ev, "p_nccl");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(nccl, buffers_through_the_driver)
{
    /* MOCK_NCCL_BUFFER_BYTES: every communicator maps its buffers the way
     * NCCL's cuMem path does (cuGetProcAddress from libnccl, then
     * cuMemAddressReserve/cuMemCreate/cuMemMap), rounded up to 2 MiB, and
     * unmaps them at destroy: p_nccl's five communicators give five 4 MiB
     * handles, each created, released and its range freed, all called from
     * libnccl.so.2. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_nccl")),
                  IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_DIR, "MOCK_NCCL_BUFFER_BYTES=3145728"));
    cr_expect_eq(it_count_sub(&d, "api=cuMemCreate dev=0"), 5);
    cr_expect_eq(it_count_sub(&d, "size=4194304 offset=0"), 5 * 5,
                 "reserve, create, map, release and free of 4 MiB, five times");
    cr_expect_eq(it_count_sub(&d, "api=cuMemRelease dev=0"), 5);
    cr_expect_eq(it_count_sub(&d, "api=cuMemAddressFree dev=0"), 5);
    for (size_t i = 0; i < d.nlines; i++)
        if (strstr(d.lines[i], "size=4194304 offset=0"))
            cr_expect(strstr(d.lines[i], "libnccl.so.2+") != NULL, "not from libnccl: %s", d.lines[i]);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(nccl, buffers_do_not_fit)
{
    /* On a 2 MiB device the first communicator's 4 MiB do not fit: its init
     * fails with ncclUnhandledCudaError (1), as NCCL's does, after a failed
     * cuMemCreate from libnccl that the trace records as an OOM. */
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_nccl")),
                IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_DIR, "MOCK_NCCL_BUFFER_BYTES=3145728",
                       "MOCK_CUDA_CAPACITY=2097152"));
    cr_assert(r.exited && r.code == 3, "exit %d\n%s%s", r.code, r.out, r.err);
    cr_expect(strstr(r.out, "ncclCommInitRank(&comm, 4, id, 1) returned 1") != NULL, "%s", r.out);
    char **paths = NULL;
    cr_assert_eq(it_find_traces(c.out, &paths), 1);
    it_dump d;
    it_dump_trace(&d, paths[0]);
    cr_expect_eq(it_count_sub(&d, "OOM t="), 1);
    cr_expect_eq(it_count_sub(&d, "api=cuMemCreate mem=device dev=0 size=4194304 status=2"), 1);
    cr_expect_eq(it_count_sub(&d, "api=cuMemAddressFree dev=0"), 1, "the range is given back");
    it_dump_free(&d);
    it_free_paths(paths, 1);
    it_run_free(&r);
    it_fini(&c);
}
