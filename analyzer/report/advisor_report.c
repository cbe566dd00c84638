/* advisor_report.c: the verdict in the terminal report (its last lines are
 * the verdict code and the change) and in the JSON document
 * (docs/json-schema.md "verdict"). */
#include <stdio.h>
#include <string.h>
#include <yajl/yajl_gen.h>

#include "advisor.h"
#include "advisor_report.h"
#include "json_str.h"
#include "report.h"

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)

void
adv_report_text(FILE *f, const adv_verdict *v)
{
    fprintf(f, "recompute advisor\n");
    fprintf(f, "  configuration: %s%s%s\n", v->cfg.megatron ? "Megatron, from " : "not Megatron",
            v->cfg.megatron ? v->cfg.source : "",
            v->cfg.unknown[0] ? "" : "");
    if (v->cfg.unknown[0])
        fprintf(f, "  unknown settings: %s\n", v->cfg.unknown);
    if (v->level_note[0])
        fprintf(f, "  note: %s\n", v->level_note);
    if (v->next_wall[0])
        fprintf(f, "  next wall: %s\n", v->next_wall);
    fprintf(f, "  budget per rank = capacity - outside PyTorch - headroom %s; a prediction "
               "fits when its allocated peak plus the allocator cache of its own timeline "
               "(modelled reserved) is within it:\n",
            GB(v->headroom));
    for (size_t i = 0; i < v->nranks; i++) {
        if (!v->capacity[i]) {
            fprintf(f, "    rank %-4d capacity unknown   budget unknown: pass --budget   "
                       "baseline %-11s\n",
                    v->rank_id[i], GB(v->baseline[i]));
            continue;
        }
        long long margin = (long long)v->budget[i] - (long long)v->pred_reserved[i];
        fprintf(f, "    rank %-4d capacity %-11s outside %-11s pred. cache %-11s budget %-11s "
                   "baseline %-11s predicted %-11s margin %s%s\n",
                v->rank_id[i], GB(v->capacity[i]), GB(v->outside[i]), GB(v->cache[i]),
                GB(v->budget[i]),
                GB(v->baseline[i]), GB(v->predicted[i]), margin < 0 ? "-" : "",
                GB((uint64_t)(margin < 0 ? -margin : margin)));
    }
    for (size_t k = 0; k < v->nfindings; k++) {
        const adv_finding *x = &v->findings[k];
        fprintf(f, "  finding %s (%s", x->code, x->subtype);
        if (x->rank >= 0)
            fprintf(f, ", rank %d", x->rank);
        fprintf(f, "): %s\n", x->evidence);
    }
    if (v->ncands) {
        fprintf(f, "  candidates (replay cost: %s):\n", v->cost_source);
        fprintf(f, "    %-30s %-12s %-8s %-18s %-6s %s\n", "setting", "max peak", "cost",
                "effect", "valid", "why");
        for (size_t k = 0; k < v->ncands; k++) {
            const adv_cand *c = &v->cands[k];
            char nm[128];
            snprintf(nm, sizeof nm, "%s%s%s", (int)k == v->chosen ? "* " : "", c->name,
                     c->family_best ? " (best n)" : "");
            fprintf(f, "    %-30s %-12s %6.2f%%  %-18s %-6s %s\n", nm, GB(c->max_peak),
                    100 * c->cost, adv_effect_name(c->effect), c->valid ? "yes" : "no",
                    c->reason);
        }
    }
    for (size_t k = 0; k < v->nhot_functions; k++)
        fprintf(f, "  held at the peak: %s\n", v->hot_functions[k]);
    if (v->why[0])
        fprintf(f, "  why: %s\n", v->why);
    if (v->config_diff[0] && strcmp(v->config_diff, v->change) != 0) {
        fprintf(f, "  config diff:\n");
        const char *p = v->config_diff;
        while (*p) {
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            fprintf(f, "    %.*s\n", (int)n, p);
            p += n + (e ? 1 : 0);
        }
    }
    if (v->confirm[0])
        fprintf(f, "  confirm: %s\n", v->confirm);
    fprintf(f, "verdict: %s\n", v->code[0] ? v->code : "n/a");
    fprintf(f, "change: %s\n", v->change[0] ? v->change : "none");
}

#define S(g, s) AM_JSON_S((g), (s))
#define I(g, v) yajl_gen_integer((g), (long long)(v))
static void
u64(yajl_gen g, uint64_t v)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    yajl_gen_number(g, buf, (size_t)n);
}

static void
labels_arr(yajl_gen g, const adv_cand *c)
{
    yajl_gen_array_open(g);
    if (c) {
        if (c->full_method)
            S(g, "full");
        for (int l = 0; l < ADV_NLABELS; l++)
            if (c->labels & (1u << l))
                S(g, adv_label_name(l));
    }
    yajl_gen_array_close(g);
}

/* "config_diff": the verdict's configuration change, one string per line. */
static void
verdict_json_config_diff(yajl_gen g, const adv_verdict *v)
{
    yajl_gen_array_open(g);
    const char *p = v->config_diff;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        am_json_str(g, p, n);
        p += n + (e ? 1 : 0);
    }
    yajl_gen_array_close(g);
}

/* "configuration": where the Megatron configuration came from and what of
 * it is unknown. */
static void
verdict_json_configuration(yajl_gen g, const adv_verdict *v)
{
    yajl_gen_map_open(g);
    S(g, "megatron"); yajl_gen_bool(g, v->cfg.megatron);
    S(g, "source"); S(g, v->cfg.source);
    S(g, "unknown"); S(g, v->cfg.unknown);
    S(g, "add_bias_linear"); /* null: not recorded (no Megatron configuration) */
    if (v->cfg.bias_linear < 0)
        yajl_gen_null(g);
    else
        yajl_gen_bool(g, v->cfg.bias_linear);
    yajl_gen_map_close(g);
}

/* "ranks": each rank's capacity, outside-PyTorch, cache, budget, baseline
 * and predicted peaks and margin (bytes; capacity, budget and margin null
 * when the capacity is unknown). */
static void
verdict_json_ranks(yajl_gen g, const adv_verdict *v)
{
    yajl_gen_array_open(g);
    for (size_t i = 0; i < v->nranks; i++) {
        yajl_gen_map_open(g);
        S(g, "rank"); I(g, v->rank_id[i]);
        S(g, "capacity_bytes");
        if (v->capacity[i]) u64(g, v->capacity[i]); else yajl_gen_null(g);
        S(g, "outside_pytorch_bytes"); u64(g, v->outside[i]);
        S(g, "allocator_cache_bytes"); u64(g, v->cache[i]);
        S(g, "budget_bytes");
        if (v->capacity[i]) u64(g, v->budget[i]); else yajl_gen_null(g);
        S(g, "baseline_peak_bytes"); u64(g, v->baseline[i]);
        S(g, "predicted_peak_bytes"); u64(g, v->predicted[i]);
        S(g, "predicted_reserved_bytes"); u64(g, v->pred_reserved[i]);
        S(g, "margin_bytes");
        if (v->capacity[i])
            I(g, (long long)v->budget[i] - (long long)v->pred_reserved[i]);
        else
            yajl_gen_null(g);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

/* A map from each rank id (as a string) to that rank's bytes[i]. */
static void
verdict_json_by_rank(yajl_gen g, const adv_verdict *v, const uint64_t *bytes)
{
    yajl_gen_map_open(g);
    for (size_t i = 0; i < v->nranks; i++) {
        char k[16];
        snprintf(k, sizeof k, "%d", v->rank_id[i]);
        S(g, k);
        u64(g, bytes[i]);
    }
    yajl_gen_map_close(g);
}

/* bytes, or null when 0 (not stated: unknown is not zero) */
static void
u64_or_null(yajl_gen g, uint64_t v)
{
    if (v)
        u64(g, v);
    else
        yajl_gen_null(g);
}

/* "findings": code, subtype, rank (null for the job) and evidence of each;
 * its cause's bytes at the peak / OOM, the rank's deficit it is judged
 * against, whether the primary is chosen among such findings by bytes, what
 * its best lever removes, and each lever with the bytes it addresses (null:
 * not stated / unknown; issue 14 item 6, docs/advisor.md). */
static void
verdict_json_findings(yajl_gen g, const adv_verdict *v)
{
    yajl_gen_array_open(g);
    for (size_t k = 0; k < v->nfindings; k++) {
        const adv_finding *x = &v->findings[k];
        yajl_gen_map_open(g);
        S(g, "code"); S(g, x->code);
        S(g, "subtype"); S(g, x->subtype);
        S(g, "rank");
        if (x->rank >= 0) I(g, x->rank); else yajl_gen_null(g);
        S(g, "evidence"); S(g, x->evidence);
        S(g, "bytes"); u64_or_null(g, x->bytes);
        uint64_t deficit = 0;
        S(g, "deficit_bytes");
        if (adv_finding_deficit(v, x, &deficit)) u64(g, deficit); else yajl_gen_null(g);
        S(g, "ranked"); yajl_gen_bool(g, x->ranked);
        S(g, "fix_bytes"); u64_or_null(g, x->fix_bytes);
        S(g, "levers");
        yajl_gen_array_open(g);
        for (int q = 0; q < x->nlevers && q < ADV_MAX_LEVERS; q++) {
            yajl_gen_map_open(g);
            S(g, "change"); S(g, x->levers[q].change);
            S(g, "bytes");
            if (x->levers[q].known) u64(g, x->levers[q].bytes); else yajl_gen_null(g);
            yajl_gen_map_close(g);
        }
        yajl_gen_array_close(g);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

/* One candidate k: its setting, predicted peaks and reserved peaks per rank
 * (bytes), replay cost, effect, where it fails, validity and whether it is
 * the chosen one. */
static void
verdict_json_candidate(yajl_gen g, const adv_verdict *v, size_t k)
{
    const adv_cand *c = &v->cands[k];
    yajl_gen_map_open(g);
    S(g, "setting"); S(g, c->name);
    S(g, "code"); S(g, c->code);
    S(g, "labels"); labels_arr(g, c);
    if (c->full_method) {
        S(g, "method"); S(g, c->full_method == 1 ? "uniform" : "block");
        S(g, "num_layers"); I(g, c->full_n);
        S(g, "family_best"); yajl_gen_bool(g, c->family_best);
    }
    S(g, "predicted_peak_bytes");
    verdict_json_by_rank(g, v, c->peak);
    S(g, "predicted_reserved_bytes");
    verdict_json_by_rank(g, v, c->reserved);
    S(g, "reserved_step_bytes");
    verdict_json_by_rank(g, v, c->step);
    S(g, "max_predicted_peak_bytes"); u64(g, c->max_peak);
    S(g, "replay_cost_fraction"); yajl_gen_double(g, c->cost);
    S(g, "effect"); S(g, adv_effect_name(c->effect));
    S(g, "fails_at");
    if (c->fails_rank >= 0) {
        yajl_gen_map_open(g);
        S(g, "rank"); I(g, c->fails_rank);
        S(g, "phase"); S(g, am_phase_name(c->fails_phase));
        yajl_gen_map_close(g);
    } else {
        yajl_gen_null(g);
    }
    S(g, "valid"); yajl_gen_bool(g, c->valid);
    S(g, "reason"); S(g, c->reason);
    S(g, "chosen"); yajl_gen_bool(g, (int)k == v->chosen);
    yajl_gen_map_close(g);
}

/* "held_at_peak" (the functions holding memory at the peak) and
 * "functions" (per rank: function, bytes, count, phase). */
static void
verdict_json_hot(yajl_gen g, const adv_verdict *v)
{
    S(g, "held_at_peak");
    yajl_gen_array_open(g);
    for (size_t k = 0; k < v->nhot_functions; k++)
        S(g, v->hot_functions[k]);
    yajl_gen_array_close(g);
    S(g, "functions");
    yajl_gen_array_open(g);
    for (size_t k = 0; k < v->nhot; k++) {
        yajl_gen_map_open(g);
        S(g, "rank"); yajl_gen_integer(g, v->hot[k].rank);
        S(g, "function"); S(g, v->hot[k].function);
        S(g, "bytes"); yajl_gen_integer(g, (long long)v->hot[k].bytes);
        S(g, "count"); yajl_gen_integer(g, (long long)v->hot[k].count);
        S(g, "phase"); S(g, am_phase_name(v->hot[k].phase));
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

/* "binds" (schema 1.7): what binds each binding rank, the BINDS of the why
 * per rank (adv_binding_why): rank, its OOM {iteration (null before
 * iteration 0 or past the byte limit), phase ("unknown" past the byte
 * limit)} or null, over_budget_bytes (no OOM: its reserved peak
 * less its budget; null with an OOM), over_device_bytes (its allocated peak
 * over the device, capacity less memory outside PyTorch; null when within),
 * cause {code, subtype, set_aside} (the finding that explains it; set_aside:
 * an allocator fix for this rank's cache, not the job's verdict while a
 * binding rank is over its device in allocated bytes) or null. [] when no rank binds; null when not evaluated. */
static void
verdict_json_binds(yajl_gen g, const adv_verdict *v)
{
    S(g, "binds");
    if (!v->binds_known) {
        yajl_gen_null(g);
        return;
    }
    yajl_gen_array_open(g);
    for (size_t k = 0; k < v->nbinds; k++) {
        const struct adv_bind *b = &v->binds[k];
        yajl_gen_map_open(g);
        S(g, "rank"); I(g, b->rank);
        S(g, "oom");
        if (b->oom) {
            yajl_gen_map_open(g);
            S(g, "iteration");
            if (b->iteration >= 0 && !b->past_limit) I(g, b->iteration); else yajl_gen_null(g);
            S(g, "phase"); S(g, b->past_limit ? "unknown" : am_phase_name(b->phase));
            yajl_gen_map_close(g);
        } else {
            yajl_gen_null(g);
        }
        S(g, "over_budget_bytes");
        if (b->oom) yajl_gen_null(g); else u64(g, b->over_budget);
        S(g, "over_device_bytes");
        if (b->over_device) u64(g, b->over_device); else yajl_gen_null(g);
        S(g, "cause");
        if (b->code[0]) {
            yajl_gen_map_open(g);
            S(g, "code"); S(g, b->code);
            S(g, "subtype"); S(g, b->subtype);
            S(g, "set_aside"); yajl_gen_bool(g, b->allocator_only_aside);
            yajl_gen_map_close(g);
        } else {
            yajl_gen_null(g);
        }
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
}

void
adv_report_json(void *gen, const adv_verdict *v)
{
    yajl_gen g = gen;
    yajl_gen_map_open(g);
    S(g, "code"); S(g, v->code[0] ? v->code : "n/a");
    S(g, "why"); S(g, v->why);
    S(g, "change"); S(g, v->change);
    S(g, "labels");
    labels_arr(g, v->chosen >= 0 ? &v->cands[v->chosen] : NULL);
    S(g, "config_diff");
    verdict_json_config_diff(g, v);
    S(g, "confirm"); S(g, v->confirm);
    S(g, "configuration");
    verdict_json_configuration(g, v);
    S(g, "note"); S(g, v->level_note);
    S(g, "next_wall"); S(g, v->next_wall);
    S(g, "replay_cost_source"); S(g, v->cost_source);
    S(g, "headroom_bytes"); u64(g, v->headroom);
    S(g, "ranks");
    verdict_json_ranks(g, v);
    S(g, "predicted_peak_bytes");
    verdict_json_by_rank(g, v, v->predicted);
    S(g, "findings");
    verdict_json_findings(g, v);
    S(g, "candidates");
    yajl_gen_array_open(g);
    for (size_t k = 0; k < v->ncands; k++)
        verdict_json_candidate(g, v, k);
    yajl_gen_array_close(g);
    verdict_json_hot(g, v);
    verdict_json_binds(g, v);
    /* a finding's lever that costs no replay (docs/advisor.md rule 45): only
     * when there is one */
    if (v->lever_fit[0]) {
        static const char *const tier[] = {"fits", "marginal", "unverified",
                                           "unverified, marginal"};
        S(g, "zero_replay_lever");
        yajl_gen_map_open(g);
        S(g, "change"); S(g, v->lever_fit);
        S(g, "finding"); S(g, v->lever_code);
        S(g, "effect");
        S(g, v->lever_tier >= 0 && v->lever_tier < 4 ? tier[v->lever_tier] : "insufficient");
        S(g, "baseline_reserved_bytes");
        verdict_json_by_rank(g, v, v->reserved);
        S(g, "predicted_reserved_bytes");
        verdict_json_by_rank(g, v, v->lever_reserved);
        yajl_gen_map_close(g);
    }
    yajl_gen_map_close(g);
}
