/* catalog.c: expands catalog.def into match tables; name lookups. */
#include "catalog.h"

#include <string.h>

#include "model.h"


typedef struct cat_row {
    uint8_t match;
    const char *pat;
    uint16_t len;
    uint8_t signal, boundary, flags;
} cat_row;

/* Identifiers used inside catalog.def rows. */
#define EXACT M_EXACT
#define PREFIX M_PREFIX
#define SUFFIX M_SUFFIX
#define CONTAINS M_CONTAINS
#define FWD AM_SIG_FWD
#define BWD AM_SIG_BWD
#define OPT AM_SIG_OPT
#define STEP AM_SIG_STEP
#define ZERO AM_SIG_ZERO
#define PIPE AM_SIG_PIPE
#define P2P AM_SIG_P2P
#define NCCL AM_SIG_NCCL
#define EVAL AM_SIG_EVAL
#define SAVE AM_SIG_SAVE
#define GSYNC AM_SIG_GSYNC
#define NONE AM_SIG_NONE
#define LAYER AM_CF_LAYER
#define NVTE AM_CF_NVTE
#define ATTN_BWD AM_CF_ATTN_BWD
#define LAYER_FALLBACK AM_CF_LAYER_FALLBACK
#define INHERIT_BD AM_BD_INHERIT
#define BD(b) AM_BD_##b
#define AM_BD_INHERIT_ AM_BD_INHERIT

static const cat_row g_ranges[] = {
#define CAT_RANGE(m, p, s, b, f) {m, p, sizeof(p) - 1, s, BD(b), f},
#include "catalog.def"
};

static const cat_row g_domains[] = {
#define CAT_DOMAIN(m, p, s, b) {m, p, sizeof(p) - 1, s, BD(b), 0},
#include "catalog.def"
};

#undef NCCL
typedef struct thread_row { uint8_t match; const char *pat; uint16_t len; uint8_t role; } thread_row;
#define BACKWARD AM_ROLE_BACKWARD
static const thread_row g_threads[] = {
#define CAT_THREAD(m, p, r) {m, p, sizeof(p) - 1, r},
#include "catalog.def"
};

typedef struct lib_row { uint8_t match; const char *pat; uint16_t len; uint8_t lib; } lib_row;
#define NCCL AM_LIB_NCCL
#define CUBLAS AM_LIB_CUBLAS
#define CUDNN AM_LIB_CUDNN
#define TE AM_LIB_TE
#define PYTORCH AM_LIB_PYTORCH
static const lib_row g_libs[] = {
#define CAT_LIB(m, p, l) {m, p, sizeof(p) - 1, l},
#include "catalog.def"
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

int
am_catalog_name_match(int how, const char *pat, size_t plen, const char *s, size_t len)
{
    switch (how) {
    case M_EXACT:
        return len == plen && memcmp(s, pat, len) == 0;
    case M_PREFIX:
        return len >= plen && memcmp(s, pat, plen) == 0;
    case M_SUFFIX:
        return len >= plen && memcmp(s + len - plen, pat, plen) == 0;
    case M_CONTAINS:
        return plen <= len && memmem(s, len, pat, plen) != NULL;
    }
    return 0;
}

am_cat_match
am_catalog_range(const char *name, size_t len, const char *domain, size_t domain_len)
{
    am_cat_match m = {AM_SIG_NONE, AM_BD_INHERIT, 0, -1};
    if (domain && domain_len) {
        for (size_t i = 0; i < NELEM(g_domains); i++)
            if (am_catalog_name_match(g_domains[i].match, g_domains[i].pat, g_domains[i].len,
                                      domain, domain_len)) {
                m.signal = g_domains[i].signal;
                m.boundary = g_domains[i].boundary;
                return m;
            }
    }
    if (!name)
        return m;
    for (size_t i = 0; i < NELEM(g_ranges); i++)
        if (am_catalog_name_match(g_ranges[i].match, g_ranges[i].pat, g_ranges[i].len, name, len)) {
            m.signal = g_ranges[i].signal;
            m.boundary = g_ranges[i].boundary;
            m.flags = g_ranges[i].flags;
            m.rule = (int16_t)i;
            return m;
        }
    return m;
}

const char *
am_catalog_rule_pattern(int rule)
{
    return rule >= 0 && (size_t)rule < NELEM(g_ranges) ? g_ranges[rule].pat : "";
}

am_role
am_catalog_thread(const char *name)
{
    if (!name)
        return AM_ROLE_OTHER;
    size_t len = strlen(name);
    for (size_t i = 0; i < NELEM(g_threads); i++)
        if (am_catalog_name_match(g_threads[i].match, g_threads[i].pat, g_threads[i].len, name,
                                  len))
            return (am_role)g_threads[i].role;
    return AM_ROLE_OTHER;
}

int
am_catalog_lib(const char *path, size_t len)
{
    const char *base = path;
    for (size_t i = 0; i < len; i++)
        if (path[i] == '/')
            base = path + i + 1;
    size_t blen = len - (size_t)(base - path);
    if (blen == 0)
        return AM_LIB_UNKNOWN;
    for (size_t i = 0; i < NELEM(g_libs); i++)
        if (am_catalog_name_match(g_libs[i].match, g_libs[i].pat, g_libs[i].len, base, blen))
            return g_libs[i].lib;
    return AM_LIB_OTHER;
}

const char *
am_phase_name(int p)
{
    static const char *const n[] = {
#define X(x) #x,
        AM_PHASES(X)
#undef X
    };
    return p >= 0 && (size_t)p < NELEM(n) ? n[p] : "unknown";
}

const char *
am_boundary_name(int b)
{
    static const char *const n[] = {
#define X(x) #x,
        AM_BOUNDARIES(X)
#undef X
    };
    return b >= 0 && (size_t)b < NELEM(n) ? n[b] : "unknown";
}

const char *
am_lib_name(int lib)
{
    static const char *const n[] = {"unknown", "pytorch", "nccl", "cublas",
                                    "transformer_engine", "cudnn", "other"};
    return lib >= 0 && (size_t)lib < NELEM(n) ? n[lib] : "unknown";
}

const char *
am_coll_name(int op)
{
    static const char *const n[] = {"none", "all_reduce", "reduce_scatter", "all_gather",
                                    "broadcast", "reduce", "send", "recv", "all_to_all",
                                    "group_start", "group_end", "comm_init", "comm_split",
                                    "comm_destroy"};
    return op >= 0 && (size_t)op < NELEM(n) ? n[op] : "unknown";
}
