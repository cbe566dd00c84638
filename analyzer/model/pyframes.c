/* pyframes.c: Python frames to Megatron ranges (pyframes.h). */
#include "pyframes.h"

#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "catalog_memo.h"
#include "grow.h"

#define EXACT M_EXACT
#define PREFIX M_PREFIX
#define SUFFIX M_SUFFIX
#define CONTAINS M_CONTAINS

typedef struct pyf_row {
    uint8_t match;
    const char *pat;
    uint16_t len;
    const char *within;       /* "|"-separated suffixes, "" any */
    const char *range;
} pyf_row;

static const pyf_row g_rows[] = {
#define CAT_PYFRAME(m, q, w, r) {m, q, sizeof(q) - 1, w, r},
#include "catalog.def"
};

typedef struct pyf_gap {
    const char *scope, *after, *range;
} pyf_gap;

static const pyf_gap g_gaps[] = {
#define CAT_PYGAP(s, a, r) {s, a, r},
#include "catalog.def"
};

#define NROWS (sizeof g_rows / sizeof *g_rows)
#define NGAPS (sizeof g_gaps / sizeof *g_gaps)

/* 1 when `name` ends with one of the "|"-separated suffixes of `alts`; an
 * empty `alts` accepts anything, a NULL name only that. */
static int
ends_with_any(const char *name, const char *alts)
{
    if (!*alts)
        return 1;
    if (!name)
        return 0;
    size_t n = strlen(name);
    for (const char *p = alts; *p;) {
        const char *bar = strchr(p, '|');
        size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k && n >= k && memcmp(name + n - k, p, k) == 0)
            return 1;
        p += k + (bar ? 1 : 0);
    }
    return 0;
}

const char *
am_pyframes_range(uint16_t row)
{
    return row < NROWS ? g_rows[row].range : "";
}

size_t
am_pyframes_map(const char *const *names, const uint32_t *lens, size_t n, uint16_t *rows,
                size_t cap)
{
    size_t k = 0;
    const char *inner = NULL;  /* range of the innermost mapped frame so far */
    for (size_t i = 0; i < n && k < cap; i++) {
        if (!names[i])
            continue;
        for (size_t r = 0; r < NROWS; r++) {
            if (!am_catalog_name_match(g_rows[r].match, g_rows[r].pat, g_rows[r].len, names[i],
                                       lens[i]) ||
                !ends_with_any(inner, g_rows[r].within))
                continue;
            /* one range per region: a frame of the same range nested in it
             * (a checkpointed function's inner call) adds nothing */
            if (!inner || strcmp(inner, g_rows[r].range) != 0) {
                rows[k++] = (uint16_t)r;
                inner = g_rows[r].range;
            }
            break;
        }
    }
    return k;
}

/* ---- the synthesizer ---- */

typedef struct syn_ent {
    const char *name;         /* range name */
    int16_t rule;             /* its catalog rule */
    uint8_t emitted;          /* 0: the trace's own range of this rule was open */
    uint8_t gap;              /* made by a CAT_PYGAP row */
    const char *last_child;   /* range of the last child that ended, NULL */
} syn_ent;

typedef struct real_ent {
    uint32_t domain;
    int16_t rule;
} real_ent;

typedef struct syn_thread {
    uint32_t tid;
    syn_ent ent[AM_PYF_MAX + 1];
    size_t n;
    real_ent *real;
    size_t nreal, capreal;
} syn_thread;

struct am_pysyn {
    syn_thread *th;
    size_t nth, capth;
    size_t last;
    int16_t rule[NROWS];      /* catalog rule of each row's range */
    int16_t gap_rule[NGAPS ? NGAPS : 1];
    am_catalog_memo memo;     /* the trace's own range names */
};

am_pysyn *
am_pysyn_new(void)
{
    am_pysyn *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    for (size_t r = 0; r < NROWS; r++)
        s->rule[r] = am_catalog_range(g_rows[r].range, strlen(g_rows[r].range), AM_PYF_DOMAIN,
                                      strlen(AM_PYF_DOMAIN)).rule;
    for (size_t g = 0; g < NGAPS; g++)
        s->gap_rule[g] = am_catalog_range(g_gaps[g].range, strlen(g_gaps[g].range), AM_PYF_DOMAIN,
                                          strlen(AM_PYF_DOMAIN)).rule;
    return s;
}

void
am_pysyn_reset(am_pysyn *s)
{
    for (size_t i = 0; i < s->nth; i++)
        free(s->th[i].real);
    s->nth = 0;
    s->last = 0;
}

void
am_pysyn_free(am_pysyn *s)
{
    if (!s)
        return;
    am_pysyn_reset(s);
    free(s->th);
    am_memo_fini(&s->memo);
    free(s);
}

static syn_thread *
thread_of(am_pysyn *s, uint32_t tid)
{
    if (s->last < s->nth && s->th[s->last].tid == tid)
        return &s->th[s->last];
    for (size_t i = 0; i < s->nth; i++)
        if (s->th[i].tid == tid) {
            s->last = i;
            return &s->th[i];
        }
    if (am_grow((void **)&s->th, &s->capth, s->nth + 1, sizeof *s->th, 8) < 0)
        return NULL;
    syn_thread *t = &s->th[s->nth];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    s->last = s->nth++;
    return t;
}

int
am_pysyn_note(am_pysyn *s, const am_event *ev)
{
    if (ev->domain_id == AM_PYF_DOMAIN_ID)
        return 0;
    syn_thread *t = thread_of(s, ev->tid);
    if (!t)
        return -1;
    if (ev->kind == AM_EV_RANGE_PUSH) {
        if (am_grow((void **)&t->real, &t->capreal, t->nreal + 1, sizeof *t->real, 8) < 0)
            return -1;
        int16_t rule = ev->name ? am_memo_range(&s->memo, ev->name, ev->name_len, ev->domain,
                                                ev->domain_len).rule
                                : -1;
        t->real[t->nreal++] = (real_ent){ev->domain_id, rule};
    } else if (ev->kind == AM_EV_RANGE_POP) {
        for (size_t i = t->nreal; i > 0; i--)
            if (t->real[i - 1].domain == ev->domain_id) {
                memmove(&t->real[i - 1], &t->real[i], (t->nreal - i) * sizeof *t->real);
                t->nreal--;
                break;
            }
    }
    return 0;
}

static int
real_open(const syn_thread *t, int16_t rule)
{
    for (size_t i = 0; i < t->nreal; i++)
        if (t->real[i].rule == rule)
            return 1;
    return 0;
}

static am_event
range_event(const am_event *at, uint8_t kind, const char *name)
{
    am_event e;
    memset(&e, 0, sizeof e);
    e.t_ns = at->t_ns;
    e.tid = at->tid;
    e.kind = kind;
    e.device = -1;
    e.peer = -1;
    e.src_offset = at->src_offset;
    e.domain = AM_PYF_DOMAIN;
    e.domain_len = (uint32_t)strlen(AM_PYF_DOMAIN);
    e.domain_id = AM_PYF_DOMAIN_ID;
    if (name) {
        e.name = name;
        e.name_len = (uint32_t)strlen(name);
    }
    return e;
}

/* The gap range (CAT_PYGAP) code directly in `scope` runs in after its
 * child `after` ended, or NULL; its rule to *rule. */
static const char *
gap_of(const am_pysyn *s, const char *scope, const char *after, int16_t *rule)
{
    if (!after)
        return NULL;
    for (size_t g = 0; g < NGAPS; g++)
        if (ends_with_any(scope, g_gaps[g].scope) && ends_with_any(after, g_gaps[g].after)) {
            *rule = s->gap_rule[g];
            return g_gaps[g].range;
        }
    return NULL;
}

int
am_pysyn_sync(am_pysyn *s, const am_event *ev, const uint16_t *rows, size_t n, int grow_only,
              am_event *out, size_t cap)
{
    syn_thread *t = thread_of(s, ev->tid);
    if (!t)
        return -1;
    syn_ent want[AM_PYF_MAX + 1];
    size_t nw = 0, k = 0;
    for (size_t i = 0; i < n && nw < AM_PYF_MAX; i++)
        want[nw++] = (syn_ent){g_rows[rows[i]].range, s->rule[rows[i]], 0, 0, NULL};
    while (k < nw && k < t->n && t->ent[k].rule == want[k].rule)
        k++;
    /* code directly in the innermost frame's region after one of its calls */
    if (nw && k == nw) {
        const char *after = t->n > nw ? t->ent[nw].name : t->ent[nw - 1].last_child;
        if (t->n > nw && t->ent[nw].gap) {
            want[nw] = t->ent[nw];
            nw++;
            k++;
        } else {
            int16_t rule = -1;
            const char *g = gap_of(s, want[nw - 1].name, after, &rule);
            if (g)
                want[nw++] = (syn_ent){g, rule, 0, 1, NULL};
        }
    }
    if (grow_only && t->n > k)
        return 0;
    int no = 0;
    while (t->n > k) {
        syn_ent *e = &t->ent[--t->n];
        if (e->emitted && (size_t)no < cap)
            out[no++] = range_event(ev, AM_EV_RANGE_POP, NULL);
        if (t->n)
            t->ent[t->n - 1].last_child = e->name;
    }
    /* a frame whose region the trace's own range already marks is not made
     * again, nor are the frames around it: they were entered before that
     * range opened, and a range made now would land inside it */
    size_t inner_real = k;
    for (size_t i = k; i < nw; i++)
        if (real_open(t, want[i].rule))
            inner_real = i + 1;
    for (size_t i = k; i < nw; i++) {
        syn_ent e = want[i];
        e.emitted = i >= inner_real && !real_open(t, e.rule);
        e.last_child = NULL;
        t->ent[t->n++] = e;
        if (e.emitted && (size_t)no < cap)
            out[no++] = range_event(ev, AM_EV_RANGE_PUSH, e.name);
    }
    return no;
}
