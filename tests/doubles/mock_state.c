/* mock_state.c: configuration, devices, address spaces, live allocations,
 * pools and fault injection for the CUDA test doubles (see mock_state.h). */
#include "mock_state.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOCK_MAX_RULES 64
#define MOCK_FN_LEN 64

typedef struct mock_rule {
    char fn[MOCK_FN_LEN];
    uint64_t nth;
    int code;
} mock_rule;

typedef struct mock_counter {
    char fn[MOCK_FN_LEN];
    uint64_t calls;
} mock_counter;

typedef struct mock_device {
    int ctx;                 /* context created */
    uint64_t next;           /* next address to hand out */
    uint64_t live;           /* live DEVICE + ASYNC bytes */
    uint64_t pool_live;      /* live ASYNC bytes */
    uint64_t pool_high;
    uint64_t pool_threshold;
} mock_device;

typedef struct mock_slot {
    uint64_t ptr;            /* 0 = empty, UINT64_MAX = deleted */
    mock_alloc_info info;
} mock_slot;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_capacity = 85899345920ull;      /* 80 GiB */
static int g_ndev = 8;
static uint64_t g_ctx_bytes = 536870912ull;       /* 512 MiB */
static mock_rule g_rules[MOCK_MAX_RULES];
static int g_nrules;
static mock_counter g_counters[MOCK_MAX_RULES];
static int g_ncounters;
static mock_device g_dev[MOCK_MAX_DEVICES];
static mock_slot *g_table;
static size_t g_table_cap;   /* power of two */
static size_t g_table_used;  /* live + deleted */

static __thread int t_device;
static __thread int t_noctx;   /* 1: cuCtxSetCurrent(NULL), until a device is made current */
static __thread int t_error;

#define SLOT_DELETED UINT64_MAX

static uint64_t
env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) {
        fprintf(stderr, "mock-cuda: ignoring %s=%s (not a number)\n", name, s);
        return dflt;
    }
    return v;
}

static void
parse_fail(const char *spec)
{
    /* "fn@N=code[,fn@N=code...]" */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *at = strchr(tok, '@');
        char *eq = at ? strchr(at, '=') : NULL;
        if (!at || !eq || at == tok || (size_t)(at - tok) >= MOCK_FN_LEN || g_nrules == MOCK_MAX_RULES) {
            fprintf(stderr, "mock-cuda: ignoring MOCK_CUDA_FAIL entry '%s'\n", tok);
            continue;
        }
        mock_rule *r = &g_rules[g_nrules++];
        memcpy(r->fn, tok, (size_t)(at - tok));
        r->fn[at - tok] = '\0';
        r->nth = strtoull(at + 1, NULL, 10);
        r->code = (int)strtol(eq + 1, NULL, 10);
    }
}

static void
init_once(void)
{
    g_capacity = env_u64("MOCK_CUDA_CAPACITY", g_capacity);
    uint64_t n = env_u64("MOCK_CUDA_DEVICES", (uint64_t)g_ndev);
    g_ndev = n > MOCK_MAX_DEVICES ? MOCK_MAX_DEVICES : (int)n;
    g_ctx_bytes = env_u64("MOCK_CUDA_CONTEXT_BYTES", g_ctx_bytes);
    const char *f = getenv("MOCK_CUDA_FAIL");
    if (f && *f)
        parse_fail(f);
    for (int d = 0; d < MOCK_MAX_DEVICES; d++)
        g_dev[d].next = mock_range_base(MOCK_RANGE_RUNTIME, d);
}

/* Device 0's ranges, by kind (mock_state.h: the layout and why). */
static const uint64_t g_dev0_base[MOCK_RANGE_KINDS] = {
    MOCK_DEV_BASE, 0x600000000000ull, 0x500000000000ull,
};

uint64_t
mock_range_base(int kind, int dev)
{
    if (dev == 0)
        return g_dev0_base[kind];
    return ((uint64_t)(kind + 1) << 48) + ((uint64_t)dev << MOCK_DEV_SHIFT);
}

int
mock_range_device(uint64_t addr)
{
    for (int k = 0; k < MOCK_RANGE_KINDS; k++)
        if (addr - g_dev0_base[k] < (1ull << MOCK_DEV_SHIFT))
            return 0;
    uint64_t kind = (addr >> 48) - 1, dev = (addr >> MOCK_DEV_SHIFT) & 0xff;
    if (kind < MOCK_RANGE_KINDS && dev >= 1 && dev < MOCK_MAX_DEVICES)
        return (int)dev;
    return -1;
}

static void
init(void)
{
    pthread_once(&g_once, init_once);
}

/* fork: the device table stays consistent in the child (a program that
 * forks while other threads allocate, tests/integration/progs/p_stress.c).
 * Registered by this library's constructor, which runs before the
 * preloaded shim's: fork's prepare handlers run last-registered first, so
 * g_lock is taken after the shim's locks, the order in which the shim
 * calls into this runtime. */
static void mock_atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void mock_atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void mock_atfork_child(void) { pthread_mutex_init(&g_lock, NULL); }

__attribute__((constructor)) static void
mock_register_atfork(void)
{
    pthread_atfork(mock_atfork_prepare, mock_atfork_parent, mock_atfork_child);
}

uint64_t mock_capacity(void) { init(); return g_capacity; }
int mock_device_count(void) { init(); return g_ndev; }
uint64_t mock_context_bytes(void) { init(); return g_ctx_bytes; }

int
mock_fail_check(const char *fn)
{
    init();
    if (g_nrules == 0)
        return 0;
    int code = 0;
    pthread_mutex_lock(&g_lock);
    mock_counter *c = NULL;
    for (int i = 0; i < g_ncounters; i++)
        if (strcmp(g_counters[i].fn, fn) == 0)
            c = &g_counters[i];
    if (!c && g_ncounters < MOCK_MAX_RULES) {
        c = &g_counters[g_ncounters++];
        snprintf(c->fn, sizeof c->fn, "%s", fn);
    }
    if (c) {
        c->calls++;
        for (int i = 0; i < g_nrules; i++)
            if (g_rules[i].nth == c->calls && strcmp(g_rules[i].fn, fn) == 0)
                code = g_rules[i].code;
    }
    pthread_mutex_unlock(&g_lock);
    return code;
}

int mock_current_device(void) { return t_device; }
void mock_set_current_device(int dev) { t_device = dev; t_noctx = 0; }
void mock_clear_current_context(void) { t_noctx = 1; }
int mock_context_device(void) { return t_noctx ? -1 : t_device; }

int
mock_set_error(int err)
{
    if (err)
        t_error = err;
    return err;
}

int
mock_take_error(void)
{
    int e = t_error;
    t_error = 0;
    return e;
}

int mock_peek_error(void) { return t_error; }

int
mock_valid_device(int dev)
{
    init();
    return dev >= 0 && dev < g_ndev;
}

/* ctx is only ever set (0 -> 1), so a context that exists needs no lock:
 * every cudaFree calls this, and took the one process-wide lock for it. */
void
mock_touch_device(int dev)
{
    if (!mock_valid_device(dev) || __atomic_load_n(&g_dev[dev].ctx, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&g_lock);
    __atomic_store_n(&g_dev[dev].ctx, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_lock);
}

/* ---- live allocation table (open addressing; caller holds g_lock) ---- */

static size_t
slot_hash(uint64_t p)
{
    p ^= p >> 33;
    p *= 0xff51afd7ed558ccdull;
    p ^= p >> 33;
    return (size_t)p;
}

static int table_put(uint64_t ptr, const mock_alloc_info *info);

static int
table_grow(void)
{
    size_t ncap = g_table_cap ? g_table_cap * 2 : 1024;
    mock_slot *old = g_table;
    size_t ocap = g_table_cap;
    mock_slot *t = calloc(ncap, sizeof *t);
    if (!t)
        return -1;
    g_table = t;
    g_table_cap = ncap;
    g_table_used = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].ptr && old[i].ptr != SLOT_DELETED)
            table_put(old[i].ptr, &old[i].info);
    free(old);
    return 0;
}

static int
table_put(uint64_t ptr, const mock_alloc_info *info)
{
    if ((g_table_used + 1) * 4 >= g_table_cap * 3 && table_grow() != 0)
        return -1;
    size_t mask = g_table_cap - 1;
    for (size_t i = slot_hash(ptr) & mask;; i = (i + 1) & mask) {
        if (g_table[i].ptr == 0 || g_table[i].ptr == SLOT_DELETED) {
            if (g_table[i].ptr == 0)
                g_table_used++;
            g_table[i].ptr = ptr;
            g_table[i].info = *info;
            return 0;
        }
    }
}

static mock_slot *
table_find(uint64_t ptr)
{
    if (!g_table_cap || ptr == 0 || ptr == SLOT_DELETED)
        return NULL;
    size_t mask = g_table_cap - 1;
    for (size_t i = slot_hash(ptr) & mask;; i = (i + 1) & mask) {
        if (g_table[i].ptr == 0)
            return NULL;
        if (g_table[i].ptr == ptr)
            return &g_table[i];
    }
}

/* ---- allocations ---- */

int
mock_dev_alloc(int dev, uint64_t size, int kind, uint64_t *out)
{
    if (!mock_valid_device(dev))
        return MOCK_ERR_INVALID_DEVICE;
    *out = 0;
    if (mock_arena_on()) {
        mock_touch_device(dev);
        int arc = mock_arena_alloc(dev, size, kind, out);
        if (arc >= 0)
            return arc;
    }
    int rc = MOCK_OK;
    pthread_mutex_lock(&g_lock);
    mock_device *d = &g_dev[dev];
    __atomic_store_n(&d->ctx, 1, __ATOMIC_RELEASE);
    if (size == 0)
        goto out;
    uint64_t used = g_ctx_bytes + d->live;
    if (used > g_capacity || size > g_capacity - used) {
        rc = MOCK_ERR_MEMORY_ALLOCATION;
        goto out;
    }
    mock_alloc_info info = { .size = size, .device = dev, .kind = kind };
    if (table_put(d->next, &info) != 0) {
        rc = MOCK_ERR_MEMORY_ALLOCATION;
        goto out;
    }
    *out = d->next;
    d->next += (size + MOCK_ALIGN - 1) & ~(MOCK_ALIGN - 1);
    d->live += size;
    if (kind == MOCK_KIND_ASYNC) {
        d->pool_live += size;
        if (d->pool_live > d->pool_high)
            d->pool_high = d->pool_live;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int
mock_charge(int dev, uint64_t size)
{
    if (!mock_valid_device(dev))
        return MOCK_ERR_INVALID_DEVICE;
    int rc = MOCK_OK;
    pthread_mutex_lock(&g_lock);
    mock_device *d = &g_dev[dev];
    __atomic_store_n(&d->ctx, 1, __ATOMIC_RELEASE);
    uint64_t used = g_ctx_bytes + d->live;
    if (used > g_capacity || size > g_capacity - used)
        rc = MOCK_ERR_MEMORY_ALLOCATION;
    else
        d->live += size;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void
mock_uncharge(int dev, uint64_t size)
{
    if (!mock_valid_device(dev))
        return;
    pthread_mutex_lock(&g_lock);
    g_dev[dev].live -= size < g_dev[dev].live ? size : g_dev[dev].live;
    pthread_mutex_unlock(&g_lock);
}

int
mock_device_touched(int dev)
{
    if (!mock_valid_device(dev))
        return 0;
    pthread_mutex_lock(&g_lock);
    int t = g_dev[dev].ctx;
    pthread_mutex_unlock(&g_lock);
    return t;
}

int
mock_host_alloc(uint64_t size, int kind, void **out)
{
    init();
    *out = NULL;
    if (size == 0)
        return MOCK_OK;
    void *p = NULL;
    if (posix_memalign(&p, 4096, (size_t)size) != 0)
        return MOCK_ERR_MEMORY_ALLOCATION;
    memset(p, 0, (size_t)size);
    mock_alloc_info info = { .size = size, .device = mock_current_device(), .kind = kind };
    pthread_mutex_lock(&g_lock);
    int rc = table_put((uint64_t)(uintptr_t)p, &info);
    pthread_mutex_unlock(&g_lock);
    if (rc != 0) {
        free(p);
        return MOCK_ERR_MEMORY_ALLOCATION;
    }
    *out = p;
    return MOCK_OK;
}

int
mock_release(uint64_t ptr, unsigned kind_mask, mock_alloc_info *info)
{
    init();
    if (mock_arena_on()) {
        int arc = mock_arena_release(ptr, kind_mask, info);
        if (arc >= 0)
            return arc;
    }
    pthread_mutex_lock(&g_lock);
    mock_slot *s = table_find(ptr);
    if (!s || !(kind_mask & (1u << s->info.kind))) {
        pthread_mutex_unlock(&g_lock);
        return MOCK_ERR_INVALID_VALUE;
    }
    mock_alloc_info in = s->info;
    s->ptr = SLOT_DELETED;
    if (in.kind == MOCK_KIND_DEVICE || in.kind == MOCK_KIND_ASYNC) {
        g_dev[in.device].live -= in.size;
        if (in.kind == MOCK_KIND_ASYNC)
            g_dev[in.device].pool_live -= in.size;
    }
    pthread_mutex_unlock(&g_lock);
    if (in.kind == MOCK_KIND_MANAGED || in.kind == MOCK_KIND_HOST)
        free((void *)(uintptr_t)ptr);
    if (info)
        *info = in;
    return MOCK_OK;
}

uint64_t
mock_device_used(int dev)
{
    if (!mock_valid_device(dev))
        return 0;
    pthread_mutex_lock(&g_lock);
    uint64_t u = (g_dev[dev].ctx ? g_ctx_bytes : 0) + g_dev[dev].live;
    pthread_mutex_unlock(&g_lock);
    return u + mock_arena_live(dev, 0);
}

/* ---- pools ---- */

uint64_t
mock_default_pool(int dev)
{
    return MOCK_POOL_BASE + (uint64_t)dev * MOCK_POOL_STRIDE;
}

int
mock_pool_device(uint64_t pool)
{
    if (pool < MOCK_POOL_BASE || (pool - MOCK_POOL_BASE) % MOCK_POOL_STRIDE)
        return -1;
    uint64_t d = (pool - MOCK_POOL_BASE) / MOCK_POOL_STRIDE;
    return d < (uint64_t)mock_device_count() ? (int)d : -1;
}

#define POOL_GET(field)                                     \
    pthread_mutex_lock(&g_lock);                            \
    uint64_t v = g_dev[dev].field;                          \
    pthread_mutex_unlock(&g_lock);                          \
    return v

uint64_t
mock_pool_live(int dev)
{
    pthread_mutex_lock(&g_lock);
    uint64_t v = g_dev[dev].pool_live;
    pthread_mutex_unlock(&g_lock);
    return v + mock_arena_live(dev, 1);
}
uint64_t mock_pool_high(int dev) { POOL_GET(pool_high); }
uint64_t mock_pool_release_threshold(int dev) { POOL_GET(pool_threshold); }

void
mock_pool_reset_high(int dev)
{
    pthread_mutex_lock(&g_lock);
    g_dev[dev].pool_high = g_dev[dev].pool_live;
    pthread_mutex_unlock(&g_lock);
}

void
mock_pool_set_release_threshold(int dev, uint64_t v)
{
    pthread_mutex_lock(&g_lock);
    g_dev[dev].pool_threshold = v;
    pthread_mutex_unlock(&g_lock);
}
