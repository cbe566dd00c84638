/* grow.h: the analyzer's one growable-array helper, and its one sort. */
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

/* qsort(base, n, elem, cmp) for any n: an empty array's base may be NULL,
 * which qsort must not be given (C11 7.22.5: "pointer arguments ... shall
 * have valid values" even when n is zero; UBSan's nonnull check). */
static inline void
am_sort(void *base, size_t n, size_t elem, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, elem, cmp);
}

#endif
