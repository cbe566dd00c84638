/* itest.h: helpers for the LD_PRELOAD integration tests.
 *
 * A test makes a context (fresh temp dir with out/ for RECOMPSHIM_OUT and
 * io/ for the program's stdout/stderr), runs a program from progs/ under
 * the shim with a clean environment, finds the trace files, runs
 * recomp-dump on them and checks records in the dump text.
 *
 * Dump lines are "KIND t=NS tid=TID key=value ...". it_norm() drops the
 * run-dependent fields t=, tid=, caller= and caller_lib= so that records can
 * be compared as whole strings. */
#ifndef ITEST_H
#define ITEST_H

#include <stddef.h>
#include <sys/types.h>

#ifndef RS_SHIM_PATH
#error "RS_SHIM_PATH must be defined by meson"
#endif

typedef struct it_ctx {
    char base[256];      /* fresh temp dir */
    char out[300];       /* base/out: RECOMPSHIM_OUT */
    char io[300];        /* base/io: stdout/stderr of runs */
    int nruns;
} it_ctx;

typedef struct it_run {
    pid_t pid;
    int status;          /* waitpid status */
    int exited, code;    /* WIFEXITED, WEXITSTATUS */
    int signaled, sig;
    char *out;           /* stdout text */
    char *err;           /* stderr text */
    char out_path[400], err_path[400];
} it_run;

typedef struct it_dump {
    char *text;          /* recomp-dump stdout */
    char *err;           /* recomp-dump stderr */
    int rc;              /* exit status (-1 when it did not exit) */
    char **lines;        /* text split into lines */
    size_t nlines;
} it_dump;

/* Creates the temp dirs (out/ mode 0700). Aborts the test on failure. */
void it_init(it_ctx *c);
void it_fini(it_ctx *c);   /* removes the temp dir unless the test failed */

/* Paths of the test programs. */
#define IT_PROG(name) RS_PROG_DIR "/it" name

/* Environment for a run: NULL-terminated "K=V" lists. */
#define IT_ENV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define IT_ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Runs argv[0] (a path) with LD_PRELOAD=shim, RECOMPSHIM_OUT=outdir (when
 * outdir != NULL), PATH, and extra env; waits up to 60 s. */
void it_run_prog(it_ctx *c, it_run *r, const char *outdir, const char *const *argv,
                 const char *const *env);
/* Same, but returns once started; it_wait() finishes it. */
void it_spawn(it_ctx *c, it_run *r, const char *outdir, const char *const *argv,
              const char *const *env);
/* Waits until the run's stdout contains `text` (up to 30 s); 1 found. */
int it_wait_output(it_run *r, const char *text);
void it_wait(it_run *r);
void it_run_free(it_run *r);

/* it_run_prog into c->out, asserting exit 0, exactly one trace, and a
 * successful recomp-dump of it. */
void it_run_traced(it_ctx *c, it_run *r, it_dump *d, const char *const *argv,
                   const char *const *env);

/* Trace files (*.rstrace) under dir, recursively, sorted; returns count. */
size_t it_find_traces(const char *dir, char ***paths);
void it_free_paths(char **paths, size_t n);
/* Regular files under dir, recursively (any name). */
size_t it_count_files(const char *dir);
/* Immediate subdirectories of dir. */
size_t it_list_subdirs(const char *dir, char ***names);

/* Runs recomp-dump on path. */
void it_dump_trace(it_dump *d, const char *path);
void it_dump_free(it_dump *d);

/* The line of the dump starting with `prefix` (first), or NULL. */
const char *it_line(const it_dump *d, const char *prefix);
/* Value of key=value in line (quotes removed, escapes kept); 1 found. */
int it_field(const char *line, const char *key, char *buf, size_t n);
unsigned long long it_field_u64(const char *line, const char *key);   /* aborts if absent */
/* Record kind of a line ("ALLOC"...), or "" for header/other lines. */
void it_kind(const char *line, char *buf, size_t n);
/* Normalised record: without t=, tid=, caller=, caller_lib= (malloc'd). */
char *it_norm(const char *line);

/* Normalised records of the dump whose kind is in `kinds` (space-separated
 * list, e.g. "ALLOC FREE") and, when tid > 0, written by thread tid.
 * MEMINFO reason=sample records are always left out. Returns count. */
size_t it_select(const it_dump *d, const char *kinds, long tid, char ***out);
void it_free_lines(char **v, size_t n);
/* Asserts (criterion) that selection == expected (NULL-terminated), with
 * both lists in the message on mismatch. An expected record ending in '*'
 * matches any record starting with the text before it. */
void it_expect_seq(const it_dump *d, const char *kinds, long tid, const char *const *expected,
                   const char *what);
#define IT_SEQ(...) ((const char *const[]){ __VA_ARGS__, NULL })
/* Number of normalised records equal to `rec`. */
size_t it_count_rec(const it_dump *d, const char *rec);
/* Number of lines containing `sub`. */
size_t it_count_sub(const it_dump *d, const char *sub);

/* Reads a whole file (malloc'd, NUL-terminated) or NULL. */
char *it_slurp(const char *path);
/* Value after "key=" in program stdout (first occurrence, up to space/newline). */
int it_out_field(const char *text, const char *key, char *buf, size_t n);

#endif
