/* report_text.c: the terminal report. Default (grouped): the verdict
 * first, one line per pipeline stage (ranks grouped, report_groups.c), the
 * hot rank and the ranks that differ in detail, the advisor's evidence for
 * the hot rank, each warning once, a legend. --ranks all: every rank in full
 * (peaks at both levels, phase, top contributors, OOM details), the hot rank
 * and the advisor's whole block. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "advisor_report.h"
#include "report.h"

static void
print_groups(FILE *f, const am_rank *r, const am_group *g, size_t n, int top, const char *indent)
{
    char b[32];
    size_t shown = top > 0 && (size_t)top < n ? (size_t)top : n;
    int site = r && r->by_site;
    fprintf(f, "%s%-12s %-22s %-18s %6s %8s%s\n", indent, "bytes", "phase", "boundary", "layer",
            "count", site ? "  function" : "");
    for (size_t i = 0; i < shown; i++) {
        char layer[16] = "-";
        if (g[i].layer > 0)
            snprintf(layer, sizeof layer, "%d", g[i].layer);
        const char *fn = site ? am_site_name(r, g[i].site) : NULL;
        fprintf(f, "%s%-12s %-22s %-18s %6s %8" PRIu64 "%s%s\n", indent,
                am_fmt_bytes(g[i].bytes, b, sizeof b), am_phase_name(g[i].phase),
                am_boundary_name(g[i].boundary), layer, g[i].count, site ? "  " : "",
                site ? (fn ? fn : "-") : "");
    }
    if (shown < n) {
        uint64_t rest = 0;
        for (size_t i = shown; i < n; i++)
            rest += g[i].bytes;
        fprintf(f, "%s... %zu more groups, %s (--json lists all)\n", indent, n - shown,
                am_fmt_bytes(rest, b, sizeof b));
    }
}

/* The OOMs the job caught and ran on from (am_rank.caught), one line each. */
static void
print_caught(FILE *f, const am_rank *r)
{
    char b[32];
    for (size_t i = 0; i < r->ncaught; i++) {
        const am_retry *c = &r->caught[i];
        fprintf(f, "  OOM caught: %s requested at %.3f s, ", am_fmt_bytes(c->size, b, sizeof b),
                (double)c->t_ns / 1e9);
        if (c->iteration >= 0)
            fprintf(f, "iteration %d", c->iteration);
        else
            fprintf(f, "before the first iteration");
        fprintf(f, ", phase %s: the job caught it and ran on (not fatal: its request is in no "
                   "peak, verdict or `oom` gate)\n",
                am_phase_name(c->phase));
    }
}

static void
print_peak(FILE *f, const am_rank *r, const am_peak *p, const char *label, int top)
{
    char b[32], b2[32];
    if (!p->known) {
        fprintf(f, "  %s peak: n/a (%s)\n", label, p->reason ? p->reason : "unknown");
        return;
    }
    int lower = r->device_lower_bound && strncmp(label, "device", 6) == 0;
    fprintf(f, "  %s peak: %s%s (%" PRIu64 " bytes) at %.3f s", label, lower ? "at least " : "",
            am_fmt_bytes(p->bytes, b, sizeof b), p->bytes, (double)p->time_ns / 1e9);
    if (p->iteration >= 0)
        fprintf(f, ", iteration %d", p->iteration);
    else
        fprintf(f, ", before the first iteration");
    fprintf(f, ", phase %s\n", am_phase_name(p->phase));
    if (!r->coverage.complete)
        fprintf(f, "    (of the recorded part only: %s; the run's true peak may differ)\n",
                r->coverage.summary);
    if (lower)
        fprintf(f, "    (lower bound: below the tensor-level peak, impossible for a complete "
                   "record; device memory outside the recorded part is missing)\n");
    if (p->setter.pretrace)
        fprintf(f, "    set by: memory reserved before the trace (the level reached with a "
                   "%s piece of it; when, by what and in which phase it was allocated is "
                   "unknown)\n",
                am_fmt_bytes(p->setter.size, b, sizeof b));
    else
    fprintf(f, "    set by: %s allocation (%s / %s", am_fmt_bytes(p->setter.size, b, sizeof b),
            am_phase_name(p->setter.attr.phase), am_boundary_name(p->setter.attr.boundary));
    if (!p->setter.pretrace) {
        if (p->setter.attr.layer > 0)
            fprintf(f, " / layer %d", p->setter.attr.layer);
        fprintf(f, ") on thread %u, caller %s\n", p->setter.tid, am_lib_name(p->setter.lib));
    }
    if (p->setter.where[0])
        fprintf(f, "    ranges: %s\n", p->setter.where);
    if (p->setter.python[0])
        fprintf(f, "    python: %s\n", p->setter.python);
    if (p->reserved_bytes)
        fprintf(f, "    PyTorch reserved then: %s\n", am_fmt_bytes(p->reserved_bytes, b, sizeof b));
    if (p->untracked_bytes)
        fprintf(f, "    untracked (allocated before the trace): %s\n",
                am_fmt_bytes(p->untracked_bytes, b2, sizeof b2));
    int any = 0;
    for (int l = 0; l < AM_LIB_COUNT; l++)
        if (p->by_lib[l]) {
            fprintf(f, "%s%s %s", any ? ", " : "    by owner: ", am_lib_name(l),
                    am_fmt_bytes(p->by_lib[l], b, sizeof b));
            any = 1;
        }
    if (any)
        fputc('\n', f);
    fprintf(f, "    live at the peak (phase of allocation x boundary x layer%s):\n",
            r->by_site ? " x allocating function" : "");
    print_groups(f, r, p->groups, p->ngroups, top, "      ");
}

/* The full listing's OOM block: request, state, ranges, native stack, live set. */
static void
print_oom(FILE *f, const am_rank *r, const am_meta *m, int top)
{
    char b[32];
    const am_oom *x = r->oom;
    fprintf(f, "  OOM: %s requested at %.3f s", am_fmt_bytes(x->requested, b, sizeof b),
            (double)x->t_ns / 1e9);
    if (x->past_limit)
        fprintf(f, ", %s", am_oom_when(x, (char[96]){0}, 96));
    else if (x->iteration >= 0)
        fprintf(f, ", iteration %d", x->iteration);
    if (!x->past_limit)
        fprintf(f, ", phase %s", am_phase_name(x->phase));
    fprintf(f, ", caller %s", am_lib_name(x->lib));
    if (x->total_bytes)
        fprintf(f, ", free %s of %s", am_fmt_bytes(x->free_bytes, b, sizeof b),
                am_fmt_bytes(x->total_bytes, (char[32]){0}, 32));
    fprintf(f, " (%zu fatal OOM(s))\n", r->noom_fatal);
    if (x->past_limit)
        fprintf(f, "    NOTE: recorded %.3f s after the byte limit stopped recording: the "
                   "live set below is that of the last recorded event (iteration %d, %s), "
                   "not of the OOM; what ran in between is missing\n",
                (double)(x->t_ns - m->limit_ns) / 1e9, x->iteration, am_phase_name(x->phase));
    int olow = (r->levels & AM_LVL_TENSOR) && x->live[AM_L_DEVICE] < x->live[AM_L_TENSOR];
    fprintf(f, "    live then: device %s%s", olow ? "at least " : "",
            am_fmt_bytes(x->live[AM_L_DEVICE], b, sizeof b));
    if (r->levels & AM_LVL_TENSOR)
        fprintf(f, ", tensor %s", am_fmt_bytes(x->live[AM_L_TENSOR], b, sizeof b));
    if (olow)
        fprintf(f, " (device below tensor is impossible for a complete record: device "
                   "memory outside the recorded part is missing)");
    fputc('\n', f);
    if (x->where[0])
        fprintf(f, "    ranges: %s\n", x->where);
    if (x->nframes || x->shim_frames)
        fprintf(f, "    native stack (innermost first%s):\n",
                x->shim_frames ? "; the profiler's own frames hidden" : "");
    for (size_t i = 0; i < x->nframes && i < 16; i++)
        fprintf(f, "    #%zu %s\n", i, x->frames[i]);
    fprintf(f, "    live at the OOM (device level; phase of allocation x boundary x "
               "layer%s):\n",
            r->by_site ? " x allocating function" : "");
    print_groups(f, r, x->groups, x->ngroups, top, "      ");
}

static void
print_rank(FILE *f, const am_job *j, const am_rank *r, const am_report_opts *o_)
{
    am_report_opts oo = *o_, *o = &oo;
    if (o->top < 0)
        o->top = 12; /* the full listing's default */
    const am_meta *m = &r->src->meta;
    char b[32];
    fprintf(f, "rank %d  (%s, host %s, pid ", r->rank, m->path, m->host[0] ? m->host : "?");
    if (m->pid > 0)
        fprintf(f, "%d", m->pid);
    else
        fputc('?', f);
    fprintf(f, ", %s mode%s", m->mode,
            m->closed ? "" : ", NOT CLOSED: read to the last published record");
    if (m->exit_via)
        fprintf(f, ", exited with status %d via %s", m->exit_status,
                am_exit_via_name(m->exit_via));
    else if (!m->closed && m->exit_sealed)
        fputs(" (killed or still running: an _exit or _Exit would have closed it)", f);
    fputs(")\n", f);
    if (!r->coverage.complete)
        fprintf(f, "  COVERAGE: INCOMPLETE, %s. %s\n", r->coverage.summary,
                r->coverage.meaning);
    if (r->pp > 1)
        fprintf(f, "  pipeline stage %d of %d (%s)\n", r->stage, r->pp,
                r->stage_source ? r->stage_source : "unknown");
    print_peak(f, r, &r->peak[AM_L_TENSOR], "tensor-level (PyTorch allocated)", o->top);
    print_peak(f, r, &r->peak[AM_L_DEVICE], "device-level (segments + outside PyTorch)", o->top);
    if (m->device_capacity)
        fprintf(f, "  device capacity: %s\n", am_fmt_bytes(m->device_capacity, b, sizeof b));
    if (r->nmeminfo)
        fprintf(f, "  cudaMemGetInfo: %zu samples, min free %s, context + other processes up "
                   "to %s\n",
                r->nmeminfo, am_fmt_bytes(r->min_free, b, sizeof b),
                am_fmt_bytes(r->max_other, (char[32]){0}, 32));
    else
        fprintf(f, "  context + other processes: n/a (no cudaMemGetInfo samples)\n");
    fprintf(f, "  iterations: %zu (%s); layers: %s; steady state: %s (%s)\n", r->niters,
            r->has_step_markers ? "from step markers" : "from the forward/backward/optimizer cycle",
            r->layer_global ? "Megatron global numbers" : "local index in forward order",
            r->steady ? "reached" : "not reached", r->steady_reason ? r->steady_reason : "");
    for (size_t i = 0; i < r->niters && i < 20; i++) {
        const am_iteration *it = &r->iters[i];
        fprintf(f, "    iteration %d: %d microbatch(es), peak", it->number, it->microbatches);
        if (!r->peak[AM_L_TENSOR].known && !r->peak[AM_L_DEVICE].known)
            fprintf(f, " n/a (no memory events)");
        if (r->peak[AM_L_TENSOR].known)
            fprintf(f, " tensor %s (%s)", am_fmt_bytes(it->peak[AM_L_TENSOR], b, sizeof b),
                    it->peak_carried[AM_L_TENSOR] ? "held from before the iteration"
                                                  : am_phase_name(it->peak_phase[AM_L_TENSOR]));
        if (r->peak[AM_L_DEVICE].known)
            fprintf(f, " device %s%s (%s)", r->device_lower_bound ? ">= " : "",
                    am_fmt_bytes(it->peak[AM_L_DEVICE], b, sizeof b),
                    it->peak_carried[AM_L_DEVICE] ? "held from before the iteration"
                                                  : am_phase_name(it->peak_phase[AM_L_DEVICE]));
        fputc('\n', f);
    }
    if (r->niters > 20)
        fprintf(f, "    ... %zu more iterations\n", r->niters - 20);
    if (o->iteration >= 0) {
        fprintf(f, "  iteration %d:\n", o->iteration);
        print_peak(f, r, &r->iter_peak[AM_L_TENSOR], "  tensor-level", o->top);
        print_peak(f, r, &r->iter_peak[AM_L_DEVICE], "  device-level", o->top);
    }
    if (r->nretries)
        fprintf(f, "  alloc_retry: %zu failed allocation(s) succeeded after the allocator freed "
                   "its cache (first: %s in iteration %d, %s)\n",
                r->nretries, am_fmt_bytes(r->retries[0].size, b, sizeof b),
                r->retries[0].iteration, am_phase_name(r->retries[0].phase));
    print_caught(f, r);
    if (r->oom)
        print_oom(f, r, m, o->top);
    for (size_t i = 0; i < m->nwarnings; i++)
        fprintf(f, "  warning: %s\n", m->warnings[i]);
    for (size_t i = 0; i < r->nnotes; i++)
        fprintf(f, "  note: %s\n", r->notes[i]);
    (void)j;
}

/* --ranks all: every rank in full, the hot rank, the advisor's block. */
static void
report_full(FILE *f, const am_job *j, const am_report_opts *o)
{
    char b[32], b2[32];
    fprintf(f, "recomp-analyze: %zu rank(s)%s%s", j->nranks, j->id[0] ? ", job " : "", j->id);
    if (j->rank_selected)
        fprintf(f, " (--rank %d of %zu trace(s): job-level figures cover only it)",
                j->rank_filter, j->nfiles);
    fprintf(f, "\n\n");
    for (size_t i = 0; i < j->nranks; i++) {
        print_rank(f, j, &j->ranks[i], o);
        fputc('\n', f);
    }
    if (j->hot >= 0 && j->nranks > 1) {
        const am_rank *h = &j->ranks[j->hot];
        fprintf(f, "hot rank: %d (%s-level peak %s; lowest rank peak %s, spread %s)\n", h->rank,
                j->hot_level == AM_L_TENSOR ? "tensor" : "device",
                am_fmt_bytes(j->max_peak, b, sizeof b), am_fmt_bytes(j->min_peak, b2, sizeof b2),
                am_fmt_bytes(j->max_peak - j->min_peak, (char[32]){0}, 32));
        if (h->stage >= 0 && h->pp > 1)
            fprintf(f, "  on pipeline stage %d of %d\n", h->stage, h->pp);
        for (size_t i = 0; i < j->nranks; i++)
            if (!j->ranks[i].coverage.complete)
                fprintf(f, "  qualified: rank %d's trace is incomplete (%s): the comparison "
                           "covers only the recorded parts\n",
                        j->ranks[i].rank, j->ranks[i].coverage.summary);
    }
    if (j->verdict)
        adv_report_text(f, j->verdict);
    else
        fprintf(f, "verdict: none (the recompute advisor was not run)\n");
}

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)

/* The verdict, the change and why: the report's first lines. */
static void
verdict_head(FILE *f, const am_job *j)
{
    const adv_verdict *v = j->verdict;
    if (!v) {
        fprintf(f, "verdict: none (the recompute advisor was not run)\n");
        return;
    }
    fprintf(f, "verdict: %s\n", v->code[0] ? v->code : "n/a");
    fprintf(f, "change: %s\n", v->change[0] ? v->change : "none");
    if (v->why[0])
        fprintf(f, "why: %s\n", v->why);
}

/* One line per group of ranks (stage, outcome, peak band). */
static void
stage_lines(FILE *f, const am_job *j, const am_rank_group *g, size_t ng)
{
    char list[512];
    fprintf(f, "ranks by pipeline stage (same stage and outcome, %s-level peak within %.0f%%):\n",
            j->hot_level == AM_L_TENSOR ? "tensor" : "device", AM_GROUP_TOL_PCT);
    for (size_t k = 0; k < ng; k++) {
        const am_rank_group *x = &g[k];
        if (x->stage >= 0)
            fprintf(f, "  stage %d: ", x->stage);
        else
            fprintf(f, "  ");
        fprintf(f, "rank%s %s", x->n > 1 ? "s" : "", am_rank_list(j, x, list, sizeof list));
        static const char *const lv[AM_NLEVELS] = {"device", "tensor"};
        for (int l = AM_L_TENSOR; l >= AM_L_DEVICE; l--) {
            if (!x->known[l]) {
                fprintf(f, ", %s peak n/a", lv[l]);
                continue;
            }
            fprintf(f, ", %s peak %s", lv[l], GB(x->lo[l]));
            if (x->hi[l] != x->lo[l])
                fprintf(f, "-%s", GB(x->hi[l]));
        }
        const am_rank *r0 = &j->ranks[x->idx[0]];
        if (x->oom && r0->oom)
            fprintf(f, ", OOM (rank %d: %s)", r0->rank,
                    am_oom_when(r0->oom, (char[96]){0}, 96));
        fprintf(f, "%s\n", x->majority ? "" : "  <- differs");
    }
}

/* One peak on one line: size, when, phase, what set it. */
static void
peak_line(FILE *f, const am_rank *r, int level)
{
    /* level + AM_NLEVELS: the --iteration K peak at that level */
    const am_peak *p = level < AM_NLEVELS ? &r->peak[level] : &r->iter_peak[level - AM_NLEVELS];
    level %= AM_NLEVELS;
    const char *name = level == AM_L_TENSOR ? "tensor" : "device";
    if (!p->known) {
        fprintf(f, "  %s-level peak: n/a (%s)\n", name, p->reason ? p->reason : "unknown");
        return;
    }
    fprintf(f, "  %s-level peak: %s%s at %.3f s, ", name,
            level == AM_L_DEVICE && r->device_lower_bound ? "at least " : "", GB(p->bytes),
            (double)p->time_ns / 1e9);
    if (p->iteration >= 0)
        fprintf(f, "iteration %d", p->iteration);
    else
        fprintf(f, "before the first iteration");
    fprintf(f, ", phase %s", am_phase_name(p->phase));
    if (p->setter.pretrace)
        fprintf(f, "; set by memory reserved before the trace\n");
    else
        fprintf(f, "; set by a %s allocation (%s / %s)\n", GB(p->setter.size),
                am_phase_name(p->setter.attr.phase), am_boundary_name(p->setter.attr.boundary));
    if (!p->setter.pretrace && p->setter.python[0])
        fprintf(f, "    in Python: %s\n", p->setter.python);
}

/* A rank in brief: peaks, the OOM, coverage; contributors when top > 0. */
static void
rank_brief(FILE *f, const am_rank *r, int top)
{
    fprintf(f, "rank %d (%s)", r->rank, r->path);
    if (r->pp > 1)
        fprintf(f, ", pipeline stage %d of %d", r->stage, r->pp);
    fputc('\n', f);
    const am_meta *m = r->src ? &r->src->meta : NULL;
    if (m && m->exit_via) /* trace format 1.6 */
        fprintf(f, "  exited with status %d via %s (no exit handler ran; the shim closed the "
                   "trace there)\n", m->exit_status, am_exit_via_name(m->exit_via));
    else if (m && !m->closed && m->exit_sealed)
        fprintf(f, "  NOT CLOSED: killed (or still running): an _exit or _Exit would have "
                   "closed the trace\n");
    if (!r->coverage.complete)
        fprintf(f, "  COVERAGE: INCOMPLETE, %s\n", r->coverage.summary);
    peak_line(f, r, AM_L_TENSOR);
    peak_line(f, r, AM_L_DEVICE);
    int l = r->peak[AM_L_TENSOR].known ? AM_L_TENSOR : AM_L_DEVICE;
    if (top > 0 && r->peak[l].known) {
        fprintf(f, "  live at the %s-level peak:\n", l == AM_L_TENSOR ? "tensor" : "device");
        print_groups(f, r, r->peak[l].groups, r->peak[l].ngroups, top, "    ");
    }
    if (r->iter_selected >= 0) {
        /* iteration K's own peaks and the live set at them, not the overall
         * peak's (hnew2 finding 3: the optimizer state of a later step was
         * listed at iteration 0's backward peak) */
        fprintf(f, "  iteration %d:\n", r->iter_selected);
        peak_line(f, r, AM_L_TENSOR + AM_NLEVELS);
        peak_line(f, r, AM_L_DEVICE + AM_NLEVELS);
        const am_peak *ip = &r->iter_peak[AM_L_TENSOR];
        int il = ip->known ? AM_L_TENSOR : AM_L_DEVICE;
        ip = &r->iter_peak[il];
        if (top > 0 && ip->known) {
            fprintf(f, "  live at iteration %d's %s-level peak:\n", r->iter_selected,
                    il == AM_L_TENSOR ? "tensor" : "device");
            print_groups(f, r, ip->groups, ip->ngroups, top, "    ");
        }
    }
    print_caught(f, r);
    if (r->oom) {
        const am_oom *x = r->oom;
        char when[96], live[256];
        if (x->past_limit)
            snprintf(when, sizeof when, "%s", am_oom_when(x, (char[96]){0}, 96));
        else if (x->iteration < 0)
            snprintf(when, sizeof when, "before iteration 0, phase %s", am_phase_name(x->phase));
        else
            snprintf(when, sizeof when, "iteration %d, phase %s", x->iteration,
                     am_phase_name(x->phase));
        fprintf(f, "  OOM: %s requested at %.3f s, %s; %s\n", GB(x->requested),
                (double)x->t_ns / 1e9, when, am_oom_live(r, x, live, sizeof live));
        if (x->where[0])
            fprintf(f, "    ranges: %s\n", x->where);
    }
}

/* The hot rank in detail, then one rank of each group that differs from its
 * stage (at most max_differ; the rest counted). */
static void
details(FILE *f, const am_job *j, const am_rank_group *g, size_t ng, int top)
{
    if (j->hot >= 0) {
        fprintf(f, "\nhot ");
        rank_brief(f, &j->ranks[j->hot], top);
        if (j->nranks > 1)
            fprintf(f, "  spread: lowest rank peak %s, %s below the hot rank\n", GB(j->min_peak),
                    GB(j->max_peak - j->min_peak));
    }
    enum { max_differ = 3 };
    size_t shown = 0, more = 0;
    for (size_t k = 0; k < ng; k++) {
        if (g[k].majority)
            continue;
        size_t i = g[k].idx[0];
        if ((int)i == j->hot)
            continue;
        if (shown == max_differ) {
            more++;
            continue;
        }
        fprintf(f, "\ndiffers from its stage: ");
        rank_brief(f, &j->ranks[i], 0);
        shown++;
    }
    if (more)
        fprintf(f, "\n... %zu more group(s) differ (--ranks all lists every rank)\n", more);
}

/* 1 when findings a and b say the same thing (code, subtype, evidence) */
static int
same_finding(const adv_finding *a, const adv_finding *b)
{
    return strcmp(a->code, b->code) == 0 && strcmp(a->subtype, b->subtype) == 0 &&
           strcmp(a->evidence, b->evidence) == 0;
}

/* Finding k once: a finding that several ranks carry word for word (the
 * data-parallel replicas of a stage) is printed at its first occurrence with
 * the ranks that carry it, and not again; a rank's own finding names its
 * rank when any other rank has findings of the same code. */
static void
finding_line(FILE *f, const adv_verdict *v, size_t k)
{
    const adv_finding *x = &v->findings[k];
    for (size_t i = 0; i < k; i++)
        if (same_finding(&v->findings[i], x))
            return;
    size_t same = 0, code = 0;
    for (size_t i = 0; i < v->nfindings; i++) {
        same += same_finding(&v->findings[i], x);
        code += strcmp(v->findings[i].code, x->code) == 0;
    }
    fprintf(f, "  finding %s (%s", x->code, x->subtype);
    if (x->rank >= 0 && code > 1) {
        fprintf(f, same > 1 ? ", ranks %d" : ", rank %d", x->rank);
        for (size_t i = k + 1; i < v->nfindings; i++)
            if (same_finding(&v->findings[i], x))
                fprintf(f, ",%d", v->findings[i].rank);
    }
    fprintf(f, "): %s\n", x->evidence);
}

/* The advisor's evidence for the hot rank (the whole block: --ranks all). */
static void
advisor_brief(FILE *f, const am_job *j)
{
    const adv_verdict *v = j->verdict;
    if (!v)
        return;
    fprintf(f, "\nrecompute advisor (configuration: %s)\n",
            v->cfg.megatron ? v->cfg.source : "not Megatron");
    if (v->cfg.unknown[0])
        fprintf(f, "  unknown settings: %s\n", v->cfg.unknown);
    if (v->level_note[0])
        fprintf(f, "  note: %s\n", v->level_note);
    size_t tight = 0;
    long long tmargin = 0;
    /* the margin is the JSON's margin_bytes: budget - the prediction's
     * reserved peak (its allocated peak plus its own modelled cache) */
    for (size_t i = 0; i < v->nranks; i++) {
        long long m = (long long)v->budget[i] - (long long)v->pred_reserved[i];
        if (!i || m < tmargin) {
            tight = i;
            tmargin = m;
        }
    }
    if (v->nranks) {
        long long m = tmargin;
        fprintf(f, "  tightest rank %d: budget %s (capacity %s - outside PyTorch %s - headroom "
                   "%s), baseline peak %s, projected %s + its allocator cache %s = %s reserved, "
                   "margin %s%s\n",
                v->rank_id[tight], GB(v->budget[tight]), GB(v->capacity[tight]),
                GB(v->outside[tight]), GB(v->headroom), GB(v->baseline[tight]),
                GB(v->predicted[tight]), GB(v->cache[tight]), GB(v->pred_reserved[tight]),
                m < 0 ? "-" : "", GB((uint64_t)(m < 0 ? -m : m)));
    }
    for (size_t k = 0; k < v->nfindings; k++)
        finding_line(f, v, k);
    if (v->ncands) {
        fprintf(f, "  candidates (max projected peak, replay cost, effect):");
        for (size_t k = 0; k < v->ncands; k++) {
            const adv_cand *c = &v->cands[k];
            fprintf(f, "%s%s%s%s %s %.1f%% %s%s", k ? ";" : "", k % 3 ? " " : "\n    ",
                    (int)k == v->chosen ? "*" : "", c->name, GB(c->max_peak), 100 * c->cost,
                    adv_effect_name(c->effect), c->valid ? "" : " (invalid)");
        }
        fputc('\n', f);
        /* the recommended setting's effect with its reason on a line of its own */
        if (v->chosen >= 0 && (size_t)v->chosen < v->ncands &&
            v->cands[v->chosen].effect != ADV_E_FITS && v->cands[v->chosen].reason[0])
            fprintf(f, "    *%s is %s: %s\n", v->cands[v->chosen].name,
                    adv_effect_name(v->cands[v->chosen].effect), v->cands[v->chosen].reason);
    }
    if (v->confirm[0])
        fprintf(f, "  confirm: %s\n", v->confirm);
}

/* Each distinct warning and note once, with the ranks that have it. */
static void
warnings_once(FILE *f, const am_job *j)
{
    int any = 0;
    for (size_t i = 0; i < j->nranks; i++) {
        const am_rank *r = &j->ranks[i];
        size_t nw = r->src->meta.nwarnings;
        for (size_t w = 0; w < nw + r->nnotes; w++) {
            const char *s = w < nw ? r->src->meta.warnings[w] : r->notes[w - nw];
            int before = 0; /* printed already for an earlier rank? */
            for (size_t p = 0; p < i && !before; p++) {
                const am_rank *q = &j->ranks[p];
                for (size_t k = 0; k < q->src->meta.nwarnings && !before; k++)
                    before = strcmp(q->src->meta.warnings[k], s) == 0;
                for (size_t k = 0; k < q->nnotes && !before; k++)
                    before = strcmp(q->notes[k], s) == 0;
            }
            if (before)
                continue;
            if (!any++)
                fputc('\n', f);
            size_t count = 0;
            for (size_t p = i; p < j->nranks; p++) {
                const am_rank *q = &j->ranks[p];
                int has = 0;
                for (size_t k = 0; k < q->src->meta.nwarnings && !has; k++)
                    has = strcmp(q->src->meta.warnings[k], s) == 0;
                for (size_t k = 0; k < q->nnotes && !has; k++)
                    has = strcmp(q->notes[k], s) == 0;
                count += (size_t)has;
            }
            /* how many analysed ranks carry it (hnew2 finding 10: "missing: ranks
             * 1-7, ... (3 ranks, first rank 0)" read as 3 ranks missing) */
            if (count > 1 && count == j->nranks)
                fprintf(f, "%s: %s (on every analysed rank)\n", w < nw ? "warning" : "note", s);
            else if (count > 1)
                fprintf(f, "%s: %s (on %zu analysed ranks, the first rank %d)\n",
                        w < nw ? "warning" : "note", s, count, r->rank);
            else
                fprintf(f, "%s: %s (rank %d)\n", w < nw ? "warning" : "note", s, r->rank);
        }
    }
}

static void
legend(FILE *f)
{
    fprintf(f, "\nlegend: verdict R:... a recompute setting that fits every rank (R:INSUFFICIENT: "
               "none does, the why says what will); X:... recompute cannot help (the cause "
               "named); OK:FITS fits as it runs (its change may still name a cheaper setting "
               "that fits: less replay); n/a withheld (the why says what is missing); "
               "BUDGET:ABOVE_DEVICE --budget is above the traced device: the advice is for a "
               "larger one. Peaks: tensor = PyTorch allocated; device = cudaMalloc "
               "segments + memory outside PyTorch; baseline peak = the advisor's allocated "
               "peak of the job as it runs, a whole iteration, with a fatal OOM's failed "
               "request (so above the tensor peak after an OOM); projected = the advisor's "
               "counterfactual allocated peak with the change; reserved = PyTorch reserved "
               "(allocated + allocator cache), modelled; the allocator cache (reserved - "
               "allocated) is modelled on each timeline: the baseline's (triage findings) and "
               "each prediction's own (its fit); budget = capacity - outside PyTorch - "
               "headroom; margin = budget - projected reserved (negative: over). Replay "
               "cost: the share of the step spent replaying (FLOP model). Candidate effects: fits (within the budget with the 2%% error bound), "
               "marginal (within it only without the error bound, or the fit unverified: the "
               "recommended one says why), "
               "insufficient (over the budget), ineffective (saves nothing), "
               "counter-productive (raises the peak); (invalid): the job's configuration "
               "rules the setting out (the JSON's candidate reason says why). CACHE UNVERIFIED: the trace ends before "
               "a steady allocator cache, so every cache figure is a lower bound. COVERAGE: "
               "INCOMPLETE: the trace holds only part of the run (capped, windowed, "
               "salvaged). COVERAGE: PARTIAL JOB: ranks of the job have no trace (named); "
               "the verdict covers the ranks analysed. BINDS: the binding ranks (an OOM or a deficit) and what holds each. "
               "--ranks all: every "
               "rank in full.\n");
}

void
am_report_text(FILE *f, const am_job *j, const am_report_opts *o)
{
    if (o->all_ranks) {
        report_full(f, j, o);
        return;
    }
    am_rank_group *g;
    long ng = am_rank_groups(j, &g);
    if (ng < 0) { /* out of memory: the full listing needs nothing more */
        report_full(f, j, o);
        return;
    }
    fprintf(f, "recomp-analyze: %zu rank(s)%s%s", j->nranks, j->id[0] ? ", job " : "", j->id);
    if (j->rank_selected)
        fprintf(f, " (--rank %d of %zu trace(s): job-level figures cover only it)",
                j->rank_filter, j->nfiles);
    fputc('\n', f);
    verdict_head(f, j);
    fputc('\n', f);
    stage_lines(f, j, g, (size_t)ng);
    details(f, j, g, (size_t)ng, o->top < 0 ? 5 : o->top == 0 ? 1 << 30 : o->top);
    advisor_brief(f, j);
    warnings_once(f, j);
    legend(f);
    am_rank_groups_free(g, (size_t)ng);
}
