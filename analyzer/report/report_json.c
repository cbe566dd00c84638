/* report_json.c: the --json document (docs/json-schema.md), with yajl's
 * generator. stdout carries nothing else. */
#include <stdio.h>
#include <string.h>
#include <yajl/yajl_gen.h>

#include "advisor_report.h"
#include "json_str.h"
#include "report.h"

#define S(g, s) str_(g, s)

/* Strings from traces may hold any bytes: json_str.h keeps valid UTF-8
 * and replaces the rest, so the generator never rejects a string. */
static void
str_(yajl_gen g, const char *s)
{
    AM_JSON_S(g, s);
}
#define K(g, s) S(g, s)
#define I(g, v) yajl_gen_integer((g), (long long)(v))
#define B(g, v) yajl_gen_bool((g), (v))
#define N(g) yajl_gen_null(g)

static void
str_or_null(yajl_gen g, const char *s)
{
    if (s)
        S(g, s);
    else
        N(g);
}

static void
u64(yajl_gen g, uint64_t v)
{
    /* bytes fit in int64 for any real device; print as a JSON number */
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    yajl_gen_number(g, buf, (size_t)n);
}

static void
iter_or_null(yajl_gen g, int it)
{
    if (it >= 0)
        I(g, it);
    else
        N(g);
}

static void
groups(yajl_gen g, const am_rank *r, const am_group *v, size_t n)
{
    yajl_gen_array_open(g);
    for (size_t i = 0; i < n; i++) {
        yajl_gen_map_open(g);
        K(g, "phase"); S(g, am_phase_name(v[i].phase));
        K(g, "boundary"); S(g, am_boundary_name(v[i].boundary));
        K(g, "layer");
        if (v[i].layer > 0) I(g, v[i].layer); else N(g);
        K(g, "bytes"); u64(g, v[i].bytes);
        K(g, "count"); u64(g, v[i].count);
        K(g, "function");
        {
            const char *fn = am_site_name(r, v[i].site);
            if (fn) S(g, fn); else N(g);
        }
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

static void
peak(yajl_gen g, const am_rank *r, const am_peak *p, int level)
{
    if (!p->known) {
        N(g);
        return;
    }
    yajl_gen_map_open(g);
    K(g, "level"); S(g, level == AM_L_TENSOR ? "tensor" : "device");
    K(g, "bytes"); u64(g, p->bytes);
    K(g, "time_ns"); u64(g, p->time_ns);
    K(g, "iteration"); iter_or_null(g, p->iteration);
    K(g, "phase"); S(g, am_phase_name(p->phase));
    K(g, "program_phase"); S(g, am_phase_name(p->program_phase));
    K(g, "set_by");
    yajl_gen_map_open(g);
    K(g, "bytes"); u64(g, p->setter.size);
    K(g, "phase"); S(g, am_phase_name(p->setter.attr.phase));
    K(g, "boundary"); S(g, am_boundary_name(p->setter.attr.boundary));
    K(g, "layer");
    if (p->setter.attr.layer > 0) I(g, p->setter.attr.layer); else N(g);
    K(g, "library"); S(g, am_lib_name(p->setter.lib));
    K(g, "thread"); I(g, p->setter.tid);
    K(g, "ranges"); S(g, p->setter.where);
    K(g, "python");
    if (p->setter.python[0]) S(g, p->setter.python); else N(g);
    K(g, "before_trace"); B(g, p->setter.pretrace);
    yajl_gen_map_close(g);
    K(g, "untracked_bytes"); u64(g, p->untracked_bytes);
    if (level == AM_L_TENSOR && p->reserved_bytes) {
        K(g, "reserved_bytes"); u64(g, p->reserved_bytes);
    }
    if (level == AM_L_DEVICE) {
        K(g, "by_library");
        yajl_gen_map_open(g);
        for (int l = 0; l < AM_LIB_COUNT; l++)
            if (p->by_lib[l]) {
                K(g, am_lib_name(l));
                u64(g, p->by_lib[l]);
            }
        yajl_gen_map_close(g);
    }
    K(g, "lower_bound"); B(g, level == AM_L_DEVICE && r->device_lower_bound);
    K(g, "coverage_caveat");
    if (r->coverage.complete) {
        N(g);
    } else {
        char cv[256];
        snprintf(cv, sizeof cv, "of the recorded part only (%s): the run's true peak may differ",
                 r->coverage.summary);
        S(g, cv);
    }
    K(g, "contributors"); groups(g, r, p->groups, p->ngroups);
    if (p->blocks) {
        K(g, "blocks"); /* --peak-blocks: [address, bytes] pairs by address */
        yajl_gen_array_open(g);
        for (size_t i = 0; i < p->nblocks; i++) {
            yajl_gen_array_open(g);
            u64(g, p->blocks[i].addr);
            u64(g, p->blocks[i].size);
            yajl_gen_array_close(g);
        }
        yajl_gen_array_close(g);
    }
    yajl_gen_map_close(g);
}

static void
oom(yajl_gen g, const am_rank *r)
{
    const am_oom *o = r->oom;
    if (!o) {
        N(g);
        return;
    }
    yajl_gen_map_open(g);
    K(g, "rank"); I(g, r->rank);
    K(g, "time_ns"); u64(g, o->t_ns);
    /* past the byte limit the record does not say (issue 14 E) */
    K(g, "iteration"); iter_or_null(g, o->past_limit ? -1 : o->iteration);
    K(g, "phase"); S(g, am_phase_name(o->past_limit ? AM_PH_unknown : o->phase));
    K(g, "requested_bytes"); u64(g, o->requested);
    K(g, "requested_note"); S(g, "at the CUDA API: the allocation the failing call asked for "
                                 "(a segment for PyTorch's caching allocator), not PyTorch's "
                                 "'Tried to allocate'");
    K(g, "free_bytes");
    if (o->total_bytes) u64(g, o->free_bytes); else N(g);
    K(g, "total_bytes");
    if (o->total_bytes) u64(g, o->total_bytes); else N(g);
    K(g, "library"); S(g, am_lib_name(o->lib));
    K(g, "status"); I(g, o->status);
    K(g, "thread"); I(g, o->tid);
    K(g, "ranges"); S(g, o->where);
    K(g, "file_offset"); u64(g, o->offset);
    K(g, "live_device_bytes"); u64(g, o->live[AM_L_DEVICE]);
    K(g, "live_tensor_bytes");
    if (r->levels & AM_LVL_TENSOR) u64(g, o->live[AM_L_TENSOR]); else N(g);
    K(g, "past_limit"); B(g, o->past_limit);
    K(g, "caveat");
    if (o->past_limit)
        S(g, "recorded after the byte limit stopped recording: its iteration and phase are "
             "unknown (null, unknown); the live set is that of the last recorded event, not of "
             "the OOM; what ran in between is missing");
    else if (!r->coverage.complete)
        S(g, r->coverage.meaning);
    else
        N(g);
    K(g, "live_device_lower_bound");
    B(g, (r->levels & AM_LVL_TENSOR) && o->live[AM_L_DEVICE] < o->live[AM_L_TENSOR]);
    K(g, "live"); groups(g, r, o->groups, o->ngroups);
    K(g, "stack_profiler_frames_dropped"); u64(g, o->shim_frames);
    K(g, "stack");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < o->nframes; i++)
        S(g, o->frames[i]);
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
}

/* ranks[].coverage: what part of the run the trace holds. */
static void
rank_coverage(yajl_gen g, const am_rank *r)
{
    const am_meta *m = &r->src->meta;
    yajl_gen_map_open(g);
    K(g, "status"); S(g, r->coverage.status);
    K(g, "complete"); B(g, r->coverage.complete);
    K(g, "summary"); S(g, r->coverage.summary);
    K(g, "meaning"); S(g, r->coverage.meaning);
    K(g, "capped_at_ns");
    if (m->limit_hit && m->limit_ns) u64(g, m->limit_ns); else N(g);
    K(g, "max_bytes");
    if (m->limit_hit) u64(g, m->max_bytes); else N(g);
    K(g, "dropped_records"); u64(g, m->dropped_records);
    K(g, "window");
    if (m->window_kind) {
        yajl_gen_map_open(g);
        K(g, "kind");
        S(g, m->window_kind == 1 ? "time" : m->window_kind == 2 ? "events" : "steps");
        K(g, "a"); u64(g, m->window_a);
        K(g, "b"); u64(g, m->window_b);
        K(g, "opened"); B(g, m->window_opened && !m->window_never_opened);
        K(g, "opened_ns");
        if (m->window_opened) u64(g, m->window_open_ns); else N(g);
        K(g, "closed_ns");
        if (m->window_closed) u64(g, m->window_close_ns); else N(g);
        yajl_gen_map_close(g);
    } else {
        N(g);
    }
    yajl_gen_map_close(g);
}

/* ranks[].level, levels, peak (+ peak_note), device_peak. */
static void
rank_peaks(yajl_gen g, const am_rank *r)
{
    int level = r->peak[AM_L_TENSOR].known ? AM_L_TENSOR : AM_L_DEVICE;
    K(g, "level"); S(g, level == AM_L_TENSOR ? "tensor" : "device");
    K(g, "levels");
    yajl_gen_map_open(g);
    for (int l = AM_L_TENSOR; l >= AM_L_DEVICE; l--) {
        K(g, l == AM_L_TENSOR ? "tensor" : "device");
        yajl_gen_map_open(g);
        K(g, "available"); B(g, r->peak[l].known);
        K(g, "reason"); str_or_null(g, r->peak[l].known ? NULL : r->peak[l].reason);
        yajl_gen_map_close(g);
    }
    yajl_gen_map_close(g);
    K(g, "peak"); peak(g, r, &r->peak[level], level);
    if (!r->peak[level].known) {
        K(g, "peak_note");
        S(g, "the source has no memory events");
    }
    K(g, "device_peak");
    if (level == AM_L_TENSOR) peak(g, r, &r->peak[AM_L_DEVICE], AM_L_DEVICE); else N(g);
}

/* ranks[].device, pipeline, layer_numbering, layer_signal. */
static void
rank_device_and_layout(yajl_gen g, const am_rank *r)
{
    const am_meta *m = &r->src->meta;
    K(g, "device");
    yajl_gen_map_open(g);
    K(g, "capacity_bytes");
    if (m->device_capacity) u64(g, m->device_capacity); else N(g);
    K(g, "meminfo_samples"); u64(g, r->nmeminfo);
    K(g, "min_free_bytes");
    if (r->nmeminfo) u64(g, r->min_free); else N(g);
    K(g, "context_and_other_bytes");
    if (r->nmeminfo) u64(g, r->max_other); else N(g);
    yajl_gen_map_close(g);
    K(g, "pipeline");
    yajl_gen_map_open(g);
    K(g, "stages"); I(g, r->pp);
    K(g, "stage");
    if (r->stage >= 0) I(g, r->stage); else N(g);
    K(g, "source"); str_or_null(g, r->stage_source);
    yajl_gen_map_close(g);
    K(g, "layer_numbering"); S(g, r->layer_global ? "global" : "local");
    K(g, "layer_signal");
    S(g, r->layer_signal == 1 ? "megatron_ranges" : r->layer_signal == 2 ? "te_attention"
                                                                          : "none");
}

/* One ranks[].iterations[] object. */
static void
iteration(yajl_gen g, const am_rank *r, const am_iteration *it)
{
    yajl_gen_map_open(g);
    K(g, "iteration"); I(g, it->number);
    K(g, "start_ns"); u64(g, it->start_ns);
    K(g, "end_ns"); u64(g, it->end_ns);
    K(g, "microbatches"); I(g, it->microbatches);
    K(g, "peak_bytes");
    yajl_gen_map_open(g);
    for (int l = AM_L_TENSOR; l >= AM_L_DEVICE; l--) {
        K(g, l == AM_L_TENSOR ? "tensor" : "device");
        if (r->peak[l].known) u64(g, it->peak[l]); else N(g);
    }
    yajl_gen_map_close(g);
    K(g, "peak_held_from_before");
    yajl_gen_map_open(g);
    for (int l = AM_L_TENSOR; l >= AM_L_DEVICE; l--) {
        K(g, l == AM_L_TENSOR ? "tensor" : "device");
        if (r->peak[l].known) B(g, it->peak_carried[l]); else N(g);
    }
    yajl_gen_map_close(g);
    K(g, "phases");
    yajl_gen_array_open(g);
    for (size_t k = 0; k < it->nphases; k++) {
        yajl_gen_map_open(g);
        K(g, "phase"); S(g, am_phase_name(it->phases[k].phase));
        K(g, "start_ns"); u64(g, it->phases[k].start_ns);
        K(g, "end_ns"); u64(g, it->phases[k].end_ns);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
}

/* ranks[].init_end_ns, iteration_source, iterations, steady_state. */
static void
rank_iterations(yajl_gen g, const am_rank *r)
{
    K(g, "init_end_ns"); u64(g, r->init_end_ns);
    K(g, "iteration_source"); S(g, r->has_step_markers ? "markers" : "cycle");
    K(g, "iterations");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < r->niters; i++)
        iteration(g, r, &r->iters[i]);
    yajl_gen_array_close(g);
    K(g, "steady_state");
    yajl_gen_map_open(g);
    K(g, "reached"); B(g, r->steady);
    K(g, "reason"); S(g, r->steady_reason ? r->steady_reason : "");
    K(g, "optimizer_state_init_iteration"); iter_or_null(g, r->opt_init_iteration);
    yajl_gen_map_close(g);
}

/* An OOM list of a rank (alloc_retries, caught_ooms): time_ns,
 * requested_bytes (bytes), iteration (null before the first) and phase. */
static void
oom_list(yajl_gen g, const am_retry *v, size_t n)
{
    yajl_gen_array_open(g);
    for (size_t i = 0; i < n; i++) {
        yajl_gen_map_open(g);
        K(g, "time_ns"); u64(g, v[i].t_ns);
        K(g, "requested_bytes"); u64(g, v[i].size);
        K(g, "iteration"); iter_or_null(g, v[i].iteration);
        K(g, "phase"); S(g, am_phase_name(v[i].phase));
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

/* ranks[].oom, oom_count, alloc_retries, caught_ooms, iteration_peak (--iteration K). */
static void
rank_failures(yajl_gen g, const am_rank *r, const am_report_opts *o)
{
    K(g, "oom"); oom(g, r);
    K(g, "oom_count"); u64(g, r->noom_fatal);
    K(g, "alloc_retries"); oom_list(g, r->retries, r->nretries);
    K(g, "caught_ooms"); oom_list(g, r->caught, r->ncaught);
    if (o->iteration >= 0) {
        K(g, "iteration_peak");
        yajl_gen_map_open(g);
        K(g, "iteration"); I(g, o->iteration);
        for (int l = AM_L_TENSOR; l >= AM_L_DEVICE; l--) {
            K(g, l == AM_L_TENSOR ? "tensor" : "device");
            peak(g, r, &r->iter_peak[l], l);
        }
        yajl_gen_map_close(g);
    }
}

/* One ranks[] object (docs/json-schema.md), in the schema's field order. */
static void
rank(yajl_gen g, const am_job *j, const am_rank *r, const am_report_opts *o)
{
    const am_meta *m = &r->src->meta;
    yajl_gen_map_open(g);
    K(g, "rank"); I(g, r->rank);
    K(g, "path"); S(g, m->path);
    K(g, "host"); S(g, m->host);
    K(g, "pid"); I(g, m->pid);
    K(g, "world_size"); I(g, m->world_size);
    K(g, "format"); S(g, m->format);
    K(g, "mode"); S(g, m->mode);
    K(g, "closed"); B(g, m->closed);
    if (m->exit_via) { /* (1.8) only when the trace recorded how the process left */
        K(g, "exit");
        yajl_gen_map_open(g);
        K(g, "via"); S(g, am_exit_via_name(m->exit_via));
        K(g, "status"); I(g, m->exit_status);
        yajl_gen_map_close(g);
    }
    K(g, "coverage"); rank_coverage(g, r);
    rank_peaks(g, r);
    K(g, "hot"); B(g, j->hot >= 0 && &j->ranks[j->hot] == r);
    rank_device_and_layout(g, r);
    rank_iterations(g, r);
    rank_failures(g, r, o);
    K(g, "events"); u64(g, r->nevents);
    K(g, "warnings");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < m->nwarnings; i++)
        S(g, m->warnings[i]);
    yajl_gen_array_close(g);
    K(g, "notes");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < r->nnotes; i++)
        S(g, r->notes[i]);
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
}

/* yajl's print callback: the document goes to the FILE as it is generated,
 * so it is never held whole in memory (issue 19); a short write is
 * remembered and reported once the document is done. */
typedef struct json_sink {
    FILE *f;
    int failed;
} json_sink;

static void
sink_print(void *ctx, const char *s, size_t n)
{
    json_sink *k = ctx;
    if (!k->failed && fwrite(s, 1, n, k->f) != n)
        k->failed = 1;
}

int
am_report_json(FILE *f, const am_job *j, const am_report_opts *o)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g)
        return -1;
    json_sink sink = {f, 0};
    yajl_gen_config(g, yajl_gen_beautify, o->pretty ? 1 : 0);
    yajl_gen_config(g, yajl_gen_validate_utf8, 1);
    yajl_gen_config(g, yajl_gen_print_callback, sink_print, &sink);
    yajl_gen_map_open(g);
    K(g, "schema_version"); S(g, AM_SCHEMA_VERSION);
    K(g, "tool"); S(g, "recomp-analyze");
    K(g, "job");
    yajl_gen_map_open(g);
    K(g, "id"); S(g, j->id);
    K(g, "nranks"); u64(g, j->nranks);
    K(g, "hot_rank");
    if (j->hot >= 0) I(g, j->ranks[j->hot].rank); else N(g);
    K(g, "compared_level"); S(g, j->hot_level == AM_L_TENSOR ? "tensor" : "device");
    K(g, "max_peak_bytes"); u64(g, j->max_peak);
    K(g, "min_peak_bytes"); u64(g, j->min_peak);
    K(g, "peak_spread_bytes"); u64(g, j->max_peak - j->min_peak);
    K(g, "scope");
    if (j->rank_selected) {
        char sc[160];
        snprintf(sc, sizeof sc, "selected ranks only (--rank %d, %zu trace(s) given): nranks, "
                 "hot_rank and the peaks compared cover only them", j->rank_filter, j->nfiles);
        S(g, sc);
    } else {
        S(g, "all ranks given");
    }
    K(g, "coverage_caveat");
    {
        char cv[512];
        size_t k = 0;
        cv[0] = 0;
        for (size_t i = 0; i < j->nranks && k < sizeof cv; i++)
            if (!j->ranks[i].coverage.complete)
                k += (size_t)snprintf(cv + k, sizeof cv - k, "%srank %d %s", k ? "; " : "",
                                      j->ranks[i].rank, j->ranks[i].coverage.summary);
        if (cv[0]) {
            char full[700];
            snprintf(full, sizeof full, "incomplete traces (%s): the hot rank and the spread "
                     "compare only the recorded parts", cv);
            S(g, full);
        } else {
            N(g);
        }
    }
    yajl_gen_map_close(g);
    K(g, "ranks");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < j->nranks; i++)
        rank(g, j, &j->ranks[i], o);
    yajl_gen_array_close(g);
    /* The recompute advisor's verdict (docs/advisor.md); null with --no-advice. */
    K(g, "verdict");
    if (j->verdict) {
        adv_report_json(g, j->verdict);
    } else {
        N(g);
        K(g, "verdict_note");
        S(g, "the recompute advisor was not run (--no-advice)");
    }
    yajl_gen_map_close(g);
    yajl_gen_free(g);
    if (!o->pretty)
        sink_print(&sink, "\n", 1); /* yajl ends a beautified document with one */
    return sink.failed || fflush(f) != 0 ? -1 : 0;
}
