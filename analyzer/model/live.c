/* live.c: open-addressing hash of live allocations (see live.h). */
#include "live.h"

#include <stdlib.h>
#include <string.h>

static inline size_t
hash(uint8_t space, uint64_t addr, size_t mask)
{
    uint64_t x = addr ^ ((uint64_t)space << 61);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & mask;
}

void
live_init(live_set *l)
{
    memset(l, 0, sizeof *l);
}

void
live_fini(live_set *l)
{
    free(l->slots);
    memset(l, 0, sizeof *l);
}

void
live_clear(live_set *l)
{
    if (l->slots)
        memset(l->slots, 0, l->cap * sizeof *l->slots);
    l->count = 0;
    l->bytes = 0;
}

static int
rehash(live_set *l, size_t ncap)
{
    live_ent *old = l->slots;
    size_t ocap = l->cap;
    live_ent *s = calloc(ncap, sizeof *s);
    if (!s)
        return -1;
    l->slots = s;
    l->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].seq) {
            size_t j = hash(old[i].space, old[i].addr, ncap - 1);
            while (s[j].seq)
                j = (j + 1) & (ncap - 1);
            s[j] = old[i];
        }
    free(old);
    return 0;
}

live_ent *
live_get(live_set *l, uint8_t space, uint64_t addr)
{
    if (!l->cap)
        return NULL;
    size_t mask = l->cap - 1, j = hash(space, addr, mask);
    while (l->slots[j].seq) {
        if (l->slots[j].addr == addr && l->slots[j].space == space)
            return &l->slots[j];
        j = (j + 1) & mask;
    }
    return NULL;
}

int
live_put(live_set *l, const live_ent *e)
{
    return live_put_old(l, e, NULL) < 0 ? -1 : 0;
}

int
live_put_old(live_set *l, const live_ent *e, live_ent *replaced)
{
    /* one probe finds the key or the empty slot it goes to (a lookup and
     * then a second probe for the slot were two walks of the same chain) */
    if ((l->count + 1) * 2 > l->cap) {
        live_ent *old = live_get(l, e->space, e->addr);
        if (!old && rehash(l, l->cap ? l->cap * 2 : 1024) < 0)
            return -1;
    }
    size_t mask = l->cap - 1, j = hash(e->space, e->addr, mask);
    for (; l->slots[j].seq; j = (j + 1) & mask) {
        live_ent *old = &l->slots[j];
        if (old->addr == e->addr && old->space == e->space) {
            if (replaced)
                *replaced = *old;
            l->bytes -= old->size;
            *old = *e;
            l->bytes += e->size;
            return 1;
        }
    }
    l->slots[j] = *e;
    l->count++;
    l->bytes += e->size;
    return 0;
}

int
live_del(live_set *l, uint8_t space, uint64_t addr, live_ent *out)
{
    live_ent *e = live_get(l, space, addr);
    if (!e)
        return 0;
    if (out)
        *out = *e;
    l->bytes -= e->size;
    l->count--;
    size_t mask = l->cap - 1, i = (size_t)(e - l->slots), j = i;
    /* backward-shift deletion */
    for (;;) {
        j = (j + 1) & mask;
        if (!l->slots[j].seq)
            break;
        size_t k = hash(l->slots[j].space, l->slots[j].addr, mask);
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            l->slots[i] = l->slots[j];
            i = j;
        }
    }
    memset(&l->slots[i], 0, sizeof l->slots[i]);
    return 1;
}
