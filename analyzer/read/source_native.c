/* source_native.c: recompshim trace files (trace_reader.h) as an am_source.
 *
 * Record kind -> model event:
 *   ALLOC (ok, device mem)  ALLOC at DEVICE; also TENSOR in a tensor mode
 *                           (async: the cudaMalloc*Async family; nocache:
 *                           cudaMalloc) unless the caller is NCCL/cuBLAS/cuDNN/TE
 *   ALLOC (host/managed)    ALLOC with mem host/managed (never in peaks)
 *   FREE (ok)               FREE at DEVICE (+TENSOR in a tensor mode)
 *   TENSOR (v1.1)           ALLOC/FREE at TENSOR with PyTorch's own totals
 *   VMM_CREATE/RELEASE      ALLOC/FREE at DEVICE keyed by handle; a failed
 *                           create is an OOM (expandable segments) with the
 *                           pages made for its request before it (page_run)
 *   OOM                     OOM with its native stack
 *   MEMINFO (ok)            MEMINFO
 *   THREAD                  THREAD_NAME (renames of unknown tids dropped)
 *   NVTX_*                  RANGE_PUSH/POP/START/END, MARK
 *   COLLECTIVE (v1.1)       COLLECTIVE
 *   GRAPH begin/end capture GRAPH_BEGIN/END
 * ALLOC, TENSOR and OOM records that name a Python stack (v1.3) carry its
 * allocation site: the innermost frame outside PyTorch and installed
 * packages (else the innermost frame) as "dir/file.py:line:function", the
 * same form the snapshot importer gives, with the code object's first line.
 * Everything else (strings, domains, meta, modules, limit, window, pool
 * attributes, set-device, VMM map/unmap, VA reserve/free, ctx) carries no
 * event: definitions are read at open, VA reservations are never memory.
 * In a trace with Python stacks, the Megatron-Core frames of each ALLOC,
 * TENSOR and OOM record's stack become ranges of the domain "python"
 * (model/pyframes.h): their pushes and pops come just before the event.
 */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <inttypes.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "model.h"
#include "pyframes.h"
#include "symbolize.h"
#include "trace_reader.h"
#include "grow.h"

typedef struct mod_range {
    uint64_t lo, hi;
    uint8_t lib;
} mod_range;

typedef struct native {
    rs_reader *r;
    rs_iter *it;
    uint64_t start_ns;        /* the header's mono_start_ns */
    int mode;
    am_meta *meta;            /* coverage: WINDOW records update it */
    mod_range *mods;
    size_t nmods;
    const char **argv;
    const char **env;
    const char **warnings;
    char *argbuf;
    am_symbolizer *sym;       /* created when the first frame is named */
    struct py_text { char *site, *stack; uint8_t load; uint32_t *chain, nchain; } *py;
    /* [PYSTACK id], formatted once; chain: its frame ids, innermost first */
    size_t npy;
    /* Python frames as ranges (pyframes.h): NULL when the trace has no stacks */
    am_pysyn *syn;
    struct py_rows { uint8_t done, n; uint16_t row[AM_PYF_MAX]; } *pyr; /* [PYSTACK id] */
    size_t npyr;
    uint32_t cur_stack;       /* the translated event's Python stack ... */
    int cur_has;              /* ... when its record names one */
    am_event q[2 * AM_PYF_MAX + 3]; /* synthetic ranges, then the event */
    int qn, qi;
    /* expandable segments' pages (page_run): the thread whose PyTorch
     * cuMemCreate calls of one size (its pages) follow each other with no
     * other memory record of that thread between, the size and how many */
    uint32_t pg_tid, pg_count;
    uint64_t pg_size;
    int pg_failed;            /* the run ended in a failed create: its OOM record
                               * (api cuMemCreate) follows and takes pg_count */
} native;

static int
mod_cmp(const void *a, const void *b)
{
    const mod_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int
lib_of(const native *n, uint64_t addr)
{
    size_t lo = 0, hi = n->nmods;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (addr < n->mods[mid].lo)
            hi = mid;
        else if (addr >= n->mods[mid].hi)
            lo = mid + 1;
        else
            return n->mods[mid].lib;
    }
    /* overlapping ranges (reloads) are rare: fall back to the reader */
    return AM_LIB_UNKNOWN;
}

static uint64_t
rel(const native *n, uint64_t t)
{
    int64_t d = (int64_t)(t - n->start_ns); /* rs_reader_rel_ns, kept at hand */
    return d < 0 ? 0 : (uint64_t)d;
}

static void
nvtx_name(const native *n, const rs_rec_nvtx_name *v, am_event *ev)
{
    ev->name = NULL;
    ev->name_len = 0;
    if (v->name_id) {
        const char *t;
        uint32_t len;
        if (rs_reader_string(n->r, v->name_id, &t, &len)) {
            ev->name = t;
            ev->name_len = len;
        }
    } else if (v->text_len) {
        ev->name = (const char *)(v + 1);
        ev->name_len = v->text_len;
    }
    ev->domain_id = v->domain;
    ev->domain = NULL;
    ev->domain_len = 0;
    if (v->domain) {
        const char *d;
        uint32_t len;
        if (rs_reader_domain(n->r, v->domain, &d, &len)) {
            ev->domain = d;
            ev->domain_len = len;
        }
    }
}

/* A Python file of PyTorch or of an installed package (not the job's own). */
static int
py_library_file(const rs_pyframe_info *f)
{
    static const char *const dirs[] = {"/torch/", "site-packages/", "dist-packages/", "<frozen"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        if (memmem(f->file, f->file_len, dirs[i], strlen(dirs[i])))
            return 1;
    return 0;
}

/* "dir/file.py:line:function" of a frame (the path cut to its last two
 * components, each part at most 200 bytes), malloc'd; NULL out of memory. */
static char *
py_site_text(const rs_pyframe_info *f)
{
    uint32_t cut = 0, slashes = 0;
    for (uint32_t i = f->file_len; i > 0; i--)
        if (f->file[i - 1] == '/' && ++slashes == 2) {
            cut = i;
            break;
        }
    int nfile = (int)(f->file_len - cut > 200 ? 200 : f->file_len - cut);
    int nfn = (int)(f->name_len > 200 ? 200 : f->name_len);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s:%" PRIu32 ":%.*s", nfile, f->file + cut, f->line, nfn,
             f->name);
    return strdup(buf);
}

#define PY_TEXT_FRAMES 6   /* frames named in am_event.pystack; more print as "< ..." */

/* "f (dir/file.py:line) < g < h" of stack `id`, innermost first; malloc'd. */
static char *
py_stack_text(const native *n, uint32_t id)
{
    char buf[640];
    size_t len = 0;
    uint32_t parent, frame, k = 0;
    for (uint32_t s = id; s && rs_reader_pystack(n->r, s, &parent, &frame); s = parent, k++) {
        rs_pyframe_info f = {"?", "?", 1, 1, 0};
        (void)rs_reader_pyframe(n->r, frame, &f);
        int nfn = (int)(f.name_len > 120 ? 120 : f.name_len);
        int w;
        if (k == PY_TEXT_FRAMES) {
            w = snprintf(buf + len, sizeof buf - len, " < ...");
        } else if (k == 0) {
            char *site = py_site_text(&f);
            const char *colon = site ? strchr(site, ':') : NULL;
            w = snprintf(buf + len, sizeof buf - len, "%.*s (%.*s)", nfn, f.name,
                         colon ? (int)(strrchr(site, ':') - site) : 1, site ? site : "?");
            free(site);
        } else {
            w = snprintf(buf + len, sizeof buf - len, " < %.*s", nfn, f.name);
        }
        if (w < 0 || (size_t)w >= sizeof buf - len)
            break;
        len += (size_t)w;
        if (k == PY_TEXT_FRAMES)
            break;
    }
    return len ? strndup(buf, len) : NULL;
}

/* 1 when `name` (a code object's qualified name) is function `fn` or a
 * method / nested function of that name ("Cls.fn", "outer.<locals>.fn") */
static int
py_name_is(const char *name, uint32_t len, const char *fn)
{
    size_t l = strlen(fn);
    return len >= l && memcmp(name + len - l, fn, l) == 0 &&
           (len == l || name[len - l - 1] == '.');
}

/* Checkpoint loading in Python stack `id`, over all its frames (not only
 * the few the text keeps): AM_PYLOAD_STATE when a frame that initialises
 * optimizer state for the load (Megatron-Core's `init_state_fn`, called by
 * the optimizer's load_state_dict; Transformer Engine FusedAdam's
 * `initialize_state`, which it calls with the precision-aware optimizer) is
 * inside a `load_checkpoint` frame (megatron/training/checkpointing.py,
 * [M] in docs/sources.md); AM_PYLOAD_COPY for other allocations inside
 * `load_checkpoint` (the loaded state dict and its copies); else 0. */
static uint8_t
py_load_kind(const native *n, uint32_t id)
{
    uint32_t parent, frame;
    int state = 0;
    for (uint32_t s = id; s && rs_reader_pystack(n->r, s, &parent, &frame); s = parent) {
        rs_pyframe_info f;
        if (!rs_reader_pyframe(n->r, frame, &f))
            continue;
        if (py_name_is(f.name, f.name_len, "init_state_fn") ||
            py_name_is(f.name, f.name_len, "initialize_state"))
            state = 1;
        if (py_name_is(f.name, f.name_len, "load_checkpoint"))
            return state ? AM_PYLOAD_STATE : AM_PYLOAD_COPY;
    }
    return 0;
}

/* The frame ids of Python stack `id`, innermost first, into pt->chain (a
 * function's frame id names its code object: two calls of one function have
 * the same id); none when out of memory or the stack is unknown. */
static void
py_chain(const native *n, uint32_t id, struct py_text *pt)
{
    uint32_t parent, frame, k = 0;
    for (uint32_t s = id; s && k < 4096 && rs_reader_pystack(n->r, s, &parent, &frame); s = parent)
        k++;
    if (!k || !(pt->chain = malloc(k * sizeof *pt->chain)))
        return;
    for (uint32_t s = id; s && pt->nchain < k && rs_reader_pystack(n->r, s, &parent, &frame);
         s = parent)
        pt->chain[pt->nchain++] = frame;
}

/* The allocation site of Python stack `id` (the innermost frame outside
 * PyTorch and installed packages, else the innermost) into ev->site, and
 * its frames into ev->pystack; both NULL when the stack is unknown. Cached
 * per stack. */
static void
py_site(native *n, uint32_t id, am_event *ev)
{
    if (!id)
        return;
    if (id >= n->npy) {
        size_t cap = n->npy, old = cap;
        if (am_grow((void **)&n->py, &cap, (size_t)id + 1, sizeof *n->py, 256))
            return;
        memset(n->py + old, 0, (cap - old) * sizeof *n->py);
        n->npy = cap;
    }
    struct py_text *pt = &n->py[id];
    if (!pt->stack) {
        rs_pyframe_info inner = {0}, f;
        uint32_t parent, frame;
        for (uint32_t s = id; s && rs_reader_pystack(n->r, s, &parent, &frame); s = parent) {
            if (!rs_reader_pyframe(n->r, frame, &f))
                continue;
            if (!inner.name)
                inner = f;
            if (!py_library_file(&f)) {
                inner = f;
                break;
            }
        }
        if (!inner.name)
            return;
        pt->site = py_site_text(&inner);
        pt->stack = py_stack_text(n, id);
        pt->load = py_load_kind(n, id);
        if (!pt->chain)
            py_chain(n, id, pt);
    }
    ev->py_load = pt->load;
    if (pt->site) {
        ev->site = pt->site;
        ev->site_len = (uint32_t)strlen(pt->site);
    }
    if (pt->stack) {
        ev->pystack = pt->stack;
        ev->pystack_len = (uint32_t)strlen(pt->stack);
    }
    ev->pychain = pt->chain;
    ev->pychain_len = pt->nchain;
}

static int
tensor_mode_alloc(const native *n, uint16_t api, int lib)
{
    if (lib == AM_LIB_NCCL || lib == AM_LIB_CUBLAS || lib == AM_LIB_CUDNN || lib == AM_LIB_TE)
        return 0;
    if (n->mode == RS_MODE_ASYNC)
        return api == RS_API_cudaMallocAsync || api == RS_API_cudaMallocAsync_ptsz ||
               api == RS_API_cudaMallocFromPoolAsync ||
               api == RS_API_cudaMallocFromPoolAsync_ptsz;
    if (n->mode == RS_MODE_NOCACHE)
        return api == RS_API_cudaMalloc;
    return 0;
}

/* Zero *ev. With SSE2, thirteen 16-byte stores: the compiler turns a memset
 * of this size into `rep stos`, whose start-up cost on x86-64 was the largest
 * single cost of decoding a record (docs/performance.md, "The merged tree on
 * a quiet machine"); elsewhere memset. */
static inline void
event_clear(am_event *ev)
{
#if defined(__SSE2__)
    _Static_assert(sizeof(am_event) % 16 == 0, "am_event: a whole number of 16-byte stores");
    const __m128i z = _mm_setzero_si128();
    char *p = (char *)ev;
#define RS_Z4(o) do { _mm_storeu_si128((__m128i *)(p + (o)), z);                      \
                      _mm_storeu_si128((__m128i *)(p + (o) + 16), z);                 \
                      _mm_storeu_si128((__m128i *)(p + (o) + 32), z);                 \
                      _mm_storeu_si128((__m128i *)(p + (o) + 48), z); } while (0)
    RS_Z4(0);
    RS_Z4(64);
    RS_Z4(128);
    for (size_t o = 192; o < sizeof *ev; o += 16)
        _mm_storeu_si128((__m128i *)(p + o), z);
#undef RS_Z4
#else
    memset(ev, 0, sizeof *ev);
#endif
}

/* PyTorch's expandable segments map a request's pages one handle each
 * (c10/cuda/CUDACachingAllocator.cpp, ExpandableSegment::map: cuMemCreate of
 * segment_size per page of the range; on CUDA_ERROR_OUT_OF_MEMORY the handles
 * it made are released; try_allocate_expandable_block maps holes one after
 * another, and those mapped before a failure stay mapped, reserved but free).
 * The failed cuMemCreate is one page, not the request: the pages the same
 * thread created just before it, of the same size with no other memory
 * record of that thread between (the successful request's TENSOR record, an
 * allocation, a free), belong to the same request. A successful create
 * extends the run (or starts one); a failed one takes the run's count as its
 * request_pages (as does the OOM record the shim writes after it) and ends
 * the run, so the retry after release_cached_blocks counts its own pages
 * only; any other memory record of the thread ends it.
 * Callers outside PyTorch (NCCL's buffers) never count. */
static void
page_run(native *n, const rs_event *re, const rs_rec_vmm *v, am_event *ev)
{
    int pytorch = lib_of(n, v->caller) == AM_LIB_PYTORCH;
    int same = pytorch && n->pg_tid == re->tid && n->pg_size == v->size && !n->pg_failed;
    if (v->status == 0) {
        if (!pytorch)
            return;
        n->pg_count = same ? n->pg_count + 1 : 1;
        n->pg_tid = re->tid;
        n->pg_size = v->size;
        n->pg_failed = 0;
        return;
    }
    if (!pytorch) /* outside PyTorch: no page of an allocator's request */
        return;
    if (!same)
        n->pg_count = 0;
    n->pg_tid = re->tid;
    n->pg_size = v->size;
    n->pg_failed = 1;
    ev->request_pages = n->pg_count;
}

/* the OOM record the shim writes after a failed cuMemCreate (same thread,
 * same size): the same request's pages */
static void
page_run_oom(native *n, const rs_event *re, const rs_rec_oom *o, am_event *ev)
{
    if (o->api == RS_API_cuMemCreate && n->pg_failed && n->pg_tid == re->tid &&
        n->pg_size == o->size)
        ev->request_pages = n->pg_count;
}

/* any other memory record of the page run's thread ends the run */
static inline void
page_run_end(native *n, uint32_t tid)
{
    if (n->pg_tid == tid)
        n->pg_tid = 0, n->pg_count = 0, n->pg_failed = 0;
}

/* Translate one record into *ev; 1 when it is an event, 0 to skip. */
static int
translate(native *n, const rs_event *re, am_event *ev)
{
    const rs_record_header *h = re->rec;
    event_clear(ev);
    ev->t_ns = rel(n, h->t_ns);
    ev->tid = re->tid;
    ev->src_offset = re->offset;
    ev->device = -1;
    ev->peer = -1;
    switch ((enum rs_record_kind)h->kind) {
    case RS_REC_ALLOC: {
        const rs_rec_alloc *a = (const void *)h;
        if (a->status != 0)
            return 0;
        page_run_end(n, re->tid);
        ev->kind = AM_EV_ALLOC;
        ev->addr = a->ptr;
        ev->size = a->size;
        ev->caller = a->caller;
        ev->api = a->api;
        ev->mem = a->mem;
        ev->device = a->device;
        ev->lib = (uint8_t)lib_of(n, a->caller);
        ev->levels = AM_LVL_DEVICE;
        if (a->mem == RS_MEM_DEVICE && tensor_mode_alloc(n, a->api, ev->lib))
            ev->levels |= AM_LVL_TENSOR;
        py_site(n, h->aux, ev);
        n->cur_stack = h->aux;
        n->cur_has = 1;
        return 1;
    }
    case RS_REC_FREE: {
        const rs_rec_free *f = (const void *)h;
        if (f->status != 0)
            return 0;
        page_run_end(n, re->tid);
        ev->kind = AM_EV_FREE;
        ev->addr = f->ptr;
        ev->api = f->api;
        ev->mem = f->mem;
        ev->device = f->device;
        ev->caller = f->caller;
        ev->lib = (uint8_t)lib_of(n, f->caller);
        ev->levels = AM_LVL_DEVICE | (n->mode != RS_MODE_DEFAULT ? AM_LVL_TENSOR : 0);
        return 1;
    }
    case RS_REC_MEMINFO: {
        const rs_rec_meminfo *m = (const void *)h;
        if (m->status != 0)
            return 0;
        ev->kind = AM_EV_MEMINFO;
        ev->free_bytes = m->free_bytes;
        ev->total_bytes = m->total_bytes;
        ev->device = m->device;
        return 1;
    }
    case RS_REC_OOM: {
        const rs_rec_oom *o = (const void *)h;
        ev->kind = AM_EV_OOM;
        ev->size = o->size;
        ev->caller = o->caller;
        ev->free_bytes = o->meminfo_status == 0 ? o->free_bytes : 0;
        ev->total_bytes = o->meminfo_status == 0 ? o->total_bytes : 0;
        ev->api = o->api;
        ev->mem = o->mem;
        ev->device = o->device;
        ev->status = o->status;
        ev->lib = (uint8_t)lib_of(n, o->caller);
        ev->nframes = h->aux;
        ev->frames = (const uint64_t *)(o + 1);
        page_run_oom(n, re, o, ev);
        py_site(n, o->pystack, ev);
        n->cur_stack = o->pystack;
        n->cur_has = 1;
        return 1;
    }
    case RS_REC_THREAD: {
        const rs_rec_thread *t = (const void *)h;
        if (h->aux && t->tid == 0)
            return 0;
        ev->kind = AM_EV_THREAD_NAME;
        ev->tid = t->tid ? t->tid : re->tid;
        ev->name = t->name;
        ev->name_len = (uint32_t)strnlen(t->name, RS_THREAD_NAME_LEN);
        return 1;
    }
    case RS_REC_NVTX_PUSH:
        ev->kind = AM_EV_RANGE_PUSH;
        nvtx_name(n, (const void *)h, ev);
        return 1;
    case RS_REC_NVTX_START:
        ev->kind = AM_EV_RANGE_START;
        nvtx_name(n, (const void *)h, ev);
        ev->id = ((const rs_rec_nvtx_name *)(const void *)h)->range_id;
        return 1;
    case RS_REC_NVTX_MARK:
        ev->kind = AM_EV_MARK;
        nvtx_name(n, (const void *)h, ev);
        return 1;
    case RS_REC_NVTX_POP:
        ev->kind = AM_EV_RANGE_POP;
        ev->domain_id = ((const rs_rec_nvtx_pop *)(const void *)h)->domain;
        return 1;
    case RS_REC_NVTX_END:
        ev->kind = AM_EV_RANGE_END;
        ev->id = ((const rs_rec_nvtx_end *)(const void *)h)->range_id;
        return 1;
    case RS_REC_SET_DEVICE:
    case RS_REC_STRING:
    case RS_REC_NVTX_DOMAIN:
    case RS_REC_META:
    case RS_REC_MODULE:
    case RS_REC_WINDOW: {
        const rs_rec_window *w = (const void *)h;
        if (h->aux == RS_WINDOW_OPEN && !n->meta->window_opened) {
            n->meta->window_opened = 1;
            n->meta->window_open_ns = ev->t_ns;
        } else if (h->aux == RS_WINDOW_CLOSE) {
            n->meta->window_closed = 1;
            n->meta->window_close_ns = ev->t_ns;
        }
        (void)w;
        return 0;
    }
    case RS_REC_LIMIT:
    case RS_REC_POOL_ATTR:
#if RS_TRACE_VERSION_MINOR >= 3
    case RS_REC_PYFRAME:
    case RS_REC_PYSTACK:
#endif
#if RS_TRACE_VERSION_MINOR >= 4
    case RS_REC_SITE:    /* named by compact records, which the iterator expands */
    case RS_REC_ALLOC_C: /* never handed out: expanded into ALLOC / FREE */
    case RS_REC_FREE_C:
#endif
#if RS_TRACE_VERSION_MINOR >= 5
    case RS_REC_ALLOC_P: /* as ALLOC_C: expanded by the iterator */
    case RS_REC_FREE_P:
#endif
        return 0;
#if RS_TRACE_VERSION_MINOR >= 1
    case RS_REC_VMM_CREATE: {
        const rs_rec_vmm *v = (const void *)h;
        ev->caller = v->caller;
        ev->lib = (uint8_t)lib_of(n, v->caller);
        ev->device = v->device;
        ev->api = v->api;
        if (v->status == 2 /* CUDA_ERROR_OUT_OF_MEMORY */) {
            ev->kind = AM_EV_OOM;
            ev->size = v->size;
            ev->status = v->status;
            page_run(n, re, v, ev);
            return 1;
        }
        if (v->status != 0)
            return 0;
        page_run(n, re, v, ev);
        ev->kind = AM_EV_ALLOC;
        ev->space = AM_SPACE_HANDLE;
        ev->addr = v->handle;
        ev->size = v->size;
        ev->levels = AM_LVL_DEVICE;
        return 1;
    }
    case RS_REC_VMM_RELEASE: {
        const rs_rec_vmm *v = (const void *)h;
        if (v->status != 0)
            return 0;
        ev->kind = AM_EV_FREE;
        ev->space = AM_SPACE_HANDLE;
        ev->addr = v->handle;
        ev->levels = AM_LVL_DEVICE;
        ev->api = v->api;
        return 1;
    }
    case RS_REC_VMM_MAP:
    case RS_REC_VMM_UNMAP:
    case RS_REC_VA_RESERVE:
    case RS_REC_VA_FREE:
    case RS_REC_CTX_SET:
        return 0;
    case RS_REC_TENSOR: {
        const rs_rec_tensor *t = (const void *)h;
        if (t->device_type != 1 /* CUDA */)
            return 0;
        page_run_end(n, re->tid);
        ev->kind = t->size >= 0 ? AM_EV_ALLOC : AM_EV_FREE;
        ev->addr = t->ptr;
        ev->size = t->size >= 0 ? (uint64_t)t->size : (uint64_t)(-(t->size + 1)) + 1;
        ev->levels = AM_LVL_TENSOR;
        ev->has_totals = 1;
        ev->total_allocated = t->total_allocated;
        ev->total_reserved = t->total_reserved;
        ev->caller = t->caller;
        ev->lib = AM_LIB_PYTORCH;
        ev->device = t->device;
        if (ev->kind == AM_EV_ALLOC)
            py_site(n, t->pystack, ev);
        n->cur_stack = t->pystack;
        n->cur_has = 1;
        return 1;
    }
    case RS_REC_GRAPH: {
        const rs_rec_graph *g = (const void *)h;
        if (g->status != 0)
            return 0;
        if (h->aux == RS_GRAPH_BEGIN_CAPTURE)
            ev->kind = AM_EV_GRAPH_BEGIN;
        else if (h->aux == RS_GRAPH_END_CAPTURE)
            ev->kind = AM_EV_GRAPH_END;
        else
            return 0;
        ev->id = g->stream;
        return 1;
    }
    case RS_REC_COLLECTIVE: {
        const rs_rec_collective *c = (const void *)h;
        ev->kind = AM_EV_COLLECTIVE;
        ev->op = h->aux;
        ev->size = c->bytes;
        ev->peer = c->peer;
        ev->id = c->comm;
        ev->api = c->api;
        ev->status = c->status;
        return 1;
    }
#endif
    }
    return 0;
}

/* The CAT_PYFRAME rows of Python stack `id` (pyframes.h), mapped once;
 * NULL out of memory. */
static const struct py_rows *
py_rows_of(native *n, uint32_t id)
{
    static const struct py_rows none;
    if (!id)
        return &none;
    if (id >= n->npyr) {
        size_t cap = n->npyr, old = cap;
        if (am_grow((void **)&n->pyr, &cap, (size_t)id + 1, sizeof *n->pyr, 256))
            return NULL;
        memset(n->pyr + old, 0, (cap - old) * sizeof *n->pyr);
        n->npyr = cap;
    }
    struct py_rows *pr = &n->pyr[id];
    if (!pr->done) {
        enum { DEPTH = 512 };
        const char *names[DEPTH];
        uint32_t lens[DEPTH];
        size_t k = DEPTH;
        uint32_t parent, frame;
        for (uint32_t st = id; st && k && rs_reader_pystack(n->r, st, &parent, &frame); st = parent) {
            rs_pyframe_info f;
            k--;
            names[k] = rs_reader_pyframe(n->r, frame, &f) ? f.name : NULL;
            lens[k] = names[k] ? f.name_len : 0;
        }
        pr->n = (uint8_t)am_pyframes_map(names + k, lens + k, DEPTH - k, pr->row, AM_PYF_MAX);
        pr->done = 1;
    }
    return pr;
}

/* Queue the synthetic ranges event ev needs before it (n->q), ev last. */
static int
py_ranges(native *n, am_event *ev)
{
    if (ev->kind == AM_EV_RANGE_PUSH || ev->kind == AM_EV_RANGE_POP)
        return am_pysyn_note(n->syn, ev);
    if (!n->cur_has)
        return 0;
    const struct py_rows *pr = py_rows_of(n, n->cur_stack);
    if (!pr)
        return -1;
    int k = am_pysyn_sync(n->syn, ev, pr->row, pr->n, ev->kind == AM_EV_FREE, n->q,
                          sizeof n->q / sizeof *n->q - 1);
    if (k < 0)
        return -1;
    if (k > 0) {
        n->q[k] = *ev;
        n->qn = k + 1;
        n->qi = 1;
        *ev = n->q[0];
    }
    return 0;
}

static int
native_next(am_source *s, am_event *ev)
{
    native *n = s->impl;
    rs_event re;
    if (n->qi < n->qn) {
        *ev = n->q[n->qi++];
        return 1;
    }
    for (;;) {
        int rc = rs_iter_next(n->it, &re);
        if (rc == 0)
            return 0;
        if (rc < 0) {
            snprintf(s->error, sizeof s->error, "%s", rs_reader_error(n->r));
            return -1;
        }
        n->cur_has = 0;
        if (translate(n, &re, ev)) {
            if (n->syn && py_ranges(n, ev) < 0) {
                snprintf(s->error, sizeof s->error, "%s: out of memory", s->meta.path);
                return -1;
            }
            return 1;
        }
    }
}

static int
native_rewind(am_source *s)
{
    native *n = s->impl;
    rs_iter_free(n->it);
    n->it = rs_iter_new(n->r);
    n->qn = n->qi = 0;
    if (n->syn)
        am_pysyn_reset(n->syn);
    if (!n->it) {
        snprintf(s->error, sizeof s->error, "%s: out of memory", s->meta.path);
        return -1;
    }
    return 0;
}

static void
native_close(am_source *s)
{
    native *n = s->impl;
    if (n) {
        rs_iter_free(n->it);
        rs_reader_close(n->r);
        free(n->mods);
        free(n->argv);
        free(n->env);
        free(n->warnings);
        free(n->argbuf);
        am_sym_free(n->sym);
        for (size_t i = 0; i < n->npy; i++) {
            free(n->py[i].site);
            free(n->py[i].stack);
            free(n->py[i].chain);
        }
        free(n->py);
        free(n->pyr);
        am_pysyn_free(n->syn);
        free(n);
    }
    free(s);
}

/* A return address as "module+0xoff in function+0xn at file:line", named
 * from the trace's module list (symbolize.h); 0 outside every module. */
static int
native_format_addr(am_source *s, uint64_t addr, char *buf, size_t len)
{
    native *n = s->impl;
    const rs_module_info *m = rs_reader_find_module(n->r, addr);
    if (!m) {
        if (len)
            buf[0] = '\0';
        return 0;
    }
    if (!n->sym)
        n->sym = am_sym_new();
    am_sym_format(n->sym, m, addr, buf, len);
    return 1;
}

static const am_source_ops native_ops = {
    "native", native_next, native_rewind, native_close, native_format_addr,
};

static int
native_sniff(const char *path, const unsigned char *head, size_t n)
{
    (void)path;
    return n >= RS_TRACE_MAGIC_LEN && memcmp(head, RS_TRACE_MAGIC, RS_TRACE_MAGIC_LEN) == 0;
}

/* Split the META values into argv/env arrays (one buffer holds the text). */
static int
load_meta(native *n, am_meta *m)
{
    size_t nm = rs_reader_meta_count(n->r), total = 0, nargs = 0, nenv = 0;
    for (size_t i = 0; i < nm; i++) {
        uint32_t key, len;
        const char *v;
        rs_reader_meta(n->r, i, &key, &v, &len);
        if (key == RS_META_CMDLINE) {
            total += len + 1;
            for (uint32_t j = 0; j < len; j++)
                nargs += v[j] == 0;
            nargs += 1;
        } else if (key == RS_META_ENV) {
            total += len + 1;
            nenv++;
        }
    }
    n->argbuf = malloc(total + 1);
    n->argv = calloc(nargs + 1, sizeof *n->argv);
    n->env = calloc(nenv + 1, sizeof *n->env);
    if (!n->argbuf || !n->argv || !n->env)
        return -1;
    char *p = n->argbuf;
    size_t ai = 0, ei = 0;
    for (size_t i = 0; i < nm; i++) {
        uint32_t key, len;
        const char *v;
        rs_reader_meta(n->r, i, &key, &v, &len);
        if (key == RS_META_CMDLINE && ai == 0) {
            memcpy(p, v, len);
            p[len] = 0;
            for (uint32_t j = 0; j < len;) {
                n->argv[ai++] = p + j;
                j += (uint32_t)strlen(p + j) + 1;
            }
            p += len + 1;
        } else if (key == RS_META_ENV) {
            memcpy(p, v, len);
            p[len] = 0;
            n->env[ei++] = p;
            p += len + 1;
        }
    }
    m->argc = ai;
    m->argv = n->argv;
    m->nenv = ei;
    m->env = n->env;
    return 0;
}

static int
load_modules(native *n)
{
    size_t nm = rs_reader_module_count(n->r);
    n->mods = calloc(nm ? nm : 1, sizeof *n->mods);
    if (!n->mods)
        return -1;
    for (size_t i = 0; i < nm; i++) {
        const rs_module_info *mi = rs_reader_module(n->r, i);
        n->mods[i].lo = mi->lo;
        n->mods[i].hi = mi->hi;
        n->mods[i].lib = (uint8_t)am_catalog_lib(mi->path, mi->path_len);
    }
    n->nmods = nm;
    am_sort(n->mods, nm, sizeof *n->mods, mod_cmp);
    return 0;
}

#define COPY_STR(dst, src) snprintf((dst), sizeof(dst), "%.*s", (int)sizeof(src), (src))

static int
native_open(const char *path, am_source **out, char *err, size_t errlen)
{
    am_source *s = calloc(1, sizeof *s);
    native *n = calloc(1, sizeof *n);
    if (!s || !n) {
        free(s);
        free(n);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    s->ops = &native_ops;
    s->impl = n;
    if (rs_reader_open_flags(path, am_source_salvage() ? RS_READ_SALVAGE : 0, &n->r, err,
                             errlen) != RS_READ_OK) {
        free(n);
        free(s);
        return -1;
    }
    const rs_file_header *h = rs_reader_header(n->r);
    am_meta *m = &s->meta;
    m->path = rs_reader_path(n->r);
    m->format = h->version_minor >= 2   ? "recompshim trace v1.2"
                : h->version_minor >= 1 ? "recompshim trace v1.1"
                                        : "recompshim trace v1.0";
    m->rank = h->rank;
    m->local_rank = h->local_rank;
    m->world_size = h->world_size;
    m->pid = h->pid;
    m->ppid = h->ppid;
    m->device = h->device;
    COPY_STR(m->host, h->host);
    COPY_STR(m->torchelastic_run_id, h->torchelastic_run_id);
    COPY_STR(m->slurm_job_id, h->slurm_job_id);
    COPY_STR(m->master, h->master);
    COPY_STR(m->run_id, h->run_id);
    m->attempt = h->restart_count >= 0 ? h->restart_count : -1;
    m->real_start_ns = h->real_start_ns;
    struct stat st;
    if (h->close_ns > h->mono_start_ns)
        m->real_end_ns = h->real_start_ns + (h->close_ns - h->mono_start_ns);
    else if (stat(path, &st) == 0)
        m->real_end_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
    m->device_capacity = h->device_capacity;
    n->mode = (int)h->mode;
    n->start_ns = h->mono_start_ns;
    m->mode = rs_mode_name(h->mode) ? rs_mode_name(h->mode) : "unknown";
    m->closed = rs_reader_closed(n->r);
    rs_reader_exit(n->r, &m->exit_via, &m->exit_status);
    m->exit_sealed = h->version_minor >= RS_TRACE_MINOR_EXIT;
    n->meta = m;
    m->limit_hit = (h->flags & RS_HDR_LIMIT_HIT) != 0;
    m->limit_ns = m->limit_hit && h->limit_hit_ns ? rel(n, h->limit_hit_ns) : 0;
    m->max_bytes = h->max_bytes;
    m->dropped_records = h->dropped_records;
    m->window_kind = (int)h->window_kind;
    m->window_a = h->window_a;
    m->window_b = h->window_b;
    rs_reader_salvaged(n->r, &m->salvaged_chunks, &m->salvage_lost_bytes);
    for (size_t i = 0; i < rs_reader_meta_count(n->r); i++) {
        uint32_t key, len;
        const char *v;
        rs_reader_meta(n->r, i, &key, &v, &len);
        if (key == RS_META_NOTE && len >= 12 && memmem(v, len, "never opened", 12))
            m->window_never_opened = 1;
    }
    m->record_count = rs_reader_record_count(n->r);
    size_t nw = rs_reader_warning_count(n->r);
    n->warnings = calloc(nw + 1, sizeof *n->warnings);
    if (!n->warnings || load_meta(n, m) < 0 || load_modules(n) < 0 ||
        !(n->it = rs_iter_new(n->r))) {
        snprintf(err, errlen, "%s: out of memory", path);
        native_close(s);
        return -1;
    }
    uint32_t pp, pf;
    if (rs_reader_pystack(n->r, 1, &pp, &pf) && !(n->syn = am_pysyn_new())) {
        snprintf(err, errlen, "%s: out of memory", path);
        native_close(s);
        return -1;
    }
    for (size_t i = 0; i < nw; i++)
        n->warnings[i] = rs_reader_warning(n->r, i);
    m->nwarnings = nw;
    m->warnings = n->warnings;
    *out = s;
    return 0;
}

const am_importer am_native_importer = {"native", native_sniff, native_open};
