/* catalog_memo.h: each distinct (NVTX domain, range name) matched against
 * the catalog once. A trace repeats a few hundred names millions of times;
 * am_catalog_range scans every catalog row (memmem for the "contains" rows)
 * on each call, so the timeline asks this memo instead. */
#ifndef RECOMP_CATALOG_MEMO_H
#define RECOMP_CATALOG_MEMO_H

#include <stddef.h>
#include <stdint.h>

#include "catalog.h"

typedef struct am_memo_entry am_memo_entry;

/* The last answer per name address (direct-mapped by the pointer): most
 * sources hand out the same pointer for each interned name, and a byte
 * compare with the stored key is cheaper than hashing the name. The
 * compare keeps it right when a buffer is reused for another name. */
typedef struct am_memo_recent {
    const char *name, *domain; /* the caller's pointers */
    const char *key;           /* the memo's own copy (name bytes, domain bytes) */
    uint32_t len, domain_len;
    am_cat_match match;
} am_memo_recent;

#define AM_MEMO_RECENT 64

/* All zero is an empty memo (it lives in structs that are memset). */
typedef struct am_catalog_memo {
    am_memo_entry *slots;    /* open addressing, power-of-two capacity */
    size_t cap, used;
    uint64_t lookups, misses; /* for tests and the benchmark notes */
    am_memo_recent recent[AM_MEMO_RECENT];
} am_catalog_memo;

/* am_catalog_range(name, len, domain, domain_len), computed once per
 * distinct (domain, name) and then looked up by a 64-bit FNV-1a hash and a
 * byte compare. The memo keeps its own copy of the bytes (the event's may
 * be unmapped later). Out of memory: the catalog answers directly, the
 * result is the same. */
am_cat_match am_memo_range(am_catalog_memo *m, const char *name, size_t len, const char *domain,
                           size_t domain_len);
/* Free the memo; it is empty (all zero) again. */
void am_memo_fini(am_catalog_memo *m);

#endif
