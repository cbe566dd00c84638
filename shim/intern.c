/* intern.c: the bounded string intern table (NVTX names, registered strings).
 *
 * Open addressing over RS_INTERN_SLOTS slots; a slot is published by a
 * release store of its hash, so lookups take no lock. Inserts take a
 * (recursive) mutex: once per distinct string. Past RS_INTERN_MAX strings or
 * RS_INTERN_ARENA bytes, rs_intern returns 0 and callers inline the text
 * (with emit_nvtx every op name is unique, so the bound matters).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "writer.h"

#define RS_INTERN_SLOTS 65536u              /* power of two */
#define RS_INTERN_MAX 32768u                /* strings, load factor 1/2 */
#define RS_INTERN_ARENA (4u * 1024u * 1024u) /* bytes of string copies */
#define RS_INTERN_MAX_LEN 1024u             /* longer strings go inline */

struct intern_slot {
    _Atomic uint64_t hash;  /* 0 = empty; published last */
    uint32_t id;
    uint32_t len;
    const char *str;
};

static struct {
    pthread_mutex_t mu;
    struct intern_slot *slots;  /* mmap'd on first insert */
    char *arena;
    uint32_t *by_id;            /* id -> slot index, for replay in id order */
    size_t arena_used;
    uint32_t count;
} g_in = {.mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP};

static uint64_t
hash_bytes(const char *s, size_t len)
{
    uint64_t h = rs_checksum(s, len);
    return h ? h : 1;
}

static void
write_string_record(uint32_t id, const char *s, uint32_t len)
{
    uint32_t size = RS_RECORD_ROUND((uint32_t)(sizeof(rs_rec_string) + len));
    rs_rec_string *r = rs_rec_begin(size, RS_UNGATED);
    if (!r)
        return;
    r->h = (rs_record_header){.kind = RS_REC_STRING, .size = (uint16_t)size, .t_ns = rs_now_ns()};
    r->id = id;
    r->len = len;
    memcpy(r + 1, s, len);
    memset((char *)(r + 1) + len, 0, size - sizeof *r - len);
    rs_rec_end(r, size);
}

static uint32_t
lookup(const char *s, size_t len, uint64_t h, uint32_t *free_slot)
{
    struct intern_slot *slots = __atomic_load_n(&g_in.slots, __ATOMIC_ACQUIRE);
    if (!slots) {
        *free_slot = UINT32_MAX;
        return 0;
    }
    for (uint32_t i = 0; i < RS_INTERN_SLOTS; i++) {
        uint32_t k = (uint32_t)(h + i) & (RS_INTERN_SLOTS - 1);
        uint64_t sh = atomic_load_explicit(&slots[k].hash, memory_order_acquire);
        if (sh == 0) {
            *free_slot = k;
            return 0;
        }
        if (sh == h && slots[k].len == len && !memcmp(slots[k].str, s, len))
            return slots[k].id;
    }
    *free_slot = UINT32_MAX;
    return 0;
}

uint32_t
rs_intern(const char *s, size_t len)
{
    if (!s || len == 0 || len > RS_INTERN_MAX_LEN)
        return 0;
    uint64_t h = hash_bytes(s, len);
    uint32_t slot;
    uint32_t id = lookup(s, len, h, &slot);
    if (id)
        return id;
    pthread_mutex_lock(&g_in.mu);
    if (!g_in.slots) {
        size_t slots_bytes = RS_INTERN_SLOTS * sizeof(struct intern_slot);
        size_t ids_bytes = (RS_INTERN_MAX + 1) * sizeof(uint32_t);
        void *m = mmap(NULL, slots_bytes + ids_bytes + RS_INTERN_ARENA, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            pthread_mutex_unlock(&g_in.mu);
            return 0;
        }
        g_in.by_id = (uint32_t *)((char *)m + slots_bytes);
        g_in.arena = (char *)m + slots_bytes + ids_bytes;
        __atomic_store_n(&g_in.slots, (struct intern_slot *)m, __ATOMIC_RELEASE);
    }
    id = lookup(s, len, h, &slot);
    if (!id && slot != UINT32_MAX && g_in.count < RS_INTERN_MAX &&
        g_in.arena_used + len <= RS_INTERN_ARENA) {
        char *copy = g_in.arena + g_in.arena_used;
        memcpy(copy, s, len);
        g_in.arena_used += len;
        id = ++g_in.count;
        g_in.slots[slot].id = id;
        g_in.slots[slot].len = (uint32_t)len;
        g_in.slots[slot].str = copy;
        g_in.by_id[id] = slot;
        atomic_store_explicit(&g_in.slots[slot].hash, h, memory_order_release);
        write_string_record(id, copy, (uint32_t)len);
    }
    pthread_mutex_unlock(&g_in.mu);
    return id;
}

/* Per-thread memo of names interned recently, by address: an NVTX name is
 * usually a string literal or a buffer pushed again and again, so hashing
 * its bytes on every push is avoidable. A hit still compares the bytes with
 * the interned copy (the buffer may hold another string now): the memo
 * never returns an id whose string differs from s. Direct-mapped. */
#define RS_INTERN_MEMO 16u
static __thread struct {
    const char *s;
    uint32_t len, id;
} t_memo[RS_INTERN_MEMO] __attribute__((tls_model("initial-exec")));

static inline uint32_t
memo_index(const char *s, size_t len)
{
    return (uint32_t)(((uintptr_t)s >> 3) ^ len) & (RS_INTERN_MEMO - 1);
}

uint32_t
rs_intern_memo_get(const char *s, size_t len)
{
    const __typeof__(t_memo[0]) *m = &t_memo[memo_index(s, len)];
    if (m->s != s || m->len != len || !m->id)
        return 0;
    /* the id came from rs_intern on this thread: its slot and by_id entry
     * were published before the slot's hash (release), which rs_intern
     * loaded (acquire) or stored itself; strings are never removed */
    const struct intern_slot *slots = __atomic_load_n(&g_in.slots, __ATOMIC_ACQUIRE);
    const char *str = slots[g_in.by_id[m->id]].str;
    return memcmp(str, s, len) == 0 ? m->id : 0;
}

void
rs_intern_memo_put(const char *s, size_t len, uint32_t id)
{
    if (!id || len > RS_INTERN_MAX_LEN)
        return;
    __typeof__(t_memo[0]) *m = &t_memo[memo_index(s, len)];
    m->s = s;
    m->len = (uint32_t)len;
    m->id = id;
}

void
rs_intern_replay(void)
{
    pthread_mutex_lock(&g_in.mu);
    /* Ids in order, so a reader sees definitions in id order. */
    for (uint32_t id = 1; g_in.slots && id <= g_in.count; id++) {
        struct intern_slot *sl = &g_in.slots[g_in.by_id[id]];
        write_string_record(id, sl->str, sl->len);
    }
    pthread_mutex_unlock(&g_in.mu);
}

void
rs_intern_atfork_prepare(void)
{
    pthread_mutex_lock(&g_in.mu);
}

void
rs_intern_atfork_parent(void)
{
    pthread_mutex_unlock(&g_in.mu);
}

void
rs_intern_atfork_child(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_in.mu, &a);
    pthread_mutexattr_destroy(&a);
}
