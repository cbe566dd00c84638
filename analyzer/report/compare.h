/* compare.h: run summaries and the matched comparison of runs
 * (recomp-analyze compare; docs/analysis.md "Comparing runs"). */
#ifndef RECOMP_ANALYZER_COMPARE_H
#define RECOMP_ANALYZER_COMPARE_H

#include <stdio.h>

#include "advisor.h"
#include "analysis.h"

#define AM_CMP_MAX_RANKS 1024

/* What a comparison or a gate needs of one analysed run (its job and
 * verdict are freed after the summary is taken). Bytes; seconds for times. */
typedef struct am_runsum {
    char label[256];          /* the path given */
    size_t nranks;
    int hot_rank;             /* rank id of the hot rank, -1 none */
    int known[AM_NLEVELS];    /* every rank has the level */
    char na[AM_NLEVELS][160]; /* why a level is n/a */
    uint64_t peak[AM_NLEVELS];/* max over ranks */
    int peak_rank[AM_NLEVELS];
    int rank_id[AM_CMP_MAX_RANKS];
    uint64_t rank_peak[AM_CMP_MAX_RANKS][AM_NLEVELS]; /* 0 with !rank_known */
    uint8_t rank_known[AM_CMP_MAX_RANKS][AM_NLEVELS];
    size_t nrank_rows;        /* min(nranks, AM_CMP_MAX_RANKS) */
    int oom;                  /* a rank hit a fatal OOM */
    int oom_rank, oom_iter;   /* the earliest by iteration, then rank; iter -1 init */
    uint8_t oom_phase;
    int completed;            /* iterations every rank finished */
    int incomplete;           /* a rank's trace is capped/windowed/not closed */
    int killed;               /* a rank's trace was not closed (killed, still running) */
    int step_known;
    double step_s;            /* median iteration time after the first, hot rank */
    char step_na[128];
    int settings_known;       /* a Megatron configuration was recorded */
    adv_cfg cfg;
    char setting[160];        /* recompute setting: none, selective[mlp], full[block,2] */
    int has_verdict;
    char verdict[96];
} am_runsum;

/* A comparison: runs[0] the control, the rest candidates. */
typedef struct am_comparison {
    am_runsum *runs;
    size_t n;
} am_comparison;

/* Summarise an analysed job (and its verdict, NULL when the advisor did not
 * run; config: --config FILE or NULL) into *s. */
void am_runsum_fill(am_runsum *s, const char *label, const am_job *j,
                    const struct adv_verdict *v, const char *config);

/* The settings other than recompute in which b differs from a, as
 * "name a->b; ..." into buf. Returns how many differ, or -1 when either
 * run's settings are unknown (buf says which). */
int am_settings_diff(const am_runsum *a, const am_runsum *b, char *buf, size_t n);

/* A run passes when it completed at least one iteration, no rank hit a
 * fatal OOM and every rank's trace was closed (not killed). */
int am_run_passes(const am_runsum *s);

/* The comparison as a terminal table (text), Markdown, or JSON (0, -1 on a
 * write error; compact unless pretty, streamed as it is generated). */
void am_compare_text(FILE *f, const am_comparison *c);
void am_compare_markdown(FILE *f, const am_comparison *c);
int am_compare_json(FILE *f, const am_comparison *c, int pretty);

/* The comparison as one self-contained HTML page: the table, then each
 * run's section (run_html[i]: HTML, e.g. its hot rank's timeline; NULL
 * none). */
void am_compare_html(FILE *f, const am_comparison *c, char *const *run_html);

void am_comparison_free(am_comparison *c);

#endif
