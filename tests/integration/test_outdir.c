/* test_outdir: RECOMPSHIM_OUT safety checks, run directories, file modes. */
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "itest.h"

/* Runs p_basic into dir; asserts the shim refused it. */
static void
expect_refused(it_ctx *c, const char *dir)
{
    it_run r;
    it_run_prog(c, &r, dir, IT_ARGV(IT_PROG("p_basic")), NULL);
    cr_assert(r.exited && r.code == 0, "the program must run on: exit %d\n%s%s", r.code, r.out, r.err);
    cr_expect(strstr(r.out, "\ndone\n") != NULL, "%s", r.out);
    cr_expect_eq(it_count_files(dir), 0, "files written into the refused %s", dir);
    size_t lines = 0;
    for (const char *p = r.err; *p; p++)
        lines += *p == '\n';
    cr_expect(lines == 1 && !strncmp(r.err, "recompshim:", 11),
              "expected one stderr line starting 'recompshim:', got %zu lines:\n%s", lines, r.err);
    it_run_free(&r);
}

static void
refuse_mode(mode_t mode)
{
    it_ctx c;
    it_init(&c);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/shared", c.base);
    cr_assert_eq(mkdir(dir, 0700), 0);
    cr_assert_eq(chmod(dir, mode), 0);
    expect_refused(&c, dir);
    it_fini(&c);
}

Test(outdir, world_writable_refused) { refuse_mode(0777); }
Test(outdir, group_writable_refused) { refuse_mode(0770); }

Test(outdir, sticky_world_writable_accepted)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tmp", c.base);
    cr_assert_eq(mkdir(dir, 0700), 0);
    cr_assert_eq(chmod(dir, 01777), 0);
    it_run_prog(&c, &r, dir, IT_ARGV(IT_PROG("p_basic")), NULL);
    cr_assert(r.exited && r.code == 0);
    char **paths;
    size_t n = it_find_traces(dir, &paths);
    cr_expect_eq(n, 1, "a sticky /tmp-like directory is safe: traces %zu\n%s", n, r.err);
    it_free_paths(paths, n);
    it_run_free(&r);
    it_fini(&c);
}

Test(outdir, other_owner_refused)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to chown a directory to nobody");
    it_ctx c;
    it_init(&c);
    char dir[400];
    snprintf(dir, sizeof dir, "%s/theirs", c.base);
    cr_assert_eq(mkdir(dir, 0755), 0);
    if (chown(dir, 65534, 65534) != 0)
        cr_skip_test("cannot chown to nobody");
    expect_refused(&c, dir);
    it_fini(&c);
}

Test(outdir, own_run_directory_per_run)
{
    it_ctx c;
    it_init(&c);
    for (int i = 0; i < 2; i++) {
        it_run r;
        it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_basic")), NULL);
        cr_assert(r.exited && r.code == 0);
        it_run_free(&r);
    }
    char **dirs;
    size_t nd = it_list_subdirs(c.out, &dirs);
    cr_assert_eq(nd, 2, "two runs must make two run directories, got %zu", nd);
    for (size_t i = 0; i < nd; i++) {
        char p[700], **paths;
        snprintf(p, sizeof p, "%s/%s", c.out, dirs[i]);
        size_t n = it_find_traces(p, &paths);
        cr_expect_eq(n, 1, "traces in %s: %zu", p, n);
        if (n == 1) {
            it_dump d;
            it_dump_trace(&d, paths[0]);
            char rid[128] = "";
            const char *l = it_line(&d, "header job ");
            cr_expect(l && it_field(l, "run_id", rid, sizeof rid) && !strcmp(rid, dirs[i]),
                      "run_id %s vs directory %s", rid, dirs[i]);
            it_dump_free(&d);
        }
        it_free_paths(paths, n);
    }
    it_free_paths(dirs, nd);
    it_fini(&c);
}

Test(outdir, trace_file_mode_0600)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    umask(0);   /* the shim must not rely on the job's umask */
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_basic")), NULL);
    cr_assert(r.exited && r.code == 0);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 1);
    struct stat st;
    cr_assert_eq(stat(paths[0], &st), 0);
    cr_expect_eq(st.st_mode & 07777, 0600, "mode %o", (unsigned)(st.st_mode & 07777));
    cr_expect_eq(st.st_uid, geteuid());
    char dir[512];
    snprintf(dir, sizeof dir, "%s", paths[0]);
    cr_assert_eq(stat(dirname(dir), &st), 0);
    cr_expect_eq(st.st_mode & 0022, 0, "run directory writable by others: %o", (unsigned)(st.st_mode & 07777));
    it_free_paths(paths, n);
    it_run_free(&r);
    it_fini(&c);
}

/* Traces found anywhere under dir (outside RECOMPSHIM_OUT too). */
static size_t
traces_under(const char *dir)
{
    char **paths;
    size_t n = it_find_traces(dir, &paths);
    it_free_paths(paths, n);
    return n;
}

/* #11: a run name from the environment never leaves RECOMPSHIM_OUT. */
Test(outdir, run_id_never_leaves_the_output_directory)
{
    static const char *const ids[] = {"..", ".", "../..", "../escape", "/", "/tmp", "a/../../b",
                                      ".hidden", "..."};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        it_ctx c;
        it_run r;
        it_init(&c);
        char dir[400], env[64];
        /* nested, so that an escape still lands under c.base */
        snprintf(dir, sizeof dir, "%s/a/out", c.base);
        snprintf(env, sizeof env, "RECOMPSHIM_RUN_ID=%s", ids[i]);
        it_run_prog(&c, &r, dir, IT_ARGV(IT_PROG("p_basic")), IT_ENV(env));
        cr_assert(r.exited && r.code == 0, "%s: exit %d\n%s", ids[i], r.code, r.err);
        cr_expect_eq(traces_under(dir), 1, "%s: traces in RECOMPSHIM_OUT\n%s", ids[i], r.err);
        cr_expect_eq(traces_under(c.base), 1, "%s: a trace outside RECOMPSHIM_OUT", ids[i]);
        char **subs;
        size_t ns = it_list_subdirs(dir, &subs);
        cr_expect_eq(ns, 1, "%s: run directories %zu", ids[i], ns);
        cr_expect(ns == 1 && subs[0][0] != '.', "%s: run directory %s", ids[i], ns ? subs[0] : "");
        it_free_paths(subs, ns);
        it_run_free(&r);
        it_fini(&c);
    }
}

/* #11: an output path that does not fit is refused with one stderr line
 * (the job runs untraced), never cut to a different directory. */
static void
expect_long_refused(size_t len)
{
    it_ctx c;
    it_init(&c);
    char *dir = malloc(len + 1);
    size_t n = (size_t)snprintf(dir, len + 1, "%s/", c.base);
    while (n < len) {
        size_t seg = len - n > 200 ? 200 : len - n;
        memset(dir + n, 'd', seg);
        n += seg;
        if (n < len)
            dir[n++] = '/';
    }
    dir[len] = '\0';
    if (dir[len - 1] == '/')
        dir[len - 1] = 'd';
    expect_refused(&c, dir);
    cr_expect_eq(it_count_files(c.base) - it_count_files(c.io), 0, "files written for %zu bytes",
                 len);
    cr_expect_eq(traces_under(c.base), 0);
    free(dir);
    it_fini(&c);
}

Test(outdir, output_path_longer_than_a_path_refused) { expect_long_refused(PATH_MAX + 300); }
Test(outdir, trace_path_longer_than_a_path_refused) { expect_long_refused(PATH_MAX - 40); }

/* #11: a kill while the trace file is being created (before its header is
 * written; after, before it is named) leaves no *.rstrace file. */
static void
kill_during_creation(const char *point)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    char pre[600], at[64];
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s %s", RS_KILLHDR_PATH, RS_SHIM_PATH);
    snprintf(at, sizeof at, "RS_KILL_AT=%s", point);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_basic")), IT_ENV(pre, at));
    cr_assert(r.signaled && r.sig == SIGKILL, "%s: not killed: exit %d\n%s", point, r.code, r.err);
    cr_expect_eq(traces_under(c.out), 0, "%s: a trace file was left", point);
    it_run_free(&r);
    it_fini(&c);
}

Test(outdir, kill_before_the_header_leaves_no_trace_file) { kill_during_creation("fallocate"); }
Test(outdir, kill_before_the_name_leaves_no_trace_file) { kill_during_creation("rename"); }
