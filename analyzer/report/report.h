/* report.h: reporters. They take the analysis results, never bytes. */
#ifndef RECOMP_ANALYZER_REPORT_H
#define RECOMP_ANALYZER_REPORT_H

#include <stdio.h>

#include "analysis.h"

#define AM_SCHEMA_VERSION "1.8"

/* Options shared by the reporters. */
typedef struct am_report_opts {
    int top;                  /* text: contributors shown per peak (0 = all) */
    int iteration;            /* --iteration K, -1 none */
    int all_ranks;            /* --ranks all: text lists every rank in full */
    int pretty;               /* --pretty: indented JSON (default compact) */
} am_report_opts;

/* The terminal report of a job (stdout): the verdict first, one line per
 * pipeline stage (ranks grouped), details for the hot rank and the ranks
 * that differ, each warning once, a legend; o->all_ranks: every rank in
 * full (report_text.c). */
void am_report_text(FILE *f, const am_job *j, const am_report_opts *o);

/* The grouped report as Markdown, for CI job summaries (report_md.c). */
void am_report_markdown(FILE *f, const am_job *j, const am_report_opts *o);

struct am_capture;

/* --perfetto: Chrome trace-event JSON of the job with the captured timelines
 * (report_perfetto.c). 0, -1 on a write error. */
int am_report_perfetto(FILE *f, const am_job *j, const struct am_capture *caps, size_t ncaps);

/* --html: one self-contained page (report_html.c). 0, -1 on a write error. */
int am_report_html(FILE *f, const am_job *j, const struct am_capture *caps, size_t ncaps,
                   const am_report_opts *o);

/* Pieces of the HTML page (report_html.c), for the comparison page too:
 * the document head with the style and an <h1>; the legend of the
 * timelines; text HTML-escaped; the hot rank's timeline section. */
void am_html_head(FILE *f, const char *h1);
void am_html_legend(FILE *f);
void am_html_esc(FILE *f, const char *s);
void am_html_hot_timeline(FILE *f, const am_job *j, const struct am_capture *caps, size_t ncaps,
                          const char *title);

/* Ranks grouped for the scalable reports: one group per pipeline stage,
 * outcome (OOM or not) and peak band (report_groups.c). */
typedef struct am_rank_group {
    int stage;                /* -1 unknown / no pipeline */
    int oom;                  /* the ranks hit a fatal OOM */
    size_t *idx;              /* indices into j->ranks, by rank */
    size_t n;
    uint64_t lo[AM_NLEVELS], hi[AM_NLEVELS]; /* peak range per level (known ranks) */
    int known[AM_NLEVELS];    /* every rank of the group has the level */
    int majority;             /* the largest group of its stage: not "differing" */
} am_rank_group;

/* Group the job's ranks: same stage and outcome, peak at the job's compare
 * level within AM_GROUP_TOL_PCT percent of the group's highest. *out is
 * malloc'd (free with am_rank_groups_free). Returns the count, -1 on OOM. */
#define AM_GROUP_TOL_PCT 1.0
long am_rank_groups(const am_job *j, am_rank_group **out);
void am_rank_groups_free(am_rank_group *g, size_t n);

/* "0-7,9,12-15" for the ranks of a group, into buf. */
const char *am_rank_list(const am_job *j, const am_rank_group *g, char *buf, size_t n);
/* An OOM's place and live bytes in words from its own record (oom_words.c):
 * past the byte limit the iteration, phase and live set are unknown. */
const char *am_oom_when(const am_oom *o, char *buf, size_t n);
const char *am_oom_live(const am_rank *r, const am_oom *o, char *buf, size_t n);

/* The JSON document (docs/json-schema.md) on f. Returns 0, -1 on error. */
int am_report_json(FILE *f, const am_job *j, const am_report_opts *o);

#endif
