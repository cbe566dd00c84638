/* record.c: the tracker core API (record.h): one function per record kind,
 * plus the window gate. Every function fills one fixed-size record in the
 * caller's chunk; none allocates, locks or calls CUDA. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "config.h"
#include "pystack.h"
#include "stack.h"
#include "writer.h"

static atomic_int g_window_open;      /* steps/time/events: inside the window now */
static atomic_int g_window_opened;    /* the window opened at least once */
static atomic_ullong g_window_events; /* events mode: gated records seen */

static void
write_window(uint32_t state, uint64_t value)
{
    rs_rec_window *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    r->h = (rs_record_header){.kind = RS_REC_WINDOW, .size = sizeof *r, .aux = state,
                              .t_ns = rs_now_ns()};
    r->window_kind = g_rs_cfg.window_kind;
    r->value = value;
    rs_rec_end(r, sizeof *r);
}

static void
window_set(int open, uint64_t value)
{
    int prev = atomic_exchange(&g_window_open, open);
    if (open)
        atomic_store(&g_window_opened, 1);
    if (prev != open)
        write_window(open ? RS_WINDOW_OPEN : RS_WINDOW_CLOSE, value);
}

int
rs_recording(void)
{
    if (rs_writer_state() != RS_W_OPEN)
        return 0;
    switch (g_rs_cfg.window_kind) {
    case RS_WINDOW_NONE:
        return 1;
    case RS_WINDOW_STEPS:
        return atomic_load_explicit(&g_window_open, memory_order_relaxed);
    case RS_WINDOW_TIME: {
        rs_file_header *h = rs_writer_header();
        uint64_t rel = h ? rs_now_ns() - h->mono_start_ns : 0;
        int in = rel >= g_rs_cfg.window_a && rel <= g_rs_cfg.window_b;
        if (in != atomic_load_explicit(&g_window_open, memory_order_relaxed))
            window_set(in, rel);
        return in;
    }
    case RS_WINDOW_EVENTS: {
        uint64_t i = atomic_fetch_add_explicit(&g_window_events, 1, memory_order_relaxed);
        int in = i >= g_rs_cfg.window_a && i <= g_rs_cfg.window_b;
        if (in != atomic_load_explicit(&g_window_open, memory_order_relaxed))
            window_set(in, i);
        return in;
    }
    }
    return 1;
}

void
rs_window_report_at_exit(void)
{
    if (g_rs_cfg.window_kind == RS_WINDOW_NONE || atomic_load(&g_window_opened) ||
        rs_writer_state() != RS_W_OPEN)
        return;
    char msg[256];
    int n = snprintf(msg, sizeof msg,
                     "RECOMPSHIM_WINDOW never opened%s: only definitions and OOMs were recorded",
                     g_rs_cfg.window_kind == RS_WINDOW_STEPS
                         ? " (no NVTX range named like RECOMPSHIM_STEP_MARKER followed by a "
                           "step number in the window; Megatron's --profile emits none)"
                         : "");
    if (n > 0)
        rs_record_meta(RS_META_NOTE, msg, strlen(msg));
    rs_log(0, "%s", msg);
}

void
rs_window_step_marker(const char *name, size_t len)
{
    if (g_rs_cfg.window_kind != RS_WINDOW_STEPS || rs_writer_state() != RS_W_OPEN)
        return;
    size_t plen = strlen(g_rs_cfg.step_marker);
    if (len <= plen || memcmp(name, g_rs_cfg.step_marker, plen) != 0)
        return;
    uint64_t n = 0;
    size_t i = plen;
    for (; i < len && name[i] >= '0' && name[i] <= '9'; i++)
        n = n * 10 + (uint64_t)(name[i] - '0');
    if (i == plen)
        return;
    window_set(n >= g_rs_cfg.window_a && n <= g_rs_cfg.window_b, n);
}

/* rs_recording's common case inline (the file open, no window): two
 * loads; windows take rs_recording. */
static inline __attribute__((always_inline)) int
recording_now(void)
{
    if (__builtin_expect(g_rs_cfg.window_kind == RS_WINDOW_NONE, 1))
        return __atomic_load_n(&rs_w_hot.state, __ATOMIC_ACQUIRE) == RS_W_OPEN;
    return rs_recording();
}

/* header.device is the first device any record named: reads the header's
 * line, writes it once. */
static inline void
note_device(int device)
{
    rs_file_header *h;
    if (device < 0 || rs_writer_state() != RS_W_OPEN || !(h = rs_w_hot.hdr))
        return;
    int32_t expect = -1;
    if (__builtin_expect(__atomic_load_n(&h->device, __ATOMIC_RELAXED) < 0, 0))
        __atomic_compare_exchange_n(&h->device, &expect, device, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
}

static inline rs_record_header
hdr(uint16_t kind, uint32_t size, uint32_t aux)
{
    t_rs.last_ns = rs_now_ns_inline();
    return (rs_record_header){.kind = kind, .size = (uint16_t)size, .aux = aux,
                              .t_ns = t_rs.last_ns};
}

/* ---- ALLOC and FREE, full or compact (format 1.4, trace_format.h) ---- */

/* Call sites named in the calling thread's current chunk: an open-addressed
 * table (linear probing), emptied when the thread claims a chunk (ids are
 * per chunk). A site is named at most once per chunk; once the table is
 * full, records of sites not in it are written in full, so no record costs
 * more than a full one (a site never thrashes another out). */
#define RS_SITE_SLOTS 16u
typedef struct rs_site_slot {
    uint64_t caller, stream;
    uint32_t key;                       /* api | mem << 16 | (uint8_t)device << 24 */
    uint32_t id;                        /* SITE id, 0 = empty */
} rs_site_slot;

/* One TLS object (one address computation per hook). */
typedef struct rs_sites {
    uint32_t epoch;                     /* t_rs.chunk_epoch the table belongs to */
    uint32_t n;                         /* ids handed out in that chunk */
    uint8_t last[2];                    /* slot of the last FREE (0) / ALLOC (1) site */
    rs_site_slot slot[RS_SITE_SLOTS];
} rs_sites;

static __thread rs_sites t_sites __attribute__((tls_model("initial-exec")));
static int g_compact = 1;               /* RECOMPSHIM_COMPACT, read once */

void
rs_record_init(void)
{
    /* as config.c reads RECOMPSHIM_COMPACT (a bad value there is said once
     * and means the default): 0, false or no turn compact records off */
    const char *v = getenv("RECOMPSHIM_COMPACT");
    g_compact = !(v && (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no")));
}

/* The slot holding this site in the current chunk's table, or the empty
 * slot where it goes, or NULL when the table is full without it. The
 * table is emptied first when the thread has moved to another chunk. */
static inline rs_site_slot *
site_slot(uint64_t caller, uint64_t stream, uint32_t key)
{
    rs_sites *t = &t_sites;
    if (__builtin_expect(t->epoch != t_rs.chunk_epoch, 0)) {
        memset(t->slot, 0, sizeof t->slot);
        t->n = 0;
        t->epoch = t_rs.chunk_epoch;
    }
    uint64_t x = (caller ^ (stream * 0x9e3779b97f4a7c15ull) ^ key) * 0xff51afd7ed558ccdull;
    uint32_t i = (uint32_t)(x >> 60);
    for (uint32_t probe = 0; probe < RS_SITE_SLOTS; probe++) {
        rs_site_slot *s = &t->slot[(i + probe) & (RS_SITE_SLOTS - 1)];
        if (!s->id || (s->caller == caller && s->stream == stream && s->key == key))
            return s;
    }
    return NULL;
}

/* The fields ALLOC and FREE share. */
typedef struct rs_af {
    uint64_t t_ns, ptr, size, stream, caller;
    uint16_t api;
    uint8_t mem;
    int8_t device;
    int32_t status;
    uint32_t pystack;
} rs_af;

static inline __attribute__((always_inline)) void
write_full(unsigned char *p, int is_alloc, const rs_af *f)
{
    if (is_alloc) {
        rs_rec_alloc *r = (void *)p;
        r->h = (rs_record_header){.kind = RS_REC_ALLOC, .size = sizeof *r, .aux = f->pystack,
                                  .t_ns = f->t_ns};
        r->ptr = f->ptr;
        r->size = f->size;
        r->stream = f->stream;
        r->caller = f->caller;
        r->api = f->api;
        r->mem = f->mem;
        r->device = f->device;
        r->status = f->status;
        rs_rec_end(r, sizeof *r);
        return;
    }
    rs_rec_free *r = (void *)p;
    r->h = (rs_record_header){.kind = RS_REC_FREE, .size = sizeof *r, .t_ns = f->t_ns};
    r->ptr = f->ptr;
    r->stream = f->stream;
    r->caller = f->caller;
    r->api = f->api;
    r->mem = f->mem;
    r->device = f->device;
    r->status = f->status;
    rs_rec_end(r, sizeof *r);
}

/* A compact record at p: `dt` ns after the chunk's previous record.
 * Packed (format 1.5: ALLOC_P 24 bytes, FREE_P 16) when the pointer fits
 * 48 bits and the size 32; else 1.4's ALLOC_C (32) / FREE_C (24).
 * Returns the bytes written. */
static inline __attribute__((always_inline)) uint32_t
write_compact(unsigned char *p, int is_alloc, const rs_af *f, uint32_t site, uint32_t dt)
{
    int packed = f->ptr <= RS_PACKED_PTR_MASK;
    if (is_alloc) {
        if (__builtin_expect(packed && f->size <= UINT32_MAX, 1)) {
            rs_rec_alloc_p *c = (void *)p;
            c->h = (rs_compact_header){.kind = RS_REC_ALLOC_P, .size = sizeof *c, .dt_ns = dt};
            c->ptr_site = rs_packed_word(f->ptr, site);
            c->size = (uint32_t)f->size;
            c->pystack = f->pystack;
            return sizeof *c;
        }
        rs_rec_alloc_c *c = (void *)p;
        c->h = (rs_compact_header){.kind = RS_REC_ALLOC_C, .size = sizeof *c, .dt_ns = dt};
        c->ptr = f->ptr;
        c->size = f->size;
        c->site = site;
        c->pystack = f->pystack;
        return sizeof *c;
    }
    if (__builtin_expect(packed, 1)) {
        rs_rec_free_p *c = (void *)p;
        c->h = (rs_compact_header){.kind = RS_REC_FREE_P, .size = sizeof *c, .dt_ns = dt};
        c->ptr_site = rs_packed_word(f->ptr, site);
        return sizeof *c;
    }
    rs_rec_free_c *c = (void *)p;
    c->h = (rs_compact_header){.kind = RS_REC_FREE_C, .size = sizeof *c, .dt_ns = dt};
    c->ptr = f->ptr;
    c->site = site;
    c->reserved = 0;
    return sizeof *c;
}

/* Write one ALLOC or FREE: compact when the call succeeded and its site is
 * named in this chunk and the time fits a 32-bit delta from the chunk's
 * previous record; SITE + compact when the site is new to the chunk and
 * the site table has room; else the full record. Reserves the largest of these (SITE + ALLOC_C, 72
 * bytes) so the choice is made in the chunk the record lands in; cls is the
 * record class (RS_GATED, or RS_UNGATED for an OOM's retry: retry_class). */
static inline __attribute__((always_inline)) void
write_alloc_free(int is_alloc, const rs_af *f, int cls)
{
    unsigned char *p = rs_rec_begin_fast(sizeof(rs_rec_site) + sizeof(rs_rec_alloc_c), cls);
    if (!p)
        return;
    note_device(f->device);
    if (f->status != 0 || !g_compact) {
        write_full(p, is_alloc, f);
        return;
    }
    uint32_t key = f->api | (uint32_t)f->mem << 16 | (uint32_t)(uint8_t)f->device << 24;
    /* most hooks repeat their previous site: check its slot before hashing */
    rs_sites *t = &t_sites;
    rs_site_slot *s = &t->slot[t->last[is_alloc]];
    if (t->epoch != t_rs.chunk_epoch || !s->id || s->caller != f->caller ||
        s->stream != f->stream || s->key != key) {
        s = site_slot(f->caller, f->stream, key);
        if (!s) { /* more distinct sites in this chunk than the table holds */
            write_full(p, is_alloc, f);
            return;
        }
        t->last[is_alloc] = (uint8_t)(s - t->slot);
    }
    if (s->id) {
        uint64_t dt = f->t_ns - t_rs.ct_ns; /* wraps past UINT32_MAX when t_ns < ct_ns */
        if (t_rs.ct_epoch != t_rs.chunk_epoch || dt > UINT32_MAX) {
            write_full(p, is_alloc, f);
            return;
        }
        uint32_t n = write_compact(p, is_alloc, f, s->id, (uint32_t)dt);
        rs_rec_end_n(n, 1, f->t_ns);
        return;
    }
    *s = (rs_site_slot){.caller = f->caller, .stream = f->stream, .key = key,
                        .id = ++t_sites.n};
    rs_rec_site *d = (void *)p;
    *d = (rs_rec_site){.h = {.kind = RS_REC_SITE, .size = sizeof *d, .aux = s->id,
                             .t_ns = f->t_ns},
                       .caller = f->caller, .stream = f->stream, .api = f->api, .mem = f->mem,
                       .device = f->device};
    uint32_t n = write_compact(p + sizeof *d, is_alloc, f, s->id, 0);
    rs_rec_end_n(sizeof *d + n, 2, f->t_ns);
}

/* The record class of a successful allocation of size bytes: ungated when it
 * retries the request of this thread's last OOM record (the caching
 * allocator frees its cache and asks again), so it lands past the byte limit
 * in the reserved tail next to that OOM and tells a recovered failure from
 * the fatal one (issue 14 D); gated otherwise. Clears the pending request. */
static int
retry_class(uint64_t size, int status)
{
    uint64_t failed = t_rs.oom_size;
    t_rs.oom_size = 0;
    return failed && failed == size && status == 0 ? RS_UNGATED : RS_GATED;
}

void
rs_record_alloc(uint16_t api, uint8_t mem, uint64_t ptr, uint64_t size, uint64_t stream,
                uint64_t caller, int status)
{
    if (!recording_now())
        return;
    t_rs.last_ns = rs_now_ns_inline();
    rs_af f = {.t_ns = t_rs.last_ns, .ptr = ptr, .size = size, .stream = stream,
               .caller = caller, .api = api, .mem = mem, .device = t_rs.device,
               .status = status, .pystack = rs_pystack_current()};
    write_alloc_free(1, &f, mem == RS_MEM_DEVICE ? retry_class(size, status) : RS_GATED);
}

void
rs_record_free(uint16_t api, uint8_t mem, uint64_t ptr, uint64_t stream, uint64_t caller,
               int status)
{
    rs_record_free_at(rs_now_ns_inline(), api, mem, ptr, stream, caller, status);
}

void
rs_record_free_at(uint64_t t_ns, uint16_t api, uint8_t mem, uint64_t ptr, uint64_t stream,
                  uint64_t caller, int status)
{
    if (!recording_now())
        return;
    /* t_ns was read before the free (no second clock read) */
    t_rs.last_ns = t_ns;
    rs_af f = {.t_ns = t_ns, .ptr = ptr, .stream = stream, .caller = caller, .api = api,
               .mem = mem, .device = t_rs.device, .status = status};
    write_alloc_free(0, &f, RS_GATED);
}

void
rs_record_oom(uint16_t api, uint8_t mem, uint64_t size, uint64_t caller, int status,
              uint64_t free_bytes, uint64_t total_bytes, int meminfo_status)
{
    if (rs_writer_state() != RS_W_OPEN)
        return;
    uint64_t frames[RS_OOM_MAX_FRAMES];
    /* Innermost first: the hook and its helpers, then the job. */
    int n = rs_capture_stack(frames, RS_OOM_MAX_FRAMES, 0);
    uint32_t size_rec = (uint32_t)(sizeof(rs_rec_oom) + (size_t)n * sizeof(uint64_t));
    rs_rec_oom *r = rs_rec_begin(size_rec, RS_UNGATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_OOM, size_rec, (uint32_t)n);
    r->size = size;
    r->caller = caller;
    r->free_bytes = free_bytes;
    r->total_bytes = total_bytes;
    r->api = api;
    r->mem = mem;
    r->device = t_rs.device;
    r->status = status;
    r->meminfo_status = meminfo_status;
    r->pystack = rs_pystack_current();
    memcpy(r + 1, frames, (size_t)n * sizeof(uint64_t));
    rs_rec_end(r, size_rec);
    t_rs.oom_size = mem == RS_MEM_DEVICE ? size : 0;
    rs_modules_refresh();
    rs_writer_sync();
}

void
rs_record_meminfo(uint32_t reason, uint64_t free_bytes, uint64_t total_bytes, int device,
                  int status)
{
    rs_file_header *h = rs_writer_header();
    uint64_t unset = 0;
    /* Threads sample concurrently: the first capacity seen stays. */
    if (h && status == 0 && total_bytes)
        __atomic_compare_exchange_n(&h->device_capacity, &unset, total_bytes, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    if (status == 0)
        note_device(device);
    if (reason != RS_MEMINFO_OOM && !rs_recording())
        return;
    rs_rec_meminfo *r = rs_rec_begin(sizeof *r, reason == RS_MEMINFO_OOM ? RS_UNGATED : RS_GATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_MEMINFO, sizeof *r, reason);
    r->free_bytes = free_bytes;
    r->total_bytes = total_bytes;
    r->device = device;
    r->status = status;
    rs_rec_end(r, sizeof *r);
}

void
rs_record_set_device(int device, int status)
{
    if (status == 0)
        note_device(device);
    rs_rec_set_device *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_SET_DEVICE, sizeof *r, 0);
    r->device = device;
    r->status = status;
    rs_rec_end(r, sizeof *r);
}

void
rs_record_pool_attr(uint64_t pool, uint32_t attr, uint64_t value, int status)
{
    if (!rs_recording())
        return;
    rs_rec_pool_attr *r = rs_rec_begin(sizeof *r, RS_GATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_POOL_ATTR, sizeof *r, 0);
    r->pool = pool;
    r->value = value;
    r->attr = attr;
    r->status = status;
    rs_rec_end(r, sizeof *r);
}

void
rs_record_thread(uint32_t tid, uint64_t pthread, const char *name, int rename)
{
    rs_rec_thread *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_THREAD, sizeof *r, rename ? 1u : 0u);
    r->tid = tid;
    r->reserved = 0;
    r->pthread = pthread;
    memset(r->name, 0, sizeof r->name);
    if (name)
        strncpy(r->name, name, sizeof r->name - 1);
    rs_rec_end(r, sizeof *r);
}

void
rs_record_meta(uint32_t key, const void *bytes, size_t len)
{
    if (len > RS_MAX_RECORD_SIZE - sizeof(rs_rec_meta))
        len = RS_MAX_RECORD_SIZE - sizeof(rs_rec_meta);
    uint32_t size = RS_RECORD_ROUND((uint32_t)(sizeof(rs_rec_meta) + len));
    rs_rec_meta *r = rs_rec_begin(size, RS_UNGATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_META, size, 0);
    r->key = key;
    r->len = (uint32_t)len;
    memcpy(r + 1, bytes, len);
    memset((char *)(r + 1) + len, 0, size - sizeof *r - len);
    rs_rec_end(r, size);
}

/* NVTX names are bounded so one record always fits a chunk. */
#define RS_NVTX_TEXT_MAX 4096u

void
rs_record_nvtx(uint16_t kind, uint32_t domain, uint32_t name_id, const char *text,
               size_t text_len, uint64_t range_id, uint32_t category, uint32_t aux)
{
    int gated = kind != RS_REC_NVTX_DOMAIN;
    if (gated && !recording_now())
        return;
    if (name_id)
        text_len = 0;
    if (text_len > RS_NVTX_TEXT_MAX)
        text_len = RS_NVTX_TEXT_MAX;
    uint32_t size = RS_RECORD_ROUND((uint32_t)(sizeof(rs_rec_nvtx_name) + text_len));
    rs_rec_nvtx_name *r = rs_rec_begin_fast(size, gated ? RS_GATED : RS_UNGATED);
    if (!r)
        return;
    r->h = hdr(kind, size, aux);
    r->range_id = range_id;
    r->domain = domain;
    r->name_id = name_id;
    r->text_len = (uint32_t)text_len;
    r->category = category;
    if (text_len)
        memcpy(r + 1, text, text_len);
    if (size - sizeof *r > text_len)
        memset((char *)(r + 1) + text_len, 0, size - sizeof *r - text_len);
    rs_rec_end_n(size, 1, r->h.t_ns);
}

void
rs_record_nvtx_pop(uint32_t domain, uint32_t depth)
{
    if (!recording_now())
        return;
    rs_rec_nvtx_pop *r = rs_rec_begin_fast(sizeof *r, RS_GATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_NVTX_POP, sizeof *r, depth);
    r->domain = domain;
    r->reserved = 0;
    rs_rec_end_n(sizeof *r, 1, r->h.t_ns);
}

void
rs_record_nvtx_end(uint64_t range_id)
{
    if (!recording_now())
        return;
    rs_rec_nvtx_end *r = rs_rec_begin_fast(sizeof *r, RS_GATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_NVTX_END, sizeof *r, 0);
    r->range_id = range_id;
    rs_rec_end_n(sizeof *r, 1, r->h.t_ns);
}

void
rs_record_vmm(uint16_t kind, uint16_t api, uint64_t handle, uint64_t ptr, uint64_t size,
              uint64_t offset, uint64_t caller, int device, int status)
{
    if (!rs_recording())
        return;
    rs_rec_vmm *r = rs_rec_begin(sizeof *r, kind == RS_REC_VMM_CREATE ? retry_class(size, status)
                                                                      : RS_GATED);
    if (!r)
        return;
    note_device(device);
    r->h = hdr(kind, sizeof *r, 0);
    r->handle = handle;
    r->ptr = ptr;
    r->size = size;
    r->offset = offset;
    r->caller = caller;
    r->api = api;
    r->reserved0 = 0;
    r->device = (int8_t)(device >= -1 && device < 128 ? device : -1);
    r->status = status;
    rs_rec_end(r, sizeof *r);
}

void
rs_record_tensor(uint64_t ptr, int64_t size, uint64_t total_allocated, uint64_t total_reserved,
                 uint64_t caller, int device_type, int device, uint32_t signature)
{
    if (!rs_recording())
        return;
    rs_rec_tensor *r = rs_rec_begin(sizeof *r, RS_GATED);
    if (!r)
        return;
    note_device(device);
    r->h = hdr(RS_REC_TENSOR, sizeof *r, signature);
    r->ptr = ptr;
    r->size = size;
    r->total_allocated = total_allocated;
    r->total_reserved = total_reserved;
    r->caller = caller;
    r->device_type = (int8_t)device_type;
    r->device = (int8_t)device;
    r->reserved0 = 0;
    r->pystack = rs_pystack_current();
    rs_rec_end(r, sizeof *r);
}

void
rs_record_graph(uint32_t op, uint16_t api, uint64_t stream, uint64_t graph, uint64_t exec,
                uint32_t mode, int status)
{
    rs_rec_graph *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_GRAPH, sizeof *r, op);
    r->stream = stream;
    r->graph = graph;
    r->exec = exec;
    r->api = api;
    r->reserved0 = 0;
    r->status = status;
    r->mode = mode;
    r->reserved1 = 0;
    rs_rec_end(r, sizeof *r);
}

void
rs_record_collective(uint32_t op, uint16_t api, uint64_t comm, uint64_t count, uint64_t bytes,
                     uint64_t stream, uint64_t comm_hash, int datatype, int redop, int peer,
                     int nranks, int rank, int status)
{
    int gated = !(op == RS_COLL_COMM_INIT || op == RS_COLL_COMM_SPLIT ||
                  op == RS_COLL_COMM_DESTROY);
    if (gated && !rs_recording())
        return;
    rs_rec_collective *r = rs_rec_begin(sizeof *r, gated ? RS_GATED : RS_UNGATED);
    if (!r)
        return;
    r->h = hdr(RS_REC_COLLECTIVE, sizeof *r, op);
    r->comm = comm;
    r->count = count;
    r->bytes = bytes;
    r->stream = stream;
    r->comm_hash = comm_hash;
    r->api = api;
    r->datatype = (int8_t)datatype;
    r->redop = (int8_t)redop;
    r->peer = peer;
    r->nranks = nranks;
    r->rank = rank;
    r->status = status;
    r->reserved0 = 0;
    rs_rec_end(r, sizeof *r);
}

void
rs_record_ctx(uint64_t ctx, int device, int status)
{
    rs_rec_ctx *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    if (status == 0)
        note_device(device);
    r->h = hdr(RS_REC_CTX_SET, sizeof *r, 0);
    r->ctx = ctx;
    r->device = device;
    r->status = status;
    rs_rec_end(r, sizeof *r);
}
