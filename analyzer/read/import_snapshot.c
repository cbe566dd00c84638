/* import_snapshot.c: PyTorch memory snapshots (torch.cuda.memory._dump_snapshot
 * pickles, Megatron's --record-memory-history snapshot_{rank}.pickle) as an
 * am_source.
 *
 * The file is untrusted: it is read by our restricted unpickler (pickle.c),
 * which accepts plain data only. A snapshot is one object graph, so the
 * parsed document is held in memory (proportional to the file).
 *
 * Model:
 *   - one device: the one whose device_trace has most entries;
 *   - state at the window start, rebuilt as PyTorch's viewer does: a block
 *     whose first trace event is a free, and a block active in `segments`
 *     whose address never occurs in the trace, existed before the window
 *     (same for segments with segment_alloc/segment_free); emitted as ALLOC
 *     events at t 0 (tensor level: blocks; device level: segments);
 *   - alloc -> ALLOC at TENSOR with the block size, as PyTorch's allocated
 *     counter counts it: from `segments` when the block is still live at the
 *     end, else rebuilt from the layout (layout_block: the request rounded
 *     up to 512 B, or the whole free block when the allocator kept the rest
 *     unsplit), else the rounded request (a warning says how many are
 *     approximate); free_requested (or
 *     free when the trace has no free_requested) -> FREE; segment_alloc /
 *     segment_map -> ALLOC at DEVICE, segment_free / segment_unmap -> FREE;
 *     oom -> OOM. Tensor events carry totals (allocated, reserved) computed
 *     here, so the tensor peak knows PyTorch's reserved then;
 *   - threads: tid 1 is the main thread (pid 1); allocations whose C++
 *     frames are the autograd engine's (Engine::thread_main /
 *     evaluate_function) run on tid 2, named pt_autograd_0. Without C++
 *     frames (Megatron records Python stacks only), allocations with no
 *     frames after a forward and before the next Optimizer.step annotation
 *     are put on tid 2 (backward);
 *   - every allocation is wrapped in a range named after the allocating
 *     Python function, "path(line): function" (innermost frame outside
 *     torch itself): a "...: forward" range is a forward signal, the same
 *     rule as Kineto's python_function events. Allocations with optimizer
 *     frames (torch/optim/, an optimizer.py `step`) outside an
 *     Optimizer.step# annotation get the range name prefixed
 *     "Optimizer.step#frames " (an optimizer signal);
 *   - external_annotations START/END -> RANGE_PUSH/POP on the main thread;
 *   - every tensor allocation (and block live before the window) carries its
 *     allocation site, the same innermost user frame as "file:line:function"
 *     (am_event.site): the analysis groups a non-Megatron job's live set by it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model.h"
#include "pickle.h"

#define TID_MAIN 1u
#define TID_BWD 2u
#define ABSURD_BYTES (1ull << 50)
#define MAX_FILE (1ull << 36)

enum { E_PRE = 1, E_ALLOC, E_FREE, E_SEG_ALLOC, E_SEG_FREE, E_OOM, E_ANN_START, E_ANN_END };

/* One event in time order (built at open). */
typedef struct sev {
    uint64_t t;               /* ns since the first event */
    uint64_t addr, size;
    uint32_t fn;              /* name id (0: none) */
    uint32_t off;             /* trace index, for messages */
    uint8_t kind, tid, levels, opt;
    uint32_t site;            /* name id of "file:line:function" (0: none) */
} sev;

typedef struct snap {
    unsigned char *buf;
    size_t n;
    pk_doc *doc;
    sev *ev;
    size_t nev;
    /* names */
    char **names;
    uint32_t *name_len;
    size_t nnames, capnames;
    /* iteration */
    size_t i;
    int started;
    am_event q[4];
    size_t nq, qi;
    uint32_t next_span;
    uint32_t ann_span[32];
    size_t nann;
    /* totals (state during iteration) */
    struct { uint64_t addr, size; } *live;    /* open addressing, tensor level */
    size_t lcap, lcount;
    uint64_t allocated, reserved;
    /* metadata */
    char format[80];
    char **warn;
    size_t nwarn;
} snap;

static void
warnf(snap *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
warnf(snap *s, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = realloc(s->warn, (s->nwarn + 1) * sizeof *w);
    if (!w)
        return;
    s->warn = w;
    if ((w[s->nwarn] = strdup(buf)))
        s->nwarn++;
}

static uint32_t
add_name(snap *s, const char *str, size_t n)
{
    /* linear de-dup of the last few: names repeat in runs */
    for (size_t k = s->nnames; k > 0 && k + 8 > s->nnames; k--)
        if (s->name_len[k - 1] == n && memcmp(s->names[k - 1], str, n) == 0)
            return (uint32_t)k;
    if (s->nnames == s->capnames) {
        size_t nc = s->capnames ? s->capnames * 2 : 256;
        char **a = realloc(s->names, nc * sizeof *a);
        if (!a)
            return 0;
        s->names = a;
        uint32_t *l = realloc(s->name_len, nc * sizeof *l);
        if (!l)
            return 0;
        s->name_len = l;
        s->capnames = nc;
    }
    char *d = malloc(n + 1);
    if (!d)
        return 0;
    memcpy(d, str, n);
    d[n] = 0;
    s->names[s->nnames] = d;
    s->name_len[s->nnames] = (uint32_t)n;
    return (uint32_t)++s->nnames;
}

/* ---- live map (tensor level) ---- */

static uint64_t
mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int
live_put_(snap *s, uint64_t addr, uint64_t size)
{
    if ((s->lcount + 1) * 2 > s->lcap) {
        size_t nc = s->lcap ? s->lcap * 2 : 1024;
        typeof(s->live) nl = calloc(nc, sizeof *nl);
        if (!nl)
            return -1;
        for (size_t i = 0; i < s->lcap; i++)
            if (s->live[i].size) {
                size_t j = mix(s->live[i].addr) & (nc - 1);
                while (nl[j].size)
                    j = (j + 1) & (nc - 1);
                nl[j] = s->live[i];
            }
        free(s->live);
        s->live = nl;
        s->lcap = nc;
    }
    size_t j = mix(addr) & (s->lcap - 1);
    while (s->live[j].size && s->live[j].addr != addr)
        j = (j + 1) & (s->lcap - 1);
    if (s->live[j].size)
        s->allocated -= s->live[j].size;
    else
        s->lcount++;
    s->live[j].addr = addr;
    s->live[j].size = size ? size : 1;
    s->allocated += s->live[j].size;
    return 0;
}

static void
live_del_(snap *s, uint64_t addr)
{
    if (!s->lcap)
        return;
    size_t j = mix(addr) & (s->lcap - 1);
    while (s->live[j].size && s->live[j].addr != addr)
        j = (j + 1) & (s->lcap - 1);
    if (!s->live[j].size)
        return;
    s->allocated -= s->live[j].size;
    s->live[j].size = 0;
    s->lcount--;
    /* backward-shift deletion */
    size_t i = j;
    for (;;) {
        i = (i + 1) & (s->lcap - 1);
        if (!s->live[i].size)
            break;
        size_t h = mix(s->live[i].addr) & (s->lcap - 1);
        if ((j < i && (h <= j || h > i)) || (j > i && h <= j && h > i)) {
            s->live[j] = s->live[i];
            s->live[i].size = 0;
            j = i;
        }
    }
}

/* ---- frames ---- */

static int
ends(const char *s, size_t n, const char *suf)
{
    size_t k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

static int
has(const pk_val *v, const char *sub)
{
    return v && v->type == PK_STR && memmem(v->u.str.s, v->u.str.n, sub, strlen(sub));
}

static int
is_torch_file(const pk_val *f)
{
    return has(f, "/torch/") || has(f, "site-packages/") || has(f, "dist-packages/");
}

typedef struct finfo {
    int cpp;                  /* has a C++ frame */
    int engine;               /* autograd engine thread */
    int opt;                  /* optimizer frames */
    int forward;              /* a python function named forward */
    int nframes;
    const pk_val *fn;         /* the frame naming the allocation */
} finfo;

static void
frames_info(const pk_val *frames, finfo *fi)
{
    memset(fi, 0, sizeof *fi);
    size_t n = pk_len(frames);
    fi->nframes = (int)n;
    const pk_val *first_py = NULL, *user_py = NULL;
    for (size_t i = 0; i < n; i++) {
        const pk_val *fr = pk_at(frames, i);
        /* each key looked up once per frame; the "optim" search first, as
         * "/torch/optim/" contains it */
        const pk_val *name = pk_get(fr, "name"), *f = pk_get(fr, "filename");
        if (!(f && f->type == PK_STR && ends(f->u.str.s, f->u.str.n, ".py"))) {
            fi->cpp = 1;
            if (has(name, "autograd::Engine::thread_main") ||
                has(name, "autograd::Engine::evaluate_function"))
                fi->engine = 1;
            continue;
        }
        if (!first_py)
            first_py = fr;
        if (!user_py && !is_torch_file(f))
            user_py = fr;
        if (has(f, "optim") && (has(f, "/torch/optim/") || pk_streq(name, "step")))
            fi->opt = 1;
        if (pk_streq(name, "forward"))
            fi->forward = 1;
    }
    fi->fn = user_py ? user_py : first_py;
}

/* A Python frame's file (its last two path components), line and function
 * name, each cut to 200 bytes. */
typedef struct frame_parts {
    const char *file, *fn;
    int nfile, nfn;
    int64_t line;
} frame_parts;

static frame_parts
frame_parts_of(const pk_val *fr)
{
    const pk_val *f = pk_get(fr, "filename"), *nm = pk_get(fr, "name");
    frame_parts x = {"?", "?", 1, 1, 0};
    pk_int(pk_get(fr, "line"), &x.line);
    const char *p = f && f->type == PK_STR ? f->u.str.s : "?";
    size_t pn = f && f->type == PK_STR ? f->u.str.n : 1;
    size_t cut = 0;
    int slashes = 0;
    for (size_t i = pn; i > 0; i--)
        if (p[i - 1] == '/' && ++slashes == 2) {
            cut = i;
            break;
        }
    x.file = p + cut;
    x.nfile = (int)(pn - cut > 200 ? 200 : pn - cut);
    if (nm && nm->type == PK_STR) {
        x.fn = nm->u.str.s;
        x.nfn = (int)(nm->u.str.n > 200 ? 200 : nm->u.str.n);
    }
    return x;
}

/* Intern buf's first w bytes (w from snprintf; 0 on an error). */
static uint32_t
add_formatted(snap *s, const char *buf, size_t size, int w)
{
    if (w < 0)
        return 0;
    return add_name(s, buf, (size_t)w < size ? (size_t)w : size - 1);
}

/* "dir/file.py(line): function" */
static uint32_t
frame_name(snap *s, const pk_val *fr, const char *prefix)
{
    char buf[512];
    frame_parts x = frame_parts_of(fr);
    int w = snprintf(buf, sizeof buf, "%s%.*s(%" PRId64 "): %.*s", prefix ? prefix : "",
                     x.nfile, x.file, x.line, x.nfn, x.fn);
    return add_formatted(s, buf, sizeof buf, w);
}

/* the allocation site: "dir/file.py:line:function" */
static uint32_t
frame_site(snap *s, const pk_val *fr)
{
    char buf[512];
    frame_parts x = frame_parts_of(fr);
    int w = snprintf(buf, sizeof buf, "%.*s:%" PRId64 ":%.*s", x.nfile, x.file, x.line, x.nfn,
                     x.fn);
    return add_formatted(s, buf, sizeof buf, w);
}

/* ---- building the event list ---- */

static uint64_t
round512(uint64_t x)
{
    return x < 512 ? 512 : (x + 511) / 512 * 512;
}

/* ---- the allocator's layout: real block sizes (issue 14 item 13) ----
 * PyTorch's allocated counter counts block sizes. A block is the request
 * rounded up to 512 B, unless the caching allocator did not split the free
 * block it came from (CUDACachingAllocator's should_split: a block of the
 * small pool, <= 1 MiB, keeps a rest < 512 B; one of the large pool a rest
 * <= 1 MiB; under expandable segments every pool splits a rest of 512 B or
 * more), when it is that whole free block. Frees merge with free
 * neighbours, so the free block runs from the allocation (always at its
 * start) to the next live block or the end of the segment. */
typedef struct u64vec {
    uint64_t *v;              /* sorted, no duplicates */
    size_t n, cap;
} u64vec;

typedef struct layout {
    u64vec live;              /* start addresses of live blocks */
    u64vec seg;               /* segment bases */
    uint64_t *segsz;          /* parallel to seg.v: segment sizes */
    int expandable;           /* expandable segments (process-wide in PyTorch) */
} layout;

/* the first index whose value is > x */
static size_t
uv_upper(const u64vec *u, uint64_t x)
{
    size_t lo = 0, hi = u->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (u->v[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* insert x (no duplicates); its index, or (size_t)-1 out of memory;
 * *added: 1 when it was new. segsz, when given, grows with it. */
static size_t
uv_insert(u64vec *u, uint64_t x, uint64_t **segsz, int *added)
{
    size_t k = uv_upper(u, x);
    *added = 0;
    if (k > 0 && u->v[k - 1] == x)
        return k - 1;
    if (u->n == u->cap) {
        size_t nc = u->cap ? u->cap * 2 : 256;
        uint64_t *q = realloc(u->v, nc * sizeof *q);
        if (!q)
            return (size_t)-1;
        u->v = q;
        if (segsz) {
            uint64_t *z = realloc(*segsz, nc * sizeof *z);
            if (!z)
                return (size_t)-1;
            *segsz = z;
        }
        u->cap = nc;
    }
    memmove(u->v + k + 1, u->v + k, (u->n - k) * sizeof *u->v);
    if (segsz)
        memmove(*segsz + k + 1, *segsz + k, (u->n - k) * sizeof **segsz);
    u->v[k] = x;
    u->n++;
    *added = 1;
    return k;
}

static void
uv_remove(u64vec *u, uint64_t x)
{
    size_t k = uv_upper(u, x);
    if (k > 0 && u->v[k - 1] == x) {
        memmove(u->v + k - 1, u->v + k, (u->n - k) * sizeof *u->v);
        u->n--;
    }
}

/* a segment at base (size bytes; a known base keeps the newest size) */
static int
layout_segment(layout *l, uint64_t base, uint64_t size)
{
    int added;
    size_t k = uv_insert(&l->seg, base, &l->segsz, &added);
    if (k == (size_t)-1)
        return -1;
    l->segsz[k] = size;
    return 0;
}

static int
layout_live(layout *l, uint64_t addr)
{
    int added;
    return uv_insert(&l->live, addr, NULL, &added) == (size_t)-1 ? -1 : 0;
}

/* The block size of an allocation of r bytes (rounded) at addr, from the
 * layout; *known 0 (and r) when no segment holds addr. */
static uint64_t
layout_block(const layout *l, uint64_t addr, uint64_t r, int *known)
{
    *known = 0;
    size_t k = uv_upper(&l->seg, addr);
    if (!k || addr >= l->seg.v[k - 1] + l->segsz[k - 1])
        return r;
    uint64_t end = l->seg.v[k - 1] + l->segsz[k - 1];
    size_t j = uv_upper(&l->live, addr);
    if (j < l->live.n && l->live.v[j] < end)
        end = l->live.v[j];
    if (end < addr + r)
        return r;
    *known = 1;
    uint64_t rest = end - addr - r;
    /* should_split: the small pool and every pool under expandable segments
     * split a rest of 512 B or more; the large pool only a rest > 1 MiB */
    int unsplit = r <= ((uint64_t)1 << 20) || l->expandable ? rest < 512
                                                             : rest <= ((uint64_t)1 << 20);
    return unsplit ? end - addr : r;
}

static void
layout_free(layout *l)
{
    free(l->live.v);
    free(l->seg.v);
    free(l->segsz);
}

typedef struct addr_seen {
    uint64_t *keys;           /* open addressing; 0 = empty (addr 0 never used) */
    uint32_t *val;
    size_t cap, n;
} addr_seen;

static int
seen_put(addr_seen *a, uint64_t k, uint32_t v, int overwrite)
{
    if (!k)
        k = 1;
    if ((a->n + 1) * 2 > a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 1024;
        uint64_t *nk = calloc(nc, sizeof *nk);
        uint32_t *nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t i = 0; i < a->cap; i++)
            if (a->keys[i]) {
                size_t j = mix(a->keys[i]) & (nc - 1);
                while (nk[j])
                    j = (j + 1) & (nc - 1);
                nk[j] = a->keys[i];
                nv[j] = a->val[i];
            }
        free(a->keys);
        free(a->val);
        a->keys = nk;
        a->val = nv;
        a->cap = nc;
    }
    size_t j = mix(k) & (a->cap - 1);
    while (a->keys[j] && a->keys[j] != k)
        j = (j + 1) & (a->cap - 1);
    if (!a->keys[j]) {
        a->keys[j] = k;
        a->val[j] = v;
        a->n++;
    } else if (overwrite) {
        a->val[j] = v;
    }
    return 0;
}

static int
seen_get(const addr_seen *a, uint64_t k, uint32_t *v)
{
    if (!k)
        k = 1;
    if (!a->cap)
        return 0;
    size_t j = mix(k) & (a->cap - 1);
    while (a->keys[j]) {
        if (a->keys[j] == k) {
            *v = a->val[j];
            return 1;
        }
        j = (j + 1) & (a->cap - 1);
    }
    return 0;
}

static void
seen_free(addr_seen *a)
{
    free(a->keys);
    free(a->val);
    memset(a, 0, sizeof *a);
}

static int
add_ev(snap *s, size_t *cap, const sev *e)
{
    if (s->nev == *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        sev *a = realloc(s->ev, nc * sizeof *a);
        if (!a)
            return -1;
        s->ev = a;
        *cap = nc;
    }
    s->ev[s->nev++] = *e;
    return 0;
}

static const char *
act_name(const pk_val *v)
{
    static __thread char buf[32]; /* ranks are read on worker threads */
    if (!v || v->type != PK_STR)
        return NULL;
    size_t n = v->u.str.n < sizeof buf - 1 ? v->u.str.n : sizeof buf - 1;
    memcpy(buf, v->u.str.s, n);
    buf[n] = 0;
    return buf;
}

/* The state of one build (s->ev from a parsed snapshot): the parts of the
 * snapshot, the device analysed, what the trace holds, and the address
 * indexes the steps share. Steps return 0, -1 with the message in err (the
 * caller adds the file name) or B_OOM. */
enum { B_OOM = -2 };
typedef struct bld {
    snap *s;
    char *err;
    size_t errlen;
    const pk_val *segs, *traces, *anns, *trace;
    int dev;
    size_t nt;                /* entries in the device's trace */
    int any_time, has_free_req, has_cpp;
    uint64_t t0;              /* us: the first time_us of the trace or annotations */
    addr_seen endblk;         /* live blocks at the snapshot: addr -> segment << 16 | block */
    addr_seen endseg;         /* segments at the snapshot: addr -> segment index */
    addr_seen first, last;    /* first/last tensor event per address: addr -> trace index */
    addr_seen segfirst;       /* first segment event per address */
    layout lay;               /* segments and live blocks as the walk goes */
    size_t cap;               /* of s->ev */
    uint64_t napprox, nallocs, npre;
} bld;

/* The snapshot's parts: a dict with 'segments', 'device_traces' and
 * 'external_annotations', or the old bare list of segments. */
static int
snap_parts(bld *b, const pk_val *root)
{
    if (root->type == PK_LIST) {
        b->segs = root; /* old torch.cuda.memory_snapshot(): segments only */
    } else if (root->type == PK_DICT) {
        b->segs = pk_get(root, "segments");
        b->traces = pk_get(root, "device_traces");
        b->anns = pk_get(root, "external_annotations");
    } else {
        snprintf(b->err, b->errlen, "not a memory snapshot: the pickle holds a %s, not a dict",
                 root->type == PK_STR ? "string" : "scalar");
        return -1;
    }
    if (!b->segs || b->segs->type != PK_LIST) {
        snprintf(b->err, b->errlen, "not a memory snapshot: no 'segments' list");
        return -1;
    }
    if (b->traces && b->traces->type != PK_LIST) {
        snprintf(b->err, b->errlen, "'device_traces' is not a list");
        return -1;
    }
    return 0;
}

/* The device analysed: the one with the longest trace, else the first
 * segment's. */
static int
choose_device(bld *b)
{
    size_t best = 0, ndevs = 0;
    for (size_t d = 0; d < pk_len(b->traces); d++) {
        const pk_val *t = pk_at(b->traces, d);
        if (t->type != PK_LIST) {
            snprintf(b->err, b->errlen, "device_traces[%zu] is not a list", d);
            return -1;
        }
        if (pk_len(t))
            ndevs++;
        if (pk_len(t) > best) {
            best = pk_len(t);
            b->dev = (int)d;
        }
    }
    if (!best && pk_len(b->segs)) {
        int64_t d0;
        if (pk_int(pk_get(pk_at(b->segs, 0), "device"), &d0) && d0 >= 0 && d0 < 4096)
            b->dev = (int)d0;
    }
    if (ndevs > 1)
        warnf(b->s, "the snapshot has traces of %zu devices: device %d (the longest) is "
                    "analysed", ndevs, b->dev);
    b->trace = pk_at(b->traces, (size_t)b->dev);
    b->nt = pk_len(b->trace);
    return 0;
}

/* Validate every trace entry (action, addr, size, time_us), find the first
 * time of the trace and the annotations, and whether C++ frames exist. */
static int
scan_trace(bld *b)
{
    for (size_t i = 0; i < b->nt; i++) {
        const pk_val *e = pk_at(b->trace, i);
        if (!e || e->type != PK_DICT) {
            snprintf(b->err, b->errlen, "device_traces[%d][%zu] is not a dict", b->dev, i);
            return -1;
        }
        const pk_val *a = pk_get(e, "action");
        int64_t addr, size;
        if (!a || a->type != PK_STR || !pk_int(pk_get(e, "addr"), &addr) ||
            !pk_int(pk_get(e, "size"), &size)) {
            snprintf(b->err, b->errlen, "device_traces[%d][%zu]: action, addr and size must "
                     "be a string and integers", b->dev, i);
            return -1;
        }
        if (size < 0 || (uint64_t)size > ABSURD_BYTES) {
            snprintf(b->err, b->errlen, "device_traces[%d][%zu]: absurd size %" PRId64, b->dev,
                     i, size);
            return -1;
        }
        if (pk_streq(a, "free_requested"))
            b->has_free_req = 1;
        double tu;
        if (pk_num(pk_get(e, "time_us"), &tu)) {
            if (tu < 0 || tu > 1e18) {
                snprintf(b->err, b->errlen, "device_traces[%d][%zu]: absurd time_us", b->dev,
                         i);
                return -1;
            }
            if (!b->any_time || (uint64_t)tu < b->t0)
                b->t0 = (uint64_t)tu;
            b->any_time = 1;
        }
        if (!b->has_cpp) {
            finfo fi;
            frames_info(pk_get(e, "frames"), &fi);
            b->has_cpp = fi.cpp;
        }
    }
    for (size_t i = 0; i < pk_len(b->anns); i++) {
        double tu;
        if (pk_num(pk_get(pk_at(b->anns, i), "time_us"), &tu) && tu >= 0 && tu < 1e18 &&
            (!b->any_time || (uint64_t)tu < b->t0)) {
            b->t0 = (uint64_t)tu;
            b->any_time = 1;
        }
    }
    if (b->nt && !b->any_time)
        warnf(b->s, "the trace has no time_us: events are 1 us apart in trace order");
    return 0;
}

/* The state at the snapshot: the device's segments and their live blocks,
 * by address. */
static int
index_segments(bld *b)
{
    for (size_t i = 0; i < pk_len(b->segs); i++) {
        const pk_val *sg = pk_at(b->segs, i);
        int64_t addr, tsz, d;
        if (!sg || sg->type != PK_DICT || !pk_int(pk_get(sg, "address"), &addr) ||
            !pk_int(pk_get(sg, "total_size"), &tsz)) {
            snprintf(b->err, b->errlen, "segments[%zu]: address and total_size must be "
                     "integers", i);
            return -1;
        }
        if (tsz < 0 || (uint64_t)tsz > ABSURD_BYTES) {
            snprintf(b->err, b->errlen, "segments[%zu]: absurd total_size %" PRId64, i, tsz);
            return -1;
        }
        if (pk_int(pk_get(sg, "device"), &d) && d != b->dev)
            continue;
        const pk_val *xp = pk_get(sg, "is_expandable");
        if (xp && xp->type == PK_BOOL && xp->u.i)
            b->lay.expandable = 1;
        if (seen_put(&b->endseg, (uint64_t)addr, (uint32_t)i, 1) < 0 ||
            layout_segment(&b->lay, (uint64_t)addr, (uint64_t)tsz) < 0)
            return B_OOM;
        const pk_val *blocks = pk_get(sg, "blocks");
        int64_t off = addr;
        for (size_t k = 0; k < pk_len(blocks); k++) {
            const pk_val *bl = pk_at(blocks, k);
            int64_t bsz, baddr;
            if (!pk_int(pk_get(bl, "size"), &bsz) || bsz < 0 || (uint64_t)bsz > ABSURD_BYTES) {
                snprintf(b->err, b->errlen, "segments[%zu].blocks[%zu]: size is not a sane "
                         "integer", i, k);
                return -1;
            }
            if (!pk_int(pk_get(bl, "address"), &baddr))
                baddr = off;
            off = baddr + bsz;
            const pk_val *st = pk_get(bl, "state");
            if ((pk_streq(st, "active_allocated") || pk_streq(st, "active_pending_free")) &&
                seen_put(&b->endblk, (uint64_t)baddr, (uint32_t)((i << 16) | (k & 0xffff)),
                         1) < 0)
                return B_OOM;
            if (k > 0xffff)
                break;
        }
        if (!b->has_cpp && pk_len(blocks)) {
            finfo fi;
            frames_info(pk_get(pk_at(blocks, 0), "frames"), &fi);
            b->has_cpp = fi.cpp;
        }
    }
    return 0;
}

/* The first and last tensor event per address, the first segment event. */
static int
index_trace(bld *b)
{
    for (size_t i = 0; i < b->nt; i++) {
        const pk_val *e = pk_at(b->trace, i);
        const char *a = act_name(pk_get(e, "action"));
        int64_t addr;
        pk_int(pk_get(e, "addr"), &addr);
        if (!strcmp(a, "alloc") || !strcmp(a, "free_requested") || !strcmp(a, "free_completed") ||
            !strcmp(a, "free")) {
            if (seen_put(&b->first, (uint64_t)addr, (uint32_t)i, 0) < 0 ||
                seen_put(&b->last, (uint64_t)addr, (uint32_t)i, 1) < 0)
                return B_OOM;
        } else if (!strncmp(a, "segment_", 8)) {
            if (!strcmp(a, "segment_map") || !strcmp(a, "segment_unmap"))
                b->lay.expandable = 1; /* only expandable segments map and unmap */
            int64_t ssz = 0;
            uint32_t had;
            pk_int(pk_get(e, "size"), &ssz);
            if (!seen_get(&b->segfirst, (uint64_t)addr, &had) && ssz > 0 &&
                layout_segment(&b->lay, (uint64_t)addr, (uint64_t)ssz) < 0)
                return B_OOM;
            if (seen_put(&b->segfirst, (uint64_t)addr, (uint32_t)i, 0) < 0)
                return B_OOM;
        }
    }
    return 0;
}

/* The block size of live block `v` (segment << 16 | block) at the
 * snapshot. */
static uint64_t
end_block_size(const bld *b, uint32_t v)
{
    int64_t bsz = 0;
    pk_int(pk_get(pk_at(pk_get(pk_at(b->segs, v >> 16), "blocks"), v & 0xffff), "size"), &bsz);
    return (uint64_t)bsz;
}

/* Tensor blocks alive before the trace: those whose first event is not an
 * alloc (requested size rounded), and live blocks the trace never touches
 * (their real block size and frames). */
static int
pre_state_blocks(bld *b)
{
    snap *s = b->s;
    for (size_t i = 0; i < b->nt; i++) {
        const pk_val *e = pk_at(b->trace, i);
        int64_t addr, size;
        pk_int(pk_get(e, "addr"), &addr);
        pk_int(pk_get(e, "size"), &size);
        uint32_t f;
        if (!seen_get(&b->first, (uint64_t)addr, &f) || f != i)
            continue;
        if (strcmp(act_name(pk_get(e, "action")), "alloc") != 0) {
            sev p = {0, (uint64_t)addr, round512((uint64_t)size), 0, (uint32_t)i, E_PRE,
                     TID_MAIN, AM_LVL_TENSOR, 0};
            b->napprox++;
            b->npre++;
            if (add_ev(s, &b->cap, &p) < 0 || layout_live(&b->lay, (uint64_t)addr) < 0)
                return B_OOM;
        }
    }
    for (size_t j = 0; j < b->endblk.cap; j++) {
        uint32_t f;
        if (!b->endblk.keys[j] || seen_get(&b->first, b->endblk.keys[j], &f))
            continue;
        uint32_t v = b->endblk.val[j];
        const pk_val *bl = pk_at(pk_get(pk_at(b->segs, v >> 16), "blocks"), v & 0xffff);
        finfo fi;
        frames_info(pk_get(bl, "frames"), &fi);
        sev p = {0, b->endblk.keys[j], end_block_size(b, v),
                 fi.fn ? frame_name(s, fi.fn, NULL) : 0, 0, E_PRE, TID_MAIN, AM_LVL_TENSOR, 0,
                 fi.fn ? frame_site(s, fi.fn) : 0};
        b->npre++;
        if (add_ev(s, &b->cap, &p) < 0 || layout_live(&b->lay, b->endblk.keys[j]) < 0)
            return B_OOM;
    }
    return 0;
}

/* Segments that existed before the trace: live at the snapshot without a
 * segment_alloc/map in the trace, or freed by the trace's first event on
 * their address. */
static int
pre_state_segments(bld *b)
{
    for (size_t j = 0; j < b->endseg.cap; j++) {
        if (!b->endseg.keys[j])
            continue;
        uint32_t f;
        if (seen_get(&b->segfirst, b->endseg.keys[j], &f)) {
            const char *a = act_name(pk_get(pk_at(b->trace, f), "action"));
            if (!strcmp(a, "segment_alloc") || !strcmp(a, "segment_map"))
                continue;
        }
        int64_t tsz = 0;
        pk_int(pk_get(pk_at(b->segs, b->endseg.val[j]), "total_size"), &tsz);
        sev p = {0, b->endseg.keys[j], (uint64_t)tsz, 0, 0, E_PRE, TID_MAIN, AM_LVL_DEVICE, 0};
        if (add_ev(b->s, &b->cap, &p) < 0)
            return B_OOM;
    }
    for (size_t i = 0; i < b->nt; i++) {
        const pk_val *e = pk_at(b->trace, i);
        const char *a = act_name(pk_get(e, "action"));
        uint32_t f;
        int64_t addr, size;
        pk_int(pk_get(e, "addr"), &addr);
        pk_int(pk_get(e, "size"), &size);
        if ((!strcmp(a, "segment_free") || !strcmp(a, "segment_unmap")) &&
            seen_get(&b->segfirst, (uint64_t)addr, &f) && f == i) {
            sev p = {0, (uint64_t)addr, (uint64_t)size, 0, (uint32_t)i, E_PRE, TID_MAIN,
                     AM_LVL_DEVICE, 0};
            if (add_ev(b->s, &b->cap, &p) < 0)
                return B_OOM;
        }
    }
    return 0;
}

/* Where the window walk is: the last time given out, the annotation next
 * due, and what the annotations say (a forward seen, inside the optimizer
 * step). */
typedef struct walk {
    uint64_t tprev;           /* ns */
    size_t ai;
    int seen_fwd, in_opt;
} walk;

/* Annotations of the device due at or before t (ns), as range events. */
static int
annotations_upto(bld *b, walk *w, uint64_t t)
{
    size_t na = pk_len(b->anns);
    for (; w->ai < na; w->ai++) {
        const pk_val *an = pk_at(b->anns, w->ai);
        double at;
        int64_t ad;
        if (!pk_num(pk_get(an, "time_us"), &at) || !b->any_time)
            continue;
        if (pk_int(pk_get(an, "device"), &ad) && ad != b->dev)
            continue;
        uint64_t ta = ((uint64_t)at - b->t0) * 1000;
        if (ta > t)
            break;
        const pk_val *nm = pk_get(an, "name"), *st = pk_get(an, "stage");
        if (!nm || nm->type != PK_STR)
            continue;
        int start = pk_streq(st, "START");
        uint32_t id = add_name(b->s, nm->u.str.s, nm->u.str.n);
        if (!id)
            return B_OOM;
        if (nm->u.str.n > 15 && !memcmp(nm->u.str.s, "Optimizer.step#", 15)) {
            w->in_opt = start;
            if (start)
                w->seen_fwd = 0;
        }
        sev p = {ta > w->tprev ? ta : w->tprev, 0, 0, id, (uint32_t)w->ai,
                 (uint8_t)(start ? E_ANN_START : E_ANN_END), TID_MAIN, 0, 0};
        w->tprev = p.t;
        if (add_ev(b->s, &b->cap, &p) < 0)
            return B_OOM;
    }
    return 0;
}

/* An alloc entry: its block size as PyTorch's allocated counter counts it
 * (the live block's real size when this is the address's last event and the
 * block is live at the snapshot, else rebuilt from the layout, else the
 * request rounded up to 512 B), its thread (backward by the autograd
 * engine's frames, or by position when there are no C++ frames), its
 * optimizer flag and its allocating function. Returns B_OOM or 0. */
static int
alloc_event(bld *b, walk *w, const pk_val *e, size_t i, sev *p)
{
    finfo fi;
    frames_info(pk_get(e, "frames"), &fi);
    b->nallocs++;
    p->kind = E_ALLOC;
    p->levels = AM_LVL_TENSOR;
    uint32_t l, v;
    if (seen_get(&b->last, p->addr, &l) && l == i && seen_get(&b->endblk, p->addr, &v)) {
        p->size = end_block_size(b, v);
    } else {
        int known;
        p->size = layout_block(&b->lay, p->addr, round512(p->size), &known);
        b->napprox += !known;
    }
    if (layout_live(&b->lay, p->addr) < 0)
        return B_OOM;
    if (fi.engine)
        p->tid = TID_BWD;
    else if (!b->has_cpp && fi.nframes == 0 && w->seen_fwd && !w->in_opt)
        p->tid = TID_BWD;
    if (fi.forward && !fi.engine)
        w->seen_fwd = 1;
    p->opt = (uint8_t)(fi.opt && !w->in_opt);
    if (fi.fn) {
        p->fn = frame_name(b->s, fi.fn, p->opt ? "Optimizer.step#frames " : NULL);
        p->site = frame_site(b->s, fi.fn);
    } else if (p->opt) {
        p->fn = add_name(b->s, "Optimizer.step#frames", 21);
    }
    return 0;
}

/* One trace entry as an event; 0 when the entry makes none (free_completed
 * when free_requested exists, snapshot markers), B_OOM out of memory. The
 * layout follows frees and new segments. */
static int
trace_event(bld *b, walk *w, const pk_val *e, size_t i, sev *p)
{
    const char *a = act_name(pk_get(e, "action"));
    if (!strcmp(a, "alloc")) {
        if (alloc_event(b, w, e, i, p) < 0)
            return B_OOM;
    } else if (!strcmp(a, b->has_free_req ? "free_requested" : "free_completed") ||
               !strcmp(a, "free")) {
        p->kind = E_FREE;
        p->levels = AM_LVL_TENSOR;
        uv_remove(&b->lay.live, p->addr);
    } else if (!strcmp(a, "segment_alloc") || !strcmp(a, "segment_map")) {
        p->kind = E_SEG_ALLOC;
        p->levels = AM_LVL_DEVICE;
        if (p->size > 0 && layout_segment(&b->lay, p->addr, p->size) < 0)
            return B_OOM;
    } else if (!strcmp(a, "segment_free") || !strcmp(a, "segment_unmap")) {
        p->kind = E_SEG_FREE;
        p->levels = AM_LVL_DEVICE;
    } else if (!strcmp(a, "oom")) {
        int64_t fr = 0;
        p->kind = E_OOM;
        p->addr = pk_int(pk_get(e, "device_free"), &fr) && fr > 0 ? (uint64_t)fr : 0;
    } else {
        return 0;
    }
    return 1;
}

/* The window: trace entries merged with the annotations by time (ns since
 * the first time; entries without time_us are 1 us apart). */
static int
window_events(bld *b)
{
    walk w = {0, 0, 0, 0};
    for (size_t i = 0; i <= b->nt; i++) {
        const pk_val *e = i < b->nt ? pk_at(b->trace, i) : NULL;
        double tu = 0;
        uint64_t t = w.tprev;
        if (!e)
            t = UINT64_MAX;
        else if (pk_num(pk_get(e, "time_us"), &tu))
            t = ((uint64_t)tu - b->t0) * 1000;
        else if (!b->any_time)
            t = (uint64_t)i * 1000;
        if (annotations_upto(b, &w, t) < 0)
            return B_OOM;
        if (!e)
            break;
        if (t < w.tprev)
            t = w.tprev;
        w.tprev = t;
        int64_t addr, size;
        pk_int(pk_get(e, "addr"), &addr);
        pk_int(pk_get(e, "size"), &size);
        sev p = {t, (uint64_t)addr, (uint64_t)size, 0, (uint32_t)i, 0, TID_MAIN, 0, 0};
        int made = trace_event(b, &w, e, i, &p);
        if (made < 0 || (made && add_ev(b->s, &b->cap, &p) < 0))
            return B_OOM;
    }
    return 0;
}

/* What the snapshot could not say exactly. */
static void
build_warnings(bld *b)
{
    if (b->napprox)
        warnf(b->s, "%" PRIu64 " of %" PRIu64 " block sizes are requested sizes rounded up to "
                    "512 B (blocks not live at the snapshot, in no known segment, or live "
                    "before the trace): approximate, unsplit blocks can be bigger",
              b->napprox, b->nallocs + b->npre);
    if (!b->has_cpp && b->nt)
        warnf(b->s, "no C++ frames (Python stacks only): allocations without a stack between "
                    "a forward and the optimizer step are taken as backward");
    if (!b->nt)
        warnf(b->s, "the snapshot has no allocation trace (record_memory_history was off): "
                    "only the state at the snapshot");
}

/* Build s->ev from the parsed snapshot: the state before the trace (blocks
 * and segments that existed before its first event), then the window.
 * Returns 0, or -1 with err ("what"; the caller adds the file name). */
static int
build(snap *s, const pk_val *root, char *err, size_t errlen)
{
    bld b = {.s = s, .err = err, .errlen = errlen};
    int rc = snap_parts(&b, root);
    if (!rc)
        rc = choose_device(&b);
    if (!rc)
        rc = scan_trace(&b);
    if (!rc)
        rc = index_segments(&b);
    if (!rc)
        rc = index_trace(&b);
    if (!rc)
        rc = pre_state_blocks(&b);
    if (!rc)
        rc = pre_state_segments(&b);
    if (!rc)
        rc = window_events(&b);
    if (!rc)
        build_warnings(&b);
    if (rc == B_OOM) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    seen_free(&b.endblk);
    seen_free(&b.endseg);
    seen_free(&b.first);
    seen_free(&b.last);
    seen_free(&b.segfirst);
    layout_free(&b.lay);
    return rc;
}

/* ---- the source ---- */

static void
snap_free(snap *s)
{
    if (!s)
        return;
    pk_free(s->doc);
    free(s->buf);
    free(s->ev);
    for (size_t i = 0; i < s->nnames; i++)
        free(s->names[i]);
    free(s->names);
    free(s->name_len);
    free(s->live);
    for (size_t i = 0; i < s->nwarn; i++)
        free(s->warn[i]);
    free(s->warn);
    free(s);
}

static void
reset(snap *s)
{
    s->i = 0;
    s->started = 0;
    s->nq = s->qi = 0;
    s->next_span = 1;
    s->nann = 0;
    if (s->live)
        memset(s->live, 0, s->lcap * sizeof *s->live);
    s->lcount = 0;
    s->allocated = s->reserved = 0;
}

static am_event *
qpush(snap *s, const sev *e)
{
    am_event *v = &s->q[s->nq++];
    memset(v, 0, sizeof *v);
    v->t_ns = e->t;
    v->tid = e->tid;
    v->device = -1;
    v->peer = -1;
    v->src_offset = e->off;
    return v;
}

static void
set_name(snap *s, am_event *v, uint32_t id)
{
    if (id) {
        v->name = s->names[id - 1];
        v->name_len = s->name_len[id - 1];
    }
}

/* An allocation (or a block or segment from before the window) as an
 * ALLOC event with the running totals; an allocation with a Python frame is
 * wrapped in a range of that frame's name (its allocation site). Returns -1
 * when out of memory. */
static int
alloc_events(snap *s, const sev *e)
{
    if (e->levels & AM_LVL_TENSOR) {
        if (live_put_(s, e->addr, e->size) < 0)
            return -1;
    } else {
        s->reserved += e->size;
    }
    am_event *v;
    if (e->kind == E_ALLOC && e->fn) {
        v = qpush(s, e);
        v->kind = AM_EV_RANGE_PUSH;
        set_name(s, v, e->fn);
        v->domain_id = s->next_span;
    }
    v = qpush(s, e);
    v->kind = AM_EV_ALLOC;
    v->levels = e->levels;
    v->mem = AM_MEM_DEVICE;
    v->lib = AM_LIB_PYTORCH;
    v->addr = e->addr;
    v->size = e->size;
    v->has_totals = 1;
    v->total_allocated = s->allocated;
    v->total_reserved = s->reserved;
    /* a segment from before the window: phase unknown */
    v->pretrace = e->kind == E_PRE && !(e->levels & AM_LVL_TENSOR);
    if (e->site && (e->levels & AM_LVL_TENSOR)) {
        v->site = s->names[e->site - 1];
        v->site_len = s->name_len[e->site - 1];
    }
    if (e->kind == E_ALLOC && e->fn) {
        v = qpush(s, e);
        v->kind = AM_EV_RANGE_POP;
        v->domain_id = s->next_span++;
        if (!s->next_span)
            s->next_span = 1;
    }
    return 0;
}

static int
snap_next(am_source *src, am_event *out)
{
    snap *s = src->impl;
    while (s->qi >= s->nq) {
        s->nq = s->qi = 0;
        if (!s->started) {
            /* thread names first */
            s->started = 1;
            sev z = {0, 0, 0, 0, 0, 0, TID_BWD, 0, 0};
            am_event *v = qpush(s, &z);
            v->kind = AM_EV_THREAD_NAME;
            v->name = "pt_autograd_0";
            v->name_len = 13;
        }
        if (s->i >= s->nev) {
            if (!s->nq)
                return 0;
            break;
        }
        const sev *e = &s->ev[s->i++];
        am_event *v;
        switch (e->kind) {
        case E_PRE:
        case E_ALLOC:
        case E_SEG_ALLOC:
            if (alloc_events(s, e) < 0)
                goto oom;
            break;
        case E_FREE:
        case E_SEG_FREE:
            if (e->levels & AM_LVL_TENSOR)
                live_del_(s, e->addr);
            else
                s->reserved = s->reserved > e->size ? s->reserved - e->size : 0;
            v = qpush(s, e);
            v->kind = AM_EV_FREE;
            v->levels = e->levels;
            v->mem = AM_MEM_DEVICE;
            v->addr = e->addr;
            v->size = e->kind == E_SEG_FREE ? e->size : 0;
            v->has_totals = 1;
            v->total_allocated = s->allocated;
            v->total_reserved = s->reserved;
            break;
        case E_OOM:
            v = qpush(s, e);
            v->kind = AM_EV_OOM;
            v->size = e->size;
            v->free_bytes = e->addr;
            v->lib = AM_LIB_PYTORCH;
            v->mem = AM_MEM_DEVICE;
            break;
        case E_ANN_START:
            if (s->nann < 32) {
                v = qpush(s, e);
                v->kind = AM_EV_RANGE_PUSH;
                set_name(s, v, e->fn);
                v->domain_id = s->ann_span[s->nann++] = 0x80000000u | s->next_span++;
            }
            break;
        case E_ANN_END: {
            if (s->nann) {
                v = qpush(s, e);
                v->kind = AM_EV_RANGE_POP;
                v->domain_id = s->ann_span[--s->nann];
            }
            break;
        }
        }
    }
    *out = s->q[s->qi++];
    return 1;
oom:
    snprintf(src->error, sizeof src->error, "%s: out of memory", src->meta.path);
    return -1;
}

static int
snap_rewind(am_source *src)
{
    reset(src->impl);
    return 0;
}

static void
snap_close(am_source *src)
{
    if (!src)
        return;
    snap_free(src->impl);
    free(src);
}

static const am_source_ops snap_ops = {"pytorch-snapshot", snap_next, snap_rewind, snap_close,
                                       NULL};

static int
snap_sniff(const char *path, const unsigned char *head, size_t n)
{
    /* protocol 2+ pickles start with PROTO; a snapshot is a dict or list.
     * Any *.pickle / *.pkl is ours too, so a damaged one gets our error. */
    size_t pl = strlen(path);
    if ((pl > 7 && !strcmp(path + pl - 7, ".pickle")) || (pl > 4 && !strcmp(path + pl - 4, ".pkl")))
        return 1;
    return n >= 3 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5 &&
           (head[2] == '}' || head[2] == ']' || head[2] == 0x95 || head[2] == '(');
}

static int
snap_open(const char *path, am_source **out, char *err, size_t errlen)
{
    *out = NULL;
    am_source *src = calloc(1, sizeof *src);
    snap *s = calloc(1, sizeof *s);
    FILE *f = NULL;
    if (!src || !s) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    src->impl = s;
    src->ops = &snap_ops;
    f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if ((uint64_t)st.st_size > MAX_FILE) {
        snprintf(err, errlen, "%s: offset 0: %lld bytes is too big for a snapshot", path,
                 (long long)st.st_size);
        goto fail;
    }
    s->n = (size_t)st.st_size;
    s->buf = malloc(s->n ? s->n : 1);
    if (!s->buf) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (fread(s->buf, 1, s->n, f) != s->n) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    f = NULL;
    pk_val *root;
    char perr[400];
    s->doc = pk_load(s->buf, s->n, &root, perr, sizeof perr);
    if (!s->doc) {
        snprintf(err, errlen, "%s: %s", path, perr);
        goto fail;
    }
    if (build(s, root, perr, sizeof perr) < 0) {
        snprintf(err, errlen, "%s: offset 0: %s", path, perr);
        goto fail;
    }
    am_meta *m = &src->meta;
    m->path = path;
    m->rank = m->local_rank = m->world_size = -1;
    m->attempt = -1;
    m->pid = (int)TID_MAIN;
    m->device = -1;
    m->mode = "snapshot";
    m->closed = 1;
    m->record_count = s->nev;
    snprintf(s->format, sizeof s->format, "pytorch memory snapshot");
    m->format = s->format;
    /* Megatron: snapshot_{rank}.pickle */
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    int r;
    if (sscanf(b, "snapshot_%d.pickle", &r) == 1 && r >= 0)
        m->rank = r;
    reset(s);
    m->nwarnings = s->nwarn;
    m->warnings = (const char *const *)s->warn;
    *out = src;
    return 0;
fail:
    if (f)
        fclose(f);
    snap_free(s);
    free(src);
    return -1;
}

const am_importer am_snapshot_importer = {"pytorch-snapshot", snap_sniff, snap_open};
