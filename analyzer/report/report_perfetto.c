/* report_perfetto.c: --perfetto FILE, Chrome trace-event JSON that Perfetto
 * (ui.perfetto.dev) and chrome://tracing open. One process per rank
 * ("rank N"): counter tracks per level (capture.h's downsampling: at most
 * 2 x AM_CAPTURE_BUCKETS points per level and rank, the peak always kept),
 * the iterations and the program's phases as slices on two tracks of their
 * own, NVTX ranges as slices per thread and collectives as instant events
 * (the first AM_CAPTURE_MAX_SLICES per rank), the peaks and the OOM as
 * instant events. Times are microseconds since each rank's trace start
 * (ranks' clocks are not aligned). Format: the Trace Event Format
 * (docs/analysis.md, Perfetto). */
#include <stdio.h>
#include <string.h>
#include <yajl/yajl_gen.h>

#include "capture.h"
#include "json_str.h"
#include "report.h"

#define S(g, s) AM_JSON_S((g), (s))
#define TID_ITER 2147483646 /* pseudo threads above any pid_max */
#define TID_PHASE 2147483645

static void
num(yajl_gen g, unsigned long long v)
{
    char b[32];
    int n = snprintf(b, sizeof b, "%llu", v);
    yajl_gen_number(g, b, (size_t)n);
}

/* ns as the format's microseconds, exactly ("12.345") */
static void
ts(yajl_gen g, const char *key, uint64_t ns)
{
    char b[40];
    int n = snprintf(b, sizeof b, "%llu.%03llu", (unsigned long long)(ns / 1000),
                     (unsigned long long)(ns % 1000));
    S(g, key);
    yajl_gen_number(g, b, (size_t)n);
}

/* {"ph":ph,"pid":pid,"tid":tid,"name":name, ...: the caller closes it */
static void
ev_open(yajl_gen g, const char *ph, int pid, long long tid, const char *name)
{
    yajl_gen_map_open(g);
    S(g, "ph"); S(g, ph);
    S(g, "pid"); yajl_gen_integer(g, pid);
    S(g, "tid"); yajl_gen_integer(g, tid);
    S(g, "name"); S(g, name);
}

static void
meta(yajl_gen g, const char *what, int pid, long long tid, const char *value)
{
    ev_open(g, "M", pid, tid, what);
    S(g, "args"); yajl_gen_map_open(g); S(g, "name"); S(g, value); yajl_gen_map_close(g);
    yajl_gen_map_close(g);
}

static void
slice(yajl_gen g, int pid, long long tid, const char *cat, const char *name, uint64_t a,
      uint64_t b)
{
    ev_open(g, "X", pid, tid, name);
    S(g, "cat"); S(g, cat);
    ts(g, "ts", a);
    ts(g, "dur", b > a ? b - a : 0);
    yajl_gen_map_close(g);
}

static const char *const counter_name[AM_NLEVELS] = {
    "device bytes (segments + outside PyTorch)", "tensor bytes (PyTorch allocated)"};

static void
counters(yajl_gen g, int pid, const am_capture *c)
{
    for (int l = 0; l < AM_NLEVELS; l++) {
        const am_cseries *s = &c->level[l];
        for (size_t i = 0; i < s->n; i++) {
            const am_cbucket *b = &s->b[i];
            for (int k = 0; k < 2; k++) {
                if (k && b->last_t <= b->max_t)
                    break;
                ev_open(g, "C", pid, 0, counter_name[l]);
                ts(g, "ts", k ? b->last_t : b->max_t);
                S(g, "args"); yajl_gen_map_open(g);
                S(g, "bytes"); num(g, k ? b->last_v : b->max_v);
                yajl_gen_map_close(g);
                yajl_gen_map_close(g);
            }
        }
    }
}

static void
ranges(yajl_gen g, int pid, const am_capture *c)
{
    for (size_t i = 0; i < c->nthreads; i++)
        if (c->threads[i].name[0])
            meta(g, "thread_name", pid, c->threads[i].tid, c->threads[i].name);
    for (size_t i = 0; i < c->nslices; i++) {
        const am_cslice *x = &c->slices[i];
        if (!x->kind) {
            slice(g, pid, x->tid, "nvtx", c->names[x->name], x->start_ns, x->end_ns);
            continue;
        }
        ev_open(g, "i", pid, x->tid, c->names[x->name]);
        S(g, "cat"); S(g, "collective");
        S(g, "s"); S(g, "t");
        ts(g, "ts", x->start_ns);
        S(g, "args"); yajl_gen_map_open(g); S(g, "bytes"); num(g, x->bytes);
        yajl_gen_map_close(g);
        yajl_gen_map_close(g);
    }
}

/* Iterations and phases on their own tracks; peaks and the OOM as instants. */
static void
structure(yajl_gen g, int pid, const am_rank *r)
{
    char nm[96];
    meta(g, "thread_name", pid, TID_ITER, "iterations");
    meta(g, "thread_name", pid, TID_PHASE, "phases");
    for (size_t i = 0; i < r->niters; i++) {
        const am_iteration *it = &r->iters[i];
        snprintf(nm, sizeof nm, "iteration %d", it->number);
        slice(g, pid, TID_ITER, "iteration", nm, it->start_ns, it->end_ns);
        for (size_t k = 0; k < it->nphases; k++)
            slice(g, pid, TID_PHASE, "phase", am_phase_name(it->phases[k].phase),
                  it->phases[k].start_ns, it->phases[k].end_ns);
    }
    for (int l = 0; l < AM_NLEVELS; l++) {
        const am_peak *p = &r->peak[l];
        if (!p->known)
            continue;
        snprintf(nm, sizeof nm, "%s-level peak", l == AM_L_TENSOR ? "tensor" : "device");
        ev_open(g, "i", pid, TID_PHASE, nm);
        S(g, "s"); S(g, "p");
        ts(g, "ts", p->time_ns);
        S(g, "args"); yajl_gen_map_open(g); S(g, "bytes"); num(g, p->bytes);
        yajl_gen_map_close(g);
        yajl_gen_map_close(g);
    }
    if (r->oom) {
        ev_open(g, "i", pid, r->oom->tid, "OOM");
        S(g, "s"); S(g, "p");
        ts(g, "ts", r->oom->t_ns);
        S(g, "args"); yajl_gen_map_open(g);
        S(g, "requested_bytes"); num(g, r->oom->requested);
        S(g, "phase"); S(g, am_phase_name(r->oom->phase));
        S(g, "ranges"); S(g, r->oom->where);
        yajl_gen_map_close(g);
        yajl_gen_map_close(g);
    }
}

static void
print_cb(void *ctx, const char *s, size_t n)
{
    fwrite(s, 1, n, ctx);
}

int
am_report_perfetto(FILE *f, const am_job *j, const am_capture *caps, size_t ncaps)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g)
        return -1;
    yajl_gen_config(g, yajl_gen_print_callback, print_cb, f);
    yajl_gen_map_open(g);
    S(g, "displayTimeUnit"); S(g, "ns");
    S(g, "otherData"); yajl_gen_map_open(g);
    S(g, "tool"); S(g, "recomp-analyze");
    S(g, "job"); S(g, j->id);
    S(g, "counter_downsampling");
    S(g, "per level and rank: the highest and the last value of each of at most 2048 time "
         "buckets (the peak is always kept)");
    S(g, "dropped_slices"); yajl_gen_map_open(g);
    for (size_t i = 0; i < j->nranks; i++) {
        const am_capture *c = am_capture_of(caps, ncaps, &j->ranks[i]);
        char k[16];
        snprintf(k, sizeof k, "%d", j->ranks[i].rank);
        S(g, k); num(g, c ? c->dropped_slices : 0);
    }
    yajl_gen_map_close(g);
    yajl_gen_map_close(g);
    S(g, "traceEvents");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < j->nranks; i++) {
        const am_rank *r = &j->ranks[i];
        char nm[64];
        if (r->pp > 1)
            snprintf(nm, sizeof nm, "rank %d (pipeline stage %d)", r->rank, r->stage);
        else
            snprintf(nm, sizeof nm, "rank %d", r->rank);
        meta(g, "process_name", r->rank, 0, nm);
        structure(g, r->rank, r);
        const am_capture *c = am_capture_of(caps, ncaps, r);
        if (c) {
            counters(g, r->rank, c);
            ranges(g, r->rank, c);
        }
    }
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
    yajl_gen_free(g);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}
