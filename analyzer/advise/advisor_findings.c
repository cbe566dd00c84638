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
