/* test_records.c: every record kind round-trips through the reader API and
 * recomp-dump's text with exact values. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_dump.h"
#include "trace_builder.h"
#include "trace_reader.h"

#define T0 1000000ull  /* tb_new's mono_start_ns */

static uint64_t s_t;   /* next record time: T0, T0+10, ... */

static rs_record_header
hdr(uint16_t kind, uint32_t aux)
{
    rs_record_header h = {.kind = kind, .aux = aux, .t_ns = s_t};
    s_t += 10;
    return h;
}

/* GIVEN one thread writing one record of every kind (and a tid-0 rename). */
static tb_trace *
build_all_kinds(void)
{
    tb_trace *t = tb_new(0, 2);
    rs_file_header *fh = tb_header(t);
    fh->rank = 3;
    fh->local_rank = 1;
    fh->world_size = 8;
    fh->local_world_size = 4;
    fh->rank_source = RS_RANK_TORCHRUN;
    fh->restart_count = 0;
    strcpy(fh->torchelastic_run_id, "job42");
    strcpy(fh->master, "10.0.0.1:29500");
    strcpy(fh->run_id, "run-1");
    fh->device_capacity = 85899345920ull;
    fh->mode = RS_MODE_ASYNC;
    fh->cuda_runtime_version = 12040;
    fh->max_bytes = 1073741824ull;
    fh->reserved_chunks = 2;
    fh->window_kind = RS_WINDOW_STEPS;
    fh->window_a = 3;
    fh->window_b = 5;
    fh->flags |= RS_HDR_NVTX_FOREIGN;

    uint32_t c = tb_chunk(t, 100);
    s_t = T0 - 5; /* one record before the header's start: negative t */
    {
        static const char cmd[] = "python\0train.py\0--lr\0";
        rs_rec_meta m = {.h = hdr(RS_REC_META, 0), .key = RS_META_CMDLINE, .len = sizeof cmd - 1};
        tb_put(t, c, &m, sizeof m, cmd, m.len);
    }
    s_t = T0;
    {
        static const unsigned char var[] = "\xde\xad\xbe\xef/usr/lib/libtorch_cuda.so";
        rs_rec_module m = {.h = hdr(RS_REC_MODULE, 0), .base = 0x7f0000000000ull,
                           .lo = 0x7f0000001000ull, .hi = 0x7f0000100000ull,
                           .build_id_len = 4, .path_len = sizeof var - 1 - 4};
        tb_put(t, c, &m, sizeof m, var, sizeof var - 1);
    }
    {
        rs_rec_string s = {.h = hdr(RS_REC_STRING, 0), .id = 1, .len = 3};
        tb_put(t, c, &s, sizeof s, "fwd", 3);
    }
    {
        rs_rec_nvtx_name d = {.h = hdr(RS_REC_NVTX_DOMAIN, 0), .domain = 5, .text_len = 4};
        tb_put(t, c, &d, sizeof d, "NCCL", 4);
    }
    {
        rs_rec_thread th = {.h = hdr(RS_REC_THREAD, 0), .tid = 100, .pthread = 0x7f00aaull};
        strcpy(th.name, "python");
        tb_put(t, c, &th, sizeof th, NULL, 0);
    }
    {
        rs_rec_set_device s = {.h = hdr(RS_REC_SET_DEVICE, 0), .device = 1, .status = 0};
        tb_put(t, c, &s, sizeof s, NULL, 0);
    }
    {
        rs_rec_alloc a = {.h = hdr(RS_REC_ALLOC, 0), .ptr = 0x7f1200000000ull, .size = 2097152,
                          .stream = 0, .caller = 0x7f0000001234ull, .api = RS_API_cudaMalloc,
                          .mem = RS_MEM_DEVICE, .device = 1, .status = 0};
        tb_put(t, c, &a, sizeof a, NULL, 0);
    }
    {
        rs_rec_nvtx_name p = {.h = hdr(RS_REC_NVTX_PUSH, 1), .domain = 0, .name_id = 1,
                              .category = 0};
        tb_put(t, c, &p, sizeof p, NULL, 0);
    }
    {
        rs_rec_nvtx_name p = {.h = hdr(RS_REC_NVTX_PUSH, 2 | RS_NVTX_PRE_TRACE), .domain = 5,
                              .text_len = 9, .category = 7};
        tb_put(t, c, &p, sizeof p, "allreduce", 9);
    }
    {
        rs_rec_nvtx_pop p = {.h = hdr(RS_REC_NVTX_POP, 1), .domain = 5};
        tb_put(t, c, &p, sizeof p, NULL, 0);
    }
    {
        rs_rec_nvtx_name s = {.h = hdr(RS_REC_NVTX_START, 0), .range_id = 7, .text_len = 4};
        tb_put(t, c, &s, sizeof s, "step", 4);
    }
    {
        rs_rec_nvtx_end e = {.h = hdr(RS_REC_NVTX_END, 0), .range_id = 7};
        tb_put(t, c, &e, sizeof e, NULL, 0);
    }
    {
        rs_rec_nvtx_name m = {.h = hdr(RS_REC_NVTX_MARK, 0), .domain = 99, .text_len = 6};
        tb_put(t, c, &m, sizeof m, "a\"b\\\n\x01", 6);
    }
    {
        rs_rec_meminfo m = {.h = hdr(RS_REC_MEMINFO, RS_MEMINFO_SAMPLE), .free_bytes = 1000,
                            .total_bytes = 85899345920ull, .device = 1, .status = 0};
        tb_put(t, c, &m, sizeof m, NULL, 0);
    }
    {
        rs_rec_free f = {.h = hdr(RS_REC_FREE, 0), .ptr = 0x7f1200000000ull, .stream = 0x55,
                         .caller = 0x1234, .api = RS_API_cudaFree, .mem = RS_MEM_DEVICE,
                         .device = 1, .status = 0};
        tb_put(t, c, &f, sizeof f, NULL, 0);
    }
    {
        uint64_t frames[2] = {0x7f0000002000ull, 0x400000ull};
        rs_rec_oom o = {.h = hdr(RS_REC_OOM, 2), .size = 4294967296ull,
                        .caller = 0x7f0000002000ull, .free_bytes = 1048576,
                        .total_bytes = 85899345920ull, .api = RS_API_cudaMallocAsync,
                        .mem = RS_MEM_DEVICE, .device = 1, .status = 2, .meminfo_status = 0};
        tb_put(t, c, &o, sizeof o, frames, sizeof frames);
    }
    {
        rs_rec_limit l = {.h = hdr(RS_REC_LIMIT, 0), .max_bytes = 1073741824ull};
        tb_put(t, c, &l, sizeof l, NULL, 0);
    }
    {
        rs_rec_window w = {.h = hdr(RS_REC_WINDOW, RS_WINDOW_OPEN), .window_kind = RS_WINDOW_STEPS,
                           .value = 3};
        tb_put(t, c, &w, sizeof w, NULL, 0);
    }
    {
        rs_rec_pool_attr p = {.h = hdr(RS_REC_POOL_ATTR, 0), .pool = 0xabc0, .value = 67108864,
                              .attr = 5, .status = 0};
        tb_put(t, c, &p, sizeof p, NULL, 0);
    }
    {
        static const char env[] = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
        rs_rec_meta m = {.h = hdr(RS_REC_META, 0), .key = RS_META_ENV, .len = sizeof env - 1};
        tb_put(t, c, &m, sizeof m, env, m.len);
    }
    {
        rs_rec_thread th = {.h = hdr(RS_REC_THREAD, 1), .tid = 0, .pthread = 0x7f00aaull};
        memcpy(th.name, "sixteen_chars_xx", 16); /* no NUL: the full comm length */
        tb_put(t, c, &th, sizeof th, NULL, 0);
    }
    {
        rs_rec_alloc a = {.h = hdr(RS_REC_ALLOC, 0), .ptr = 0x7f0000, .size = 4096,
                          .caller = 0x5000, .api = RS_API_cudaMallocHost,
                          .mem = RS_MEM_HOST_PINNED, .device = -1, .status = 0};
        tb_put(t, c, &a, sizeof a, NULL, 0);
    }
    tb_seal(t, c);
    return t;
}

static const char k_expected[] =
    "recompshim trace v1.0 PATH\n"
    "header host=node1 pid=4242 ppid=1 closed=yes\n"
    "header rank=3 local_rank=1 world_size=8 local_world_size=4 rank_source=torchrun\n"
    "header job torchelastic_run_id=job42 restart_count=0 slurm_job_id=- master=10.0.0.1:29500 "
    "run_id=run-1\n"
    "header device=0 capacity=85899345920 mode=async runtime_version=12040 shim_version=0.1.0 "
    "nvtx_foreign=yes\n"
    "header max_bytes=1073741824 limit_hit=no dropped=0 reserved_chunks=2 window=steps:3-5 "
    "chunks=1\n"
    "META t=-5 tid=100 key=cmdline value=\"python train.py --lr\"\n"
    "MODULE t=0 tid=100 base=0x7f0000000000 lo=0x7f0000001000 hi=0x7f0000100000 "
    "build_id=deadbeef path=\"/usr/lib/libtorch_cuda.so\"\n"
    "STRING t=10 tid=100 id=1 text=\"fwd\"\n"
    "NVTX_DOMAIN t=20 tid=100 id=5 name=\"NCCL\"\n"
    "THREAD t=30 tid=100 thread_tid=100 pthread=0x7f00aa name=\"python\" rename=0\n"
    "SET_DEVICE t=40 tid=100 dev=1 status=0\n"
    "ALLOC t=50 tid=100 api=cudaMalloc mem=device dev=1 ptr=0x7f1200000000 size=2097152 "
    "stream=0x0 caller=0x7f0000001234 status=0 caller_lib=libtorch_cuda.so+0x1234\n"
    "NVTX_PUSH t=60 tid=100 domain=default name=\"fwd\" depth=1 category=0\n"
    "NVTX_PUSH t=70 tid=100 domain=NCCL name=\"allreduce\" depth=2 category=7 pre_trace=1\n"
    "NVTX_POP t=80 tid=100 domain=NCCL depth=1\n"
    "NVTX_START t=90 tid=100 id=7 domain=default name=\"step\"\n"
    "NVTX_END t=100 tid=100 id=7\n"
    "NVTX_MARK t=110 tid=100 domain=#99 name=\"a\\\"b\\\\\\n\\x01\"\n"
    "MEMINFO t=120 tid=100 reason=sample dev=1 free=1000 total=85899345920 status=0\n"
    "FREE t=130 tid=100 api=cudaFree mem=device dev=1 ptr=0x7f1200000000 stream=0x55 "
    "caller=0x1234 status=0\n"
    "OOM t=140 tid=100 api=cudaMallocAsync mem=device dev=1 size=4294967296 status=2 "
    "free=1048576 total=85899345920 meminfo_status=0 caller=0x7f0000002000 frames=2\n"
    "  frame #0 0x7f0000002000 [libtorch_cuda.so+0x2000]\n"
    "  frame #1 0x400000 [?]\n"
    "LIMIT t=150 tid=100 max_bytes=1073741824\n"
    "WINDOW t=160 tid=100 state=open kind=steps value=3\n"
    "POOL_ATTR t=170 tid=100 pool=0xabc0 attr=5 value=67108864 status=0\n"
    "META t=180 tid=100 key=env value=\"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\"\n"
    "THREAD t=190 tid=100 thread_tid=0 pthread=0x7f00aa name=\"sixteen_chars_xx\" rename=1\n"
    "ALLOC t=200 tid=100 api=cudaMallocHost mem=host_pinned dev=-1 ptr=0x7f0000 size=4096 "
    "stream=0x0 caller=0x5000 status=0\n";

Test(records, every_kind_through_the_api)
{
    tb_trace *t = build_all_kinds();
    size_t len = tb_finish(t, 1);
    rs_reader *r;
    char err[640];
    cr_assert_eq(rs_reader_open_mem(t->buf, len, "mem.trace", &r, err, sizeof err), RS_READ_OK,
                 "%s", err);
    /* THEN the definitions are collected */
    const char *s;
    uint32_t n;
    cr_assert(rs_reader_string(r, 1, &s, &n));
    cr_assert_eq(n, 3);
    cr_assert(!memcmp(s, "fwd", 3));
    cr_assert(!rs_reader_string(r, 2, &s, &n));
    cr_assert(rs_reader_domain(r, 5, &s, &n));
    cr_assert(n == 4 && !memcmp(s, "NCCL", 4));
    cr_assert(!rs_reader_domain(r, 99, &s, &n));
    cr_assert_str_eq(rs_reader_thread_name(r, 100), "sixteen_chars_xx"); /* tid-0 rename */
    cr_assert_str_eq(rs_reader_thread_name_by_pthread(r, 0x7f00aa), "sixteen_chars_xx");
    cr_assert_null(rs_reader_thread_name(r, 101));
    cr_assert_eq(rs_reader_meta_count(r), 2);
    uint32_t key;
    cr_assert(rs_reader_meta(r, 1, &key, &s, &n));
    cr_assert_eq(key, RS_META_ENV);
    cr_assert_eq(n, strlen("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
    cr_assert_eq(rs_reader_module_count(r), 1);
    const rs_module_info *m = rs_reader_find_module(r, 0x7f0000050000ull);
    cr_assert_not_null(m);
    cr_assert_eq(m->build_id_len, 4);
    cr_assert_eq(m->build_id[0], 0xde);
    cr_assert_null(rs_reader_find_module(r, 0x7f0000100000ull)); /* hi is exclusive */
    char buf[64];
    cr_assert(rs_reader_format_addr(r, 0x7f0000001234ull, buf, sizeof buf));
    cr_assert_str_eq(buf, "libtorch_cuda.so+0x1234");
    cr_assert_eq(rs_reader_record_count(r), 22);
    cr_assert_eq(rs_reader_warning_count(r), 0);

    /* THEN the iterator yields every record with its values, tid and offset */
    rs_iter *it = rs_iter_new(r);
    rs_event ev;
    int k = 0;
    while (rs_iter_next(it, &ev) > 0) {
        cr_assert_eq(ev.tid, 100);
        cr_assert_eq(ev.record_index, (uint32_t)k);
        cr_assert_eq((const unsigned char *)ev.rec, t->buf + ev.offset);
        if (ev.rec->kind == RS_REC_ALLOC && k == 6) {
            const rs_rec_alloc *a = (const void *)ev.rec;
            cr_assert_eq(a->size, 2097152);
            cr_assert_eq(a->ptr, 0x7f1200000000ull);
            cr_assert_eq(rs_reader_rel_ns(r, ev.rec->t_ns), 50);
        }
        if (ev.rec->kind == RS_REC_OOM) {
            const rs_rec_oom *o = (const void *)ev.rec;
            cr_assert_eq(o->size, 4294967296ull);
            cr_assert_eq(ev.rec->aux, 2);
        }
        k++;
    }
    cr_assert_eq(k, 22);
    cr_assert_eq(rs_iter_next(it, &ev), 0);
    rs_iter_free(it);
    rs_reader_close(r);
    tb_free(t);
}

Test(records, every_kind_through_recomp_dump)
{
    tb_trace *t = build_all_kinds();
    size_t len = tb_finish(t, 1);
    char *path = tb_tmpname();
    cr_assert_eq(tb_write(t, path, len), 0);
    char *out, *err;
    int rc = run_dump(RECOMP_DUMP_PATH, path, &out, &err);
    cr_assert_eq(rc, 0, "stderr: %s", err);
    cr_assert_str_eq(err, "");
    /* the expected text with the real path in the first line */
    char *want = malloc(sizeof k_expected + strlen(path) + 16);
    const char *tail = strchr(k_expected, '\n');
    sprintf(want, "recompshim trace v%d.%d %s%s", RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR,
            path, tail);
    cr_assert_str_eq(out, want);
    free(want);
    free(out);
    free(err);
    unlink(path);
    free(path);
    tb_free(t);
}

#if RS_TRACE_VERSION_MINOR >= 1
/* GIVEN one record of each v1.1 kind (driver VMM, tensor report, graphs,
 * NCCL, contexts). */
Test(records, v1_1_kinds_through_recomp_dump)
{
    tb_trace *t = tb_new(0, 1);
    uint32_t c = tb_chunk(t, 9);
    s_t = T0;
    static const char path_var[] = "/opt/nccl/libnccl.so.2";
    rs_rec_module m = {.h = hdr(RS_REC_MODULE, 0), .base = 0x500000, .lo = 0x500000,
                       .hi = 0x600000, .path_len = sizeof path_var - 1};
    tb_put(t, c, &m, sizeof m, path_var, m.path_len);
    static const uint16_t vmm_kinds[] = {RS_REC_VMM_CREATE, RS_REC_VMM_RELEASE, RS_REC_VMM_MAP,
                                         RS_REC_VMM_UNMAP, RS_REC_VA_RESERVE, RS_REC_VA_FREE};
    for (int i = 0; i < 6; i++) {
        rs_rec_vmm v = {.h = hdr(vmm_kinds[i], 0), .handle = 0x10 + i, .ptr = 0x7e0000000000ull,
                        .size = 2097152, .offset = 0, .caller = 0x500100,
                        .api = RS_API_cuMemCreate + i, .device = 0, .status = 0};
        tb_put(t, c, &v, sizeof v, NULL, 0);
    }
    rs_rec_tensor te = {.h = hdr(RS_REC_TENSOR, 2), .ptr = 0x7e0000000200ull, .size = -512,
                        .total_allocated = 1024, .total_reserved = 2097152, .caller = 0x1,
                        .device_type = 1, .device = 0};
    tb_put(t, c, &te, sizeof te, NULL, 0);
    rs_rec_graph g = {.h = hdr(RS_REC_GRAPH, RS_GRAPH_BEGIN_CAPTURE), .stream = 0x77,
                      .api = RS_API_cudaStreamBeginCapture, .mode = 1};
    tb_put(t, c, &g, sizeof g, NULL, 0);
    rs_rec_collective co = {.h = hdr(RS_REC_COLLECTIVE, RS_COLL_ALL_REDUCE), .comm = 0xc0,
                            .count = 1024, .bytes = 4096, .stream = 0x77,
                            .api = RS_API_ncclAllReduce, .datatype = 7, .redop = 0, .peer = -1,
                            .nranks = -1, .rank = -1, .status = 0};
    tb_put(t, c, &co, sizeof co, NULL, 0);
    rs_rec_ctx cx = {.h = hdr(RS_REC_CTX_SET, 0), .ctx = 0xcc, .device = 1, .status = 0};
    tb_put(t, c, &cx, sizeof cx, NULL, 0);
    tb_seal(t, c);
    size_t len = tb_finish(t, 1);
    char *path = tb_tmpname();
    cr_assert_eq(tb_write(t, path, len), 0);
    char *out, *err;
    cr_assert_eq(run_dump(RECOMP_DUMP_PATH, path, &out, &err), 0, "%s", err);
    const char *body = strstr(out, "\nMODULE");
    cr_assert_not_null(body);
    static const char want[] =
        "MODULE t=0 tid=9 base=0x500000 lo=0x500000 hi=0x600000 build_id=- "
        "path=\"/opt/nccl/libnccl.so.2\"\n"
        "VMM_CREATE t=10 tid=9 api=cuMemCreate dev=0 handle=0x10 ptr=0x7e0000000000 size=2097152 "
        "offset=0 caller=0x500100 status=0 caller_lib=libnccl.so.2+0x100\n"
        "VMM_RELEASE t=20 tid=9 api=cuMemRelease dev=0 handle=0x11 ptr=0x7e0000000000 "
        "size=2097152 offset=0 caller=0x500100 status=0 caller_lib=libnccl.so.2+0x100\n"
        "VMM_MAP t=30 tid=9 api=cuMemMap dev=0 handle=0x12 ptr=0x7e0000000000 size=2097152 "
        "offset=0 caller=0x500100 status=0 caller_lib=libnccl.so.2+0x100\n"
        "VMM_UNMAP t=40 tid=9 api=cuMemUnmap dev=0 handle=0x13 ptr=0x7e0000000000 size=2097152 "
        "offset=0 caller=0x500100 status=0 caller_lib=libnccl.so.2+0x100\n"
        "VA_RESERVE t=50 tid=9 api=cuMemAddressReserve dev=0 handle=0x14 ptr=0x7e0000000000 "
        "size=2097152 offset=0 caller=0x500100 status=0 caller_lib=libnccl.so.2+0x100\n"
        "VA_FREE t=60 tid=9 api=cuMemAddressFree dev=0 handle=0x15 ptr=0x7e0000000000 "
        "size=2097152 offset=0 caller=0x500100 status=0 caller_lib=libnccl.so.2+0x100\n"
        "TENSOR t=70 tid=9 ptr=0x7e0000000200 size=-512 allocated=1024 reserved=2097152 "
        "device_type=1 dev=0 caller=0x1 signature=2\n"
        "GRAPH t=80 tid=9 op=begin_capture api=cudaStreamBeginCapture stream=0x77 graph=0x0 "
        "exec=0x0 mode=1 status=0\n"
        "COLLECTIVE t=90 tid=9 op=all_reduce api=ncclAllReduce comm=0xc0 count=1024 bytes=4096 "
        "stream=0x77 datatype=7 redop=0 peer=-1 nranks=-1 rank=-1 comm_hash=0x0 status=0\n"
        "CTX_SET t=100 tid=9 ctx=0xcc dev=1 status=0\n";
    cr_assert_str_eq(body + 1, want);
    free(out);
    free(err);
    unlink(path);
    free(path);
    tb_free(t);
}
#endif

Test(records, names_from_the_lists)
{
    cr_assert_str_eq(rs_api_name(RS_API_cudaMalloc), "cudaMalloc");
    cr_assert_str_eq(rs_api_name(RS_API_prctl), "prctl");
    cr_assert_str_eq(rs_api_name(0), "none");
    cr_assert_null(rs_api_name(9999));
    cr_assert_str_eq(rs_kind_name(RS_REC_POOL_ATTR), "POOL_ATTR");
    cr_assert_null(rs_kind_name(0));
    cr_assert_null(rs_kind_name(200));
    cr_assert_eq(rs_kind_fixed_size(RS_REC_OOM), sizeof(rs_rec_oom));
    cr_assert_str_eq(rs_mem_name(RS_MEM_MANAGED), "managed");
    cr_assert_null(rs_mem_name(3));
}

Test(records, usage_error_exit_1)
{
    char *err;
    cr_assert_eq(run_dump(RECOMP_DUMP_PATH, "/nonexistent/trace.bin", NULL, &err), 1);
    cr_assert(strstr(err, "recomp-dump: /nonexistent/trace.bin: cannot open"), "%s", err);
    free(err);
}
