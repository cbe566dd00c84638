/* summary.h: per-rank summaries of an analysed run (recomp-analyze
 * summarize) and their reading back (recomp-analyze merge); the format is
 * docs/summary-format.md.
 *
 * A summary holds, per rank, what the reporters and the advisor's job part
 * read: the source's metadata, the analysed am_rank (peaks at both levels
 * with their grouped live sets, iterations and phases, OOMs, coverage,
 * notes) and the advisor's per-rank part (adv_rank_part). Merging summaries
 * rebuilds those ranks; the reports and the verdict are then computed by the
 * same code as for traces.
 */
#ifndef RECOMP_ANALYZER_SUMMARY_H
#define RECOMP_ANALYZER_SUMMARY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "advisor.h"
#include "analysis.h"

#define AM_SUMMARY_MAGIC "RSSUMMRY"
#define AM_SUMMARY_MAJOR 5
#define AM_SUMMARY_MINOR 0
#define AM_SUMMARY_HEADER 32 /* bytes before the payload */
#define AM_SUMMARY_DEFLATE 1 /* flags: the payload is stored as its length (u64) and a
                              * zlib stream of it */

/* The analysis options a summary was made with; merge refuses others, as the
 * per-rank values depend on them. */
typedef struct am_summary_opts {
    uint64_t budget;          /* --budget bytes, 0 none */
    uint64_t headroom;        /* --headroom bytes */
    char config[1024];        /* --config FILE, "" none */
    int iteration;            /* --iteration K, -1 none */
    int advice;               /* 1: the advisor's per-rank part is held */
} am_summary_opts;

/* One summary read back: its ranks (each with a source that holds only the
 * metadata) and their advisor parts. */
typedef struct am_summary {
    char path[1024];
    am_summary_opts opts;
    adv_cfg cfg;              /* the advisor's configuration (opts.advice) */
    am_rank *ranks;
    adv_rank_part *parts;     /* per rank when opts.advice, else NULL */
    size_t nranks;
} am_summary;

/* Write the summary of an analysed job (ranks in j, parts[i] the advisor's
 * part of rank i for i < min(nranks, ADV_MAX_RANKS), or NULL with
 * opts->advice 0) to path. 0, or -1 with a line naming the file in err. */
int am_summary_write(const char *path, const am_job *j, const am_summary_opts *opts,
                     const adv_cfg *cfg, const adv_rank_part *parts, char *err, size_t errlen);

/* Read a summary (validated: magic, version, length, checksum, every field
 * within the payload and within its limits). 0, or -1 with a line "FILE:
 * offset N: field F: what" in err (s is then freed). */
int am_summary_read(const char *path, am_summary *s, char *err, size_t errlen);

/* The same from memory (the fuzz target). name names it in errors. */
int am_summary_parse(const char *name, const unsigned char *buf, size_t len, am_summary *s,
                     char *err, size_t errlen);

/* 1 when the file starts with AM_SUMMARY_MAGIC. */
int am_summary_sniff(const char *path);

/* Free what am_summary_read left in s (ranks not moved out: moving a rank
 * out sets its slot's src to NULL and its parts to zero). */
void am_summary_free(am_summary *s);

#endif
