/* make_corpus.c: writes the fuzz seed corpus (tests/fuzz/corpus).
 *
 * Usage: make-fuzz-corpus DIR. Small chunks (320 bytes) keep the seeds
 * small; the reader takes chunk_size from the header. Seeds named valid-*
 * must read, bad-* must be refused (test_corpus.c checks both). Rerun
 * after a format change and commit the files:
 *   ninja -C build-reader tests/fuzz/make-fuzz-corpus &&
 *   build-reader/tests/fuzz/make-fuzz-corpus tests/fuzz/corpus
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "trace_builder.h"

#define CHUNK 320u

static uint64_t s_t = 1000000;

static rs_record_header
hdr(uint16_t kind, uint32_t aux)
{
    rs_record_header h = {.kind = kind, .aux = aux, .t_ns = s_t};
    s_t += 7;
    return h;
}

/* Two threads, every record kind, over several small chunks. */
static tb_trace *
all_kinds(int closed, size_t *len)
{
    tb_trace *t = tb_new(CHUNK, 12);
    tb_header(t)->version_minor = 0; /* v1.0 kinds only: readable by every 1.x reader */
    uint32_t a = tb_chunk(t, 11);
    {
        static const unsigned char v[] = "\x01\x02/lib/libc10_cuda.so";
        rs_rec_module m = {.h = hdr(RS_REC_MODULE, 0), .base = 0x10000, .lo = 0x11000,
                           .hi = 0x20000, .build_id_len = 2, .path_len = sizeof v - 3};
        tb_put(t, a, &m, sizeof m, v, sizeof v - 1);
        rs_rec_string s = {.h = hdr(RS_REC_STRING, 0), .id = 1, .len = 4};
        tb_put(t, a, &s, sizeof s, "loss", 4);
        rs_rec_nvtx_name d = {.h = hdr(RS_REC_NVTX_DOMAIN, 0), .domain = 2, .name_id = 1};
        tb_put(t, a, &d, sizeof d, NULL, 0);
    }
    tb_seal(t, a);
    uint32_t b = tb_chunk(t, 12);
    {
        rs_rec_thread th = {.h = hdr(RS_REC_THREAD, 0), .tid = 12, .pthread = 0x99};
        strcpy(th.name, "pt_autograd_0");
        tb_put(t, b, &th, sizeof th, NULL, 0);
        rs_rec_alloc al = {.h = hdr(RS_REC_ALLOC, 0), .ptr = 0x7000, .size = 512,
                           .caller = 0x11234, .api = RS_API_cudaMallocAsync};
        tb_put(t, b, &al, sizeof al, NULL, 0);
        rs_rec_nvtx_name p = {.h = hdr(RS_REC_NVTX_PUSH, 1), .domain = 2, .text_len = 3};
        tb_put(t, b, &p, sizeof p, "bwd", 3);
    }
    tb_seal(t, b);
    uint32_t c = tb_chunk(t, 11);
    {
        uint64_t fr[2] = {0x11500, 0x5};
        rs_rec_oom o = {.h = hdr(RS_REC_OOM, 2), .size = 1 << 20, .caller = 0x11500,
                        .api = RS_API_cudaMalloc, .status = 2, .meminfo_status = 0};
        tb_put(t, c, &o, sizeof o, fr, sizeof fr);
        rs_rec_meminfo m = {.h = hdr(RS_REC_MEMINFO, RS_MEMINFO_OOM), .free_bytes = 3,
                            .total_bytes = 9};
        tb_put(t, c, &m, sizeof m, NULL, 0);
        rs_rec_nvtx_pop po = {.h = hdr(RS_REC_NVTX_POP, 0), .domain = 2};
        tb_put(t, c, &po, sizeof po, NULL, 0);
    }
    tb_seal(t, c);
    uint32_t d = tb_chunk(t, 12);
    {
        rs_rec_free f = {.h = hdr(RS_REC_FREE, 0), .ptr = 0x7000, .caller = 0x11300,
                         .api = RS_API_cudaFreeAsync};
        tb_put(t, d, &f, sizeof f, NULL, 0);
        rs_rec_nvtx_name s = {.h = hdr(RS_REC_NVTX_START, 0), .range_id = 3, .name_id = 1};
        tb_put(t, d, &s, sizeof s, NULL, 0);
        rs_rec_nvtx_end e = {.h = hdr(RS_REC_NVTX_END, 0), .range_id = 3};
        tb_put(t, d, &e, sizeof e, NULL, 0);
        rs_rec_nvtx_name mk = {.h = hdr(RS_REC_NVTX_MARK, 0), .text_len = 1};
        tb_put(t, d, &mk, sizeof mk, "x", 1);
    }
    tb_seal(t, d);
    uint32_t e = tb_chunk(t, 11);
    {
        rs_rec_set_device sd = {.h = hdr(RS_REC_SET_DEVICE, 0), .device = 1};
        tb_put(t, e, &sd, sizeof sd, NULL, 0);
        rs_rec_limit l = {.h = hdr(RS_REC_LIMIT, 0), .max_bytes = 1 << 30};
        tb_put(t, e, &l, sizeof l, NULL, 0);
        rs_rec_window w = {.h = hdr(RS_REC_WINDOW, RS_WINDOW_CLOSE),
                           .window_kind = RS_WINDOW_EVENTS, .value = 100};
        tb_put(t, e, &w, sizeof w, NULL, 0);
        rs_rec_pool_attr pa = {.h = hdr(RS_REC_POOL_ATTR, 0), .pool = 1, .value = 2, .attr = 3};
        tb_put(t, e, &pa, sizeof pa, NULL, 0);
        rs_rec_meta m = {.h = hdr(RS_REC_META, 0), .key = RS_META_CMDLINE, .len = 6};
        tb_put(t, e, &m, sizeof m, "a\0b\0c\0", 6);
        rs_rec_thread th = {.h = hdr(RS_REC_THREAD, 1), .tid = 0, .pthread = 0x99};
        strcpy(th.name, "renamed");
        tb_put(t, e, &th, sizeof th, NULL, 0);
    }
    if (closed)
        tb_seal(t, e);
    *len = tb_finish(t, closed);
    return t;
}

/* (1.4) Compact records: two threads, each chunk naming its own sites,
 * ALLOC_C/FREE_C after them, a full FREE between (a failed call). */
static tb_trace *
compact_kinds(size_t *len, uint64_t *first_compact, uint64_t *site_field, uint64_t *site2_aux)
{
    tb_trace *t = tb_new(CHUNK, 4);
    tb_header(t)->version_minor = RS_TRACE_MINOR_COMPACT;
    uint32_t a = tb_chunk(t, 21);
    {
        rs_rec_site st = {.h = hdr(RS_REC_SITE, 1), .caller = 0x11234, .stream = 0x5,
                          .api = RS_API_cudaMallocAsync, .device = 0};
        tb_put(t, a, &st, sizeof st, NULL, 0);
        rs_rec_alloc_c al = {.h = {.kind = RS_REC_ALLOC_C, .dt_ns = 3}, .ptr = 0x7000,
                             .size = 512, .site = 1};
        *first_compact = tb_put(t, a, &al, sizeof al, NULL, 0);
        *site_field = *first_compact + offsetof(rs_rec_alloc_c, site);
        rs_rec_site st2 = {.h = hdr(RS_REC_SITE, 2), .caller = 0x11300, .stream = 0x5,
                           .api = RS_API_cudaFreeAsync, .device = 0};
        *site2_aux = tb_put(t, a, &st2, sizeof st2, NULL, 0) + offsetof(rs_record_header, aux);
        rs_rec_free_c fr = {.h = {.kind = RS_REC_FREE_C, .dt_ns = 9}, .ptr = 0x7000, .site = 2};
        tb_put(t, a, &fr, sizeof fr, NULL, 0);
    }
    tb_seal(t, a);
    uint32_t b = tb_chunk(t, 22);
    {
        rs_rec_free f = {.h = hdr(RS_REC_FREE, 0), .ptr = 0x9000, .caller = 0x11300,
                         .api = RS_API_cudaFree, .status = 1};
        tb_put(t, b, &f, sizeof f, NULL, 0);
        rs_rec_site st = {.h = hdr(RS_REC_SITE, 1), .caller = 0x11400, .api = RS_API_cudaMalloc,
                          .mem = RS_MEM_MANAGED, .device = -1};
        tb_put(t, b, &st, sizeof st, NULL, 0);
        rs_rec_alloc_c al = {.h = {.kind = RS_REC_ALLOC_C, .dt_ns = 0}, .ptr = 0x8000,
                             .size = 64, .site = 1};
        tb_put(t, b, &al, sizeof al, NULL, 0);
        rs_rec_free_c fr = {.h = {.kind = RS_REC_FREE_C, .dt_ns = 1}, .ptr = 0x8000, .site = 1};
        tb_put(t, b, &fr, sizeof fr, NULL, 0);
    }
    tb_seal(t, b);
    *len = tb_finish(t, 1);
    return t;
}

/* (1.5) Packed records: SITEs, ALLOC_P/FREE_P after them, ALLOC_C/FREE_C
 * where the size or pointer does not pack, a full FREE (a failed call);
 * chunks sealed with the four-lane checksum. *site_field: the byte holding
 * the first FREE_P's site id (bits 48-63 of its packed word). */
static tb_trace *
packed_kinds(size_t *len, uint64_t *site_field)
{
    tb_trace *t = tb_new(CHUNK, 4);
    tb_header(t)->version_minor = RS_TRACE_MINOR_PACKED;
    uint32_t a = tb_chunk(t, 31);
    {
        rs_rec_site st = {.h = hdr(RS_REC_SITE, 1), .caller = 0x11234, .stream = 0x5,
                          .api = RS_API_cudaMallocAsync, .device = 0};
        tb_put(t, a, &st, sizeof st, NULL, 0);
        rs_rec_alloc_p al = {.h = {.kind = RS_REC_ALLOC_P, .dt_ns = 3},
                             .ptr_site = rs_packed_word(0x7f0000007000ull, 1), .size = 512,
                             .pystack = 0};
        tb_put(t, a, &al, sizeof al, NULL, 0);
        rs_rec_site st2 = {.h = hdr(RS_REC_SITE, 2), .caller = 0x11300, .stream = 0x5,
                           .api = RS_API_cudaFreeAsync, .device = 0};
        tb_put(t, a, &st2, sizeof st2, NULL, 0);
        rs_rec_free_p fr = {.h = {.kind = RS_REC_FREE_P, .dt_ns = 9},
                            .ptr_site = rs_packed_word(0x7f0000007000ull, 2)};
        *site_field = tb_put(t, a, &fr, sizeof fr, NULL, 0) + offsetof(rs_rec_free_p, ptr_site) + 6;
        rs_rec_alloc_c big = {.h = {.kind = RS_REC_ALLOC_C, .dt_ns = 2}, .ptr = 0x7f0000100000ull,
                              .size = 1ull << 33, .site = 1};
        tb_put(t, a, &big, sizeof big, NULL, 0);
    }
    tb_seal(t, a);
    uint32_t b = tb_chunk(t, 32);
    {
        rs_rec_free f = {.h = hdr(RS_REC_FREE, 0), .ptr = 0x9000, .caller = 0x11300,
                         .api = RS_API_cudaFree, .status = 1};
        tb_put(t, b, &f, sizeof f, NULL, 0);
        rs_rec_site st = {.h = hdr(RS_REC_SITE, 1), .caller = 0x11400, .api = RS_API_cudaMalloc,
                          .mem = RS_MEM_MANAGED, .device = -1};
        tb_put(t, b, &st, sizeof st, NULL, 0);
        rs_rec_alloc_p al = {.h = {.kind = RS_REC_ALLOC_P, .dt_ns = 0},
                             .ptr_site = rs_packed_word(RS_PACKED_PTR_MASK, 1), .size = 64};
        tb_put(t, b, &al, sizeof al, NULL, 0);
        rs_rec_free_c wide = {.h = {.kind = RS_REC_FREE_C, .dt_ns = 1},
                              .ptr = 0xffff800000001000ull, .site = 1};
        tb_put(t, b, &wide, sizeof wide, NULL, 0);
        rs_rec_free_p fr = {.h = {.kind = RS_REC_FREE_P, .dt_ns = 1},
                            .ptr_site = rs_packed_word(RS_PACKED_PTR_MASK, 1)};
        tb_put(t, b, &fr, sizeof fr, NULL, 0);
    }
    tb_seal(t, b);
    *len = tb_finish(t, 1);
    return t;
}

static int
put(const char *dir, const char *name, tb_trace *t, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (tb_write(t, path, len)) {
        fprintf(stderr, "make-fuzz-corpus: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make-fuzz-corpus DIR\n");
        return 1;
    }
    const char *dir = argv[1];
    int bad = 0;
    size_t len;
    tb_trace *t = all_kinds(1, &len);
    bad |= put(dir, "valid-all-kinds", t, len);
    bad |= put(dir, "bad-truncated", t, len - 100);
    tb_header(t)->version_minor = 9;
    bad |= put(dir, "bad-newer-minor", t, len);
    tb_header(t)->version_minor = 0;
    tb_chunk_header(t, 2)->checksum ^= 1;
    bad |= put(dir, "bad-checksum", t, len);
    tb_chunk_header(t, 2)->checksum ^= 1;
    /* record size not a multiple of 8 in chunk 1 (re-sealed) */
    unsigned char *rec = t->buf + tb_chunk_offset(t, 1) + sizeof(rs_chunk_header);
    rec[2] = 44;
    tb_seal(t, 1);
    bad |= put(dir, "bad-record-size", t, len);
    tb_free(t);

    t = all_kinds(0, &len);
    bad |= put(dir, "valid-not-closed", t, len);
    tb_free(t);

    /* (1.6) closed at _exit(3): the exit fields after the header */
    t = all_kinds(1, &len);
    tb_header(t)->version_minor = RS_TRACE_MINOR_EXIT;
    for (uint32_t k = 0; k < t->nchunks; k++)
        if (tb_chunk_header(t, k)->flags & RS_CHUNK_SEALED)
            tb_seal(t, k); /* the lanes checksum of 1.5 and later */
    rs_header_exit *x = (rs_header_exit *)(void *)(t->buf + RS_HEADER_EXIT_OFFSET);
    *x = (rs_header_exit){.via = RS_EXIT__EXIT, .status = 3};
    len = tb_finish(t, 1);
    bad |= put(dir, "valid-exit", t, len);
    x->via = RS_EXIT_VIA_MAX + 1; /* a way out the format does not know */
    bad |= put(dir, "bad-exit-via", t, len);
    tb_free(t);

    t = tb_new(CHUNK, 1);
    tb_header(t)->version_minor = 0;
    len = tb_finish(t, 1);
    bad |= put(dir, "valid-empty", t, len);
    tb_free(t);

    uint64_t first, site, aux;
    t = compact_kinds(&len, &first, &site, &aux);
    bad |= put(dir, "valid-compact", t, len);
    uint32_t v = 3; /* names a site the chunk has not defined */
    memcpy(t->buf + site, &v, 4);
    tb_seal(t, 0);
    bad |= put(dir, "bad-compact-site", t, len);
    v = 1;
    memcpy(t->buf + site, &v, 4);
    v = 5; /* SITE ids out of order */
    memcpy(t->buf + aux, &v, 4);
    tb_seal(t, 0);
    bad |= put(dir, "bad-compact-site-order", t, len);
    tb_free(t);
    /* a chunk whose first record is compact: no time base */
    t = tb_new(CHUNK, 1);
    tb_header(t)->version_minor = RS_TRACE_MINOR_COMPACT;
    uint32_t c = tb_chunk(t, 23);
    rs_rec_free_c fr = {.h = {.kind = RS_REC_FREE_C, .dt_ns = 1}, .ptr = 0x8000, .site = 1};
    tb_put(t, c, &fr, sizeof fr, NULL, 0);
    tb_seal(t, c);
    len = tb_finish(t, 1);
    bad |= put(dir, "bad-compact-first", t, len);
    tb_free(t);

    t = packed_kinds(&len, &site);
    bad |= put(dir, "valid-packed", t, len);
    /* chunk 0 sealed with 1.4's serial FNV-1a in a 1.5 file */
    rs_chunk_header *ch0 = tb_chunk_header(t, 0);
    uint64_t lanes = ch0->checksum;
    ch0->checksum = rs_checksum((unsigned char *)ch0 + sizeof *ch0, ch0->used);
    bad |= put(dir, "bad-packed-fnv-checksum", t, len);
    ch0->checksum = lanes ^ 0x100; /* a four-lane checksum off by one bit */
    bad |= put(dir, "bad-packed-checksum", t, len);
    ch0->checksum = lanes;
    unsigned char site3 = 3; /* a FREE_P naming a site the chunk has not defined */
    memcpy(t->buf + site, &site3, 1);
    tb_seal(t, 0);
    bad |= put(dir, "bad-packed-site", t, len);
    tb_free(t);
    /* a chunk whose first record is packed: no time base */
    t = tb_new(CHUNK, 1);
    tb_header(t)->version_minor = RS_TRACE_MINOR_PACKED;
    c = tb_chunk(t, 33);
    rs_rec_alloc_p ap = {.h = {.kind = RS_REC_ALLOC_P, .dt_ns = 1},
                         .ptr_site = rs_packed_word(0x8000, 1), .size = 8};
    tb_put(t, c, &ap, sizeof ap, NULL, 0);
    tb_seal(t, c);
    len = tb_finish(t, 1);
    bad |= put(dir, "bad-packed-first", t, len);
    tb_free(t);
    return bad;
}
