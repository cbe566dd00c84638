/* mock_arena.c: per-thread arenas for device allocations, a benchmark mode
 * of the mock runtime (MOCK_CUDA_THREAD_ARENAS=1; mock_state.h).
 *
 * Why: the mock keeps one process-wide mutex (mock_state.c's g_lock) over
 * its device table. On a machine with fewer cores than threads, 8 or 64
 * threads that allocate in a loop queue on it: a thread descheduled inside
 * the critical section makes the others sleep in futex_wait, and any tracer
 * that lengthens the time between two lock sections (an LD_PRELOAD shim)
 * changes how often that happens. A benchmark of the tracer then measures
 * the mock's queue, not the tracer (docs/performance.md, "Seventh round").
 * In this mode each thread allocates from an arena of its own: its own
 * address slice per device, its own live table and counters, under a mutex
 * only that thread takes unless another thread frees one of its blocks. The
 * per-event work of the mock no longer shares a cache line between threads.
 *
 * Layout: thread slot s (0..MOCK_ARENAS-1) of device d hands out
 * mock_range_base(MOCK_RANGE_RUNTIME, d) + 2^39 + s * 2^33 upwards (the
 * upper half of the device's runtime TiB, 8 GiB of addresses per slot),
 * 512-byte aligned, never reused. The locked path hands out the lower half,
 * so the two never meet. A slot is held by one thread at a time (released
 * at thread exit and handed to a later thread with its live blocks).
 *
 * What this mode does not model, by design (it is for benchmarks):
 * MOCK_CUDA_CAPACITY is not enforced for arena blocks (the check would read
 * every arena's counter on every call); the pool's high-water mark ignores
 * them. Arena blocks do count in cudaMemGetInfo's used bytes and the pool's
 * current bytes (mock_arena_live). A thread beyond MOCK_ARENAS, or a slot
 * whose 8 GiB are used up, falls back to the locked path.
 */
#include "mock_state.h"

#include <pthread.h>
#include <stdlib.h>

#define ARENA_SPLIT (1ull << 39)   /* arenas use the upper half of the runtime TiB */
#define ARENA_SLICE (1ull << 33)   /* 8 GiB of addresses per slot and device */
#define ARENA_SLOT_DELETED UINT64_MAX

typedef struct arena_slot {
    uint64_t ptr;                   /* 0 empty, ARENA_SLOT_DELETED deleted */
    mock_alloc_info info;
} arena_slot;

typedef struct mock_arena {
    pthread_mutex_t lock;           /* the owner's, and a foreign free's */
    int held;                       /* 1 while a thread owns the slot (atomic) */
    arena_slot *table;              /* open addressing, linear probing */
    size_t cap, used, live_n;       /* cap: power of two; used: live + deleted */
    uint64_t next[MOCK_MAX_DEVICES];        /* offset into the slice, per device */
    uint64_t live[MOCK_MAX_DEVICES];        /* DEVICE + ASYNC bytes (atomic) */
    uint64_t pool_live[MOCK_MAX_DEVICES];   /* ASYNC bytes (atomic) */
} __attribute__((aligned(64))) mock_arena;

static mock_arena g_arena[MOCK_ARENAS];
static int g_on;
static unsigned g_hint;             /* next slot to try (atomic) */
static pthread_key_t g_key;
static __thread int t_slot;         /* slot + 1, 0 = none yet, -1 = none free */

static void
release_slot(void *arg)
{
    mock_arena *a = arg;
    __atomic_store_n(&a->held, 0, __ATOMIC_RELEASE);
}

/* fork: no arena lock is held across it, so the child can take them all
 * (a program that forks while other threads allocate). */
static void
arena_atfork_prepare(void)
{
    for (int i = 0; i < MOCK_ARENAS; i++)
        pthread_mutex_lock(&g_arena[i].lock);
}

static void
arena_atfork_parent(void)
{
    for (int i = MOCK_ARENAS - 1; i >= 0; i--)
        pthread_mutex_unlock(&g_arena[i].lock);
}

static void
arena_atfork_child(void)
{
    for (int i = 0; i < MOCK_ARENAS; i++)
        pthread_mutex_init(&g_arena[i].lock, NULL);
}

/* Decided once, in this library's constructor (before main, one thread):
 * a pthread_once at the first allocation deadlocked a child forked while
 * another thread was inside it (the child's once stays "in progress": the
 * p_stress children hung in mock_arena_on under TSan, status SIGALRM). */
__attribute__((constructor)) static void
arena_init(void)
{
    const char *v = getenv("MOCK_CUDA_THREAD_ARENAS");
    g_on = v && v[0] == '1' && v[1] == '\0';
    for (int i = 0; i < MOCK_ARENAS; i++)
        pthread_mutex_init(&g_arena[i].lock, NULL);
    if (g_on && pthread_key_create(&g_key, release_slot) != 0)
        g_on = 0;
    if (g_on)
        pthread_atfork(arena_atfork_prepare, arena_atfork_parent, arena_atfork_child);
}

int
mock_arena_on(void)
{
    return g_on;
}

/* The calling thread's arena, claimed at its first allocation (slots tried
 * round-robin from a moving start, so successive short-lived threads spread
 * their blocks over the slots); NULL when every slot is held. */
static mock_arena *
my_arena(void)
{
    if (t_slot > 0)
        return &g_arena[t_slot - 1];
    if (t_slot < 0)
        return NULL;
    unsigned start = __atomic_fetch_add(&g_hint, 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < MOCK_ARENAS; i++) {
        unsigned s = (start + i) % MOCK_ARENAS;
        int expect = 0;
        if (__atomic_compare_exchange_n(&g_arena[s].held, &expect, 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            t_slot = (int)s + 1;
            pthread_setspecific(g_key, &g_arena[s]);
            return &g_arena[s];
        }
    }
    t_slot = -1;
    return NULL;
}

static size_t
arena_hash(uint64_t p)
{
    p ^= p >> 33;
    p *= 0xff51afd7ed558ccdull;
    p ^= p >> 33;
    return (size_t)p;
}

/* Rebuild the table without its deleted slots, doubling it only when the
 * live entries fill half of it (alloc/free pairs leave deleted slots, which
 * must not make the table grow without bound). Caller holds a->lock. */
static int
arena_rehash(mock_arena *a)
{
    size_t ncap = a->cap == 0 ? 256 : (a->live_n * 2 >= a->cap ? a->cap * 2 : a->cap);
    arena_slot *t = calloc(ncap, sizeof *t), *old = a->table;
    if (!t)
        return -1;
    for (size_t i = 0; i < a->cap; i++) {
        if (!old[i].ptr || old[i].ptr == ARENA_SLOT_DELETED)
            continue;
        size_t j = arena_hash(old[i].ptr) & (ncap - 1);
        while (t[j].ptr)
            j = (j + 1) & (ncap - 1);
        t[j] = old[i];
    }
    free(old);
    a->table = t;
    a->cap = ncap;
    a->used = a->live_n;
    return 0;
}

int
mock_arena_alloc(int dev, uint64_t size, int kind, uint64_t *out)
{
    mock_arena *a = my_arena();
    uint64_t step = (size + MOCK_ALIGN - 1) & ~(MOCK_ALIGN - 1);
    if (!a || size == 0 || (kind != MOCK_KIND_DEVICE && kind != MOCK_KIND_ASYNC))
        return -1;
    pthread_mutex_lock(&a->lock);
    int rc = -1;
    if (step > ARENA_SLICE - a->next[dev] ||
        ((a->used + 1) * 4 >= a->cap * 3 && arena_rehash(a) != 0))
        goto out;
    uint64_t p = mock_range_base(MOCK_RANGE_RUNTIME, dev) + ARENA_SPLIT +
                 (uint64_t)(a - g_arena) * ARENA_SLICE + a->next[dev];
    size_t i = arena_hash(p) & (a->cap - 1);
    while (a->table[i].ptr && a->table[i].ptr != ARENA_SLOT_DELETED)
        i = (i + 1) & (a->cap - 1);
    a->used += a->table[i].ptr == 0;
    a->table[i] = (arena_slot){.ptr = p, .info = {.size = size, .device = dev, .kind = kind}};
    a->live_n++;
    a->next[dev] += step;
    __atomic_store_n(&a->live[dev], a->live[dev] + size, __ATOMIC_RELAXED);
    if (kind == MOCK_KIND_ASYNC)
        __atomic_store_n(&a->pool_live[dev], a->pool_live[dev] + size, __ATOMIC_RELAXED);
    *out = p;
    rc = MOCK_OK;
out:
    pthread_mutex_unlock(&a->lock);
    return rc;
}

/* The arena whose slice holds ptr (any device), or NULL. */
static mock_arena *
arena_of(uint64_t ptr)
{
    int dev = mock_range_device(ptr);
    if (dev < 0)
        return NULL;
    uint64_t off = ptr - mock_range_base(MOCK_RANGE_RUNTIME, dev);
    if (off < ARENA_SPLIT || off >= ARENA_SPLIT + MOCK_ARENAS * ARENA_SLICE)
        return NULL;
    return &g_arena[(off - ARENA_SPLIT) / ARENA_SLICE];
}

int
mock_arena_release(uint64_t ptr, unsigned kind_mask, mock_alloc_info *info)
{
    mock_arena *a = arena_of(ptr);
    if (!a)
        return -1;
    pthread_mutex_lock(&a->lock);
    arena_slot *s = NULL;
    for (size_t i = a->cap ? arena_hash(ptr) & (a->cap - 1) : 0; a->cap && a->table[i].ptr;
         i = (i + 1) & (a->cap - 1))
        if (a->table[i].ptr == ptr) {
            s = &a->table[i];
            break;
        }
    if (!s || !(kind_mask & (1u << s->info.kind))) {
        pthread_mutex_unlock(&a->lock);
        return MOCK_ERR_INVALID_VALUE;
    }
    mock_alloc_info in = s->info;
    s->ptr = ARENA_SLOT_DELETED;
    a->live_n--;
    __atomic_store_n(&a->live[in.device], a->live[in.device] - in.size, __ATOMIC_RELAXED);
    if (in.kind == MOCK_KIND_ASYNC)
        __atomic_store_n(&a->pool_live[in.device], a->pool_live[in.device] - in.size,
                         __ATOMIC_RELAXED);
    pthread_mutex_unlock(&a->lock);
    if (info)
        *info = in;
    return MOCK_OK;
}

uint64_t
mock_arena_live(int dev, int async_only)
{
    if (!mock_arena_on())
        return 0;
    uint64_t sum = 0;
    for (int i = 0; i < MOCK_ARENAS; i++)
        sum += __atomic_load_n(async_only ? &g_arena[i].pool_live[dev] : &g_arena[i].live[dev],
                               __ATOMIC_RELAXED);
    return sum;
}
