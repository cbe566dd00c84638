/* gen_summaries.c: synthetic rank summaries for the merge benchmark
 * (bench-merge.sh; docs/performance.md, "Many nodes: summarize and merge").
 *
 *   gen_summaries TEMPLATE OUTDIR RANKS PER_FILE [block]
 *
 * Reads TEMPLATE (a summary written by recomp-analyze summarize, e.g. of
 * megasim's main job) and writes RANKS / PER_FILE summaries node<K>.rssum into
 * OUTDIR: rank R is a copy of the template's rank R mod its rank count (with
 * `block`: of rank R * T / RANKS for T template ranks, so that, as in
 * Megatron's layout with the pipeline outermost, the template's last stage
 * becomes the job's highest-numbered ranks),
 * renumbered R of a world of RANKS, its trace named node<K>/rank<R>.rstrace.
 * Everything else (peaks, live sets, iterations, the advisor's part) is the
 * template rank's, so a merge of them is one job of RANKS ranks. Exit 0, or
 * 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "summary.h"

int
main(int argc, char **argv)
{
    int block = argc == 6 && strcmp(argv[5], "block") == 0;
    if (argc != 5 && !block) {
        fprintf(stderr, "usage: gen_summaries TEMPLATE OUTDIR RANKS PER_FILE [block]\n");
        return 1;
    }
    long total = atol(argv[3]), per = atol(argv[4]);
    char err[1024];
    am_summary t;
    if (total < 1 || per < 1 || per > total) {
        fprintf(stderr, "gen_summaries: RANKS and PER_FILE must be >= 1, PER_FILE <= RANKS\n");
        return 1;
    }
    if (am_summary_read(argv[1], &t, err, sizeof err) < 0) {
        fprintf(stderr, "gen_summaries: %s\n", err);
        return 1;
    }
    am_rank *ranks = calloc((size_t)per, sizeof *ranks);
    am_source *srcs = calloc((size_t)per, sizeof *srcs);
    adv_rank_part *parts = t.parts ? calloc((size_t)per, sizeof *parts) : NULL;
    char (*names)[64] = calloc((size_t)per, sizeof *names);
    if (!ranks || !srcs || !names || (t.parts && !parts)) {
        fprintf(stderr, "gen_summaries: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (long k = 0; k * per < total && !rc; k++) {
        am_job j = {.ranks = ranks};
        for (long i = 0; i < per && k * per + i < total; i++) {
            long r = k * per + i;
            size_t from = block ? (size_t)((unsigned long long)r * t.nranks / (size_t)total)
                                : (size_t)r % t.nranks;
            ranks[i] = t.ranks[from];
            srcs[i] = *t.ranks[from].src;
            snprintf(names[i], sizeof names[i], "node%ld/rank%ld.rstrace", k, r);
            srcs[i].meta.path = names[i];
            srcs[i].meta.rank = (int)r;
            srcs[i].meta.world_size = (int)total;
            ranks[i].src = &srcs[i];
            ranks[i].path = names[i];
            ranks[i].rank = (int)r;
            if (parts)
                parts[i] = t.parts[from];
            j.nranks++;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/node%05ld.rssum", argv[2], k);
        if (am_summary_write(path, &j, &t.opts, &t.cfg, parts, err, sizeof err) < 0) {
            fprintf(stderr, "gen_summaries: %s\n", err);
            rc = 1;
        }
    }
    free(ranks);
    free(srcs);
    free(parts);
    free(names);
    am_summary_free(&t);
    return rc;
}
