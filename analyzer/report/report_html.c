/* report_html.c: --html FILE, one self-contained page (no network, no
 * external fonts or scripts): the verdict with its evidence, the ranks
 * grouped by stage, and per group (per rank with --ranks all) an SVG memory
 * timeline of its highest rank: both levels (capture.h's series), phase
 * bands, iteration marks, the device capacity, the peak and any OOM marked,
 * and the contributors at the peak. Markers carry data-* attributes with the
 * exact bytes, so tests can read them from the rendered DOM. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "advisor.h"
#include "capture.h"
#include "report.h"

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)
enum { W = 960, H = 240, ML = 78, MR = 12, MT = 16, MB = 34 };

/* s with &, <, >, " escaped. */
static void
esc(FILE *f, const char *s)
{
    for (; s && *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

typedef struct scale {
    uint64_t t1, ymax;        /* ns, bytes at the right and top edges */
} scale;

static double
sx(const scale *s, uint64_t t)
{
    return ML + (double)(W - ML - MR) * (s->t1 ? (double)t / (double)s->t1 : 0);
}

static double
sy(const scale *s, uint64_t b)
{
    return H - MB - (double)(H - MT - MB) * (s->ymax ? (double)b / (double)s->ymax : 0);
}

static scale
scale_of(const am_rank *r, const am_capture *c)
{
    scale s = {1, 1};
    for (size_t i = 0; i < r->niters; i++)
        if (r->iters[i].end_ns > s.t1)
            s.t1 = r->iters[i].end_ns;
    if (c && c->last_t > s.t1)
        s.t1 = c->last_t;
    for (int l = 0; l < AM_NLEVELS; l++)
        if (r->peak[l].known && r->peak[l].bytes > s.ymax)
            s.ymax = r->peak[l].bytes;
    if (r->src->meta.device_capacity > s.ymax)
        s.ymax = r->src->meta.device_capacity;
    s.ymax += s.ymax / 20;
    return s;
}

/* Phase bands, iteration marks, axes. */
static void
svg_background(FILE *f, const am_rank *r, const scale *s)
{
    for (size_t i = 0; i < r->niters; i++) {
        const am_iteration *it = &r->iters[i];
        for (size_t k = 0; k < it->nphases; k++) {
            const am_phase_span *p = &it->phases[k];
            double x0 = sx(s, p->start_ns), x1 = sx(s, p->end_ns);
            fprintf(f, "<rect class=\"phase ph%d\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
                       "height=\"%d\"><title>%s</title></rect>\n",
                    p->phase % 8, x0, MT, x1 - x0 > 0.5 ? x1 - x0 : 0.5, H - MT - MB,
                    am_phase_name(p->phase));
        }
        double x = sx(s, it->start_ns);
        fprintf(f, "<line class=\"iter\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
                   "<text x=\"%.1f\" y=\"%d\" class=\"small\">it %d</text>\n",
                x, x, MT, H - MB, x + 2, H - MB + 12, it->number);
    }
    for (int k = 0; k <= 4; k++) {
        uint64_t b = s->ymax / 4 * (uint64_t)k;
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"small\" text-anchor=\"end\">%s</text>\n",
                ML - 4, sy(s, b) + 4, GB(b));
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"small\">0 s</text><text x=\"%d\" y=\"%d\" "
               "class=\"small\" text-anchor=\"end\">%.3f s</text>\n",
            ML, H - 6, W - MR, H - 6, (double)s->t1 / 1e9);
    uint64_t cap = r->src->meta.device_capacity;
    if (cap)
        fprintf(f, "<line class=\"capacity\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
                   "<text x=\"%d\" y=\"%.1f\" class=\"small\">capacity %s</text>\n",
                ML, W - MR, sy(s, cap), sy(s, cap), ML + 4, sy(s, cap) - 3, GB(cap));
}

/* Both levels' series, the peaks and the OOM. */
static void
svg_series(FILE *f, const am_rank *r, const am_capture *c, const scale *s)
{
    static const char *const lv[AM_NLEVELS] = {"device", "tensor"};
    for (int l = 0; c && l < AM_NLEVELS; l++) {
        const am_cseries *x = &c->level[l];
        if (!x->n)
            continue;
        fprintf(f, "<polyline class=\"level %s\" points=\"%.1f,%.1f", lv[l], sx(s, 0), sy(s, 0));
        for (size_t i = 0; i < x->n; i++) {
            fprintf(f, " %.1f,%.1f", sx(s, x->b[i].max_t), sy(s, x->b[i].max_v));
            if (x->b[i].last_t > x->b[i].max_t)
                fprintf(f, " %.1f,%.1f", sx(s, x->b[i].last_t), sy(s, x->b[i].last_v));
        }
        fprintf(f, "\"/>\n");
    }
    for (int l = 0; l < AM_NLEVELS; l++) {
        const am_peak *p = &r->peak[l];
        if (!p->known)
            continue;
        fprintf(f, "<circle class=\"peak %s\" data-level=\"%s\" data-bytes=\"%" PRIu64 "\" "
                   "cx=\"%.1f\" cy=\"%.1f\" r=\"4\"><title>%s-level peak %s, iteration %d, "
                   "%s</title></circle>\n",
                lv[l], lv[l], p->bytes, sx(s, p->time_ns), sy(s, p->bytes), lv[l], GB(p->bytes),
                p->iteration, am_phase_name(p->phase));
    }
    if (r->oom) {
        double x = sx(s, r->oom->t_ns);
        fprintf(f, "<line class=\"oom\" data-t-ns=\"%" PRIu64 "\" x1=\"%.1f\" x2=\"%.1f\" "
                   "y1=\"%d\" y2=\"%d\"/><text x=\"%.1f\" y=\"%d\" class=\"small oomt\">OOM "
                   "(%s requested)</text>\n",
                r->oom->t_ns, x, x, MT, H - MB, x - 4, MT + 10, GB(r->oom->requested));
    }
}

/* One timeline (a group's highest rank) with its contributors. */
static void
timeline(FILE *f, const am_rank *r, const am_capture *c, const char *title, int top)
{
    scale s = scale_of(r, c);
    int l = r->peak[AM_L_TENSOR].known ? AM_L_TENSOR : AM_L_DEVICE;
    fprintf(f, "<section class=\"rank\"><h3>");
    esc(f, title);
    fprintf(f, "</h3>\n<svg class=\"timeline\" data-rank=\"%d\" data-level=\"%s\" "
               "data-peak-bytes=\"%" PRIu64 "\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n",
            r->rank, l == AM_L_TENSOR ? "tensor" : "device",
            r->peak[l].known ? r->peak[l].bytes : 0, W, H, W, H);
    fprintf(f, "<rect class=\"plot\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n", ML, MT,
            W - ML - MR, H - MT - MB);
    svg_background(f, r, &s);
    svg_series(f, r, c, &s);
    fprintf(f, "</svg>\n");
    const am_peak *p = &r->peak[l];
    if (p->known) {
        fprintf(f, "<table><tr><th>bytes at the %s-level peak (%s)</th><th>phase</th>"
                   "<th>boundary</th><th>layer</th><th>count</th></tr>\n",
                l == AM_L_TENSOR ? "tensor" : "device", GB(p->bytes));
        for (size_t i = 0; i < p->ngroups && (int)i < top; i++) {
            const am_group *g = &p->groups[i];
            fprintf(f, "<tr><td>%s</td><td>%s</td><td>%s</td><td>", GB(g->bytes),
                    am_phase_name(g->phase), am_boundary_name(g->boundary));
            if (g->layer > 0)
                fprintf(f, "%d", g->layer);
            fprintf(f, "</td><td>%" PRIu64 "</td></tr>\n", g->count);
        }
        fprintf(f, "</table>\n");
    }
    fprintf(f, "</section>\n");
}

/* The verdict with its evidence. */
static void
verdict(FILE *f, const am_job *j)
{
    const adv_verdict *v = j->verdict;
    if (!v) {
        fprintf(f, "<p>verdict: none (the recompute advisor was not run)</p>\n");
        return;
    }
    fprintf(f, "<h2>verdict: <code id=\"verdict\">");
    esc(f, v->code[0] ? v->code : "n/a");
    fprintf(f, "</code></h2>\n<p>change: <code>");
    esc(f, v->change[0] ? v->change : "none");
    fprintf(f, "</code></p>\n<p>");
    esc(f, v->why);
    fprintf(f, "</p>\n<ul>\n");
    for (size_t k = 0; k < v->nfindings; k++) {
        fprintf(f, "<li><b>");
        esc(f, v->findings[k].code);
        fprintf(f, "</b>: ");
        esc(f, v->findings[k].evidence);
        fprintf(f, "</li>\n");
    }
    fprintf(f, "</ul>\n");
    if (!v->ncands)
        return;
    fprintf(f, "<table><tr><th>setting</th><th>max projected peak</th><th>replay cost</th>"
               "<th>effect</th><th>valid</th></tr>\n");
    for (size_t k = 0; k < v->ncands; k++) {
        const adv_cand *c = &v->cands[k];
        fprintf(f, "<tr%s><td>", (int)k == v->chosen ? " class=\"chosen\"" : "");
        esc(f, c->name);
        fprintf(f, "</td><td>%s</td><td>%.1f%%</td><td>%s</td><td>%s</td></tr>\n",
                GB(c->max_peak), 100 * c->cost, adv_effect_name(c->effect),
                c->valid ? "yes" : "no");
    }
    fprintf(f, "</table>\n");
}

static const char style[] =
    "body{font-family:sans-serif;margin:16px;color:#222;background:#fff}"
    "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:2px 6px;"
    "font-size:13px}tr.chosen{background:#e6f4e6}.plot{fill:#fafafa;stroke:#999}"
    ".level{fill:none;stroke-width:1.5}.level.tensor{stroke:#d95f02}.level.device{stroke:#1b6ac9}"
    ".peak.tensor{fill:#d95f02}.peak.device{fill:#1b6ac9}.oom{stroke:#c00;stroke-width:2}"
    ".oomt{fill:#c00}.iter{stroke:#666;stroke-dasharray:3 3}.capacity{stroke:#444;"
    "stroke-dasharray:6 3}.small{font-size:10px}.phase{opacity:.18}.ph0{fill:#999}"
    ".ph1{fill:#1b9e77}.ph2{fill:#7570b3}.ph3{fill:#e7298a}.ph4{fill:#66a61e}"
    ".ph5{fill:#e6ab02}.ph6{fill:#a6761d}.ph7{fill:#1f78b4}";

void
am_html_head(FILE *f, const char *h1)
{
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>recomp-analyze"
               "</title><style>%s</style></head><body>\n<h1>",
            style);
    esc(f, h1);
    fprintf(f, "</h1>\n");
}

void
am_html_legend(FILE *f)
{
    fprintf(f, "<p class=\"legend\">lines: <span style=\"color:#d95f02\">tensor level (PyTorch "
               "allocated)</span>, <span style=\"color:#1b6ac9\">device level (segments + "
               "outside PyTorch)</span>; bands: phases; dashed: iterations and the device "
               "capacity; dots: the peaks; red: the OOM.</p>\n");
}

void
am_html_esc(FILE *f, const char *s)
{
    esc(f, s);
}

void
am_html_hot_timeline(FILE *f, const am_job *j, const am_capture *caps, size_t ncaps,
                     const char *title)
{
    if (j->hot >= 0)
        timeline(f, &j->ranks[j->hot], am_capture_of(caps, ncaps, &j->ranks[j->hot]), title, 5);
}

int
am_report_html(FILE *f, const am_job *j, const am_capture *caps, size_t ncaps,
               const am_report_opts *o)
{
    char title[128], list[512];
    int top = o->top < 0 ? 8 : o->top == 0 ? 1 << 30 : o->top;
    snprintf(title, sizeof title, "recomp-analyze: %zu rank(s)", j->nranks);
    am_html_head(f, title);
    fprintf(f, "<p>");
    esc(f, j->id);
    fprintf(f, "</p>\n");
    verdict(f, j);
    am_html_legend(f);
    am_rank_group *g;
    long ng = o->all_ranks ? 0 : am_rank_groups(j, &g);
    if (ng < 0)
        return -1;
    if (o->all_ranks)
        for (size_t i = 0; i < j->nranks; i++) {
            const am_rank *r = &j->ranks[i];
            snprintf(title, sizeof title, "rank %d%s", r->rank, (int)i == j->hot ? " (hot)" : "");
            timeline(f, r, am_capture_of(caps, ncaps, r), title, top);
        }
    for (long k = 0; k < ng; k++) {
        const am_rank *r = &j->ranks[g[k].idx[0]];
        for (size_t m = 1; m < g[k].n; m++) /* the group's highest rank */
            if (j->ranks[g[k].idx[m]].peak[j->hot_level].bytes > r->peak[j->hot_level].bytes)
                r = &j->ranks[g[k].idx[m]];
        if (g[k].stage >= 0)
            snprintf(title, sizeof title, "stage %d: ranks %s%s (shown: rank %d)", g[k].stage,
                     am_rank_list(j, &g[k], list, sizeof list), g[k].majority ? "" : ", differs",
                     r->rank);
        else
            snprintf(title, sizeof title, "ranks %s%s (shown: rank %d)",
                     am_rank_list(j, &g[k], list, sizeof list), g[k].majority ? "" : ", differs",
                     r->rank);
        timeline(f, r, am_capture_of(caps, ncaps, r), title, top);
    }
    if (ng > 0)
        am_rank_groups_free(g, (size_t)ng);
    fprintf(f, "</body></html>\n");
    return ferror(f) ? -1 : 0;
}
