/* peak.c: the per-rank sweep: live sets per level, peaks, per-iteration
 * peaks, OOMs and allocator retries, memory-info samples (am_analyze).
 *
 *   pass 1  events --> timeline --> attribution --> live[device], live[tensor]
 *           |  counters per level; a new maximum records the event ordinal,
 *           |  time, iteration, phase and the allocation that set it;
 *           |  OOM: live set grouped on the spot; retry vs fatal decided by
 *           |  the next allocation of the failing thread
 *           |  each peak keeps a journal of the entries live at it that
 *           |  left the live set since (peak_journal.h), still attributed
 *           |  as the timeline resolves them; at the end, the live set at
 *           |  each peak = the entries live then allocated at or before it
 *           |  + its journal; group by phase x boundary x layer
 *   pass 2  only when a journal ran out of memory (or am_opts.replay_peaks):
 *           rewind; replay the same (deterministic) timeline to each peak's
 *           ordinal; copy that live set; keep streaming until the TE
 *           nearest-range rule has resolved every copied entry
 *
 * Memory: the live sets, per-iteration metadata, and at most a few copies
 * of the live set at a peak (the journals are bounded by them). Never the
 * events.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "live.h"
#include "peak_journal.h"
#include "timeline.h"
#include "grow.h"

/* A copy of a live set at a peak event (pass 2). */
typedef struct snapshot {
    uint64_t event_index;
    int level;
    am_peak *peak;
    live_ent *ents;           /* sorted by seq */
    size_t n;
    int taken;
} snapshot;

typedef struct sweep {
    am_source *src;
    am_rank *out;
    const am_opts *opts;
    tl tl;
    live_set live[AM_NLEVELS];
    uint64_t counter[AM_NLEVELS];
    uint64_t by_lib[AM_LIB_COUNT];
    uint64_t seq;
    int pass;
    int levels_seen;
    uint64_t host_bytes;      /* host/managed live (never in peaks) */
    /* OOM waiting for the failing thread's next allocation */
    am_oom *pending_oom;
    /* earlier OOMs, time order: ran_on once their thread allocated again */
    struct held_oom {
        am_oom *o;
        int ran_on;
    } *held;
    size_t nheld, nunresolved;
    /* pass 2 */
    snapshot snaps[2 * AM_NLEVELS];
    size_t nsnaps;
    /* pass 1: per peak (peak[l] at 2l, iter_peak[l] at 2l+1) the entries
     * live at it that left since, and the live set there built at the end */
    peak_journal pj[2 * AM_NLEVELS];
    int pj_failed;            /* out of memory in a journal: pass 2 replays */
    live_ent *built[2 * AM_NLEVELS];
    size_t nbuilt[2 * AM_NLEVELS];
    uint64_t built_at[2 * AM_NLEVELS];
    int opt_decided;          /* pass 1: the first optimizer step was judged */
} sweep;

void
am_note(am_rank *r, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **q = realloc(r->notes, (r->nnotes + 1) * sizeof *q);
    if (!q)
        return;
    r->notes = q;
    r->notes[r->nnotes] = strdup(buf);
    if (r->notes[r->nnotes])
        r->nnotes++;
}

static void
oom_free(am_oom *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->nframes; i++)
        free(o->frames[i]);
    free(o->frames);
    free(o->groups);
    free(o);
}

void
am_rank_free(am_rank *r)
{
    for (int l = 0; l < AM_NLEVELS; l++) {
        free(r->peak[l].groups);
        free(r->iter_peak[l].groups);
        free(r->peak[l].blocks);
        free(r->iter_peak[l].blocks);
    }
    for (size_t i = 0; i < r->niters; i++)
        free(r->iters[i].phases);
    free(r->iters);
    oom_free(r->oom);
    free(r->retries);
    free(r->caught);
    for (size_t i = 0; i < r->nnotes; i++)
        free(r->notes[i]);
    free(r->notes);
    for (size_t i = 0; i < r->nsites; i++)
        free(r->sites[i]);
    free(r->sites);
    free(r->site_hash);
    am_source_close(r->src);
    memset(r, 0, sizeof *r);
}

/* ---- allocation sites ---- */

const char *
am_site_name(const am_rank *r, uint32_t site)
{
    return site && site <= r->nsites ? r->sites[site - 1] : NULL;
}

static uint64_t
site_hashf(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Intern a site string; its index + 1, or 0 (none / out of memory). */
static uint32_t
site_intern(am_rank *r, const char *s, size_t n)
{
    if (!s || !n)
        return 0;
    if ((r->nsites + 1) * 2 > r->site_hcap) {
        size_t cap = r->site_hcap ? r->site_hcap * 2 : 256;
        uint32_t *h = calloc(cap, sizeof *h);
        if (!h)
            return 0;
        for (size_t i = 0; i < r->nsites; i++) {
            size_t k = site_hashf(r->sites[i], strlen(r->sites[i])) & (cap - 1);
            while (h[k])
                k = (k + 1) & (cap - 1);
            h[k] = (uint32_t)i + 1;
        }
        free(r->site_hash);
        r->site_hash = h;
        r->site_hcap = cap;
    }
    size_t k = site_hashf(s, n) & (r->site_hcap - 1);
    while (r->site_hash[k]) {
        const char *x = r->sites[r->site_hash[k] - 1];
        if (strlen(x) == n && memcmp(x, s, n) == 0)
            return r->site_hash[k];
        k = (k + 1) & (r->site_hcap - 1);
    }
    if (r->nsites == r->capsites) {
        size_t c = r->capsites ? r->capsites * 2 : 64;
        char **q = realloc(r->sites, c * sizeof *q);
        if (!q)
            return 0;
        r->sites = q;
        r->capsites = c;
    }
    char *d = malloc(n + 1);
    if (!d)
        return 0;
    memcpy(d, s, n);
    d[n] = 0;
    r->sites[r->nsites++] = d;
    r->site_hash[k] = (uint32_t)r->nsites;
    return (uint32_t)r->nsites;
}

/* ---- grouping ---- */

int
am_rank_chunk(const am_rank *r, int fwd, int first)
{
    if (r->place.vp <= 1)
        return 0;
    int off = first ? r->first_fwd_offset : 0;
    if (fwd < 0 || off < 0)
        return -1;
    return am_place_fwd_chunk(&r->place, fwd + off, r->microbatches);
}

int32_t
am_rank_layer(const am_rank *r, int32_t layer, int fwd, int first)
{
    if (layer <= 0)
        return 0;
    if (!r->layer_global)
        return layer;
    int off = am_place_layer_offset(&r->place, r->stage, am_rank_chunk(r, fwd, first));
    return off >= 0 && layer <= am_place_chunk_layers(&r->place, r->stage) ? off + layer : 0;
}

/* am_rank_layer for an allocation of boundary `boundary`: 0 outside a layer */
static int32_t
report_layer(const am_rank *r, uint8_t boundary, const am_attr *a)
{
    return tl_layer_boundary(boundary) ? am_rank_layer(r, a->layer, a->fwd, a->first) : 0;
}

/* The first recorded iteration of a trace whose window (RECOMPSHIM_WINDOW)
 * opened mid-iteration lacks that iteration's first forward passes: when the
 * iteration went on to the next one, the n recorded are its last n of
 * microbatches x virtual stages, so the first recorded is the
 * (M x VP - n)-th (am_rank_chunk shifts by that); when the trace ends in it,
 * which passes it holds is unknown (-1: their layers are not numbered).
 * Counting from the window's start put the first recorded pass in chunk 0. */
static void
first_fwd_offset(am_rank *r, const am_meta *m)
{
    r->first_fwd_offset = 0;
    if (!m->window_kind || r->place.vp <= 1 || !r->niters)
        return;
    int all = r->microbatches * r->place.vp, n = r->iters[0].microbatches;
    if (all > 0 && n == all)
        return;
    r->first_fwd_offset = all > 0 && n > 0 && n < all && r->niters > 1 ? all - n : -1;
    if (r->first_fwd_offset < 0)
        am_note(r, "the window opened inside the trace's only iteration (%d forward passes "
                   "recorded): which model chunks they ran is unknown, so their layers are "
                   "not numbered", n);
}

static int
group_key_cmp(const void *a, const void *b)
{
    const am_group *x = a, *y = b;
    if (x->phase != y->phase)
        return x->phase < y->phase ? -1 : 1;
    if (x->boundary != y->boundary)
        return x->boundary < y->boundary ? -1 : 1;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return x->site < y->site ? -1 : x->site > y->site;
}

static int
group_bytes_cmp(const void *a, const void *b)
{
    const am_group *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return group_key_cmp(a, b);
}

/* Group n entries; *out gets a malloc'd array sorted by bytes. */
static int
group_entries(const am_rank *r, const live_ent *const *ents, size_t n, am_group **out,
              size_t *nout)
{
    am_group *g = malloc((n ? n : 1) * sizeof *g);
    if (!g)
        return -1;
    for (size_t i = 0; i < n; i++)
        g[i] = (am_group){ents[i]->phase, ents[i]->boundary,
                          report_layer(r, ents[i]->boundary,
                                       &(am_attr){0, 0, ents[i]->layer, ents[i]->fwd,
                                                  ents[i]->first}),
                          r->by_site ? ents[i]->site : 0, ents[i]->size, 1};
    am_sort(g, n, sizeof *g, group_key_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && group_key_cmp(&g[k - 1], &g[i]) == 0) {
            g[k - 1].bytes += g[i].bytes;
            g[k - 1].count += g[i].count;
        } else {
            g[k++] = g[i];
        }
    }
    am_sort(g, k, sizeof *g, group_bytes_cmp);
    *out = g;
    *nout = k;
    return 0;
}

static int
group_live(const am_rank *r, live_set *l, am_group **out, size_t *nout)
{
    const live_ent **v = malloc((l->count ? l->count : 1) * sizeof *v);
    if (!v)
        return -1;
    size_t n = 0;
    LIVE_FOREACH(l, e) v[n++] = e;
    int rc = group_entries(r, v, n, out, nout);
    free(v);
    return rc;
}

/* ---- OOMs ---- */

/* A fatal OOM: counted; the first one is the rank's OOM (r->oom). */
static void
fatal_oom(am_rank *r, am_oom *o)
{
    r->noom_fatal++;
    if (!r->oom)
        r->oom = o;
    else
        oom_free(o);
}

/* Append an OOM episode to a list of {t_ns, request, iteration, phase}. */
static void
list_oom(am_retry **v, size_t *n, const am_oom *o)
{
    am_retry *q = realloc(*v, (*n + 1) * sizeof *q);
    if (q) {
        *v = q;
        q[(*n)++] = (am_retry){o->t_ns, o->requested, o->iteration, o->phase};
    }
}

/* The pending OOM ends: retried (its request succeeded after the allocator
 * freed its cache: PyTorch's own retry, listed in r->retries), or held: the
 * failing thread went on to another request, and whether the job survived
 * it is decided at the trace's end (decide_held_ooms). */
static void
finish_oom(sweep *s, int retried)
{
    am_oom *o = s->pending_oom;
    s->pending_oom = NULL;
    if (!o)
        return;
    if (retried) {
        list_oom(&s->out->retries, &s->out->nretries, o);
        oom_free(o);
        return;
    }
    struct held_oom *q = realloc(s->held, (s->nheld + 1) * sizeof *q);
    if (!q) {
        fatal_oom(s->out, o);
        return;
    }
    s->held = q;
    s->held[s->nheld++] = (struct held_oom){o, 0};
    s->nunresolved++;
}

/* A device allocation of thread tid succeeded: the held OOMs of that thread
 * did not end it (the job caught them and ran on). */
static void
ran_on_after_oom(sweep *s, uint32_t tid)
{
    for (size_t i = 0; i < s->nheld && s->nunresolved; i++)
        if (!s->held[i].ran_on && s->held[i].o->tid == tid) {
            s->held[i].ran_on = 1;
            s->nunresolved--;
        }
}

/* The trace's end (pass 1): an OOM that its thread ran on from, in a trace
 * that closed cleanly, is one the job survived (it caught
 * torch.cuda.OutOfMemoryError and went on: a batch-size back-off, a probe):
 * listed in r->caught, never the rank's OOM. Every other OOM is fatal as
 * before: one the trace ends in (still pending), one whose thread never
 * allocated again, and every OOM of a trace that was not closed (killed or
 * cut: nothing shows the process survived it; docs/advisor.md invariant 1). */
static void
decide_held_ooms(sweep *s)
{
    am_rank *r = s->out;
    for (size_t i = 0; i < s->nheld; i++) {
        if (s->held[i].ran_on && s->src->meta.closed) {
            list_oom(&r->caught, &r->ncaught, s->held[i].o);
            oom_free(s->held[i].o);
        } else {
            fatal_oom(r, s->held[i].o);
        }
    }
    free(s->held);
    s->held = NULL;
    s->nheld = s->nunresolved = 0;
    if (s->pending_oom) {
        fatal_oom(r, s->pending_oom);
        s->pending_oom = NULL;
    }
}

static void
on_oom(sweep *s, const am_event *ev)
{
    if (s->pending_oom) {
        /* the same request failing again is the same episode */
        int same = s->pending_oom->tid == ev->tid && s->pending_oom->call_size == ev->size;
        if (same) {
            oom_free(s->pending_oom);
            s->pending_oom = NULL;
        } else {
            finish_oom(s, 0);
        }
    }
    am_oom *o = calloc(1, sizeof *o);
    if (!o)
        return;
    am_attr a = tl_attr(&s->tl, ev, 0);
    o->t_ns = ev->t_ns;
    o->tid = ev->tid;
    o->iteration = s->tl.iteration;
    o->phase = a.phase;
    o->lib = ev->lib;
    o->api = ev->api;
    o->status = ev->status;
    o->call_size = ev->size;
    o->requested = ev->size;
    if (ev->request_pages) /* a page of expandable segments: its request's pages */
        o->requested = ((uint64_t)ev->request_pages + 1) * ev->size;
    o->free_bytes = ev->free_bytes;
    o->total_bytes = ev->total_bytes;
    o->offset = ev->src_offset;
    for (int l = 0; l < AM_NLEVELS; l++)
        o->live[l] = s->counter[l];
    tl_where(&s->tl, ev->tid, o->where, sizeof o->where);
    group_live(s->out, &s->live[AM_L_DEVICE], &o->groups, &o->ngroups);
    if (ev->nframes) {
        o->frames = calloc(ev->nframes, sizeof *o->frames);
        if (o->frames)
            for (uint32_t i = 0; i < ev->nframes; i++) {
                char buf[300];
                if (!am_format_addr(s->src, ev->frames[i], buf, sizeof buf))
                    snprintf(buf, sizeof buf, "0x%" PRIx64, ev->frames[i]);
                /* the profiler's own frames (the hook that recorded the
                 * OOM) say nothing about the program: dropped, counted */
                if (strncmp(buf, "librecompshim.so", 16) == 0) {
                    o->shim_frames++;
                    continue;
                }
                o->frames[o->nframes] = strdup(buf);
                if (o->frames[o->nframes])
                    o->nframes++;
            }
    }
    s->pending_oom = o;
}

/* ---- peaks ---- */

static void
update_peak(sweep *s, am_peak *p, int level, const am_event *ev, const am_attr *a)
{
    p->known = 1;
    pj_mark(&s->pj[2 * level + (p != &s->out->peak[level])], s->seq);
    p->bytes = s->counter[level];
    p->time_ns = ev->t_ns;
    p->iteration = s->tl.iteration;
    p->phase = a->phase;
    p->program_phase = s->tl.phase;
    p->event_index = s->seq;
    p->setter.pretrace = ev->pretrace;
    p->setter.addr = ev->addr;
    p->setter.size = ev->size;
    p->setter.tid = ev->tid;
    p->setter.attr = *a;
    p->setter.attr.layer = report_layer(s->out, a->boundary, a);
    p->setter.lib = ev->lib;
    tl_where(&s->tl, ev->tid, p->setter.where, sizeof p->setter.where);
    snprintf(p->setter.python, sizeof p->setter.python, "%.*s",
             ev->pystack ? (int)ev->pystack_len : 0, ev->pystack ? ev->pystack : "");
    if (level == AM_L_DEVICE)
        memcpy(p->by_lib, s->by_lib, sizeof p->by_lib);
    p->reserved_bytes = ev->has_totals ? ev->total_reserved : 0;
}

static void
count_level(sweep *s, int level, const am_event *ev)
{
    if (level == AM_L_TENSOR && ev->has_totals)
        s->counter[level] = ev->total_allocated;
    else
        s->counter[level] = s->live[level].bytes;
    const am_observer *o = s->opts->observe;
    if (o && s->pass == 1)
        o->counter(o->ctx, level, ev->t_ns, s->counter[level]);
}

static void
check_peaks(sweep *s, int level, const am_event *ev, const am_attr *a)
{
    if (s->pass != 1)
        return;
    am_rank *r = s->out;
    uint64_t c = s->counter[level];
    if (c > r->peak[level].bytes || !r->peak[level].known)
        update_peak(s, &r->peak[level], level, ev, a);
    if (s->tl.iteration >= 0 && r->niters) {
        am_iteration *it = &r->iters[r->niters - 1];
        if (c > it->peak[level]) {
            it->peak[level] = c;
            it->peak_phase[level] = a->phase;
            it->peak_carried[level] = 0;
        }
        if (s->opts->iteration >= 0 && s->tl.iteration == s->opts->iteration &&
            (c > r->iter_peak[level].bytes || !r->iter_peak[level].known))
            update_peak(s, &r->iter_peak[level], level, ev, a);
    }
}

/* ---- pass 2 snapshots ---- */

static int
ent_seq_cmp(const void *a, const void *b)
{
    const live_ent *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void
take_snapshots(sweep *s)
{
    for (size_t i = 0; i < s->nsnaps; i++) {
        snapshot *sn = &s->snaps[i];
        if (sn->taken || sn->event_index != s->seq)
            continue;
        live_set *l = &s->live[sn->level];
        sn->ents = malloc((l->count ? l->count : 1) * sizeof *sn->ents);
        sn->taken = 1;
        if (!sn->ents)
            continue;
        LIVE_FOREACH(l, e) sn->ents[sn->n++] = *e;
        am_sort(sn->ents, sn->n, sizeof *sn->ents, ent_seq_cmp);
    }
}

static void
on_resolve(void *ctx, const tl_pending *p, uint8_t boundary, uint8_t phase)
{
    sweep *s = ctx;
    for (int l = 0; l < AM_NLEVELS; l++) {
        if (!(p->levels & (1 << l)))
            continue;
        live_ent *e = live_get(&s->live[l], p->space, p->addr);
        if (e && e->seq == p->seq) {
            e->boundary = boundary;
            if (phase != AM_PH_COUNT)
                e->phase = phase;
        }
        for (int k = 2 * l; s->pass == 1 && k < 2 * l + 2; k++) {
            e = pj_get(&s->pj[k], p->space, p->addr);
            if (e && e->seq == p->seq) {
                e->boundary = boundary;
                if (phase != AM_PH_COUNT)
                    e->phase = phase;
            }
        }
    }
    for (size_t i = 0; i < s->nsnaps; i++) {
        snapshot *sn = &s->snaps[i];
        if (!sn->taken || !sn->ents)
            continue;
        live_ent key = {.seq = p->seq};
        live_ent *e = bsearch(&key, sn->ents, sn->n, sizeof key, ent_seq_cmp);
        if (e) {
            e->boundary = boundary;
            if (phase != AM_PH_COUNT)
                e->phase = phase;
        }
    }
}

/* ---- the first optimizer step ---- */

static uint8_t
demote(uint8_t ph)
{
    return ph == AM_PH_optimizer_state_init ? AM_PH_optimizer : ph;
}

/* The first optimizer step is over (pass 1): it initialised the optimizer
 * state only if something it allocated is still live. A step that left
 * nothing is a plain optimizer step: the state existed before the trace
 * (a trace that starts mid-run) or the optimizer keeps none. Relabel what
 * pass 1 recorded; pass 2 and the timeline then never say state_init. */
static void
decide_opt_init(sweep *s)
{
    am_rank *r = s->out;
    if (s->pass != 1 || s->opt_decided)
        return;
    s->opt_decided = 1;
    for (int l = 0; l < AM_NLEVELS; l++)
        LIVE_FOREACH(&s->live[l], e)
            if (e->phase == AM_PH_optimizer_state_init)
                return;
    r->opt_state_preexisting = 1;
    r->opt_init_iteration = -1;
    s->tl.opt_init_done = 1;
    /* what a peak's journal kept is labelled as pass 2 would: the replay
     * knows from its start that the step initialises nothing */
    for (int k = 0; k < 2 * AM_NLEVELS; k++)
        LIVE_FOREACH(&s->pj[k].gone, e) e->phase = demote(e->phase);
    for (int l = 0; l < AM_NLEVELS; l++)
        for (int k = 0; k < 2; k++) {
            am_peak *p = k ? &r->iter_peak[l] : &r->peak[l];
            p->phase = demote(p->phase);
            p->program_phase = demote(p->program_phase);
            p->setter.attr.phase = demote(p->setter.attr.phase);
        }
    for (size_t i = 0; i < r->niters; i++) {
        am_iteration *it = &r->iters[i];
        for (int l = 0; l < AM_NLEVELS; l++)
            it->peak_phase[l] = demote(it->peak_phase[l]);
        for (size_t k = 0; k < it->nphases; k++)
            it->phases[k].phase = demote(it->phases[k].phase);
    }
    for (size_t i = 0; i < r->nretries; i++)
        r->retries[i].phase = demote(r->retries[i].phase);
    if (r->oom)
        r->oom->phase = demote(r->oom->phase);
    if (s->pending_oom)
        s->pending_oom->phase = demote(s->pending_oom->phase);
    for (size_t i = 0; i < s->nheld; i++)
        s->held[i].o->phase = demote(s->held[i].o->phase);
    if (s->tl.phase == AM_PH_optimizer_state_init)
        s->tl.phase = AM_PH_optimizer;
}

/* Entry e of level l left the live set (pass 1): each peak of that level
 * it was live at keeps it (peak_journal.h). */
static void
journal_removed(sweep *s, int l, const live_ent *e)
{
    if (s->pass != 1)
        return;
    for (int k = 2 * l; k < 2 * l + 2; k++)
        if (pj_removed(&s->pj[k], e) < 0)
            s->pj_failed = 1;
}

/* An allocation: host memory is counted apart; device memory enters the
 * live set of each level it belongs to with its attribution, and may set a
 * peak. A pending OOM of the same thread ends here (retried or not). */
static int
on_alloc(sweep *s, const am_event *ev)
{
    am_rank *r = s->out;
    if (s->pass == 1)
        r->nallocs++;
    if (s->pending_oom && s->pending_oom->tid == ev->tid && (ev->levels & AM_LVL_DEVICE))
        finish_oom(s, s->pending_oom->call_size == ev->size); /* the call's own size */
    if (s->nunresolved && (ev->levels & AM_LVL_DEVICE))
        ran_on_after_oom(s, ev->tid);
    /* past the byte limit only the retry of an OOM's request is recorded: it
     * resolved that OOM above (a recovered failure, not the job's OOM) and
     * enters no live set, since what was freed before it was not recorded */
    if (am_past_limit(&s->src->meta, ev->t_ns))
        return 0;
    if (ev->mem != AM_MEM_DEVICE) {
        s->host_bytes += ev->size;
        return 0;
    }
    am_attr a = tl_attr(&s->tl, ev, s->seq);
    if (ev->pretrace)
        a = (am_attr){AM_PH_unknown, AM_BD_unknown, 0};
    live_ent e = {ev->addr, ev->size, s->seq, ev->space, a.phase, a.boundary, ev->lib,
                  a.layer, a.fwd, a.first, site_intern(r, ev->site, ev->site_len)};
    for (int l = 0; l < AM_NLEVELS; l++) {
        if (!(ev->levels & (1 << l)))
            continue;
        s->levels_seen |= 1 << l;
        live_ent old;
        int put = live_put_old(&s->live[l], &e, &old);
        if (put < 0)
            return -1;
        if (put > 0 && l == AM_L_DEVICE) {
            /* the address was live: the old entry leaves (its library's
             * bytes) and the new one enters where an insert puts it, as
             * when it was deleted first (one probe when it was not live) */
            s->by_lib[old.lib] -= old.size;
            live_del(&s->live[l], ev->space, ev->addr, NULL);
            if (live_put(&s->live[l], &e) < 0)
                return -1;
        }
        if (l == AM_L_DEVICE)
            s->by_lib[ev->lib] += ev->size;
        if (put > 0)
            journal_removed(s, l, &old);
        count_level(s, l, ev);
        check_peaks(s, l, ev, &a);
    }
    return 0;
}

/* A free: out of each level's live set; the tensor level follows PyTorch's
 * own allocated total where the source has it. A free of memory the trace
 * never saw allocated is counted. */
static void
on_free(sweep *s, const am_event *ev)
{
    int found = 0;
    if (s->pass == 1)
        s->out->nfrees++;
    for (int l = 0; l < AM_NLEVELS; l++) {
        if (!(ev->levels & (1 << l)))
            continue;
        live_ent old;
        if (live_del(&s->live[l], ev->space, ev->addr, &old)) {
            found = 1;
            if (l == AM_L_DEVICE)
                s->by_lib[old.lib] -= old.size;
            journal_removed(s, l, &old);
        }
        count_level(s, l, ev);
    }
    if (!found && s->pass == 1 && ev->mem == AM_MEM_DEVICE)
        s->out->nunmatched_frees++;
}

/* ---- the event loop ---- */

static int
on_event(sweep *s, const am_event *ev)
{
    s->seq++;
    if (s->opts->observe && s->pass == 1)
        s->opts->observe->event(s->opts->observe->ctx, ev);
    size_t niters_before = s->out->niters;
    uint8_t phase_before = s->tl.phase;
    if (tl_event(&s->tl, ev) < 0)
        return -1;
    am_rank *r = s->out;
    if (phase_before == AM_PH_optimizer_state_init &&
        s->tl.phase != AM_PH_optimizer_state_init)
        decide_opt_init(s);
    /* A new iteration starts at the memory already live: its peak is at
     * least that, even if it allocates nothing (all from the cache). */
    if (s->pass == 1 && r->niters > niters_before) {
        am_iteration *it = &r->iters[r->niters - 1];
        for (int l = 0; l < AM_NLEVELS; l++)
            if (s->counter[l] > it->peak[l]) {
                it->peak[l] = s->counter[l];
                it->peak_phase[l] = s->tl.phase;
                it->peak_carried[l] = 1;
            }
    }
    switch ((am_ev_kind)ev->kind) {
    case AM_EV_ALLOC:
        if (on_alloc(s, ev) < 0)
            return -1;
        break;
    case AM_EV_FREE:
        on_free(s, ev);
        break;
    case AM_EV_OOM:
        if (s->pass == 1)
            on_oom(s, ev);
        break;
    case AM_EV_MEMINFO:
        if (s->pass == 1 && ev->total_bytes) {
            r->nmeminfo++;
            r->meminfo_total = ev->total_bytes;
            if (!r->min_free || ev->free_bytes < r->min_free)
                r->min_free = ev->free_bytes;
            uint64_t used = ev->total_bytes - ev->free_bytes;
            uint64_t tracked = s->live[AM_L_DEVICE].bytes;
            if (used > tracked && used - tracked > r->max_other)
                r->max_other = used - tracked;
        }
        break;
    case AM_EV_RANGE_PUSH:
    case AM_EV_RANGE_POP:
    case AM_EV_RANGE_START:
    case AM_EV_RANGE_END:
    case AM_EV_MARK:
    case AM_EV_THREAD_NAME:
    case AM_EV_COLLECTIVE:
    case AM_EV_GRAPH_BEGIN:
    case AM_EV_GRAPH_END:
        break;
    }
    if (s->pass == 2)
        take_snapshots(s);
    return 0;
}

static int
run_pass(sweep *s, char *err, size_t errlen, uint64_t *last_t)
{
    am_event ev;
    int rc;
    while ((rc = am_next(s->src, &ev)) == 1) {
        *last_t = ev.t_ns;
        if (on_event(s, &ev) < 0) {
            snprintf(err, errlen, "%s: offset %" PRIu64 ": out of memory", s->src->meta.path,
                     ev.src_offset);
            return -1;
        }
        if (s->pass == 2 && s->tl.npending_total == 0) {
            int all = 1;
            for (size_t i = 0; i < s->nsnaps; i++)
                all &= s->snaps[i].taken;
            if (all)
                return 0;
        }
    }
    if (rc < 0) {
        snprintf(err, errlen, "%s", s->src->error);
        return -1;
    }
    return 0;
}

/* The decoder layers a hybrid model's --hybrid-layer-pattern (or the
 * deprecated --hybrid-override-pattern) describes: one symbol per layer, the
 * MTP patterns after '/' none; Megatron-Core takes the layer count from it
 * whatever --num-layers says (arguments.py validate_args). -1: no pattern; 0:
 * pipeline segments ('|'), a placement not modelled here. Without it the
 * post-process of a hybrid model's last stage was taken for a layer (issue
 * 14 B: megasim's nemotron-h-like job, "layernorm layer 14"). */
static int
hybrid_layers(const am_meta *m)
{
    const char *v = am_argv_value(m, "--hybrid-layer-pattern");
    if (!v)
        v = am_argv_value(m, "--hybrid-override-pattern");
    if (!v)
        return -1;
    int n = 0;
    for (const char *p = v; *p && *p != '/'; p++) {
        if (*p == '|')
            return 0;
        n += *p != '"' && *p != '\'' && *p != ' ';
    }
    return n;
}

/* An integer flag of the recorded command line, `def` when absent or not a
 * number. */
static int
argv_int(const am_meta *m, const char *flag, int def)
{
    const char *v = am_argv_value(m, flag);
    return v && *v >= '0' && *v <= '9' ? atoi(v) : def;
}

/* Microbatches per iteration from the recorded command line: global batch /
 * (micro batch x data parallel), data parallel = world / (TP x PP x CP)
 * (Megatron's arguments.py); 0 unknown (no --global-batch-size, or sizes that
 * do not divide). */
static int
microbatches_of(const am_rank *r, const am_meta *m)
{
    int gbs = argv_int(m, "--global-batch-size", 0), mbs = argv_int(m, "--micro-batch-size", 1);
    int mp = argv_int(m, "--tensor-model-parallel-size", 1) * r->pp *
             argv_int(m, "--context-parallel-size", 1);
    if (gbs <= 0 || mbs <= 0 || mp <= 0 || m->world_size <= 0 || m->world_size % mp)
        return 0;
    int d = mbs * (m->world_size / mp);
    return gbs % d == 0 ? gbs / d : 0;
}

/* Pipeline stage, Megatron's layer placement and the microbatches per
 * iteration from the recorded command line ([M] in docs/sources.md: stage =
 * rank / (world / pp); model/placement.c: the layers of each stage and model
 * chunk, even or uneven (--decoder-first/last-pipeline-num-layers), with or
 * without virtual stages). Layers are reported as Megatron's global numbers
 * when that placement is known; not with --pipeline-model-parallel-layout or
 * --account-for-*-in-pipeline-split (not modelled), nor under virtual stages
 * without the microbatch count (the interleaved schedule's chunk order
 * depends on it): then local indices, and a note says why. */
static void
layer_numbering(am_rank *r, const am_meta *m)
{
    const char *nl = am_argv_value(m, "--num-layers");
    const char *pp = am_argv_value(m, "--pipeline-model-parallel-size");
    r->pp = pp ? atoi(pp) : 1;
    if (r->pp < 1)
        r->pp = 1;
    r->stage = -1;
    if (m->rank >= 0 && m->world_size > 0 && m->world_size % r->pp == 0) {
        r->stage = m->rank / (m->world_size / r->pp);
        r->stage_source = "command line";
    } else if (r->pp == 1) {
        r->stage = 0;
        r->stage_source = pp ? "command line" : "no pipeline parallelism recorded";
    }
    int hl = hybrid_layers(m);
    if ((!nl && hl < 0) || r->stage < 0)
        return;
    int nlayers = hl >= 0 ? hl : atoi(nl);
    am_placement *p = &r->place;
    *p = (am_placement){nlayers, r->pp, 1,
                        argv_int(m, "--decoder-first-pipeline-num-layers", -1),
                        argv_int(m, "--decoder-last-pipeline-num-layers", -1),
                        argv_int(m, "--microbatch-group-size-per-virtual-pipeline-stage", 0),
                        am_argv_value(m, "--pipeline-model-parallel-layout") ||
                            am_argv_value(m, "--account-for-embedding-in-pipeline-split") ||
                            am_argv_value(m, "--account-for-loss-in-pipeline-split")};
    int vl = argv_int(m, "--num-layers-per-virtual-pipeline-stage", 0);
    int vs = argv_int(m, "--num-virtual-stages-per-pipeline-rank", 0);
    if (vl > 0)
        p->vp = nlayers > 0 && nlayers % (r->pp * vl) == 0 ? nlayers / r->pp / vl : 0;
    else if (vs > 0)
        p->vp = vs;
    r->microbatches = microbatches_of(r, m);
    int lpc = p->vp > 0 ? am_place_chunk_layers(p, r->stage) : 0;
    int whole = lpc > 0 && am_place_stage_layers(p, r->stage) == lpc * p->vp;
    if (lpc > 0)
        r->layers_per_chunk = lpc;
    const char *why = p->other ? "a --pipeline-model-parallel-layout or --account-for-* "
                                 "placement is not modelled"
                      : !whole ? "the layers do not divide over the pipeline and virtual "
                                 "stages as recorded"
                      : p->vp > 1 && !r->microbatches
                          ? "the microbatches per iteration (--global-batch-size) are not "
                            "recorded, and the virtual stages' chunk order depends on them"
                          : NULL;
    if (why) {
        am_note(r, "layers are local indices: %s", why);
        p->num_layers = 0;
        return;
    }
    r->layers_per_stage = am_place_stage_layers(p, r->stage);
    r->layer_global = 1;
    if (p->vp > 1)
        am_note(r, "layers are Megatron's global numbers; under virtual pipeline stages an "
                   "allocation of the backward pass has none (its model chunk is not "
                   "tracked)");
}

static const char *
window_kind_name(int k)
{
    return k == 1 ? "time" : k == 2 ? "events" : k == 3 ? "steps" : "?";
}

/* RECOMPSHIM_WINDOW as the report prints it, with units: "time 0.500 s..
 * 20.000 s" (the header holds ns), "events 100..", "steps 3..5"; an
 * open end (B left out: UINT64_MAX) as nothing after "..". */
static void
window_text(const am_meta *m, char *out, size_t n)
{
    int k = (int)m->window_kind, open = m->window_b == UINT64_MAX;
    if (k == 1 && open)
        snprintf(out, n, "time %.3f s..", (double)m->window_a / 1e9);
    else if (k == 1)
        snprintf(out, n, "time %.3f s..%.3f s", (double)m->window_a / 1e9,
                 (double)m->window_b / 1e9);
    else if (open)
        snprintf(out, n, "%s %" PRIu64 "..", window_kind_name(k), m->window_a);
    else
        snprintf(out, n, "%s %" PRIu64 "..%" PRIu64, window_kind_name(k), m->window_a,
                 m->window_b);
}

/* 1 when the window held the whole run (hnew finding 14): a time or event
 * window from 0 (open from the first event), opened and never closed
 * before the trace ends. A steps window misses what came before its first
 * step (the model's parameters), so it never holds the whole run. */
static int
window_whole_run(const am_meta *m)
{
    return (m->window_kind == 1 || m->window_kind == 2) && m->window_a == 0 &&
           m->window_opened && !m->window_never_opened && !m->window_closed;
}

/* The RECOMPSHIM_WINDOW value the trace's recorded environment holds when
 * the header has no window (the shim refused it as not valid, said on the
 * job's stderr), else NULL. */
static const char *
refused_window(const am_meta *m)
{
    static const char key[] = "RECOMPSHIM_WINDOW=";
    if (m->window_kind)
        return NULL;
    for (size_t k = 0; k < m->nenv; k++)
        if (m->env[k] && !strncmp(m->env[k], key, sizeof key - 1) && m->env[k][sizeof key - 1])
            return m->env[k] + sizeof key - 1;
    return NULL;
}

/* What part of the run the source holds (after pass 1: window records seen). */
static void
coverage(am_rank *r, const am_meta *m)
{
    am_coverage *c = &r->coverage;
    char wt[96];
    window_text(m, wt, sizeof wt);
    c->capped = m->limit_hit;
    c->windowed = m->window_kind != 0;
    int whole = c->windowed && window_whole_run(m);
    c->complete = !c->capped && (!c->windowed || whole) && !m->salvaged_chunks;
    c->status = c->complete ? "complete"
                : m->salvaged_chunks       ? "salvaged"
                : c->capped && c->windowed ? "capped_windowed"
                : c->capped                ? "capped"
                                           : "windowed";
    size_t k = 0;
    char *s = c->summary, *mn = c->meaning;
    size_t ms = 0;
#define SUM(...) (k += (size_t)snprintf(s + k, k < sizeof c->summary ? sizeof c->summary - k : 0, __VA_ARGS__))
#define MEAN(...) (ms += (size_t)snprintf(mn + ms, ms < sizeof c->meaning ? sizeof c->meaning - ms : 0, __VA_ARGS__))
    if (c->complete && whole) {
        SUM("complete (RECOMPSHIM_WINDOW=%s held the whole run)", wt);
        MEAN("RECOMPSHIM_WINDOW=%s opened at the first event and never closed: the trace "
             "covers the process from the shim's start%s", wt,
             m->closed ? " to its exit" : " to its last published record");
        return;
    }
    if (c->complete) {
        SUM("complete");
        MEAN("no recording limit or window: the trace covers the process from the shim's "
             "start%s", m->closed ? " to its exit" : " to its last published record");
        const char *w = refused_window(m);
        if (w)
            MEAN(" (RECOMPSHIM_WINDOW=\"%.100s\" was set but not valid: the shim refused it "
                 "and recorded the whole run)", w);
        return;
    }
    if (m->salvaged_chunks) {
        SUM("salvaged: %" PRIu32 " damaged chunk(s) skipped", m->salvaged_chunks);
        MEAN("--salvage skipped %" PRIu32 " damaged chunk(s) (about %" PRIu64 " bytes of "
             "records, the warnings name each one's offset and damage): their threads' "
             "events in those spans are missing, so allocations may look unfreed or frees "
             "unmatched, and peaks, phases and the advisor's figures describe only what was "
             "read. ", m->salvaged_chunks, m->salvage_lost_bytes);
    }
    if (c->capped) {
        if (m->limit_ns)
            SUM("%scapped at %.3f s", k ? ", " : "", (double)m->limit_ns / 1e9);
        else
            SUM("%scapped (time unknown)", k ? ", " : "");
        MEAN("RECOMPSHIM_MAX_BYTES=%" PRIu64 " stopped recording", m->max_bytes);
        if (m->limit_ns)
            MEAN(" at %.3f s", (double)m->limit_ns / 1e9);
        MEAN("; %" PRIu64 " record(s) after it were not written (only OOM records are kept "
             "past the limit): everything after the limit is missing, so peaks, iterations, "
             "phases and the hot rank describe only the recorded part of the run, and the "
             "true peak may be higher. ",
             m->dropped_records);
    }
    if (c->windowed) {
        SUM("%swindowed: %s", k ? ", " : "", wt);
        MEAN("RECOMPSHIM_WINDOW=%s recorded only events inside the window (definitions and "
             "OOMs always)", wt);
        if (m->window_never_opened || !m->window_opened) {
            SUM(" (never opened)");
            MEAN("; the window never opened: no memory event was recorded and nothing about "
                 "the run's memory can be said. ");
        } else {
            MEAN("; it opened at %.3f s", (double)m->window_open_ns / 1e9);
            if (m->window_closed)
                MEAN(" and closed at %.3f s", (double)m->window_close_ns / 1e9);
            else
                MEAN(" and never closed");
            MEAN(". Memory allocated before the window is missing from the live sets (its "
                 "frees are unmatched) and events outside it are missing: device-level "
                 "figures are lower bounds, and the peak is the window's, not the run's. ");
        }
    }
    if (ms && mn[ms < sizeof c->meaning ? ms - 1 : sizeof c->meaning - 2] == ' ')
        mn[ms < sizeof c->meaning ? ms - 1 : sizeof c->meaning - 2] = 0;
#undef SUM
#undef MEAN
}

/* End of pass 1 (before tl_end): the live set at each peak, from the live
 * set now and the peak's journal. Out of memory: pass 2 replays instead. */
static void
build_snapshots(sweep *s)
{
    for (int k = 0; k < 2 * AM_NLEVELS && !s->pj_failed; k++) {
        if (!s->pj[k].mark)
            continue;
        if (pj_build(&s->pj[k], &s->live[k / 2], &s->built[k], &s->nbuilt[k]) < 0)
            s->pj_failed = 1;
        s->built_at[k] = s->pj[k].mark;
    }
}

/* Pass 1: the sweep over every event: levels, peaks, iterations, phases,
 * OOMs. Returns run_pass's result; *last_t is the last event's time. */
static int
first_pass(sweep *s, char *err, size_t errlen, uint64_t *last_t)
{
    am_rank *out = s->out;
    s->pass = 1;
    tl_init(&s->tl, s->src->meta.pid, out);
    s->tl.no_spans = !s->opts->phase_spans;
    s->tl.resolve = on_resolve;
    s->tl.resolve_ctx = s;
    int rc = run_pass(s, err, errlen, last_t);
    if (s->tl.phase == AM_PH_optimizer_state_init)
        decide_opt_init(s);
    first_fwd_offset(out, &s->src->meta);
    /* before tl_end: pass 2 never sees the resolutions made at the end */
    if (rc >= 0 && !s->pj_failed && !s->opts->replay_peaks)
        build_snapshots(s);
    tl_end(&s->tl, *last_t);
    if (rc >= 0)
        tl_moe_report(&s->tl);
    decide_held_ooms(s);
    out->nevents = s->seq;
    tl_fini(&s->tl);
    return rc;
}

/* What the sweep could not know: a device level below the tensor level,
 * levels the source does not have, an iteration without allocations. */
static void
qualify_levels(sweep *s)
{
    am_rank *out = s->out;
    const am_meta *m = &s->src->meta;
    if (out->oom && m->limit_hit && m->limit_ns && out->oom->t_ns > m->limit_ns)
        out->oom->past_limit = 1;
    if ((s->levels_seen & AM_LVL_TENSOR) && (s->levels_seen & AM_LVL_DEVICE) &&
        out->peak[AM_L_DEVICE].known && out->peak[AM_L_TENSOR].known &&
        out->peak[AM_L_DEVICE].bytes < out->peak[AM_L_TENSOR].bytes) {
        out->device_lower_bound = 1;
        am_note(out, "the device-level peak is below the tensor-level peak, which cannot "
                     "happen in a complete record (PyTorch's allocated memory lives in its "
                     "segments): device memory reserved outside the recorded part is "
                     "missing, so the device-level figures are lower bounds");
    }
    if (!(s->levels_seen & AM_LVL_TENSOR)) {
        out->tensor_na = strcmp(m->mode, "default") == 0
                             ? "default-mode trace without TENSOR records (PyTorch's allocator "
                               "report hook was not called): only the device level is known"
                             : "no tensor-level allocations in this trace";
        for (int k = 0; k < 2; k++) {
            am_peak *p = k ? &out->iter_peak[AM_L_TENSOR] : &out->peak[AM_L_TENSOR];
            p->known = 0;
            p->reason = out->tensor_na;
        }
    }
    if (!(s->levels_seen & AM_LVL_DEVICE))
        for (int k = 0; k < 2; k++) {
            am_peak *p = k ? &out->iter_peak[AM_L_DEVICE] : &out->peak[AM_L_DEVICE];
            p->known = 0;
            p->reason = "no device-level allocations in this source";
        }
    if (s->opts->iteration >= 0)
        for (int l = 0; l < AM_NLEVELS; l++)
            if (!out->iter_peak[l].known && !out->iter_peak[l].reason)
                out->iter_peak[l].reason = "no allocation in the selected iteration";
}

/* Steady state: the optimizer state initialised and two or more iterations
 * after it (or state that existed before the trace), with the reason. */
static void
steady_state(am_rank *out)
{
    if (out->first_opt_iteration >= 0 && out->nallocs == 0) {
        out->steady = 0;
        out->steady_reason = "unknown: the trace has no memory events, so whether its first "
                             "optimizer step created the optimizer state cannot be told";
    } else if (out->opt_state_preexisting) {
        out->steady = out->niters >= 2;
        out->steady_reason =
            out->steady ? "the first optimizer step allocates no state: the state existed "
                          "before the trace (it starts mid-run) or the optimizer keeps none; "
                          "two or more iterations recorded"
                        : "the first optimizer step allocates no state (it existed before the "
                          "trace, or the optimizer keeps none), but fewer than two iterations "
                          "were recorded";
    } else if (out->opt_init_iteration < 0) {
        out->steady = 0;
        out->steady_reason = out->niters ? "the trace ends before the first optimizer step"
                                         : "no iteration found";
    } else {
        size_t after = 0;
        for (size_t i = 0; i < out->niters; i++)
            if (out->iters[i].number > out->opt_init_iteration)
                after++;
        out->steady = after >= 2;
        out->steady_reason = out->steady ? "optimizer state initialised and two or more "
                                           "iterations after it"
                                         : "fewer than two iterations after the optimizer "
                                           "state was initialised";
    }
}

/* A job that is not Megatron (no Megatron layer ranges, no Megatron flags)
 * whose source knows the allocation sites is grouped by the allocating
 * function (issue 5: the boundaries are the Python functions). */
static void
choose_grouping(am_rank *out, const am_meta *m)
{
    if (!out->nsites || out->layer_signal == 1 || am_argv_value(m, "--num-layers"))
        return;
    int mega = 0;
    for (size_t i = 0; i < m->argc && !mega; i++)
        if (strstr(m->argv[i], "pretrain_") || strstr(m->argv[i], "megatron"))
            mega = 1;
    out->by_site = !mega;
}

static int
block_addr_cmp(const void *a, const void *b)
{
    const am_block *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The live set at one peak as (address, size) pairs sorted by address, into
 * peak->blocks (left empty when out of memory: the report then has none). */
static void
keep_blocks(am_peak *peak, const snapshot *sn)
{
    peak->blocks = malloc((sn->n ? sn->n : 1) * sizeof *peak->blocks);
    if (!peak->blocks)
        return;
    for (size_t k = 0; k < sn->n; k++)
        peak->blocks[k] = (am_block){sn->ents[k].addr, sn->ents[k].size};
    peak->nblocks = sn->n;
    am_sort(peak->blocks, peak->nblocks, sizeof *peak->blocks, block_addr_cmp);
}

/* The live set taken at one peak, grouped into the peak's contributors;
 * bytes the live set does not explain are untracked. */
static void
group_snapshot(am_rank *out, snapshot *sn, int blocks)
{
    if (!sn->ents)
        return;
    if (blocks && !sn->peak->blocks)
        keep_blocks(sn->peak, sn);
    const live_ent **v = malloc((sn->n ? sn->n : 1) * sizeof *v);
    if (!v)
        return;
    uint64_t sum = 0;
    for (size_t k = 0; k < sn->n; k++) {
        v[k] = &sn->ents[k];
        sum += sn->ents[k].size;
    }
    group_entries(out, v, sn->n, &sn->peak->groups, &sn->peak->ngroups);
    free(v);
    sn->peak->untracked_bytes = sn->peak->bytes > sum ? sn->peak->bytes - sum : 0;
    /* the setter's boundary may have been resolved after its event */
    for (size_t k = 0; k < sn->n; k++)
        if (sn->ents[k].seq == sn->event_index) {
            sn->peak->setter.attr.boundary = sn->ents[k].boundary;
            sn->peak->setter.attr.layer =
                report_layer(out, sn->ents[k].boundary,
                             &(am_attr){0, 0, sn->ents[k].layer, sn->ents[k].fwd,
                                        sn->ents[k].first});
        }
}

/* Pass 2: replay the source to each known peak (overall and of the selected
 * iteration) and take the live set there, attributing exactly as pass 1
 * did (same pipeline layout). */
static int
second_pass(sweep *s, char *err, size_t errlen, uint64_t *last_t)
{
    am_rank *out = s->out;
    for (int l = 0; l < AM_NLEVELS; l++) {
        if (out->peak[l].known)
            s->snaps[s->nsnaps++] = (snapshot){out->peak[l].event_index, l, &out->peak[l]};
        if (out->iter_peak[l].known)
            s->snaps[s->nsnaps++] =
                (snapshot){out->iter_peak[l].event_index, l, &out->iter_peak[l]};
    }
    if (!s->nsnaps)
        return 0;
    int have = !s->pj_failed && !s->opts->replay_peaks;
    for (size_t i = 0; i < s->nsnaps && have; i++) {
        snapshot *sn = &s->snaps[i];
        int k = 2 * sn->level + (sn->peak != &out->peak[sn->level]);
        have = s->built[k] && s->built_at[k] == sn->event_index;
    }
    if (have) { /* pass 1 kept them: no replay */
        for (size_t i = 0; i < s->nsnaps; i++) {
            snapshot *sn = &s->snaps[i];
            int k = 2 * sn->level + (sn->peak != &out->peak[sn->level]);
            sn->ents = s->built[k];
            sn->n = s->nbuilt[k];
            sn->taken = 1;
            s->built[k] = NULL;
        }
        for (size_t i = 0; i < s->nsnaps; i++)
            group_snapshot(out, &s->snaps[i], s->opts->peak_blocks);
        return 0;
    }
    am_rank scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.layer_global = out->layer_global;
    scratch.pp = out->pp;
    scratch.stage = out->stage;
    scratch.layers_per_stage = out->layers_per_stage;
    scratch.layers_per_chunk = out->layers_per_chunk;
    scratch.place = out->place;
    scratch.microbatches = out->microbatches;
    scratch.first_fwd_offset = out->first_fwd_offset;
    scratch.opt_state_preexisting = out->opt_state_preexisting;
    if (am_rewind(s->src) < 0) {
        snprintf(err, errlen, "%s", s->src->error);
        return -1;
    }
    for (int l = 0; l < AM_NLEVELS; l++)
        live_clear(&s->live[l]);
    memset(s->counter, 0, sizeof s->counter);
    memset(s->by_lib, 0, sizeof s->by_lib);
    s->seq = 0;
    s->pass = 2;
    tl_init(&s->tl, s->src->meta.pid, &scratch);
    s->tl.no_spans = 1; /* scratch iterations: their spans are never read */
    s->tl.resolve = on_resolve;
    s->tl.resolve_ctx = s;
    int rc = run_pass(s, err, errlen, last_t);
    tl_fini(&s->tl);
    for (size_t i = 0; i < scratch.niters; i++)
        free(scratch.iters[i].phases);
    free(scratch.iters);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < s->nsnaps; i++)
        group_snapshot(out, &s->snaps[i], s->opts->peak_blocks);
    return 0;
}

int
am_analyze(am_source *src, const am_opts *opts, am_rank *out, char *err, size_t errlen)
{
    sweep s;
    memset(&s, 0, sizeof s);
    s.src = src;
    s.out = out;
    s.opts = opts;
    out->src = src;
    out->path = src->meta.path;
    out->rank = src->meta.rank;
    out->iter_selected = opts->iteration;
    for (int k = 0; k < 2 * AM_NLEVELS; k++)
        pj_init(&s.pj[k]);
    for (int l = 0; l < AM_NLEVELS; l++) {
        live_init(&s.live[l]);
        out->peak[l].iteration = -1;
        out->iter_peak[l].iteration = -1;
    }
    layer_numbering(out, &src->meta);
    uint64_t last_t = 0;
    int rc = first_pass(&s, err, errlen, &last_t);
    if (rc >= 0) {
        out->levels = s.levels_seen;
        coverage(out, &src->meta);
        qualify_levels(&s);
        steady_state(out);
        choose_grouping(out, &src->meta);
        rc = second_pass(&s, err, errlen, &last_t);
    }
    /* a live set no device could hold: the capacity is the device's, so the
     * trace counts memory it never freed (a free through a path not hooked)
     * or counts it twice; say so rather than report it as a peak like any
     * other (a public report replayed: 94.88 GiB live on a 79.60 GiB device) */
    if (rc >= 0 && src->meta.device_capacity && out->peak[AM_L_DEVICE].known &&
        out->peak[AM_L_DEVICE].bytes > src->meta.device_capacity) {
        char pk[32], cap[32];
        am_note(out, "the device-level peak (%s) exceeds the device's capacity (%s): the trace "
                     "counts memory no device could hold at once (frees it did not see, or "
                     "memory counted twice); device-level figures are suspect",
                am_fmt_bytes(out->peak[AM_L_DEVICE].bytes, pk, sizeof pk),
                am_fmt_bytes(src->meta.device_capacity, cap, sizeof cap));
    }
    if (rc >= 0 && s.host_bytes)
        am_note(out, "%" PRIu64 " bytes of host-pinned/managed allocations are not counted in "
                     "device peaks",
                s.host_bytes);
    if (rc >= 0 && out->nunmatched_frees)
        am_note(out, "%" PRIu64 " frees of memory allocated before the trace started",
                out->nunmatched_frees);
    for (size_t i = 0; i < s.nsnaps; i++)
        free(s.snaps[i].ents);
    for (int k = 0; k < 2 * AM_NLEVELS; k++) {
        free(s.built[k]);
        pj_fini(&s.pj[k]);
    }
    for (int l = 0; l < AM_NLEVELS; l++)
        live_fini(&s.live[l]);
    oom_free(s.pending_oom);
    for (size_t i = 0; i < s.nheld; i++)
        oom_free(s.held[i].o);
    free(s.held);
    return rc;
}
