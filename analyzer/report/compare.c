/* compare.c: run summaries and the matched comparison of a control run and
 * candidates (docs/analysis.md "Comparing runs"): per run its recompute
 * setting and every other setting that differs from the control, the
 * outcome, the peaks at both levels per rank (hot rank first), the steady
 * step time and the change against the control. The practice is the
 * measurement contract of a matched comparison: runs that differ in more
 * than the recompute choice are flagged, unknown settings are said so. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_gen.h>

#include "compare.h"
#include "json_str.h"
#include "report.h"

/* The settings compared (adv_cfg fields; names as Megatron's argparse dests
 * or TransformerConfig fields), except the recompute ones. */
#define CFG_INT(f, name) {name, offsetof(adv_cfg, f), 0}
#define CFG_STR(f, name) {name, offsetof(adv_cfg, f), 1}
static const struct {
    const char *name;
    size_t off;
    int str;
} settings[] = {
    CFG_INT(num_layers, "num_layers"), CFG_INT(hidden, "hidden_size"),
    CFG_INT(ffn, "ffn_hidden_size"), CFG_INT(heads, "num_attention_heads"),
    CFG_INT(groups, "num_query_groups"), CFG_INT(kv_channels, "kv_channels"),
    CFG_INT(seq, "seq_length"), CFG_INT(mbs, "micro_batch_size"),
    CFG_INT(gbs, "global_batch_size"), CFG_INT(vocab, "vocab_size"),
    CFG_INT(tp, "tensor_model_parallel_size"), CFG_INT(pp, "pipeline_model_parallel_size"),
    CFG_INT(cp, "context_parallel_size"), CFG_INT(ep, "expert_model_parallel_size"),
    CFG_INT(etp, "expert_tensor_parallel_size"),
    CFG_INT(vpp, "virtual_pipeline_model_parallel_size"), CFG_INT(sp, "sequence_parallel"),
    CFG_INT(world, "world_size"), CFG_INT(dp, "data_parallel_size"),
    CFG_INT(dist_opt, "use_distributed_optimizer"), CFG_INT(bf16, "bf16"),
    CFG_INT(fp16, "fp16"), CFG_INT(swiglu, "swiglu"), CFG_INT(fused_attn, "fused attention"),
    CFG_INT(num_experts, "num_moe_experts"), CFG_INT(topk, "moe_router_topk"),
    CFG_INT(moe_ffn, "moe_ffn_hidden_size"),
    CFG_INT(shared_ffn, "moe_shared_expert_intermediate_size"),
    CFG_INT(grouped_gemm, "moe_grouped_gemm"),
    CFG_INT(shared_overlap, "moe_shared_expert_overlap"),
    CFG_INT(ep_overlap, "expert-parallel communication overlap"),
    CFG_INT(mla, "multi_latent_attention"), CFG_INT(q_lora, "q_lora_rank"),
    CFG_INT(kv_lora, "kv_lora_rank"), CFG_INT(qk_head, "qk_head_dim"),
    CFG_INT(qk_pos, "qk_pos_emb_head_dim"), CFG_INT(v_head, "v_head_dim"),
    CFG_INT(fp8, "fp8_format set"), CFG_STR(fp8_recipe, "fp8_recipe"),
    CFG_STR(cuda_graph_impl, "cuda_graph_impl"), CFG_STR(cuda_graph_modules, "cuda_graph_scope"),
    CFG_INT(distribute_saved, "distribute_saved_activations"),
    CFG_INT(cpu_offloading, "cpu_offloading"), CFG_INT(exp_avg_bf16, "exp_avg_dtype bf16"),
    CFG_INT(moe_layer_freq_k, "moe_layer_freq"), CFG_STR(moe_pattern, "moe_layer_freq pattern"),
    CFG_INT(alloc_expandable, "PYTORCH_CUDA_ALLOC_CONF expandable_segments"),
};

/* "none", "selective[core_attn,mlp]", "full[block,2]" */
static void
recompute_setting(const adv_cfg *c, char *buf, size_t n)
{
    if (c->granularity == 2) {
        snprintf(buf, n, "full[%s,%d]", c->method == 2 ? "block" : c->method == 1 ? "uniform" : "?",
                 c->recompute_num_layers);
        return;
    }
    if (c->granularity != 1) {
        snprintf(buf, n, "none");
        return;
    }
    size_t at = (size_t)snprintf(buf, n, "selective[");
    for (int l = 0; l < ADV_NLABELS && at < n; l++)
        if (c->modules & (1u << l))
            at += (size_t)snprintf(buf + at, n - at, "%s%s", buf[at - 1] == '[' ? "" : ",",
                                   adv_label_name(l));
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

/* Median duration (s) of the iterations after the first that ended before
 * any OOM, on rank r; 0 with why when there are none. */
static double
steady_step(const am_rank *r, char *why, size_t n)
{
    double d[512];
    size_t k = 0;
    for (size_t i = 1; i < r->niters && k < 512; i++) {
        const am_iteration *it = &r->iters[i];
        if (it->end_ns <= it->start_ns || (r->oom && r->oom->t_ns <= it->end_ns))
            continue;
        d[k++] = (double)(it->end_ns - it->start_ns) / 1e9;
    }
    if (!k) {
        snprintf(why, n, "no complete iteration after the first (warm-up) on rank %d",
                 r->rank);
        return 0;
    }
    for (size_t i = 1; i < k; i++) /* insertion sort: few iterations */
        for (size_t j = i; j > 0 && d[j - 1] > d[j]; j--) {
            double t = d[j];
            d[j] = d[j - 1];
            d[j - 1] = t;
        }
    return k % 2 ? d[k / 2] : (d[k / 2 - 1] + d[k / 2]) / 2;
}

/* Peaks per level and rank into s. */
static void
fill_peaks(am_runsum *s, const am_job *j)
{
    for (int l = 0; l < AM_NLEVELS; l++) {
        s->known[l] = 1;
        s->peak_rank[l] = -1;
    }
    for (size_t i = 0; i < j->nranks; i++) {
        const am_rank *r = &j->ranks[i];
        for (int l = 0; l < AM_NLEVELS; l++) {
            const am_peak *p = &r->peak[l];
            if (i < AM_CMP_MAX_RANKS) {
                s->rank_known[i][l] = (uint8_t)p->known;
                s->rank_peak[i][l] = p->known ? p->bytes : 0;
            }
            if (!p->known) {
                if (s->known[l])
                    snprintf(s->na[l], sizeof s->na[l], "rank %d: %s", r->rank,
                             p->reason ? p->reason : "unknown");
                s->known[l] = 0;
            } else if (s->peak_rank[l] < 0 || p->bytes > s->peak[l]) {
                s->peak[l] = p->bytes;
                s->peak_rank[l] = r->rank;
            }
        }
        if (i < AM_CMP_MAX_RANKS)
            s->rank_id[i] = r->rank;
    }
}

void
am_runsum_fill(am_runsum *s, const char *label, const am_job *j, const struct adv_verdict *v,
               const char *config)
{
    memset(s, 0, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", label);
    s->nranks = j->nranks;
    s->nrank_rows = j->nranks < AM_CMP_MAX_RANKS ? j->nranks : AM_CMP_MAX_RANKS;
    s->hot_rank = j->hot >= 0 ? j->ranks[j->hot].rank : -1;
    fill_peaks(s, j);
    s->oom_rank = -1;
    s->completed = -1;
    for (size_t i = 0; i < j->nranks; i++) {
        const am_rank *r = &j->ranks[i];
        int done = (int)r->niters;
        if (r->oom) {
            done = 0;
            for (size_t k = 0; k < r->niters; k++)
                done += r->iters[k].end_ns && r->iters[k].end_ns < r->oom->t_ns;
            if (!s->oom || r->oom->iteration < s->oom_iter) {
                s->oom_rank = r->rank;
                s->oom_iter = r->oom->iteration;
                s->oom_phase = r->oom->phase;
            }
            s->oom = 1;
        }
        if (s->completed < 0 || done < s->completed)
            s->completed = done;
        s->incomplete |= !r->coverage.complete || !r->src->meta.closed;
        s->killed |= !r->src->meta.closed;
    }
    const am_rank *hot = j->hot >= 0 ? &j->ranks[j->hot] : &j->ranks[0];
    s->step_s = steady_step(hot, s->step_na, sizeof s->step_na);
    s->step_known = s->step_s > 0;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", j->ranks[0].path);
    char *sl = strrchr(dir, '/');
    if (sl)
        *sl = 0;
    else
        snprintf(dir, sizeof dir, ".");
    adv_config_read(&j->ranks[0].src->meta, config, dir, &s->cfg);
    s->settings_known = s->cfg.megatron;
    if (s->settings_known)
        recompute_setting(&s->cfg, s->setting, sizeof s->setting);
    else
        snprintf(s->setting, sizeof s->setting, "unknown");
    if (v) {
        s->has_verdict = 1;
        snprintf(s->verdict, sizeof s->verdict, "%s", v->code[0] ? v->code : "n/a");
    }
}

int
am_settings_diff(const am_runsum *a, const am_runsum *b, char *buf, size_t n)
{
    buf[0] = 0;
    if (!a->settings_known || !b->settings_known) {
        snprintf(buf, n, "settings unknown for %s (no Megatron command line or config "
                         "recorded): cannot tell whether the runs are matched",
                 !a->settings_known ? a->label : b->label);
        return -1;
    }
    int k = 0;
    size_t at = 0;
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        const char *pa = (const char *)&a->cfg + settings[i].off;
        const char *pb = (const char *)&b->cfg + settings[i].off;
        char va[64], vb[64];
        if (settings[i].str) {
            if (strcmp(pa, pb) == 0)
                continue;
            snprintf(va, sizeof va, "%s", pa[0] ? pa : "-");
            snprintf(vb, sizeof vb, "%s", pb[0] ? pb : "-");
        } else {
            int x = *(const int *)(const void *)pa, y = *(const int *)(const void *)pb;
            if (x == y)
                continue;
            snprintf(va, sizeof va, "%d", x);
            snprintf(vb, sizeof vb, "%d", y);
        }
        if (at < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%s %s->%s", k ? "; " : "",
                                   settings[i].name, va, vb);
        k++;
    }
    return k;
}

int
am_run_passes(const am_runsum *s)
{
    return !s->oom && !s->killed && s->completed > 0;
}

/* "completed 3 iteration(s)" / "OOM in iteration 1, phase forward, rank 0" */
static void
outcome(const am_runsum *s, char *buf, size_t n)
{
    if (!s->oom && s->killed)
        snprintf(buf, n, "a trace was not closed (killed or still running) after %d "
                         "iteration(s) recorded, the last possibly cut",
                 s->completed);
    else if (!s->oom)
        snprintf(buf, n, "completed %d iteration(s)%s", s->completed,
                 s->incomplete ? " (a trace is capped or windowed)" : "");
    else if (s->oom_iter >= 0)
        snprintf(buf, n, "OOM in iteration %d, phase %s, rank %d (after %d complete)",
                 s->oom_iter, am_phase_name(s->oom_phase), s->oom_rank, s->completed);
    else
        snprintf(buf, n, "OOM before the first iteration, phase %s, rank %d",
                 am_phase_name(s->oom_phase), s->oom_rank);
}

/* "+1.20 GiB (+2.10%)" of s against c at level l, or "n/a (...)". */
static void
delta(const am_runsum *c, const am_runsum *s, int l, char *buf, size_t n)
{
    char b[32];
    if (!c->known[l] || !s->known[l]) {
        snprintf(buf, n, "n/a");
        return;
    }
    int64_t d = (int64_t)s->peak[l] - (int64_t)c->peak[l];
    am_fmt_bytes((uint64_t)(d < 0 ? -d : d), b, sizeof b);
    snprintf(buf, n, "%s%s (%+.2f%%)%s", d < 0 ? "-" : "+", b,
             c->peak[l] ? 100.0 * (double)d / (double)c->peak[l] : 0.0,
             c->oom || s->oom ? " [OOM-cut]" : "");
}

static const char oom_cut_note[] =
    "[OOM-cut]: a run stopped at an OOM: its peak covers only what ran before it, so the "
    "change is not like for like";

/* Does any run of the comparison stop at an OOM? */
static int
any_oom(const am_comparison *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->runs[i].oom)
            return 1;
    return 0;
}

static const char *
peak_str(const am_runsum *s, int l, char *buf, size_t n)
{
    if (!s->known[l]) {
        snprintf(buf, n, "n/a");
        return buf;
    }
    char b[32];
    snprintf(buf, n, "%s (rank %d)", am_fmt_bytes(s->peak[l], b, sizeof b), s->peak_rank[l]);
    return buf;
}

/* The matched-with-control status of candidate i. */
static void
matched(const am_comparison *c, size_t i, char *buf, size_t n)
{
    if (i == 0) {
        snprintf(buf, n, "control");
        return;
    }
    char d[768];
    int k = am_settings_diff(&c->runs[0], &c->runs[i], d, sizeof d);
    if (k == 0)
        snprintf(buf, n, "matched");
    else if (k < 0)
        snprintf(buf, n, "UNKNOWN: %s", d);
    else
        snprintf(buf, n, "UNMATCHED: differs in %s", d);
}

/* One row per rank: control and candidates, hot rank of the control first. */
static void
rank_rows(FILE *f, const am_comparison *c, int md)
{
    const am_runsum *c0 = &c->runs[0];
    if (c0->nranks > c0->nrank_rows)
        fprintf(f, "\n(the first %zu of the control's %zu ranks)\n", c0->nrank_rows, c0->nranks);
    if (md)
        fprintf(f, "\n| rank |");
    else
        fprintf(f, "\nper rank, allocated / device peak (hot rank first):\n  %-6s", "rank");
    for (size_t i = 0; i < c->n; i++)
        fprintf(f, md ? " run %zu |" : " | run %-27zu", i);
    fputc('\n', f);
    if (md) {
        fprintf(f, "|---|");
        for (size_t i = 0; i < c->n; i++)
            fprintf(f, "---|");
        fputc('\n', f);
    }
    for (size_t pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < c0->nrank_rows; k++) {
            int id = c0->rank_id[k];
            if ((id == c0->hot_rank) != (pass == 0))
                continue;
            fprintf(f, md ? "| %d |" : "  %-6d", id);
            for (size_t i = 0; i < c->n; i++) {
                const am_runsum *s = &c->runs[i];
                size_t r = 0;
                while (r < s->nrank_rows && s->rank_id[r] != id)
                    r++;
                char cell[80] = "not in this run";
                if (r < s->nrank_rows) {
                    char t[32] = "n/a", d[32] = "n/a";
                    if (s->rank_known[r][AM_L_TENSOR])
                        am_fmt_bytes(s->rank_peak[r][AM_L_TENSOR], t, sizeof t);
                    if (s->rank_known[r][AM_L_DEVICE])
                        am_fmt_bytes(s->rank_peak[r][AM_L_DEVICE], d, sizeof d);
                    snprintf(cell, sizeof cell, "%s / %s", t, d);
                }
                fprintf(f, md ? " %s |" : " | %-31s", cell);
            }
            fputc('\n', f);
        }
}

void
am_compare_text(FILE *f, const am_comparison *c)
{
    char o[160], p1[64], p2[64], d1[64], d2[64], m[1024];
    fprintf(f, "matched comparison: control %s, %zu candidate(s)\n", c->runs[0].label,
            c->n - 1);
    for (size_t i = 0; i < c->n; i++) {
        const am_runsum *s = &c->runs[i];
        outcome(s, o, sizeof o);
        matched(c, i, m, sizeof m);
        delta(&c->runs[0], s, AM_L_TENSOR, d1, sizeof d1);
        delta(&c->runs[0], s, AM_L_DEVICE, d2, sizeof d2);
        fprintf(f, "\nrun %zu: %s\n", i, s->label);
        fprintf(f, "  recompute: %s; %s\n", s->setting, m);
        fprintf(f, "  outcome: %s%s\n", o,
                i && !am_run_passes(s) ? " -- NOT PASSING" : "");
        fprintf(f, "  peak allocated (tensor level): %s", peak_str(s, AM_L_TENSOR, p1, sizeof p1));
        if (!s->known[AM_L_TENSOR])
            fprintf(f, " (%s)", s->na[AM_L_TENSOR]);
        fprintf(f, "%s%s\n", i ? ", change " : "", i ? d1 : "");
        fprintf(f, "  peak device (reserved + outside PyTorch): %s",
                peak_str(s, AM_L_DEVICE, p2, sizeof p2));
        if (!s->known[AM_L_DEVICE])
            fprintf(f, " (%s)", s->na[AM_L_DEVICE]);
        fprintf(f, "%s%s\n", i ? ", change " : "", i ? d2 : "");
        if (s->step_known)
            fprintf(f, "  steady step time: %.3f s (median after the first iteration, rank %d)\n",
                    s->step_s, s->hot_rank);
        else
            fprintf(f, "  steady step time: n/a (%s)\n", s->step_na);
        if (s->has_verdict)
            fprintf(f, "  verdict: %s\n", s->verdict);
    }
    if (any_oom(c) && c->n > 1)
        fprintf(f, "\n%s\n", oom_cut_note);
    rank_rows(f, c, 0);
}

void
am_compare_markdown(FILE *f, const am_comparison *c)
{
    char o[160], p1[64], p2[64], d1[64], d2[64], m[1024], st[32];
    fprintf(f, "## recomp-analyze: matched comparison\n\n");
    fprintf(f, "| run | recompute | matched | outcome | peak allocated | change | peak device "
               "| change | step time | verdict |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < c->n; i++) {
        const am_runsum *s = &c->runs[i];
        outcome(s, o, sizeof o);
        matched(c, i, m, sizeof m);
        delta(&c->runs[0], s, AM_L_TENSOR, d1, sizeof d1);
        delta(&c->runs[0], s, AM_L_DEVICE, d2, sizeof d2);
        if (s->step_known)
            snprintf(st, sizeof st, "%.3f s", s->step_s);
        else
            snprintf(st, sizeof st, "n/a");
        fprintf(f, "| %zu `%s` | %s | %s | %s%s | %s | %s | %s | %s | %s | %s |\n", i, s->label,
                s->setting, m, o, i && !am_run_passes(s) ? " **NOT PASSING**" : "",
                peak_str(s, AM_L_TENSOR, p1, sizeof p1), i ? d1 : "-",
                peak_str(s, AM_L_DEVICE, p2, sizeof p2), i ? d2 : "-", st,
                s->has_verdict ? s->verdict : "-");
    }
    if (any_oom(c) && c->n > 1)
        fprintf(f, "\n%s\n", oom_cut_note);
    rank_rows(f, c, 1);
}

/* One HTML table cell of text. */
static void
td(FILE *f, const char *s)
{
    fprintf(f, "<td>");
    am_html_esc(f, s);
    fprintf(f, "</td>");
}

void
am_compare_html(FILE *f, const am_comparison *c, char *const *run_html)
{
    char o[160], p1[64], p2[64], d1[64], d2[64], m[1024], st[32];
    am_html_head(f, "recomp-analyze: matched comparison");
    fprintf(f, "<table id=\"comparison\"><tr><th>run</th><th>recompute</th><th>matched</th>"
               "<th>outcome</th><th>peak allocated</th><th>change</th><th>peak device</th>"
               "<th>change</th><th>step time</th><th>verdict</th></tr>\n");
    for (size_t i = 0; i < c->n; i++) {
        const am_runsum *s = &c->runs[i];
        outcome(s, o, sizeof o);
        if (i && !am_run_passes(s))
            strncat(o, " -- NOT PASSING", sizeof o - strlen(o) - 1);
        matched(c, i, m, sizeof m);
        delta(&c->runs[0], s, AM_L_TENSOR, d1, sizeof d1);
        delta(&c->runs[0], s, AM_L_DEVICE, d2, sizeof d2);
        snprintf(st, sizeof st, s->step_known ? "%.3f s" : "n/a", s->step_s);
        fprintf(f, "<tr class=\"run\">");
        td(f, s->label);
        td(f, s->setting);
        td(f, m);
        td(f, o);
        td(f, peak_str(s, AM_L_TENSOR, p1, sizeof p1));
        td(f, i ? d1 : "-");
        td(f, peak_str(s, AM_L_DEVICE, p2, sizeof p2));
        td(f, i ? d2 : "-");
        td(f, st);
        td(f, s->has_verdict ? s->verdict : "-");
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
    if (any_oom(c) && c->n > 1) {
        fprintf(f, "<p>");
        am_html_esc(f, oom_cut_note);
        fprintf(f, "</p>\n");
    }
    am_html_legend(f);
    for (size_t i = 0; i < c->n; i++)
        if (run_html && run_html[i])
            fputs(run_html[i], f);
    fprintf(f, "</body></html>\n");
}

#define JS(g, s) AM_JSON_S((g), (s))
static void
ju64(yajl_gen g, uint64_t v)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    yajl_gen_number(g, buf, (size_t)n);
}

/* One run's object of the comparison document. */
static void
run_json(yajl_gen g, const am_comparison *c, size_t i)
{
    const am_runsum *s = &c->runs[i];
    char m[1024];
    yajl_gen_map_open(g);
    JS(g, "path"); JS(g, s->label);
    JS(g, "recompute"); JS(g, s->setting);
    JS(g, "matched");
    int k = i ? am_settings_diff(&c->runs[0], s, m, sizeof m) : 0;
    if (k < 0) yajl_gen_null(g); else yajl_gen_bool(g, k == 0);
    JS(g, "differing_settings"); JS(g, i ? m : "");
    JS(g, "passes"); yajl_gen_bool(g, am_run_passes(s));
    JS(g, "oom"); yajl_gen_bool(g, s->oom);
    JS(g, "completed_iterations"); yajl_gen_integer(g, s->completed);
    static const char *const lv[AM_NLEVELS] = {"device", "tensor"};
    for (int l = 0; l < AM_NLEVELS; l++) {
        char key[32];
        snprintf(key, sizeof key, "%s_peak_bytes", lv[l]);
        JS(g, key);
        if (s->known[l]) ju64(g, s->peak[l]); else yajl_gen_null(g);
    }
    JS(g, "step_s");
    if (s->step_known) yajl_gen_double(g, s->step_s); else yajl_gen_null(g);
    JS(g, "verdict");
    if (s->has_verdict) JS(g, s->verdict); else yajl_gen_null(g);
    yajl_gen_map_close(g);
}

static void
json_print(void *ctx, const char *s, size_t n)
{
    fwrite(s, 1, n, ctx);
}

int
am_compare_json(FILE *f, const am_comparison *c, int pretty)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    if (!g)
        return -1;
    yajl_gen_config(g, yajl_gen_beautify, pretty ? 1 : 0);
    yajl_gen_config(g, yajl_gen_print_callback, json_print, f);
    yajl_gen_map_open(g);
    JS(g, "schema_version"); JS(g, AM_SCHEMA_VERSION);
    JS(g, "comparison");
    yajl_gen_array_open(g);
    for (size_t i = 0; i < c->n; i++)
        run_json(g, c, i);
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
    yajl_gen_free(g);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

void
am_comparison_free(am_comparison *c)
{
    free(c->runs);
    c->runs = NULL;
    c->n = 0;
}
