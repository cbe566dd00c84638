/* grow.h: the analyzer's one growable-array helper. */
#ifndef RECOMP_ANALYZER_GROW_H
#define RECOMP_ANALYZER_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Make *p (an array of `elem`-byte items, capacity *cap) hold at least
 * `need` items, doubling from `first`. 0 ok, -1 out of memory (*p kept). */
static inline int
am_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : first;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

#endif
