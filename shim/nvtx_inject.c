/* nvtx_inject.c: librecompshim as its own NVTX injection library.
 *
 * NVTX3 is header-only: every module (libtorch_python, libtorch_cuda,
 * libnccl, TE, ...) carries its own copy of the NVTX globals and, on its
 * first NVTX call, dlopen()s $NVTX_INJECTION64_PATH and calls
 * InitializeInjectionNvtx2 with its own getExportTable ([PT] in docs/sources.md).
 * rs_nvtx_setup_env() points that variable at this shim; every module then
 * calls InitializeInjectionNvtx2 here once, possibly concurrently, and we
 * fill its CORE and CORE2 slots with the handlers below.
 *
 * Handlers: thread-safe, no CUDA/NVTX calls, no malloc on push/pop/start/
 * end/mark (malloc only in DomainCreate / RegisterString; a thread's push
 * stack comes from an mmap'd pool at its first push), TLS recursion guard
 * t_rs.guard: inside the shim the handlers keep the push stack (so return
 * values stay right) but record nothing. Records go through the core API
 * of record.h only. Names are interned with rs_intern except emit_nvtx's
 * per-call-unique names (", seq = " / "op_id = ") and names over
 * RS_NVTX_INTERN_MAX bytes, which go inline.
 *
 * Domains: domain id 0 is the default domain (CORE calls, and CORE2 calls
 * with domain == NULL). nvtxDomainCreateA returns a pointer into a fixed
 * table; the same name returns the same handle and id (ids >= 1, in creation
 * order). Destroy keeps the handle valid. Registered strings: a pointer into
 * a fixed table holding a copy of the text and its interned id; the same
 * text returns the same handle, whatever the domain.
 *
 * Depths are per (thread, domain), as NVTX defines levels: NVTX_PUSH aux is
 * the number of open ranges of that domain on the thread after the push
 * (>= 1), NVTX_POP aux the number after the pop; push returns the 0-based
 * level of the new range (aux - 1), pop the level of the range it ended
 * (== aux of the pop). A pop with no open range of its domain returns -1
 * and records nothing.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <wchar.h>

#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include "record.h"

/* ---------------------------------------------------------------------
 * Limits
 * ------------------------------------------------------------------- */

#define RS_NVTX_MAX_DOMAINS 1024u       /* distinct domain names */
#define RS_NVTX_MAX_STRINGS 65536u      /* distinct registered strings (power of 2) */
#define RS_NVTX_STACK_DEPTH 256u        /* stored open push ranges per thread */
#define RS_NVTX_STACK_TEXT 44u          /* inline name bytes kept per stack entry */
#define RS_NVTX_TEXT_MAX 4096u          /* longest message recorded (bytes) */
#define RS_NVTX_WTEXT_MAX 512u          /* longest wide message converted (chars) */
#define RS_NVTX_INTERN_MAX 256u         /* longer names go inline, not interned */

/* Domain id given to every domain created after the table is full. */
#define RS_NVTX_DOMAIN_OVERFLOW 0xffffffffu

/* ---------------------------------------------------------------------
 * Domains
 * ------------------------------------------------------------------- */

typedef struct rs_nvtx_domain {
    uint32_t id;            /* >= 1; RS_NVTX_DOMAIN_OVERFLOW for the overflow entry */
    uint32_t name_id;       /* rs_intern id, 0 when the table was full */
    size_t name_len;
    const char *name;       /* malloc'd copy (static for the overflow entry) */
} rs_nvtx_domain;

static rs_nvtx_domain g_domains[RS_NVTX_MAX_DOMAINS];
static _Atomic uint32_t g_ndomains;     /* published entries (release) */
static const rs_nvtx_domain g_domain_overflow = {
    RS_NVTX_DOMAIN_OVERFLOW, 0, sizeof("recompshim:domain-overflow") - 1,
    "recompshim:domain-overflow"
};
static _Atomic int g_domain_overflow_used;
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;

/* Map an NVTX domain handle to our domain id. NULL is the default domain;
 * a handle that is not ours (cannot happen unless another tool's handle
 * leaks in) is treated as the default domain too. */
static inline uint32_t
domain_id_of(nvtxDomainHandle_t h)
{
    const rs_nvtx_domain *d = (const rs_nvtx_domain *)(const void *)h;
    if (d == NULL)
        return 0;
    if (d >= &g_domains[0] && d < &g_domains[RS_NVTX_MAX_DOMAINS])
        return d->id;
    if (d == &g_domain_overflow)
        return RS_NVTX_DOMAIN_OVERFLOW;
    return 0;
}

static void
emit_domain(const rs_nvtx_domain *d)
{
    rs_record_nvtx(RS_REC_NVTX_DOMAIN, d->id, d->name_id,
                   d->name_id ? NULL : d->name, d->name_id ? 0 : d->name_len,
                   0, 0, 0);
}

/* ---------------------------------------------------------------------
 * Registered strings
 * ------------------------------------------------------------------- */

typedef struct rs_nvtx_string {
    const char *text;       /* malloc'd copy, NUL-terminated; NULL = free slot */
    uint32_t len;
    uint32_t id;            /* rs_intern id, 0 when the intern table was full */
} rs_nvtx_string;

/* Open-addressed by text hash; entries never move, so a handle is a pointer
 * to its slot. Only DomainRegisterString* inserts (under g_reg_lock). */
static rs_nvtx_string g_strings[RS_NVTX_MAX_STRINGS];
static uint32_t g_nstrings;             /* under g_reg_lock */
static rs_nvtx_string g_string_overflow = {
    "recompshim:string-overflow", sizeof("recompshim:string-overflow") - 1, 0
};

static inline const rs_nvtx_string *
string_of(nvtxStringHandle_t h)
{
    const rs_nvtx_string *s = (const rs_nvtx_string *)(const void *)h;
    if (s >= &g_strings[0] && s < &g_strings[RS_NVTX_MAX_STRINGS])
        return s->text ? s : NULL;
    if (s == &g_string_overflow)
        return s;
    return NULL;
}

static uint32_t
hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

/* ---------------------------------------------------------------------
 * Per-thread push stack
 * ------------------------------------------------------------------- */

typedef struct rs_nvtx_entry {
    uint32_t domain;
    uint32_t name_id;               /* 0: text below (possibly truncated) */
    uint32_t category;
    uint16_t text_len;
    char text[RS_NVTX_STACK_TEXT];
} rs_nvtx_entry;
_Static_assert(sizeof(rs_nvtx_entry) == 60, "stack entry");

typedef struct rs_nvtx_stack {
    uint32_t n;                     /* stored entries */
    uint32_t overflow;              /* pushes past RS_NVTX_STACK_DEPTH, still open */
    struct rs_nvtx_stack *next;     /* free list link */
    rs_nvtx_entry e[RS_NVTX_STACK_DEPTH];
} rs_nvtx_stack;

/* The stacks are NOT in TLS: the shim's TLS block is static (t_rs is
 * initial-exec), and when the NVTX loader dlopen()s the shim in a child
 * that inherited NVTX_INJECTION64_PATH without LD_PRELOAD, that block must
 * fit the small static TLS surplus (15 KiB of stack does not: "cannot
 * allocate memory in static TLS block"). A thread takes a stack from a pool
 * at its first push (mmap'd RS_NVTX_POOL_CHUNK stacks at a time, at most
 * RS_NVTX_MAX_STACKS in all) and gives it back at exit (pthread key
 * destructor). A thread that gets none counts depth only (t_nostack). */
#ifndef RS_NVTX_POOL_CHUNK
#define RS_NVTX_POOL_CHUNK 64u
#endif
#ifndef RS_NVTX_MAX_STACKS
#define RS_NVTX_MAX_STACKS 4096u
#endif

static __thread rs_nvtx_stack *t_stackp;
static __thread uint32_t t_nostack_depth;   /* open pushes of a thread without a stack */
static __thread uint8_t t_stack_state;      /* 0 none yet, 1 have one, 2 pool exhausted */

static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static rs_nvtx_stack *g_pool_free;
static uint32_t g_pool_total;               /* stacks mapped, under g_pool_lock */
static pthread_key_t g_stack_key;
static pthread_once_t g_stack_once = PTHREAD_ONCE_INIT;
static int g_stack_key_ok;

static void
stack_release(void *p)
{
    rs_nvtx_stack *st = p;
    if (st == NULL)
        return;
    if (t_stackp == st) {
        t_stackp = NULL;
        t_stack_state = 0;
    }
    pthread_mutex_lock(&g_pool_lock);
    st->next = g_pool_free;
    g_pool_free = st;
    pthread_mutex_unlock(&g_pool_lock);
}

/* Fork: the writer's handlers (writer.c) take every shim lock in the one
 * lock order; the registry lock is rank 2, the pool lock rank 6 (a leaf).
 * A fork child has only the forking thread: it re-initialises both. */
void
rs_nvtx_atfork_prepare(void)
{
    pthread_mutex_lock(&g_reg_lock);
}

void
rs_nvtx_atfork_prepare_leaf(void)
{
    pthread_mutex_lock(&g_pool_lock);
}

void
rs_nvtx_atfork_parent(void)
{
    pthread_mutex_unlock(&g_pool_lock);
    pthread_mutex_unlock(&g_reg_lock);
}

void
rs_nvtx_atfork_child(void)
{
    pthread_mutex_init(&g_pool_lock, NULL);
    pthread_mutex_init(&g_reg_lock, NULL);
}

static void
stack_once(void)
{
    g_stack_key_ok = pthread_key_create(&g_stack_key, stack_release) == 0;
}

/* The calling thread's stack, taking one from the pool at first use;
 * NULL when the pool is exhausted (or mmap failed). No malloc: the pool
 * grows by mmap, once per RS_NVTX_POOL_CHUNK threads. */
static rs_nvtx_stack *
stack_get(void)
{
    rs_nvtx_stack *st = t_stackp;
    if (__builtin_expect(st != NULL || t_stack_state == 2, 1))
        return st;

    pthread_once(&g_stack_once, stack_once);
    pthread_mutex_lock(&g_pool_lock);
    if (g_pool_free == NULL && g_pool_total < RS_NVTX_MAX_STACKS) {
        size_t bytes = (size_t)RS_NVTX_POOL_CHUNK * sizeof(rs_nvtx_stack);
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            rs_nvtx_stack *arr = m;
            for (uint32_t i = 0; i < RS_NVTX_POOL_CHUNK; i++) {
                arr[i].next = g_pool_free;
                g_pool_free = &arr[i];
            }
            g_pool_total += RS_NVTX_POOL_CHUNK;
        }
    }
    st = g_pool_free;
    if (st)
        g_pool_free = st->next;
    pthread_mutex_unlock(&g_pool_lock);

    if (st == NULL) {
        t_stack_state = 2;
        static _Atomic int logged;
        if (atomic_exchange(&logged, 1) == 0)
            rs_log(1, "more than %u threads use NVTX ranges; further "
                      "threads track push depth only", RS_NVTX_MAX_STACKS);
        return NULL;
    }
    st->n = 0;
    st->overflow = 0;
    st->next = NULL;
    /* Without the key the stack is never returned (leaks one per thread). */
    if (g_stack_key_ok)
        pthread_setspecific(g_stack_key, st);
    t_stackp = st;
    t_stack_state = 1;
    return st;
}

static _Atomic uint64_t g_next_range_id = 1;
static _Atomic uint64_t g_stack_overflows;
static _Atomic uint64_t g_unmatched_pops;
static _Atomic uint32_t g_init_calls;

static uint32_t
stack_count(const rs_nvtx_stack *st, uint32_t upto, uint32_t domain)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < upto; i++)
        c += st->e[i].domain == domain;
    return c;
}

/* ---------------------------------------------------------------------
 * Messages
 * ------------------------------------------------------------------- */

/* A resolved message: either name_id != 0, or text/len inline (may be
 * empty). */
typedef struct rs_msg {
    uint32_t name_id;
    const char *text;
    size_t len;
} rs_msg;

/* Wide to ASCII, best effort: non-ASCII characters become '?'. */
static size_t
wide_to_ascii(const wchar_t *w, char *buf, size_t cap)
{
    size_t n = 0;
    if (w == NULL || cap == 0)
        return 0;
    while (n + 1 < cap && w[n] != 0) {
        wchar_t c = w[n];
        buf[n] = (c > 0 && c < 0x80) ? (char)c : '?';
        n++;
    }
    buf[n] = 0;
    return n;
}

/* emit_nvtx names ("aten::mm, seq = 12, op_id = 34") are unique per call:
 * interning them would only fill the bounded intern table. */
static int
should_intern(const char *s, size_t n)
{
    if (n == 0 || n > RS_NVTX_INTERN_MAX)
        return 0;
    /* emit_nvtx names always carry ", op_id = " or ", seq = ": look for
     * the comma first (memchr is vectorised; most names have none). */
    const char *c = memchr(s, ',', n);
    if (c && (memmem(c, n - (size_t)(c - s), ", seq = ", 8) ||
              memmem(c, n - (size_t)(c - s), "op_id = ", 8)))
        return 0;
    return 1;
}

static void
msg_text(rs_msg *m, const char *s, size_t len, int intern)
{
    m->text = s;
    m->len = len;
    m->name_id = 0;
    if (!intern)
        return;
    /* a name this thread interned at this address before: no hash, no
     * should_intern scan (the same bytes passed it then) */
    uint32_t id = rs_intern_memo_get(s, len);
    if (!id && should_intern(s, len)) {
        id = rs_intern(s, len);
        rs_intern_memo_put(s, len, id);
    }
    m->name_id = id;
}

/* Fill m from event attributes; wbuf (RS_NVTX_WTEXT_MAX) holds converted
 * UNICODE text. */
static void
msg_from_attr(rs_msg *m, const nvtxEventAttributes_t *a, char *wbuf, int intern)
{
    m->name_id = 0;
    m->text = NULL;
    m->len = 0;
    if (a == NULL)
        return;
    if (a->size != 0 &&
        a->size < offsetof(nvtxEventAttributes_t, message) + sizeof(a->message))
        return;
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
        if (a->message.ascii)
            msg_text(m, a->message.ascii, strnlen(a->message.ascii, RS_NVTX_TEXT_MAX), intern);
        break;
    case NVTX_MESSAGE_TYPE_UNICODE:
        if (a->message.unicode) {
            size_t n = wide_to_ascii(a->message.unicode, wbuf, RS_NVTX_WTEXT_MAX);
            msg_text(m, wbuf, n, intern);
        }
        break;
    case NVTX_MESSAGE_TYPE_REGISTERED: {
        const rs_nvtx_string *s = string_of(a->message.registered);
        if (s) {
            m->name_id = s->id;
            m->text = s->text;
            m->len = s->len;
        }
        break;
    }
    default:
        break;
    }
}

static inline uint32_t
attr_category(const nvtxEventAttributes_t *a)
{
    return a ? a->category : 0;
}

/* 1 when this call may record: not inside the shim, shim enabled. */
static inline int
may_record(void)
{
    return t_rs.guard == 0 && rs_enabled();
}

/* ---------------------------------------------------------------------
 * Core event paths (shared by CORE and CORE2 handlers)
 * ------------------------------------------------------------------- */

static int
do_push(uint32_t domain, const rs_msg *m, uint32_t category, int rec)
{
    rs_nvtx_stack *st = stack_get();
    uint32_t depth = st ? stack_count(st, st->n, domain) + st->overflow + 1
                        : t_nostack_depth + 1;

    if (rec) {
        t_rs.guard++;
        if (m->len)
            rs_window_step_marker(m->text, m->len);
        rs_record_nvtx(RS_REC_NVTX_PUSH, domain, m->name_id,
                       m->name_id ? NULL : m->text, m->name_id ? 0 : m->len,
                       0, category, depth);
        t_rs.guard--;
    }
    /* After the record: a thread_attach triggered by it replays only the
     * ranges opened before this one. */
    if (st == NULL) {
        t_nostack_depth++;
    } else if (st->n < RS_NVTX_STACK_DEPTH && st->overflow == 0) {
        rs_nvtx_entry *e = &st->e[st->n];
        e->domain = domain;
        e->name_id = m->name_id;
        e->category = category;
        e->text_len = 0;
        if (m->name_id == 0 && m->len) {
            size_t n = m->len < RS_NVTX_STACK_TEXT ? m->len : RS_NVTX_STACK_TEXT;
            memcpy(e->text, m->text, n);
            e->text_len = (uint16_t)n;
        }
        st->n++;
    } else {
        if (st->overflow++ == 0 &&
            atomic_fetch_add_explicit(&g_stack_overflows, 1, memory_order_relaxed) == 0)
            rs_log(1, "NVTX push stack deeper than %u on a thread; "
                      "deeper ranges are not kept for replay", RS_NVTX_STACK_DEPTH);
    }
    return (int)(depth - 1);
}

static int
do_pop(uint32_t domain, int rec)
{
    rs_nvtx_stack *st = t_stackp;   /* none yet: nothing is open */
    int64_t idx = -1;
    uint32_t depth_after;

    if (st == NULL && t_stack_state == 2) {
        /* Pool exhausted: depth only, domains not told apart. */
        if (t_nostack_depth == 0) {
            atomic_fetch_add_explicit(&g_unmatched_pops, 1, memory_order_relaxed);
            return -1;
        }
        depth_after = t_nostack_depth - 1;
    } else if (st == NULL) {
        atomic_fetch_add_explicit(&g_unmatched_pops, 1, memory_order_relaxed);
        return -1;
    } else if (st->overflow > 0) {
        /* Past the stored depth: domains unknown, assume the innermost. */
        depth_after = stack_count(st, st->n, domain) + st->overflow - 1;
    } else {
        for (int64_t i = (int64_t)st->n - 1; i >= 0; i--)
            if (st->e[i].domain == domain) {
                idx = i;
                break;
            }
        if (idx < 0) {
            atomic_fetch_add_explicit(&g_unmatched_pops, 1, memory_order_relaxed);
            return -1;
        }
        depth_after = stack_count(st, (uint32_t)idx, domain);
    }

    if (rec) {
        t_rs.guard++;
        rs_record_nvtx_pop(domain, depth_after);
        t_rs.guard--;
    }
    /* After the record: a thread_attach triggered by it still replays the
     * range being popped. */
    if (st == NULL) {
        t_nostack_depth--;
    } else if (st->overflow > 0) {
        st->overflow--;
    } else {
        memmove(&st->e[idx], &st->e[idx + 1],
                (size_t)(st->n - 1 - (uint32_t)idx) * sizeof(st->e[0]));
        st->n--;
    }
    return (int)depth_after;
}

static nvtxRangeId_t
do_start(uint32_t domain, const rs_msg *m, uint32_t category, int rec)
{
    uint64_t id = atomic_fetch_add_explicit(&g_next_range_id, 1, memory_order_relaxed);
    if (rec) {
        t_rs.guard++;
        if (m->len)
            rs_window_step_marker(m->text, m->len);
        rs_record_nvtx(RS_REC_NVTX_START, domain, m->name_id,
                       m->name_id ? NULL : m->text, m->name_id ? 0 : m->len,
                       id, category, 0);
        t_rs.guard--;
    }
    return (nvtxRangeId_t)id;
}

static void
do_end(nvtxRangeId_t id)
{
    if (!may_record())
        return;
    t_rs.guard++;
    rs_record_nvtx_end((uint64_t)id);
    t_rs.guard--;
}

static void
do_mark(uint32_t domain, const rs_msg *m, uint32_t category, int rec)
{
    if (!rec)
        return;
    t_rs.guard++;
    if (m->len)
        rs_window_step_marker(m->text, m->len);
    rs_record_nvtx(RS_REC_NVTX_MARK, domain, m->name_id,
                   m->name_id ? NULL : m->text, m->name_id ? 0 : m->len,
                   0, category, 0);
    t_rs.guard--;
}

/* ---------------------------------------------------------------------
 * CORE handlers (module 1)
 * ------------------------------------------------------------------- */

static void NVTX_API
h_MarkEx(const nvtxEventAttributes_t *a)
{
    char wbuf[RS_NVTX_WTEXT_MAX];
    rs_msg m;
    int rec = may_record();
    if (!rec)
        return;
    t_rs.guard++;
    msg_from_attr(&m, a, wbuf, 1);
    t_rs.guard--;
    do_mark(0, &m, attr_category(a), rec);
}

static void NVTX_API
h_MarkA(const char *s)
{
    rs_msg m;
    int rec = may_record();
    if (!rec || s == NULL)
        return;
    t_rs.guard++;
    msg_text(&m, s, strnlen(s, RS_NVTX_TEXT_MAX), 1);
    t_rs.guard--;
    do_mark(0, &m, 0, rec);
}

static void NVTX_API
h_MarkW(const wchar_t *w)
{
    char buf[RS_NVTX_WTEXT_MAX];
    rs_msg m;
    int rec = may_record();
    if (!rec || w == NULL)
        return;
    size_t n = wide_to_ascii(w, buf, sizeof buf);
    t_rs.guard++;
    msg_text(&m, buf, n, 1);
    t_rs.guard--;
    do_mark(0, &m, 0, rec);
}

static nvtxRangeId_t NVTX_API
h_RangeStartEx(const nvtxEventAttributes_t *a)
{
    char wbuf[RS_NVTX_WTEXT_MAX];
    rs_msg m = { 0, NULL, 0 };
    int rec = may_record();
    if (rec) {
        t_rs.guard++;
        msg_from_attr(&m, a, wbuf, 1);
        t_rs.guard--;
    }
    return do_start(0, &m, attr_category(a), rec);
}

static nvtxRangeId_t NVTX_API
h_RangeStartA(const char *s)
{
    rs_msg m = { 0, NULL, 0 };
    int rec = may_record();
    if (rec && s) {
        t_rs.guard++;
        msg_text(&m, s, strnlen(s, RS_NVTX_TEXT_MAX), 1);
        t_rs.guard--;
    }
    return do_start(0, &m, 0, rec);
}

static nvtxRangeId_t NVTX_API
h_RangeStartW(const wchar_t *w)
{
    char buf[RS_NVTX_WTEXT_MAX];
    rs_msg m = { 0, NULL, 0 };
    int rec = may_record();
    if (rec && w) {
        size_t n = wide_to_ascii(w, buf, sizeof buf);
        t_rs.guard++;
        msg_text(&m, buf, n, 1);
        t_rs.guard--;
    }
    return do_start(0, &m, 0, rec);
}

static void NVTX_API
h_RangeEnd(nvtxRangeId_t id)
{
    do_end(id);
}

static int NVTX_API
h_RangePushEx(const nvtxEventAttributes_t *a)
{
    char wbuf[RS_NVTX_WTEXT_MAX];
    rs_msg m;
    int rec = may_record();
    if (rec)
        t_rs.guard++;
    msg_from_attr(&m, a, wbuf, rec);
    if (rec)
        t_rs.guard--;
    return do_push(0, &m, attr_category(a), rec);
}

static int NVTX_API
h_RangePushA(const char *s)
{
    rs_msg m = { 0, NULL, 0 };
    int rec = may_record();
    if (s) {
        if (rec)
            t_rs.guard++;
        msg_text(&m, s, strnlen(s, RS_NVTX_TEXT_MAX), rec);
        if (rec)
            t_rs.guard--;
    }
    return do_push(0, &m, 0, rec);
}

static int NVTX_API
h_RangePushW(const wchar_t *w)
{
    char buf[RS_NVTX_WTEXT_MAX];
    rs_msg m = { 0, NULL, 0 };
    int rec = may_record();
    if (w) {
        size_t n = wide_to_ascii(w, buf, sizeof buf);
        if (rec)
            t_rs.guard++;
        msg_text(&m, buf, n, rec);
        if (rec)
            t_rs.guard--;
    }
    return do_push(0, &m, 0, rec);
}

static int NVTX_API
h_RangePop(void)
{
    return do_pop(0, may_record());
}

static void NVTX_API
h_NameOsThreadA(uint32_t tid, const char *name)
{
    if (name == NULL || !may_record())
        return;
    t_rs.guard++;
    rs_record_thread(tid, 0, name, 1);
    t_rs.guard--;
}

static void NVTX_API
h_NameOsThreadW(uint32_t tid, const wchar_t *name)
{
    char buf[RS_THREAD_NAME_LEN];
    if (name == NULL || !may_record())
        return;
    wide_to_ascii(name, buf, sizeof buf);
    t_rs.guard++;
    rs_record_thread(tid, 0, buf, 1);
    t_rs.guard--;
}

/* ---------------------------------------------------------------------
 * CORE2 handlers (module 5)
 * ------------------------------------------------------------------- */

static void NVTX_API
h_DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char wbuf[RS_NVTX_WTEXT_MAX];
    rs_msg m;
    int rec = may_record();
    if (!rec)
        return;
    t_rs.guard++;
    msg_from_attr(&m, a, wbuf, 1);
    t_rs.guard--;
    do_mark(domain_id_of(d), &m, attr_category(a), rec);
}

static nvtxRangeId_t NVTX_API
h_DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char wbuf[RS_NVTX_WTEXT_MAX];
    rs_msg m = { 0, NULL, 0 };
    int rec = may_record();
    if (rec) {
        t_rs.guard++;
        msg_from_attr(&m, a, wbuf, 1);
        t_rs.guard--;
    }
    return do_start(domain_id_of(d), &m, attr_category(a), rec);
}

static void NVTX_API
h_DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id)
{
    (void)d;    /* range ids are unique across domains */
    do_end(id);
}

static int NVTX_API
h_DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char wbuf[RS_NVTX_WTEXT_MAX];
    rs_msg m;
    int rec = may_record();
    if (rec)
        t_rs.guard++;
    msg_from_attr(&m, a, wbuf, rec);
    if (rec)
        t_rs.guard--;
    return do_push(domain_id_of(d), &m, attr_category(a), rec);
}

static int NVTX_API
h_DomainRangePop(nvtxDomainHandle_t d)
{
    return do_pop(domain_id_of(d), may_record());
}

/* Find or create the domain named s[0..n). Returns its entry. */
static const rs_nvtx_domain *
domain_create(const char *s, size_t n)
{
    const rs_nvtx_domain *found = NULL;
    rs_nvtx_domain *d = NULL;

    pthread_mutex_lock(&g_reg_lock);
    uint32_t cnt = atomic_load_explicit(&g_ndomains, memory_order_relaxed);
    for (uint32_t i = 0; i < cnt; i++)
        if (g_domains[i].name_len == n && memcmp(g_domains[i].name, s, n) == 0) {
            found = &g_domains[i];
            break;
        }
    if (found == NULL && cnt < RS_NVTX_MAX_DOMAINS) {
        char *copy = malloc(n + 1);
        if (copy) {
            memcpy(copy, s, n);
            copy[n] = 0;
            d = &g_domains[cnt];
            d->id = cnt + 1;
            d->name = copy;
            d->name_len = n;
            d->name_id = rs_intern(copy, n);
            atomic_store_explicit(&g_ndomains, cnt + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&g_reg_lock);

    if (found)
        return found;
    /* After publishing: if the file is created concurrently, either the
     * replay sees this entry or this record lands in the open file (a
     * duplicate DOMAIN record with the same id and name is possible). */
    if (d != NULL) {
        emit_domain(d);
        return d;
    }
    /* Table full (or out of memory): all further domains share one id. Its
     * name stays inline (name_id 0), so there is nothing to publish. */
    if (atomic_exchange(&g_domain_overflow_used, 1) != 0)
        return &g_domain_overflow;      /* DOMAIN record already written */
    rs_log(1, "more than %u NVTX domains (or out of memory); "
              "further domains share id %u", RS_NVTX_MAX_DOMAINS, RS_NVTX_DOMAIN_OVERFLOW);
    emit_domain(&g_domain_overflow);
    return &g_domain_overflow;
}

static nvtxDomainHandle_t NVTX_API
h_DomainCreateA(const char *name)
{
    const rs_nvtx_domain *d;
    if (name == NULL)
        return NULL;
    t_rs.guard++;
    d = domain_create(name, strnlen(name, RS_NVTX_TEXT_MAX));
    t_rs.guard--;
    return (nvtxDomainHandle_t)(void *)(uintptr_t)d;
}

static nvtxDomainHandle_t NVTX_API
h_DomainCreateW(const wchar_t *name)
{
    char buf[RS_NVTX_WTEXT_MAX];
    const rs_nvtx_domain *d;
    if (name == NULL)
        return NULL;
    size_t n = wide_to_ascii(name, buf, sizeof buf);
    t_rs.guard++;
    d = domain_create(buf, n);
    t_rs.guard--;
    return (nvtxDomainHandle_t)(void *)(uintptr_t)d;
}

static void NVTX_API
h_DomainDestroy(nvtxDomainHandle_t d)
{
    /* Keep the handle valid: NCCL and others may still use it. */
    (void)d;
}

static const rs_nvtx_string *
string_register(const char *s, size_t n)
{
    const rs_nvtx_string *res = NULL;
    uint32_t mask = RS_NVTX_MAX_STRINGS - 1;
    uint32_t i = hash_bytes(s, n) & mask;

    pthread_mutex_lock(&g_reg_lock);
    for (uint32_t probe = 0; probe < RS_NVTX_MAX_STRINGS; probe++, i = (i + 1) & mask) {
        rs_nvtx_string *e = &g_strings[i];
        if (e->text == NULL) {
            /* Keep a quarter free so probes stay short. */
            if (g_nstrings >= RS_NVTX_MAX_STRINGS - RS_NVTX_MAX_STRINGS / 4)
                break;
            char *copy = malloc(n + 1);
            if (copy == NULL)
                break;
            memcpy(copy, s, n);
            copy[n] = 0;
            e->len = (uint32_t)n;
            e->id = rs_intern(copy, n);
            e->text = copy;
            g_nstrings++;
            res = e;
            break;
        }
        if (e->len == n && memcmp(e->text, s, n) == 0) {
            res = e;
            break;
        }
    }
    pthread_mutex_unlock(&g_reg_lock);

    if (res == NULL) {
        static _Atomic int logged;
        if (atomic_exchange(&logged, 1) == 0)
            rs_log(1, "NVTX registered-string table full (or out of memory); "
                      "further registered strings are recorded as \"%s\"",
                   g_string_overflow.text);
        res = &g_string_overflow;
    }
    return res;
}

static nvtxStringHandle_t NVTX_API
h_DomainRegisterStringA(nvtxDomainHandle_t d, const char *s)
{
    const rs_nvtx_string *r;
    (void)d;
    if (s == NULL)
        return NULL;
    t_rs.guard++;
    r = string_register(s, strnlen(s, RS_NVTX_TEXT_MAX));
    t_rs.guard--;
    return (nvtxStringHandle_t)(void *)(uintptr_t)r;
}

static nvtxStringHandle_t NVTX_API
h_DomainRegisterStringW(nvtxDomainHandle_t d, const wchar_t *w)
{
    char buf[RS_NVTX_WTEXT_MAX];
    const rs_nvtx_string *r;
    (void)d;
    if (w == NULL)
        return NULL;
    size_t n = wide_to_ascii(w, buf, sizeof buf);
    t_rs.guard++;
    r = string_register(buf, n);
    t_rs.guard--;
    return (nvtxStringHandle_t)(void *)(uintptr_t)r;
}

static void NVTX_API
h_Initialize(const void *reserved)
{
    (void)reserved;
}

/* ---------------------------------------------------------------------
 * Writer callbacks
 * ------------------------------------------------------------------- */

void
rs_nvtx_replay_definitions(void)
{
    uint32_t cnt = atomic_load_explicit(&g_ndomains, memory_order_acquire);
    for (uint32_t i = 0; i < cnt; i++)
        emit_domain(&g_domains[i]);
    if (atomic_load(&g_domain_overflow_used))
        emit_domain(&g_domain_overflow);
}

void
rs_nvtx_thread_attach(void)
{
    const rs_nvtx_stack *st = t_stackp;
    if (st == NULL)
        return;
    for (uint32_t i = 0; i < st->n; i++) {
        const rs_nvtx_entry *e = &st->e[i];
        uint32_t depth = stack_count(st, i, e->domain) + 1;
        rs_record_nvtx(RS_REC_NVTX_PUSH, e->domain, e->name_id,
                       e->name_id ? NULL : e->text, e->name_id ? 0 : e->text_len,
                       0, e->category, depth | RS_NVTX_PRE_TRACE);
    }
}

/* ---------------------------------------------------------------------
 * Injection entry point
 * ------------------------------------------------------------------- */

#define SET_SLOT(tbl, n, cbid, fn)                                      \
    do {                                                                \
        if ((unsigned)(cbid) < (n) && (tbl)[(cbid)] != NULL)            \
            *(tbl)[(cbid)] = (NvtxFunctionPointer)(fn);                 \
    } while (0)

RS_EXPORT int
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable)
{
    const NvtxExportTableCallbacks *cb;
    const NvtxExportTableVersionInfo *vi;
    NvtxFunctionTable t = NULL;
    unsigned int n = 0;
    uint32_t call;

    if (getExportTable == NULL)
        return 0;
    call = atomic_fetch_add(&g_init_calls, 1) + 1;

    cb = (const NvtxExportTableCallbacks *)getExportTable(NVTX_ETID_CALLBACKS);
    if (cb == NULL || cb->struct_size < offsetof(NvtxExportTableCallbacks, GetModuleFunctionTable)
                                         + sizeof(cb->GetModuleFunctionTable)
        || cb->GetModuleFunctionTable == NULL) {
        rs_log(1, "NVTX module without a callbacks table, not instrumented");
        return 0;
    }

    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n) && t) {
        SET_SLOT(t, n, NVTX_CBID_CORE_MarkEx, h_MarkEx);
        SET_SLOT(t, n, NVTX_CBID_CORE_MarkA, h_MarkA);
        SET_SLOT(t, n, NVTX_CBID_CORE_MarkW, h_MarkW);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangeStartEx, h_RangeStartEx);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangeStartA, h_RangeStartA);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangeStartW, h_RangeStartW);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangeEnd, h_RangeEnd);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangePushEx, h_RangePushEx);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangePushA, h_RangePushA);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangePushW, h_RangePushW);
        SET_SLOT(t, n, NVTX_CBID_CORE_RangePop, h_RangePop);
        SET_SLOT(t, n, NVTX_CBID_CORE_NameOsThreadA, h_NameOsThreadA);
        SET_SLOT(t, n, NVTX_CBID_CORE_NameOsThreadW, h_NameOsThreadW);
    }

    t = NULL;
    n = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n) && t) {
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainMarkEx, h_DomainMarkEx);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainRangeStartEx, h_DomainRangeStartEx);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainRangeEnd, h_DomainRangeEnd);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainRangePushEx, h_DomainRangePushEx);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainRangePop, h_DomainRangePop);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainRegisterStringA, h_DomainRegisterStringA);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainRegisterStringW, h_DomainRegisterStringW);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainCreateA, h_DomainCreateA);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainCreateW, h_DomainCreateW);
        SET_SLOT(t, n, NVTX_CBID_CORE2_DomainDestroy, h_DomainDestroy);
        SET_SLOT(t, n, NVTX_CBID_CORE2_Initialize, h_Initialize);
    }

    vi = (const NvtxExportTableVersionInfo *)getExportTable(NVTX_ETID_VERSIONINFO);
    if (vi && vi->struct_size >= offsetof(NvtxExportTableVersionInfo, SetInjectionNvtxVersion)
                                 + sizeof(vi->SetInjectionNvtxVersion)
        && vi->SetInjectionNvtxVersion)
        vi->SetInjectionNvtxVersion(NVTX_VERSION);

    rs_log(2, "NVTX module %u attached (app NVTX version %u)", call,
           vi ? vi->version : 0);
    return 1;
}

/* ---------------------------------------------------------------------
 * Environment
 * ------------------------------------------------------------------- */

static char g_foreign_path[PATH_MAX];
static int g_foreign;

const char *
rs_nvtx_foreign_path(void)
{
    return g_foreign ? g_foreign_path : NULL;
}

static int
same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (strcmp(a, b) == 0)
        return 1;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0)
        return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void
rs_nvtx_setup_env(void)
{
    static const char var[] = "NVTX_INJECTION64_PATH";
    char self[PATH_MAX];
    Dl_info info;
    const char *cur = getenv(var);

    /* The key now, while the process is single-threaded. */
    pthread_once(&g_stack_once, stack_once);

    memset(&info, 0, sizeof info);
    if (dladdr((const void *)(uintptr_t)&rs_nvtx_setup_env, &info) == 0 ||
        info.dli_fname == NULL || realpath(info.dli_fname, self) == NULL) {
        if (info.dli_fname && info.dli_fname[0] == '/' &&
            strlen(info.dli_fname) < sizeof self) {
            strcpy(self, info.dli_fname);
        } else {
            rs_log(1, "cannot find the shim's own path; NVTX ranges not recorded");
            return;
        }
    }

    if (cur == NULL || cur[0] == 0) {
        if (setenv(var, self, 1) != 0)
            rs_log(1, "cannot set %s; NVTX ranges not recorded", var);
        else
            rs_log(2, "%s=%s", var, self);
        return;
    }

    char resolved[PATH_MAX];
    if (same_file(cur, self) ||
        (realpath(cur, resolved) != NULL && same_file(resolved, self))) {
        rs_log(2, "inherited %s is this shim", var);
        return;
    }

    size_t len = strlen(cur);
    if (len >= sizeof g_foreign_path)
        len = sizeof g_foreign_path - 1;
    memcpy(g_foreign_path, cur, len);
    g_foreign_path[len] = 0;
    g_foreign = 1;
    rs_log(1, "%s=%s belongs to another tool; NVTX ranges not recorded",
           var, g_foreign_path);
}
