/* gen_trace: write a valid recompshim trace of about N events directly with
 * the format structs (include/recomp/trace_format.h), for benchmarks.
 *
 *   gen_trace OUT [EVENTS] [LAYERS] [PARAMS] [RANK WORLD]
 *
 * The workload: PARAMS parameter allocations at init, then iterations of a
 * Megatron-like step: per layer on the main thread (pid) self_attention >
 * core_attention alloc, mlp > linear_fc1 alloc; backward on pt_autograd_0
 * with an fc1 replay per layer and the frees; an Optimizer.step range.
 * Names are interned (STRING records). Chunks are sealed; the file is
 * closed. The very last record allocates one more buffer, larger than any
 * iteration's transient working set, so the device peak is the last record
 * of the trace (the worst case for a replay to the peak, which the analyzer
 * falls back to when it cannot keep the live set at the peak in its sweep).
 * The generator tracks live bytes itself and exits 1 if that does not hold.
 * Prints the number of records written and the peak (bytes, time).
 * GEN_TRACE_COMPACT=1 in the environment: ALLOC and FREE are written as
 * format 1.4's SITE + ALLOC_C/FREE_C records in a 1.4 file (chunk checksum
 * FNV-1a 64), the same events in a smaller file; GEN_TRACE_COMPACT=2: as
 * format 1.5's SITE + ALLOC_P/FREE_P records (as the shim writes them) in
 * a 1.5 file (four-lane chunk checksum), smaller again; otherwise as full
 * 1.3 records in a 1.5 file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recomp/trace_format.h"

#define MAIN 5000u
#define BWD 5001u

typedef struct cbuf {
    uint32_t tid;
    _Alignas(8) unsigned char buf[RS_CHUNK_SIZE]; /* holds an rs_chunk_header and records */
    uint32_t used, count;
    uint32_t site[2];         /* GEN_TRACE_COMPACT: SITE ids of alloc/free here, 0 none */
    uint32_t nsites;
} cbuf;

static int g_compact;         /* GEN_TRACE_COMPACT=1 (1.4) or 2 (1.5), else 0 */
static uint16_t g_minor;      /* the file's minor version */

static FILE *g_out;
static uint32_t g_chunks;
static uint64_t g_t = 1000, g_records;
/* Live bytes as the analyzer's device level sees them, and their maximum. */
static uint64_t g_live, g_max_live, g_max_t;
static cbuf g_c[2];

static void
flush_chunk(cbuf *c)
{
    if (!c->count)
        return;
    rs_chunk_header *h = (rs_chunk_header *)c->buf;
    memset(h, 0, sizeof *h);
    h->magic = RS_CHUNK_MAGIC;
    h->index = g_chunks;
    h->tid = c->tid;
    h->flags = RS_CHUNK_SEALED;
    h->used = c->used;
    h->record_count = c->count;
    h->checksum_len = c->used;
    h->checksum = rs_chunk_checksum(g_minor, c->buf + sizeof *h, c->used);
    memset(c->buf + sizeof *h + c->used, 0, RS_CHUNK_PAYLOAD - c->used);
    if (fseeko(g_out, (off_t)RS_HEADER_SIZE + (off_t)g_chunks * RS_CHUNK_SIZE, SEEK_SET) != 0 ||
        fwrite(c->buf, 1, RS_CHUNK_SIZE, g_out) != RS_CHUNK_SIZE) {
        perror("gen_trace: write");
        exit(1);
    }
    g_chunks++;
    c->used = 0;
    c->count = 0;
    c->site[0] = c->site[1] = 0;
    c->nsites = 0;
}

/* Append one record of `size` bytes at p to th's chunk (room was made). */
static unsigned char *
claim(cbuf *c, uint32_t size)
{
    unsigned char *p = c->buf + sizeof(rs_chunk_header) + c->used;
    c->used += size;
    c->count++;
    g_records++;
    return p;
}

/* Format 1.4: an ALLOC (is_free 0) or FREE as a compact record, after a
 * SITE when the chunk has not named this call site yet. The time is the
 * previous record's + 1, as put() would give it. */
static void
put_compact(int th, int is_free, uint64_t ptr, uint64_t size)
{
    cbuf *c = &g_c[th];
    /* 1.5 packs when the pointer fits 48 bits and the size 32, as the shim */
    int packed = g_compact == 2 && ptr <= RS_PACKED_PTR_MASK && size <= UINT32_MAX;
    uint32_t csize = packed ? (is_free ? sizeof(rs_rec_free_p) : sizeof(rs_rec_alloc_p))
                            : (is_free ? sizeof(rs_rec_free_c) : sizeof(rs_rec_alloc_c));
    if (c->used + sizeof(rs_rec_site) + csize > RS_CHUNK_PAYLOAD)
        flush_chunk(c);
    uint32_t dt = 1;
    if (!c->site[is_free]) {
        rs_rec_site *st = (void *)claim(c, sizeof *st);
        memset(st, 0, sizeof *st);
        c->site[is_free] = ++c->nsites;
        st->h = (rs_record_header){.kind = RS_REC_SITE, .size = sizeof *st,
                                   .aux = c->site[is_free], .t_ns = g_t};
        st->api = is_free ? RS_API_cudaFree : RS_API_cudaMalloc;
        dt = 0;
    }
    unsigned char *p = claim(c, csize);
    memset(p, 0, csize);
    if (packed && is_free) {
        rs_rec_free_p *f = (void *)p;
        f->h = (rs_compact_header){.kind = RS_REC_FREE_P, .size = sizeof *f, .dt_ns = dt};
        f->ptr_site = rs_packed_word(ptr, c->site[1]);
    } else if (packed) {
        rs_rec_alloc_p *a = (void *)p;
        a->h = (rs_compact_header){.kind = RS_REC_ALLOC_P, .size = sizeof *a, .dt_ns = dt};
        a->ptr_site = rs_packed_word(ptr, c->site[0]);
        a->size = (uint32_t)size;
    } else if (is_free) {
        rs_rec_free_c *f = (void *)p;
        f->h = (rs_compact_header){.kind = RS_REC_FREE_C, .size = sizeof *f, .dt_ns = dt};
        f->ptr = ptr;
        f->site = c->site[1];
    } else {
        rs_rec_alloc_c *a = (void *)p;
        a->h = (rs_compact_header){.kind = RS_REC_ALLOC_C, .size = sizeof *a, .dt_ns = dt};
        a->ptr = ptr;
        a->size = size;
        a->site = c->site[0];
    }
    g_t++;
    g_records -= dt == 0; /* a SITE is not one of the N events */
}

static void
put(int th, void *rec, uint32_t fixed, const void *var, uint32_t varlen, uint16_t kind,
    uint32_t aux)
{
    cbuf *c = &g_c[th];
    uint32_t size = RS_RECORD_ROUND(fixed + varlen);
    if (c->used + size > RS_CHUNK_PAYLOAD)
        flush_chunk(c);
    rs_record_header *h = rec;
    h->kind = kind;
    h->size = (uint16_t)size;
    h->aux = aux;
    h->t_ns = g_t++;
    unsigned char *p = c->buf + sizeof(rs_chunk_header) + c->used;
    memcpy(p, rec, fixed);
    if (varlen)
        memcpy(p + fixed, var, varlen);
    memset(p + fixed + varlen, 0, size - fixed - varlen);
    c->used += size;
    c->count++;
    g_records++;
}

enum { S_SA = 1, S_CA, S_MLP, S_FC1, S_OPT, S_NSTR };
static const char *const g_str[] = {
    [S_SA] = "megatron.core.transformer.transformer_layer.TransformerLayer._forward_attention.self_attention",
    [S_CA] = "megatron.core.transformer.attention.forward.core_attention",
    [S_MLP] = "megatron.core.transformer.transformer_layer.TransformerLayer._run_mlp.mlp",
    [S_FC1] = "megatron.core.transformer.mlp.forward.linear_fc1",
    [S_OPT] = "Optimizer.step#FusedAdam.step",
};

static void
push(int th, uint32_t id)
{
    rs_rec_nvtx_name r = {0};
    r.name_id = id;
    put(th, &r, sizeof r, NULL, 0, RS_REC_NVTX_PUSH, 1);
}

static void
pop(int th)
{
    rs_rec_nvtx_pop r = {0};
    put(th, &r, sizeof r, NULL, 0, RS_REC_NVTX_POP, 0);
}

static void
alloc(int th, uint64_t ptr, uint64_t size)
{
    rs_rec_alloc r = {0};
    r.ptr = ptr;
    r.size = size;
    r.api = RS_API_cudaMalloc;
    r.device = 0;
    if (g_compact && g_c[th].count)
        put_compact(th, 0, ptr, size);
    else
        put(th, &r, sizeof r, NULL, 0, RS_REC_ALLOC, 0);
    g_live += size;
    if (g_live > g_max_live) {
        g_max_live = g_live;
        g_max_t = g_t - 1;
    }
}

static void
release(int th, uint64_t ptr, uint64_t size)
{
    g_live -= size;
    rs_rec_free r = {0};
    r.ptr = ptr;
    r.api = RS_API_cudaFree;
    if (g_compact && g_c[th].count)
        put_compact(th, 1, ptr, 0);
    else
        put(th, &r, sizeof r, NULL, 0, RS_REC_FREE, 0);
}

static void
thread_rec(int th, uint32_t tid, const char *name)
{
    rs_rec_thread r = {0};
    r.tid = tid;
    r.pthread = tid;
    snprintf(r.name, sizeof r.name, "%s", name);
    put(th, &r, sizeof r, NULL, 0, RS_REC_THREAD, 0);
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gen_trace OUT [EVENTS] [LAYERS] [PARAMS] [RANK WORLD]\n");
        return 1;
    }
    uint64_t events = argc > 2 ? strtoull(argv[2], NULL, 10) : 10000000ull;
    int layers = argc > 3 ? atoi(argv[3]) : 32;
    int params = argc > 4 ? atoi(argv[4]) : 10000;
    int rank = argc > 5 ? atoi(argv[5]) : 0;
    int world = argc > 6 ? atoi(argv[6]) : 1;
    const char *cmp = getenv("GEN_TRACE_COMPACT");
    g_compact = cmp && !strcmp(cmp, "1") ? 1 : cmp && !strcmp(cmp, "2") ? 2 : 0;
    g_minor = g_compact == 1 ? RS_TRACE_MINOR_COMPACT : RS_TRACE_VERSION_MINOR;
    g_out = fopen(argv[1], "w+b");
    if (!g_out) {
        perror(argv[1]);
        return 1;
    }
    g_c[0].tid = MAIN;
    g_c[1].tid = BWD;
    thread_rec(0, MAIN, "python");
    for (uint32_t i = 1; i < S_NSTR; i++) {
        rs_rec_string s = {0};
        s.id = i;
        s.len = (uint32_t)strlen(g_str[i]);
        put(0, &s, sizeof s, g_str[i], s.len, RS_REC_STRING, 0);
    }
    thread_rec(1, BWD, "pt_autograd_0");
    for (int i = 0; i < params; i++)
        alloc(0, 0x100000000ull + (uint64_t)i * 0x10000, 4096 + (uint64_t)(i % 7) * 512);
    uint64_t act = 0x800000000ull;
    int iter = 0;
    while (g_records < events) {
        for (int l = 0; l < layers; l++) {
            push(0, S_SA);
            push(0, S_CA);
            alloc(0, act + (uint64_t)l * 0x200000, 1 << 20);
            pop(0);
            pop(0);
            push(0, S_MLP);
            push(0, S_FC1);
            alloc(0, act + (uint64_t)l * 0x200000 + 0x100000, 2 << 20);
            pop(0);
            pop(0);
        }
        for (int l = layers - 1; l >= 0; l--) {
            push(1, S_FC1);
            alloc(1, 0x700000000ull, 2 << 20);
            pop(1);
            release(1, 0x700000000ull, 2 << 20);
            release(1, act + (uint64_t)l * 0x200000 + 0x100000, 2 << 20);
            release(1, act + (uint64_t)l * 0x200000, 1 << 20);
        }
        push(0, S_OPT);
        if (iter == 0)
            for (int i = 0; i < params; i++)
                alloc(0, 0x300000000ull + (uint64_t)i * 0x10000, 8192);
        pop(0);
        iter++;
    }
    /* The last record: a buffer 1 MiB above the largest transient working
     * set seen, so the peak is here and a replay reads everything. */
    uint64_t last = g_max_live - g_live + (1u << 20);
    alloc(0, 0x900000000ull, last);
    if (g_max_t != g_t - 1) {
        fprintf(stderr, "gen_trace: the peak is not the last record\n");
        return 1;
    }
    flush_chunk(&g_c[0]);
    flush_chunk(&g_c[1]);

    rs_file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, RS_TRACE_MAGIC, RS_TRACE_MAGIC_LEN);
    h.version_major = RS_TRACE_VERSION_MAJOR;
    h.version_minor = g_minor;
    h.header_size = RS_HEADER_SIZE;
    h.chunk_size = RS_CHUNK_SIZE;
    h.flags = RS_HDR_CLOSED;
    h.chunks_published = g_chunks;
    h.pid = (int32_t)MAIN;
    h.rank = rank;
    h.local_rank = rank % 8;
    h.world_size = world;
    h.local_world_size = world < 8 ? world : 8;
    h.rank_source = RS_RANK_TORCHRUN;
    h.restart_count = -1;
    h.device = 0;
    h.mono_start_ns = 1000; /* g_t's first value */
    h.close_ns = g_t;
    snprintf(h.host, sizeof h.host, "bench");
    snprintf(h.shim_version, sizeof h.shim_version, "gen_trace");
    h.header_checksum = rs_header_checksum(&h); /* format 1.2: the creation fields */
    unsigned char page[RS_HEADER_SIZE];
    memset(page, 0, sizeof page);
    memcpy(page, &h, sizeof h);
    if (fseeko(g_out, 0, SEEK_SET) != 0 || fwrite(page, 1, sizeof page, g_out) != sizeof page ||
        fclose(g_out) != 0) {
        perror("gen_trace: header");
        return 1;
    }
    printf("%" PRIu64 " records, %d iterations, %u chunks, peak %" PRIu64 " bytes at t=%" PRIu64
           " ns after the start (the last record)\n",
           g_records, iter, g_chunks, g_max_live, g_max_t - 1000);
    return 0;
}
