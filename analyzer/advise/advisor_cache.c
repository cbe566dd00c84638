/* advisor_cache.c: the caching allocator's reserved bytes along one
 * candidate's replayed timeline (docs/advisor.md "Budget"; issue 14 inv. 4).
 *
 * A model of PyTorch's CUDA caching allocator, after PyTorch's
 * c10/cuda/CUDACachingAllocator.cpp (the constants kMinBlockSize, kSmallSize,
 * kSmallBuffer, kLargeBuffer, kMinLargeAlloc, kRoundLarge), default settings
 * (no max_split_size, no expandable segments, one stream, one pool):
 *   round_size     < 512 B -> 512 B, else a multiple of 512 B
 *   pools          <= 1 MiB small, else large
 *   new segment    small -> 2 MiB; large < 10 MiB -> 20 MiB; else the
 *                  request rounded up to 2 MiB
 *   free block     best fit: the smallest free block of the pool that holds
 *                  the request, the lowest address among equals
 *   split          small: remainder >= 512 B; large: remainder > 1 MiB
 *   free           merges with free neighbours of the same segment
 *   limit          a new segment that would pass the device's limit
 *                  (capacity - memory outside PyTorch) first releases every
 *                  wholly free segment, as PyTorch does after a failed
 *                  cudaMalloc (release_cached_blocks, then retry)
 * The peak of reserved bytes is what the job needs from the device; reserved
 * - allocated at that point is the cache that prediction carries.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"

#define K_MIN_BLOCK   512ull
#define K_SMALL_SIZE  (1ull << 20)
#define K_SMALL_BUF   (2ull << 20)
#define K_LARGE_BUF   (20ull << 20)
#define K_MIN_LARGE   (10ull << 20)
#define K_ROUND_LARGE (2ull << 20)
#define NIL           UINT32_MAX

typedef struct cblock {
    uint64_t addr, size;
    uint32_t prev, next;      /* neighbours in the segment, NIL */
    uint8_t free, small;
} cblock;

typedef struct flist {        /* free blocks of one pool, sorted by (size, addr) */
    uint32_t *v;
    size_t n, cap;
} flist;

struct adv_cache_sim {
    cblock *b;
    size_t nb, capb;
    uint32_t *spare;          /* reusable block indices */
    size_t nspare, capspare;
    uint32_t *h;              /* alloc id -> block index + 1, 0 none */
    size_t nids;
    flist pool[2];            /* 0 large, 1 small */
    uint64_t next_addr, reserved, allocated, limit;
    int failed;               /* out of memory in the model: stop counting */
    /* PYTORCH_CUDA_ALLOC_CONF (adv_cache_configure) */
    uint64_t max_split;       /* max_split_size_mb in bytes, UINT64_MAX none */
    uint64_t non_split_round; /* max_non_split_rounding_mb: an oversize request takes a
                               * cached block smaller than size + this (kLargeBuffer) */
    int expandable;           /* expandable_segments:True */
    uint32_t tail[2];         /* expandable: each pool's last block, NIL none */
    uint64_t xend[2];         /* expandable: each pool's mapped end address */
    int departed;             /* the fed stream has left the recorded one (adv_cache_depart) */
    uint64_t served_step;     /* since then: the largest adv_cache_step of a block served
                               * from the cache (adv_cache_served_step) */
};

static int
fl_less(const adv_cache_sim *s, uint32_t a, uint64_t size, uint64_t addr)
{
    return s->b[a].size < size || (s->b[a].size == size && s->b[a].addr < addr);
}

/* first position whose block is >= (size, addr) */
static size_t
fl_lower(const adv_cache_sim *s, const flist *f, uint64_t size, uint64_t addr)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (fl_less(s, f->v[mid], size, addr))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void
fl_insert(adv_cache_sim *s, uint32_t i)
{
    flist *f = &s->pool[s->b[i].small];
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 256;
        uint32_t *q = realloc(f->v, nc * sizeof *q);
        if (!q) {
            s->failed = 1;
            return;
        }
        f->v = q;
        f->cap = nc;
    }
    size_t k = fl_lower(s, f, s->b[i].size, s->b[i].addr);
    memmove(f->v + k + 1, f->v + k, (f->n - k) * sizeof *f->v);
    f->v[k] = i;
    f->n++;
}

static void
fl_remove(adv_cache_sim *s, uint32_t i)
{
    flist *f = &s->pool[s->b[i].small];
    size_t k = fl_lower(s, f, s->b[i].size, s->b[i].addr);
    if (k < f->n && f->v[k] == i) {
        memmove(f->v + k, f->v + k + 1, (f->n - k - 1) * sizeof *f->v);
        f->n--;
    }
}

static uint32_t
blk_new(adv_cache_sim *s)
{
    if (s->nspare)
        return s->spare[--s->nspare];
    if (s->nb == s->capb) {
        size_t nc = s->capb ? s->capb * 2 : 1024;
        cblock *q = realloc(s->b, nc * sizeof *q);
        if (!q) {
            s->failed = 1;
            return NIL;
        }
        s->b = q;
        s->capb = nc;
    }
    return (uint32_t)s->nb++;
}

static void
blk_drop(adv_cache_sim *s, uint32_t i)
{
    if (s->nspare == s->capspare) {
        size_t nc = s->capspare ? s->capspare * 2 : 256;
        uint32_t *q = realloc(s->spare, nc * sizeof *q);
        if (!q)
            return; /* the index is just not reused */
        s->spare = q;
        s->capspare = nc;
    }
    s->spare[s->nspare++] = i;
}

/* A model for alloc ids 0..nids-1; limit: capacity - outside PyTorch in
 * bytes (0: none). NULL when out of memory. */
adv_cache_sim *
adv_cache_new(size_t nids, uint64_t limit)
{
    adv_cache_sim *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->h = calloc(nids ? nids : 1, sizeof *s->h);
    if (!s->h) {
        free(s);
        return NULL;
    }
    s->nids = nids;
    s->limit = limit;
    s->next_addr = 1ull << 40;
    s->max_split = UINT64_MAX;
    s->non_split_round = K_LARGE_BUF;
    s->tail[0] = s->tail[1] = NIL;
    s->xend[0] = K_LARGE_BUF << 20; /* the large pool's expandable segment (page aligned) */
    s->xend[1] = 1ull << 46;  /* the small pool's */
    return s;
}

/* Free the model (NULL is fine). */
void
adv_cache_del(adv_cache_sim *s)
{
    if (!s)
        return;
    free(s->b);
    free(s->spare);
    free(s->h);
    free(s->pool[0].v);
    free(s->pool[1].v);
    free(s);
}

/* the value of key in a "k:v,k:v" allocator setting, NULL when absent */
static const char *
conf_value(const char *conf, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = conf; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        while (*p == ' ')
            p++;
        if (strncmp(p, key, n) == 0 && p[n] == ':')
            return p + n + 1;
    }
    return NULL;
}

void
adv_cache_configure(adv_cache_sim *s, const adv_cfg *cfg)
{
    if (!s || !cfg || !cfg->alloc_conf[0])
        return;
    const char *v = conf_value(cfg->alloc_conf, "max_split_size_mb");
    if (v && strtoull(v, NULL, 10)) {
        /* CUDAAllocatorConfig: values below kLargeBuffer's 20 MiB are raised to it */
        uint64_t mb = strtoull(v, NULL, 10);
        s->max_split = (mb < 20 ? 20 : mb) << 20;
    }
    v = conf_value(cfg->alloc_conf, "max_non_split_rounding_mb");
    if (v && strtoull(v, NULL, 10))
        s->non_split_round = strtoull(v, NULL, 10) << 20;
    v = conf_value(cfg->alloc_conf, "expandable_segments");
    s->expandable = v && (strncmp(v, "True", 4) == 0 || strncmp(v, "true", 4) == 0);
}

/* release every wholly free segment (PyTorch's release_cached_blocks) */
static void
release_free_segments(adv_cache_sim *s)
{
    for (int p = 0; p < 2; p++) {
        flist *f = &s->pool[p];
        size_t w = 0;
        for (size_t k = 0; k < f->n; k++) {
            uint32_t i = f->v[k];
            if (s->b[i].prev == NIL && s->b[i].next == NIL) {
                s->reserved -= s->b[i].size;
                blk_drop(s, i);
            } else {
                f->v[w++] = i;
            }
        }
        f->n = w;
    }
}

/* remove position k of pool list f */
static uint32_t
fl_take(flist *f, size_t k)
{
    uint32_t i = f->v[k];
    memmove(f->v + k, f->v + k + 1, (f->n - k - 1) * sizeof *f->v);
    f->n--;
    return i;
}

/* PyTorch's get_free_block: the smallest free block of the pool holding r
 * bytes, the lowest address among equals; with expandable segments the free
 * block at the mapped end of the segment counts as the size it can grow to,
 * so any other fitting block comes first; with max_split_size no oversize
 * block (>= max_split) for a smaller request, and an oversize request takes
 * only a block below r + max_non_split_rounding. NIL when none. */
static uint32_t
pick_free(adv_cache_sim *s, int small, uint64_t r)
{
    flist *f = &s->pool[small];
    size_t k = fl_lower(s, f, r, 0);
    if (k >= f->n)
        return NIL;
    if (s->expandable && f->v[k] == s->tail[small] && k + 1 < f->n)
        k++;
    uint64_t bs = s->b[f->v[k]].size;
    /* r is a recorded block size: a request below max_split whose segment
     * rest (<= 1 MiB) was not split off records up to 1 MiB more */
    if (r >= s->max_split && r - s->max_split < K_SMALL_SIZE)
        r = s->max_split - 1;
    if (r < s->max_split && bs >= s->max_split)
        return NIL;
    if (r >= s->max_split && bs >= r + s->non_split_round)
        return NIL;
    return fl_take(f, k);
}

/* release a wholly free segment at position k of pool list f */
static void
release_at(adv_cache_sim *s, flist *f, size_t k)
{
    uint32_t i = fl_take(f, k);
    s->reserved -= s->b[i].size;
    blk_drop(s, i);
}

/* PyTorch's release_available_cached_blocks (max_split_size only): the
 * smallest wholly free oversize block of the pool holding max(r, max_split),
 * else oversize ones from the largest down until that many bytes are freed */
static void
release_oversize(adv_cache_sim *s, int small, uint64_t r)
{
    if (s->max_split == UINT64_MAX)
        return;
    flist *f = &s->pool[small];
    uint64_t key = r < s->max_split ? s->max_split : r;
    size_t k = fl_lower(s, f, key, 0);
    if (k < f->n && s->b[f->v[k]].prev == NIL && s->b[f->v[k]].next == NIL) {
        release_at(s, f, k);
        return;
    }
    uint64_t freed = 0;
    for (size_t q = f->n; q-- > 0 && freed < key;) {
        const cblock *c = &s->b[f->v[q]];
        if (c->size < s->max_split)
            break;
        if (c->prev == NIL && c->next == NIL) {
            freed += c->size;
            release_at(s, f, q);
        }
    }
}

/* expandable segments: the page of a pool's segment (2 MiB small, 20 MiB large) */
static uint64_t
xpage(int small)
{
    return small ? K_SMALL_BUF : K_LARGE_BUF;
}

/* expandable segments past the limit: unmap the whole free pages at the end
 * of each pool's segment (PyTorch unmaps the whole free pages inside every
 * free block; only the tail's are modelled) */
static void
release_tails(adv_cache_sim *s)
{
    for (int p = 0; p < 2; p++) {
        uint32_t t = s->tail[p];
        if (t == NIL || !s->b[t].free)
            continue;
        uint64_t pg = xpage(p), base = p ? 1ull << 46 : K_LARGE_BUF << 20;
        uint64_t keep = base + (s->b[t].addr - base + pg - 1) / pg * pg;
        if (keep >= s->xend[p])
            continue;
        uint64_t bytes = s->xend[p] - keep;
        fl_remove(s, t);
        s->b[t].size -= bytes;
        s->xend[p] -= bytes;
        s->reserved -= bytes;
        if (s->b[t].size) {
            fl_insert(s, t);
            continue;
        }
        s->tail[p] = s->b[t].prev;
        if (s->b[t].prev != NIL)
            s->b[s->b[t].prev].next = NIL;
        blk_drop(s, t);
    }
}

/* expandable segments: map pages at the end of the pool's segment until its
 * free tail holds r bytes (PyTorch's try_allocate_expandable_block); returns
 * the tail block, out of the free list */
static uint32_t
grow_tail(adv_cache_sim *s, int small, uint64_t r)
{
    for (int pass = 0; pass < 2; pass++) {
        uint32_t t = s->tail[small];
        uint64_t have = t != NIL && s->b[t].free ? s->b[t].size : 0;
        /* a free tail that holds r but was refused by max_split's rules is
         * still the candidate PyTorch's expandable path maps nothing for */
        uint64_t pg = xpage(small), bytes = have >= r ? 0 : (r - have + pg - 1) / pg * pg;
        if (!pass && s->limit && s->reserved + bytes > s->limit) {
            release_tails(s);
            continue;
        }
        uint32_t i = t;
        if (have) {
            fl_remove(s, t);
            s->b[t].size += bytes;
        } else {
            i = blk_new(s);
            if (i == NIL)
                return NIL;
            s->b[i] = (cblock){s->xend[small], bytes, t, NIL, 1, (uint8_t)small};
            if (t != NIL)
                s->b[t].next = i;
            s->tail[small] = i;
        }
        s->xend[small] += bytes;
        s->reserved += bytes;
        return i;
    }
    return NIL;
}

/* a new segment for r bytes (PyTorch's alloc_block): small 2 MiB, large below
 * 10 MiB 20 MiB, else r rounded up to 2 MiB; past the limit the cached
 * blocks are released first, as PyTorch does after cudaMalloc fails
 * (release_available_cached_blocks, then release_cached_blocks) */
static uint32_t
new_segment(adv_cache_sim *s, int small, uint64_t r)
{
    uint64_t seg = small ? K_SMALL_BUF
                   : r < K_MIN_LARGE ? K_LARGE_BUF
                                     : (r + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
    if (s->limit && s->reserved + seg > s->limit)
        release_oversize(s, small, r);
    if (s->limit && s->reserved + seg > s->limit)
        release_free_segments(s);
    uint32_t i = blk_new(s);
    if (i == NIL)
        return NIL;
    s->b[i] = (cblock){s->next_addr, seg, NIL, NIL, 0, (uint8_t)small};
    s->next_addr += seg;
    s->reserved += seg;
    return i;
}

/* Allocate size bytes for id: PyTorch's malloc -- a cached block
 * (pick_free), else a new segment (new_segment) or, with expandable
 * segments, more pages (grow_tail); the block is split when should_split
 * says so (small pool or expandable: a rest >= 512 B; large: a rest > 1 MiB
 * of a request below max_split_size). Out of memory in the model stops it
 * counting (reserved stays at its last value). */
void
adv_cache_alloc(adv_cache_sim *s, uint32_t id, uint64_t size)
{
    if (s->failed || id >= s->nids)
        return;
    uint64_t r = size < K_MIN_BLOCK ? K_MIN_BLOCK : (size + K_MIN_BLOCK - 1) / K_MIN_BLOCK *
                                                     K_MIN_BLOCK;
    int small = r <= K_SMALL_SIZE;
    uint32_t i = pick_free(s, small, r);
    if (i != NIL && s->departed) {
        uint64_t st = adv_cache_step(s, size);
        if (st > s->served_step)
            s->served_step = st;
    }
    if (i == NIL)
        i = s->expandable ? grow_tail(s, small, r) : new_segment(s, small, r);
    if (i == NIL)
        return;
    uint64_t rest = s->b[i].size - r;
    int split = small || s->expandable ? rest >= K_MIN_BLOCK
                                       : r < s->max_split && rest > K_SMALL_SIZE;
    if (split) {
        uint32_t n = blk_new(s);
        if (n != NIL) {
            s->b[n] = (cblock){s->b[i].addr + r, rest, i, s->b[i].next, 1, (uint8_t)small};
            if (s->b[i].next != NIL)
                s->b[s->b[i].next].prev = n;
            else if (s->expandable && s->tail[small] == i)
                s->tail[small] = n;
            s->b[i].next = n;
            s->b[i].size = r;
            fl_insert(s, n);
        }
    }
    s->b[i].free = 0;
    s->allocated += s->b[i].size;
    if (s->h[id])
        adv_cache_free(s, id); /* a stale handle: the model drops it */
    s->h[id] = i + 1;
}

/* merge free block j into its free predecessor i (same segment) */
static void
merge(adv_cache_sim *s, uint32_t i, uint32_t j)
{
    fl_remove(s, j);
    s->b[i].size += s->b[j].size;
    s->b[i].next = s->b[j].next;
    if (s->b[j].next != NIL)
        s->b[s->b[j].next].prev = i;
    blk_drop(s, j);
}

/* Free id's block, merging it with free neighbours of its segment; an id
 * without a block is ignored. */
void
adv_cache_free(adv_cache_sim *s, uint32_t id)
{
    if (s->failed || id >= s->nids || !s->h[id])
        return;
    uint32_t i = s->h[id] - 1;
    s->h[id] = 0;
    s->allocated -= s->b[i].size;
    s->b[i].free = 1;
    uint32_t p = s->b[i].prev, n = s->b[i].next;
    if (n != NIL && s->b[n].free)
        merge(s, i, n);
    if (p != NIL && s->b[p].free) {
        fl_remove(s, p);
        merge(s, p, i);
        i = p;
    }
    if (s->expandable && s->b[i].next == NIL)
        s->tail[s->b[i].small] = i;
    fl_insert(s, i);
}

/* The most one request of size bytes can add to this model's reserved bytes
 * when it finds no cached block (bytes; 0 for NULL): the segment PyTorch's
 * alloc_block opens for it (get_allocation_size: small 2 MiB; large below
 * 10 MiB 20 MiB; else the request rounded up to 2 MiB), or with expandable
 * segments the request rounded up to the pool's pages (2 MiB / 20 MiB). */
uint64_t
adv_cache_step(const adv_cache_sim *s, uint64_t size)
{
    if (!s)
        return 0;
    uint64_t r = size < K_MIN_BLOCK ? K_MIN_BLOCK : (size + K_MIN_BLOCK - 1) / K_MIN_BLOCK *
                                                     K_MIN_BLOCK;
    int small = r <= K_SMALL_SIZE;
    if (s->expandable)
        return (r + xpage(small) - 1) / xpage(small) * xpage(small);
    return small ? K_SMALL_BUF
           : r < K_MIN_LARGE ? K_LARGE_BUF
                             : (r + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

/* From now on the stream fed to the model is a rewrite that has left the
 * recorded one (the first discard or replay a candidate inserts, or the
 * first op an undo changed): every block the model then serves from its
 * cache is one the run may have found no free block for, since what the
 * free blocks hold hangs on bytes and an order the trace does not record
 * (a recorded size is a block with its unsplit rest, not the request:
 * docs/advisor.md "Reserved uncertainty"). No-op for NULL. */
void
adv_cache_depart(adv_cache_sim *s)
{
    if (s)
        s->departed = 1;
}

/* The largest step (adv_cache_step, bytes: the segment a native request
 * opens, or its pages under expandable segments) of a block the model served
 * from its cache after adv_cache_depart; 0 before it, when none was, or for
 * NULL. A cached block's request finds no free block in the run when the
 * rewrite's small blocks landed elsewhere, and the run then opens that one
 * segment more than the model: measured on real Megatron-Core with
 * Transformer Engine's spec, the loss's 500 MiB fp32 logits on llama-te
 * selective[core_attn,mlp] rank 1 (-16.3% reserved), 250 MiB on moe-grouped
 * selective[moe_act] rank 1 (-9.0%), docs/validation/megatron-core.md. */
uint64_t
adv_cache_served_step(const adv_cache_sim *s)
{
    return s ? s->served_step : 0;
}

/* Where an undone trace (adv_trace_undo, which keeps the allocation ids)
 * leaves the recorded trace t: 1 + the first op position at which their op
 * streams differ (an op moved, dropped or added), or 1 + the shorter
 * length when one is a prefix of the other; 0 when they agree. O(ops). */
uint32_t
adv_trace_departure(const adv_trace *t, const adv_trace *undone)
{
    size_t n = t->nops < undone->nops ? t->nops : undone->nops;
    for (size_t p = 0; p < n; p++)
        if (t->ops[p] != undone->ops[p])
            return (uint32_t)p + 1;
    return t->nops != undone->nops ? (uint32_t)n + 1 : 0;
}

int
adv_cache_where(const adv_cache_sim *s, uint32_t id, uint64_t *seg, uint64_t *seg_size,
                uint64_t *off)
{
    if (!s || id >= s->nids || !s->h[id])
        return -1;
    uint32_t i = s->h[id] - 1, head = i;
    while (s->b[head].prev != NIL)
        head = s->b[head].prev;
    uint64_t size = 0;
    for (uint32_t j = head; j != NIL; j = s->b[j].next)
        size += s->b[j].size;
    /* expandable segments: one segment per pool from its mapped base */
    uint64_t base = !s->expandable ? 1ull << 40 : s->b[i].small ? 1ull << 46 : K_LARGE_BUF << 20;
    *seg = s->b[head].addr - base;
    *seg_size = size;
    *off = s->b[i].addr - s->b[head].addr;
    return 0;
}

/* The model's reserved bytes now (segments held), 0 for NULL. */
uint64_t
adv_cache_reserved(const adv_cache_sim *s)
{
    return s ? s->reserved : 0;
}

/* The device-level peak of iteration k of rank r (bytes), else its
 * tensor-level peak when the device level was not recorded (0 unknown). */
static uint64_t
iter_peak(const am_rank *r, size_t k)
{
    const am_iteration *it = &r->iters[k];
    return it->peak[AM_L_DEVICE] ? it->peak[AM_L_DEVICE] : it->peak[AM_L_TENSOR];
}

/* Whether the allocator's cache a prediction carries for rank r was seen at
 * a steady state (docs/advisor.md "The allocator model", short history).
 * The model replays the recorded stream, so its cache term is what that
 * stream built; a trace that ends early (a fatal OOM, a trace not closed, a
 * capped or windowed one) before two complete iterations, or while the
 * device's memory still grew from the second-last complete iteration to the
 * last (segments are still being added: the first optimizer step's state,
 * the next iteration's fragmentation), has not shown the cache the job
 * keeps, so the term is a lower bound. Complete iterations: those before the
 * OOM's iteration; without an OOM, all but the last of a trace that was not
 * closed or not wholly recorded. Returns 1 (short, *why says why in one
 * clause) or 0 (a job that ran to its end, or a steady cache). */
int
adv_cache_history(const am_rank *r, char *why, size_t n)
{
    int closed = r->src ? r->src->meta.closed : 1;
    int early = (r->oom && !r->oom->past_limit) || !closed || !r->coverage.complete;
    if (!early)
        return 0;
    size_t done = 0;
    for (size_t k = 0; k < r->niters; k++) {
        if (r->oom && !r->oom->past_limit ? r->iters[k].number >= r->oom->iteration
                                          : k + 1 == r->niters)
            break;
        done++;
    }
    const char *end = r->oom && !r->oom->past_limit ? "ends in an OOM"
                      : !closed                      ? "ends without closing"
                                                     : "is not wholly recorded";
    if (done < 2) {
        snprintf(why, n, "rank %d's trace %s after %zu complete iteration%s, before a "
                         "steady state of the allocator's cache",
                 r->rank, end, done, done == 1 ? "" : "s");
        return 1;
    }
    uint64_t a = iter_peak(r, done - 2), b = iter_peak(r, done - 1);
    if (b > a) {
        snprintf(why, n, "rank %d's trace %s while its memory still grew (iteration %d "
                         "peaked %.2f GiB, iteration %d %.2f GiB)",
                 r->rank, end, r->iters[done - 2].number, (double)a / (1 << 30),
                 r->iters[done - 1].number, (double)b / (1 << 30));
        return 1;
    }
    return 0;
}
