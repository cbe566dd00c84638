/* summary.c: writing and reading per-rank summaries (summary.h;
 * docs/summary-format.md).
 *
 * One visitor per struct serves both directions (sio.rd): the writer and
 * the reader walk the same fields in the same order, so they cannot drift
 * apart. Integers are little-endian fixed width; a string is a u32 length
 * (0xffffffff: none) and its bytes; an array is a u64 count and its items.
 * The reader checks every field against the bytes left and its limits and
 * stops at the first bad one with "FILE: offset N: field F: what".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "recomp/trace_format.h"
#include "summary.h"

/* ---- the source a summary's rank keeps: its metadata and strings ---- */

typedef struct sum_src {
    am_source src;
    char **blocks;            /* every string and array the metadata points to */
    size_t nblocks, capblocks;
} sum_src;

static int
sum_next(am_source *s, am_event *ev)
{
    (void)s;
    (void)ev;
    return 0;
}

static int
sum_rewind(am_source *s)
{
    snprintf(s->error, sizeof s->error, "%s: a summary holds no events", s->meta.path);
    return -1;
}

static void
sum_close(am_source *s)
{
    sum_src *q = (sum_src *)s;
    for (size_t i = 0; i < q->nblocks; i++)
        free(q->blocks[i]);
    free(q->blocks);
    free(q);
}

static const am_source_ops sum_ops = {"summary", sum_next, sum_rewind, sum_close, NULL};

/* ---- the visitor's primitives ---- */

typedef struct sio {
    int rd;                   /* 1 read, 0 write */
    unsigned char *buf;       /* the payload */
    size_t len, cap, pos;
    const char *name;         /* the file, for errors */
    char where[64];           /* the record being visited ("rank 3", ...) */
    char *err;
    size_t errlen;
    int bad;                  /* read: a field failed; write: out of memory */
    int deflated;             /* read: the payload was stored compressed */
    sum_src *owner;           /* read: the source taking metadata strings */
} sio;

static void
fail(sio *io, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void
fail(sio *io, const char *field, const char *fmt, ...)
{
    if (io->bad)
        return;
    io->bad = 1;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(io->err, io->errlen, "%s: %soffset %zu: field %s%s%s: %s", io->name,
             io->deflated ? "payload " : "", (io->deflated ? 0 : (size_t)AM_SUMMARY_HEADER) + io->pos,
             io->where, io->where[0] ? "." : "", field, what);
}

/* n bytes at p: written, or read (zeros once a field failed) */
static void
raw(sio *io, const char *field, void *p, size_t n)
{
    if (io->rd) {
        if (!io->bad && io->len - io->pos < n)
            fail(io, field, "truncated (%zu bytes wanted, %zu left)", n, io->len - io->pos);
        if (io->bad) {
            memset(p, 0, n);
            return;
        }
        memcpy(p, io->buf + io->pos, n);
        io->pos += n;
        return;
    }
    if (io->bad)
        return;
    if (io->len + n > io->cap) {
        size_t c = io->cap ? io->cap * 2 : 4096;
        while (c < io->len + n)
            c *= 2;
        unsigned char *q = realloc(io->buf, c);
        if (!q) {
            io->bad = 1;
            snprintf(io->err, io->errlen, "%s: out of memory", io->name);
            return;
        }
        io->buf = q;
        io->cap = c;
    }
    memcpy(io->buf + io->len, p, n);
    io->len += n;
}

static void
s_u64(sio *io, const char *f, uint64_t *v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(*v >> (8 * i));
    raw(io, f, b, 8);
    if (io->rd) {
        *v = 0;
        for (int i = 0; i < 8; i++)
            *v |= (uint64_t)b[i] << (8 * i);
    }
}

static void
s_u32(sio *io, const char *f, uint32_t *v)
{
    uint64_t x = *v;
    unsigned char b[4] = {(unsigned char)x, (unsigned char)(x >> 8), (unsigned char)(x >> 16),
                          (unsigned char)(x >> 24)};
    raw(io, f, b, 4);
    if (io->rd)
        *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void
s_i32(sio *io, const char *f, int32_t *v)
{
    uint32_t x = (uint32_t)*v;
    s_u32(io, f, &x);
    if (io->rd)
        *v = (int32_t)x;
}

static void
s_int(sio *io, const char *f, int *v)
{
    int32_t x = (int32_t)*v;
    s_i32(io, f, &x);
    if (io->rd)
        *v = x;
}

static void
s_u8(sio *io, const char *f, uint8_t *v)
{
    raw(io, f, v, 1);
}

/* a u8 that names one of n values (a phase, boundary, library) */
static void
s_enum(sio *io, const char *f, uint8_t *v, unsigned n)
{
    s_u8(io, f, v);
    if (io->rd && *v >= n) {
        fail(io, f, "value %u out of range (< %u)", *v, n);
        *v = 0;
    }
}

static void
s_bool(sio *io, const char *f, int *v)
{
    uint8_t x = *v != 0;
    s_u8(io, f, &x);
    if (io->rd && x > 1)
        fail(io, f, "value %u is not 0 or 1", x);
    if (io->rd)
        *v = x;
}

/* an array's count: each item takes at least `least` bytes, at most max */
static void
s_count(sio *io, const char *f, size_t *n, size_t least, uint64_t max)
{
    uint64_t x = *n;
    s_u64(io, f, &x);
    if (!io->rd)
        return;
    if (!io->bad && (x > max || x * least > io->len - io->pos)) {
        fail(io, f, "count %" PRIu64 " exceeds %s", x,
             x > max ? "its limit" : "the bytes left in the payload");
    }
    *n = io->bad ? 0 : (size_t)x;
}

/* calloc(n, elem) for a counted array on read (NULL for n 0 or a failure) */
static void *
s_array(sio *io, size_t n, size_t elem)
{
    if (!n || io->bad)
        return NULL;
    void *p = calloc(n, elem);
    if (!p)
        fail(io, "(array)", "out of memory (%zu items)", n);
    return p;
}

/* 1 when s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF). The writer only stores strings the
 * job, the launcher or this tool made; a byte damaged in a summary must not
 * reach a terminal or a UTF-8 reader of the report raw. */
static int
utf8_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] > 0x9f) ||
            (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] > 0x8f))
            return 0;
        i += len;
    }
    return 1;
}

/* A string's bytes: write s (NULL: none); read into a new NUL-terminated
 * buffer (*out, NULL for none), malloc'd. 0, or -1 (read failed). */
static int
s_bytes(sio *io, const char *f, const char *s, char **out, uint32_t maxlen)
{
    uint32_t n = s ? (uint32_t)strlen(s) : 0xffffffffu;
    s_u32(io, f, &n);
    if (!io->rd)
        return s ? (raw(io, f, (void *)s, n), 0) : 0;
    *out = NULL;
    if (io->bad)
        return -1;
    if (n == 0xffffffffu)
        return 0;
    if (n > maxlen || n > io->len - io->pos) {
        fail(io, f, "string of %" PRIu32 " bytes exceeds %s", n,
             n > maxlen ? "its limit" : "the bytes left in the payload");
        return -1;
    }
    char *p = malloc((size_t)n + 1);
    if (!p) {
        fail(io, f, "out of memory");
        return -1;
    }
    memcpy(p, io->buf + io->pos, n);
    p[n] = 0;
    io->pos += n;
    if (strlen(p) != n) {
        free(p);
        fail(io, f, "string holds a NUL byte");
        return -1;
    }
    if (!utf8_valid((const unsigned char *)p, n)) {
        free(p);
        fail(io, f, "string is not valid UTF-8");
        return -1;
    }
    *out = p;
    return 0;
}

/* a char array field of capacity cap */
static void
s_chars(sio *io, const char *f, char *buf, size_t cap)
{
    char *p = NULL;
    if (s_bytes(io, f, buf, &p, (uint32_t)(cap - 1)) < 0 || !io->rd) {
        if (io->rd)
            buf[0] = 0;
        return;
    }
    snprintf(buf, cap, "%s", p ? p : "");
    free(p);
}

/* keep p until the source closes; p, or NULL when out of memory (freed) */
static void *
own(sio *io, void *p)
{
    sum_src *q = io->owner;
    if (!p)
        return NULL;
    if (q->nblocks == q->capblocks) {
        size_t c = q->capblocks ? q->capblocks * 2 : 16;
        char **b = realloc(q->blocks, c * sizeof *b);
        if (!b) {
            free(p);
            fail(io, "(string)", "out of memory");
            return NULL;
        }
        q->blocks = b;
        q->capblocks = c;
    }
    q->blocks[q->nblocks++] = p;
    return p;
}

/* a const char * held by the rank's source (metadata, static reasons) */
static void
s_cstr(sio *io, const char *f, const char **v)
{
    char *p = NULL;
    s_bytes(io, f, *v, &p, 1u << 20);
    if (io->rd)
        *v = own(io, p);
}

/* a char * the rank owns (freed by am_rank_free) */
static void
s_str(sio *io, const char *f, char **v)
{
    char *p = NULL;
    s_bytes(io, f, *v, &p, 1u << 20);
    if (io->rd)
        *v = p;
}

/* a string list held by the source (argv, env, warnings) */
static void
s_cstrv(sio *io, const char *f, size_t *n, const char *const **v)
{
    s_count(io, f, n, 4, 1u << 20);
    const char **a = io->rd ? own(io, s_array(io, *n, sizeof *a)) : (const char **)*v;
    for (size_t i = 0; i < *n && !io->bad; i++)
        s_cstr(io, f, &a[i]);
    if (io->rd)
        *v = io->bad ? NULL : a;
}

static void s_bool8(sio *io, const char *f, uint8_t *v);

#define U64(p, x) s_u64(io, #x, &(p)->x)
#define INT(p, x) s_int(io, #x, &(p)->x)
#define BOOL(p, x) s_int(io, #x, &(p)->x) /* an int flag, kept as it is */
#define CHARS(p, x) s_chars(io, #x, (p)->x, sizeof (p)->x)
#define PHASE(p, x) s_enum(io, #x, &(p)->x, AM_PH_COUNT)
#define BOUNDARY(p, x) s_enum(io, #x, &(p)->x, AM_BD_COUNT)

/* ---- the records ---- */

static void
v_meta(sio *io, am_meta *m)
{
    s_cstr(io, "path", &m->path);
    s_cstr(io, "format", &m->format);
    INT(m, rank);
    INT(m, local_rank);
    INT(m, world_size);
    INT(m, pid);
    INT(m, device);
    CHARS(m, host);
    CHARS(m, torchelastic_run_id);
    CHARS(m, slurm_job_id);
    CHARS(m, master);
    CHARS(m, run_id);
    INT(m, attempt);
    U64(m, real_start_ns);
    U64(m, real_end_ns);
    U64(m, device_capacity);
    s_cstr(io, "mode", &m->mode);
    BOOL(m, closed);
    s_cstrv(io, "argv", &m->argc, &m->argv);
    s_cstrv(io, "env", &m->nenv, &m->env);
    s_cstrv(io, "warnings", &m->nwarnings, &m->warnings);
    U64(m, record_count);
    BOOL(m, limit_hit);
    U64(m, limit_ns);
    U64(m, max_bytes);
    U64(m, dropped_records);
    INT(m, window_kind);
    U64(m, window_a);
    U64(m, window_b);
    BOOL(m, window_never_opened);
    BOOL(m, window_opened);
    BOOL(m, window_closed);
    U64(m, window_open_ns);
    U64(m, window_close_ns);
    s_u32(io, "salvaged_chunks", &m->salvaged_chunks);
    U64(m, salvage_lost_bytes);
    if (io->rd && !m->path)
        fail(io, "path", "missing");
}

/* (6.1) What 6.0 lacked of a rank's metadata, stored for every rank after
 * the last one: the parent's pid (merge sets a forked child apart as the
 * analysis of its traces does) and how the process left (trace format
 * 1.6: _exit/_Exit and its status; whether its shim seals a trace at
 * _exit). A 6.0 summary reads with them unknown (ppid 0, no exit seen). */
static void
v_meta_61(sio *io, am_meta *m)
{
    INT(m, ppid);
    INT(m, exit_via);
    INT(m, exit_status);
    s_bool(io, "exit_sealed", &m->exit_sealed);
    if (io->rd && (m->exit_via < 0 || m->exit_via > (int)RS_EXIT_VIA_MAX))
        fail(io, "exit_via", "value %d out of range (0 none, 1 _exit, 2 _Exit)", m->exit_via);
    else if (io->rd && !m->exit_via && m->exit_status)
        fail(io, "exit_status", "status %d without an exit (exit_via 0)", m->exit_status);
}

/* a grouped live set: count then {phase, boundary, layer, site, bytes, count} */
static void
v_groups(sio *io, am_group **g, size_t *n)
{
    s_count(io, "groups", n, 22, 1u << 24);
    if (io->rd)
        *g = s_array(io, *n, sizeof **g);
    for (size_t i = 0; i < *n && !io->bad; i++) {
        am_group *x = &(*g)[i];
        PHASE(x, phase);
        BOUNDARY(x, boundary);
        s_i32(io, "layer", &x->layer);
        s_u32(io, "site", &x->site);
        U64(x, bytes);
        U64(x, count);
    }
}

static void
v_attr(sio *io, am_attr *a)
{
    PHASE(a, phase);
    BOUNDARY(a, boundary);
    s_i32(io, "layer", &a->layer);
    int32_t fwd = a->fwd; /* 6.0: the forward pass and the first-iteration flag */
    s_i32(io, "fwd", &fwd);
    if (io->rd && !io->bad && (fwd < INT16_MIN || fwd > INT16_MAX))
        fail(io, "fwd", "%d out of range", (int)fwd);
    a->fwd = (int16_t)fwd;
    s_bool8(io, "first", &a->first);
}

static void
v_peak(sio *io, am_peak *p)
{
    BOOL(p, known);
    s_cstr(io, "reason", &p->reason);
    U64(p, bytes);
    U64(p, time_ns);
    INT(p, iteration);
    PHASE(p, phase);
    PHASE(p, program_phase);
    am_setter *s = &p->setter;
    BOOL(s, pretrace);
    U64(s, addr);
    U64(s, size);
    s_u32(io, "tid", &s->tid);
    v_attr(io, &s->attr);
    s_enum(io, "lib", &s->lib, AM_LIB_COUNT);
    CHARS(s, where);
    CHARS(s, python);
    U64(p, event_index);
    v_groups(io, &p->groups, &p->ngroups);
    U64(p, untracked_bytes);
    for (int l = 0; l < AM_LIB_COUNT; l++)
        s_u64(io, "by_lib", &p->by_lib[l]);
    U64(p, reserved_bytes);
}

static void
v_iteration(sio *io, am_iteration *it)
{
    INT(it, number);
    U64(it, start_ns);
    U64(it, end_ns);
    for (int l = 0; l < AM_NLEVELS; l++) {
        s_u64(io, "peak", &it->peak[l]);
        s_enum(io, "peak_phase", &it->peak_phase[l], AM_PH_COUNT);
        s_u8(io, "peak_carried", &it->peak_carried[l]);
    }
    INT(it, microbatches);
    s_count(io, "phases", &it->nphases, 17, 1u << 26);
    if (io->rd) {
        it->phases = s_array(io, it->nphases, sizeof *it->phases);
        it->capphases = it->nphases;
    }
    for (size_t i = 0; i < it->nphases && !io->bad; i++) {
        PHASE(&it->phases[i], phase);
        U64(&it->phases[i], start_ns);
        U64(&it->phases[i], end_ns);
    }
}

static void
v_oom(sio *io, am_oom *o)
{
    U64(o, t_ns);
    s_u32(io, "tid", &o->tid);
    INT(o, iteration);
    PHASE(o, phase);
    s_enum(io, "lib", &o->lib, AM_LIB_COUNT);
    uint32_t api = o->api;
    s_u32(io, "api", &api);
    o->api = (uint16_t)api;
    s_i32(io, "status", &o->status);
    U64(o, requested);
    U64(o, free_bytes);
    U64(o, total_bytes);
    for (int l = 0; l < AM_NLEVELS; l++)
        s_u64(io, "live", &o->live[l]);
    v_groups(io, &o->groups, &o->ngroups);
    s_count(io, "frames", &o->nframes, 4, 1u << 16);
    if (io->rd)
        o->frames = s_array(io, o->nframes, sizeof *o->frames);
    for (size_t i = 0; i < o->nframes && !io->bad; i++)
        s_str(io, "frames", &o->frames[i]);
    CHARS(o, where);
    U64(o, offset);
    BOOL(o, past_limit);
    uint64_t sf = o->shim_frames;
    s_u64(io, "shim_frames", &sf);
    o->shim_frames = (size_t)sf;
}

static void
v_coverage(sio *io, am_coverage *c)
{
    BOOL(c, complete);
    BOOL(c, capped);
    BOOL(c, windowed);
    s_cstr(io, "status", &c->status);
    CHARS(c, summary);
    CHARS(c, meaning);
}

/* Megatron's layer placement the rank was numbered with (6.0) */
static void
v_place(sio *io, am_placement *p)
{
    INT(p, num_layers);
    INT(p, pp);
    INT(p, vp);
    INT(p, first);
    INT(p, last);
    INT(p, mb_group);
    BOOL(p, other);
}

/* the scalar fields of the analysed rank, then its arrays */
static void
v_rank(sio *io, am_rank *r)
{
    INT(r, rank);
    INT(r, levels);
    s_cstr(io, "tensor_na", &r->tensor_na);
    for (int l = 0; l < AM_NLEVELS && !io->bad; l++)
        v_peak(io, &r->peak[l]);
    for (int l = 0; l < AM_NLEVELS && !io->bad; l++)
        v_peak(io, &r->iter_peak[l]);
    INT(r, iter_selected);
    s_count(io, "iterations", &r->niters, 50, 1u << 24);
    if (io->rd)
        r->iters = s_array(io, r->niters, sizeof *r->iters);
    for (size_t i = 0; i < r->niters && !io->bad; i++)
        v_iteration(io, &r->iters[i]);
    U64(r, init_end_ns);
    BOOL(r, steady);
    s_cstr(io, "steady_reason", &r->steady_reason);
    INT(r, opt_init_iteration);
    BOOL(r, opt_state_preexisting);
    INT(r, first_opt_iteration);
    BOOL(r, opt_inferred);
    int has_oom = r->oom != NULL;
    s_bool(io, "oom", &has_oom);
    if (io->rd && has_oom && !io->bad && !(r->oom = calloc(1, sizeof *r->oom)))
        fail(io, "oom", "out of memory");
    if (has_oom && r->oom)
        v_oom(io, r->oom);
    s_count(io, "noom_fatal", &r->noom_fatal, 0, 1u << 30);
    s_count(io, "retries", &r->nretries, 25, 1u << 24);
    if (io->rd)
        r->retries = s_array(io, r->nretries, sizeof *r->retries);
    for (size_t i = 0; i < r->nretries && !io->bad; i++) {
        U64(&r->retries[i], t_ns);
        U64(&r->retries[i], size);
        INT(&r->retries[i], iteration);
        PHASE(&r->retries[i], phase);
    }
    s_count(io, "nmeminfo", &r->nmeminfo, 0, UINT64_MAX);
    U64(r, meminfo_total);
    U64(r, min_free);
    U64(r, max_other);
    BOOL(r, layer_global);
    INT(r, pp);
    INT(r, stage);
    INT(r, layers_per_stage);
    INT(r, layers_per_chunk);
    s_cstr(io, "stage_source", &r->stage_source);
    v_place(io, &r->place);
    INT(r, microbatches);
    INT(r, first_fwd_offset);
    U64(r, nevents);
    U64(r, nallocs);
    U64(r, nfrees);
    U64(r, nunmatched_frees);
    U64(r, ncollectives);
    BOOL(r, has_step_markers);
    INT(r, layer_signal);
    s_count(io, "sites", &r->nsites, 4, 1u << 24);
    if (io->rd) {
        r->sites = s_array(io, r->nsites, sizeof *r->sites);
        r->capsites = r->nsites;
    }
    for (size_t i = 0; i < r->nsites && !io->bad; i++)
        s_str(io, "sites", &r->sites[i]);
    BOOL(r, by_site);
    v_coverage(io, &r->coverage);
    BOOL(r, device_lower_bound);
    s_count(io, "notes", &r->nnotes, 4, 1u << 20);
    if (io->rd)
        r->notes = s_array(io, r->nnotes, sizeof *r->notes);
    for (size_t i = 0; i < r->nnotes && !io->bad; i++)
        s_str(io, "notes", &r->notes[i]);
}

/* 6.1, after every rank: rank i's caught OOMs (am_rank.caught), an array
 * of {t_ns u64, requested u64, iteration i32, phase u8} */
static void
v_caught(sio *io, am_rank *r, size_t i)
{
    snprintf(io->where, sizeof io->where, "rank[%zu].caught", i);
    s_count(io, "caught", &r->ncaught, 21, 1u << 24);
    if (io->rd)
        r->caught = s_array(io, r->ncaught, sizeof *r->caught);
    for (size_t k = 0; k < r->ncaught && !io->bad; k++) {
        U64(&r->caught[k], t_ns);
        U64(&r->caught[k], size);
        INT(&r->caught[k], iteration);
        PHASE(&r->caught[k], phase);
    }
}

/* adv_cfg: its int fields, then its strings (AM_SUMMARY_CFG_INTS/STRS,
 * summary.h) */
#define CFG_INTS AM_SUMMARY_CFG_INTS
#define CFG_STRS AM_SUMMARY_CFG_STRS

static void
v_cfg(sio *io, adv_cfg *c)
{
    snprintf(io->where, sizeof io->where, "cfg");
#define X(f) INT(c, f);
    CFG_INTS(X)
#undef X
#define X(f) CHARS(c, f);
    CFG_STRS(X)
#undef X
    uint64_t of; /* the offload fraction's IEEE 754 bits */
    memcpy(&of, &c->offload_fraction, sizeof of);
    s_u64(io, "offload_fraction", &of);
    memcpy(&c->offload_fraction, &of, sizeof of);
    uint32_t m = c->modules;
    s_u32(io, "modules", &m);
    c->modules = m;
    uint8_t st = (uint8_t)c->flags_style;
    s_u8(io, "flags_style", &st);
    c->flags_style = (char)st;
}

/* the op trace's scalars the job part reads */
static void
v_scal(sio *io, adv_trace *t)
{
    uint64_t nl = t->nlayers;
    s_u64(io, "nlayers", &nl);
    t->nlayers = (size_t)nl;
    INT(t, megatron_ranges);
    INT(t, core_regions);
    INT(t, core_te_attn);
    INT(t, te_calls);
    INT(t, replays);
    U64(t, replay_bytes);
    U64(t, max_outside);
    U64(t, graph_pool_bytes);
    INT(t, graph_capture_oom);
    INT(t, last_complete_iter);
    s_u32(io, "opt_state_init_end", &t->opt_state_init_end);
    INT(t, trunc);
    INT(t, oom);
    s_u32(io, "oom_pos", &t->oom_pos);
    PHASE(t, oom_phase);
    s_enum(io, "oom_lib", &t->oom_lib, AM_LIB_COUNT);
    s_u8(io, "oom_in_capture", &t->oom_in_capture);
    BOUNDARY(t, oom_boundary);
    U64(t, oom_request);
    U64(t, oom_allocated);
    U64(t, oom_reserved);
    U64(t, oom_device_live);
    U64(t, init_bytes);
    INT(t, optimizer_seen);
    /* 6.0 */
    BOOL(t, oom_past_limit);
    s_enum(io, "oom_load", &t->oom_load, AM_PYLOAD_STATE + 1);
    BOOL(t, load_seen);
    BOOL(t, py_seen);
    am_moe_dispatch *m = &t->moe;
    uint64_t mn = m->n, mu = m->uneven;
    s_u64(io, "moe.n", &mn);
    s_u64(io, "moe.uneven", &mu);
    m->n = (size_t)mn;
    m->uneven = (size_t)mu;
    U64(m, max_recv);
    U64(m, sent_at_max);
    U64(m, min_recv);
    INT(m, layer);
    INT(m, iteration);
    INT(m, fwd);
    INT(m, first);
}

/* a 0/1 flag kept in a u8 (another value is damaged) */
static void
s_bool8(sio *io, const char *f, uint8_t *v)
{
    s_u8(io, f, v);
    if (io->rd && !io->bad && *v > 1)
        fail(io, f, "%u is not 0 or 1", *v);
}

static void
v_part(sio *io, adv_rank_part *p)
{
    v_scal(io, &p->scal);
    INT(p, undo_matched);
    INT(p, undo_units);
    U64(p, undo_nxr);
    U64(p, undo_xr_bytes);
    U64(p, undone_peak);
    s_count(io, "findings", &p->nfindings, 28, 1u << 16);
    if (io->rd)
        p->findings = s_array(io, p->nfindings, sizeof *p->findings);
    for (size_t i = 0; i < p->nfindings && !io->bad; i++) {
        adv_finding *f = &p->findings[i];
        CHARS(f, code);
        CHARS(f, subtype);
        INT(f, rank);
        CHARS(f, evidence);
        U64(f, bytes);
        U64(f, fix_bytes);
        CHARS(f, lever);
        s_bool8(io, "ranked", &f->ranked);
        s_u8(io, "nlevers", &f->nlevers);
        if (!io->bad && f->nlevers > ADV_MAX_LEVERS)
            fail(io, "nlevers", "%u levers (at most %d)", f->nlevers, ADV_MAX_LEVERS);
        for (int q = 0; q < f->nlevers && !io->bad; q++) {
            CHARS(&f->levers[q], change);
            U64(&f->levers[q], bytes);
            s_bool8(io, "known", &f->levers[q].known);
        }
    }
    s_count(io, "counterfactuals", &p->ncf, 30, 1u << 16);
    if (io->rd)
        p->cf = s_array(io, p->ncf, sizeof *p->cf);
    for (size_t i = 0; i < p->ncf && !io->bad; i++) {
        adv_cf *f = &p->cf[i];
        s_u32(io, "labels", &f->s.labels);
        INT(&f->s, full_method);
        INT(&f->s, full_n);
        s_u8(io, "undone", &f->undone);
        PHASE(f, phase);
        U64(f, peak);
        U64(f, reserved);
        U64(f, foreign);
        U64(f, step);
    }
    INT(p, undo_by_size);
    /* 6.0: per label, whether its region was recorded and in how many layers it
     * applies (adv_label_region_seen); as many as this build has labels */
    uint8_t nl = ADV_NLABELS;
    s_u8(io, "nlabels", &nl);
    if (io->rd && !io->bad && nl != ADV_NLABELS)
        fail(io, "nlabels", "%u recompute labels, this build has %d (summarize again with "
                            "this build)", nl, ADV_NLABELS);
    for (int l = 0; l < ADV_NLABELS && !io->bad; l++) {
        s_bool8(io, "label_seen", &p->label_seen[l]);
        s_u32(io, "label_layers", &p->label_layers[l]);
    }
}

static void
v_opts(sio *io, am_summary_opts *o)
{
    snprintf(io->where, sizeof io->where, "options");
    U64(o, budget);
    U64(o, headroom);
    CHARS(o, config);
    INT(o, iteration);
    BOOL(o, advice);
}

/* ---- the file ---- */

/* FNV-1a 64 of the payload (the checksum of docs/summary-format.md) */
static uint64_t
fnv64(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void
put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t
get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int
am_summary_write(const char *path, const am_job *j, const am_summary_opts *opts,
                 const adv_cfg *cfg, const adv_rank_part *parts, char *err, size_t errlen)
{
    sio io = {.rd = 0, .name = path, .err = err, .errlen = errlen};
    am_summary_opts o = *opts;
    uint64_t n = j->nranks;
    v_opts(&io, &o);
    s_u64(&io, "nranks", &n);
    if (o.advice)
        v_cfg(&io, (adv_cfg *)cfg);
    for (size_t i = 0; i < j->nranks; i++) {
        am_rank *r = &j->ranks[i];
        v_meta(&io, &r->src->meta);
        v_rank(&io, r);
        int has = o.advice && i < ADV_MAX_RANKS;
        s_bool(&io, "advisor", &has);
        if (has)
            v_part(&io, (adv_rank_part *)&parts[i]);
    }
    for (size_t i = 0; i < j->nranks; i++) /* 6.1: ppid and exit, then caught OOMs */
        v_meta_61(&io, &j->ranks[i].src->meta);
    for (size_t i = 0; i < j->nranks; i++)
        v_caught(&io, &j->ranks[i], i);
    if (io.bad) {
        free(io.buf);
        return -1;
    }
    /* stored: the payload's length (u64) and its zlib stream (flag 1) */
    uLongf zlen = compressBound((uLong)io.len);
    unsigned char *z = malloc(8 + (size_t)zlen);
    if (!z || compress2(z + 8, &zlen, io.buf, (uLong)io.len, Z_DEFAULT_COMPRESSION) != Z_OK) {
        snprintf(err, errlen, "%s: out of memory (compressing)", path);
        free(z);
        free(io.buf);
        return -1;
    }
    put_le(z, io.len, 8);
    free(io.buf);
    io.buf = z;
    io.len = 8 + (size_t)zlen;
    unsigned char h[AM_SUMMARY_HEADER] = {0};
    memcpy(h, AM_SUMMARY_MAGIC, 8);
    put_le(h + 8, AM_SUMMARY_MAJOR, 2);
    put_le(h + 10, AM_SUMMARY_MINOR, 2);
    put_le(h + 12, AM_SUMMARY_DEFLATE, 4);
    put_le(h + 16, io.len, 8);
    put_le(h + 24, fnv64(io.buf, io.len), 8);
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        free(io.buf);
        return -1;
    }
    int bad = fwrite(h, 1, sizeof h, f) != sizeof h || fwrite(io.buf, 1, io.len, f) != io.len;
    bad |= fclose(f) != 0;
    free(io.buf);
    if (bad) {
        snprintf(err, errlen, "%s: write failed", path);
        return -1;
    }
    return 0;
}

/* the header: magic, version, length, checksum. 0, or -1 with err */
static int
check_header(const char *name, const unsigned char *buf, size_t len, char *err, size_t errlen)
{
    if (len < AM_SUMMARY_HEADER || memcmp(buf, AM_SUMMARY_MAGIC, 8) != 0) {
        snprintf(err, errlen, "%s: offset 0: field magic: not a recomp-analyze summary%s", name,
                 len < AM_SUMMARY_HEADER && len >= 8 && !memcmp(buf, AM_SUMMARY_MAGIC, 8)
                     ? " (truncated header)" : "");
        return -1;
    }
    unsigned major = (unsigned)get_le(buf + 8, 2), minor = (unsigned)get_le(buf + 10, 2);
    if (major != AM_SUMMARY_MAJOR) {
        /* 5.x lacked what the verdict of an uneven, interleaved or hybrid
         * pipeline depends on: reading it would give another verdict than
         * its traces (docs/summary-format.md "Compatibility") */
        snprintf(err, errlen, "%s: offset 8: field version: summary format %u.%u, this "
                              "recomp-analyze reads %d.x (summarize again with this build%s)",
                 name, major, minor, AM_SUMMARY_MAJOR,
                 major == 5 ? ": a 5.x summary lacks the pipeline layer placement "
                              "(--decoder-first/last-pipeline-num-layers, microbatch groups), "
                              "the hybrid layer pattern and the allocator settings, so its "
                              "verdict could differ from the traces'" : "");
        return -1;
    }
    uint64_t plen = get_le(buf + 16, 8);
    if (plen != len - AM_SUMMARY_HEADER) {
        snprintf(err, errlen, "%s: offset 16: field payload_length: %" PRIu64 " bytes, the file "
                              "holds %zu after the header (%s)",
                 name, plen, len - AM_SUMMARY_HEADER,
                 plen > len - AM_SUMMARY_HEADER ? "truncated" : "trailing bytes");
        return -1;
    }
    if (get_le(buf + 24, 8) != fnv64(buf + AM_SUMMARY_HEADER, (size_t)plen)) {
        snprintf(err, errlen, "%s: offset 24: field checksum: the payload does not match its "
                              "checksum (damaged)",
                 name);
        return -1;
    }
    uint64_t flags = get_le(buf + 12, 4);
    if (flags & ~(uint64_t)AM_SUMMARY_DEFLATE) {
        snprintf(err, errlen, "%s: offset 12: field flags: unknown flags 0x%" PRIx64, name,
                 flags);
        return -1;
    }
    return 0;
}

/* The stored payload of a deflated summary inflated into *out (malloc'd).
 * 0, or -1 with err. */
static int
inflate_payload(const char *name, const unsigned char *p, size_t n, unsigned char **out,
                size_t *outlen, char *err, size_t errlen)
{
    uint64_t raw = n >= 8 ? get_le(p, 8) : 0;
    /* zlib expands at most about 1032:1; a summary stays below 1 GiB */
    if (n < 8 || raw > ((uint64_t)1 << 30) || raw > (uint64_t)(n - 8) * 1032 + 64) {
        snprintf(err, errlen, "%s: offset %d: field payload.length: %s", name,
                 AM_SUMMARY_HEADER, n < 8 ? "truncated" : "implausible for the stream's size");
        return -1;
    }
    uLongf got = (uLongf)raw;
    *out = malloc(raw ? (size_t)raw : 1);
    if (!*out) {
        snprintf(err, errlen, "%s: out of memory (%" PRIu64 " bytes)", name, raw);
        return -1;
    }
    if (uncompress(*out, &got, p + 8, (uLong)(n - 8)) != Z_OK || got != raw) {
        free(*out);
        snprintf(err, errlen, "%s: offset %d: field payload: the zlib stream does not inflate "
                              "to its %" PRIu64 " bytes (damaged)",
                 name, AM_SUMMARY_HEADER + 8, raw);
        return -1;
    }
    *outlen = (size_t)raw;
    return 0;
}

/* rank i of the payload into s->ranks[i] (and its part) */
static void
read_rank(sio *io, am_summary *s, size_t i)
{
    sum_src *q = calloc(1, sizeof *q);
    if (!q) {
        fail(io, "rank", "out of memory");
        return;
    }
    q->src.ops = &sum_ops;
    io->owner = q;
    am_rank *r = &s->ranks[i];
    r->src = &q->src;
    snprintf(io->where, sizeof io->where, "rank[%zu].meta", i);
    v_meta(io, &q->src.meta);
    r->path = q->src.meta.path;
    snprintf(io->where, sizeof io->where, "rank[%zu]", i);
    v_rank(io, r);
    int has = 0;
    s_bool(io, "advisor", &has);
    if (!io->bad && has != (s->opts.advice && i < ADV_MAX_RANKS))
        fail(io, "advisor", "%s where the options say %s", has ? "present" : "absent",
             has ? "none" : "one per rank");
    snprintf(io->where, sizeof io->where, "rank[%zu].advisor", i);
    if (has && !io->bad)
        v_part(io, &s->parts[i]);
}

int
am_summary_parse(const char *name, const unsigned char *buf, size_t len, am_summary *s,
                 char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", name);
    if (check_header(name, buf, len, err, errlen) < 0)
        return -1;
    sio io = {.rd = 1, .buf = (unsigned char *)buf + AM_SUMMARY_HEADER,
              .len = len - AM_SUMMARY_HEADER, .name = name, .err = err, .errlen = errlen};
    unsigned char *raw = NULL;
    if (get_le(buf + 12, 4) & AM_SUMMARY_DEFLATE) {
        if (inflate_payload(name, io.buf, io.len, &raw, &io.len, err, errlen) < 0)
            return -1;
        io.buf = raw;
        io.deflated = 1;
    }
    v_opts(&io, &s->opts);
    uint64_t n = 0;
    snprintf(io.where, sizeof io.where, "job");
    s_u64(&io, "nranks", &n);
    if (!io.bad && (n == 0 || n > 1u << 20 || n * 64 > io.len - io.pos))
        fail(&io, "nranks", "%" PRIu64 " ranks %s", n,
             n ? "exceed what the payload can hold" : "(a summary holds at least one)");
    if (s->opts.advice)
        v_cfg(&io, &s->cfg);
    if (!io.bad) {
        s->ranks = calloc((size_t)n, sizeof *s->ranks);
        s->parts = s->opts.advice ? calloc((size_t)n, sizeof *s->parts) : NULL;
        if (!s->ranks || (s->opts.advice && !s->parts))
            fail(&io, "nranks", "out of memory");
        else
            s->nranks = (size_t)n;
    }
    for (size_t i = 0; i < s->nranks && !io.bad; i++)
        read_rank(&io, s, i);
    unsigned minor = (unsigned)get_le(buf + 10, 2);
    for (size_t i = 0; minor >= 1 && i < s->nranks && !io.bad; i++) {
        snprintf(io.where, sizeof io.where, "rank[%zu].meta", i);
        v_meta_61(&io, &s->ranks[i].src->meta);
    }
    /* 6.1 then appends each rank's caught OOMs; a 6.0 summary has none listed
     * (its OOMs were all judged fatal when it was written) */
    for (size_t i = 0; i < s->nranks && !io.bad && minor >= 1; i++)
        v_caught(&io, &s->ranks[i], i);
    /* a later minor appends after what this reader knows: ignored */
    if (!io.bad && io.pos != io.len && minor <= AM_SUMMARY_MINOR) {
        io.where[0] = 0;
        fail(&io, "(end)", "%zu bytes after the last rank%s", io.len - io.pos,
             minor >= 1 ? "'s 6.1 metadata" : "");
    }
    free(raw);
    if (io.bad) {
        am_summary_free(s);
        return -1;
    }
    return 0;
}

int
am_summary_read(const char *path, am_summary *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            unsigned char *q = realloc(buf, cap);
            if (!q) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "%s: out of memory", path);
                return -1;
            }
            buf = q;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        snprintf(err, errlen, "%s: read error", path);
        return -1;
    }
    int rc = am_summary_parse(path, buf, len, s, err, errlen);
    free(buf);
    return rc;
}

int
am_summary_sniff(const char *path)
{
    char m[8];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    int ok = fread(m, 1, 8, f) == 8 && memcmp(m, AM_SUMMARY_MAGIC, 8) == 0;
    fclose(f);
    return ok;
}

void
am_summary_free(am_summary *s)
{
    for (size_t i = 0; i < s->nranks; i++) {
        am_rank_free(&s->ranks[i]);
        if (s->parts)
            adv_rank_part_free(&s->parts[i]);
    }
    free(s->ranks);
    free(s->parts);
    s->ranks = NULL;
    s->parts = NULL;
    s->nranks = 0;
}
