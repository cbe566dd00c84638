/* import_kineto.c: torch.profiler (Kineto) / Chrome trace JSON as an am_source.
 *
 * Input: `.json`, `.json.gz` (zlib's gzread reads both), object form
 * ({"traceEvents": [...], "distributedInfo": {...}, ...}) or a bare array.
 *
 * Time order. Kineto writes events grouped by kind and thread, not in time
 * order, and a complete ("X") event ends at ts+dur. So open() makes one
 * streaming pass (yajl, constant memory per event) that turns every event
 * we use into a fixed-size record, sorts runs of RUN_MAX records in memory
 * and keeps the sorted runs in memory up to RUN_MEM_MAX bytes of records
 * (most traces: writing them to a file and reading them back was a sixth of
 * an import's CPU, docs/performance.md); a larger trace moves them all to
 * an unlinked temporary file and appends the rest there. next() merges the
 * runs (a heap over one small buffer per run). rewind() resets the cursors.
 * Memory: interned names (definitions), one run buffer during open, the
 * runs while they fit under RUN_MEM_MAX (merged in place), else RUN_BUF
 * records per run read back from the temporary file.
 *
 * Event -> model event:
 *   [memory] (Device Type 1 CUDA, 6 ROCm/HIP) ALLOC/FREE at TENSOR, with
 *        PyTorch's totals when the trace has them ("Total Allocated",
 *        "Total Reserved"); "Total Reserved" changes become DEVICE-level
 *        ALLOC/FREE of synthetic segments (space HANDLE), so the device
 *        peak is PyTorch's reserved. Old format (Bytes only, no Addr): a
 *        running sum; frees are matched to the latest live allocation of the
 *        same size; the baseline is the level at trace start (a warning
 *        says "baseline: window_start"). Memory of one device only (the
 *        GPU with most events; others counted in a warning).
 *   X events on CPU threads (cpu_op, user_annotation, python_function,
 *        Operator, ...) RANGE_PUSH at ts, RANGE_POP at ts+dur on their tid;
 *        each range gets its own domain_id so overlapping ranges pop the
 *        right frame. cuda_runtime and GPU activity are not ranges.
 *   thread_name metadata THREAD_NAME at t 0 ("thread 639 (pt_autograd_0)"
 *        -> "pt_autograd_0"); a thread that runs autograd::engine::
 *        evaluate_function (or *Backward ops, old traces) but has no
 *        pt_autograd_ name is named "pt_autograd_k" (a warning says so).
 *   nccl:<op> cpu ops (else record_param_comms with "Collective name",
 *        else NCCL kernels) COLLECTIVE on their thread.
 * Metadata: rank/world_size from distributedInfo; pid = the CPU process.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include <unistd.h>
#include <yajl/yajl_parse.h>

/* Longest JSON string accepted (bytes): far above any event name or
 * argument torch.profiler writes. */
#define KINETO_MAX_STRING (16 << 20)
#include <sys/stat.h>
#include <zlib.h>

#include "catalog.h"
#include "model.h"

#define RUN_MAX 65536u      /* records sorted in memory per run */
#define RUN_BUF 512u        /* records buffered per run while merging */
#define RUN_MEM_MAX (192u << 20) /* bytes of sorted runs kept in memory (~2.2 M records) */
#define NAME_MAX_LEN 1024u  /* longer names are cut */
#define ABSURD_BYTES (1ull << 50)

enum { R_PUSH = 1, R_POP, R_MEM, R_THREAD, R_COLL };
enum { CS_NCCL_OP = 1, CS_PARAM_COMMS = 2, CS_KERNEL = 4 }; /* collective sources */

typedef struct krec {
    uint64_t t;               /* absolute ns */
    uint64_t key2;            /* tie order (see rec_cmp) */
    uint64_t seq;             /* file order */
    uint64_t addr;
    int64_t bytes;
    uint64_t tot_alloc, tot_res;
    uint64_t off;             /* decompressed byte offset of the event */
    uint32_t tid, name;       /* name: intern id */
    uint32_t span;            /* push/pop pairing id */
    int32_t device;
    uint8_t kind, cls, has_tot, has_addr, csrc, op;
    uint16_t pad;
} krec;

typedef struct run {
    uint64_t start, count, pos;   /* in records */
    krec *buf;                    /* RUN_BUF records read from the temporary file */
    const krec *at;               /* the records being merged: buf, or the run itself
                                   * in memory */
    uint64_t bn, bi;
} run;

typedef struct kin {
    /* interned names */
    char **chunks;
    size_t nchunks, chunk_used;
    const char **names;
    uint32_t *name_len;
    size_t nnames, capnames;
    uint32_t *hash;           /* open addressing: name id + 1 */
    size_t hcap;
    /* sorted runs: in memory (mem, while nrec records fit in mem_max
     * bytes), else in the temporary file (tmp) */
    krec *mem;
    uint64_t memcap;          /* records */
    uint64_t mem_max;         /* bytes */
    FILE *tmp;
    run *runs;
    size_t nruns;
    uint32_t *heap;
    size_t nheap;
    uint64_t nrec;
    uint64_t t0;
    /* read state */
    int gpu_device;
    int csrc_used;
    int legacy;               /* Bytes-only memory events */
    int64_t running;          /* legacy running sum */
    uint64_t reserved;        /* current synthetic reserved */
    int reserved_seen;        /* the first Total Reserved was turned into a segment */
    uint64_t *segs;           /* synthetic segment sizes (stack) */
    size_t nsegs, capsegs;
    uint64_t next_syn;
    struct { uint64_t size, addr; } *lv;  /* legacy live (size, addr) */
    size_t nlv, caplv;
    am_event q[4];
    size_t nq, qi;
    /* metadata strings */
    char format[96];
    char **warn;
    size_t nwarn;
    /* autograd thread names */
    char (*thnames)[40];
    uint32_t *thtids;
    size_t nth;
    /* Python frames (python_function ranges) open per thread, innermost
     * last: the allocation site of a [memory] event */
    struct pystack {
        uint32_t tid, n;
        uint32_t span[128], name[128];
    } *py;
    size_t npy, cappy;
} kin;

/* ---- interning ---- */

static uint32_t
fnv(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

#define CHUNK (1u << 20)

static int
intern(kin *k, const char *s, size_t n, uint32_t *id)
{
    if (n > NAME_MAX_LEN)
        n = NAME_MAX_LEN;
    if (k->nnames * 2 + 2 > k->hcap) {
        size_t nc = k->hcap ? k->hcap * 2 : 4096;
        uint32_t *nh = calloc(nc, sizeof *nh);
        if (!nh)
            return -1;
        for (size_t i = 0; i < k->nnames; i++) {
            size_t j = fnv(k->names[i], k->name_len[i]) & (nc - 1);
            while (nh[j])
                j = (j + 1) & (nc - 1);
            nh[j] = (uint32_t)i + 1;
        }
        free(k->hash);
        k->hash = nh;
        k->hcap = nc;
    }
    size_t j = fnv(s, n) & (k->hcap - 1);
    while (k->hash[j]) {
        uint32_t i = k->hash[j] - 1;
        if (k->name_len[i] == n && memcmp(k->names[i], s, n) == 0) {
            *id = i;
            return 0;
        }
        j = (j + 1) & (k->hcap - 1);
    }
    if (!k->nchunks || k->chunk_used + n + 1 > CHUNK) {
        char **c = realloc(k->chunks, (k->nchunks + 1) * sizeof *c);
        if (!c)
            return -1;
        k->chunks = c;
        if (!(c[k->nchunks] = malloc(CHUNK)))
            return -1;
        k->nchunks++;
        k->chunk_used = 0;
    }
    if (k->nnames == k->capnames) {
        size_t nc = k->capnames ? k->capnames * 2 : 1024;
        const char **a = realloc(k->names, nc * sizeof *a);
        if (!a)
            return -1;
        k->names = a;
        uint32_t *l = realloc(k->name_len, nc * sizeof *l);
        if (!l)
            return -1;
        k->name_len = l;
        k->capnames = nc;
    }
    char *d = k->chunks[k->nchunks - 1] + k->chunk_used;
    memcpy(d, s, n);
    d[n] = 0;
    k->chunk_used += n + 1;
    k->names[k->nnames] = d;
    k->name_len[k->nnames] = (uint32_t)n;
    k->hash[j] = (uint32_t)k->nnames + 1;
    *id = (uint32_t)k->nnames++;
    return 0;
}

static void
warnf(kin *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
warnf(kin *k, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = realloc(k->warn, (k->nwarn + 2) * sizeof *w);
    if (!w)
        return;
    k->warn = w;
    if ((w[k->nwarn] = strdup(buf)))
        k->nwarn++;
}

/* ---- the parse pass ---- */

typedef struct pstate {
    kin *k;
    const char *path;
    char *err;
    size_t errlen;
    int failed;
    uint64_t chunk_off;       /* decompressed offset of the current chunk */
    yajl_handle h;
    /* container tracking */
    int depth;
    int events_depth;         /* depth of the traceEvents array, 0 unknown */
    int top_is_array;
    char key1[32];            /* current key at depth 1 */
    char key_dist[24];
    uint8_t kev, karg;        /* the current key inside an event (depth events+1) and
                               * inside args, classified once (enum ev_key, arg_key) */
    int in_args, in_dist;
    /* the event being read */
    int in_ev;
    char badarg[32];
    char ph[4], cat[40], name[NAME_MAX_LEN + 1], argname[128], coll[32], dtype[24];
    size_t name_n, argname_n;
    int has_ts, has_dur, has_addr, has_bytes, has_ta, has_tr, has_dt;
    uint64_t ts, dur, addr, ta, tr, nelems;
    int64_t bytes, pid, tid, devtype, devid;
    int has_pid, has_tid;
    uint64_t ev_off;
    /* run buffer */
    krec *buf;
    size_t nbuf;
    uint64_t seq;
    /* stats */
    uint64_t nmem_gpu, nmem_cpu, nmem_legacy, nmem_totals;
    uint64_t dev_count[64];
    uint64_t csrc_count[8];
    int64_t main_pid;         /* pid of cpu events (most common) */
    int64_t pid_cand[4];
    uint64_t pid_cnt[4];
    int64_t rank, world;
    int has_rank;
    uint64_t capacity_by_dev[64];
    int in_devprops;
    int64_t dp_id;
    uint64_t dp_mem;
    /* autograd threads seen */
    uint32_t bwd_tids[64];
    size_t nbwd;
    uint32_t named[64];       /* tids with a recorded pt_autograd_ name */
    size_t nnamed;
    uint64_t nevents;
    uint64_t tmin;
    int any_t;
} pstate;

static uint64_t
cur_off(pstate *p)
{
    return p->chunk_off + (p->h ? yajl_get_bytes_consumed(p->h) : 0);
}

static int
fail(pstate *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int
fail(pstate *p, const char *fmt, ...)
{
    char buf[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!p->failed)
        snprintf(p->err, p->errlen, "%s: offset %" PRIu64 ": %s", p->path, cur_off(p), buf);
    p->failed = 1;
    return 0;
}

/* Decimal microseconds ("123.456", "1.5e3" refused) to ns. -1 on error. */
static int
us_to_ns(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    int digits = 0;
    if (i < n && s[i] == '-')
        return -1;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (v > (UINT64_MAX - 9) / 10 / 1000)
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (!digits)
        return -1;
    uint64_t frac = 0;
    int fd = 0;
    if (i < n && s[i] == '.') {
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (fd < 3) {
                frac = frac * 10 + (uint64_t)(s[i] - '0');
                fd++;
            }
        }
    }
    if (i != n)
        return -1;
    while (fd < 3) {
        frac *= 10;
        fd++;
    }
    *out = v * 1000 + frac;
    return 0;
}

static int
to_i64(const char *s, size_t n, int64_t *out)
{
    /* What strtoll(s, &end, 10) accepts with *end == 0 and no ERANGE, on
     * at most 31 bytes: C-locale white space, a sign, then only digits
     * (without the copy and the locale lookups: strtoll was 5% of an
     * import's CPU). */
    if (n == 0 || n >= 32)
        return -1;
    size_t i = 0;
    while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
        i++;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    if (i == n)
        return -1;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (n - i <= 18) {
        /* up to 18 digits cannot overflow: no bound check per digit */
        for (; i < n; i++) {
            unsigned d = (unsigned char)s[i] - '0';
            if (d > 9)
                return -1;
            v = v * 10 + d;
        }
        *out = neg ? (int64_t)(0 - v) : (int64_t)v;
        return 0;
    }
    for (; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || v > (lim - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int
flush_run(pstate *p);

static int
emit(pstate *p, const krec *r)
{
    if (p->nbuf == RUN_MAX && flush_run(p) < 0)
        return -1;
    p->buf[p->nbuf++] = *r;
    return 0;
}

static int
rec_cmp(const void *a, const void *b)
{
    const krec *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    if (x->cls != y->cls)
        return x->cls < y->cls ? -1 : 1;
    if (x->key2 != y->key2)
        return x->key2 < y->key2 ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A record's place in a run being sorted: its time (what decides almost
 * every comparison, kept beside the index so the sort reads 16 bytes, not
 * the 88-byte record) and its index in the run buffer. */
typedef struct sort_ent {
    uint64_t t;
    uint32_t i;
} sort_ent;

/* a before b in rec_cmp's order (a total order: seq is unique per record) */
static inline int
ent_less(const krec *buf, const sort_ent *a, const sort_ent *b)
{
    if (a->t != b->t)
        return a->t < b->t;
    return rec_cmp(&buf[a->i], &buf[b->i]) < 0;
}

/* The n records of buf in rec_cmp's order, as indices: insertion sort of
 * blocks of 32, then bottom-up merges, where a pair of blocks already in
 * order is copied, not merged (Kineto writes each thread's events in time
 * order). ents and tmp hold n entries each; returns the one holding the
 * result. The order is rec_cmp's, which is total, so it is the order qsort
 * gave (qsort sorted the 88-byte records through a comparator call per
 * comparison and a permutation pass: 4% of an import's CPU). */
static sort_ent *
sort_run(const krec *buf, size_t n, sort_ent *ents, sort_ent *tmp)
{
    enum { BLOCK = 32 };
    for (size_t i = 0; i < n; i++)
        ents[i] = (sort_ent){buf[i].t, (uint32_t)i};
    for (size_t lo = 0; lo < n; lo += BLOCK) {
        size_t hi = lo + BLOCK < n ? lo + BLOCK : n;
        for (size_t i = lo + 1; i < hi; i++) {
            sort_ent e = ents[i];
            size_t j = i;
            for (; j > lo && ent_less(buf, &e, &ents[j - 1]); j--)
                ents[j] = ents[j - 1];
            ents[j] = e;
        }
    }
    for (size_t w = BLOCK; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t a = lo, b = mid, o = lo;
            if (mid == hi || !ent_less(buf, &ents[mid], &ents[mid - 1])) {
                memcpy(tmp + lo, ents + lo, (hi - lo) * sizeof *ents);
                continue;
            }
            while (a < mid && b < hi)
                tmp[o++] = ent_less(buf, &ents[b], &ents[a]) ? ents[b++] : ents[a++];
            while (a < mid)
                tmp[o++] = ents[a++];
            while (b < hi)
                tmp[o++] = ents[b++];
        }
        sort_ent *x = ents;
        ents = tmp;
        tmp = x;
    }
    return ents;
}

/* Append the n records of buf, in the order `order` gives, to the runs'
 * store: in memory while the store stays within k->mem_max bytes; past it,
 * the records so far move to a new unlinked temporary file and everything
 * after is appended there. Returns 0, or -1 with errno set (no memory, no
 * temporary file, a short write). */
static int
store_run(kin *k, const krec *buf, const sort_ent *order, size_t n)
{
    if (!k->tmp && (k->nrec + n) * sizeof(krec) <= k->mem_max) {
        if (k->nrec + n > k->memcap) {
            uint64_t cap = k->memcap ? 2 * k->memcap : RUN_MAX;
            while (cap < k->nrec + n)
                cap *= 2;
            if (cap * sizeof(krec) > k->mem_max)
                cap = k->mem_max / sizeof(krec);
            krec *m = realloc(k->mem, cap * sizeof *m);
            if (!m)
                return -1;
            k->mem = m;
            k->memcap = cap;
        }
        krec *dst = k->mem + k->nrec;
        for (size_t i = 0; i < n; i++)
            dst[i] = buf[order[i].i];
        return 0;
    }
    if (!k->tmp) {
        if (!(k->tmp = tmpfile()))
            return -1;
        if (k->nrec && fwrite(k->mem, sizeof(krec), k->nrec, k->tmp) != k->nrec)
            return -1;
        free(k->mem);
        k->mem = NULL;
        k->memcap = 0;
    }
    krec out[256];
    for (size_t i = 0; i < n;) {
        size_t m = 0;
        for (; m < 256 && i < n; m++, i++)
            out[m] = buf[order[i].i];
        if (fwrite(out, sizeof *out, m, k->tmp) != m)
            return -1;
    }
    return 0;
}

static int
flush_run(pstate *p)
{
    kin *k = p->k;
    if (!p->nbuf)
        return 0;
    sort_ent *ents = malloc(2 * p->nbuf * sizeof *ents);
    if (!ents)
        return -1;
    const sort_ent *order = sort_run(p->buf, p->nbuf, ents, ents + p->nbuf);
    run *r = realloc(k->runs, (k->nruns + 1) * sizeof *r);
    if (!r || store_run(k, p->buf, order, p->nbuf) < 0) {
        if (r)
            k->runs = r;
        free(ents);
        return -1;
    }
    free(ents);
    k->runs = r;
    r[k->nruns] = (run){k->nrec, p->nbuf, 0, NULL, NULL, 0, 0};
    k->nruns++;
    k->nrec += p->nbuf;
    p->nbuf = 0;
    return 0;
}

static int
is_gpu_cat(const char *c)
{
    return !strcmp(c, "kernel") || !strcmp(c, "Kernel") || !strncmp(c, "gpu_", 4) ||
           !strcmp(c, "Memcpy") || !strcmp(c, "Memset") || !strcmp(c, "cuda_runtime") ||
           !strcmp(c, "Runtime") || !strcmp(c, "cuda_driver") || !strcmp(c, "Trace") ||
           !strcmp(c, "ac2g") || !strcmp(c, "fwdbwd") || !strcmp(c, "async") ||
           !strcmp(c, "cuda_profiler_range") || !strcmp(c, "overhead");
}

static uint8_t
coll_op(const char *s, size_t n)
{
    char b[32];
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < sizeof b; i++)
        if (s[i] != '_' && s[i] != ' ')
            b[j++] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    b[j] = 0;
    static const struct { const char *n; uint8_t op; } m[] = {
        {"allreduce", AM_COLL_ALL_REDUCE}, {"allreducecoalesced", AM_COLL_ALL_REDUCE},
        {"reducescatter", AM_COLL_REDUCE_SCATTER}, {"reducescatterbase", AM_COLL_REDUCE_SCATTER},
        {"reducescattertensorcoalesced", AM_COLL_REDUCE_SCATTER},
        {"allgather", AM_COLL_ALL_GATHER}, {"allgatherbase", AM_COLL_ALL_GATHER},
        {"allgatherintotensorcoalesced", AM_COLL_ALL_GATHER},
        {"broadcast", AM_COLL_BROADCAST}, {"reduce", AM_COLL_REDUCE}, {"send", AM_COLL_SEND},
        {"recv", AM_COLL_RECV}, {"alltoall", AM_COLL_ALL_TO_ALL},
        {"alltoallbase", AM_COLL_ALL_TO_ALL}, {"alltoallv", AM_COLL_ALL_TO_ALL},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (!strcmp(b, m[i].n))
            return m[i].op;
    return 0;
}

/* op from an NCCL kernel name: ncclKernel_AllReduce_..., ncclDevKernel_AllGather_... */
static uint8_t
kernel_op(const char *s)
{
    const char *u = strchr(s, '_');
    if (!u)
        return 0;
    u++;
    size_t n = strcspn(u, "_(");
    return coll_op(u, n);
}

static uint64_t
dtype_size(const char *d)
{
    if (!strcmp(d, "Float") || !strcmp(d, "Int"))
        return 4;
    if (!strcmp(d, "BFloat16") || !strcmp(d, "Half") || !strcmp(d, "Short"))
        return 2;
    if (!strcmp(d, "Double") || !strcmp(d, "Long"))
        return 8;
    if (!strcmp(d, "Byte") || !strcmp(d, "Char") || !strcmp(d, "Bool") ||
        !strncmp(d, "Float8", 6))
        return 1;
    return 0;
}

static void
note_bwd_tid(pstate *p, uint32_t tid)
{
    for (size_t i = 0; i < p->nbwd; i++)
        if (p->bwd_tids[i] == tid)
            return;
    if (p->nbwd < 64)
        p->bwd_tids[p->nbwd++] = tid;
}

static uint32_t
tid32(int64_t v)
{
    return (uint32_t)(uint64_t)v;
}

static int
seen_t(pstate *p, uint64_t t)
{
    if (!p->any_t || t < p->tmin)
        p->tmin = t;
    p->any_t = 1;
    return 0;
}

static int
emit_or_fail(pstate *p, krec *r)
{
    return emit(p, r) < 0 ? fail(p, "cannot write the temporary file") : 1;
}

/* A metadata event: thread_name gives a THREAD record ("thread 639
 * (pt_autograd_0)" -> "pt_autograd_0"); the rest is ignored. */
static int
meta_event(pstate *p, krec *r)
{
    if (strcmp(p->name, "thread_name") != 0 || !p->has_tid || !p->argname_n)
        return 1;
    const char *a = p->argname, *o = strrchr(a, '('), *c = strrchr(a, ')');
    size_t n = p->argname_n;
    if (o && c && c > o) {
        a = o + 1;
        n = (size_t)(c - o - 1);
    }
    if (intern(p->k, a, n, &r->name) < 0)
        return fail(p, "out of memory");
    if (n > 12 && !memcmp(a, "pt_autograd_", 12) && p->nnamed < 64)
        p->named[p->nnamed++] = tid32(p->tid);
    r->kind = R_THREAD;
    r->tid = tid32(p->tid);
    r->t = 0;
    r->cls = 0;
    return emit_or_fail(p, r);
}

/* A [memory] instant event of a GPU (Device Type 1 CUDA or 6 HIP): one MEM
 * record; CPU memory events are counted and skipped. */
static int
memory_event(pstate *p, krec *r)
{
    if (p->badarg[0])
        return fail(p, "[memory] argument \"%s\" is not a valid integer", p->badarg);
    if (!p->has_ts)
        return fail(p, "[memory] event without a ts");
    if (!p->has_bytes)
        return fail(p, "[memory] event without Bytes");
    if (!p->has_dt || (p->devtype != 1 && p->devtype != 6)) {
        p->nmem_cpu++;
        return 1;
    }
    uint64_t mag = p->bytes < 0 ? (uint64_t)(-(p->bytes + 1)) + 1 : (uint64_t)p->bytes;
    if (mag > ABSURD_BYTES || (p->has_ta && p->ta > ABSURD_BYTES) ||
        (p->has_tr && p->tr > ABSURD_BYTES))
        return fail(p, "[memory] event with an absurd size (%" PRId64 " bytes)", p->bytes);
    p->nmem_gpu++;
    if (p->devid >= 0 && p->devid < 64)
        p->dev_count[p->devid]++;
    if (!p->has_addr)
        p->nmem_legacy++;
    if (p->has_ta)
        p->nmem_totals++;
    r->kind = R_MEM;
    r->t = p->ts;
    r->cls = 2;
    r->tid = tid32(p->tid);
    r->addr = p->addr;
    r->has_addr = (uint8_t)p->has_addr;
    r->bytes = p->bytes;
    r->has_tot = (uint8_t)(p->has_ta && p->has_tr ? 3 : p->has_ta ? 1 : p->has_tr ? 2 : 0);
    r->tot_alloc = p->ta;
    r->tot_res = p->tr;
    r->device = (int32_t)p->devid;
    seen_t(p, r->t);
    return emit_or_fail(p, r);
}

/* A GPU kernel: NCCL kernels are collectives (on a pseudo-thread per
 * stream); other kernels are ignored. */
static int
kernel_event(pstate *p, krec *r)
{
    if (strncmp(p->name, "nccl", 4) != 0)
        return 1;
    r->kind = R_COLL;
    r->csrc = CS_KERNEL;
    r->op = kernel_op(p->name);
    r->t = p->ts;
    r->cls = 2;
    r->tid = 0x80000000u | (tid32(p->tid) & 0xffff);
    p->csrc_count[CS_KERNEL]++;
    seen_t(p, r->t);
    return emit_or_fail(p, r);
}

/* Count the pids of CPU ranges (the job's pid is the most frequent) and
 * note the autograd engine's thread. */
static void
note_cpu_thread(pstate *p, uint32_t tid)
{
    if (p->has_pid) {
        for (int i = 0; i < 4; i++) {
            if (p->pid_cnt[i] && p->pid_cand[i] == p->pid) {
                p->pid_cnt[i]++;
                break;
            }
            if (!p->pid_cnt[i]) {
                p->pid_cand[i] = p->pid;
                p->pid_cnt[i] = 1;
                break;
            }
        }
    }
    const char *nm = p->name;
    if (!strncmp(nm, "autograd::engine::evaluate_function", 35))
        note_bwd_tid(p, tid);
    else if (p->nbwd == 0 && !strcmp(p->cat, "Operator") && p->has_pid && p->tid != p->pid) {
        size_t n = strlen(nm);
        if (n > 8 && !strcmp(nm + n - 8, "Backward"))
            note_bwd_tid(p, tid); /* old traces: *Backward ops on the engine thread */
    }
}

/* A CPU-side collective (nccl:* ranges, record_param_comms) as a COLL
 * record with its bytes from the element count and dtype. */
static int
cpu_collective(pstate *p, uint32_t tid)
{
    uint8_t op = 0, src = 0;
    const char *nm = p->name;
    if (!strncmp(nm, "nccl:", 5)) {
        op = coll_op(nm + 5, strlen(nm + 5));
        src = CS_NCCL_OP;
    } else if (!strcmp(nm, "record_param_comms") && p->coll[0]) {
        op = coll_op(p->coll, strlen(p->coll));
        src = CS_PARAM_COMMS;
    }
    if (!src)
        return 1;
    krec c;
    memset(&c, 0, sizeof c);
    c.kind = R_COLL;
    c.seq = ++p->seq;
    c.off = p->ev_off;
    c.t = p->ts;
    c.cls = 2;
    c.tid = tid;
    c.op = op;
    c.csrc = src;
    c.device = -1;
    uint64_t es = dtype_size(p->dtype);
    c.addr = es && p->nelems < ABSURD_BYTES ? p->nelems * es : 0; /* bytes */
    p->csrc_count[src]++;
    return emit_or_fail(p, &c);
}

/* A CPU range (complete event): a PUSH at its start and a POP at its end
 * (outer ranges first at equal starts, inner first at equal ends), then any
 * collective it stands for. */
static int
cpu_range(pstate *p, krec *r)
{
    uint32_t tid = tid32(p->tid);
    note_cpu_thread(p, tid);
    uint32_t id;
    if (intern(p->k, p->name, p->name_n, &id) < 0)
        return fail(p, "out of memory");
    uint64_t end = p->ts + (p->has_dur ? p->dur : 0);
    if (end == p->ts)
        end = p->ts + 1; /* zero-length: keep push before pop */
    uint32_t span = (uint32_t)r->seq;
    r->kind = R_PUSH;
    r->t = p->ts;
    r->cls = 1;
    r->op = !strcmp(p->cat, "python_function"); /* a Python frame: allocation sites */
    r->key2 = UINT64_MAX - end;    /* outer (longer) first */
    r->tid = tid;
    r->name = id;
    r->span = span ? span : 1;
    seen_t(p, r->t);
    if (emit(p, r) < 0)
        return fail(p, "cannot write the temporary file");
    r->kind = R_POP;
    r->t = end;
    r->cls = 0;
    r->key2 = UINT64_MAX - p->ts;  /* inner (later start) first */
    r->seq = UINT64_MAX - r->seq;
    if (emit(p, r) < 0)
        return fail(p, "cannot write the temporary file");
    return cpu_collective(p, tid);
}

/* One traceEvents entry has been parsed into p: turn it into records by its
 * phase ('M' metadata, 'i' [memory], 'X' complete: kernels, GPU activity
 * skipped, CPU ranges). Returns 1, or what fail() returns. */
static int
end_event(pstate *p)
{
    p->nevents++;
    krec r;
    memset(&r, 0, sizeof r);
    r.seq = ++p->seq;
    r.off = p->ev_off;
    r.device = -1;
    if (p->has_ts && p->ph[0] != 'M')
        seen_t(p, p->ts); /* the trace starts at its first event */
    if (p->ph[0] == 'M')
        return meta_event(p, &r);
    if (p->ph[0] == 'i' && !strcmp(p->name, "[memory]"))
        return memory_event(p, &r);
    if (p->ph[0] != 'X')
        return 1;
    if (!p->has_ts)
        return fail(p, "complete event \"%.60s\" without a ts", p->name);
    if (!strcmp(p->cat, "kernel") || !strcmp(p->cat, "Kernel"))
        return kernel_event(p, &r);
    if (is_gpu_cat(p->cat))
        return 1;
    return cpu_range(p, &r);
}

static void
reset_event(pstate *p)
{
    p->badarg[0] = 0;
    p->ph[0] = p->cat[0] = p->name[0] = p->argname[0] = p->coll[0] = p->dtype[0] = 0;
    p->name_n = p->argname_n = 0;
    p->has_ts = p->has_dur = p->has_addr = p->has_bytes = p->has_ta = p->has_tr = 0;
    p->has_dt = p->has_pid = p->has_tid = 0;
    p->ts = p->dur = p->addr = p->ta = p->tr = p->nelems = 0;
    p->bytes = p->pid = p->tid = p->devtype = 0;
    p->devid = -1;
}

/* The keys the parse reads, classified once per key (in cb_map_key) so that
 * each scalar is dispatched by a small integer instead of a chain of strcmp
 * calls (those were 10% of an import's CPU, docs/performance.md). A key is
 * matched by its full length and bytes: a key with a NUL inside never
 * matches, and a key longer than the buffer that keeps it never matches (as
 * before: no name below is as long as a cut key). */
enum ev_key { EK_OTHER, EK_PH, EK_CAT, EK_NAME, EK_TS, EK_DUR, EK_PID, EK_TID, EK_ARGS };
enum arg_key {
    AK_OTHER, AK_NAME, AK_COLL, AK_DTYPE, AK_NELEMS, AK_ADDR, AK_BYTES, AK_TOTAL_ALLOC,
    AK_TOTAL_RES, AK_DEV_TYPE, AK_DEV_ID
};

typedef struct key_name {
    const char *s;
    uint8_t n, id;
} key_name;

#define KN(str, id) {str, sizeof str - 1, id}
static const key_name g_ev_keys[] = {
    KN("ph", EK_PH), KN("cat", EK_CAT), KN("name", EK_NAME), KN("ts", EK_TS),
    KN("dur", EK_DUR), KN("pid", EK_PID), KN("tid", EK_TID), KN("args", EK_ARGS),
};
static const key_name g_arg_keys[] = {
    KN("name", AK_NAME), KN("Collective name", AK_COLL), KN("dtype", AK_DTYPE),
    KN("Out msg nelems", AK_NELEMS), KN("In msg nelems", AK_NELEMS), KN("Addr", AK_ADDR),
    KN("Bytes", AK_BYTES), KN("Total Allocated", AK_TOTAL_ALLOC),
    KN("Total Reserved", AK_TOTAL_RES), KN("Device Type", AK_DEV_TYPE),
    KN("Device Id", AK_DEV_ID),
};
#undef KN

/* The id of the key (s, n bytes) in table t of count entries; 0 (OTHER)
 * when it is none of them. */
static uint8_t
key_id(const key_name *t, size_t count, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < count; i++)
        if (t[i].n == n && s[0] == (unsigned char)t[i].s[0] && !memcmp(s, t[i].s, n))
            return t[i].id;
    return 0;
}

/* Where are we? */
static int
ev_depth(pstate *p)
{
    return p->events_depth ? p->events_depth + 1 : -1;
}

static int
cb_start_map(void *ctx)
{
    pstate *p = ctx;
    p->depth++;
    if (p->depth > 64)
        return fail(p, "JSON nested deeper than 64 levels");
    if (p->depth == ev_depth(p)) {
        p->in_ev = 1;
        reset_event(p);
        p->ev_off = cur_off(p);
    } else if (p->in_ev && p->depth == ev_depth(p) + 1 && p->kev == EK_ARGS) {
        p->in_args = 1;
        p->karg = AK_OTHER;
    } else if (p->depth == 2 && !p->top_is_array && !strcmp(p->key1, "distributedInfo")) {
        p->in_dist = 1;
    } else if (p->depth == 3 && !p->top_is_array && !strcmp(p->key1, "deviceProperties")) {
        p->in_devprops = 1;
        p->dp_id = -1;
        p->dp_mem = 0;
    }
    return 1;
}

static int
cb_end_map(void *ctx)
{
    pstate *p = ctx;
    int rc = 1;
    if (p->in_ev && p->depth == ev_depth(p)) {
        rc = end_event(p);
        p->in_ev = 0;
    } else if (p->in_args && p->depth == ev_depth(p) + 1) {
        p->in_args = 0;
    } else if (p->in_dist && p->depth == 2) {
        p->in_dist = 0;
    } else if (p->in_devprops && p->depth == 3) {
        p->in_devprops = 0;
        if (p->dp_id >= 0 && p->dp_id < 64)
            p->capacity_by_dev[p->dp_id] = p->dp_mem;
    }
    p->depth--;
    return rc;
}

static int
cb_start_array(void *ctx)
{
    pstate *p = ctx;
    p->depth++;
    if (p->depth > 64)
        return fail(p, "JSON nested deeper than 64 levels");
    if (p->depth == 1) {
        p->top_is_array = 1;
        p->events_depth = 1;
    } else if (p->depth == 2 && !p->top_is_array && !strcmp(p->key1, "traceEvents")) {
        p->events_depth = 2;
    }
    return 1;
}

static int
cb_end_array(void *ctx)
{
    pstate *p = ctx;
    p->depth--;
    return 1;
}

static void
setkey(char *dst, size_t cap, const unsigned char *s, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = 0;
}

static int
cb_map_key(void *ctx, const unsigned char *s, size_t n)
{
    pstate *p = ctx;
    if (p->depth == 1 && !p->top_is_array)
        setkey(p->key1, sizeof p->key1, s, n);
    else if (p->in_ev && p->depth == ev_depth(p))
        p->kev = key_id(g_ev_keys, sizeof g_ev_keys / sizeof g_ev_keys[0], s, n);
    else if (p->in_args && p->depth == ev_depth(p) + 1)
        p->karg = key_id(g_arg_keys, sizeof g_arg_keys / sizeof g_arg_keys[0], s, n);
    else if ((p->in_dist && p->depth == 2) || (p->in_devprops && p->depth == 3))
        setkey(p->key_dist, sizeof p->key_dist, s, n);
    return 1;
}

/* A scalar of a traceEvents entry: ph, cat, name, ts/dur (us -> ns),
 * pid/tid (numeric, or a hash of "stream 7" style ids). */
static int
event_field(pstate *p, const char *s, size_t n, int str)
{
    int id = p->kev;
    if (id == EK_PH) {
        if (!str)
            return fail(p, "event field ph is not a string");
        setkey(p->ph, sizeof p->ph, (const unsigned char *)s, n);
    } else if (id == EK_CAT) {
        if (str)
            setkey(p->cat, sizeof p->cat, (const unsigned char *)s, n);
    } else if (id == EK_NAME) {
        if (!str)
            return fail(p, "event field name is not a string");
        p->name_n = n > NAME_MAX_LEN ? NAME_MAX_LEN : n;
        memcpy(p->name, s, p->name_n);
        p->name[p->name_n] = 0;
    } else if (id == EK_TS || id == EK_DUR) {
        uint64_t v;
        if (us_to_ns(s, n, &v) < 0)
            return fail(p, "event field %s is not a non-negative number of microseconds",
                        id == EK_TS ? "ts" : "dur");
        if (id == EK_TS) {
            p->ts = v;
            p->has_ts = 1;
        } else {
            p->dur = v;
            p->has_dur = 1;
        }
    } else if (id == EK_PID || id == EK_TID) {
        int64_t v;
        if (to_i64(s, n, &v) < 0)
            v = str ? (int64_t)fnv(s, n) : -1; /* "stream 7" style ids */
        if (id == EK_PID) {
            p->pid = v;
            p->has_pid = 1;
        } else {
            p->tid = v;
            p->has_tid = 1;
        }
    }
    return 1;
}

/* The [memory] argument with key id (enum arg_key) is not a valid integer:
 * keep its name for the message end_event gives (the key itself is not
 * kept: a classified key is the table's name). */
static void
note_badarg(pstate *p, int id)
{
    for (size_t i = 0; i < sizeof g_arg_keys / sizeof g_arg_keys[0]; i++)
        if (g_arg_keys[i].id == id) {
            setkey(p->badarg, sizeof p->badarg, (const unsigned char *)g_arg_keys[i].s,
                   g_arg_keys[i].n);
            return;
        }
}

/* A scalar of an entry's args: the thread name, collective name, dtype and
 * element counts, and the [memory] fields (Addr, Bytes, totals, device). */
static int
args_field(pstate *p, const char *s, size_t n, int str)
{
    int64_t v;
    int id = p->karg;
    if (id == AK_OTHER)
        return 1;
    if (id == AK_NAME) {
        if (str) {
            p->argname_n = n >= sizeof p->argname ? sizeof p->argname - 1 : n;
            memcpy(p->argname, s, p->argname_n);
            p->argname[p->argname_n] = 0;
        }
    } else if (id == AK_COLL) {
        if (str)
            setkey(p->coll, sizeof p->coll, (const unsigned char *)s, n);
    } else if (id == AK_DTYPE) {
        if (str)
            setkey(p->dtype, sizeof p->dtype, (const unsigned char *)s, n);
    } else if (id == AK_NELEMS) {
        if (!str && to_i64(s, n, &v) == 0 && v > 0 && (uint64_t)v > p->nelems)
            p->nelems = (uint64_t)v;
    } else {
        int which = id - AK_ADDR + 1; /* 1 Addr .. 6 Device Id */
        if (str || to_i64(s, n, &v) < 0) {
            note_badarg(p, id);
            return 1;
        }
        switch (which) {
        case 1: p->addr = (uint64_t)v; p->has_addr = 1; break;
        case 2: p->bytes = v; p->has_bytes = 1; break;
        case 3:
        case 4:
            if (v < 0) {
                note_badarg(p, id);
                return 1;
            }
            if (which == 3) { p->ta = (uint64_t)v; p->has_ta = 1; }
            else { p->tr = (uint64_t)v; p->has_tr = 1; }
            break;
        case 5: p->devtype = v; p->has_dt = 1; break;
        case 6: p->devid = v; break;
        }
    }
    return 1;
}

/* distributedInfo.rank / world_size. */
static int
dist_field(pstate *p, const char *s, size_t n, int str)
{
    int64_t v;
    if (!strcmp(p->key_dist, "rank") || !strcmp(p->key_dist, "world_size")) {
        if (str || to_i64(s, n, &v) < 0 || v < 0 || v > 1000000)
            return fail(p, "distributedInfo.%s is not a small non-negative integer",
                        p->key_dist);
        if (p->key_dist[0] == 'r') {
            p->rank = v;
            p->has_rank = 1;
        } else {
            p->world = v;
        }
    }
    return 1;
}

/* deviceProperties[].id / totalGlobalMem. */
static int
devprops_field(pstate *p, const char *s, size_t n, int str)
{
    int64_t v;
    if (!str && to_i64(s, n, &v) == 0) {
        if (!strcmp(p->key_dist, "id"))
            p->dp_id = v;
        else if (!strcmp(p->key_dist, "totalGlobalMem") && v > 0)
            p->dp_mem = (uint64_t)v;
    }
    return 1;
}

/* A scalar value (str = 1 when it was a JSON string), by where the parser is. */
static int
scalar(pstate *p, const char *s, size_t n, int str)
{
    if (p->in_ev && p->depth == ev_depth(p))
        return event_field(p, s, n, str);
    if (p->in_args && p->depth == ev_depth(p) + 1)
        return args_field(p, s, n, str);
    if (p->in_dist && p->depth == 2)
        return dist_field(p, s, n, str);
    if (p->in_devprops && p->depth == 3)
        return devprops_field(p, s, n, str);
    return 1;
}

static int
cb_null(void *ctx)
{
    return scalar(ctx, "null", 4, 0) || 1;
}

static int
cb_bool(void *ctx, int b)
{
    return scalar(ctx, b ? "true" : "false", b ? 4 : 5, 0);
}

static int
cb_number(void *ctx, const char *s, size_t n)
{
    return scalar(ctx, s, n, 0);
}

static int
cb_string(void *ctx, const unsigned char *s, size_t n)
{
    return scalar(ctx, (const char *)s, n, 1);
}

static const yajl_callbacks g_cbs = {
    cb_null, cb_bool, NULL, NULL, cb_number, cb_string, cb_start_map, cb_map_key, cb_end_map,
    cb_start_array, cb_end_array,
};

/* ---- the source ---- */

static void
kin_free(kin *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->nchunks; i++)
        free(k->chunks[i]);
    free(k->chunks);
    free(k->names);
    free(k->name_len);
    free(k->hash);
    if (k->tmp)
        fclose(k->tmp);
    free(k->mem);
    for (size_t i = 0; i < k->nruns; i++)
        free(k->runs[i].buf);
    free(k->runs);
    free(k->heap);
    free(k->segs);
    free(k->lv);
    for (size_t i = 0; i < k->nwarn; i++)
        free(k->warn[i]);
    free(k->warn);
    free(k->thnames);
    free(k->thtids);
    free(k->py);
    free(k);
}

/* The next records of run r to merge: in memory the whole run in place
 * (no copy), from the temporary file the next RUN_BUF into r->buf. Returns
 * 0, or -1 on a short read. */
static int
run_fill(kin *k, run *r)
{
    uint64_t left = r->count - r->pos;
    r->bi = 0;
    r->bn = 0;
    if (!left)
        return 0;
    if (!k->tmp) {
        r->at = k->mem + r->start + r->pos;
        r->bn = left;
        r->pos += left;
        return 0;
    }
    uint32_t n = left < RUN_BUF ? (uint32_t)left : RUN_BUF;
    if (!r->buf && !(r->buf = malloc(RUN_BUF * sizeof(krec))))
        return -1;
    r->at = r->buf;
    off_t off = (off_t)((r->start + r->pos) * sizeof(krec));
    ssize_t got = pread(fileno(k->tmp), r->buf, n * sizeof(krec), off);
    if (got != (ssize_t)(n * sizeof(krec)))
        return -1;
    r->bn = n;
    r->pos += n;
    return 0;
}

static const krec *
run_top(run *r)
{
    return r->bi < r->bn ? &r->at[r->bi] : NULL;
}

static int
heap_less(kin *k, uint32_t a, uint32_t b)
{
    return rec_cmp(run_top(&k->runs[a]), run_top(&k->runs[b])) < 0;
}

static void
heap_down(kin *k, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < k->nheap && heap_less(k, k->heap[l], k->heap[m]))
            m = l;
        if (l + 1 < k->nheap && heap_less(k, k->heap[l + 1], k->heap[m]))
            m = l + 1;
        if (m == i)
            return;
        uint32_t t = k->heap[i];
        k->heap[i] = k->heap[m];
        k->heap[m] = t;
        i = m;
    }
}

static int
kin_reset(kin *k)
{
    k->nheap = 0;
    for (size_t i = 0; i < k->nruns; i++) {
        run *r = &k->runs[i];
        r->pos = 0;
        if (run_fill(k, r) < 0)
            return -1;
        if (r->bn)
            k->heap[k->nheap++] = (uint32_t)i;
    }
    for (size_t i = k->nheap; i-- > 0;)
        heap_down(k, i);
    k->running = 0;
    k->reserved = 0;
    k->reserved_seen = 0;
    k->npy = 0;
    k->nsegs = 0;
    k->nlv = 0;
    k->next_syn = 1;
    k->nq = k->qi = 0;
    return 0;
}

/* Next record in time order: 1, 0 end, -1 read error. */
static int
next_rec(kin *k, krec *out)
{
    if (!k->nheap)
        return 0;
    uint32_t i = k->heap[0];
    run *r = &k->runs[i];
    *out = r->at[r->bi++];
    if (r->bi == r->bn && run_fill(k, r) < 0)
        return -1;
    if (!r->bn)
        k->heap[0] = k->heap[--k->nheap];
    heap_down(k, 0);
    return 1;
}

static am_event *
qpush(kin *k, const krec *r)
{
    am_event *e = &k->q[k->nq++];
    memset(e, 0, sizeof *e);
    e->t_ns = r->t >= k->t0 ? r->t - k->t0 : 0;
    e->tid = r->tid;
    e->device = -1;
    e->peer = -1;
    e->src_offset = r->off;
    return e;
}

static int
grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return am_grow(p, cap, need, elem, 64);
}

/* Reserved moved to `res`: synthetic DEVICE-level segments. */
static int
reserve_to(kin *k, const krec *r, uint64_t res)
{
    if (res > k->reserved) {
        if (grow((void **)&k->segs, &k->capsegs, k->nsegs + 1, sizeof *k->segs) < 0)
            return -1;
        am_event *e = qpush(k, r);
        e->kind = AM_EV_ALLOC;
        e->levels = AM_LVL_DEVICE;
        e->space = AM_SPACE_HANDLE;
        e->lib = AM_LIB_PYTORCH;
        e->addr = k->nsegs + 1;
        e->size = res - k->reserved;
        e->device = r->device;
        /* what PyTorch had reserved at the first memory event was reserved
         * before the trace: no allocation of the traced program */
        e->pretrace = !k->reserved_seen;
        k->reserved_seen = 1;
        k->segs[k->nsegs++] = e->size;
        k->reserved = res;
    } else if (res < k->reserved) {
        /* release from the top; re-reserve a remainder */
        uint64_t drop = k->reserved - res, freed = 0;
        while (k->nsegs && freed < drop && k->nq < 2) {
            am_event *e = qpush(k, r);
            e->kind = AM_EV_FREE;
            e->levels = AM_LVL_DEVICE;
            e->space = AM_SPACE_HANDLE;
            e->addr = k->nsegs;
            e->size = k->segs[k->nsegs - 1];
            e->device = r->device;
            freed += k->segs[--k->nsegs];
        }
        k->reserved -= freed;
        if (k->reserved < res && k->nq < 3)
            return reserve_to(k, r, res);
    }
    return 0;
}

static struct pystack *
py_of(kin *k, uint32_t tid, int make)
{
    for (size_t i = 0; i < k->npy; i++)
        if (k->py[i].tid == tid)
            return &k->py[i];
    if (!make || grow((void **)&k->py, &k->cappy, k->npy + 1, sizeof *k->py) < 0)
        return NULL;
    struct pystack *q = &k->py[k->npy++];
    q->tid = tid;
    q->n = 0;
    return q;
}

/* Frames of torch itself are not the user's allocation site. */
static int
torch_frame(const char *s, size_t n)
{
    return (n >= 6 && !memcmp(s, "torch/", 6)) || (n >= 1 && s[0] == '<') ||
           (n >= 9 && memmem(s, n, "/torch/", 7) != NULL) || (n >= 5 && !memcmp(s, "nn.Mo", 5));
}

/* The allocation site of a [memory] event on tid: the innermost Python frame
 * outside torch, "file(line): fn" rewritten "file:line:fn". Name id + 1, 0. */
static uint32_t
py_site(kin *k, uint32_t tid)
{
    struct pystack *q = py_of(k, tid, 0);
    if (!q || !q->n)
        return 0;
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = q->n; i-- > 0;) {
        uint32_t nm = q->name[i];
        if (!torch_frame(k->names[nm], k->name_len[nm])) {
            pick = nm;
            break;
        }
    }
    if (pick == UINT32_MAX)
        pick = q->name[q->n - 1];
    const char *s = k->names[pick];
    size_t n = k->name_len[pick];
    const char *lp = memchr(s, '(', n);
    const char *rp = lp ? memchr(lp, ')', n - (size_t)(lp - s)) : NULL;
    char buf[NAME_MAX_LEN + 8];
    int w;
    if (lp && rp && rp + 1 < s + n && rp[1] == ':') {
        const char *fn = rp + 2;
        if (fn < s + n && *fn == ' ')
            fn++;
        w = snprintf(buf, sizeof buf, "%.*s:%.*s:%.*s", (int)(lp - s), s, (int)(rp - lp - 1),
                     lp + 1, (int)(s + n - fn), fn);
    } else {
        w = snprintf(buf, sizeof buf, "%.*s", (int)n, s);
    }
    if (w <= 0)
        return 0;
    size_t bl = (size_t)w < sizeof buf ? (size_t)w : sizeof buf - 1;
    uint32_t id;
    if (intern(k, buf, bl, &id) < 0)
        return 0;
    return id + 1;
}

/* Old-format [memory] events carry only Bytes: an allocation gets a
 * synthetic address, a free takes the most recent live allocation of the
 * same size (or an address of its own when it was made before the trace).
 * Returns the address, or 0 when out of memory. */
static uint64_t
legacy_addr(kin *k, const krec *r, uint64_t mag)
{
    k->running += r->bytes;
    if (r->bytes > 0) {
        uint64_t addr = (1ull << 62) | k->next_syn++;
        if (grow((void **)&k->lv, &k->caplv, k->nlv + 1, sizeof *k->lv) < 0)
            return 0;
        k->lv[k->nlv].size = mag;
        k->lv[k->nlv++].addr = addr;
        return addr;
    }
    for (size_t i = k->nlv; i-- > 0;)
        if (k->lv[i].size == mag) {
            uint64_t addr = k->lv[i].addr;
            memmove(&k->lv[i], &k->lv[i + 1], (k->nlv - i - 1) * sizeof *k->lv);
            k->nlv--;
            return addr;
        }
    return (1ull << 61) | k->next_syn++; /* freed before the window */
}

/* A [memory] record of the followed GPU as a tensor-level ALLOC or FREE
 * (with PyTorch's totals, or the running sum for old traces) and the
 * reserved level it reports. Returns -1 when out of memory. */
static int
mem_event(kin *k, const krec *r)
{
    uint64_t mag = r->bytes < 0 ? (uint64_t)(-r->bytes) : (uint64_t)r->bytes;
    uint64_t addr = r->addr;
    int legacy = !r->has_addr;
    if (legacy && !(addr = legacy_addr(k, r, mag)))
        return -1;
    if ((r->has_tot & 2) && reserve_to(k, r, r->tot_res) < 0)
        return -1;
    if (r->bytes == 0)
        return 0;
    am_event *e = qpush(k, r);
    e->kind = r->bytes > 0 ? AM_EV_ALLOC : AM_EV_FREE;
    if (r->bytes > 0) {
        uint32_t site = py_site(k, r->tid);
        if (site) {
            e->site = k->names[site - 1];
            e->site_len = k->name_len[site - 1];
        }
    }
    e->levels = AM_LVL_TENSOR;
    e->mem = AM_MEM_DEVICE;
    e->lib = AM_LIB_PYTORCH;
    e->addr = addr;
    e->size = mag;
    e->device = r->device;
    if (r->has_tot & 1) {
        e->has_totals = 1;
        e->total_allocated = r->tot_alloc;
        e->total_reserved = (r->has_tot & 2) ? r->tot_res : 0;
    } else if (legacy) {
        e->has_totals = 1;
        e->total_allocated = k->running > 0 ? (uint64_t)k->running : 0;
        e->total_reserved = 0;
    }
    return 0;
}

/* One merged record as events in k's queue (a flat dispatch by record
 * kind). Returns -1 with s->error set when out of memory. */
static int
translate(am_source *s, kin *k, const krec *r)
{
    switch (r->kind) {
    case R_THREAD: {
        am_event *e = qpush(k, r);
        e->kind = AM_EV_THREAD_NAME;
        e->name = k->names[r->name];
        e->name_len = k->name_len[r->name];
        for (size_t i = 0; i < k->nth; i++)
            if (k->thtids[i] == r->tid &&
                !(e->name_len > 12 && !memcmp(e->name, "pt_autograd_", 12))) {
                e->name = k->thnames[i];
                e->name_len = (uint32_t)strlen(k->thnames[i]);
            }
        return 0;
    }
    case R_PUSH:
    case R_POP: {
        if (r->op) {
            struct pystack *q = py_of(k, r->tid, r->kind == R_PUSH);
            if (q && r->kind == R_PUSH && q->n < 128) {
                q->span[q->n] = r->span;
                q->name[q->n++] = r->name;
            } else if (q && r->kind == R_POP) {
                for (uint32_t i = q->n; i-- > 0;)
                    if (q->span[i] == r->span) {
                        q->n = i;
                        break;
                    }
            }
        }
        am_event *e = qpush(k, r);
        e->kind = r->kind == R_PUSH ? AM_EV_RANGE_PUSH : AM_EV_RANGE_POP;
        e->domain_id = r->span;
        if (r->kind == R_PUSH) {
            e->name = k->names[r->name];
            e->name_len = k->name_len[r->name];
        }
        return 0;
    }
    case R_COLL: {
        if (r->csrc != k->csrc_used)
            return 0;
        am_event *e = qpush(k, r);
        e->kind = AM_EV_COLLECTIVE;
        e->op = r->op;
        e->size = r->addr;
        return 0;
    }
    case R_MEM:
        if (r->device == k->gpu_device && mem_event(k, r) < 0)
            goto oom;
        return 0;
    }
    return 0;
oom:
    snprintf(s->error, sizeof s->error, "%s: offset %" PRIu64 ": out of memory", s->meta.path,
             r->off);
    return -1;
}

static int
kin_next(am_source *s, am_event *ev)
{
    kin *k = s->impl;
    while (k->qi >= k->nq) {
        k->nq = k->qi = 0;
        krec r;
        int rc = next_rec(k, &r);
        if (rc < 0) {
            snprintf(s->error, sizeof s->error, "%s: cannot read the temporary file: %s",
                     s->meta.path, strerror(errno));
            return -1;
        }
        if (rc == 0)
            return 0;
        if (translate(s, k, &r) < 0)
            return -1;
    }
    *ev = k->q[k->qi++];
    return 1;
}

static int
kin_rewind(am_source *s)
{
    kin *k = s->impl;
    if (kin_reset(k) < 0) {
        snprintf(s->error, sizeof s->error, "%s: cannot read the temporary file",
                 s->meta.path);
        return -1;
    }
    return 0;
}

static void
kin_close(am_source *s)
{
    if (!s)
        return;
    kin_free(s->impl);
    free(s);
}

static const am_source_ops kin_ops = {"kineto", kin_next, kin_rewind, kin_close, NULL};

/* ---- sniff and open ---- */

static int
ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int
kin_sniff(const char *path, const unsigned char *head, size_t n)
{
    unsigned char buf[4096];
    size_t len = 0;
    if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b) {
        gzFile g = gzopen(path, "rb");
        if (!g)
            return 0;
        int got = gzread(g, buf, sizeof buf - 1);
        gzclose(g);
        if (got <= 0)
            return ends_with(path, ".json.gz"); /* damaged: let open() say why */
        len = (size_t)got;
    } else {
        len = n < sizeof buf - 1 ? n : sizeof buf - 1;
        memcpy(buf, head, len);
    }
    buf[len] = 0;
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t'))
        i++;
    if (i < len && (buf[i] == '{' || buf[i] == '[')) {
        if (memmem(buf, len, "traceEvents", 11) || memmem(buf, len, "\"ph\"", 4) ||
            memmem(buf, len, "schemaVersion", 13))
            return 1;
        return ends_with(path, ".json") || ends_with(path, ".json.gz");
    }
    return 0;
}

/* Outcome of an open step: done, failed with the message in p->err, or out
 * of memory (the caller writes the message). */
enum { STEP_OK = 0, STEP_FAIL = -1, STEP_OOM = -2 };

/* The string guard: yajl re-lexes a token that spans its input buffers from
 * the token's start, so one huge string costs time quadratic in its length
 * (a 2 MB gzip can hold GiBs of one string): refuse strings longer than any
 * real event name or argument. `strscan` carries the lexer state across
 * buffers: inside a string or not, an escaped byte still to skip at the
 * next buffer's start, and the decompressed offset of the open string's
 * first byte. Returns STEP_FAIL naming the offset. */
typedef struct { int in_str, esc; uint64_t start; } strscan;

/* 0x80 in each byte of w equal to the byte of c8 (c8: that byte repeated),
 * 0 elsewhere; exact (no false hits from borrows: the high bit of each byte
 * is kept out of the addition). */
static inline uint64_t
bytes_eq(uint64_t w, uint64_t c8)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full;
    uint64_t t = w ^ c8;
    return ~(((t & lo7) + lo7) | t | lo7);
}

/* Eight bytes at b, the byte at b[0] in the low 8 bits on any host. */
static inline uint64_t
load8_le(const unsigned char *b)
{
    uint64_t w;
    memcpy(&w, b, sizeof w);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

/* The byte at pos (a quote or a backslash) through the lexer state: a quote
 * opens or closes a string, a backslash inside one escapes the next byte
 * (*skip: the first position to look at again). Returns STEP_FAIL when the
 * string it closes is too long. */
static inline int
guard_byte(pstate *p, strscan *st, const unsigned char *buf, size_t pos, size_t *skip)
{
    if (pos < *skip)
        return STEP_OK;                      /* the escaped byte */
    if (buf[pos] == '\\') {
        if (st->in_str)
            *skip = pos + 2;
        return STEP_OK;
    }
    if (!st->in_str) {
        st->in_str = 1;
        st->start = p->chunk_off + pos + 1;
        return STEP_OK;
    }
    st->in_str = 0;
    return p->chunk_off + pos - st->start > KINETO_MAX_STRING ? STEP_FAIL : STEP_OK;
}

static int
check_strings(pstate *p, strscan *st, const unsigned char *buf, int n)
{
    /* A string's length is its bytes between the quotes (escaping
     * backslashes and the bytes they escape included), counted from its
     * first byte's offset; the offset in the message is the byte that
     * makes it too long, as when the length was counted byte by byte. The
     * quotes and backslashes are found eight bytes at a time (the per-
     * string memchr calls this replaces were 12% of an import's CPU:
     * strings here are a few bytes long, docs/performance.md). */
    const uint64_t q8 = 0x2222222222222222ull, b8 = 0x5c5c5c5c5c5c5c5cull;
    size_t len = (size_t)n, i = 0, skip = st->esc ? 1 : 0;
    int rc = STEP_OK;
    st->esc = 0;
    for (; i + 8 <= len && rc == STEP_OK; i += 8) {
        uint64_t w = load8_le(buf + i), m = bytes_eq(w, q8) | bytes_eq(w, b8);
        for (; m && rc == STEP_OK; m &= m - 1)
            rc = guard_byte(p, st, buf, i + ((size_t)__builtin_ctzll(m) >> 3), &skip);
    }
    for (; i < len && rc == STEP_OK; i++)
        if (buf[i] == '"' || buf[i] == '\\')
            rc = guard_byte(p, st, buf, i, &skip);
    if (rc == STEP_OK && st->in_str) {
        st->esc = skip > len;                /* a backslash was the last byte */
        if (p->chunk_off + len - st->start > KINETO_MAX_STRING)
            rc = STEP_FAIL;
    }
    if (rc != STEP_OK)
        snprintf(p->err, p->errlen,
                 "%s: offset %" PRIu64 ": a JSON string longer than %d MiB: not a "
                 "torch.profiler trace (or a damaged one)",
                 p->path, st->start + KINETO_MAX_STRING, KINETO_MAX_STRING >> 20);
    return rc;
}

/* Report yajl's error for the buffer just parsed, on one line. */
static void
json_error(pstate *p, const unsigned char *buf, size_t n)
{
    unsigned char *m = yajl_get_error(p->h, 0, buf, n);
    uint64_t off = p->chunk_off + yajl_get_bytes_consumed(p->h);
    snprintf(p->err, p->errlen, "%s: offset %" PRIu64 ": malformed JSON: %s", p->path, off,
             m ? (char *)m : "parse error");
    if (m) {
        char *nl = strchr(p->err, '\n');
        if (nl)
            *nl = 0;
        yajl_free_error(p->h, m);
    }
}

/* Stream the (gzipped or plain) JSON document through the parser, whose
 * callbacks spill sorted runs of records to the temporary file. Offsets in
 * errors are decompressed bytes. */
static int
parse_document(pstate *p, gzFile g)
{
    enum { ZB = 1 << 16 };
    unsigned char *zbuf = malloc(ZB);
    strscan st = {0, 0, 0};
    int rc = STEP_OK, zerr;
    uint64_t inflated = 0;
    struct stat fst;
    am_import_limit lim;
    am_import_limit_init(&lim, stat(p->path, &fst) == 0 ? (uint64_t)fst.st_size : 0);
    if (!zbuf)
        return STEP_OOM;
    for (;;) {
        if (am_import_limit_check(&lim, p->path, inflated, p->chunk_off, p->err,
                                  p->errlen) < 0) {
            rc = STEP_FAIL;
            break;
        }
        int got = gzread(g, zbuf, ZB);
        /* a truncated gzip member reads as a short file: gzread reports it
         * on the last read */
        if (got < 0 || (got == 0 && (gzerror(g, &zerr), zerr != Z_OK))) {
            const char *m = gzerror(g, &zerr);
            snprintf(p->err, p->errlen, "%s: offset %" PRIu64 ": damaged gzip data: %s",
                     p->path, p->chunk_off, m);
            rc = STEP_FAIL;
            break;
        }
        if (got == 0)
            break;
        inflated += (uint64_t)got;
        if ((rc = check_strings(p, &st, zbuf, got)) != STEP_OK)
            break;
        yajl_status ys = yajl_parse(p->h, zbuf, (size_t)got);
        if (p->failed) {
            rc = STEP_FAIL;
            break;
        }
        if (ys != yajl_status_ok) {
            json_error(p, zbuf, (size_t)got);
            rc = STEP_FAIL;
            break;
        }
        p->chunk_off += (uint64_t)got;
    }
    free(zbuf);
    if (rc != STEP_OK)
        return rc;
    /* the JSON must be complete too */
    yajl_status ys = yajl_complete_parse(p->h);
    if (p->failed)
        return STEP_FAIL;
    if (ys != yajl_status_ok) {
        snprintf(p->err, p->errlen, "%s: offset %" PRIu64 ": malformed JSON: the document "
                 "ends early (truncated file?)", p->path, p->chunk_off);
        return STEP_FAIL;
    }
    if (!p->events_depth) {
        snprintf(p->err, p->errlen,
                 "%s: offset 0: not a Chrome/Kineto trace: no traceEvents array", p->path);
        return STEP_FAIL;
    }
    return STEP_OK;
}

/* The GPU whose memory is followed: the device with the most memory events;
 * the others are counted and said. */
static void
choose_device(am_meta *m, kin *k, const pstate *p)
{
    k->gpu_device = -1;
    uint64_t bestd = 0, others = 0;
    for (int d = 0; d < 64; d++)
        if (p->dev_count[d] > bestd) {
            bestd = p->dev_count[d];
            k->gpu_device = d;
        }
    for (int d = 0; d < 64; d++)
        if (d != k->gpu_device)
            others += p->dev_count[d];
    if (k->gpu_device >= 0) {
        m->device = k->gpu_device;
        m->device_capacity = p->capacity_by_dev[k->gpu_device];
    }
    if (others)
        warnf(k, "%" PRIu64 " memory events of other GPUs than %d are not analysed", others,
              k->gpu_device);
}

/* The job's metadata from what the parse saw (rank, world, pid, device,
 * format) and the warnings about what the trace lacks. */
static void
fill_meta(am_source *s, kin *k, const pstate *p)
{
    am_meta *m = &s->meta;
    m->path = p->path;
    m->rank = p->has_rank ? (int)p->rank : -1;
    m->attempt = -1;
    m->world_size = (int)p->world;
    m->local_rank = -1;
    m->device = -1;
    m->mode = "kineto";
    m->closed = 1;
    m->record_count = p->nevents;
    int64_t pid = -1;
    uint64_t best = 0;
    for (int i = 0; i < 4; i++)
        if (p->pid_cnt[i] > best) {
            best = p->pid_cnt[i];
            pid = p->pid_cand[i];
        }
    m->pid = (int)pid;
    k->t0 = p->any_t ? p->tmin : 0;
    choose_device(m, k, p);
    k->legacy = p->nmem_gpu && p->nmem_legacy == p->nmem_gpu;
    snprintf(k->format, sizeof k->format, "kineto trace%s",
             k->legacy ? " (old format: memory events with Bytes only)" : "");
    m->format = k->format;
    if (k->legacy)
        warnf(k, "baseline: window_start: the memory events carry only Bytes (no Addr, no "
                 "Total Allocated), so allocated memory is a running sum from the trace start "
                 "and peaks are relative to the level at trace start; frees are matched to "
                 "allocations by size");
    else if (p->nmem_gpu && p->nmem_totals < p->nmem_gpu)
        warnf(k, "%" PRIu64 " of %" PRIu64 " GPU memory events lack Total Allocated",
              p->nmem_gpu - p->nmem_totals, p->nmem_gpu);
    if (!p->nmem_gpu)
        warnf(k, "no GPU memory events ([memory] with Device Type 1 or 6): the trace was "
                 "recorded without profile_memory=True; iterations and phases only");
    if (p->nmem_cpu)
        warnf(k, "%" PRIu64 " CPU memory events ignored", p->nmem_cpu);
    k->csrc_used = p->csrc_count[CS_NCCL_OP] ? CS_NCCL_OP
                   : p->csrc_count[CS_PARAM_COMMS] ? CS_PARAM_COMMS
                   : p->csrc_count[CS_KERNEL] ? CS_KERNEL : 0;
    if (m->world_size > 1)
        snprintf(m->run_id, sizeof m->run_id, "kineto world_size=%d", m->world_size);
}

/* Threads that run the autograd engine: each gets a pt_autograd_<i> name and
 * a THREAD record at time 0 (one more sorted run in the temporary file), and
 * a warning when the trace did not name it so. */
static int
add_autograd_threads(kin *k, pstate *p)
{
    k->thnames = calloc(p->nbwd, sizeof *k->thnames);
    k->thtids = calloc(p->nbwd, sizeof *k->thtids);
    if (!k->thnames || !k->thtids)
        return STEP_OOM;
    for (size_t i = 0; i < p->nbwd; i++) {
        k->thtids[k->nth] = p->bwd_tids[i];
        snprintf(k->thnames[k->nth], sizeof k->thnames[0], "pt_autograd_%zu", i);
        k->nth++;
    }
    if (!(p->buf = malloc(p->nbwd * sizeof *p->buf)))
        return STEP_OOM;
    uint32_t id;
    if (intern(k, "pt_autograd", 11, &id) < 0)
        return STEP_OOM;
    for (size_t i = 0; i < p->nbwd; i++) {
        krec r;
        memset(&r, 0, sizeof r);
        r.kind = R_THREAD;
        r.tid = p->bwd_tids[i];
        r.name = id;
        r.device = -1;
        p->buf[p->nbuf++] = r;
    }
    if ((k->tmp && fseek(k->tmp, 0, SEEK_END) != 0) || flush_run(p) < 0 ||
        (k->tmp && fflush(k->tmp) != 0)) {
        snprintf(p->err, p->errlen, "%s: cannot write the temporary file", p->path);
        return STEP_FAIL;
    }
    free(p->buf);
    p->buf = NULL;
    uint32_t *hp = realloc(k->heap, (k->nruns ? k->nruns : 1) * sizeof *hp);
    if (!hp)
        return STEP_OOM;
    k->heap = hp;
    for (size_t i = 0; i < p->nbwd; i++) {
        int named = 0;
        for (size_t j = 0; j < p->nnamed; j++)
            named |= p->named[j] == p->bwd_tids[i];
        if (!named)
            warnf(k, "thread %u runs the autograd engine (evaluate_function or *Backward "
                     "ops) but is not named pt_autograd_*: treated as PyTorch's autograd "
                     "thread", p->bwd_tids[i]);
    }
    return STEP_OK;
}

static uint64_t g_mem_max = RUN_MEM_MAX;

void
am_kineto_set_memory_limit(uint64_t bytes)
{
    g_mem_max = bytes;
}

/* Parse the whole file once, keeping sorted runs of records in memory or a
 * temporary file; kin_next merges the runs in time order. */
static int
load(am_source *s, kin *k, pstate *p, gzFile g)
{
    if (!(p->buf = malloc(RUN_MAX * sizeof *p->buf)))
        return STEP_OOM;
    k->mem_max = g_mem_max;
    /* zlib inflates straight into a read at least twice its buffer, else
     * into its own buffer and copies (parse_document reads 64 KiB) */
    gzbuffer(g, 1 << 15);
    if (!(p->h = yajl_alloc(&g_cbs, NULL, p)))
        return STEP_OOM;
    yajl_config(p->h, yajl_allow_comments, 0);
    int rc = parse_document(p, g);
    if (rc != STEP_OK)
        return rc;
    if (flush_run(p) < 0 || (k->tmp && fflush(k->tmp) != 0)) {
        snprintf(p->err, p->errlen, "%s: cannot keep the sorted events (memory or a "
                 "temporary file): %s", p->path, strerror(errno));
        return STEP_FAIL;
    }
    free(p->buf);
    p->buf = NULL;
    if (!(k->heap = malloc((k->nruns ? k->nruns : 1) * sizeof *k->heap)))
        return STEP_OOM;
    fill_meta(s, k, p);
    if (p->nbwd && (rc = add_autograd_threads(k, p)) != STEP_OK)
        return rc;
    s->meta.nwarnings = k->nwarn;
    s->meta.warnings = (const char *const *)k->warn;
    if (kin_reset(k) < 0) {
        snprintf(p->err, p->errlen, "%s: cannot read the temporary file", p->path);
        return STEP_FAIL;
    }
    return STEP_OK;
}

/* am_importer.open for torch.profiler (Kineto) JSON, plain or gzipped.
 * Errors: a message naming the file and the decompressed offset in err,
 * -1 returned. */
static int
kin_open(const char *path, am_source **out, char *err, size_t errlen)
{
    *out = NULL;
    am_source *s = calloc(1, sizeof *s);
    kin *k = calloc(1, sizeof *k);
    pstate *p = calloc(1, sizeof *p);
    gzFile g = NULL;
    int rc = STEP_OOM;
    if (s && k && p) {
        s->impl = k;
        s->ops = &kin_ops;
        *p = (pstate){.k = k, .path = path, .err = err, .errlen = errlen, .rank = -1,
                      .world = -1};
        if (!(g = gzopen(path, "rb"))) {
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
            rc = STEP_FAIL;
        } else {
            rc = load(s, k, p, g);
        }
    }
    if (rc == STEP_OOM)
        snprintf(err, errlen, "%s: out of memory", path);
    if (p) {
        if (p->h)
            yajl_free(p->h);
        free(p->buf);
    }
    if (g)
        gzclose(g);
    free(p);
    if (rc != STEP_OK) {
        kin_free(k);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

const am_importer am_kineto_importer = {"kineto", kin_sniff, kin_open};
