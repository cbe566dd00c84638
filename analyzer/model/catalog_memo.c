/* catalog_memo.c: see catalog_memo.h. */
#include "catalog_memo.h"

#include <stdlib.h>
#include <string.h>

struct am_memo_entry {
    uint64_t hash;
    char *key;               /* name bytes, then domain bytes; NULL = empty slot */
    uint32_t len, domain_len;
    am_cat_match match;
};

/* Hash of the bytes, 8 at a time: FNV-1a's offset basis and prime
 * (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/) applied
 * per 64-bit word instead of per byte, with a rotation so high bits reach
 * the table index. Quality is enough for a table of a few hundred names;
 * equality is always checked byte for byte. */
static uint64_t
hash_bytes(uint64_t h, const char *p, size_t n)
{
    const uint64_t prime = 0x100000001b3ull;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * prime;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w ^ ((uint64_t)n << 56)) * prime;
    return h ^ (h >> 32);
}

/* The key's hash: the domain's length, the domain, then the name (the
 * length keeps ("ab", "c") and ("a", "bc") apart). */
static uint64_t
key_hash(const char *name, size_t len, const char *domain, size_t domain_len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)domain_len;
    if (domain_len)
        h = hash_bytes(h, domain, domain_len);
    return hash_bytes(h, name, len);
}

static int
same_key(const am_memo_entry *e, uint64_t h, const char *name, size_t len, const char *domain,
         size_t domain_len)
{
    return e->hash == h && e->len == len && e->domain_len == domain_len &&
           memcmp(e->key, name, len) == 0 &&
           (domain_len == 0 || memcmp(e->key + len, domain, domain_len) == 0);
}

/* Double the table (or create it with 256 slots). Returns 0 or -1. */
static int
grow(am_catalog_memo *m)
{
    size_t cap = m->cap ? m->cap * 2 : 256;
    am_memo_entry *s = calloc(cap, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key)
            continue;
        size_t j = (size_t)m->slots[i].hash & (cap - 1);
        while (s[j].key)
            j = (j + 1) & (cap - 1);
        s[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    return 0;
}

am_cat_match
am_memo_range(am_catalog_memo *m, const char *name, size_t len, const char *domain,
              size_t domain_len)
{
    if (!name) /* not a name at all: rare, answered directly */
        return am_catalog_range(NULL, 0, domain, domain_len);
    if (!domain)
        domain_len = 0;
    m->lookups++;
    am_memo_recent *rc = &m->recent[((uintptr_t)name >> 3) % AM_MEMO_RECENT];
    if (rc->key && rc->name == name && rc->domain == domain && rc->len == len &&
        rc->domain_len == domain_len && memcmp(rc->key, name, len) == 0 &&
        (domain_len == 0 || memcmp(rc->key + len, domain, domain_len) == 0))
        return rc->match;
    uint64_t h = key_hash(name, len, domain, domain_len);
    if (m->cap) {
        for (size_t j = (size_t)h & (m->cap - 1); m->slots[j].key; j = (j + 1) & (m->cap - 1))
            if (same_key(&m->slots[j], h, name, len, domain, domain_len)) {
                *rc = (am_memo_recent){name, domain, m->slots[j].key, (uint32_t)len,
                                       (uint32_t)domain_len, m->slots[j].match};
                return m->slots[j].match;
            }
    }
    m->misses++;
    am_cat_match r = am_catalog_range(name, len, domain, domain_len);
    if (len > UINT32_MAX || domain_len > UINT32_MAX)
        return r;
    if ((m->used + 1) * 2 > m->cap && grow(m) < 0)
        return r;
    char *key = malloc(len + domain_len + 1);
    if (!key)
        return r;
    if (len)
        memcpy(key, name, len);
    if (domain_len)
        memcpy(key + len, domain, domain_len);
    size_t j = (size_t)h & (m->cap - 1);
    while (m->slots[j].key)
        j = (j + 1) & (m->cap - 1);
    m->slots[j] = (am_memo_entry){h, key, (uint32_t)len, (uint32_t)domain_len, r};
    m->used++;
    *rc = (am_memo_recent){name, domain, key, (uint32_t)len, (uint32_t)domain_len, r};
    return r;
}

void
am_memo_fini(am_catalog_memo *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}
