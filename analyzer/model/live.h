/* live.h: the live set of one level: allocations keyed by (space, address),
 * open addressing with backward-shift deletion. Memory: O(live entries). */
#ifndef RECOMP_ANALYZER_LIVE_H
#define RECOMP_ANALYZER_LIVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct live_ent {
    uint64_t addr;
    uint64_t size;            /* bytes */
    uint64_t seq;             /* ordinal of the allocating event; 0 = empty slot */
    uint8_t space, phase, boundary, lib;
    int32_t layer;            /* raw local layer counter */
    int16_t fwd;              /* its forward pass (am_attr.fwd) */
    uint8_t first;            /* am_attr.first */
    uint32_t site;            /* allocation site: index + 1 into am_rank.sites, 0 none */
} live_ent;

typedef struct live_set {
    live_ent *slots;
    size_t cap;               /* power of two */
    size_t count;
    uint64_t bytes;           /* sum of sizes */
} live_set;

void live_init(live_set *l);
void live_fini(live_set *l);
void live_clear(live_set *l);
/* Insert (replacing an entry with the same key). 0 ok, -1 out of memory. */
int live_put(live_set *l, const live_ent *e);
/* live_put that also says what it replaced: 1 when an entry with the same
 * key was replaced (copied into *replaced when not NULL), 0 when inserted,
 * -1 out of memory. */
int live_put_old(live_set *l, const live_ent *e, live_ent *replaced);
/* The entry for key, or NULL. */
live_ent *live_get(live_set *l, uint8_t space, uint64_t addr);
/* Remove key; stores the removed entry in *out when not NULL. 1 removed. */
int live_del(live_set *l, uint8_t space, uint64_t addr, live_ent *out);

#define LIVE_FOREACH(l, e) \
    for (live_ent *e = (l)->slots; e && e < (l)->slots + (l)->cap; e++) if (e->seq)

#endif
