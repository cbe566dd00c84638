/* cli.c: recomp-analyze [OPTIONS] TRACE...|DIR and
 *        recomp-analyze compare [OPTIONS] CONTROL CANDIDATE...
 *
 * Exit codes: 0 analysed (also for a trace that was not closed: warning);
 * 1 usage error (also --iteration K that an analysed rank lacks: the valid
 * range per rank is printed); 2 unreadable/damaged input, empty directory,
 * traces of different jobs, runs (run directories) or attempts mixed, two
 * traces of one rank; 3 a --fail-on gate failed (gates.c; the reports are
 * still written).
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "advisor.h"
#include "trace_reader.h"
#include "analysis.h"
#include "capture.h"
#include "compare.h"
#include "gates.h"
#include "report.h"
#include "summary.h"
#include "grow.h"
#include "recomp/bytesize.h"

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
static size_t g_ndup; /* files skipped as already taken (collect_files) */

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
                g_ndup++;
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
            "usage: recomp-analyze [OPTIONS] TRACE...|DIR\n"
            "       recomp-analyze compare [OPTIONS] CONTROL CANDIDATE...\n"
            "       recomp-analyze summarize [OPTIONS] TRACE...|DIR --out FILE\n"
            "       recomp-analyze merge [OPTIONS] SUMMARY...|DIR\n"
            "       recomp-analyze --help | --version\n"
            "  Per-rank GPU memory peaks (tensor and device level), the phase, module\n"
            "  boundary and layer of what was live, OOMs, the hot rank and the recompute\n"
            "  verdict. compare: each argument is one run (a run directory or a file); the\n"
            "  matched-comparison table of every candidate against the control (a run may\n"
            "  also be its summaries: a summary file or a directory of them).\n"
            "  summarize: the local ranks' per-rank summary (docs/summary-format.md) into\n"
            "  --out FILE, one per node; merge: the report and verdict of the job from its\n"
            "  summaries, the same as analysing all traces at once (not --html/--perfetto:\n"
            "  timelines need the traces).\n"
            "  --json          the JSON document (docs/json-schema.md) on stdout\n"
            "  --rank N        only rank N\n"
            "  --ranks all     the full per-rank listing (default: one line per pipeline\n"
            "                  stage, details for the hot rank and ranks that differ)\n"
            "  --iteration K   also the peak of iteration K, with its live set (numbered as\n"
            "                  the report prints them: ProfilerStep#N, else from 0)\n"
            "  --top N         contributors shown per peak in the text report (default 5 in\n"
            "                  the grouped report, 12 with --ranks all; 0 = all)\n"
            "  --markdown FILE also write the report as Markdown (CI job summaries)\n"
            "  --html FILE     also write one self-contained HTML page with SVG memory\n"
            "                  timelines per stage (per rank with --ranks all)\n"
            "  --perfetto FILE also write a Chrome trace (Perfetto, chrome://tracing):\n"
            "                  memory counters, phases, NVTX ranges, collectives, the OOM\n"
            "  --fail-on LIST  gates, e.g. oom,verdict!=OK:FITS,peak=70GiB or, with compare,\n"
            "                  peak=+3%%,device=+5%%,unmatched (docs/analysis.md, Gates);\n"
            "                  they judge the ranks analysed (with --rank N: rank N only);\n"
            "                  oom: a fatal OOM (an OOM the job caught and ran on from,\n"
            "                  listed as `OOM caught`, does not fail it)\n"
            "  --budget SIZE   device capacity for the advisor (default: the trace header),\n"
            "                  e.g. 80GiB, 79.1G, 85899345920 (a number without a unit is\n"
            "                  bytes; below 1 MiB is refused)\n"
            "  --headroom SIZE kept free on every rank (default 2GiB)\n"
            "  --config FILE   the job's Megatron config (TransformerConfig field names,\n"
            "                  YAML or JSON) when its settings are not on the command line\n"
            "  --no-advice     skip the recompute advisor\n"
            "  --jobs N        ranks read and analysed N at a time (default: one per CPU;\n"
            "                  the output is the same for every N)\n"
            "  --out FILE      summarize: the summary file to write\n"
            "  -h, --help      this text on stdout\n"
            "  --version       the project version, the trace format, JSON schema and summary\n"
            "                  format versions\n"
            "  --salvage       read every chunk of a damaged native trace that checks out,\n"
            "                  skip the rest; the rank is marked COVERAGE: INCOMPLETE\n"
            "  --pretty        with --json: indented JSON (default: compact, one line)\n"
            "  --peak-blocks   with --json: list the live blocks [address, bytes] at each\n"
            "                  peak (compare a trace with a snapshot of the same run)\n"
            "  A SIZE: digits, optional fraction, optional K/M/G/T (powers of 1024) with\n"
            "  optional i and B; nan, inf, signs, 1e3, overflow: refused (exit 1).\n"
            "  A flag given twice takes its last value (as argparse); of an output file\n"
            "  (--html, --markdown, --perfetto, --out) only the last is written, said on\n"
            "  stderr. --fail-on is the exception: its gates add up (all are judged).\n"
            "exit: 0 ok, 1 usage (also an --iteration that does not exist), 2 unreadable or\n"
            "      damaged traces, empty directory, mixed jobs/runs, two traces of one rank,\n"
            "      an output file that cannot be written, 3 a --fail-on gate failed (one\n"
            "      summary line on stderr)\n");
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

static int
rank_cmp(const void *a, const void *b)
{
    const am_rank *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return strcmp(x->path, y->path);
}

/* --budget or --headroom (flag, without dashes) VALUE into *out, bytes, by
 * the project's one size parser (recomp/bytesize.h): nan, inf, a sign, an
 * overflow or an unknown unit is refused with the flag, the value and why,
 * never read as some other size; --budget 0 is refused (a device without
 * memory: leave --budget out to use the trace's capacity). Returns 0, or -1
 * after the message on stderr (usage: exit 1). */
static int
parse_size_flag(const char *flag, const char *value, uint64_t *out)
{
    uint64_t v = 0;
    const char *why = rs_bytes_parse(value, &v);
    if (!why && v == 0 && strcmp(flag, "budget") == 0)
        why = "a device with no memory (leave --budget out to use the capacity the trace "
              "recorded)";
    /* hnew2 finding 6: `--budget 80` meant GB and was read as 80 bytes */
    if (!why && v && v < ((uint64_t)1 << 20) && strcmp(flag, "budget") == 0)
        why = "below 1 MiB, no device's budget (a number without a unit is bytes: 80GiB, "
              "not 80)";
    if (why) {
        fprintf(stderr, "recomp-analyze: --%s '%s' is not a size: %s; e.g. 80GiB, 79.1G, "
                        "85899345920\n", flag, value, why);
        return -1;
    }
    *out = v;
    return 0;
}

/* An output flag (--html, --markdown, --perfetto, --out: name without
 * dashes) given again: as argparse does, the last value wins; since only
 * that file is written, a note on stderr says so (issue 14, hnew finding
 * 13). Returns now, the value to keep. */
static const char *
last_output(const char *flag, const char *before, const char *now)
{
    if (before)
        fprintf(stderr, "recomp-analyze: --%s given more than once: only the last, '%s', is "
                        "written (the last value of a flag wins)\n", flag, now);
    return now;
}

/* The command line, parsed (parse_args). */
typedef struct cli {
    int compare;              /* the compare subcommand */
    int summarize, merge;     /* the summarize and merge subcommands */
    const char *out;          /* summarize --out FILE */
    int headroom_given, salvage; /* --headroom and --salvage were given */
    int json, want_rank, iteration, top, advice, all_ranks;
    int workers;              /* --jobs N */
    int peak_blocks;          /* --peak-blocks (JSON only) */
    int pretty;               /* --pretty: indented JSON */
    const char *markdown;     /* --markdown FILE, NULL none */
    const char *html;         /* --html FILE, NULL none */
    const char *perfetto;     /* --perfetto FILE, NULL none */
    am_gates gates;           /* --fail-on */
    adv_opts aopts;
    char **inputs;            /* the positional arguments */
    int ninputs;
} cli;

/* One analysed run: its files, their sources, the job and the verdict. */
typedef struct run {
    paths files;
    am_source **srcs;
    am_job job;
    adv_verdict verdict;
    int have_verdict;
    am_capture *caps;         /* per file, with --html/--perfetto; NULL none */
    adv_rank_part *parts;     /* summarize: the advisor's part of each rank */
    size_t *own_notes;        /* summarize: each rank's notes before am_job_finish's
                               * job-level ones (merge adds those for the whole job) */
} run;

/* The options summarize and merge take. 0, or -1 with a message. */
static int
check_sub_options(const cli *o)
{
    if (o->summarize && !o->out) {
        fprintf(stderr, "recomp-analyze: summarize wants --out FILE (the summary to write)\n");
        return -1;
    }
    if (!o->summarize && o->out) {
        fprintf(stderr, "recomp-analyze: --out FILE is summarize's\n");
        return -1;
    }
    if (o->summarize && (o->json || o->markdown || o->html || o->perfetto || o->gates.n ||
                         o->want_rank >= 0 || o->all_ranks || o->top >= 0)) {
        fprintf(stderr, "recomp-analyze: summarize writes only the summary (--out FILE); the "
                        "report's options (--json, --markdown, --fail-on, --rank, --ranks, "
                        "--top) go to merge\n");
        return -1;
    }
    if (o->merge && (o->html || o->perfetto)) {
        fprintf(stderr, "recomp-analyze: merge: --%s draws memory timelines, which need the "
                        "traces themselves (a summary holds the peaks, not the timelines): "
                        "run recomp-analyze --%s on the run directories\n",
                o->html ? "html" : "perfetto", o->html ? "html" : "perfetto");
        return -1;
    }
    if (o->merge && o->peak_blocks) {
        fprintf(stderr, "recomp-analyze: merge: --peak-blocks lists every live block, which a "
                        "summary does not keep: run recomp-analyze --json --peak-blocks on the "
                        "run directories\n");
        return -1;
    }
    if (o->merge && o->salvage) {
        fprintf(stderr, "recomp-analyze: merge: --salvage reads damaged traces: give it to "
                        "summarize\n");
        return -1;
    }
    return 0;
}

/* Options into *o. Returns -1 to go on, else the exit code (0 --help, 1 usage). */
static int
parse_args(int argc, char **argv, cli *o)
{
    static const struct option lo[] = {
        {"json", no_argument, 0, 'j'},          {"rank", required_argument, 0, 'r'},
        {"iteration", required_argument, 0, 'i'}, {"top", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},          {"budget", required_argument, 0, 'B'},
        {"headroom", required_argument, 0, 'H'}, {"config", required_argument, 0, 'C'},
        {"no-advice", no_argument, 0, 'N'},     {"ranks", required_argument, 0, 'R'},
        {"markdown", required_argument, 0, 'M'}, {"fail-on", required_argument, 0, 'F'},
        {"html", required_argument, 0, 'W'},    {"perfetto", required_argument, 0, 'P'},
        {"jobs", required_argument, 0, 'J'},
        {"version", no_argument, 0, 'V'},
        {"salvage", no_argument, 0, 'S'},
        {"peak-blocks", no_argument, 0, 'K'},
        {"pretty", no_argument, 0, 'Y'},
        {"out", required_argument, 0, 'O'},
        {0, 0, 0, 0},
    };
    char err[256];
    int c;
    if (argc > 1 && (strcmp(argv[1], "compare") == 0 || strcmp(argv[1], "summarize") == 0 ||
                     strcmp(argv[1], "merge") == 0)) {
        o->compare = argv[1][0] == 'c';
        o->summarize = argv[1][0] == 's';
        o->merge = argv[1][0] == 'm';
        argv[1] = argv[0]; /* getopt starts after the subcommand */
        argv++;
        argc--;
    }
    while ((c = getopt_long(argc, argv, "jr:i:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'j':
            o->json = 1;
            break;
        case 'r':
        case 'i':
        case 't':
            if (parse_int(optarg, c == 'r' ? &o->want_rank : c == 'i' ? &o->iteration : &o->top) <
                0) {
                fprintf(stderr, "recomp-analyze: --%s wants a number, got '%s'\n",
                        c == 'r' ? "rank" : c == 'i' ? "iteration" : "top", optarg);
                return 1;
            }
            break;
        case 'B':
        case 'H':
            o->headroom_given |= c == 'H';
            if (parse_size_flag(c == 'B' ? "budget" : "headroom", optarg,
                                c == 'B' ? &o->aopts.budget : &o->aopts.headroom) < 0)
                return 1;
            break;
        case 'C':
            o->aopts.config = optarg;
            break;
        case 'N':
            o->advice = 0;
            break;
        case 'R':
            if (strcmp(optarg, "all") != 0) {
                fprintf(stderr, "recomp-analyze: --ranks takes 'all', got '%s'\n", optarg);
                return 1;
            }
            o->all_ranks = 1;
            break;
        case 'M':
            o->markdown = last_output("markdown", o->markdown, optarg);
            break;
        case 'J':
            if (parse_int(optarg, &o->workers) < 0 || o->workers < 1) {
                fprintf(stderr, "recomp-analyze: --jobs wants a number of workers >= 1, got "
                                "'%s'\n", optarg);
                return 1;
            }
            break;
        case 'W':
            o->html = last_output("html", o->html, optarg);
            break;
        case 'P':
            o->perfetto = last_output("perfetto", o->perfetto, optarg);
            break;
        case 'F':
            if (am_gates_parse(optarg, &o->gates, err, sizeof err) < 0) {
                fprintf(stderr, "recomp-analyze: --fail-on: %s\n", err);
                return 1;
            }
            break;
        case 'S':
            am_source_set_salvage(1);
            o->salvage = 1;
            break;
        case 'O':
            o->out = last_output("out", o->out, optarg);
            break;
        case 'K':
            o->peak_blocks = 1;
            break;
        case 'Y':
            o->pretty = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("recomp-analyze %s (reads recompshim trace format %d.%d; JSON schema %s; "
                   "summary format %d.%d)\n",
                   RS_PROJECT_VERSION, RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR,
                   AM_SCHEMA_VERSION, AM_SUMMARY_MAJOR, AM_SUMMARY_MINOR);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    o->inputs = argv + optind;
    o->ninputs = argc - optind;
    if (o->ninputs < (o->compare ? 2 : 1)) {
        if (o->compare)
            fprintf(stderr, "recomp-analyze: compare wants a control and at least one "
                            "candidate run\n");
        usage(stderr);
        return 1;
    }
    if (o->pretty && !o->json) {
        fprintf(stderr, "recomp-analyze: --pretty indents the JSON report: add --json\n");
        return 1;
    }
    if (o->peak_blocks && !o->json) {
        fprintf(stderr, "recomp-analyze: --peak-blocks lists blocks in the JSON report: add "
                        "--json\n");
        return 1;
    }
    if ((o->summarize || o->merge || o->out) && check_sub_options(o) < 0)
        return 1;
    if (o->compare && o->perfetto) {
        fprintf(stderr, "recomp-analyze: --perfetto shows one run: not with compare\n");
        return 1;
    }
    if (o->compare && (o->iteration >= 0 || o->top >= 0 || o->all_ranks)) {
        fprintf(stderr, "recomp-analyze: compare reports each run's peaks and verdict side by "
                        "side: --%s shapes one run's report; run recomp-analyze on each run "
                        "for it\n",
                o->iteration >= 0 ? "iteration" : o->top >= 0 ? "top" : "ranks");
        return 1;
    }
    if (am_gates_check(&o->gates, o->compare, o->advice, err, sizeof err) < 0) {
        fprintf(stderr, "recomp-analyze: --fail-on: %s\n", err);
        return 1;
    }
    return -1;
}

/* The trace files of the inputs (files as given, directories scanned).
 * An input reached twice (the same file or directory given again, a file
 * also inside a directory given, by device and inode) is taken once, with a
 * note on stderr (hnew finding 10: the same folder twice read as "no trace
 * files", the same file twice as two traces of one rank). 0, or 2 with a
 * message. */
static int
collect_files(char *const *in, int n, paths *files)
{
    g_nseen = 0; /* a file counts once per run */
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(in[i], &st) < 0) {
            fprintf(stderr, "recomp-analyze: %s: cannot open: %s\n", in[i], strerror(errno));
            return 2;
        }
        if (S_ISDIR(st.st_mode)) {
            size_t before = files->n, dups = g_ndup;
            if (seen_file(files, &st)) {
                fprintf(stderr, "recomp-analyze: skipped %s (the same directory again)\n",
                        in[i]);
                continue;
            }
            if (scan_dir(in[i], files, 0) < 0)
                return 2;
            if (files->n == before && g_ndup == dups) {
                fprintf(stderr, "recomp-analyze: %s: no trace files in this directory\n",
                        in[i]);
                return 2;
            }
        } else if (seen_file(files, &st)) {
            fprintf(stderr, "recomp-analyze: skipped %s (the same file again)\n", in[i]);
        } else if (add_path(files, in[i]) < 0) {
            fprintf(stderr, "recomp-analyze: out of memory\n");
            return 2;
        }
    }
    return 0;
}

/* A source's warnings on stderr (also merge's, from a summary's metadata). */
static void
source_warnings(const am_meta *m)
{
    for (size_t w = 0; w < m->nwarnings; w++)
        fprintf(stderr, "recomp-analyze: warning: %s\n", m->warnings[w]);
    if (!m->closed && !m->nwarnings)
        fprintf(stderr,
                "recomp-analyze: warning: %s: trace not closed (the process was killed or "
                "is still running): read to its last published record\n",
                m->path);
}

/* Open every file of the run, `workers` at a time, reported in input order
 * as if read in turn; each warning once on stderr. 0, or 2. */
static int
open_sources(run *r, int workers)
{
    r->job.ranks = calloc(r->files.n, sizeof *r->job.ranks);
    r->srcs = calloc(r->files.n, sizeof *r->srcs);
    char(*oerr)[1024] = calloc(r->files.n, sizeof *oerr);
    if (!r->job.ranks || !r->srcs || !oerr) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        free(oerr);
        return 2;
    }
    am_open_sources((const char *const *)r->files.v, r->files.n, r->srcs, oerr, workers);
    for (size_t i = 0; i < r->files.n; i++) {
        if (!r->srcs[i]) {
            fprintf(stderr, "recomp-analyze: %s\n", oerr[i]);
            free(oerr);
            return 2;
        }
        source_warnings(&r->srcs[i]->meta);
    }
    free(oerr);
    return 0;
}

/* Two sources that name their rank within the same world size (> 1) can be
 * ranks of one job even without a job identity. */
static int
ranked_alike(const am_source *a, const am_source *b)
{
    return a->meta.rank >= 0 && b->meta.rank >= 0 && a->meta.world_size > 1 &&
           a->meta.world_size == b->meta.world_size;
}

/* s for a message on a terminal: valid UTF-8 and printable ASCII as they
 * are; control bytes, backslashes and bytes outside a valid UTF-8 sequence
 * as \xNN (a damaged summary or trace can hold any bytes in a job id; they
 * must neither break a reader decoding UTF-8 nor reach the terminal raw).
 * Returns out, always terminated. */
static const char *
printable(const char *s, char *out, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; s[i] && o + 5 < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xc0) != 0x80)
                len = 0;
        if (len == 1 && c >= 0x20 && c != 0x7f && c != '\\') {
            out[o++] = (char)c;
            i++;
        } else if (len > 1 && o + len < n) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            o += (size_t)snprintf(out + o, n - o, "\\x%02x", c);
            i++;
        }
    }
    out[o] = 0;
    return out;
}

/* The index of the trace among r's sources whose process forked source i's
 * (its header ppid is that trace's pid on the same host), or -1. */
static long
forked_by(const run *r, size_t i)
{
    const am_meta *c = &r->srcs[i]->meta;
    if (c->ppid <= 0)
        return -1;
    for (size_t k = 0; k < r->files.n; k++)
        if (k != i && r->srcs[k] && r->srcs[k]->meta.pid == c->ppid &&
            !strcmp(r->srcs[k]->meta.host, c->host) &&
            r->srcs[k]->meta.real_start_ns <= c->real_start_ns)
            return (long)k;
    return -1;
}

/* How a set-apart child's trace ended, for its note into buf: exited with
 * the status it passed to _exit/_Exit, killed (a trace of format 1.6 or
 * later not closed: its shim seals a trace at _exit), or, before 1.6,
 * what is knowable: a child leaving through _exit (Python's
 * multiprocessing, os._exit) runs no exit handlers, so its trace's end
 * reads like a kill. "" for a clean exit through exit(). Returns buf. */
static const char *
child_end(const am_meta *c, char *buf, size_t n)
{
    if (c->exit_via)
        snprintf(buf, n, "; it exited with status %d via %s", c->exit_status,
                 am_exit_via_name(c->exit_via));
    else if (c->closed)
        snprintf(buf, n, "%s", "");
    else if (c->exit_sealed)
        snprintf(buf, n, "%s", "; its trace is not closed: it was killed (or is still "
                               "running); an _exit or _Exit would have closed it");
    else
        snprintf(buf, n, "%s", "; its trace is not closed: a child that leaves through _exit "
                               "(Python's multiprocessing, os._exit) runs no exit handlers, so "
                               "a clean _exit and a kill end its trace alike: which one it was "
                               "is not recorded (trace format before 1.6)");
    return buf;
}

/* Drop a merge's source src: its summary's rank and advisor part, freed
 * (merge_ranks skips a rank without a source). */
static void
drop_summary_rank(am_summary *sv, size_t ns, const am_source *src)
{
    for (size_t i = 0; i < ns; i++)
        for (size_t k = 0; k < sv[i].nranks; k++)
            if (sv[i].ranks[k].src == src) {
                am_rank_free(&sv[i].ranks[k]);
                if (sv[i].parts)
                    adv_rank_part_free(&sv[i].parts[k]);
                return;
            }
}

/* A process forked by a traced rank that touched CUDA itself (a data-loader
 * or multiprocessing worker) has a trace of its own, with the rank's
 * environment (RANK included). It is a child of that rank, not a rank: set
 * apart from the job with a note naming both and how it ended
 * (child_end), never a second trace of the rank nor an extra rank (hnew
 * finding 2). The same for a merge (sv: its ns summaries, whose ranks are
 * r's sources; summary format 6.1 carries the ppid): the child's rank is
 * dropped from its summary. Always 0. */
static int
set_aside_children(run *r, am_summary *sv, size_t ns)
{
    size_t n = r->files.n, k = 0;
    long *parent = calloc(n ? n : 1, sizeof *parent);
    if (!parent)
        return 0;
    for (size_t i = 0; i < n; i++)
        parent[i] = forked_by(r, i);
    for (size_t i = 0; i < n; i++) {
        if (parent[i] < 0) {
            r->files.v[k] = r->files.v[i];
            r->srcs[k++] = r->srcs[i];
            continue;
        }
        const am_meta *c = &r->srcs[i]->meta, *pm = &r->srcs[parent[i]]->meta;
        char pf[1024], pp[1024], who[1100], end[320];
        snprintf(who, sizeof who, "%s", printable(r->files.v[parent[i]], pp, sizeof pp));
        if (pm->rank >= 0)
            snprintf(who + strlen(who), sizeof who - strlen(who), ", rank %d", pm->rank);
        fprintf(stderr,
                "recomp-analyze: note: %s: pid %d, forked by pid %d (%s): a child "
                "process of that rank that touched CUDA, not a rank of the job: set apart "
                "(analyse it alone with `recomp-analyze %s`); its device memory is outside "
                "PyTorch for the rank%s\n",
                printable(r->files.v[i], pf, sizeof pf), c->pid, c->ppid, who, pf,
                child_end(c, end, sizeof end));
        if (sv)
            drop_summary_rank(sv, ns, r->srcs[i]);
        else
            am_source_close(r->srcs[i]);
        free(r->files.v[i]);
    }
    for (size_t i = k; i < n; i++) {
        r->srcs[i] = NULL;
        r->files.v[i] = NULL;
    }
    r->files.n = k;
    free(parent);
    return 0;
}

/* The launch a trace recorded (its RECOMPSHIM_RUN_ID, which the first shim
 * of a process tree sets and its children inherit), or "" unknown. */
static const char *
launch_of(const am_meta *m)
{
    static const char key[] = "RECOMPSHIM_RUN_ID=";
    for (size_t e = 0; e < m->nenv; e++)
        if (!strncmp(m->env[e], key, sizeof key - 1))
            return m->env[e] + sizeof key - 1;
    return "";
}

/* After "two traces of one rank": when the files were written by more than
 * one launch (two jobs started at once with one rendezvous id into one
 * directory: hnew2 finding 4), each launch's files, so that each job can be
 * analysed by passing its files. */
static void
list_launches(const run *r)
{
    const char *first = r->files.n ? launch_of(&r->srcs[0]->meta) : "";
    int several = 0;
    for (size_t i = 1; i < r->files.n && !several; i++)
        several = strcmp(launch_of(&r->srcs[i]->meta), first) != 0;
    if (!several)
        return;
    fprintf(stderr, "  the files come from more than one launch (RECOMPSHIM_RUN_ID); pass one "
                    "launch's files at a time:\n");
    for (size_t i = 0; i < r->files.n; i++) {
        const char *l = launch_of(&r->srcs[i]->meta);
        int seen = 0;
        for (size_t p = 0; p < i && !seen; p++)
            seen = strcmp(launch_of(&r->srcs[p]->meta), l) == 0;
        if (seen)
            continue;
        fprintf(stderr, "  launch %s:", *l ? l : "(unknown)");
        for (size_t k = i; k < r->files.n; k++)
            if (strcmp(launch_of(&r->srcs[k]->meta), l) == 0)
                fprintf(stderr, " %s", printable(r->files.v[k], (char[1024]){0}, 1024));
        fputc('\n', stderr);
    }
}

/* One job per analysis: the same job, run directory and attempt, one trace
 * per rank. 0, or 2 with the files listed. */
static int
check_one_job(const run *r)
{
    char k0[256], ki[256];
    const paths *f = &r->files;
    am_job_join_key(&r->srcs[0]->meta, k0, sizeof k0);
    int mixed = 0;
    for (size_t i = 1; i < f->n; i++) {
        am_job_join_key(&r->srcs[i]->meta, ki, sizeof ki);
        /* files without a job identity (two single-GPU snapshots) are
         * separate jobs, never ranks of one invented job, unless each says
         * which rank of the same world size it is */
        if (strcmp(k0, ki) != 0 || ((!k0[0] || !ki[0]) && !ranked_alike(r->srcs[0], r->srcs[i])))
            mixed = 1;
    }
    if (mixed) {
        fprintf(stderr, "recomp-analyze: traces from different jobs, runs or attempts "
                        "(job id, run directory, restart count); analyse one run at a "
                        "time (point recomp-analyze at one run directory):\n");
        for (size_t i = 0; i < f->n; i++) {
            am_job_join_key(&r->srcs[i]->meta, ki, sizeof ki);
            char pk[1024], pf[1024];
            fprintf(stderr, "  %s: %s\n", printable(f->v[i], pf, sizeof pf),
                    ki[0] ? printable(ki, pk, sizeof pk) : "(no job identity)");
        }
        return 2;
    }
    char err[1024];
    if (am_job_check_concurrent(r->srcs, f->n, err, sizeof err) < 0) {
        fprintf(stderr, "recomp-analyze: %s\n", err);
        int *g = calloc(f->n, sizeof *g);
        if (g && am_job_run_groups(r->srcs, f->n, g) > 1)
            for (size_t i = 0; i < f->n; i++) {
                char pf[1024];
                if (g[i])
                    fprintf(stderr, "  run %d: %s (rank %d)\n", g[i],
                            printable(f->v[i], pf, sizeof pf), r->srcs[i]->meta.rank);
                else
                    fprintf(stderr, "  run unknown (no start time): %s\n",
                            printable(f->v[i], pf, sizeof pf));
            }
        free(g);
        return 2;
    }
    for (size_t i = 0; i < f->n; i++)
        for (size_t k = i + 1; k < f->n; k++)
            if (r->srcs[i]->meta.rank >= 0 && r->srcs[i]->meta.rank == r->srcs[k]->meta.rank) {
                fprintf(stderr,
                        "recomp-analyze: two traces of rank %d in one job: %s and %s "
                        "(different processes or restarts of one rank; analyse one run "
                        "at a time)\n",
                        r->srcs[i]->meta.rank, printable(f->v[i], (char[1024]){0}, 1024),
                        printable(f->v[k], (char[1024]){0}, 1024));
                list_launches(r);
                return 2;
            }
    return 0;
}

/* Progress on stderr when it is a terminal (never otherwise): the rank being
 * analysed and, every 2^20 events, how far it is; chains to a capture. */
typedef struct progress {
    int on;
    size_t i, n;              /* rank i of n */
    uint64_t events;
    const char *path;
    const am_observer *next;  /* the capture's observer, NULL none */
} progress;

/* Replace the progress line by what (NULL: clear it). */
static void
progress_line(const progress *p, const char *what)
{
    if (p->on)
        fprintf(stderr, "\r\033[K%s%s", what ? "recomp-analyze: " : "", what ? what : "");
}

static void
progress_event(void *ctx, const am_event *ev)
{
    progress *p = ctx;
    if (p->next)
        p->next->event(p->next->ctx, ev);
    if ((++p->events & ((1u << 20) - 1)) == 0) {
        char b[160];
        snprintf(b, sizeof b, "rank %zu/%zu: %llu M events (%s)", p->i + 1, p->n,
                 (unsigned long long)(p->events >> 20), p->path);
        progress_line(p, b);
    }
}

static void
progress_counter(void *ctx, int level, uint64_t t_ns, uint64_t bytes)
{
    progress *p = ctx;
    if (p->next)
        p->next->counter(p->next->ctx, level, t_ns, bytes);
}

/* Analyse the selected ranks on `workers` threads (am_analyze_ranks: the
 * same result as in turn); on a terminal one progress line for the whole
 * set. Sources move into the ranks. 0, or 2. */
static int
analyze_parallel(run *r, const cli *o, const am_opts *opts)
{
    char err[1024];
    am_job *j = &r->job;
    am_source **sel = calloc(r->files.n ? r->files.n : 1, sizeof *sel);
    am_rank **outs = calloc(r->files.n ? r->files.n : 1, sizeof *outs);
    size_t bad;
    int rc = 2;
    if (!sel || !outs) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < r->files.n; i++) {
        if (o->want_rank >= 0 && r->srcs[i]->meta.rank != o->want_rank)
            continue;
        sel[j->nranks] = r->srcs[i];
        outs[j->nranks] = &j->ranks[j->nranks];
        r->srcs[i] = NULL; /* owned by its rank now */
        j->nranks++;
    }
    int tty = isatty(STDERR_FILENO);
    if (tty && j->nranks)
        fprintf(stderr, "\r\033[Krecomp-analyze: %zu rank(s), %d at a time", j->nranks,
                o->workers);
    int failed = am_analyze_ranks(sel, outs, j->nranks, opts, o->workers, &bad, err,
                                  sizeof err) < 0;
    if (tty && j->nranks)
        fprintf(stderr, "\r\033[K");
    if (failed) {
        fprintf(stderr, "recomp-analyze: %s\n", err);
        goto done;
    }
    for (size_t i = 0; i < j->nranks; i++)
        if (j->ranks[i].rank < 0)
            j->ranks[i].rank = (int)i;
    rc = 0;
done:
    free(sel);
    free(outs);
    return rc;
}

/* Analyse every selected rank (sources move into the ranks), sorted by
 * rank: on worker threads (--jobs), or in turn where each rank has an
 * observer of its own (the timelines of --html/--perfetto, or per-rank
 * progress on a terminal with --jobs 1). 0, 1 (no trace of --rank N), or 2. */
static int
analyze_ranks(run *r, const cli *o)
{
    char err[1024];
    /* phase spans are kept only for the reports that list or draw them */
    am_opts opts = {.iteration = o->iteration,
                    .phase_spans = o->json || o->html || o->perfetto || o->markdown ||
                                   o->compare || o->summarize,
                    .peak_blocks = o->peak_blocks};
    am_job *j = &r->job;
    if ((o->html || o->perfetto) && !(r->caps = calloc(r->files.n, sizeof *r->caps))) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        return 2;
    }
    if (!r->caps && o->workers > 1) {
        if (analyze_parallel(r, o, &opts) != 0)
            return 2;
        goto sorted;
    }
    progress pr = {isatty(STDERR_FILENO), 0, r->files.n, 0, NULL, NULL};
    am_observer pobs = {&pr, progress_event, progress_counter};
    for (size_t i = 0; i < r->files.n; i++) {
        if (o->want_rank >= 0 && r->srcs[i]->meta.rank != o->want_rank)
            continue;
        am_rank *rk = &j->ranks[j->nranks];
        am_observer obs;
        if (r->caps) {
            r->caps[i].path = r->srcs[i]->meta.path;
            am_capture_observer(&r->caps[i], &obs);
            opts.observe = &obs;
        }
        if (pr.on) {
            char b[160];
            pr.i = i;
            pr.events = 0;
            pr.path = r->srcs[i]->meta.path;
            pr.next = r->caps ? &obs : NULL;
            snprintf(b, sizeof b, "rank %zu/%zu (%s)", i + 1, r->files.n, pr.path);
            progress_line(&pr, b);
            opts.observe = &pobs;
        }
        int bad = am_analyze(r->srcs[i], &opts, rk, err, sizeof err) < 0;
        progress_line(&pr, NULL);
        if (r->caps)
            am_capture_finish(&r->caps[i]);
        r->srcs[i] = NULL; /* owned by the rank now */
        if (!bad && rk->rank < 0)
            rk->rank = (int)j->nranks;
        j->nranks++;
        if (bad) {
            fprintf(stderr, "recomp-analyze: %s\n", err);
            return 2;
        }
    }
sorted:
    if (!j->nranks) {
        fprintf(stderr, "recomp-analyze: no trace of rank %d among %zu file(s)\n", o->want_rank,
                r->files.n);
        return 1;
    }
    am_sort(j->ranks, j->nranks, sizeof *j->ranks, rank_cmp);
    return 0;
}

/* --iteration K must name an iteration every analysed rank has: 0, or 1 with
 * the valid range per rank. */
static int
check_iteration(const am_job *j, int iteration)
{
    if (iteration < 0)
        return 0;
    int missing = 0;
    for (size_t i = 0; i < j->nranks; i++) {
        int found = 0;
        for (size_t k = 0; k < j->ranks[i].niters; k++)
            found |= j->ranks[i].iters[k].number == iteration;
        missing |= !found;
    }
    if (!missing)
        return 0;
    fprintf(stderr, "recomp-analyze: --iteration %d: no such iteration; iterations "
                    "are numbered as the report prints them (ProfilerStep#N numbers "
                    "when the trace has step markers, else from 0):\n",
            iteration);
    for (size_t i = 0; i < j->nranks; i++) {
        const am_rank *r = &j->ranks[i];
        if (!r->niters)
            fprintf(stderr, "  rank %d: no iterations\n", r->rank);
        else
            fprintf(stderr, "  rank %d: %d..%d (%zu iteration(s), %s)\n", r->rank,
                    r->iters[0].number, r->iters[r->niters - 1].number, r->niters,
                    r->has_step_markers ? "ProfilerStep numbers"
                                        : "numbered from 0 by the "
                                          "forward/backward/optimizer cycle");
    }
    return 1;
}

/* A partial job's missing ranks on stderr (analysis and merge alike). */
static void
warn_partial_job(const am_job *j)
{
    char miss[256];
    if (am_job_missing_ranks(j, miss, sizeof miss))
        fprintf(stderr, "recomp-analyze: warning: partial job: no trace of %s (%zu of the job's "
                        "%d ranks given): the report covers the ranks given only\n",
                miss, j->nranks, j->ranks[0].src ? j->ranks[0].src->meta.world_size : 0);
}

/* A verdict over a partial job (ranks of its world size without a trace)
 * covers the ranks analysed only: its why ends with COVERAGE: PARTIAL JOB
 * naming the missing ranks, and "every rank" there reads "every analysed
 * rank" where the why has room (hnew finding 9: a missing rank gave "fits
 * every rank" with only a footnote that did not name it). The advisor's own
 * text is never cut for it. The code is kept: --fail-on verdict gates read
 * it as the ranks given. */
static void
qualify_partial_job(const am_job *j, adv_verdict *v)
{
    char miss[256];
    size_t n = am_job_missing_ranks(j, miss, sizeof miss);
    if (!n || !v->available)
        return;
    char why[sizeof v->why], *o = why;
    size_t left = sizeof why;
    static const char every[] = "every rank";
    int w = 0, cut = 0;
    for (const char *p = v->why; *p && !cut;) {
        if (!strncmp(p, every, sizeof every - 1)) {
            w = snprintf(o, left, "every analysed rank");
            p += sizeof every - 1;
        } else {
            w = snprintf(o, left, "%c", *p++);
        }
        cut = w < 0 || (size_t)w >= left;
        if (!cut) {
            o += w;
            left -= (size_t)w;
        }
    }
    if (cut) /* no room: the advisor's text as it was */
        snprintf(why, sizeof why, "%s", v->why);
    size_t k = strlen(why);
    snprintf(why + k, sizeof why - k,
             "%sCOVERAGE: PARTIAL JOB (%s missing: %zu of the job's %d ranks analysed): the "
             "verdict covers the ranks analysed only; a missing rank may peak higher or have "
             "run out of memory", k ? " " : "", miss, j->nranks,
             j->ranks[0].src ? j->ranks[0].src->meta.world_size : 0);
    snprintf(v->why, sizeof v->why, "%s", why);
}

/* Everything up to the verdict for one run (the inputs that make it up).
 * 0, or the exit code (1, 2). */
static int
load_run(char *const *in, int n, const cli *o, run *r)
{
    char err[1024];
    int rc;
    if ((rc = collect_files(in, n, &r->files)) || (rc = open_sources(r, o->workers)) ||
        (rc = set_aside_children(r, NULL, 0)) || (rc = check_one_job(r)) || (rc = analyze_ranks(r, o)) ||
        (rc = check_iteration(&r->job, o->iteration)))
        return rc;
    r->job.rank_selected = o->want_rank >= 0;
    r->job.rank_filter = o->want_rank;
    r->job.nfiles = r->files.n;
    if (o->summarize && (r->own_notes = calloc(r->job.nranks, sizeof *r->own_notes)))
        for (size_t i = 0; i < r->job.nranks; i++)
            r->own_notes[i] = r->job.ranks[i].nnotes;
    am_job_finish(&r->job);
    /* summarize is run per node: the other nodes' ranks are missing by design,
     * and merge says which are missing from the whole job (hnew2 finding 15) */
    if (!o->summarize)
        warn_partial_job(&r->job);
    if (o->advice) {
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "\r\033[Krecomp-analyze: recompute advisor (%zu ranks)",
                    r->job.nranks);
        adv_opts ao = o->aopts;
        ao.workers = o->workers;
        int bad;
        if (o->summarize) {
            r->parts = calloc(r->job.nranks, sizeof *r->parts);
            bad = !r->parts ||
                  adv_run_summarize(&r->job, &ao, &r->verdict, r->parts, err, sizeof err) < 0;
            if (!r->parts)
                snprintf(err, sizeof err, "out of memory");
        } else {
            bad = adv_run(&r->job, &ao, &r->verdict, err, sizeof err) < 0;
        }
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "\r\033[K");
        if (bad) {
            fprintf(stderr, "recomp-analyze: advisor: %s\n", err);
            return 2;
        }
        r->have_verdict = 1;
        r->job.verdict = &r->verdict;
        qualify_partial_job(&r->job, &r->verdict);
    }
    return 0;
}

static void
run_free(run *r)
{
    if (r->have_verdict)
        adv_verdict_free(&r->verdict);
    for (size_t i = 0; r->parts && i < r->job.nranks; i++)
        adv_rank_part_free(&r->parts[i]);
    free(r->parts);
    free(r->own_notes);
    for (size_t i = 0; i < r->job.nranks; i++)
        am_rank_free(&r->job.ranks[i]);
    for (size_t i = 0; i < r->files.n; i++) {
        if (r->srcs)
            am_source_close(r->srcs[i]);
        free(r->files.v[i]);
    }
    free(r->files.v);
    free(r->srcs);
    free(r->job.ranks);
    if (r->caps)
        for (size_t i = 0; i < r->files.n; i++)
            am_capture_free(&r->caps[i]);
    free(r->caps);
}

/* What a report file needs (write_file's writers). */
typedef struct out_args {
    const run *r;
    const am_report_opts *ro;
    const am_comparison *cmp;
    char *const *sections;    /* compare --html: each run's section, NULL none */
} out_args;

/* --OPTION FILE through writer(f) (-1: write error). 0, or 2 with a message. */
static int
write_file(const char *option, const char *path, int (*writer)(FILE *, const out_args *),
           const out_args *a)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "recomp-analyze: --%s %s: cannot create: %s\n", option, path,
                strerror(errno));
        return 2;
    }
    int bad = writer(f, a) < 0 || ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "recomp-analyze: --%s %s: write failed\n", option, path);
        return 2;
    }
    return 0;
}

static int
md_job(FILE *f, const out_args *a)
{
    am_report_markdown(f, &a->r->job, a->ro);
    return 0;
}

static int
html_job(FILE *f, const out_args *a)
{
    return am_report_html(f, &a->r->job, a->r->caps, a->r->files.n, a->ro);
}

static int
perfetto_job(FILE *f, const out_args *a)
{
    return am_report_perfetto(f, &a->r->job, a->r->caps, a->r->files.n);
}

/* The reports of an analysed (or merged) run, then its gates: 0, 2 or 3. */
static int
report_run(run *rp, const cli *o)
{
    run r = *rp;
    int rc = 0;
    am_report_opts ro = {o->top, o->iteration, o->all_ranks, o->pretty};
    if (o->json) {
        if (am_report_json(stdout, &r.job, &ro) < 0) {
            fprintf(stderr, "recomp-analyze: cannot write the JSON document\n");
            rc = 2;
        }
    } else {
        am_report_text(stdout, &r.job, &ro);
    }
    if (fflush(stdout) != 0)
        rc = 2;
    out_args oa = {&r, &ro, NULL, NULL};
    if (!rc && o->markdown)
        rc = write_file("markdown", o->markdown, md_job, &oa);
    if (!rc && o->html)
        rc = write_file("html", o->html, html_job, &oa);
    if (!rc && o->perfetto)
        rc = write_file("perfetto", o->perfetto, perfetto_job, &oa);
    if (!rc && o->gates.n) {
        if (r.job.rank_selected)
            fprintf(stderr, "recomp-analyze: gates judge rank %d only (--rank): %zu trace "
                            "file(s) given, the other ranks' outcomes (an OOM) are not "
                            "judged\n", r.job.rank_filter, r.job.nfiles);
        am_runsum s;
        am_runsum_fill(&s, o->ninputs == 1 ? o->inputs[0] : "the run", &r.job,
                       r.have_verdict ? &r.verdict : NULL, o->aopts.config);
        if (am_gates_eval(&o->gates, NULL, &s, 1, stderr) > 0)
            rc = 3;
    }
    return rc;
}

/* recomp-analyze TRACE...|DIR: reports of one run, then its gates. */
static int
main_analyze(const cli *o)
{
    run r = {0};
    int rc = load_run(o->inputs, o->ninputs, o, &r);
    if (!rc)
        rc = report_run(&r, o);
    run_free(&r);
    return rc;
}

static int
md_compare(FILE *f, const out_args *a)
{
    am_compare_markdown(f, a->cmp);
    return 0;
}

static int
html_compare(FILE *f, const out_args *a)
{
    am_compare_html(f, a->cmp, a->sections);
    return 0;
}

/* Run i's section of the comparison page: its hot rank's timeline. */
static char *
run_section(const run *r, size_t i, const char *label)
{
    char *buf = NULL, title[512];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    snprintf(title, sizeof title, "run %zu: %s (hot rank %d)", i, label,
             r->job.hot >= 0 ? r->job.ranks[r->job.hot].rank : -1);
    am_html_hot_timeline(f, &r->job, r->caps, r->files.n, title);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int load_merged(char *const *in, int nin, const cli *o, run *rp, cli *eff);
static int is_summary_input(const char *in);

/* recomp-analyze compare CONTROL CANDIDATE...: each argument one run (its
 * traces, or its summaries: a summary file or a directory of them). */
static int
main_compare(const cli *o)
{
    am_comparison cmp = {0};
    int rc = 0;
    cmp.n = (size_t)o->ninputs;
    cmp.runs = calloc(cmp.n, sizeof *cmp.runs);
    if (!cmp.runs) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        return 2;
    }
    char **sections = o->html ? calloc(cmp.n, sizeof *sections) : NULL;
    for (size_t i = 0; i < cmp.n && !rc; i++) {
        run r = {0};
        cli eff = *o;
        if (is_summary_input(o->inputs[i])) {
            if (o->html) {
                fprintf(stderr, "recomp-analyze: compare --html draws each run's timeline, "
                                "which needs its traces: %s is a summary\n", o->inputs[i]);
                rc = 1;
                break;
            }
            rc = load_merged(&o->inputs[i], 1, o, &r, &eff); /* a run from its summaries */
        } else {
            rc = load_run(&o->inputs[i], 1, o, &r);
        }
        if (!rc) {
            am_runsum_fill(&cmp.runs[i], o->inputs[i], &r.job, r.have_verdict ? &r.verdict : NULL,
                           eff.aopts.config);
            if (sections)
                sections[i] = run_section(&r, i, o->inputs[i]);
        } else
            fprintf(stderr, "recomp-analyze: compare: run %s could not be analysed\n",
                    o->inputs[i]);
        run_free(&r);
    }
    if (!rc) {
        if (o->json)
            rc = am_compare_json(stdout, &cmp, o->pretty) < 0 ? 2 : 0;
        else
            am_compare_text(stdout, &cmp);
        if (fflush(stdout) != 0)
            rc = 2;
    }
    out_args oa = {NULL, NULL, &cmp, sections};
    if (!rc && o->markdown)
        rc = write_file("markdown", o->markdown, md_compare, &oa);
    if (!rc && o->html)
        rc = write_file("html", o->html, html_compare, &oa);
    for (size_t i = 0; sections && i < cmp.n; i++)
        free(sections[i]);
    free(sections);
    if (!rc && o->gates.n && am_gates_eval(&o->gates, &cmp.runs[0], cmp.runs + 1, cmp.n - 1,
                                           stderr) > 0)
        rc = 3;
    am_comparison_free(&cmp);
    return rc;
}

/* ---- summarize and merge (docs/summary-format.md) ---- */

/* recomp-analyze summarize TRACE...|DIR --out FILE: the run analysed as
 * usual (one node's ranks), written as per-rank summaries. 0, 1, or 2. */
static int
main_summarize(const cli *o)
{
    run r = {0};
    char err[1024];
    int rc = load_run(o->inputs, o->ninputs, o, &r);
    if (!rc && !r.own_notes) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        rc = 2;
    }
    for (size_t i = 0; !rc && i < r.job.nranks; i++) { /* the job's notes are merge's */
        am_rank *rk = &r.job.ranks[i];
        while (rk->nnotes > r.own_notes[i])
            free(rk->notes[--rk->nnotes]);
    }
    if (!rc) {
        am_summary_opts so = {.budget = o->aopts.budget, .headroom = o->aopts.headroom,
                              .iteration = o->iteration, .advice = r.have_verdict};
        snprintf(so.config, sizeof so.config, "%s", o->aopts.config ? o->aopts.config : "");
        if (am_summary_write(o->out, &r.job, &so, &r.verdict.cfg, r.parts, err, sizeof err) < 0) {
            fprintf(stderr, "recomp-analyze: summarize: %s\n", err);
            rc = 2;
        }
    }
    run_free(&r);
    return rc;
}

/* 1 when the files at a and b hold the same bytes (both readable), else 0. */
static int
same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    char ba[65536], bb[65536];
    while (same) {
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        same = na == nb && memcmp(ba, bb, na) == 0;
        if (na < sizeof ba)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

/* Adds summary p to files unless it is a summary already there: the same
 * file again (device and inode, or a directory given twice) or a copy of one
 * (the same size and bytes: a node's summary copied beside the others), with
 * a note on stderr naming which (hnew2 finding 7: both were refused as "two
 * traces of rank 0 ... different processes or restarts", as traces given
 * twice are not). 0, or -1 out of memory. */
static int
add_summary(paths *files, const char *p)
{
    struct stat st, o;
    if (stat(p, &st) == 0)
        for (size_t k = 0; k < files->n; k++) {
            if (stat(files->v[k], &o) != 0 || o.st_size != st.st_size)
                continue;
            if (o.st_dev == st.st_dev && o.st_ino == st.st_ino) {
                fprintf(stderr, "recomp-analyze: merge: skipped %s (the same summary again)\n",
                        p);
                return 0;
            }
            if (same_bytes(files->v[k], p)) {
                fprintf(stderr, "recomp-analyze: merge: skipped %s (a copy of %s)\n", p,
                        files->v[k]);
                return 0;
            }
        }
    return add_path(files, p);
}

/* The summary files of the inputs: files as given, in a directory every
 * file that starts with the summary's magic (sorted by name); each summary
 * once (add_summary). 0, or 2. */
static int
collect_summaries(char *const *in, int n, paths *files)
{
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(in[i], &st) < 0) {
            fprintf(stderr, "recomp-analyze: merge: %s: cannot open: %s\n", in[i],
                    strerror(errno));
            return 2;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (add_summary(files, in[i]) < 0)
                return 2;
            continue;
        }
        paths local = {0};
        DIR *d = opendir(in[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", in[i], e->d_name);
            if (e->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
                am_summary_sniff(p) && add_path(&local, p) < 0)
                break;
        }
        if (d)
            closedir(d);
        am_sort(local.v, local.n, sizeof *local.v, cmp_str);
        if (!local.n)
            fprintf(stderr, "recomp-analyze: merge: %s: no summaries in this directory\n",
                    in[i]);
        for (size_t k = 0; k < local.n; k++) {
            add_summary(files, local.v[k]);
            free(local.v[k]);
        }
        free(local.v);
        if (!local.n)
            return 2;
    }
    return 0;
}

typedef struct sum_read {
    const paths *files;
    am_summary *s;
    char (*errs)[1024];
} sum_read;

static int
read_one_summary(void *arg, size_t i)
{
    sum_read *c = arg;
    return am_summary_read(c->files->v[i], &c->s[i], c->errs[i], sizeof c->errs[i]);
}

/* Summaries made with other options than s0's, or than merge's own: 0, or
 * 2 naming the file and the field. */
static int
check_summary_options(const am_summary *s0, const am_summary *s, const cli *o)
{
    const am_summary_opts *a = &s0->opts, *b = &s->opts;
    const char *field = a->budget != b->budget       ? "budget"
                        : a->headroom != b->headroom ? "headroom"
                        : strcmp(a->config, b->config) ? "config"
                        : a->iteration != b->iteration ? "iteration"
                        : a->advice != b->advice     ? "advice"
                        : a->advice && memcmp(&s0->cfg, &s->cfg, sizeof s->cfg) ? "cfg"
                                                                               : NULL;
    if (field) {
        fprintf(stderr, "recomp-analyze: merge: %s: field %s: differs from %s's (summarize "
                        "every node with the same options and the same job's command line)\n",
                s->path, field, s0->path);
        return 2;
    }
    if ((o->aopts.budget && o->aopts.budget != a->budget) ||
        (o->headroom_given && o->aopts.headroom != a->headroom) ||
        (o->aopts.config && strcmp(o->aopts.config, a->config)) ||
        (o->iteration >= 0 && o->iteration != a->iteration)) {
        char bud[48];
        if (a->budget)
            snprintf(bud, sizeof bud, "%llu bytes", (unsigned long long)a->budget);
        else
            snprintf(bud, sizeof bud, "none: the traces' capacity");
        fprintf(stderr, "recomp-analyze: merge: --budget, --headroom, --config and --iteration "
                        "decide the per-rank figures: give them to summarize (%s was made with "
                        "--budget %s, --headroom %llu bytes, --config '%s', --iteration %d%s)\n",
                s0->path, bud, (unsigned long long)a->headroom, a->config, a->iteration,
                a->iteration < 0 ? " (none)" : "");
        return 1;
    }
    if (o->advice && !a->advice) {
        fprintf(stderr, "recomp-analyze: merge: %s holds no advisor part (summarized with "
                        "--no-advice): merge with --no-advice, or summarize again\n",
                s0->path);
        return 2;
    }
    return 0;
}

/* Every summary read (`workers` at a time) and checked: one job (the join
 * key and the overlap in time of check_one_job), one set of options, each
 * rank once. Their ranks are listed in r->srcs / r->files (named
 * "SUMMARY: TRACE"). 0, 1, or 2. */
static int
load_summaries(char *const *in, int nin, const cli *o, am_summary **sv, size_t *ns, run *r)
{
    paths files = {0};
    int rc = collect_summaries(in, nin, &files);
    *ns = files.n;
    *sv = calloc(files.n ? files.n : 1, sizeof **sv);
    char(*errs)[1024] = calloc(files.n ? files.n : 1, sizeof *errs);
    if (!rc && (!*sv || !errs)) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        rc = 2;
    }
    sum_read c = {&files, *sv, errs};
    size_t bad = rc ? 0 : am_parallel_for(files.n, o->workers, read_one_summary, &c);
    if (!rc && bad < files.n) {
        fprintf(stderr, "recomp-analyze: merge: %s\n", errs[bad]);
        rc = 2;
    }
    free(errs);
    size_t total = 0;
    for (size_t i = 0; i < files.n && !rc; i++)
        total += (*sv)[i].nranks;
    if (!rc && !(r->srcs = calloc(total, sizeof *r->srcs))) {
        fprintf(stderr, "recomp-analyze: out of memory\n");
        rc = 2;
    }
    for (size_t i = 0; i < files.n && !rc; i++)
        for (size_t k = 0; k < (*sv)[i].nranks; k++) {
            char name[4096];
            snprintf(name, sizeof name, "%s: %s", files.v[i], (*sv)[i].ranks[k].path);
            r->srcs[r->files.n] = (*sv)[i].ranks[k].src;
            source_warnings(&r->srcs[r->files.n]->meta); /* as analysing the trace says */
            if (add_path(&r->files, name) < 0)
                rc = 2;
        }
    for (size_t i = 0; i < files.n; i++)
        free(files.v[i]);
    free(files.v);
    if (!rc)
        set_aside_children(r, *sv, *ns);
    if (!rc && r->files.n > 1 && (rc = check_one_job(r)) != 0) {
        fprintf(stderr, "recomp-analyze: merge: those traces' summaries (field job):\n");
        for (size_t i = 0; i < *ns; i++)
            fprintf(stderr, "  %s: %zu rank(s), job %s\n", (*sv)[i].path, (*sv)[i].nranks,
                    (*sv)[i].ranks[0].src->meta.run_id);
    }
    if (r->srcs)
        memset(r->srcs, 0, r->files.n * sizeof *r->srcs); /* the ranks own them */
    for (size_t i = 0; i < *ns && !rc; i++)
        rc = check_summary_options(&(*sv)[0], &(*sv)[i], o);
    return rc;
}

/* A merged rank and its advisor part, for sorting. */
typedef struct merged {
    am_rank r;
    adv_rank_part *part;
} merged;

static int
merged_cmp(const void *a, const void *b)
{
    return rank_cmp(&((const merged *)a)->r, &((const merged *)b)->r);
}

/* The ranks of every summary (those of --rank N) moved into r->job, sorted
 * as analyse sorts them; parts[i] is job rank i's advisor part. 0, 1 or 2. */
static int
merge_ranks(const cli *o, am_summary *sv, size_t ns, run *r, adv_rank_part ***parts)
{
    size_t total = r->files.n, n = 0;
    merged *m = calloc(total ? total : 1, sizeof *m);
    *parts = calloc(total ? total : 1, sizeof **parts);
    r->job.ranks = calloc(total ? total : 1, sizeof *r->job.ranks);
    if (!m || !*parts || !r->job.ranks) {
        free(m);
        fprintf(stderr, "recomp-analyze: out of memory\n");
        return 2;
    }
    for (size_t i = 0; i < ns; i++)
        for (size_t k = 0; k < sv[i].nranks; k++) {
            if (!sv[i].ranks[k].src || /* a forked child, set apart */
                (o->want_rank >= 0 && sv[i].ranks[k].rank != o->want_rank))
                continue;
            m[n].r = sv[i].ranks[k];
            m[n].part = sv[i].parts ? &sv[i].parts[k] : NULL;
            memset(&sv[i].ranks[k], 0, sizeof sv[i].ranks[k]); /* moved */
            n++;
        }
    am_sort(m, n, sizeof *m, merged_cmp);
    for (size_t i = 0; i < n; i++) {
        r->job.ranks[i] = m[i].r;
        (*parts)[i] = m[i].part;
    }
    r->job.nranks = n;
    free(m);
    if (!n) {
        fprintf(stderr, "recomp-analyze: no trace of rank %d among %zu rank(s)\n", o->want_rank,
                total);
        return 1;
    }
    return 0;
}

/* One run from its summaries (the inputs), up to the verdict, as load_run
 * gives it from traces; *eff: o with the summaries' --iteration and
 * --config (what the reports take). 0, or the exit code (1, 2). */
static int
load_merged(char *const *in, int nin, const cli *o, run *rp, cli *eff)
{
    run r = *rp;
    am_summary *sv = NULL;
    adv_rank_part **parts = NULL;
    size_t ns = 0;
    char err[1024];
    *eff = *o;
    int rc = load_summaries(in, nin, o, &sv, &ns, &r);
    if (!rc)
        rc = merge_ranks(o, sv, ns, &r, &parts);
    if (!rc && o->iteration >= 0)
        rc = check_iteration(&r.job, o->iteration);
    else if (!rc && check_iteration(&r.job, sv[0].opts.iteration)) {
        /* summarize refuses an --iteration the ranks do not have, so a
         * summary holding one is damaged: exit 2 naming the field */
        fprintf(stderr, "recomp-analyze: %s: field options.iteration: iteration %d, which "
                        "its ranks do not have (a damaged summary: summarize again)\n",
                sv[0].path, sv[0].opts.iteration);
        rc = 2;
    }
    if (!rc) {
        r.job.rank_selected = o->want_rank >= 0;
        r.job.rank_filter = o->want_rank;
        r.job.nfiles = r.files.n;
        am_job_finish(&r.job);
        warn_partial_job(&r.job);
        adv_opts ao = o->aopts;
        ao.budget = sv[0].opts.budget;
        ao.headroom = sv[0].opts.headroom;
        ao.config = sv[0].opts.config[0] ? sv[0].opts.config : NULL;
        ao.workers = o->workers;
        if (o->advice && adv_run_merge(&r.job, &ao, &sv[0].cfg, parts, &r.verdict, err,
                                       sizeof err) < 0) {
            fprintf(stderr, "recomp-analyze: advisor: %s\n", err);
            rc = 2;
        } else if (o->advice) {
            r.have_verdict = 1;
            qualify_partial_job(&r.job, &r.verdict);
            r.job.verdict = &r.verdict;
        }
    }
    if (!rc) {
        static char config[1024]; /* the reports' --config (eff), past the summaries */
        snprintf(config, sizeof config, "%s", sv[0].opts.config);
        eff->iteration = sv[0].opts.iteration;
        eff->aopts.config = config[0] ? config : NULL;
    }
    free(parts);
    for (size_t i = 0; i < ns; i++)
        am_summary_free(&sv[i]);
    free(sv);
    *rp = r;
    /* the job's verdict is the copy's: &r.verdict dies with this frame (a
     * merge read a dead stack frame's verdict: crashed once adv_verdict grew) */
    rp->job.verdict = rp->have_verdict ? &rp->verdict : NULL;
    return rc;
}

/* recomp-analyze merge SUMMARY...|DIR: the job's reports and verdict from
 * its summaries, then its gates. 0, 1, 2 or 3. */
static int
main_merge(const cli *o)
{
    run r = {0};
    cli eff;
    int rc = load_merged(o->inputs, o->ninputs, o, &r, &eff);
    if (!rc)
        rc = report_run(&r, &eff);
    run_free(&r);
    return rc;
}

/* A compare argument that is a summary, or a directory holding one. */
static int
is_summary_input(const char *in)
{
    struct stat st;
    if (stat(in, &st) < 0)
        return 0;
    if (!S_ISDIR(st.st_mode))
        return am_summary_sniff(in);
    DIR *d = opendir(in);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d))) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", in, e->d_name);
        found = e->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
                am_summary_sniff(p);
    }
    if (d)
        closedir(d);
    return found;
}

int
main(int argc, char **argv)
{
    cli o = {.want_rank = -1, .iteration = -1, .top = -1, .advice = 1}; /* top -1: the report's default */
    o.aopts.headroom = (uint64_t)2 << 30;
    o.workers = am_workers_default();
    int rc = parse_args(argc, argv, &o);
    if (rc < 0)
        rc = o.compare ? main_compare(&o) : o.summarize ? main_summarize(&o)
           : o.merge ? main_merge(&o) : main_analyze(&o);
    am_gates_free(&o.gates);
    return rc;
}
