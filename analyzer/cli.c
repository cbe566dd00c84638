/* cli.c: recomp-analyze TRACE...|DIR [--json] [--rank N] [--iteration K].
 *
 * Exit codes: 0 analysed (also for a trace that was not closed: warning);
 * 1 usage error (also --iteration K that an analysed rank lacks: the valid
 * range per rank is printed); 2 unreadable/damaged input, empty directory,
 * traces of different jobs, runs (run directories) or attempts mixed, two
 * traces of one rank.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "advisor.h"
#include "analysis.h"
#include "report.h"
#include "grow.h"

typedef struct paths {
    char **v;
    size_t n, cap;
} paths;

static int
add_path(paths *p, const char *s)
{
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 16;
        char **q = realloc(p->v, nc * sizeof *q);
        if (!q)
            return -1;
        p->v = q;
        p->cap = nc;
    }
    if (!(p->v[p->n] = strdup(s)))
        return -1;
    p->n++;
    return 0;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every file under dir (recursively, depth <= 4) with a format an importer
 * recognises; others are listed as skipped on stderr. Symbolic links are not
 * followed into directories (a link to .. or / would loop or wander), and a
 * file reached twice (hard or symbolic links) counts once. */
/* Device and inode of every file taken, so a file reached twice counts once. */
static struct {
    dev_t dev;
    ino_t ino;
} *g_seen;
static size_t g_nseen, g_capseen;

static int
seen_file(paths *out, const struct stat *st)
{
    (void)out;
    for (size_t i = 0; i < g_nseen; i++)
        if (g_seen[i].dev == st->st_dev && g_seen[i].ino == st->st_ino)
            return 1;
    if (g_nseen == g_capseen) {
        size_t cap = g_capseen ? g_capseen * 2 : 64;
        void *q = realloc(g_seen, cap * sizeof *g_seen);
        if (!q)
            return 0;
        g_seen = q;
        g_capseen = cap;
    }
    g_seen[g_nseen].dev = st->st_dev;
    g_seen[g_nseen].ino = st->st_ino;
    g_nseen++;
    return 0;
}

static int
scan_dir(const char *dir, paths *out, int depth)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "recomp-analyze: %s: cannot open directory: %s\n", dir,
                strerror(errno));
        return -1;
    }
    paths local = {0};
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (add_path(&local, path) < 0) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    am_sort(local.v, local.n, sizeof *local.v, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < local.n; i++) {
        struct stat st, lst;
        const char *p = local.v[i];
        if (lstat(p, &lst) < 0 || stat(p, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode) && S_ISLNK(lst.st_mode)) {
            fprintf(stderr, "recomp-analyze: skipped %s (a link to a directory)\n", p);
        } else if (S_ISDIR(st.st_mode)) {
            if (depth < 4 && scan_dir(p, out, depth + 1) < 0)
                rc = -1;
        } else if (S_ISREG(st.st_mode)) {
            if (seen_file(out, &st)) {
                fprintf(stderr, "recomp-analyze: skipped %s (the same file again)\n", p);
            } else if (am_sniff(p)) {
                if (add_path(out, p) < 0)
                    rc = -1;
            } else {
                fprintf(stderr, "recomp-analyze: skipped %s (not a trace)\n", p);
            }
        }
    }
    for (size_t i = 0; i < local.n; i++)
        free(local.v[i]);
    free(local.v);
    return rc;
}

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: recomp-analyze [--json] [--rank N] [--iteration K] [--top N] TRACE...|DIR\n"
            "  Per-rank GPU memory peaks (tensor and device level), the phase, module\n"
            "  boundary and layer of what was live, OOMs, and the hot rank.\n"
            "  --json          the JSON document (docs/json-schema.md) on stdout\n"
            "  --rank N        only rank N\n"
            "  --iteration K   also the peak of iteration K, with its live set (numbered as\n"
            "                  the report prints them: ProfilerStep#N, else from 0)\n"
            "  --top N         contributors shown per peak in the text report (default 12,\n"
            "                  0 = all)\n"
            "  --budget SIZE   device capacity for the advisor (default: the trace header),\n"
            "                  e.g. 80GiB, 79.1G, 85899345920\n"
            "  --headroom SIZE kept free on every rank (default 2GiB)\n"
            "  --config FILE   the job's Megatron config (TransformerConfig field names,\n"
            "                  YAML or JSON) when its settings are not on the command line\n"
            "  --no-advice     skip the recompute advisor\n"
            "  --salvage       read every chunk of a damaged native trace that checks out,\n"
            "                  skip the rest; the rank is marked COVERAGE: INCOMPLETE\n"
            "exit: 0 ok, 1 usage (also an --iteration that does not exist), 2 unreadable or\n"
            "      damaged traces, empty directory, mixed jobs/runs, two traces of one rank\n");
}

static int
parse_int(const char *s, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || *end || end == s || x < 0 || x > 1000000000)
        return -1;
    *v = (int)x;
    return 0;
}

/* "80GiB", "79.5G", "512MiB", "1024" (bytes) */
static int
parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    double m = 1;
    if (*end == 'K' || *end == 'k')
        m = 1024.0;
    else if (*end == 'M' || *end == 'm')
        m = 1024.0 * 1024;
    else if (*end == 'G' || *end == 'g')
        m = 1024.0 * 1024 * 1024;
    else if (*end == 'T' || *end == 't')
        m = 1024.0 * 1024 * 1024 * 1024;
    else if (*end)
        return -1;
    if (*end) {
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B')
            end++;
        if (*end)
            return -1;
    }
    *out = (uint64_t)(v * m);
    return 0;
}

static int
rank_cmp(const void *a, const void *b)
{
    const am_rank *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return strcmp(x->path, y->path);
}

int
main(int argc, char **argv)
{
    int json = 0, want_rank = -1, iteration = -1, top = 12, advice = 1;
    adv_opts aopts = {0, (uint64_t)2 << 30, NULL};
    static const struct option lo[] = {
        {"json", no_argument, 0, 'j'},          {"rank", required_argument, 0, 'r'},
        {"iteration", required_argument, 0, 'i'}, {"top", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},          {"budget", required_argument, 0, 'B'},
        {"headroom", required_argument, 0, 'H'}, {"config", required_argument, 0, 'C'},
        {"no-advice", no_argument, 0, 'N'},     {"salvage", no_argument, 0, 'S'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "jr:i:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = 1;
            break;
        case 'r':
            if (parse_int(optarg, &want_rank) < 0) {
                fprintf(stderr, "recomp-analyze: --rank wants a rank number, got '%s'\n", optarg);
                return 1;
            }
            break;
        case 'i':
            if (parse_int(optarg, &iteration) < 0) {
                fprintf(stderr, "recomp-analyze: --iteration wants a number, got '%s'\n",
                        optarg);
                return 1;
            }
            break;
        case 't':
            if (parse_int(optarg, &top) < 0) {
                fprintf(stderr, "recomp-analyze: --top wants a number, got '%s'\n", optarg);
                return 1;
            }
            break;
        case 'B':
        case 'H':
            if (parse_size(optarg, c == 'B' ? &aopts.budget : &aopts.headroom) < 0) {
                fprintf(stderr, "recomp-analyze: --%s wants a size (e.g. 80GiB), got '%s'\n",
                        c == 'B' ? "budget" : "headroom", optarg);
                return 1;
            }
            break;
        case 'C':
            aopts.config = optarg;
            break;
        case 'N':
            advice = 0;
            break;
        case 'S':
            am_source_set_salvage(1);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 1;
    }

    paths files = {0};
    for (int i = optind; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "recomp-analyze: %s: cannot open: %s\n", argv[i], strerror(errno));
            return 2;
        }
        if (S_ISDIR(st.st_mode)) {
            size_t before = files.n;
            if (scan_dir(argv[i], &files, 0) < 0)
                return 2;
            if (files.n == before) {
                fprintf(stderr, "recomp-analyze: %s: no trace files in this directory\n",
                        argv[i]);
                return 2;
            }
        } else if (add_path(&files, argv[i]) < 0) {
            fprintf(stderr, "recomp-analyze: out of memory\n");
            return 2;
        }
    }

    am_job job = {0};
    job.ranks = calloc(files.n, sizeof *job.ranks);
    am_source **srcs = calloc(files.n, sizeof *srcs);
    if (!job.ranks || !srcs) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        return 2;
    }
    int rc = 0;
    char err[1024];
    for (size_t i = 0; i < files.n; i++) {
        if (am_source_open(files.v[i], &srcs[i], err, sizeof err) < 0) {
            fprintf(stderr, "recomp-analyze: %s\n", err);
            rc = 2;
            goto out;
        }
        const am_meta *m = &srcs[i]->meta;
        for (size_t w = 0; w < m->nwarnings; w++)
            fprintf(stderr, "recomp-analyze: warning: %s\n", m->warnings[w]);
        if (!m->closed && !m->nwarnings)
            fprintf(stderr,
                    "recomp-analyze: warning: %s: trace not closed (the process was killed or "
                    "is still running): read to its last published record\n",
                    m->path);
    }

    /* one job per analysis: the same job, run directory and attempt */
    {
        char k0[256], ki[256];
        am_job_key(&srcs[0]->meta, k0, sizeof k0);
        int mixed = 0;
        for (size_t i = 1; i < files.n; i++) {
            am_job_key(&srcs[i]->meta, ki, sizeof ki);
            if (strcmp(k0, ki) != 0)
                mixed = 1;
        }
        if (mixed) {
            fprintf(stderr, "recomp-analyze: traces from different jobs, runs or attempts "
                            "(job id, run directory, restart count); analyse one run at a "
                            "time (point recomp-analyze at one run directory):\n");
            for (size_t i = 0; i < files.n; i++) {
                am_job_key(&srcs[i]->meta, ki, sizeof ki);
                fprintf(stderr, "  %s: %s\n", files.v[i], ki[0] ? ki : "(no job identity)");
            }
            rc = 2;
            goto out;
        }
        /* one trace per rank */
        for (size_t i = 0; i < files.n; i++)
            for (size_t k = i + 1; k < files.n; k++)
                if (srcs[i]->meta.rank >= 0 && srcs[i]->meta.rank == srcs[k]->meta.rank) {
                    fprintf(stderr,
                            "recomp-analyze: two traces of rank %d in one job: %s and %s "
                            "(different processes or restarts of one rank; analyse one run "
                            "at a time)\n",
                            srcs[i]->meta.rank, files.v[i], files.v[k]);
                    rc = 2;
                    goto out;
                }
    }

    am_opts opts = {iteration};
    for (size_t i = 0; i < files.n; i++) {
        if (want_rank >= 0 && srcs[i]->meta.rank != want_rank)
            continue;
        am_rank *r = &job.ranks[job.nranks];
        if (am_analyze(srcs[i], &opts, r, err, sizeof err) < 0) {
            fprintf(stderr, "recomp-analyze: %s\n", err);
            srcs[i] = NULL; /* owned by r now */
            job.nranks++;
            rc = 2;
            goto out;
        }
        srcs[i] = NULL;
        if (r->rank < 0)
            r->rank = (int)job.nranks;
        job.nranks++;
    }
    if (!job.nranks) {
        fprintf(stderr, "recomp-analyze: no trace of rank %d among %zu file(s)\n", want_rank,
                files.n);
        rc = 1;
        goto out;
    }
    am_sort(job.ranks, job.nranks, sizeof *job.ranks, rank_cmp);
    /* --iteration K must name an iteration every analysed rank has */
    if (iteration >= 0) {
        int missing = 0;
        for (size_t i = 0; i < job.nranks; i++) {
            int found = 0;
            for (size_t k = 0; k < job.ranks[i].niters; k++)
                found |= job.ranks[i].iters[k].number == iteration;
            missing |= !found;
        }
        if (missing) {
            fprintf(stderr, "recomp-analyze: --iteration %d: no such iteration; iterations "
                            "are numbered as the report prints them (ProfilerStep#N numbers "
                            "when the trace has step markers, else from 0):\n",
                    iteration);
            for (size_t i = 0; i < job.nranks; i++) {
                const am_rank *r = &job.ranks[i];
                if (!r->niters)
                    fprintf(stderr, "  rank %d: no iterations\n", r->rank);
                else
                    fprintf(stderr, "  rank %d: %d..%d (%zu iteration(s), %s)\n", r->rank,
                            r->iters[0].number, r->iters[r->niters - 1].number, r->niters,
                            r->has_step_markers ? "ProfilerStep numbers"
                                                : "numbered from 0 by the "
                                                  "forward/backward/optimizer cycle");
            }
            rc = 1;
            goto out;
        }
    }
    job.rank_selected = want_rank >= 0;
    job.rank_filter = want_rank;
    job.nfiles = files.n;
    am_job_finish(&job);
    adv_verdict verdict;
    memset(&verdict, 0, sizeof verdict);
    if (advice) {
        if (adv_run(&job, &aopts, &verdict, err, sizeof err) < 0) {
            fprintf(stderr, "recomp-analyze: advisor: %s\n", err);
            rc = 2;
            goto out;
        }
        job.verdict = &verdict;
    }
    am_report_opts ro = {top, iteration};
    if (json) {
        if (am_report_json(stdout, &job, &ro) < 0) {
            fprintf(stderr, "recomp-analyze: cannot write the JSON document\n");
            rc = 2;
        }
    } else {
        am_report_text(stdout, &job, &ro);
    }
    if (fflush(stdout) != 0)
        rc = 2;
    adv_verdict_free(&verdict);
out:
    for (size_t i = 0; i < job.nranks; i++)
        am_rank_free(&job.ranks[i]);
    for (size_t i = 0; i < files.n; i++) {
        am_source_close(srcs[i]);
        free(files.v[i]);
    }
    free(files.v);
    free(srcs);
    free(job.ranks);
    return rc;
}
