/* ms_alloc.c: a model of PyTorch's CUDA caching allocator
 * (c10/cuda/CUDACachingAllocator.cpp, [PT] in docs/sources.md),
 * calling cudaMalloc/cudaFree through this library's PLT.
 *
 *   round_size       < 512 -> 512, else a multiple of 512
 *   pools            <= 1 MiB small, else large (per default / private pool)
 *   segment size     small -> 2 MiB; < 10 MiB -> 20 MiB; else 2 MiB multiple
 *   get_free_block   best fit (smallest, then lowest address) in the pool
 *                    (expandable segments: the free block at the mapped end
 *                    only when no other block fits);
 *                    with max_split_size: no block >= max_split for a smaller
 *                    request, oversize requests take a block < size + 20 MiB
 *   should_split     small: remainder >= 512; large: size < max_split and
 *                    remainder > 1 MiB
 *   free             merge with free neighbours of the same segment
 *   OOM path         alloc_block fails -> release_available_cached_blocks
 *                    (only with max_split_size) -> release_cached_blocks
 *                    (cudaFree every unsplit cached block) -> retry once
 *                    -> cudaMemGetInfo and OOM
 * Tensor modes: backend:cudaMallocAsync -> one cudaMallocAsync/cudaFreeAsync
 * per tensor; PYTORCH_NO_CUDA_MEMORY_CACHING -> one cudaMalloc/cudaFree.
 * expandable_segments:True (with the driver VMM double, MS_HAVE_VMM): one
 * expandable segment per pool size class, a VA range as large as the device
 * reserved with cuMemAddressReserve and grown page by page (2 MiB small,
 * 20 MiB large) with cuMemCreate + cuMemMap + cuMemSetAccess at its end; the
 * driver functions come from cudaGetDriverEntryPointByVersion(name, 12000),
 * as c10::cuda::DriverAPI gets them. Free blocks merge across the whole
 * range; on OOM the whole pages of every free block are unmapped
 * (cuMemUnmap + cuMemRelease; PyTorch's release_blocks / unmap_block), and
 * the mapping is retried: unmapped holes are mapped again, lowest address
 * first (try_allocate_expandable_block), else the chain's end grows. Without
 * the double the setting is refused.
 * Every block alloc/free is reported through ms_report_block (PyTorch's
 * reportMemoryUsageToProfiler).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms_cuda.h"
#include "ms_internal.h"

#define K_MIN_BLOCK   512ull
#define K_SMALL_SIZE  (1ull << 20)
#define K_SMALL_BUF   (2ull << 20)
#define K_LARGE_BUF   (20ull << 20)
#define K_MIN_LARGE   (10ull << 20)
#define K_ROUND_LARGE (2ull << 20)
#define MAX_POOLS     32          /* pool 0 default, 1.. private */
#define HBUCKETS      65536

typedef struct block {
    uint64_t ptr, size;
    int pool;                     /* pool id */
    int small;
    int allocated;
    int unmapped;                 /* expandable segments: address space without pages */
    struct block *prev, *next;    /* neighbours in the segment */
    struct block *fprev, *fnext;  /* free list */
    struct block *hnext;          /* live-pointer hash chain */
} block;

typedef struct pool {
    block *free_head[2];          /* [large, small] */
    int used;
    uint64_t reserved;
} pool;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_inited = -1;         /* mode once initialised */
static int g_device;
static uint64_t g_max_split = UINT64_MAX;
static pool g_pools[MAX_POOLS];
static int g_cur_pool;            /* 0 unless a private pool is active */
static int g_next_pool = 1;
static block *g_hash[HBUCKETS];
static ms_stats g_st;

#ifdef MS_HAVE_VMM
#define MS_HAVE_EXPANDABLE 1
static int expandable_init(void);
#endif

static uint64_t
hkey(uint64_t p)
{
    return (p >> 9) * 0x9E3779B97F4A7C15ull >> 48;
}

static void
hput(block *b)
{
    uint64_t k = hkey(b->ptr) % HBUCKETS;
    b->hnext = g_hash[k];
    g_hash[k] = b;
}

static block *
hget(uint64_t p, int remove)
{
    uint64_t k = hkey(p) % HBUCKETS;
    for (block **pp = &g_hash[k]; *pp; pp = &(*pp)->hnext) {
        if ((*pp)->ptr == p) {
            block *b = *pp;
            if (remove)
                *pp = b->hnext;
            return b;
        }
    }
    return NULL;
}

static void
flist_add(block *b)
{
    block **h = &g_pools[b->pool].free_head[b->small];
    b->fprev = NULL;
    b->fnext = *h;
    if (*h)
        (*h)->fprev = b;
    *h = b;
}

static void
flist_del(block *b)
{
    block **h = &g_pools[b->pool].free_head[b->small];
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        *h = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
}

static uint64_t
round_size(uint64_t s)
{
    if (s < K_MIN_BLOCK)
        return K_MIN_BLOCK;
    return (s + K_MIN_BLOCK - 1) / K_MIN_BLOCK * K_MIN_BLOCK;
}

static uint64_t
allocation_size(uint64_t s)
{
    if (s <= K_SMALL_SIZE)
        return K_SMALL_BUF;
    if (s < K_MIN_LARGE)
        return K_LARGE_BUF;
    return (s + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

static int
parse_conf(const char *conf)
{
    /* "key:value,key:value" */
    int mode = MS_MODE_NATIVE;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", conf);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        char *colon = strchr(tok, ':');
        if (!colon)
            continue;
        *colon = 0;
        const char *k = tok, *v = colon + 1;
        if (!strcmp(k, "backend")) {
            if (!strcmp(v, "cudaMallocAsync"))
                mode = MS_MODE_ASYNC;
            else if (!strcmp(v, "native"))
                mode = mode == MS_MODE_ASYNC ? MS_MODE_NATIVE : mode;
        } else if (!strcmp(k, "expandable_segments")) {
            if (!strcmp(v, "True") || !strcmp(v, "true") || !strcmp(v, "1"))
                mode = MS_MODE_EXPANDABLE;
        } else if (!strcmp(k, "max_split_size_mb")) {
            uint64_t mb = strtoull(v, NULL, 10);
            if (mb < 20)
                mb = 20;
            g_max_split = mb << 20;
        }
    }
    return mode;
}

static int
env_true(const char *name)
{
    const char *s = getenv(name);
    return s && *s && strcmp(s, "0") && strcmp(s, "false") && strcmp(s, "False");
}

int
ms_alloc_init(int device)
{
    pthread_mutex_lock(&g_mu);
    if (g_inited >= 0) {
        int m = g_inited;
        pthread_mutex_unlock(&g_mu);
        return m;
    }
    const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
    if (!conf || !*conf)
        conf = getenv("PYTORCH_ALLOC_CONF");
    int mode = conf ? parse_conf(conf) : MS_MODE_NATIVE;
    if (env_true("PYTORCH_NO_CUDA_MEMORY_CACHING"))
        mode = MS_MODE_NOCACHE;
    if (mode == MS_MODE_EXPANDABLE) {
#ifndef MS_HAVE_EXPANDABLE
        ms_set_message("expandable_segments:True needs the driver VMM calls (cuMemCreate/cuMemMap); "
                       "this megasim build has no mock libcuda (tests/doubles part 2) to make them%s", "");
        pthread_mutex_unlock(&g_mu);
        return MS_EREFUSED;
#endif
    }
    g_device = device;
#ifdef MS_HAVE_EXPANDABLE
    if (mode == MS_MODE_EXPANDABLE && expandable_init() != 0) {
        pthread_mutex_unlock(&g_mu);
        return MS_EREFUSED;
    }
#endif
    g_inited = mode;
    memset(&g_st, 0, sizeof g_st);
    g_st.mode = mode;
    g_st.device = device;
    g_pools[0].used = 1;
    pthread_mutex_unlock(&g_mu);
    return mode;
}

static void
note_peaks(void)
{
    if (g_st.allocated > g_st.max_allocated)
        g_st.max_allocated = g_st.allocated;
    if (g_st.reserved > g_st.max_reserved)
        g_st.max_reserved = g_st.reserved;
}

#ifdef MS_HAVE_EXPANDABLE
static int expandable_tail(const block *b, int small);
#endif

static block *
get_free_block(int poolid, int small, uint64_t size)
{
    block *best = NULL, *tail = NULL;
    for (block *b = g_pools[poolid].free_head[small]; b; b = b->fnext) {
        if (b->size < size)
            continue;
#ifdef MS_HAVE_EXPANDABLE
        /* get_free_block's expandable_size: the free block at the mapped end
         * counts as the size it can grow to, so any other fitting block
         * comes first */
        if (expandable_tail(b, small)) {
            if (!tail || b->size < tail->size || (b->size == tail->size && b->ptr < tail->ptr))
                tail = b;
            continue;
        }
#endif
        if (size < g_max_split && b->size >= g_max_split)
            continue;
        if (size >= g_max_split && b->size >= size + K_LARGE_BUF)
            continue;
        if (!best || b->size < best->size || (b->size == best->size && b->ptr < best->ptr))
            best = b;
    }
    if (!best && tail && !(size < g_max_split && tail->size >= g_max_split) &&
        !(size >= g_max_split && tail->size >= size + K_LARGE_BUF))
        best = tail;
    return best;
}

static block *
alloc_block(int poolid, int small, uint64_t alloc_size)
{
    void *p = NULL;
    int rc = (int)cudaMalloc(&p, (size_t)alloc_size);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    g_st.num_cuda_mallocs++;
    block *b = calloc(1, sizeof *b);
    b->ptr = (uint64_t)(uintptr_t)p;
    b->size = alloc_size;
    b->pool = poolid;
    b->small = small;
    g_st.reserved += alloc_size;
    g_st.segments++;
    g_pools[poolid].reserved += alloc_size;
    note_peaks();
    return b;
}

static void
release_block(block *b)
{
    flist_del(b);
    cudaFree((void *)(uintptr_t)b->ptr);
    g_st.num_cuda_frees++;
    g_st.reserved -= b->size;
    g_st.segments--;
    g_pools[b->pool].reserved -= b->size;
    free(b);
}

/* Frees every unsplit cached block of the default pool (and of private pools
 * that were released). Split segments stay: that is the fragmentation. */
static void
release_cached_blocks(void)
{
    for (int p = 0; p < MAX_POOLS; p++) {
        if (p != 0 && g_pools[p].used)
            continue;
        for (int s = 0; s < 2; s++) {
            block *b = g_pools[p].free_head[s];
            while (b) {
                block *n = b->fnext;
                if (!b->prev && !b->next)
                    release_block(b);
                b = n;
            }
        }
    }
}

static void
release_available_cached_blocks(int poolid, int small, uint64_t size)
{
    if (g_max_split == UINT64_MAX)
        return;
    /* free oversize (>= max_split) unsplit blocks, largest first, until size is covered */
    uint64_t freed = 0;
    while (freed < size) {
        block *big = NULL;
        for (block *b = g_pools[poolid].free_head[small]; b; b = b->fnext)
            if (b->size >= g_max_split && !b->prev && !b->next && (!big || b->size > big->size))
                big = b;
        if (!big)
            break;
        freed += big->size;
        release_block(big);
    }
}

#ifdef MS_HAVE_EXPANDABLE
typedef CUresult (*pfn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*pfn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                               unsigned long long);
typedef CUresult (*pfn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*pfn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*pfn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*pfn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*pfn_meminfo)(size_t *, size_t *);
static struct {
    pfn_reserve reserve;
    pfn_create create;
    pfn_map map;
    pfn_access access;
    pfn_unmap unmap;
    pfn_release release;
    pfn_meminfo meminfo;
} g_drv;

typedef struct xseg {
    uint64_t base, va_size, mapped, page; /* mapped: the end of the block chain (VA) */
    CUmemGenericAllocationHandle *handles; /* per page, 0 unmapped */
    block *tail;                  /* last block of the chain (NULL when empty) */
} xseg;
static xseg g_xseg[2];            /* [large, small] */

static int
driver_entry(const char *name, void **fn)
{
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !*fn) {
        ms_set_message("expandable_segments:True: no driver entry point for %s", name);
        return -1;
    }
    return 0;
}

static int
expandable_init(void)
{
    if (driver_entry("cuMemAddressReserve", (void **)&g_drv.reserve) ||
        driver_entry("cuMemCreate", (void **)&g_drv.create) ||
        driver_entry("cuMemMap", (void **)&g_drv.map) ||
        driver_entry("cuMemSetAccess", (void **)&g_drv.access) ||
        driver_entry("cuMemUnmap", (void **)&g_drv.unmap) ||
        driver_entry("cuMemRelease", (void **)&g_drv.release) ||
        driver_entry("cuMemGetInfo", (void **)&g_drv.meminfo))
        return -1;
    size_t f = 0, t = 0;
    g_drv.meminfo(&f, &t);
    for (int sm = 0; sm < 2; sm++) {
        xseg *x = &g_xseg[sm];
        x->page = sm ? K_SMALL_BUF : K_LARGE_BUF;
        /* PyTorch reserves 9/8 of the device's memory per segment, so pages
         * unmapped inside it can be mapped again at its end */
        uint64_t want = (uint64_t)t / 8 * 9;
        x->va_size = (want + x->page - 1) / x->page * x->page;
        CUdeviceptr base = 0;
        if (g_drv.reserve(&base, x->va_size, 0, 0, 0) != CUDA_SUCCESS)
            return -1;
        x->base = base;
        x->handles = calloc(x->va_size / x->page + 1, sizeof *x->handles);
    }
    return 0;
}

/* a free mapped block of an expandable segment */
static int
xfree(const block *b)
{
    return b && !b->allocated && !b->unmapped;
}

/* a free block that can grow in place: the chain's last block, or one whose
 * next neighbour is unmapped (PyTorch's get_free_block counts it as the size
 * it can expand to) */
static int
expandable_tail(const block *b, int small)
{
    return g_inited == MS_MODE_EXPANDABLE &&
           (b == g_xseg[small].tail || (b->next && b->next->unmapped));
}

static void
unlink_block(xseg *x, block *b)
{
    if (b->prev)
        b->prev->next = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        x->tail = b->prev;
    free(b);
}

/* insert n just before b in b's chain */
static void
link_before(block *n, block *b)
{
    n->prev = b->prev;
    n->next = b;
    if (b->prev)
        b->prev->next = n;
    b->prev = n;
}

/* unmaps the pages [at, at + bytes) of x (page aligned) */
static void
unmap_range(xseg *x, uint64_t at, uint64_t bytes)
{
    for (uint64_t a = at; a < at + bytes; a += x->page) {
        uint64_t k = (a - x->base) / x->page;
        g_drv.unmap(a, x->page);
        g_drv.release(x->handles[k]);
        x->handles[k] = 0;
    }
    g_st.reserved -= bytes;
    g_pools[0].reserved -= bytes;
}

/* maps the pages [at, at + bytes) of x, all or none (ExpandableSegment::map
 * releases the handles it made when one cannot be created); 0 ok */
static int
map_range(xseg *x, uint64_t at, uint64_t bytes)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_device;
    CUmemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    desc.location = prop.location;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (at + bytes > x->base + x->va_size)
        return -1;
    uint64_t a = at;
    for (; a < at + bytes; a += x->page) {
        CUmemGenericAllocationHandle h = 0;
        if (g_drv.create(&h, x->page, &prop, 0) != CUDA_SUCCESS)
            break;
        if (g_drv.map(a, x->page, 0, h, 0) != CUDA_SUCCESS) {
            g_drv.release(h);
            break;
        }
        g_drv.access(a, x->page, &desc, 1);
        x->handles[(a - x->base) / x->page] = h;
    }
    g_st.reserved += a - at;
    g_pools[0].reserved += a - at;
    if (a < at + bytes) {
        unmap_range(x, at, a - at);
        return -1;
    }
    note_peaks();
    return 0;
}

/* maps `pages` more pages at the end of segment sm's chain, merged into its
 * free last block; 0 ok */
static int
xseg_grow(int sm, uint64_t pages)
{
    xseg *x = &g_xseg[sm];
    uint64_t bytes = pages * x->page;
    if (!pages || map_range(x, x->base + x->mapped, bytes))
        return -1;
    x->mapped += bytes;
    block *t = x->tail;
    if (xfree(t)) {
        flist_del(t);
        t->size += bytes;
        flist_add(t);
    } else {
        block *b = calloc(1, sizeof *b);
        b->ptr = x->base + x->mapped - bytes;
        b->size = bytes;
        b->pool = 0;
        b->small = sm;
        b->prev = t;
        if (t)
            t->next = b;
        x->tail = b;
        g_st.segments = 2;
        flist_add(b);
    }
    return 0;
}

/* maps up to `want` bytes (rounded up to pages, at most u's size) at the
 * start of the unmapped block u (PyTorch's map_block); the mapped part is a
 * free block merged with its free neighbours, returned; NULL when the
 * pages could not be mapped */
static block *
xseg_map_block(xseg *x, int sm, block *u, uint64_t want)
{
    uint64_t bytes = (want + x->page - 1) / x->page * x->page;
    if (bytes > u->size)
        bytes = u->size;
    if (map_range(x, u->ptr, bytes))
        return NULL;
    block *m = u;
    if (bytes < u->size) {
        m = calloc(1, sizeof *m);
        m->ptr = u->ptr;
        m->size = bytes;
        m->pool = 0;
        m->small = sm;
        link_before(m, u);
        u->ptr += bytes;
        u->size -= bytes;
    }
    m->unmapped = 0;
    if (xfree(m->prev)) {
        block *p = m->prev;
        flist_del(p);
        p->size += m->size;
        unlink_block(x, m);
        m = p;
    }
    if (xfree(m->next)) {
        block *n = m->next;
        flist_del(n);
        m->size += n->size;
        unlink_block(x, n);
    }
    flist_add(m);
    return m;
}

/* PyTorch's try_allocate_expandable_block: a run of free and unmapped
 * blocks from the lowest unmapped one (with the free block just before it)
 * holding size bytes of address space, its unmapped parts mapped, else the
 * free end of the chain grown; the free block of at least size bytes, or
 * NULL when the driver could not map the pages */
static block *
xseg_map_for(int sm, uint64_t size)
{
    xseg *x = &g_xseg[sm];
    block *head = x->tail;
    while (head && head->prev)
        head = head->prev;
    block *c = NULL;
    for (block *u = head; u && !c; u = u->next) {
        if (!u->unmapped)
            continue;
        block *s = xfree(u->prev) ? u->prev : u;
        uint64_t bytes = 0;
        block *w = s;
        for (; w && bytes < size && !w->allocated; w = w->next)
            bytes += w->size;
        if (bytes >= size || !w)
            c = s; /* enough room, or the run reaches the chain's end */
    }
    if (!c && xfree(x->tail))
        c = x->tail;
    if (c && c->unmapped && !(c = xseg_map_block(x, sm, c, size)))
        return NULL;
    while (c && c->size < size && c->next && c->next->unmapped) {
        /* free -> unmapped: map the next block's pages into c */
        if (!(c = xseg_map_block(x, sm, c->next, size - c->size)))
            return NULL;
    }
    uint64_t have = c ? c->size : 0;
    if (have < size && xseg_grow(sm, (size - have + x->page - 1) / x->page))
        return NULL;
    return have < size ? x->tail : c;
}

/* release_cached_blocks for expandable segments (PyTorch's release_blocks
 * and unmap_block): unmap the whole pages of every free block of both
 * segments; unmapped space at the end of a chain leaves it */
static void
xseg_release_free(void)
{
    for (int sm = 0; sm < 2; sm++) {
        xseg *x = &g_xseg[sm];
        block *b = x->tail;
        while (b && b->prev)
            b = b->prev;
        while (b) {
            if (!xfree(b)) {
                b = b->next;
                continue;
            }
            uint64_t lo = x->base + (b->ptr - x->base + x->page - 1) / x->page * x->page;
            uint64_t hi = x->base + (b->ptr + b->size - x->base) / x->page * x->page;
            if (hi <= lo) {
                b = b->next;
                continue;
            }
            unmap_range(x, lo, hi - lo);
            flist_del(b);
            block *after = NULL;
            if (lo > b->ptr) {
                block *p = calloc(1, sizeof *p);
                p->ptr = b->ptr;
                p->size = lo - b->ptr;
                p->pool = 0;
                p->small = sm;
                link_before(p, b);
                flist_add(p);
            }
            if (hi < b->ptr + b->size) {
                after = calloc(1, sizeof *after);
                after->ptr = hi;
                after->size = b->ptr + b->size - hi;
                after->pool = 0;
                after->small = sm;
                after->prev = b;
                after->next = b->next;
                if (b->next)
                    b->next->prev = after;
                else
                    x->tail = after;
                b->next = after;
                flist_add(after);
            }
            b->ptr = lo;
            b->size = hi - lo;
            b->unmapped = 1;
            if (b->prev && b->prev->unmapped) {
                block *p = b->prev;
                p->size += b->size;
                unlink_block(x, b);
                b = p;
            }
            if (b->next && b->next->unmapped) {
                block *n = b->next;
                b->size += n->size;
                unlink_block(x, n);
            }
            block *cont = after ? after->next : b->next;
            if (!b->next) {
                x->mapped = b->ptr - x->base;
                unlink_block(x, b);
            }
            b = cont;
        }
    }
}

static int
malloc_expandable(uint64_t orig, uint64_t *out)
{
    uint64_t size = round_size(orig);
    int small = size <= K_SMALL_SIZE;
    xseg *x = &g_xseg[small];
    block *b = get_free_block(0, small, size);
    if (!b && !(b = xseg_map_for(small, size))) {
        xseg_release_free();
        g_st.num_alloc_retries++;
        if (!(b = xseg_map_for(small, size))) {
            size_t f = 0, tt = 0;
            g_drv.meminfo(&f, &tt);
            g_st.num_ooms++;
            g_st.oom_request = size;
            g_st.oom_free = f;
            g_st.oom_total = tt;
            return MS_EOOM;
        }
    }
    flist_del(b);
    uint64_t rem = b->size - size;
    if (rem >= K_MIN_BLOCK) {
        block *r = calloc(1, sizeof *r);
        r->ptr = b->ptr + size;
        r->size = rem;
        r->pool = 0;
        r->small = small;
        r->prev = b;
        r->next = b->next;
        if (b->next)
            b->next->prev = r;
        else
            x->tail = r;
        b->next = r;
        b->size = size;
        flist_add(r);
    }
    b->allocated = 1;
    hput(b);
    g_st.allocated += b->size;
    g_st.active_blocks++;
    note_peaks();
    *out = b->ptr;
    ms_report_block(b->ptr, (int64_t)b->size, g_st.allocated, g_st.reserved, g_device);
    return MS_OK;
}
#endif

static void
report(uint64_t ptr, int64_t delta)
{
    ms_report_block(ptr, delta, g_st.allocated, g_st.reserved, g_device);
}

static int
malloc_native(uint64_t orig, uint64_t *out)
{
    uint64_t size = round_size(orig);
    int small = size <= K_SMALL_SIZE;
    int poolid = g_cur_pool;
    uint64_t alloc_size = allocation_size(size);
    block *b = get_free_block(poolid, small, size);
    if (b) {
        flist_del(b);
    } else {
        b = alloc_block(poolid, small, alloc_size);
        if (!b) {
            release_available_cached_blocks(poolid, small, size);
            b = alloc_block(poolid, small, alloc_size);
        }
        if (!b) {
            release_cached_blocks();
            g_st.num_alloc_retries++;
            b = alloc_block(poolid, small, alloc_size);
        }
        if (!b) {
            size_t f = 0, t = 0;
            cudaMemGetInfo(&f, &t);
            g_st.num_ooms++;
            g_st.oom_request = alloc_size;
            g_st.oom_free = f;
            g_st.oom_total = t;
            return MS_EOOM;
        }
    }
    uint64_t rem = b->size - size;
    int split = small ? rem >= K_MIN_BLOCK : (size < g_max_split && rem > K_SMALL_SIZE);
    if (split) {
        block *r = calloc(1, sizeof *r);
        r->ptr = b->ptr + size;
        r->size = rem;
        r->pool = b->pool;
        r->small = b->small;
        r->prev = b;
        r->next = b->next;
        if (b->next)
            b->next->prev = r;
        b->next = r;
        b->size = size;
        flist_add(r);
    }
    b->allocated = 1;
    hput(b);
    g_st.allocated += b->size;
    g_st.active_blocks++;
    note_peaks();
    *out = b->ptr;
    report(b->ptr, (int64_t)b->size);
    return MS_OK;
}

static int
free_native(uint64_t ptr)
{
    block *b = hget(ptr, 1);
    if (!b)
        return MS_EINVAL;
    b->allocated = 0;
    g_st.allocated -= b->size;
    g_st.active_blocks--;
    report(ptr, -(int64_t)b->size);
    if (b->prev && !b->prev->allocated && !b->prev->unmapped) {
        block *p = b->prev;
        flist_del(p);
        p->size += b->size;
        p->next = b->next;
        if (b->next)
            b->next->prev = p;
        free(b);
        b = p;
    }
    if (b->next && !b->next->allocated && !b->next->unmapped) {
        block *n = b->next;
        flist_del(n);
        b->size += n->size;
        b->next = n->next;
        if (n->next)
            n->next->prev = b;
        free(n);
    }
#ifdef MS_HAVE_EXPANDABLE
    if (g_inited == MS_MODE_EXPANDABLE && !b->next)
        g_xseg[b->small].tail = b;
#endif
    flist_add(b);
    return MS_OK;
}

/* tensor modes: one CUDA call per tensor; the block records the size */
static int
malloc_direct(uint64_t size, uint64_t *out)
{
    void *p = NULL;
    int rc;
    if (g_inited == MS_MODE_ASYNC) {
        rc = (int)cudaMallocAsync(&p, (size_t)size, 0);
        if (rc != cudaSuccess) {
            /* CudaMallocAsync: synchronize, trim the pool, retry once */
            (void)cudaGetLastError();
            cudaDeviceSynchronize();
            g_st.num_alloc_retries++;
            rc = (int)cudaMallocAsync(&p, (size_t)size, 0);
        }
    } else {
        rc = (int)cudaMalloc(&p, (size_t)size);
    }
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        size_t f = 0, t = 0;
        cudaMemGetInfo(&f, &t);
        g_st.num_ooms++;
        g_st.oom_request = size;
        g_st.oom_free = f;
        g_st.oom_total = t;
        return MS_EOOM;
    }
    g_st.num_cuda_mallocs++;
    block *b = calloc(1, sizeof *b);
    b->ptr = (uint64_t)(uintptr_t)p;
    b->size = size;
    b->allocated = 1;
    hput(b);
    g_st.allocated += size;
    g_st.reserved += size;
    g_st.active_blocks++;
    note_peaks();
    *out = b->ptr;
    report(b->ptr, (int64_t)size);
    return MS_OK;
}

static int
free_direct(uint64_t ptr)
{
    block *b = hget(ptr, 1);
    if (!b)
        return MS_EINVAL;
    g_st.allocated -= b->size;
    g_st.reserved -= b->size;
    g_st.active_blocks--;
    report(ptr, -(int64_t)b->size);
    if (g_inited == MS_MODE_ASYNC)
        cudaFreeAsync((void *)(uintptr_t)ptr, 0);
    else
        cudaFree((void *)(uintptr_t)ptr);
    g_st.num_cuda_frees++;
    free(b);
    return MS_OK;
}

int
ms_alloc(uint64_t size, uint64_t *ptr)
{
    if (g_inited < 0) {
        int m = ms_alloc_init(0);
        if (m < 0)
            return m;
    }
    pthread_mutex_lock(&g_mu);
    int rc;
    if (size == 0) {
        *ptr = 0;
        rc = MS_OK;
    } else if (g_inited == MS_MODE_NATIVE) {
        rc = malloc_native(size, ptr);
#ifdef MS_HAVE_EXPANDABLE
    } else if (g_inited == MS_MODE_EXPANDABLE) {
        rc = malloc_expandable(size, ptr);
#endif
    } else {
        rc = malloc_direct(size, ptr);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int
ms_alloc_free(uint64_t ptr)
{
    if (!ptr)
        return MS_OK;
    pthread_mutex_lock(&g_mu);
    int rc = (g_inited == MS_MODE_NATIVE || g_inited == MS_MODE_EXPANDABLE) ? free_native(ptr)
                                                                              : free_direct(ptr);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

uint64_t
ms_alloc_block_size(uint64_t ptr)
{
    pthread_mutex_lock(&g_mu);
    block *b = hget(ptr, 0);
    uint64_t s = b ? b->size : 0;
    pthread_mutex_unlock(&g_mu);
    return s;
}

int
ms_alloc_empty_cache(void)
{
    pthread_mutex_lock(&g_mu);
    if (g_inited == MS_MODE_NATIVE)
        release_cached_blocks();
#ifdef MS_HAVE_EXPANDABLE
    if (g_inited == MS_MODE_EXPANDABLE)
        xseg_release_free();
#endif
    pthread_mutex_unlock(&g_mu);
    return MS_OK;
}

void
ms_alloc_stats(ms_stats *out)
{
    pthread_mutex_lock(&g_mu);
    g_st.inactive_split = g_st.inactive_split_blocks = g_st.largest_free = 0;
    for (int p = 0; p < MAX_POOLS; p++) {
        for (int s = 0; s < 2; s++) {
            for (block *b = g_pools[p].free_head[s]; b; b = b->fnext) {
                if (b->prev || b->next) {
                    g_st.inactive_split += b->size;
                    g_st.inactive_split_blocks++;
                }
                if (b->size > g_st.largest_free)
                    g_st.largest_free = b->size;
            }
        }
    }
    *out = g_st;
    pthread_mutex_unlock(&g_mu);
}

int
ms_alloc_pool_begin(void)
{
    pthread_mutex_lock(&g_mu);
    int id = 0;
    if (g_next_pool < MAX_POOLS) {
        id = g_next_pool++;
        g_pools[id].used = 1;
        g_cur_pool = id;
    }
    pthread_mutex_unlock(&g_mu);
    return id;
}

int
ms_alloc_pool_use(int id)
{
    pthread_mutex_lock(&g_mu);
    int rc = MS_EINVAL;
    if (id > 0 && id < g_next_pool && g_pools[id].used) {
        g_cur_pool = id;
        rc = MS_OK;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int
ms_alloc_pool_end(void)
{
    pthread_mutex_lock(&g_mu);
    g_cur_pool = 0;
    pthread_mutex_unlock(&g_mu);
    return MS_OK;
}

uint64_t
ms_alloc_pool_reserved(void)
{
    pthread_mutex_lock(&g_mu);
    uint64_t r = 0;
    for (int p = 1; p < MAX_POOLS; p++)
        r += g_pools[p].reserved;
    pthread_mutex_unlock(&g_mu);
    return r;
}
