/* advisor_findings.c: the findings of an analysis (advisor.h adv_finding):
 * triage adds the causes recompute cannot fix, the verdict adds its own
 * (ineffective labels, the hot pipeline stage); both use this one file, so
 * neither reaches into the other. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"

void
adv_finding_add(adv_verdict *v, const char *code, const char *subtype, int rank,
                const char *fmt, ...)
{
    adv_finding *q = realloc(v->findings, (v->nfindings + 1) * sizeof *q);
    if (!q)
        return;
    v->findings = q;
    adv_finding *f = &q[v->nfindings++];
    memset(f, 0, sizeof *f);
    snprintf(f->code, sizeof f->code, "%s", code);
    snprintf(f->subtype, sizeof f->subtype, "%s", subtype);
    f->rank = rank;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->evidence, sizeof f->evidence, fmt, ap);
    va_end(ap);
}

/* The last finding, when its code is code; else NULL. */
static adv_finding *
last_of(adv_verdict *v, const char *code)
{
    if (!v->nfindings || strcmp(v->findings[v->nfindings - 1].code, code) != 0)
        return NULL;
    return &v->findings[v->nfindings - 1];
}

void
adv_finding_held(adv_verdict *v, const char *code, uint64_t bytes)
{
    adv_finding *f = last_of(v, code);
    if (f)
        f->bytes = bytes;
}

void
adv_finding_lever(adv_verdict *v, const char *code, const char *change, uint64_t bytes,
                  int known)
{
    adv_finding *f = last_of(v, code);
    if (!f || f->nlevers >= ADV_MAX_LEVERS)
        return;
    adv_lever *l = &f->levers[f->nlevers++];
    snprintf(l->change, sizeof l->change, "%s", change);
    l->bytes = known ? bytes : 0;
    l->known = known ? 1 : 0;
}

int
adv_finding_deficit(const adv_verdict *v, const adv_finding *f, uint64_t *deficit)
{
    for (size_t q = 0; q < v->nranks; q++)
        if (v->rank_id[q] == f->rank) {
            if (!v->capacity[q])
                return 0;
            *deficit = v->reserved[q] > v->budget[q] ? v->reserved[q] - v->budget[q] : 0;
            return 1;
        }
    return 0;
}
