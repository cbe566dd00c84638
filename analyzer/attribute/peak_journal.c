/* peak_journal.c: see peak_journal.h. */
#include "peak_journal.h"

#include <stdlib.h>
#include <string.h>

#include "grow.h"

void
pj_init(peak_journal *j)
{
    memset(j, 0, sizeof *j);
    live_init(&j->gone);
}

void
pj_fini(peak_journal *j)
{
    live_fini(&j->gone);
    free(j->keys);
    memset(j, 0, sizeof *j);
}

void
pj_mark(peak_journal *j, uint64_t seq)
{
    j->mark = seq;
    if (!j->nkeys)
        return;
    /* one deletion per kept entry: a peak that moves often (every
     * allocation while memory grows) costs what was kept, not the table */
    for (size_t i = 0; i < j->nkeys; i++)
        live_del(&j->gone, j->keys[i].space, j->keys[i].addr, NULL);
    j->nkeys = 0;
}

int
pj_removed(peak_journal *j, const live_ent *e)
{
    if (!j->mark || e->seq > j->mark)
        return 0;
    if (am_grow((void **)&j->keys, &j->capkeys, j->nkeys + 1, sizeof *j->keys, 64) < 0)
        return -1;
    if (live_put(&j->gone, e) < 0)
        return -1;
    j->keys[j->nkeys++] = (pj_key){e->addr, e->space};
    return 0;
}

live_ent *
pj_get(peak_journal *j, uint8_t space, uint64_t addr)
{
    return j->gone.count ? live_get(&j->gone, space, addr) : NULL;
}

static int
seq_cmp(const void *a, const void *b)
{
    const live_ent *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int
pj_build(const peak_journal *j, const live_set *now, live_ent **out, size_t *n)
{
    size_t cap = now->count + j->gone.count;
    live_ent *v = malloc((cap ? cap : 1) * sizeof *v);
    *out = v;
    *n = 0;
    if (!v)
        return -1;
    size_t k = 0;
    LIVE_FOREACH(now, e)
        if (e->seq <= j->mark)
            v[k++] = *e;
    LIVE_FOREACH(&j->gone, e) v[k++] = *e;
    am_sort(v, k, sizeof *v, seq_cmp);
    *n = k;
    return 0;
}
