/* report_md.c: --markdown FILE, the grouped report for CI job summaries
 * (GitHub's $GITHUB_STEP_SUMMARY and the like): the verdict, one table row
 * per group of ranks (report_groups.c), the hot rank, each warning once. */
#include <stdio.h>
#include <string.h>

#include "advisor.h"
#include "report.h"

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)

/* Text inside a table cell: '|' and newlines would break the row. */
static void
cell(FILE *f, const char *s)
{
    for (; *s; s++)
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s == '\n' ? ' ' : *s, f);
}

static void
range_cell(FILE *f, const am_rank_group *g, int l)
{
    if (!g->known[l]) {
        fprintf(f, " n/a |");
        return;
    }
    fprintf(f, " %s", GB(g->lo[l]));
    if (g->hi[l] != g->lo[l])
        fprintf(f, " – %s", GB(g->hi[l]));
    fprintf(f, " |");
}

static void
groups_table(FILE *f, const am_job *j, const am_rank_group *g, size_t ng)
{
    char list[512];
    fprintf(f, "| stage | ranks | tensor peak | device peak | outcome |\n|---|---|---|---|---|\n");
    for (size_t k = 0; k < ng; k++) {
        const am_rank_group *x = &g[k];
        const am_rank *r0 = &j->ranks[x->idx[0]];
        if (x->stage >= 0)
            fprintf(f, "| %d | %s |", x->stage, am_rank_list(j, x, list, sizeof list));
        else
            fprintf(f, "| - | %s |", am_rank_list(j, x, list, sizeof list));
        range_cell(f, x, AM_L_TENSOR);
        range_cell(f, x, AM_L_DEVICE);
        if (x->oom && r0->oom)
            fprintf(f, " OOM in %s", am_oom_when(r0->oom, (char[96]){0}, 96));
        else
            fprintf(f, " no OOM");
        fprintf(f, "%s |\n", x->majority ? "" : " (**differs** from its stage)");
    }
}

void
am_report_markdown(FILE *f, const am_job *j, const am_report_opts *o)
{
    (void)o;
    fprintf(f, "## recomp-analyze: %zu rank(s)%s%s\n\n", j->nranks, j->id[0] ? ", job " : "",
            j->id);
    const adv_verdict *v = j->verdict;
    if (v) {
        fprintf(f, "**verdict: `%s`**\n\n", v->code[0] ? v->code : "n/a");
        fprintf(f, "- change: `%s`\n", v->change[0] ? v->change : "none");
        if (v->why[0]) {
            fprintf(f, "- why: ");
            cell(f, v->why);
            fputc('\n', f);
        }
        fputc('\n', f);
    } else {
        fprintf(f, "verdict: none (the recompute advisor was not run)\n\n");
    }
    am_rank_group *g;
    long ng = am_rank_groups(j, &g);
    if (ng >= 0) {
        groups_table(f, j, g, (size_t)ng);
        am_rank_groups_free(g, (size_t)ng);
    }
    if (j->hot >= 0) {
        const am_rank *h = &j->ranks[j->hot];
        const am_peak *p = &h->peak[j->hot_level];
        fprintf(f, "\nhot rank **%d**: %s-level peak %s, iteration %d, phase %s\n", h->rank,
                j->hot_level == AM_L_TENSOR ? "tensor" : "device", GB(p->bytes), p->iteration,
                am_phase_name(p->phase));
    }
    int first = 1;
    for (size_t i = 0; i < j->nranks; i++) {
        const am_meta *m = &j->ranks[i].src->meta;
        for (size_t w = 0; w < m->nwarnings; w++) {
            int seen = 0;
            for (size_t p = 0; p < i && !seen; p++)
                for (size_t k = 0; k < j->ranks[p].src->meta.nwarnings && !seen; k++)
                    seen = strcmp(j->ranks[p].src->meta.warnings[k], m->warnings[w]) == 0;
            if (seen)
                continue;
            fprintf(f, "%s- warning: ", first ? "\n" : "");
            cell(f, m->warnings[w]);
            fputc('\n', f);
            first = 0;
        }
    }
}
