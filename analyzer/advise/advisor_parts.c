/* advisor_parts.c: the advisor's per-rank part (advisor.h, "the per-rank
 * part"): the settings a rank's summary holds counterfactuals for, their
 * look-up, and the findings the job part takes over from the parts.
 */
#include <stdlib.h>
#include <string.h>

#include "advisor.h"

/* one setting into out[*n] unless listed already or out is full */
static void
put_setting(adv_setting *out, size_t *n, size_t max, const adv_setting *s)
{
    for (size_t k = 0; k < *n; k++)
        if (out[k].labels == s->labels && out[k].full_method == s->full_method &&
            out[k].full_n == s->full_n)
            return;
    if (*n < max)
        out[(*n)++] = *s;
}

/* The candidate sweep (advisor_verdict.c, run_sweep_candidates) asks for
 * none and the active setting, single labels of the model, the active
 * setting with one label toggled, pairs and the union of the effective single
 * labels (which are effective is decided over the whole job, so every subset
 * is listed), and full[uniform|block, n] for n in 1..layers per chunk. All
 * of them are subsets of (model labels | active labels) or full settings. */
size_t
adv_part_settings(const adv_cfg *c, const adv_setting *active, adv_setting *out, size_t max)
{
    size_t n = 0;
    unsigned bits = adv_model_labels(c) | active->labels;
    put_setting(out, &n, max, &(adv_setting){0, 0, 0});
    /* every subset of bits: m runs over the submasks of bits */
    for (unsigned m = bits;; m = (m - 1) & bits) {
        put_setting(out, &n, max, &(adv_setting){m, 0, 0});
        if (!m)
            break;
    }
    int lpc = adv_cfg_max_chunk_layers(c);
    for (int meth = 1; meth <= 2; meth++)
        for (int nl = 1; nl <= lpc; nl++)
            put_setting(out, &n, max, &(adv_setting){0, meth, nl});
    if (active->full_method)
        put_setting(out, &n, max, active);
    return n;
}

int
adv_label_region_seen(const adv_trace *t, int l, uint32_t *applies)
{
    *applies = 0;
    if (l != ADV_L_core_attn && l != ADV_L_mla_up_proj && l != ADV_L_mlp && l != ADV_L_moe_act)
        return 1;
    for (size_t k = 0; t->layers && k < t->nlayers; k++) {
        const adv_layer *L = &t->layers[k];
        int seen;
        switch (l) {
        case ADV_L_core_attn: seen = L->core_b != ADV_NONE && L->core_e != ADV_NONE; break;
        case ADV_L_mla_up_proj:
            /* a start found by the latents' sizes alone, without Q/K/V (TE's
             * unfused attention, no Python frames), frees nothing */
            if (!L->mla)
                continue;
            seen = L->mla_up_b != ADV_NONE && L->mla_q != ADV_NONE && L->mla_v != ADV_NONE &&
                   L->core_e != ADV_NONE;
            break;
        case ADV_L_mlp:
            if (L->moe)
                continue;
            seen = L->mlp_b != ADV_NONE;
            break;
        default: /* moe_act */
            if (!L->moe)
                continue;
            seen = L->moe_act != ADV_NONE;
            break;
        }
        if (seen)
            return 1;
        (*applies)++;
    }
    return 0;
}

const adv_cf *
adv_part_find(const adv_rank_part *p, int undone, const adv_setting *s)
{
    for (size_t k = 0; k < p->ncf; k++) {
        const adv_cf *f = &p->cf[k];
        if (f->undone != undone)
            continue;
        if (s->full_method || f->s.full_method) {
            if (f->s.full_method == s->full_method && f->s.full_n == s->full_n)
                return f;
        } else if (f->s.labels == s->labels) {
            return f;
        }
    }
    return NULL;
}

void
adv_part_finding_append(adv_verdict *v, const adv_finding *f)
{
    adv_finding *q = realloc(v->findings, (v->nfindings + 1) * sizeof *q);
    if (!q)
        return;
    v->findings = q;
    q[v->nfindings++] = *f;
}

void
adv_rank_part_free(adv_rank_part *p)
{
    free(p->findings);
    free(p->cf);
    memset(p, 0, sizeof *p);
}
