/* trace_reader.c: validating, streaming reader of recompshim traces (v1).
 *
 * open:  map the file read-only -> check the file header -> check every
 *        published chunk header -> walk every record of every chunk once,
 *        validating it, folding it into the chunk's checksum when sealed
 *        (checked first, before the walk, when salvaging) and collecting
 *        the definitions (strings, domains, threads, modules, meta).
 * iter:  one stream per thread (its chunks in index order); a binary heap
 *        keyed by (t_ns, chunk index, position) merges them.
 *
 * Nothing from the file is trusted before it is checked: every offset and
 * length is compared with what the mapping holds before it is used.
 */
#include "trace_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grow.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "recompshim traces are little-endian and this reader reads them in place"
#endif

/* Limits on header geometry. The writer uses RS_HEADER_SIZE and
 * RS_CHUNK_SIZE; the reader takes the values from the header (so small
 * hand-made traces work) but only within these bounds. */
#define RD_MIN_CHUNK_SIZE 128u
#define RD_MAX_CHUNK_SIZE (64u * 1024u * 1024u)
#define RD_MAX_HEADER_SIZE (1024u * 1024u)

/* ---- name tables from the X-macro lists ---- */

static const char *const k_kind_names[] = {
#define RS_RECORD(NAME, code, st, var) [code] = #NAME,
#include "recomp/records.def"
#undef RS_RECORD
};

static const uint32_t k_kind_sizes[] = {
#define RS_RECORD(NAME, code, st, var) [code] = (uint32_t)sizeof(st),
#include "recomp/records.def"
#undef RS_RECORD
};

_Static_assert(sizeof(k_kind_names) / sizeof(k_kind_names[0]) ==
               sizeof(k_kind_sizes) / sizeof(k_kind_sizes[0]), "kind tables agree");

static const char *const k_api_names[] = {
    [0] = "none",
#define RS_API(name, code, lib) [code] = #name,
#include "recomp/apis.def"
#undef RS_API
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const char *
rs_kind_name(uint32_t kind)
{
    return kind < NELEM(k_kind_names) ? k_kind_names[kind] : NULL;
}

uint32_t
rs_kind_fixed_size(uint32_t kind)
{
    return kind < NELEM(k_kind_sizes) ? k_kind_sizes[kind] : 0;
}

const char *
rs_api_name(uint32_t code)
{
    return code < NELEM(k_api_names) ? k_api_names[code] : NULL;
}

const char *
rs_mem_name(uint32_t mem)
{
    static const char *const n[] = {
        [RS_MEM_DEVICE] = "device", [RS_MEM_HOST_PINNED] = "host_pinned",
        [RS_MEM_MANAGED] = "managed"};
    return mem < NELEM(n) ? n[mem] : NULL;
}

const char *
rs_meminfo_reason_name(uint32_t reason)
{
    static const char *const n[] = {
        [RS_MEMINFO_APP] = "app", [RS_MEMINFO_SAMPLE] = "sample", [RS_MEMINFO_OOM] = "oom"};
    return reason < NELEM(n) ? n[reason] : NULL;
}

const char *
rs_meta_key_name(uint32_t key)
{
    static const char *const n[] = {
        [RS_META_CMDLINE] = "cmdline", [RS_META_ENV] = "env",
        [RS_META_NVTX_OWNER] = "nvtx_owner", [RS_META_HOOK_MISSING] = "hook_missing",
        [RS_META_EXE] = "exe", [RS_META_NOTE] = "note",
#if RS_TRACE_VERSION_MINOR >= 1
        [RS_META_UNWINDER] = "unwinder", [RS_META_TENSORS] = "tensors",
#endif
#if RS_TRACE_VERSION_MINOR >= 3
        [RS_META_PYSTACK] = "pystack",
#endif
    };
    return key < NELEM(n) ? n[key] : NULL;
}

#if RS_TRACE_VERSION_MINOR >= 1
const char *
rs_graph_op_name(uint32_t op)
{
    static const char *const n[] = {
        [RS_GRAPH_BEGIN_CAPTURE] = "begin_capture", [RS_GRAPH_END_CAPTURE] = "end_capture",
        [RS_GRAPH_IS_CAPTURING] = "is_capturing", [RS_GRAPH_INSTANTIATE] = "instantiate",
        [RS_GRAPH_LAUNCH] = "launch"};
    return op < NELEM(n) ? n[op] : NULL;
}

const char *
rs_coll_op_name(uint32_t op)
{
    static const char *const n[] = {
        [RS_COLL_ALL_REDUCE] = "all_reduce", [RS_COLL_REDUCE_SCATTER] = "reduce_scatter",
        [RS_COLL_ALL_GATHER] = "all_gather", [RS_COLL_BROADCAST] = "broadcast",
        [RS_COLL_REDUCE] = "reduce", [RS_COLL_SEND] = "send", [RS_COLL_RECV] = "recv",
        [RS_COLL_ALL_TO_ALL] = "all_to_all", [RS_COLL_GROUP_START] = "group_start",
        [RS_COLL_GROUP_END] = "group_end", [RS_COLL_COMM_INIT] = "comm_init",
        [RS_COLL_COMM_SPLIT] = "comm_split", [RS_COLL_COMM_DESTROY] = "comm_destroy"};
    return op < NELEM(n) ? n[op] : NULL;
}
#endif

const char *
rs_window_kind_name(uint32_t kind)
{
    static const char *const n[] = {
        [RS_WINDOW_NONE] = "none", [RS_WINDOW_TIME] = "time",
        [RS_WINDOW_EVENTS] = "events", [RS_WINDOW_STEPS] = "steps"};
    return kind < NELEM(n) ? n[kind] : NULL;
}

const char *
rs_rank_source_name(uint32_t src)
{
    static const char *const n[] = {
        [RS_RANK_NONE] = "none", [RS_RANK_TORCHRUN] = "torchrun", [RS_RANK_OMPI] = "ompi",
        [RS_RANK_SLURM] = "slurm", [RS_RANK_PMI] = "pmi"};
    return src < NELEM(n) ? n[src] : NULL;
}

const char *
rs_mode_name(uint32_t mode)
{
    static const char *const n[] = {
        [RS_MODE_DEFAULT] = "default", [RS_MODE_ASYNC] = "async", [RS_MODE_NOCACHE] = "nocache"};
    return mode < NELEM(n) ? n[mode] : NULL;
}

void
rs_fput_escaped(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (c < 0x20 || c >= 0x7f)
                fprintf(f, "\\x%02x", c);
            else
                fputc(c, f);
        }
    }
}

/* ---- reader state ---- */

typedef struct rd_chunk {
    uint64_t offset;          /* of the chunk header in the file */
    uint32_t index;
    uint32_t tid;
    uint32_t used;            /* record bytes, snapshot taken at open */
    uint32_t flags;
} rd_chunk;

/* One definition (string, domain or thread name), sortable by key. */
typedef struct rd_def {
    uint64_t key;
    uint64_t t_ns;            /* threads: "latest" is by time, then offset */
    uint64_t offset;          /* file offset of the defining record */
    uint64_t pthread;         /* threads */
    const char *text;         /* strings, domains (inline name) */
    uint32_t len;
    uint32_t name_id;         /* domains named through the string table */
    uint32_t py[3];           /* PYFRAME: name_id, file_id, line; PYSTACK: parent, frame */
    char name[RS_THREAD_NAME_LEN + 1];
} rd_def;

typedef struct rd_defs {
    rd_def *v;
    size_t n, cap;
    /* after sort_defs, when the keys are dense (ids a writer hands out in
     * turn): by_id[key] = 1 + index in v of find_def's answer, 0 none, for
     * key < nby_id; one load per lookup instead of a binary search (NVTX
     * names are looked up on every push) */
    uint32_t *by_id;
    size_t nby_id;
} rd_defs;

typedef struct rd_meta {
    uint32_t key;
    uint32_t len;
    const char *value;
} rd_meta;

struct rs_reader {
    char *path;
    const unsigned char *base;
    size_t size;
    void *map;                /* mmap'd region or NULL */
    size_t map_len;
    void *owned;              /* aligned heap copy for open_mem, or NULL */
    rs_file_header hdr;

    rd_chunk *chunks;         /* initialised chunks, in index order */
    uint32_t nchunks;
    uint64_t nrecords;

    rd_defs strings, domains, threads, pthreads;
    rd_defs pyframes, pystacks;   /* (1.3) Python frames and stacks */
    rs_module_info *modules;  /* file order */
    size_t nmodules, cap_modules;
    size_t *mod_by_lo;        /* indices into modules, sorted by lo */
    uint64_t *mod_maxhi;      /* running max of hi along mod_by_lo */
    rd_meta *metas;
    size_t nmetas, cap_metas;

    char **warnings;
    size_t nwarnings;
    char err[640];

    int salvage;              /* RS_READ_SALVAGE: skip damaged chunks */
    uint32_t skipped_chunks;  /* chunks skipped by salvage */
    uint64_t lost_bytes;      /* their record bytes (as their headers claim) */
    uint32_t unsealed_chunks; /* read without a checksum (a killed process's last) */
    uint64_t unsealed_records;
    rs_header_exit exit;      /* (1.6) how the process left; zero when not recorded */
};

/* Grow *v (elements of `elem` bytes) to hold n+1; 0 ok, -1 out of memory. */
static int
grow(void **v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, ncap * elem);
    if (!p)
        return -1;
    *v = p;
    *cap = ncap;
    return 0;
}

static void
set_err(rs_reader *r, uint64_t off, const char *fmt, ...)
{
    int n = snprintf(r->err, sizeof r->err, "%s: offset %" PRIu64 ": ", r->path, off);
    if (n < 0 || (size_t)n >= sizeof r->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, sizeof r->err - (size_t)n, fmt, ap);
    va_end(ap);
}

/* An error in a record: names the chunk, record index and kind. */
static void
rec_err(rs_reader *r, uint64_t off, const rd_chunk *c, uint32_t idx, uint32_t kind,
        const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *kn = rs_kind_name(kind);
    if (kn)
        set_err(r, off, "chunk %" PRIu32 " record %" PRIu32 " (%s): %s", c->index, idx, kn, what);
    else
        set_err(r, off, "chunk %" PRIu32 " record %" PRIu32 " (kind %" PRIu32 "): %s",
                c->index, idx, kind, what);
}

static int
add_warning(rs_reader *r, const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "%s: ", r->path);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof line) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
    }
    char **w = realloc(r->warnings, (r->nwarnings + 1) * sizeof *w);
    if (!w)
        return -1;
    r->warnings = w;
    w[r->nwarnings] = strdup(line);
    if (!w[r->nwarnings])
        return -1;
    r->nwarnings++;
    return 0;
}

/* ---- record validation ---- */

/* Is [fixed, fixed + a + b) inside a record of `size` bytes? */
static int
fits(uint32_t size, uint32_t fixed, uint64_t a, uint64_t b)
{
    return (uint64_t)fixed + a + b <= (uint64_t)size;
}

/* Step 1 of check_record: the record's frame. Its header fits the
 * chunk's used bytes; its size is non-zero, 8-aligned, within the used
 * bytes and at least its kind's fixed size; its kind is known. Returns the
 * header, or NULL with r->err set (naming the offset). */
static const rs_record_header *
check_frame(rs_reader *r, const rd_chunk *c, uint32_t pos, uint32_t idx)
{
    uint64_t off = c->offset + sizeof(rs_chunk_header) + pos;
    uint32_t left = c->used - pos;
    if (left < sizeof(rs_record_header)) {
        rec_err(r, off, c, idx, 0,
                "record header (16 bytes) overruns the chunk's used bytes (%" PRIu32 " left)",
                left);
        return NULL;
    }
    const rs_record_header *h = (const rs_record_header *)(const void *)(r->base + off);
    uint32_t kind = h->kind, size = h->size;
    if (size == 0) {
        rec_err(r, off, c, idx, kind, "record size 0");
        return NULL;
    }
    if (size % RS_RECORD_ALIGN) {
        rec_err(r, off, c, idx, kind, "record size %" PRIu32 " is not a multiple of 8", size);
        return NULL;
    }
    uint32_t fixed = kind < NELEM(k_kind_sizes) ? k_kind_sizes[kind] : 0;
    if (!fixed) {
        rec_err(r, off, c, idx, kind,
                "unknown record kind %" PRIu32 " (format %u.%u knows kinds 1..%zu)", kind,
                RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR, NELEM(k_kind_names) - 1);
        return NULL;
    }
    if (size > left) {
        rec_err(r, off, c, idx, kind,
                "record size %" PRIu32 " overruns the chunk's used bytes (%" PRIu32 " left)",
                size, left);
        return NULL;
    }
    if (size < fixed) {
        rec_err(r, off, c, idx, kind,
                "record size %" PRIu32 " is smaller than the fixed size %" PRIu32, size, fixed);
        return NULL;
    }
    return h;
}

/* Step 2 of check_record: the fields of a framed record at file offset
 * `off`, one case per record kind (codes in range, inner lengths within
 * the record). 0 valid, -1 with r->err set (naming the field's offset). */
static int
check_fields(rs_reader *r, const rd_chunk *c, uint64_t off, uint32_t idx,
             const rs_record_header *h)
{
    uint32_t kind = h->kind, size = h->size;
    uint32_t fixed = kind < NELEM(k_kind_sizes) ? k_kind_sizes[kind] : 0;
    const void *p = h;
    switch ((enum rs_record_kind)kind) {
    case RS_REC_ALLOC: {
        const rs_rec_alloc *a = p;
        if (!rs_api_name(a->api)) {
            rec_err(r, off + offsetof(rs_rec_alloc, api), c, idx, kind,
                    "unknown api code %u", (unsigned)a->api);
            return -1;
        }
        if (!rs_mem_name(a->mem)) {
            rec_err(r, off + offsetof(rs_rec_alloc, mem), c, idx, kind,
                    "memory kind %u out of range (0..2)", (unsigned)a->mem);
            return -1;
        }
        break;
    }
    case RS_REC_FREE: {
        const rs_rec_free *a = p;
        if (!rs_api_name(a->api)) {
            rec_err(r, off + offsetof(rs_rec_free, api), c, idx, kind,
                    "unknown api code %u", (unsigned)a->api);
            return -1;
        }
        if (!rs_mem_name(a->mem)) {
            rec_err(r, off + offsetof(rs_rec_free, mem), c, idx, kind,
                    "memory kind %u out of range (0..2)", (unsigned)a->mem);
            return -1;
        }
        break;
    }
    case RS_REC_MEMINFO:
        if (!rs_meminfo_reason_name(h->aux)) {
            rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                    "meminfo reason %" PRIu32 " out of range (0..2)", h->aux);
            return -1;
        }
        break;
    case RS_REC_OOM: {
        const rs_rec_oom *o = p;
        if (!rs_api_name(o->api)) {
            rec_err(r, off + offsetof(rs_rec_oom, api), c, idx, kind,
                    "unknown api code %u", (unsigned)o->api);
            return -1;
        }
        if (!rs_mem_name(o->mem)) {
            rec_err(r, off + offsetof(rs_rec_oom, mem), c, idx, kind,
                    "memory kind %u out of range (0..2)", (unsigned)o->mem);
            return -1;
        }
        if (h->aux > RS_OOM_MAX_FRAMES) {
            rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                    "%" PRIu32 " frames, more than the format's %u", h->aux, RS_OOM_MAX_FRAMES);
            return -1;
        }
        if (!fits(size, fixed, (uint64_t)h->aux * 8u, 0)) {
            rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                    "%" PRIu32 " frames overrun the record (size %" PRIu32 ")", h->aux, size);
            return -1;
        }
        break;
    }
    case RS_REC_STRING: {
        const rs_rec_string *s = p;
        if (!fits(size, fixed, s->len, 0)) {
            rec_err(r, off + offsetof(rs_rec_string, len), c, idx, kind,
                    "len %" PRIu32 " overruns the record (size %" PRIu32 ")", s->len, size);
            return -1;
        }
        if (s->id == 0) {
            rec_err(r, off + offsetof(rs_rec_string, id), c, idx, kind, "string id 0");
            return -1;
        }
        break;
    }
    case RS_REC_NVTX_PUSH:
    case RS_REC_NVTX_START:
    case RS_REC_NVTX_MARK:
    case RS_REC_NVTX_DOMAIN: {
        const rs_rec_nvtx_name *n = p;
        if (!fits(size, fixed, n->text_len, 0)) {
            rec_err(r, off + offsetof(rs_rec_nvtx_name, text_len), c, idx, kind,
                    "text_len %" PRIu32 " overruns the record (size %" PRIu32 ")",
                    n->text_len, size);
            return -1;
        }
        break;
    }
    case RS_REC_META: {
        const rs_rec_meta *m = p;
        if (!fits(size, fixed, m->len, 0)) {
            rec_err(r, off + offsetof(rs_rec_meta, len), c, idx, kind,
                    "len %" PRIu32 " overruns the record (size %" PRIu32 ")", m->len, size);
            return -1;
        }
        if (!rs_meta_key_name(m->key)) {
            rec_err(r, off + offsetof(rs_rec_meta, key), c, idx, kind,
                    "unknown meta key %" PRIu32, m->key);
            return -1;
        }
        break;
    }
    case RS_REC_MODULE: {
        const rs_rec_module *m = p;
        if (!fits(size, fixed, m->build_id_len, m->path_len)) {
            rec_err(r, off + offsetof(rs_rec_module, build_id_len), c, idx, kind,
                    "build_id_len %" PRIu32 " + path_len %" PRIu32
                    " overrun the record (size %" PRIu32 ")",
                    m->build_id_len, m->path_len, size);
            return -1;
        }
        break;
    }
    case RS_REC_WINDOW: {
        const rs_rec_window *w = p;
        if (h->aux != RS_WINDOW_OPEN && h->aux != RS_WINDOW_CLOSE) {
            rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                    "window state %" PRIu32 " out of range (1..2)", h->aux);
            return -1;
        }
        if (w->window_kind < RS_WINDOW_TIME || w->window_kind > RS_WINDOW_STEPS) {
            rec_err(r, off + offsetof(rs_rec_window, window_kind), c, idx, kind,
                    "window kind %" PRIu32 " out of range (1..3)", w->window_kind);
            return -1;
        }
        break;
    }
#if RS_TRACE_VERSION_MINOR >= 1
    case RS_REC_VMM_CREATE:
    case RS_REC_VMM_RELEASE:
    case RS_REC_VMM_MAP:
    case RS_REC_VMM_UNMAP:
    case RS_REC_VA_RESERVE:
    case RS_REC_VA_FREE: {
        const rs_rec_vmm *v = p;
        if (!rs_api_name(v->api)) {
            rec_err(r, off + offsetof(rs_rec_vmm, api), c, idx, kind,
                    "unknown api code %u", (unsigned)v->api);
            return -1;
        }
        break;
    }
    case RS_REC_TENSOR:
        if (h->aux != 1 && h->aux != 2) {
            rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                    "report signature %" PRIu32 " out of range (1..2)", h->aux);
            return -1;
        }
        break;
    case RS_REC_GRAPH: {
        const rs_rec_graph *g = p;
        if (!rs_graph_op_name(h->aux)) {
            rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                    "graph op %" PRIu32 " out of range (1..5)", h->aux);
            return -1;
        }
        if (!rs_api_name(g->api)) {
            rec_err(r, off + offsetof(rs_rec_graph, api), c, idx, kind,
                    "unknown api code %u", (unsigned)g->api);
            return -1;
        }
        break;
    }
    case RS_REC_COLLECTIVE: {
        const rs_rec_collective *co = p;
        if (!rs_coll_op_name(h->aux)) {
            rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                    "collective op %" PRIu32 " out of range (1..13)", h->aux);
            return -1;
        }
        if (!rs_api_name(co->api)) {
            rec_err(r, off + offsetof(rs_rec_collective, api), c, idx, kind,
                    "unknown api code %u", (unsigned)co->api);
            return -1;
        }
        break;
    }
    case RS_REC_CTX_SET:
#endif
#if RS_TRACE_VERSION_MINOR >= 3
    case RS_REC_PYFRAME:
        if (((const rs_rec_pyframe *)p)->id == 0) {
            rec_err(r, off + offsetof(rs_rec_pyframe, id), c, idx, kind, "frame id 0");
            return -1;
        }
        break;
    case RS_REC_PYSTACK: {
        const rs_rec_pystack *ps = p;
        if (ps->id == 0 || ps->frame == 0) {
            rec_err(r, off + (ps->id ? offsetof(rs_rec_pystack, frame) : offsetof(rs_rec_pystack, id)),
                    c, idx, kind, "%s 0", ps->id ? "frame id" : "stack id");
            return -1;
        }
        if (ps->parent >= ps->id) {
            /* the shim numbers a stack after its parent: this also rules out cycles */
            rec_err(r, off + offsetof(rs_rec_pystack, parent), c, idx, kind,
                    "parent stack %" PRIu32 " is not below its own id %" PRIu32, ps->parent,
                    ps->id);
            return -1;
        }
        break;
    }
#endif
#if RS_TRACE_VERSION_MINOR >= 4
    case RS_REC_SITE: {
        const rs_rec_site *st = p;
        if (!rs_api_name(st->api)) {
            rec_err(r, off + offsetof(rs_rec_site, api), c, idx, kind,
                    "unknown api code %u", (unsigned)st->api);
            return -1;
        }
        if (!rs_mem_name(st->mem)) {
            rec_err(r, off + offsetof(rs_rec_site, mem), c, idx, kind,
                    "memory kind %u out of range (0..2)", (unsigned)st->mem);
            return -1;
        }
        break;
    }
    case RS_REC_ALLOC_C:
    case RS_REC_FREE_C:
        /* site and time are checked against the chunk's earlier records
         * (check_compact) */
        break;
#endif
#if RS_TRACE_VERSION_MINOR >= 5
    case RS_REC_ALLOC_P: /* as ALLOC_C: check_compact */
    case RS_REC_FREE_P:
        break;
#endif
    case RS_REC_SET_DEVICE:
    case RS_REC_THREAD:
    case RS_REC_NVTX_POP:
    case RS_REC_NVTX_END:
    case RS_REC_LIMIT:
    case RS_REC_POOL_ATTR:
        break;
    }
    return 0;
}

/* Validate the record at byte `pos` of chunk `c` (record `idx` there): its
 * frame, then its fields. On success stores it in *out and returns 0; else
 * sets r->err (naming the file offset of the damage) and returns -1. */
static int
check_record(rs_reader *r, const rd_chunk *c, uint32_t pos, uint32_t idx,
             const rs_record_header **out)
{
    const rs_record_header *h = check_frame(r, c, pos, idx);
    if (!h || check_fields(r, c, c->offset + sizeof(rs_chunk_header) + pos, idx, h) != 0)
        return -1;
    *out = h;
    return 0;
}

/* Is `kind` a compact record (ALLOC_C, FREE_C: 1.4; ALLOC_P, FREE_P: 1.5),
 * whose time is a delta from its chunk's previous record? */
static inline int
rd_is_compact(uint32_t kind)
{
    return kind == RS_REC_ALLOC_C || kind == RS_REC_FREE_C || kind == RS_REC_ALLOC_P ||
           kind == RS_REC_FREE_P;
}

/* The site id a compact record h names, and the byte offset of the field
 * holding it from the record's start (for error messages): ALLOC_P/FREE_P
 * keep it in the top 16 bits of their packed word (bytes 14-15). */
static void
compact_site(const rs_record_header *h, uint32_t *site, size_t *off)
{
    const void *p = h;
    switch (h->kind) {
    case RS_REC_ALLOC_C:
        *site = ((const rs_rec_alloc_c *)p)->site;
        *off = offsetof(rs_rec_alloc_c, site);
        return;
    case RS_REC_FREE_C:
        *site = ((const rs_rec_free_c *)p)->site;
        *off = offsetof(rs_rec_free_c, site);
        return;
    case RS_REC_ALLOC_P:
        *site = rs_packed_site(((const rs_rec_alloc_p *)p)->ptr_site);
        *off = offsetof(rs_rec_alloc_p, ptr_site) + RS_PACKED_PTR_BITS / 8;
        return;
    default: /* RS_REC_FREE_P */
        *site = rs_packed_site(((const rs_rec_free_p *)p)->ptr_site);
        *off = offsetof(rs_rec_free_p, ptr_site) + RS_PACKED_PTR_BITS / 8;
        return;
    }
}

/* What check_compact knows of a chunk's records so far (format 1.4). */
typedef struct rd_cstate {
    uint64_t t;       /* time of the previous record (reconstructed if compact) */
    uint32_t nsites;  /* SITE ids defined so far: 1..nsites */
    int have_t;       /* 0 before the chunk's first record */
} rd_cstate;

/* The rules that tie a record to the chunk's earlier ones (trace_format.h,
 * v1.4): SITE ids defined in turn from 1, compact records naming a site
 * defined before them and following a record whose time they extend. The
 * record at file offset `off` was framed and checked by check_record.
 * 0 valid, -1 with r->err set. */
static int
check_compact(rs_reader *r, const rd_chunk *c, uint64_t off, uint32_t idx,
              const rs_record_header *h, rd_cstate *st)
{
    uint32_t kind = h->kind;
    if (kind == RS_REC_SITE && h->aux != st->nsites + 1) {
        rec_err(r, off + offsetof(rs_record_header, aux), c, idx, kind,
                "site id %" PRIu32 " out of order (the chunk's next site id is %" PRIu32 ")",
                h->aux, st->nsites + 1);
        return -1;
    }
    if (!rd_is_compact(kind)) {
        st->nsites += kind == RS_REC_SITE;
        st->t = h->t_ns;
        st->have_t = 1;
        return 0;
    }
    const rs_compact_header *ch = (const void *)h;
    uint32_t site;
    size_t site_off;
    compact_site(h, &site, &site_off);
    if (!st->have_t) {
        rec_err(r, off, c, idx, kind,
                "a compact record cannot be its chunk's first record (its time is a delta "
                "from the previous record)");
        return -1;
    }
    if (site == 0 || site > st->nsites) {
        rec_err(r, off + site_off, c, idx, kind,
                "site id %" PRIu32 " is not defined earlier in this chunk (%" PRIu32
                " defined)", site, st->nsites);
        return -1;
    }
    if (st->t + ch->dt_ns < st->t) {
        rec_err(r, off + offsetof(rs_compact_header, dt_ns), c, idx, kind,
                "time overflows 64 bits (previous record %" PRIu64 " ns + dt %" PRIu32 ")",
                st->t, ch->dt_ns);
        return -1;
    }
    st->t += ch->dt_ns;
    return 0;
}

/* ---- definitions ---- */

static int
add_def(rd_defs *d, const rd_def *def)
{
    if (grow((void **)&d->v, &d->cap, d->n, sizeof *d->v))
        return -1;
    d->v[d->n++] = *def;
    return 0;
}

static int
cmp_def(const void *a, const void *b)
{
    const rd_def *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return 0;
}

static void
sort_defs(rd_defs *d)
{
    if (d->n > 1)
        am_sort(d->v, d->n, sizeof *d->v, cmp_def);
    /* dense keys (at most 4 slots per definition): a direct index; else
     * (or out of memory) find_def searches */
    if (!d->n || d->v[d->n - 1].key >= 4 * (uint64_t)d->n + 256 || d->n >= UINT32_MAX)
        return;
    size_t n = (size_t)d->v[d->n - 1].key + 1;
    free(d->by_id);
    d->nby_id = 0;
    d->by_id = calloc(n, sizeof *d->by_id);
    if (!d->by_id)
        return;
    d->nby_id = n;
    for (size_t i = 0; i < d->n; i++)
        d->by_id[d->v[i].key] = (uint32_t)i + 1; /* sorted: the last one wins */
}

/* The last definition (in sort order) with `key`, or NULL. */
static const rd_def *
find_def(const rd_defs *d, uint64_t key)
{
    if (key < d->nby_id)
        return d->by_id[key] ? &d->v[d->by_id[key] - 1] : NULL;
    size_t lo = 0, hi = d->n;   /* first index with v.key > key */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->v[mid].key <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || d->v[lo - 1].key != key)
        return NULL;
    return &d->v[lo - 1];
}

static int
collect(rs_reader *r, const rs_record_header *h, uint64_t off)
{
    const unsigned char *p = (const unsigned char *)h;
    rd_def d;
    memset(&d, 0, sizeof d);
    d.offset = off;
    switch (h->kind) {
    case RS_REC_STRING: {
        const rs_rec_string *s = (const void *)h;
        d.key = s->id;
        d.text = (const char *)p + sizeof *s;
        d.len = s->len;
        return add_def(&r->strings, &d);
    }
    case RS_REC_NVTX_DOMAIN: {
        const rs_rec_nvtx_name *n = (const void *)h;
        d.key = n->domain;
        d.name_id = n->name_id;
        d.text = (const char *)p + sizeof *n;
        d.len = n->text_len;
        return add_def(&r->domains, &d);
    }
    case RS_REC_THREAD: {
        const rs_rec_thread *t = (const void *)h;
        d.key = t->tid;
        d.t_ns = h->t_ns;
        d.pthread = t->pthread;
        memcpy(d.name, t->name, RS_THREAD_NAME_LEN);
        d.name[RS_THREAD_NAME_LEN] = '\0';
        if (t->tid && add_def(&r->threads, &d))
            return -1;
        d.key = t->pthread;
        return add_def(&r->pthreads, &d);
    }
    case RS_REC_META: {
        const rs_rec_meta *m = (const void *)h;
        if (grow((void **)&r->metas, &r->cap_metas, r->nmetas, sizeof *r->metas))
            return -1;
        r->metas[r->nmetas].key = m->key;
        r->metas[r->nmetas].len = m->len;
        r->metas[r->nmetas].value = (const char *)p + sizeof *m;
        r->nmetas++;
        return 0;
    }
#if RS_TRACE_VERSION_MINOR >= 3
    case RS_REC_PYFRAME: {
        const rs_rec_pyframe *f = (const void *)h;
        d.key = f->id;
        d.py[0] = f->name_id;
        d.py[1] = f->file_id;
        d.py[2] = f->line;
        return add_def(&r->pyframes, &d);
    }
    case RS_REC_PYSTACK: {
        const rs_rec_pystack *st = (const void *)h;
        d.key = st->id;
        d.py[0] = st->parent;
        d.py[1] = st->frame;
        return add_def(&r->pystacks, &d);
    }
#endif
    case RS_REC_MODULE: {
        const rs_rec_module *m = (const void *)h;
        if (grow((void **)&r->modules, &r->cap_modules, r->nmodules, sizeof *r->modules))
            return -1;
        rs_module_info *mi = &r->modules[r->nmodules++];
        mi->base = m->base;
        mi->lo = m->lo;
        mi->hi = m->hi;
        mi->build_id = p + sizeof *m;
        mi->build_id_len = m->build_id_len;
        mi->path = (const char *)p + sizeof *m + m->build_id_len;
        mi->path_len = m->path_len;
        return 0;
    }
    default:
        return 0;
    }
}

static int
cmp_mod(const void *a, const void *b, void *ctx)
{
    const rs_reader *r = ctx;
    const rs_module_info *x = &r->modules[*(const size_t *)a];
    const rs_module_info *y = &r->modules[*(const size_t *)b];
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* ---- open ---- */

/* Check the file header; fills r->hdr. 0 ok, -1 with r->err set. */
/* The header's checksum (format 1.2 on): the fields written at creation
 * must be what the shim wrote. Older traces have none: a warning says their
 * header is not verified. 0 ok, -1 with r->err set. */
static int
check_header_checksum(rs_reader *r)
{
    const rs_file_header *h = &r->hdr;
    if (h->version_minor < RS_TRACE_MINOR_HEADER_CHECKSUM && h->header_checksum) {
        /* older writers left these bytes zero (the header page's unused tail) */
        set_err(r, offsetof(rs_file_header, version_minor),
                "format %u.%u header with a header checksum (written from %u.%u on): "
                "the version field is damaged", h->version_major, h->version_minor,
                RS_TRACE_VERSION_MAJOR, RS_TRACE_MINOR_HEADER_CHECKSUM);
        return -1;
    }
    if (h->version_minor < RS_TRACE_MINOR_HEADER_CHECKSUM) {
        /* a warning lost to out of memory loses only the note */
        (void)add_warning(r, "format %u.%u: written before header checksums (%u.%u), its "
                             "header fields are not verified", h->version_major,
                          h->version_minor, RS_TRACE_VERSION_MAJOR,
                          RS_TRACE_MINOR_HEADER_CHECKSUM);
        return 0;
    }
    uint64_t want = rs_header_checksum(h);
    if (h->header_checksum != want) {
        set_err(r, offsetof(rs_file_header, header_checksum),
                "header checksum mismatch (stored 0x%016" PRIx64 ", computed 0x%016" PRIx64
                " over bytes 0..%zu): a header field written at creation is damaged",
                h->header_checksum, want, sizeof(rs_file_header) - 1);
        return -1;
    }
    return 0;
}

/* A version this reader refuses (another major, a newer minor) may be a
 * damaged version field: the header checksum (format 1.2 on) covers the
 * version, so where the file holds a whole header, a checksum that matches
 * with a version this reader knows in place of the stored one says the
 * field is damaged; one that matches neither says the header is damaged or
 * of a format that sums it otherwise. A checksum that matches the stored
 * version is a real other version (0: the caller's message). 1 with r->err
 * set when damage was found (hnew finding 8: a flipped byte at offset 10 read
 * as "format 1.251 is newer"). */
static int
damaged_version(rs_reader *r, uint16_t major, uint16_t minor)
{
    rs_file_header h;
    if (r->size < sizeof h)
        return 0;
    memcpy(&h, r->base, sizeof h);
    if (!h.header_checksum || rs_header_checksum(&h) == h.header_checksum)
        return 0;
    for (uint16_t m = RS_TRACE_MINOR_HEADER_CHECKSUM; m <= RS_TRACE_VERSION_MINOR; m++) {
        h.version_major = RS_TRACE_VERSION_MAJOR;
        h.version_minor = m;
        if (rs_header_checksum(&h) == h.header_checksum) {
            size_t off = major != RS_TRACE_VERSION_MAJOR ? offsetof(rs_file_header, version_major)
                                                         : offsetof(rs_file_header, version_minor);
            set_err(r, off,
                    "damaged header: the version field reads %u.%u, but the header checksum "
                    "matches format %u.%u (this reader's %u.%u): the version bytes are "
                    "damaged (--salvage does not repair a header)", major, minor,
                    RS_TRACE_VERSION_MAJOR, m, RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR);
            return 1;
        }
    }
    set_err(r, offsetof(rs_file_header, version_major),
            "trace format version %u.%u (this reader reads %u.%u) and the header checksum "
            "does not match (stored 0x%016" PRIx64 "): a damaged header, or a format "
            "this reader cannot check; if the trace comes from a newer shim, use a newer "
            "recompshim release (recomp-analyze, recomp-dump)", major, minor,
            RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR, h.header_checksum);
    return 1;
}

/* --salvage, a file shorter than its published chunks (a partial copy, a
 * full disk): read the `whole` chunks present; the rest count as skipped
 * chunks whose bytes are lost (their used counts were never seen: a whole
 * payload each, an upper bound), so the analysis reports the trace as
 * salvaged, COVERAGE: INCOMPLETE (hnew finding 7). 0, or -1 with r->err
 * set (out of memory). */
static int
salvage_truncated(rs_reader *r, uint32_t whole)
{
    rs_file_header *h = &r->hdr;
    uint32_t lost = h->chunks_published - whole;
    uint64_t payload = h->chunk_size - (uint32_t)sizeof(rs_chunk_header);
    r->skipped_chunks += lost;
    r->lost_bytes += (uint64_t)lost * payload;
    uint64_t off = (uint64_t)h->header_size + (uint64_t)whole * h->chunk_size;
    h->chunks_published = whole;
    if (add_warning(r, "salvage: truncated file: %zu bytes, %" PRIu32 " of %" PRIu32
                       " published chunk(s) whole; chunk(s) %" PRIu32 "..%" PRIu32
                       " from offset %" PRIu64 " lost (up to %" PRIu64 " bytes of records)",
                    r->size, whole, whole + lost, whole, whole + lost - 1, off,
                    (uint64_t)lost * payload) < 0) {
        set_err(r, 0, "out of memory");
        return -1;
    }
    return 0;
}

static int
check_header(rs_reader *r)
{
    if (r->size < RS_TRACE_MAGIC_LEN || memcmp(r->base, RS_TRACE_MAGIC, RS_TRACE_MAGIC_LEN)) {
        if (r->size < RS_TRACE_MAGIC_LEN)
            set_err(r, 0, "truncated file: %zu bytes, not a recompshim trace", r->size);
        else
            set_err(r, 0, "bad magic: not a recompshim trace (expected \"%s\"; "
                          "record one with LD_PRELOAD=librecompshim.so)", RS_TRACE_MAGIC);
        return -1;
    }
    if (r->size < 12) {
        set_err(r, 0, "truncated file: %zu bytes, the header needs %zu", r->size,
                sizeof(rs_file_header));
        return -1;
    }
    uint16_t major, minor;
    memcpy(&major, r->base + offsetof(rs_file_header, version_major), 2);
    memcpy(&minor, r->base + offsetof(rs_file_header, version_minor), 2);
    if ((major != RS_TRACE_VERSION_MAJOR || minor > RS_TRACE_VERSION_MINOR) &&
        damaged_version(r, major, minor))
        return -1;
    if (major != RS_TRACE_VERSION_MAJOR) {
        set_err(r, offsetof(rs_file_header, version_major),
                "trace format version %u.%u cannot be read by this reader (format %u.%u): "
                "different major version", major, minor, RS_TRACE_VERSION_MAJOR,
                RS_TRACE_VERSION_MINOR);
        return -1;
    }
    if (minor > RS_TRACE_VERSION_MINOR) {
        set_err(r, offsetof(rs_file_header, version_minor),
                "trace format version %u.%u is newer than this reader's %u.%u: "
                "use a newer recompshim release (recomp-analyze, recomp-dump)", major, minor,
                RS_TRACE_VERSION_MAJOR,
                RS_TRACE_VERSION_MINOR);
        return -1;
    }
    if (r->size < sizeof(rs_file_header)) {
        set_err(r, 0, "truncated file: %zu bytes, the header needs %zu", r->size,
                sizeof(rs_file_header));
        return -1;
    }
    memcpy(&r->hdr, r->base, sizeof r->hdr);
    const rs_file_header *h = &r->hdr;
    if (h->header_size < sizeof(rs_file_header) || h->header_size % RS_RECORD_ALIGN ||
        h->header_size > RD_MAX_HEADER_SIZE) {
        set_err(r, offsetof(rs_file_header, header_size),
                "header_size %" PRIu32 " invalid (expected %u)", h->header_size, RS_HEADER_SIZE);
        return -1;
    }
    if (h->chunk_size < RD_MIN_CHUNK_SIZE || h->chunk_size % RS_RECORD_ALIGN ||
        h->chunk_size > RD_MAX_CHUNK_SIZE) {
        set_err(r, offsetof(rs_file_header, chunk_size),
                "chunk_size %" PRIu32 " invalid (expected %u)", h->chunk_size, RS_CHUNK_SIZE);
        return -1;
    }
    if (h->flags & ~RS_HDR_KNOWN_FLAGS) {
        set_err(r, offsetof(rs_file_header, flags),
                "unknown header flags 0x%" PRIx32 " (known: 0x%x)", h->flags & ~RS_HDR_KNOWN_FLAGS,
                RS_HDR_KNOWN_FLAGS);
        return -1;
    }
    if (!rs_mode_name(h->mode)) {
        set_err(r, offsetof(rs_file_header, mode), "mode %" PRIu32 " out of range (0..2)",
                h->mode);
        return -1;
    }
    if (!rs_rank_source_name(h->rank_source)) {
        set_err(r, offsetof(rs_file_header, rank_source),
                "rank_source %" PRIu32 " out of range (0..4)", h->rank_source);
        return -1;
    }
    if (!rs_window_kind_name(h->window_kind)) {
        set_err(r, offsetof(rs_file_header, window_kind),
                "window_kind %" PRIu32 " out of range (0..3)", h->window_kind);
        return -1;
    }
    if (r->size < h->header_size) {
        set_err(r, offsetof(rs_file_header, header_size),
                "truncated file: %zu bytes, shorter than header_size %" PRIu32, r->size,
                h->header_size);
        return -1;
    }
    uint64_t need = (uint64_t)h->header_size + (uint64_t)h->chunks_published * h->chunk_size;
    if ((uint64_t)r->size < need) {
        uint32_t whole = (uint32_t)(((uint64_t)r->size - h->header_size) / h->chunk_size);
        if (r->salvage && check_header_checksum(r) == 0)
            return salvage_truncated(r, whole);
        set_err(r, offsetof(rs_file_header, chunks_published),
                "file shorter than its published counts: %" PRIu32 " chunks of %" PRIu32
                " bytes need %" PRIu64 " bytes, the file has %zu (a truncated copy?): "
                "%" PRIu32 " whole chunk(s) present, %s",
                h->chunks_published, h->chunk_size, need, r->size, whole,
                r->salvage ? "but the header itself is damaged"
                : whole ? "--salvage reads them and says what is lost"
                        : "nothing --salvage could read");
        return -1;
    }
    return check_header_checksum(r);
}

/* Compare chunk k's (at file offset off) stored checksum with the one
 * computed over its first len payload bytes. 0 equal, -1 with r->err set. */
static int
check_sum(rs_reader *r, uint32_t k, uint64_t off, uint64_t stored, uint64_t computed,
          uint32_t len)
{
    if (computed == stored)
        return 0;
    set_err(r, off, "chunk %" PRIu32 ": checksum mismatch: stored 0x%016" PRIx64
                    ", computed 0x%016" PRIx64 " over %" PRIu32 " bytes",
            k, stored, computed, len);
    return -1;
}

/* A chunk checksum folded piece by piece: FNV-1a 64 (rs_checksum) in
 * files before format 1.5, four lanes (rs_checksum4) from 1.5
 * (trace_format.h, rs_chunk_checksum). */
typedef struct rd_fold {
    int lanes;
    uint64_t fnv;
    rs_checksum4_state s4;
} rd_fold;

static void
rd_fold_init(rd_fold *f, unsigned minor)
{
    f->lanes = minor >= RS_TRACE_MINOR_PACKED;
    f->fnv = RS_CHECKSUM_INIT;
    rs_checksum4_init(&f->s4);
}

/* Every piece but the last a multiple of 8 bytes long. */
static void
rd_fold_more(rd_fold *f, const void *p, uint64_t n)
{
    if (f->lanes)
        rs_checksum4_more(&f->s4, p, n);
    else
        f->fnv = rs_checksum_more(f->fnv, p, n);
}

static uint64_t
rd_fold_final(const rd_fold *f)
{
    return f->lanes ? rs_checksum4_final(&f->s4) : f->fnv;
}

/* A sealed chunk's checksum, for scan_chunk to verify in its record walk. */
typedef struct rd_seal {
    uint64_t sum;  /* stored */
    uint32_t len;  /* bytes covered, from the payload's start (<= used) */
    int sealed;    /* 0: unsealed chunk, nothing to verify */
} rd_seal;

/* Check chunk k's header; 1 = valid chunk stored in *c, 0 = unclaimed
 * (magic 0) chunk to skip, -1 = error. A sealed chunk's checksum is
 * verified here, unless `seal` is not NULL: then it is stored there (len 0
 * for an unsealed chunk) and scan_chunk verifies it in the same pass that
 * validates the records, so each byte is read once (issue 19). */
static int
check_chunk(rs_reader *r, uint32_t k, rd_chunk *c, rd_seal *seal)
{
    const rs_file_header *fh = &r->hdr;
    uint64_t off = (uint64_t)fh->header_size + (uint64_t)k * fh->chunk_size;
    rs_chunk_header ch;
    memcpy(&ch, r->base + off, sizeof ch);
    if (ch.magic == 0) {
        if (fh->flags & RS_HDR_CLOSED) {
            set_err(r, off, "chunk %" PRIu32 " was claimed but never initialised (magic 0) "
                            "in a closed trace", k);
            return -1;
        }
        return 0;
    }
    if (ch.magic != RS_CHUNK_MAGIC) {
        set_err(r, off, "chunk %" PRIu32 ": bad chunk magic 0x%08" PRIx32 " (expected 0x%08x)",
                k, ch.magic, RS_CHUNK_MAGIC);
        return -1;
    }
    if (ch.index != k) {
        set_err(r, off + offsetof(rs_chunk_header, index),
                "chunk %" PRIu32 ": header says index %" PRIu32, k, ch.index);
        return -1;
    }
    if (ch.flags & ~RS_CHUNK_KNOWN_FLAGS) {
        set_err(r, off + offsetof(rs_chunk_header, flags),
                "chunk %" PRIu32 ": unknown chunk flags 0x%" PRIx32, k,
                ch.flags & ~RS_CHUNK_KNOWN_FLAGS);
        return -1;
    }
    uint32_t payload = fh->chunk_size - (uint32_t)sizeof(rs_chunk_header);
    if (ch.used > payload) {
        set_err(r, off + offsetof(rs_chunk_header, used),
                "chunk %" PRIu32 ": used %" PRIu32 " bytes exceeds its payload of %" PRIu32,
                k, ch.used, payload);
        return -1;
    }
    if (ch.flags & RS_CHUNK_SEALED) {
        if (ch.checksum_len > ch.used) {
            set_err(r, off + offsetof(rs_chunk_header, checksum_len),
                    "chunk %" PRIu32 ": checksum_len %" PRIu32 " exceeds used %" PRIu32, k,
                    ch.checksum_len, ch.used);
            return -1;
        }
        if (seal) {
            seal->sum = ch.checksum;
            seal->len = ch.checksum_len;
            seal->sealed = 1;
        } else if (check_sum(r, k, off, ch.checksum,
                             rs_chunk_checksum(r->hdr.version_minor,
                                               r->base + off + sizeof ch, ch.checksum_len),
                             ch.checksum_len)) {
            return -1;
        }
    } else if (seal) {
        seal->sealed = 0;
    }
    c->offset = off;
    c->index = k;
    c->tid = ch.tid;
    c->used = ch.used;
    c->flags = ch.flags;
    /* record_count is published after used: it may lag in a live file. */
    return 1;
}

/* Walk all records of chunk c, validating and collecting definitions.
 * With `seal` (a sealed chunk whose checksum check_chunk left to this
 * walk) the checksum is folded over each record as it is validated. The
 * damage reported is the same as checking the checksum first: a mismatch
 * wins over a record error or running out of memory in the same chunk. The
 * walk only stops early at a failure, which fails the open (callers pass a
 * seal only when not salvaging), so the definitions it collected from a
 * chunk with a bad checksum are never used. 0, or -1 with r->err set. */
static int
scan_chunk(rs_reader *r, const rd_chunk *c, uint32_t record_count, const rd_seal *seal)
{
    const unsigned char *payload = r->base + c->offset + sizeof(rs_chunk_header);
    uint32_t lim = seal ? seal->len : 0, summed = 0;
    rd_fold sum;
    rd_fold_init(&sum, r->hdr.version_minor);
    uint32_t pos = 0, idx = 0;
    rd_cstate cst = {0};
    int bad = 0;
    while (pos < c->used) {
        const rs_record_header *h;
        if (check_record(r, c, pos, idx, &h) ||
            check_compact(r, c, c->offset + sizeof(rs_chunk_header) + pos, idx, h, &cst)) {
            bad = 1;
            break;
        }
        if (collect(r, h, c->offset + sizeof(rs_chunk_header) + pos)) {
            set_err(r, c->offset, "out of memory collecting definitions");
            bad = 1;
            break;
        }
        pos += h->size;
        idx++;
        /* fold the validated bytes in runs of >= 2 KiB (still in cache);
         * every run ends at a record's end, so a multiple of 8 */
        if (pos < lim && pos - summed >= 2048) {
            rd_fold_more(&sum, payload + summed, pos - summed);
            summed = pos;
        }
    }
    if (seal) {
        rd_fold_more(&sum, payload + summed, lim - summed);
        if (check_sum(r, c->index, c->offset, seal->sum, rd_fold_final(&sum), lim))
            return -1;
    }
    if (bad)
        return -1;
    r->nrecords += idx;
    if ((r->hdr.flags & RS_HDR_CLOSED) && idx != record_count)
        add_warning(r, "offset %" PRIu64 ": chunk %" PRIu32 " says %" PRIu32
                       " records, its used bytes hold %" PRIu32,
                    c->offset + offsetof(rs_chunk_header, record_count), c->index,
                    record_count, idx);
    return 0;
}

/* --salvage: chunk k did not check out (r->err says where and why). Skip
 * it, note what is lost, and clear the error. 0, or -1 out of memory. */
static int
salvage_skip(rs_reader *r, uint32_t k)
{
    const rs_file_header *fh = &r->hdr;
    uint64_t off = (uint64_t)fh->header_size + (uint64_t)k * fh->chunk_size;
    uint32_t used, payload = fh->chunk_size - (uint32_t)sizeof(rs_chunk_header);
    memcpy(&used, r->base + off + offsetof(rs_chunk_header, used), 4);
    if (used > payload)
        used = payload;
    r->skipped_chunks++;
    r->lost_bytes += used;
    char why[640];
    snprintf(why, sizeof why, "%s", r->err);
    r->err[0] = '\0';
    return add_warning(r, "salvage: skipped chunk %" PRIu32 " (%" PRIu32
                          " bytes of records): %s", k, used, why);
}

/* (1.6) The exit fields after the header (rs_header_exit): how a process
 * that left through _exit/_Exit ended. Files before 1.6 (their bytes
 * there are not read, as before) and a header page too short to hold them
 * read as no exit seen; so does a `via` without RS_HDR_CLOSED (a live
 * file read while its process was sealing it at _exit: the flag is
 * published last). 0, or -1 with r->err naming the field. */
static int
read_exit(rs_reader *r)
{
    memset(&r->exit, 0, sizeof r->exit);
    if (r->hdr.version_minor < RS_TRACE_MINOR_EXIT ||
        r->hdr.header_size < RS_HEADER_EXIT_OFFSET + sizeof r->exit)
        return 0;
    rs_header_exit x;
    memcpy(&x, r->base + RS_HEADER_EXIT_OFFSET, sizeof x);
    if (x.via > RS_EXIT_VIA_MAX) {
        set_err(r, RS_HEADER_EXIT_OFFSET + offsetof(rs_header_exit, via),
                "exit via %" PRIu32 " out of range (0 none, 1 _exit, 2 _Exit)", x.via);
        return -1;
    }
    if (!x.via && x.status) {
        set_err(r, RS_HEADER_EXIT_OFFSET + offsetof(rs_header_exit, status),
                "exit status %" PRId32 " without an exit (via 0)", x.status);
        return -1;
    }
    if (r->hdr.flags & RS_HDR_CLOSED)
        r->exit = x;
    return 0;
}

static int
load(rs_reader *r)
{
    if (check_header(r) || read_exit(r))
        return -1;
    const rs_file_header *h = &r->hdr;
    if (!(h->flags & RS_HDR_CLOSED))
        add_warning(r, "not closed: the process was killed or is still running; "
                       "read to its last published record");
    if (h->flags & RS_HDR_DISABLED)
        add_warning(r, "the shim disabled itself after an error: the trace ends there");
    if (h->flags & RS_HDR_LIMIT_HIT)
        add_warning(r, "recording stopped at max_bytes=%" PRIu64 ": %" PRIu64
                       " records dropped", h->max_bytes, h->dropped_records);

    if (h->chunks_published) {
        r->chunks = calloc(h->chunks_published, sizeof *r->chunks);
        if (!r->chunks) {
            set_err(r, 0, "out of memory for %" PRIu32 " chunks", h->chunks_published);
            return -1;
        }
    }
    uint32_t unclaimed = 0;
    uint64_t first_unclaimed = 0;
    for (uint32_t k = 0; k < h->chunks_published; k++) {
        rd_chunk c;
        rd_seal seal = {0, 0, 0};
        /* Salvaging skips a chunk with a bad checksum before collecting
         * anything from it: the checksum is then checked first. */
        int rc = check_chunk(r, k, &c, r->salvage ? NULL : &seal);
        if (rc == 0) {
            if (!unclaimed++)
                first_unclaimed = (uint64_t)h->header_size + (uint64_t)k * h->chunk_size;
            continue;
        }
        if (rc > 0) {
            uint32_t record_count;
            memcpy(&record_count, r->base + c.offset + offsetof(rs_chunk_header, record_count),
                   4);
            uint64_t before = r->nrecords;
            rc = scan_chunk(r, &c, record_count, seal.sealed ? &seal : NULL) ? -1 : 1;
            if (rc > 0 && !(c.flags & RS_CHUNK_SEALED)) {
                r->unsealed_chunks++;
                r->unsealed_records += r->nrecords - before;
            }
        }
        if (rc < 0) {
            if (!r->salvage || salvage_skip(r, k) < 0)
                return -1;
            continue;
        }
        r->chunks[r->nchunks++] = c;
    }
    if (unclaimed)
        add_warning(r, "offset %" PRIu64 ": %" PRIu32 " chunk(s) claimed but not initialised "
                       "(magic 0): skipped", first_unclaimed, unclaimed);
    if (r->unsealed_chunks)
        add_warning(r, "%" PRIu32 " unsealed chunk(s) (no checksum: a killed process's last "
                       "chunks): their %" PRIu64 " record(s) were each checked for kind, size "
                       "and field ranges, not against a checksum",
                    r->unsealed_chunks, r->unsealed_records);
    if (r->skipped_chunks)
        add_warning(r, "INCOMPLETE (--salvage): %" PRIu32 " damaged chunk(s) skipped, about %"
                       PRIu64 " bytes of records lost", r->skipped_chunks, r->lost_bytes);

    sort_defs(&r->strings);
    sort_defs(&r->domains);
    sort_defs(&r->threads);
    sort_defs(&r->pthreads);
    sort_defs(&r->pyframes);
    sort_defs(&r->pystacks);
    if (r->nmodules) {
        r->mod_by_lo = malloc(r->nmodules * sizeof *r->mod_by_lo);
        r->mod_maxhi = malloc(r->nmodules * sizeof *r->mod_maxhi);
        if (!r->mod_by_lo || !r->mod_maxhi) {
            set_err(r, 0, "out of memory for the module map");
            return -1;
        }
        for (size_t i = 0; i < r->nmodules; i++)
            r->mod_by_lo[i] = i;
        qsort_r(r->mod_by_lo, r->nmodules, sizeof *r->mod_by_lo, cmp_mod, r);
        for (size_t k = 0; k < r->nmodules; k++) {
            uint64_t h = r->modules[r->mod_by_lo[k]].hi;
            r->mod_maxhi[k] = (k && r->mod_maxhi[k - 1] > h) ? r->mod_maxhi[k - 1] : h;
        }
    }
    return 0;
}

static void
put_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen) {
        strncpy(err, msg, errlen - 1);
        err[errlen - 1] = '\0';
    }
}

static rs_reader *
new_reader(const char *name)
{
    rs_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->path = strdup(name ? name : "(trace)");
    if (!r->path) {
        free(r);
        return NULL;
    }
    return r;
}

static int
finish_open(rs_reader *r, rs_reader **out, char *err, size_t errlen)
{
    if (load(r)) {
        put_err(err, errlen, r->err);
        rs_reader_close(r);
        return RS_READ_EFORMAT;
    }
    r->err[0] = '\0';
    *out = r;
    return RS_READ_OK;
}

int
rs_reader_open(const char *path, rs_reader **out, char *err, size_t errlen)
{
    return rs_reader_open_flags(path, 0, out, err, errlen);
}

void
rs_reader_salvaged(const rs_reader *r, uint32_t *chunks, uint64_t *bytes)
{
    *chunks = r->skipped_chunks;
    *bytes = r->lost_bytes;
}

int
rs_reader_open_flags(const char *path, unsigned flags, rs_reader **out, char *err,
                     size_t errlen)
{
    char line[640];
    *out = NULL;
    rs_reader *r = new_reader(path);
    if (!r) {
        put_err(err, errlen, "out of memory");
        return RS_READ_ESYS;
    }
    r->salvage = (flags & RS_READ_SALVAGE) != 0;
    /* O_NONBLOCK: a FIFO must not block the open; fstat rejects it below */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(line, sizeof line, "%s: cannot open: %s", path, strerror(errno));
        goto sys_err;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(line, sizeof line, "%s: cannot open: not a regular file", path);
        goto sys_err;
    }
    r->size = (size_t)st.st_size;
    if (r->size) {
        r->map = mmap(NULL, r->size, PROT_READ, MAP_SHARED, fd, 0);
        if (r->map == MAP_FAILED) {
            r->map = NULL;
            snprintf(line, sizeof line, "%s: cannot map %zu bytes: %s", path, r->size,
                     strerror(errno));
            goto sys_err;
        }
        r->map_len = r->size;
        r->base = r->map;
        madvise(r->map, r->map_len, MADV_SEQUENTIAL);
    } else {
        r->base = (const unsigned char *)"";
    }
    close(fd);
    return finish_open(r, out, err, errlen);

sys_err:
    if (fd >= 0)
        close(fd);
    put_err(err, errlen, line);
    rs_reader_close(r);
    return RS_READ_ESYS;
}

int
rs_reader_open_mem(const void *data, size_t len, const char *name, rs_reader **out,
                   char *err, size_t errlen)
{
    *out = NULL;
    rs_reader *r = new_reader(name);
    if (!r) {
        put_err(err, errlen, "out of memory");
        return RS_READ_ESYS;
    }
    r->size = len;
    r->base = data ? data : (const void *)"";
    if (len && ((uintptr_t)data % RS_RECORD_ALIGN)) {
        r->owned = malloc(len);
        if (!r->owned) {
            put_err(err, errlen, "out of memory");
            rs_reader_close(r);
            return RS_READ_ESYS;
        }
        memcpy(r->owned, data, len);
        r->base = r->owned;
    }
    return finish_open(r, out, err, errlen);
}

void
rs_reader_close(rs_reader *r)
{
    if (!r)
        return;
    if (r->map)
        munmap(r->map, r->map_len);
    free(r->owned);
    free(r->chunks);
    free(r->strings.v);
    free(r->strings.by_id);
    free(r->domains.v);
    free(r->domains.by_id);
    free(r->threads.v);
    free(r->threads.by_id);
    free(r->pthreads.v);
    free(r->pthreads.by_id);
    free(r->pyframes.v);
    free(r->pyframes.by_id);
    free(r->pystacks.v);
    free(r->pystacks.by_id);
    free(r->modules);
    free(r->mod_by_lo);
    free(r->mod_maxhi);
    free(r->metas);
    for (size_t i = 0; i < r->nwarnings; i++)
        free(r->warnings[i]);
    free(r->warnings);
    free(r->path);
    free(r);
}

const char *
rs_reader_path(const rs_reader *r)
{
    return r->path;
}

const rs_file_header *
rs_reader_header(const rs_reader *r)
{
    return &r->hdr;
}

int
rs_reader_closed(const rs_reader *r)
{
    return (r->hdr.flags & RS_HDR_CLOSED) != 0;
}

void
rs_reader_exit(const rs_reader *r, int *via, int *status)
{
    *via = (int)r->exit.via;
    *status = r->exit.status;
}

const char *
rs_exit_via_name(uint32_t via)
{
    return via == RS_EXIT__EXIT ? "_exit" : via == RS_EXIT__EXIT_C ? "_Exit" : NULL;
}

size_t
rs_reader_warning_count(const rs_reader *r)
{
    return r->nwarnings;
}

const char *
rs_reader_warning(const rs_reader *r, size_t i)
{
    return i < r->nwarnings ? r->warnings[i] : NULL;
}

uint32_t
rs_reader_chunk_count(const rs_reader *r)
{
    return r->nchunks;
}

uint64_t
rs_reader_record_count(const rs_reader *r)
{
    return r->nrecords;
}

const char *
rs_reader_error(const rs_reader *r)
{
    return r->err;
}

int64_t
rs_reader_rel_ns(const rs_reader *r, uint64_t t_ns)
{
    return (int64_t)(t_ns - r->hdr.mono_start_ns);
}

/* ---- definition lookups ---- */

int
rs_reader_string(const rs_reader *r, uint32_t id, const char **text, uint32_t *len)
{
    const rd_def *d = find_def(&r->strings, id);
    if (!d)
        return 0;
    *text = d->text;
    *len = d->len;
    return 1;
}

int
rs_reader_pystack(const rs_reader *r, uint32_t id, uint32_t *parent, uint32_t *frame)
{
    const rd_def *d = id ? find_def(&r->pystacks, id) : NULL;
    if (!d)
        return 0;
    *parent = d->py[0];
    *frame = d->py[1];
    return 1;
}

int
rs_reader_pyframe(const rs_reader *r, uint32_t id, rs_pyframe_info *out)
{
    const rd_def *d = id ? find_def(&r->pyframes, id) : NULL;
    if (!d)
        return 0;
    out->line = d->py[2];
    if (!rs_reader_string(r, d->py[0], &out->name, &out->name_len)) {
        out->name = "?";
        out->name_len = 1;
    }
    if (!rs_reader_string(r, d->py[1], &out->file, &out->file_len)) {
        out->file = "?";
        out->file_len = 1;
    }
    return 1;
}

int
rs_reader_domain(const rs_reader *r, uint32_t id, const char **name, uint32_t *len)
{
    if (id == 0)
        return 0;
    const rd_def *d = find_def(&r->domains, id);
    if (!d)
        return 0;
    if (d->name_id)
        return rs_reader_string(r, d->name_id, name, len);
    *name = d->text;
    *len = d->len;
    return 1;
}

static int
later(const rd_def *a, const rd_def *b)
{
    return a->t_ns != b->t_ns ? a->t_ns > b->t_ns : a->offset > b->offset;
}

const char *
rs_reader_thread_name(const rs_reader *r, uint32_t tid)
{
    const rd_def *d = find_def(&r->threads, tid);
    if (!d)
        return NULL;
    const rd_def *p = d->pthread ? find_def(&r->pthreads, d->pthread) : NULL;
    if (p && later(p, d))
        return p->name;
    return d->name;
}

const char *
rs_reader_thread_name_by_pthread(const rs_reader *r, uint64_t pthread)
{
    const rd_def *d = find_def(&r->pthreads, pthread);
    return d ? d->name : NULL;
}

size_t
rs_reader_meta_count(const rs_reader *r)
{
    return r->nmetas;
}

int
rs_reader_meta(const rs_reader *r, size_t i, uint32_t *key, const char **value, uint32_t *len)
{
    if (i >= r->nmetas)
        return 0;
    *key = r->metas[i].key;
    *value = r->metas[i].value;
    *len = r->metas[i].len;
    return 1;
}

size_t
rs_reader_module_count(const rs_reader *r)
{
    return r->nmodules;
}

const rs_module_info *
rs_reader_module(const rs_reader *r, size_t i)
{
    return i < r->nmodules ? &r->modules[i] : NULL;
}

const rs_module_info *
rs_reader_find_module(const rs_reader *r, uint64_t addr)
{
    /* lo = number of modules (by lo) with lo <= addr */
    size_t lo = 0, hi = r->nmodules;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->modules[r->mod_by_lo[mid]].lo <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Ranges may overlap (a library unloaded and another mapped there):
     * take the latest recorded module holding addr. mod_maxhi[k] is the
     * largest hi among the first k+1 modules, so the scan stops as soon as
     * no earlier module can reach addr. */
    const rs_module_info *best = NULL;
    size_t best_i = 0;
    for (size_t k = lo; k-- > 0 && r->mod_maxhi[k] > addr;) {
        size_t i = r->mod_by_lo[k];
        if (addr < r->modules[i].hi && (!best || i > best_i)) {
            best = &r->modules[i];
            best_i = i;
        }
    }
    return best;
}

int
rs_reader_format_addr(const rs_reader *r, uint64_t addr, char *buf, size_t n)
{
    if (n)
        buf[0] = '\0';
    const rs_module_info *m = rs_reader_find_module(r, addr);
    if (!m)
        return 0;
    const char *base = m->path;
    uint32_t len = m->path_len;
    for (uint32_t i = 0; i < m->path_len; i++)
        if (m->path[i] == '/') {
            base = m->path + i + 1;
            len = m->path_len - i - 1;
        }
    snprintf(buf, n, "%.*s+0x%" PRIx64, (int)len, base, addr - m->base);
    return 1;
}

/* ---- time-ordered iteration ---- */

typedef struct rd_stream {
    const uint32_t *chunks;   /* positions in r->chunks, index order */
    uint32_t nchunks;
    uint32_t cur;             /* current chunk (position in `chunks`) */
    uint32_t pos;             /* byte position of the current record */
    uint32_t idx;             /* record index in the chunk */
    const rs_record_header *rec;
    uint64_t t;               /* rec->t_ns, and the chunk's file index: the */
    uint32_t cindex;          /* merge order's keys, kept at hand */
    /* (1.4) the current chunk's SITE records so far: sites[id - 1] */
    const rs_rec_site **sites;
    uint32_t nsites, capsites;
} rd_stream;

/* A compact record handed out expanded (rs_iter_next). */
typedef union rd_full {
    rs_record_header h;
    rs_rec_alloc a;
    rs_rec_free f;
} rd_full;

struct rs_iter {
    rs_reader *r;
    uint32_t *order;          /* chunk positions sorted by (tid, index) */
    rd_stream *streams;
    size_t nstreams;
    size_t *heap;             /* stream indices, min-heap */
    size_t nheap;
    int failed;
    rd_full full;             /* the last compact record handed out, expanded */
};

static int
cmp_order(const void *a, const void *b, void *ctx)
{
    const rs_reader *r = ctx;
    const rd_chunk *x = &r->chunks[*(const uint32_t *)a];
    const rd_chunk *y = &r->chunks[*(const uint32_t *)b];
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* stream_load for the kinds of format 1.4 that tie a record to earlier
 * ones in its chunk (validated at open, check_compact): a SITE is kept for
 * the compact records after it; a compact record's time is the previous
 * record's plus its delta. 1, or -1 out of memory (r->err set). */
static int
stream_load_compact(rs_reader *r, rd_stream *s, const rs_record_header *h)
{
    if (rd_is_compact(h->kind)) {
        s->t += ((const rs_compact_header *)(const void *)h)->dt_ns;
        return 1;
    }
    s->t = h->t_ns;
    if (h->kind == RS_REC_SITE) {
        if (s->nsites == s->capsites) {
            uint32_t cap = s->capsites ? 2 * s->capsites : 16;
            void *q = realloc(s->sites, cap * sizeof *s->sites);
            if (!q) {
                set_err(r, 0, "out of memory reading call sites");
                return -1;
            }
            s->sites = q;
            s->capsites = cap;
        }
        s->sites[s->nsites++] = (const rs_rec_site *)(const void *)h;
    }
    return 1;
}

/* The full ALLOC/FREE record that compact record h (current in stream s,
 * at time s->t) stands for, written into *out: ALLOC_C/FREE_C (format 1.4)
 * name their site in a word of their own, ALLOC_P/FREE_P (1.5) in the packed
 * word's top 16 bits beside the pointer (its low 48 bits, zero-extended);
 * the site (validated at open) gives the rest. */
static void
expand_compact(const rd_stream *s, const rs_record_header *h, rd_full *out)
{
    const void *p = h;
    uint64_t ptr, size = 0;
    uint32_t site, pystack = 0;
    int alloc = 0;
    switch (h->kind) {
    case RS_REC_ALLOC_P: {
        const rs_rec_alloc_p *c = p;
        alloc = 1, site = rs_packed_site(c->ptr_site), ptr = rs_packed_ptr(c->ptr_site);
        size = c->size, pystack = c->pystack;
        break;
    }
    case RS_REC_FREE_P: {
        const rs_rec_free_p *c = p;
        site = rs_packed_site(c->ptr_site), ptr = rs_packed_ptr(c->ptr_site);
        break;
    }
    case RS_REC_ALLOC_C: {
        const rs_rec_alloc_c *c = p;
        alloc = 1, site = c->site, ptr = c->ptr, size = c->size, pystack = c->pystack;
        break;
    }
    default: { /* RS_REC_FREE_C */
        const rs_rec_free_c *c = p;
        site = c->site, ptr = c->ptr;
        break;
    }
    }
    const rs_rec_site *st = s->sites[site - 1];
    memset(out, 0, sizeof *out);
    if (alloc) {
        out->a.h = (rs_record_header){.kind = RS_REC_ALLOC, .size = sizeof out->a,
                                      .aux = pystack, .t_ns = s->t};
        out->a.ptr = ptr;
        out->a.size = size;
        out->a.stream = st->stream;
        out->a.caller = st->caller;
        out->a.api = st->api;
        out->a.mem = st->mem;
        out->a.device = st->device;
        return;
    }
    out->f.h = (rs_record_header){.kind = RS_REC_FREE, .size = sizeof out->f, .t_ns = s->t};
    out->f.ptr = ptr;
    out->f.stream = st->stream;
    out->f.caller = st->caller;
    out->f.api = st->api;
    out->f.mem = st->mem;
    out->f.device = st->device;
}

/* Load the stream's current record, moving to its next chunk when one is
 * used up. 1 = has a record, 0 = exhausted. Every record within a kept
 * chunk's used bytes was validated once, at open (load -> scan_chunk ->
 * check_record), and those bytes never change (the mapping is read-only
 * and a live writer only appends past `used`), so the walk only steps by
 * each record's checked size (issue 19: validating each record again on
 * every pass was a fifth of the analysis). */
static int
stream_load(rs_reader *r, rd_stream *s)
{
    while (s->cur < s->nchunks) {
        const rd_chunk *c = &r->chunks[s->chunks[s->cur]];
        if (s->pos < c->used) {
            const rs_record_header *h = (const rs_record_header *)(const void *)(
                r->base + c->offset + sizeof(rs_chunk_header) + s->pos);
            s->rec = h;
            s->cindex = c->index;
            if (__builtin_expect(h->kind < RS_REC_SITE, 1)) {
                s->t = h->t_ns;
                return 1;
            }
            return stream_load_compact(r, s, h);
        }
        s->cur++;
        s->pos = 0;
        s->idx = 0;
        s->nsites = 0;
    }
    s->rec = NULL;
    return 0;
}

static inline int
stream_less(const rs_iter *it, size_t a, size_t b)
{
    const rd_stream *x = &it->streams[a], *y = &it->streams[b];
    if (x->t != y->t)
        return x->t < y->t;
    if (x->cindex != y->cindex)
        return x->cindex < y->cindex;
    return x->pos < y->pos;
}

static inline void
sift_down(rs_iter *it, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < it->nheap && stream_less(it, it->heap[l], it->heap[m]))
            m = l;
        if (l + 1 < it->nheap && stream_less(it, it->heap[l + 1], it->heap[m]))
            m = l + 1;
        if (m == i)
            return;
        size_t t = it->heap[i];
        it->heap[i] = it->heap[m];
        it->heap[m] = t;
        i = m;
    }
}

rs_iter *
rs_iter_new(rs_reader *r)
{
    rs_iter *it = calloc(1, sizeof *it);
    if (!it)
        return NULL;
    it->r = r;
    uint32_t n = r->nchunks;
    if (n) {
        it->order = malloc(n * sizeof *it->order);
        it->streams = calloc(n, sizeof *it->streams);
        it->heap = malloc(n * sizeof *it->heap);
        if (!it->order || !it->streams || !it->heap) {
            rs_iter_free(it);
            return NULL;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        it->order[i] = i;
    if (n)
        qsort_r(it->order, n, sizeof *it->order, cmp_order, r);
    for (uint32_t i = 0; i < n;) {
        uint32_t j = i + 1;
        while (j < n && r->chunks[it->order[j]].tid == r->chunks[it->order[i]].tid)
            j++;
        rd_stream *s = &it->streams[it->nstreams++];
        s->chunks = it->order + i;
        s->nchunks = j - i;
        i = j;
    }
    for (size_t i = 0; i < it->nstreams; i++) {
        int rc = stream_load(r, &it->streams[i]);
        if (rc < 0)
            it->failed = 1;
        else if (rc > 0)
            it->heap[it->nheap++] = i;
    }
    for (size_t i = it->nheap / 2; i-- > 0;)
        sift_down(it, i);
    return it;
}

int
rs_iter_next(rs_iter *it, rs_event *ev)
{
    if (it->failed)
        return -1;
    if (!it->nheap)
        return 0;
    rs_reader *r = it->r;
    rd_stream *s = &it->streams[it->heap[0]];
    const rd_chunk *c = &r->chunks[s->chunks[s->cur]];
    ev->rec = s->rec;
    if (__builtin_expect(rd_is_compact(s->rec->kind), 0)) {
        expand_compact(s, s->rec, &it->full);
        ev->rec = &it->full.h;
    }
    ev->tid = c->tid;
    ev->chunk_index = c->index;
    ev->record_index = s->idx;
    ev->offset = c->offset + sizeof(rs_chunk_header) + s->pos;
    s->pos += s->rec->size;
    s->idx++;
    int rc = stream_load(r, s);
    if (rc < 0) {
        it->failed = 1;
        return 1; /* this event is good; the next call reports the error */
    }
    if (rc == 0)
        it->heap[0] = it->heap[--it->nheap];
    sift_down(it, 0);
    return 1;
}

void
rs_iter_free(rs_iter *it)
{
    if (!it)
        return;
    free(it->order);
    for (size_t i = 0; it->streams && i < it->nstreams; i++)
        free(it->streams[i].sites);
    free(it->streams);
    free(it->heap);
    free(it);
}
