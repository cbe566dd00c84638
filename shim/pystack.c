/* pystack.c: Python frames in the shim (pystack.h, docs/python-frames.md).
 *
 * Two interned tables, both open addressing with lock-free lookups (a slot
 * is published by a release store of its key) and inserts under one leaf
 * mutex (rank 7 of the shim's lock order, writer.c) that is never held
 * while anything else is done:
 *   frames  code object -> PYFRAME id (qualified name, file, first line);
 *           the code object is kept alive (one reference) so its address
 *           is never reused for another code object;
 *   stacks  (parent PYSTACK id, PYFRAME id) -> PYSTACK id: a trie of the
 *           call stacks seen, so a level of a shadow stack is one id.
 * Records are written after the insert, outside the lock; a fork child's
 * new file gets them all again from rs_pystack_replay (a definition may
 * then appear twice: readers take either, they are equal).
 *
 * The Python side (install, callbacks) is in pystack_py.c.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "pystack.h"
#include "writer.h"

__thread rs_py_tls t_py __attribute__((tls_model("initial-exec")));

#define FRAME_SLOTS (1u << 16)     /* power of two */
#define FRAME_MAX (1u << 15)       /* frames, load factor 1/2 */
#define STACK_SLOTS (1u << 20)
#define STACK_MAX (1u << 19)

struct slot {
    _Atomic uint64_t key;          /* 0 = empty; published last */
    uint32_t id;
    uint32_t pad;
};

struct frame_def { uint32_t name_id, file_id, line; };
struct stack_def { uint32_t parent, frame; };

static struct {
    pthread_mutex_t mu;
    struct slot *frames, *stacks;          /* mmap'd at the first insert */
    struct frame_def *frame_by_id;         /* [id], 1-based */
    struct stack_def *stack_by_id;
    _Atomic uint32_t nframes, nstacks;     /* published after the *_by_id entry */
} g_ps = {.mu = PTHREAD_MUTEX_INITIALIZER};

static inline uint32_t
slot_of(uint64_t key, uint32_t nslots)
{
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & (nslots - 1);
}

/* The id stored under `key`, 0 when absent; *free_slot gets the empty
 * slot where it would go (UINT32_MAX when the table is full). */
static uint32_t
find(struct slot *t, uint32_t nslots, uint64_t key, uint32_t *free_slot)
{
    *free_slot = UINT32_MAX;
    if (!t)
        return 0;
    for (uint32_t i = 0, k = slot_of(key, nslots); i < nslots; i++, k = (k + 1) & (nslots - 1)) {
        uint64_t sk = atomic_load_explicit(&t[k].key, memory_order_acquire);
        if (sk == key)
            return t[k].id;
        if (sk == 0) {
            *free_slot = k;
            return 0;
        }
    }
    return 0;
}

/* Map the tables (under g_ps.mu). Address space only: pages are touched
 * as slots fill. 0 ok, -1 no memory (frames are then not recorded). */
static int
tables_map(void)
{
    if (g_ps.frames)
        return 0;
    size_t fb = FRAME_SLOTS * sizeof(struct slot), sb = STACK_SLOTS * sizeof(struct slot);
    size_t fd = (FRAME_MAX + 1) * sizeof(struct frame_def);
    size_t sd = (STACK_MAX + 1) * sizeof(struct stack_def);
    char *m = mmap(NULL, fb + sb + fd + sd, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    g_ps.frame_by_id = (struct frame_def *)(m + fb + sb);
    g_ps.stack_by_id = (struct stack_def *)(m + fb + sb + fd);
    g_ps.stacks = (struct slot *)(m + fb);
    __atomic_store_n(&g_ps.frames, (struct slot *)m, __ATOMIC_RELEASE);
    return 0;
}

static void
write_frame(uint32_t id, const struct frame_def *f)
{
    rs_rec_pyframe *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    r->h = (rs_record_header){.kind = RS_REC_PYFRAME, .size = sizeof *r, .t_ns = rs_now_ns()};
    r->id = id;
    r->name_id = f->name_id;
    r->file_id = f->file_id;
    r->line = f->line;
    rs_rec_end(r, sizeof *r);
}

static void
write_stack(uint32_t id, const struct stack_def *s)
{
    rs_rec_pystack *r = rs_rec_begin(sizeof *r, RS_UNGATED);
    if (!r)
        return;
    r->h = (rs_record_header){.kind = RS_REC_PYSTACK, .size = sizeof *r, .t_ns = rs_now_ns()};
    r->id = id;
    r->parent = s->parent;
    r->frame = s->frame;
    r->reserved = 0;
    rs_rec_end(r, sizeof *r);
}

uint32_t
rs_pystack_frame_of(uint64_t code)
{
    uint32_t fs;
    return find(__atomic_load_n(&g_ps.frames, __ATOMIC_ACQUIRE), FRAME_SLOTS, code, &fs);
}

/* Intern `code` with its description (strings go to the string table
 * first: rank 3, before taking rank 7). Returns the PYFRAME id, 0 when a
 * table is full. *fresh = 1 when this call added it. */
static uint32_t
frame_add(uint64_t code, const char *name, size_t name_len, const char *file, size_t file_len,
          uint32_t line, int *fresh)
{
    struct frame_def f = {rs_intern(name, name_len), rs_intern(file, file_len), line};
    uint32_t fs, id = 0;
    *fresh = 0;
    pthread_mutex_lock(&g_ps.mu);
    if (tables_map() == 0) {
        id = find(g_ps.frames, FRAME_SLOTS, code, &fs);
        if (!id && fs != UINT32_MAX && atomic_load(&g_ps.nframes) < FRAME_MAX) {
            id = atomic_load(&g_ps.nframes) + 1;
            g_ps.frame_by_id[id] = f;
            g_ps.frames[fs].id = id;
            atomic_store_explicit(&g_ps.frames[fs].key, code, memory_order_release);
            atomic_store_explicit(&g_ps.nframes, id, memory_order_release);
            *fresh = 1;
        }
    }
    pthread_mutex_unlock(&g_ps.mu);
    if (*fresh)
        write_frame(id, &f);
    return id;
}

/* The PYSTACK id of `frame` called from `parent`, interned on first use;
 * 0 when the table is full. */
static uint32_t
stack_of(uint32_t parent, uint32_t frame)
{
    uint64_t key = (uint64_t)parent << 32 | frame;
    uint32_t fs, id = find(g_ps.stacks, STACK_SLOTS, key, &fs);
    if (id)
        return id;
    struct stack_def s = {parent, frame};
    int fresh = 0;
    pthread_mutex_lock(&g_ps.mu);
    if (!(id = find(g_ps.stacks, STACK_SLOTS, key, &fs)) && fs != UINT32_MAX &&
        atomic_load(&g_ps.nstacks) < STACK_MAX) {
        id = atomic_load(&g_ps.nstacks) + 1;
        g_ps.stack_by_id[id] = s;
        g_ps.stacks[fs].id = id;
        atomic_store_explicit(&g_ps.stacks[fs].key, key, memory_order_release);
        atomic_store_explicit(&g_ps.nstacks, id, memory_order_release);
        fresh = 1;
    }
    pthread_mutex_unlock(&g_ps.mu);
    if (fresh)
        write_stack(id, &s);
    return id;
}

/* Push a level for `code` whose frame id is `frame` (0: unknown). A level
 * whose stack cannot be named (a table full, or an unknown level below)
 * holds 0, so no stack is ever reported shorter than it was. */
static void
push_frame(uint64_t code, uint32_t frame)
{
    uint32_t d = t_py.depth;
    if (d < RS_PY_DEPTH) {
        uint32_t parent = d ? t_py.node[d - 1] : 0;
        t_py.node[d] = (frame && (d == 0 || parent)) ? stack_of(parent, frame) : 0;
        t_py.code[d] = code;
    }
    t_py.depth = d + 1;
}

void
rs_pystack_push(uint64_t code, const char *name, size_t name_len, const char *file,
                size_t file_len, uint32_t line)
{
    uint32_t frame = rs_pystack_frame_of(code);
    int fresh;
    if (!frame)
        frame = frame_add(code, name, name_len, file, file_len, line, &fresh);
    push_frame(code, frame);
}

void
rs_pystack_pop(uint64_t code)
{
    uint32_t d = t_py.depth;
    if (d == 0)
        return;                       /* a frame entered before the install */
    if (d > RS_PY_DEPTH) {
        t_py.depth = d - 1;           /* levels past the cap are not checked */
        return;
    }
    for (uint32_t i = d; i-- > 0;) {
        if (t_py.code[i] == code) {
            t_py.depth = i;           /* i < d - 1: levels whose exit was missed */
            return;
        }
    }
    /* not on the stack: entered before the install */
}

void
rs_pystack_replay(void)
{
    uint32_t nf = atomic_load_explicit(&g_ps.nframes, memory_order_acquire);
    for (uint32_t id = 1; id <= nf; id++)
        write_frame(id, &g_ps.frame_by_id[id]);
    uint32_t ns = atomic_load_explicit(&g_ps.nstacks, memory_order_acquire);
    for (uint32_t id = 1; id <= ns; id++)
        write_stack(id, &g_ps.stack_by_id[id]);
}

void
rs_pystack_atfork_prepare(void)
{
    pthread_mutex_lock(&g_ps.mu);
}

void
rs_pystack_atfork_parent(void)
{
    pthread_mutex_unlock(&g_ps.mu);
}

void
rs_pystack_atfork_child(void)
{
    pthread_mutex_init(&g_ps.mu, NULL);
}

uint32_t
rs_pystack_frame_add(uint64_t code, const char *name, size_t name_len, const char *file,
                     size_t file_len, uint32_t line)
{
    int fresh;
    return frame_add(code, name, name_len, file, file_len, line, &fresh);
}

void
rs_pystack_push_id(uint64_t code, uint32_t frame)
{
    push_frame(code, frame);
}
