/* test_outdir: RECOMPSHIM_OUT safety checks, run directories, file modes. */
#include <criterion/criterion.h>
#include <libgen.h>
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
