/* report.h: reporters. They take the analysis results, never bytes. */
#ifndef RECOMP_ANALYZER_REPORT_H
#define RECOMP_ANALYZER_REPORT_H

#include <stdio.h>

#include "analysis.h"

#define AM_SCHEMA_VERSION "1.3"

/* Options shared by the reporters. */
typedef struct am_report_opts {
    int top;                  /* text: contributors shown per peak (0 = all) */
    int iteration;            /* --iteration K, -1 none */
} am_report_opts;

/* The terminal report of a job (stdout). */
void am_report_text(FILE *f, const am_job *j, const am_report_opts *o);

/* The JSON document (docs/json-schema.md) on f. Returns 0, -1 on error. */
int am_report_json(FILE *f, const am_job *j, const am_report_opts *o);

#endif
