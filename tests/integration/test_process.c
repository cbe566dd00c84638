/* test_process: OOM records, processes without CUDA, fork, SIGKILL, and
 * the minimal runtime double (missing real functions). */
#include <criterion/criterion.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdint.h>

#include "itest.h"

#define GIB 1073741824ull
#define CAP (80 * GIB)
#define CTX 536870912ull

/* [lo, hi) of the MODULE record whose path ends with "/name". */
static int
module_range(const it_dump *d, const char *name, unsigned long long *lo, unsigned long long *hi)
{
    char suffix[128];
    snprintf(suffix, sizeof suffix, "/%s\"", name);
    for (size_t i = 0; i < d->nlines; i++)
        if (!strncmp(d->lines[i], "MODULE ", 7) && strstr(d->lines[i], suffix)) {
            *lo = it_field_u64(d->lines[i], "lo");
            *hi = it_field_u64(d->lines[i], "hi");
            return 1;
        }
    return 0;
}

/* Checks the OOM record (normalised prefix `want`, then frames=N) and its
 * N frame lines: the caller and at least `min_in_prog` frames in the
 * program (p_oom's level3, level2, level1, main). */
static void
check_oom(const it_dump *d, const char *want, int min_in_prog)
{
    size_t at = SIZE_MAX, count = 0;
    for (size_t i = 0; i < d->nlines; i++)
        if (!strncmp(d->lines[i], "OOM ", 4)) {
            at = i;
            count++;
        }
    cr_assert_eq(count, 1, "OOM records: %zu", count);
    const char *oom = d->lines[at];
    char *norm = it_norm(oom);
    char head[512];
    snprintf(head, sizeof head, "%s frames=", want);
    cr_expect(!strncmp(norm, head, strlen(head)), "OOM record\n  expected: %sN\n  got:      %s", head, norm);
    free(norm);
    unsigned long long nframes = it_field_u64(oom, "frames");
    unsigned long long caller = it_field_u64(oom, "caller");
    unsigned long long lo = 0, hi = 0;
    cr_assert(module_range(d, "itp_oom", &lo, &hi), "no MODULE record for itp_oom");
    cr_expect(caller >= lo && caller < hi, "caller %#llx outside itp_oom [%#llx, %#llx)", caller, lo, hi);
    cr_assert(nframes >= (unsigned long long)min_in_prog && nframes <= 64, "frames=%llu", nframes);
    int in_prog = 0, caller_seen = 0;
    for (unsigned long long k = 0; k < nframes; k++) {
        cr_assert(at + 1 + k < d->nlines, "frame line %llu missing", k);
        const char *fl = d->lines[at + 1 + k];
        char pre[48];
        snprintf(pre, sizeof pre, "  frame #%llu 0x", k);
        cr_assert(!strncmp(fl, pre, strlen(pre)), "frame line %llu: '%s'", k, fl);
        unsigned long long a = strtoull(fl + strlen(pre) - 2, NULL, 16);
        in_prog += a >= lo && a < hi;
        caller_seen |= a == caller;
    }
    cr_expect(in_prog >= min_in_prog, "frames in itp_oom: %d, expected >= %d", in_prog, min_in_prog);
    cr_expect(caller_seen, "the caller %#llx is not among the frames", caller);
    if (at + 1 + nframes < d->nlines)
        cr_expect(strncmp(d->lines[at + 1 + nframes], "  frame", 7) != 0, "more frame lines than frames=%llu",
                  nframes);
}

Test(process, oom_record)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_oom"), "malloc", "1073741824", "107374182400"), NULL);
    cr_expect(strstr(r.out, "oom_rc=2 last_error=2 ") != NULL, "%s", r.out);
    char want[256];
    snprintf(want, sizeof want,
             "OOM api=cudaMalloc mem=device dev=0 size=107374182400 status=2 free=%llu total=%llu meminfo_status=0",
             CAP - CTX - GIB, CAP);
    check_oom(&d, want, 4);
    char want_star[300];
    snprintf(want_star, sizeof want_star, "%s frames=*", want);
    it_expect_seq(&d, "ALLOC FREE OOM", 0,
                  IT_SEQ("ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000000 size=1073741824 stream=0x0 status=0",
                         want_star,
                         "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0040000000 size=4096 stream=0x0 status=0",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0040000000 stream=0x0 status=0",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000000 stream=0x0 status=0"),
                  "p_oom");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(process, oom_configured_capacity)
{
    /* MOCK_CUDA_CAPACITY 4 GiB, context 256 MiB: 3 GiB fits, 1 GiB more
     * does not (768 MiB free). */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_oom"), "malloc", "3221225472", "1073741824"),
                  IT_ENV("MOCK_CUDA_CAPACITY=4294967296", "MOCK_CUDA_CONTEXT_BYTES=268435456"));
    check_oom(&d,
              "OOM api=cudaMalloc mem=device dev=0 size=1073741824 status=2 free=805306368 total=4294967296 "
              "meminfo_status=0",
              4);
    const char *h = it_line(&d, "header device=");
    cr_assert(h != NULL);
    cr_expect_eq(it_field_u64(h, "capacity"), 4294967296ull, "%s", h);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(process, oom_injected_async)
{
    /* MOCK_CUDA_FAIL: the 2nd cudaMallocAsync returns 2 without allocating. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_oom"), "async"), IT_ENV("MOCK_CUDA_FAIL=cudaMallocAsync@2=2"));
    char want[256];
    snprintf(want, sizeof want,
             "OOM api=cudaMallocAsync mem=device dev=0 size=8192 status=2 free=%llu total=%llu meminfo_status=0",
             CAP - CTX - 4096, CAP);
    check_oom(&d, want, 4);
    char want_star[300];
    snprintf(want_star, sizeof want_star, "%s frames=*", want);
    it_expect_seq(&d, "ALLOC FREE OOM", 0,
                  IT_SEQ("ALLOC api=cudaMallocAsync mem=device dev=0 ptr=0x7e0000000000 size=4096 stream=0x42 status=0",
                         want_star,
                         "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000001000 size=4096 stream=0x0 status=0",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000001000 stream=0x0 status=0",
                         "FREE api=cudaFreeAsync mem=device dev=0 ptr=0x7e0000000000 stream=0x42 status=0"),
                  "p_oom async");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(process, no_cuda_no_trace)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_nocuda")), NULL);
    cr_assert(r.exited && r.code == 0, "exit %d\n%s%s", r.code, r.out, r.err);
    cr_expect_str_eq(r.out, "done\n");
    cr_expect_eq(it_count_files(c.out), 0, "files under %s", c.out);
    char **dirs;
    size_t nd = it_list_subdirs(c.out, &dirs);
    cr_expect_eq(nd, 0, "run directories under %s: %zu (first %s)", c.out, nd, nd ? dirs[0] : "");
    it_free_paths(dirs, nd);
    cr_expect_str_empty(r.err, "stderr: %s", r.err);
    it_run_free(&r);
    it_fini(&c);
}

Test(process, fork_child_own_file)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_fork")), NULL);
    cr_assert(r.exited && r.code == 0, "exit %d\n%s%s", r.code, r.out, r.err);
    int ppid, cpid, cpid2, cppid;
    const char *l = strstr(r.out, "parent pid=");
    cr_assert(l && sscanf(l, "parent pid=%d child=%d", &ppid, &cpid) == 2, "%s", r.out);
    l = strstr(r.out, "child pid=");
    cr_assert(l && sscanf(l, "child pid=%d ppid=%d", &cpid2, &cppid) == 2, "%s", r.out);
    cr_assert_eq(cpid, cpid2);
    cr_assert_eq(cppid, ppid);
    cr_assert_eq(ppid, (int)r.pid);

    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 2, "traces: %zu", n);
    int seen_parent = 0, seen_child = 0;
    char rid[2][128];
    for (size_t i = 0; i < n; i++) {
        it_dump d;
        it_dump_trace(&d, paths[i]);
        cr_assert_eq(d.rc, 0, "%s: %s", paths[i], d.err);
        const char *h = it_line(&d, "header host=");
        cr_assert(h != NULL);
        int pid = (int)it_field_u64(h, "pid");
        char closed[8], want[128];
        cr_assert(it_field(h, "closed", closed, sizeof closed));
        cr_expect_str_eq(closed, "yes", "%s", h);
        snprintf(want, sizeof want, "-%d.rstrace", pid);
        cr_expect(strstr(paths[i], want) != NULL, "file %s does not name pid %d", paths[i], pid);
        it_field(it_line(&d, "header job"), "run_id", rid[i], sizeof rid[i]);
        if (pid == ppid) {
            seen_parent++;
            it_expect_seq(&d, "ALLOC FREE OOM", 0,
                          IT_SEQ("ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000000 size=1048576 stream=0x0 status=0",
                                 "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000100000 size=3145728 stream=0x0 status=0",
                                 "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000100000 stream=0x0 status=0",
                                 "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000000 stream=0x0 status=0"),
                          "parent");
        } else {
            cr_assert_eq(pid, cpid, "trace of unknown pid %d", pid);
            seen_child++;
            cr_expect_eq((int)it_field_u64(h, "ppid"), ppid, "%s", h);
            it_expect_seq(&d, "ALLOC FREE OOM", 0,
                          IT_SEQ("ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000100000 size=2097152 stream=0x0 status=0",
                                 "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000100000 stream=0x0 status=0"),
                          "child");
            char **th;
            size_t nt = it_select(&d, "THREAD", 0, &th);
            cr_expect(nt == 1 && strstr(th[0], "rename=0"), "child THREAD records: %zu", nt);
            char tw[64];
            snprintf(tw, sizeof tw, "THREAD thread_tid=%d ", cpid);
            cr_expect(nt >= 1 && !strncmp(th[0], tw, strlen(tw)), "child THREAD: %s", nt ? th[0] : "");
            it_free_lines(th, nt);
        }
        it_dump_free(&d);
    }
    cr_expect(seen_parent == 1 && seen_child == 1);
    /* the child inherits the run: both files in one run directory */
    cr_expect_str_eq(rid[0], rid[1]);
    char d0[512], d1[512];
    snprintf(d0, sizeof d0, "%s", paths[0]);
    snprintf(d1, sizeof d1, "%s", paths[1]);
    cr_expect_str_eq(dirname(d0), dirname(d1));
    it_free_paths(paths, n);
    it_run_free(&r);
    it_fini(&c);
}

#define KILL_N 5000   /* > one 256 KiB chunk of ALLOC records */

static void
check_killed_trace(it_ctx *c, int n)
{
    char **paths;
    size_t np = it_find_traces(c->out, &paths);
    cr_assert_eq(np, 1, "traces: %zu", np);
    it_dump d;
    it_dump_trace(&d, paths[0]);
    cr_assert_eq(d.rc, 0, "recomp-dump of a killed trace: exit %d: %s", d.rc, d.err);
    const char *h = it_line(&d, "header host=");
    cr_assert(h != NULL, "%s", d.text);
    char closed[8];
    cr_assert(it_field(h, "closed", closed, sizeof closed));
    cr_expect_str_eq(closed, "no", "%s", h);
    char **got;
    size_t ng = it_select(&d, "ALLOC FREE", 0, &got);
    cr_assert_eq(ng, (size_t)n, "ALLOC records after SIGKILL: %zu, expected %d", ng, n);
    unsigned long long addr = 0x7e0000000000ull;
    for (int i = 0; i < n; i++) {
        char want[160];
        snprintf(want, sizeof want, "ALLOC api=cudaMalloc mem=device dev=0 ptr=%#llx size=%d stream=0x0 status=0", addr,
                 512 * (i + 1));
        cr_assert_str_eq(got[i], want, "record %d", i);
        addr += 512ull * (i + 1);
    }
    it_free_lines(got, ng);
    cr_expect_eq(it_count_rec(&d, "NVTX_PUSH domain=default name=\"kill.range\" depth=1 category=0 pre_trace=1"), 1);
    it_dump_free(&d);
    it_free_paths(paths, np);
}

Test(process, sigkill_self_trace_readable)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", KILL_N);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_kill"), "self", nbuf), NULL);
    cr_assert(r.signaled && r.sig == SIGKILL, "status %#x\n%s%s", r.status, r.out, r.err);
    check_killed_trace(&c, KILL_N);
    it_run_free(&r);
    it_fini(&c);
}

Test(process, sigkill_by_test_trace_readable)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    it_spawn(&c, &r, c.out, IT_ARGV(IT_PROG("p_kill"), "wait", "300"), NULL);
    cr_assert(it_wait_output(&r, "READY\n"), "p_kill never got ready");
    cr_assert_eq(kill(r.pid, SIGKILL), 0);
    it_wait(&r);
    cr_assert(r.signaled && r.sig == SIGKILL, "status %#x", r.status);
    check_killed_trace(&c, 300);
    it_run_free(&r);
    it_fini(&c);
}

Test(process, minimal_runtime)
{
    /* Against the minimal double only cudaMalloc, cudaFree and
     * cudaMemGetInfo exist; those three hooks work, the rest of the header
     * degrades (runtime_version=0, device unknown). */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_minimal")), IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_MIN_DIR));
    cr_assert(strstr(r.out, "minimal=1\n") != NULL, "not run against the minimal double:\n%s", r.out);
    char meminfo[160];
    snprintf(meminfo, sizeof meminfo, "MEMINFO reason=app dev=-1 free=%llu total=%llu status=0", CAP - CTX - 1048576,
             CAP);
    it_expect_seq(&d, "ALLOC FREE MEMINFO OOM", 0,
                  IT_SEQ("ALLOC api=cudaMalloc mem=device dev=-1 ptr=0x7e0000000000 size=1048576 stream=0x0 status=0",
                         meminfo, "FREE api=cudaFree mem=device dev=-1 ptr=0x7e0000000000 stream=0x0 status=0"),
                  "p_minimal");
    const char *h = it_line(&d, "header device=");
    cr_assert(h != NULL);
    cr_expect_eq(it_field_u64(h, "runtime_version"), 0, "%s", h);
    cr_expect_eq(it_count_sub(&d, "key=hook_missing"), 0, "no hook was called whose real function is missing");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(process, minimal_runtime_missing_async)
{
    /* cudaMallocAsync/cudaFreeAsync are missing in the minimal double: the
     * shim returns an error for them (no crash), records META hook_missing
     * once each, and keeps tracing the hooks that work. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_minimal_async")), IT_ENV("LD_LIBRARY_PATH=" RS_MOCK_MIN_DIR));
    cr_assert(strstr(r.out, "minimal=1\n") != NULL, "not run against the minimal double:\n%s", r.out);
    int rc1 = -1, rc2 = -1;
    const char *l = strstr(r.out, "async_rc=");
    cr_assert(l && sscanf(l, "async_rc=%d freeasync_rc=%d", &rc1, &rc2) == 2, "%s", r.out);
    cr_expect_neq(rc1, 0, "cudaMallocAsync without a real function must fail");
    cr_expect_neq(rc2, 0, "cudaFreeAsync without a real function must fail");
    cr_expect(strstr(r.out, "b=(nil)") != NULL, "%s", r.out);
    cr_expect_eq(it_count_rec(&d, "META key=hook_missing value=\"cudaMallocAsync\""), 1);
    cr_expect_eq(it_count_rec(&d, "META key=hook_missing value=\"cudaFreeAsync\""), 1);
    cr_expect_eq(it_count_sub(&d, "key=hook_missing"), 2);
    it_expect_seq(&d, "ALLOC FREE OOM", 0,
                  IT_SEQ("ALLOC api=cudaMalloc mem=device dev=-1 ptr=0x7e0000000000 size=4096 stream=0x0 status=0",
                         "FREE api=cudaFree mem=device dev=-1 ptr=0x7e0000000000 stream=0x0 status=0",
                         "ALLOC api=cudaMalloc mem=device dev=-1 ptr=0x7e0000001000 size=512 stream=0x0 status=0",
                         "FREE api=cudaFree mem=device dev=-1 ptr=0x7e0000001000 stream=0x0 status=0"),
                  "p_minimal_async");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

/* Found by adversarial testing: a job that closes every descriptor and opens
 * its own file gets the trace's old number; the shim then grew and wrote
 * chunks into the job's file. Now it checks the descriptor's identity and
 * reopens the trace by path. */
Test(process, job_reusing_the_trace_descriptor_is_never_written)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    char app[600];
    snprintf(app, sizeof app, "%s/appfile.txt", c.base);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_fdsteal"), app), NULL);
    cr_assert(r.exited && r.code == 0, "exit %d\n%s%s", r.code, r.out, r.err);
    cr_expect(strstr(r.out, "size=19") != NULL, "the job's file was written to: %s", r.out);
    cr_expect(strstr(r.err, "recompshim") == NULL, "stderr: %s", r.err);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 1);
    it_dump d;
    it_dump_trace(&d, paths[0]);
    cr_assert_eq(d.rc, 0, "%s", d.err);
    /* every allocation of the loop is in the trace */
    size_t allocs = 0;
    for (size_t i = 0; i < d.nlines; i++)
        allocs += strncmp(d.lines[i], "ALLOC ", 6) == 0;
    cr_expect_eq(allocs, 200001);
    it_dump_free(&d);
    it_free_paths(paths, n);
    it_run_free(&r);
    it_fini(&c);
}

/* Found by adversarial testing: after exec (same pid) the new program could
 * not create its trace ("File exists") and the first trace read as killed. */
Test(process, exec_closes_the_trace_and_the_new_program_gets_its_own)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_exec")), NULL);
    cr_assert(r.exited && r.code == 0, "exit %d\n%s%s", r.code, r.out, r.err);
    cr_expect(strstr(r.err, "recompshim") == NULL, "stderr: %s", r.err);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 2, "traces: %zu", n);
    int sizes_seen = 0;
    for (size_t i = 0; i < n; i++) {
        it_dump d;
        it_dump_trace(&d, paths[i]);
        cr_assert_eq(d.rc, 0, "%s: %s", paths[i], d.err);
        char closed[8];
        cr_assert(it_field(it_line(&d, "header host="), "closed", closed, sizeof closed));
        cr_expect_str_eq(closed, "yes", "%s", paths[i]);
        const char *a = it_line(&d, "ALLOC ");
        cr_assert(a != NULL);
        unsigned long long size = it_field_u64(a, "size");
        if (size == (1u << 20)) {
            sizes_seen |= 1;
            cr_expect(it_count_sub(&d, "value=\"exec ") == 1, "the exec is noted");
        } else if (size == (2u << 20)) {
            sizes_seen |= 2;
            cr_expect(strstr(paths[i], "-x1.rstrace") != NULL, "numbered name: %s", paths[i]);
        }
        it_dump_free(&d);
    }
    cr_expect_eq(sizes_seen, 3);
    it_free_paths(paths, n);
    it_run_free(&r);
    it_fini(&c);
}
