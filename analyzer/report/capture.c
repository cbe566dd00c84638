/* capture.c: per-rank timeline capture for --perfetto and --html (see
 * capture.h for the downsampling rule and caps). */
#include <stdlib.h>
#include <string.h>

#include "capture.h"

/* Merge neighbouring buckets pairwise and double the width. */
static void
halve(am_cseries *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i += 2, k++) {
        am_cbucket m = s->b[i];
        if (i + 1 < s->n) {
            const am_cbucket *y = &s->b[i + 1];
            if (y->max_v > m.max_v) {
                m.max_v = y->max_v;
                m.max_t = y->max_t;
            }
            m.last_t = y->last_t;
            m.last_v = y->last_v;
        }
        s->b[k] = m;
    }
    s->n = k;
    s->width_ns *= 2;
}

/* Bucket index of time t in s (the width may have grown since). */
static uint64_t
bucket_of(const am_cseries *s, uint64_t t)
{
    return t / s->width_ns;
}

static void
add_sample(am_capture *c, am_cseries *s, uint64_t t, uint64_t v)
{
    if (!s->b && !(s->b = calloc(AM_CAPTURE_BUCKETS, sizeof *s->b))) {
        c->oom = 1;
        return;
    }
    if (!s->width_ns)
        s->width_ns = 1024;
    s->nsamples++;
    for (;;) {
        if (s->n && bucket_of(s, s->b[s->n - 1].last_t) >= bucket_of(s, t)) {
            am_cbucket *b = &s->b[s->n - 1];
            if (v > b->max_v) {
                b->max_v = v;
                b->max_t = t;
            }
            b->last_t = t;
            b->last_v = v;
            return;
        }
        if (s->n < AM_CAPTURE_BUCKETS)
            break;
        halve(s);
    }
    s->b[s->n++] = (am_cbucket){t, v, t, v};
}

static void
on_counter(void *ctx, int level, uint64_t t_ns, uint64_t bytes)
{
    am_capture *c = ctx;
    add_sample(c, &c->level[level], t_ns, bytes);
}

static am_cthread *
thread_of(am_capture *c, uint32_t tid)
{
    for (size_t i = 0; i < c->nthreads; i++)
        if (c->threads[i].tid == tid)
            return &c->threads[i];
    if (c->nthreads == c->capthreads) {
        size_t cap = c->capthreads ? 2 * c->capthreads : 8;
        am_cthread *q = realloc(c->threads, cap * sizeof *q);
        if (!q)
            return NULL;
        c->threads = q;
        c->capthreads = cap;
    }
    am_cthread *t = &c->threads[c->nthreads++];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    return t;
}

/* Index of name (interned), or UINT32_MAX on out of memory. */
static uint32_t
intern(am_capture *c, const char *s, size_t n)
{
    for (size_t i = c->nnames; i-- > 0;) /* recent names first: ranges repeat */
        if (strlen(c->names[i]) == n && memcmp(c->names[i], s, n) == 0)
            return (uint32_t)i;
    if (c->nnames == c->capnames) {
        size_t cap = c->capnames ? 2 * c->capnames : 64;
        char **q = realloc(c->names, cap * sizeof *q);
        if (!q)
            return UINT32_MAX;
        c->names = q;
        c->capnames = cap;
    }
    char *d = malloc(n + 1);
    if (!d)
        return UINT32_MAX;
    memcpy(d, s, n);
    d[n] = 0;
    c->names[c->nnames] = d;
    return (uint32_t)c->nnames++;
}

static void
add_slice(am_capture *c, const am_cslice *x)
{
    if (c->nslices >= AM_CAPTURE_MAX_SLICES) {
        c->dropped_slices++;
        return;
    }
    if (c->nslices == c->capslices) {
        size_t cap = c->capslices ? 2 * c->capslices : 256;
        am_cslice *q = realloc(c->slices, cap * sizeof *q);
        if (!q) {
            c->oom = 1;
            return;
        }
        c->slices = q;
        c->capslices = cap;
    }
    c->slices[c->nslices++] = *x;
}

static void
push(am_capture *c, am_cthread *t, uint64_t when, const am_event *ev)
{
    if (t->nopen == t->capopen) {
        size_t cap = t->capopen ? 2 * t->capopen : 16;
        void *q = realloc(t->open, cap * sizeof *t->open);
        if (!q) {
            c->oom = 1;
            return;
        }
        t->open = q;
        t->capopen = cap;
    }
    t->open[t->nopen].t = when;
    t->open[t->nopen].name = intern(c, ev->name ? ev->name : "", ev->name ? ev->name_len : 0);
    t->nopen++;
}

static void
pop(am_capture *c, am_cthread *t, uint64_t when)
{
    if (!t->nopen)
        return; /* a pop without its push (the trace started inside it) */
    t->nopen--;
    if (t->open[t->nopen].name == UINT32_MAX)
        return;
    am_cslice x = {t->open[t->nopen].t, when, t->tid, t->open[t->nopen].name, 0, 0};
    add_slice(c, &x);
}

static void
on_event(void *ctx, const am_event *ev)
{
    am_capture *c = ctx;
    c->last_t = ev->t_ns;
    am_cthread *t;
    switch (ev->kind) {
    case AM_EV_RANGE_PUSH:
        if ((t = thread_of(c, ev->tid)))
            push(c, t, ev->t_ns, ev);
        break;
    case AM_EV_RANGE_POP:
        if ((t = thread_of(c, ev->tid)))
            pop(c, t, ev->t_ns);
        break;
    case AM_EV_THREAD_NAME:
        if ((t = thread_of(c, ev->tid)) && ev->name) {
            size_t n = ev->name_len < sizeof t->name - 1 ? ev->name_len : sizeof t->name - 1;
            memcpy(t->name, ev->name, n);
            t->name[n] = 0;
        }
        break;
    case AM_EV_COLLECTIVE: {
        const char *nm = am_coll_name((int)ev->op);
        uint32_t id = intern(c, nm, strlen(nm));
        if (id != UINT32_MAX) {
            am_cslice x = {ev->t_ns, ev->t_ns, ev->tid, id, 1, ev->size};
            add_slice(c, &x);
        }
        break;
    }
    default:
        break;
    }
}

void
am_capture_observer(am_capture *c, am_observer *o)
{
    o->ctx = c;
    o->event = on_event;
    o->counter = on_counter;
}

void
am_capture_finish(am_capture *c)
{
    for (size_t i = 0; i < c->nthreads; i++)
        while (c->threads[i].nopen)
            pop(c, &c->threads[i], c->last_t);
}

void
am_capture_free(am_capture *c)
{
    for (int l = 0; l < AM_NLEVELS; l++)
        free(c->level[l].b);
    free(c->slices);
    for (size_t i = 0; i < c->nthreads; i++)
        free(c->threads[i].open);
    free(c->threads);
    for (size_t i = 0; i < c->nnames; i++)
        free(c->names[i]);
    free(c->names);
    memset(c, 0, sizeof *c);
}

const am_capture *
am_capture_of(const am_capture *caps, size_t n, const am_rank *r)
{
    for (size_t i = 0; i < n; i++)
        if (caps[i].path && r->path && strcmp(caps[i].path, r->path) == 0)
            return &caps[i];
    return NULL;
}
