/* test_robust.c: inputs a fresh user found misreported, each as the trace
 * that showed it: capped and windowed traces presented as complete, runs
 * merged, --iteration of a missing iteration, the report's small lies. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "abuild.h"

#define T0 1000000ull /* the builder's mono_start_ns (abuild.c) */
#define SHIM_LO 0x7f0000000000ull
#define TORCH_LO 0x7f1000000000ull

static char *
path_in(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return ab_keep(p);
}

static yajl_val
run_json(const char *const *args)
{
    char *out, *err;
    int rc = ab_run(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d; stderr:\n%s", rc, err);
    yajl_val j = ab_json(out);
    cr_assert(j, "stdout is not one JSON document:\n%s", out);
    free(out);
    free(err);
    return j;
}

static char *
run_text(const char *const *args)
{
    char *out, *err;
    int rc = ab_run(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d; stderr:\n%s", rc, err);
    free(err);
    return out;
}

/* RECOMPSHIM_MAX_BYTES stopped recording at 500 ns; 1234 records dropped;
 * an OOM recorded past the limit (reserved tail) at 900 ns, whose stack
 * starts with the shim's own frames. */
static void
capped_trace(const char *path)
{
    ab *a = ab_new();
    rs_file_header *h = ab_header(a);
    h->flags |= RS_HDR_LIMIT_HIT;
    h->max_bytes = 65536;
    h->limit_hit_ns = T0 + 500;
    h->dropped_records = 1234;
    ab_module(a, 1, SHIM_LO, SHIM_LO + 0x100000, "/opt/recompshim/lib/librecompshim.so");
    ab_module(a, 2, TORCH_LO, TORCH_LO + 0x100000, "/usr/lib/libtorch_cuda.so");
    ab_thread(a, AB_MAIN, 5, "python");
    ab_alloc(a, AB_MAIN, 10, 0x100000, 1000);
    ab_alloc(a, AB_MAIN, 20, 0x200000, 3000);
    ab_free(a, AB_MAIN, 30, 0x200000);
    const uint64_t frames[4] = {SHIM_LO + 0x1234, SHIM_LO + 0x2345, TORCH_LO + 0x10,
                                TORCH_LO + 0x20};
    ab_oom(a, AB_MAIN, 900, 1 << 20, 100, 8192, frames, 4);
    ab_write(a, path, 1);
}

Test(robust, capped_trace_says_so_and_qualifies_peak_and_oom)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    capped_trace(f);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", f));
    cr_expect_str_eq(ab_str(j, "ranks[0].coverage.status"), "capped");
    cr_expect_eq(ab_get(j, "ranks[0].coverage.complete")->type, yajl_t_false);
    cr_expect_eq(ab_int(j, "ranks[0].coverage.capped_at_ns"), 500);
    cr_expect_eq(ab_int(j, "ranks[0].coverage.dropped_records"), 1234);
    cr_expect_eq(ab_int(j, "ranks[0].coverage.max_bytes"), 65536);
    cr_expect(strstr(ab_str(j, "ranks[0].coverage.meaning"), "after the limit is missing"));
    cr_expect(ab_is_null(j, "ranks[0].coverage.window"));
    cr_expect_eq(ab_int(j, "ranks[0].peak.bytes"), 4000);
    cr_expect(strstr(ab_str(j, "ranks[0].peak.coverage_caveat"), "capped at"));
    cr_expect(strstr(ab_str(j, "job.coverage_caveat"), "rank 0 capped"));
    /* the OOM past the limit: flagged, its stack without the shim's frames */
    cr_expect_eq(ab_get(j, "ranks[0].oom.past_limit")->type, yajl_t_true);
    cr_expect(strstr(ab_str(j, "ranks[0].oom.caveat"), "last recorded event"));
    yajl_val st = ab_get(j, "ranks[0].oom.stack");
    cr_assert(st && YAJL_IS_ARRAY(st));
    cr_expect_eq(st->u.array.len, 2);
    /* named at analysis time where the module is here (symbolize.c); this
     * one is not: module+offset and why */
    cr_expect_str_eq(ab_str(j, "ranks[0].oom.stack[0]"),
                     "libtorch_cuda.so+0x10 (no symbol: /usr/lib/libtorch_cuda.so is not on "
                     "this machine)");
    cr_expect_eq(ab_int(j, "ranks[0].oom.stack_profiler_frames_dropped"), 2);
    yajl_tree_free(j);

    char *out = run_text(AB_ARGS("--no-advice", "--ranks", "all", f));
    cr_expect(strstr(out, "COVERAGE: INCOMPLETE, capped at 0.000 s"), "%s", out);
    cr_expect(strstr(out, "(of the recorded part only: capped at"), "%s", out);
    cr_expect(strstr(out, "NOTE: recorded 0.000 s after the byte limit"), "%s", out);
    cr_expect(strstr(out, "live at the OOM (device level"), "%s", out);
    cr_expect(!strstr(out, "librecompshim"), "%s", out);
    cr_expect(strstr(out, "#0 libtorch_cuda.so+0x10"), "%s", out);
    free(out);
    unlink(f);
    rmdir(dir);
}

/* A complete trace says so (and nothing is qualified). */
Test(robust, complete_trace_coverage)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_header(a)->host[0] = 0;
    ab_alloc(a, AB_MAIN, 10, 0x100000, 1000);
    ab_write(a, f, 1);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", f));
    cr_expect_str_eq(ab_str(j, "ranks[0].coverage.status"), "complete");
    cr_expect_eq(ab_get(j, "ranks[0].coverage.complete")->type, yajl_t_true);
    cr_expect(ab_is_null(j, "ranks[0].peak.coverage_caveat"));
    cr_expect(ab_is_null(j, "job.coverage_caveat"));
    cr_expect_eq(ab_get(j, "ranks[0].peak.lower_bound")->type, yajl_t_false);
    yajl_tree_free(j);
    char *out = run_text(AB_ARGS("--no-advice", "--ranks", "all", f));
    cr_expect(!strstr(out, "COVERAGE"), "%s", out);
    cr_expect(strstr(out, "host ?"), "empty host printed as ?: %s", out);
    free(out);
    unlink(f);
    rmdir(dir);
}

#if RS_TRACE_VERSION_MINOR >= 1
/* RECOMPSHIM_WINDOW=steps 3..5: segments cudaMalloc'd before the window are
 * missing, PyTorch's own totals are not: the device level (3000) is below
 * the tensor level (10000), which must not be printed as a fact. */
Test(robust, windowed_trace_device_below_tensor_is_a_lower_bound)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    rs_file_header *h = ab_header(a);
    h->window_kind = RS_WINDOW_STEPS;
    h->window_a = 3;
    h->window_b = 5;
    ab_thread(a, AB_MAIN, 5, "python");
    ab_window(a, 100, RS_WINDOW_OPEN, RS_WINDOW_STEPS, 3);
    ab_alloc(a, AB_MAIN, 110, 0x100000, 3000);
    ab_tensor(a, AB_MAIN, 120, 0x100000, 2000, 10000, 12000);
    ab_tensor(a, AB_MAIN, 130, 0x100000, -2000, 8000, 12000);
    ab_window(a, 800, RS_WINDOW_CLOSE, RS_WINDOW_STEPS, 6);
    ab_write(a, f, 1);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", f));
    cr_expect_str_eq(ab_str(j, "ranks[0].coverage.status"), "windowed");
    cr_expect_str_eq(ab_str(j, "ranks[0].coverage.window.kind"), "steps");
    cr_expect_eq(ab_int(j, "ranks[0].coverage.window.a"), 3);
    cr_expect_eq(ab_int(j, "ranks[0].coverage.window.b"), 5);
    cr_expect_eq(ab_int(j, "ranks[0].coverage.window.opened_ns"), 100);
    cr_expect_eq(ab_int(j, "ranks[0].coverage.window.closed_ns"), 800);
    cr_expect_eq(ab_int(j, "ranks[0].peak.bytes"), 10000);
    cr_expect_eq(ab_int(j, "ranks[0].device_peak.bytes"), 3000);
    cr_expect_eq(ab_get(j, "ranks[0].device_peak.lower_bound")->type, yajl_t_true);
    cr_expect(strstr(ab_str(j, "ranks[0].device_peak.coverage_caveat"), "windowed: steps 3..5"));
    yajl_tree_free(j);
    char *out = run_text(AB_ARGS("--no-advice", f));
    cr_expect(strstr(out, "COVERAGE: INCOMPLETE, windowed: steps 3..5"), "%s", out);
    cr_expect(strstr(out, "peak: at least 2.93 KiB"), "%s", out);
    cr_expect(strstr(out, "lower bound"), "%s", out);
    free(out);
    unlink(f);
    rmdir(dir);
}
#endif

/* The window never opened (the shim's META note): nothing can be said. */
Test(robust, window_never_opened)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    rs_file_header *h = ab_header(a);
    h->window_kind = RS_WINDOW_STEPS;
    h->window_a = 3;
    h->window_b = 5;
    ab_note(a, 1, "RECOMPSHIM_WINDOW never opened: only definitions and OOMs were recorded");
    ab_write(a, f, 1);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", f));
    cr_expect_str_eq(ab_str(j, "ranks[0].coverage.status"), "windowed");
    cr_expect_eq(ab_get(j, "ranks[0].coverage.window.opened")->type, yajl_t_false);
    cr_expect(strstr(ab_str(j, "ranks[0].coverage.summary"), "never opened"));
    cr_expect(strstr(ab_str(j, "ranks[0].coverage.meaning"), "nothing about"));
    yajl_tree_free(j);
    unlink(f);
    rmdir(dir);
}

static void
run_trace(const char *path, int rank, const char *run_id, int attempt, uint64_t big)
{
    ab *a = ab_new();
    ab_rank(a, rank, 4);
    ab_job(a, "megasim");
    rs_file_header *h = ab_header(a);
    snprintf(h->run_id, sizeof h->run_id, "%s", run_id);
    h->restart_count = attempt;
    ab_alloc(a, AB_MAIN, 10, 0x100000, big);
    ab_free(a, AB_MAIN, 20, 0x100000);
    ab_write(a, path, 1);
}

/* A RECOMPSHIM_OUT root with two run directories of one job name: never
 * one 8-rank job; pointing at one run directory works. */
Test(robust, two_runs_of_one_job_are_not_merged)
{
    char *root = ab_tmpdir();
    char *da = path_in(root, "megasim-20250101T000000Z-1"),
         *db = path_in(root, "megasim-20250101T010000Z-2");
    mkdir(da, 0700);
    mkdir(db, 0700);
    char *f[8];
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "rank%d.rstrace", i % 4);
        f[i] = path_in(i < 4 ? da : db, name);
        run_trace(f[i], i % 4, i < 4 ? "megasim-20250101T000000Z-1" : "megasim-20250101T010000Z-2",
                  -1, 1000 + (uint64_t)i);
    }
    char *out, *err;
    cr_expect_eq(ab_run(AB_ARGS("--json", root), &out, &err), 2);
    cr_expect_str_eq(out, "");
    cr_expect(strstr(err, "different jobs, runs or attempts"), "%s", err);
    cr_expect(strstr(err, "megasim-20250101T000000Z-1/rank0.rstrace: torchelastic_run_id=megasim "
                          "run_id=megasim-20250101T000000Z-1"),
              "%s", err);
    cr_expect(strstr(err, "run_id=megasim-20250101T010000Z-2"), "%s", err);
    free(out), free(err);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", db));
    cr_expect_eq(ab_int(j, "job.nranks"), 4);
    cr_expect_eq(ab_int(j, "job.hot_rank"), 3);
    cr_expect_str_eq(ab_str(j, "job.id"), "torchelastic_run_id=megasim "
                                          "run_id=megasim-20250101T010000Z-2");
    yajl_tree_free(j);
    for (int i = 0; i < 8; i++)
        unlink(f[i]), free(f[i]);
    rmdir(da), rmdir(db), rmdir(root);
}

/* Two attempts (torchelastic restarts) of one run, and two traces of one rank. */
Test(robust, attempts_and_duplicate_ranks_exit_2)
{
    char *dir = ab_tmpdir();
    char *f0 = path_in(dir, "a.rstrace"), *f1 = path_in(dir, "b.rstrace");
    run_trace(f0, 0, "run-1", 0, 1000);
    run_trace(f1, 1, "run-1", 1, 1000);
    char *out, *err;
    cr_expect_eq(ab_run(AB_ARGS(dir), &out, &err), 2);
    cr_expect(strstr(err, "a.rstrace: torchelastic_run_id=megasim run_id=run-1 attempt=0"), "%s",
              err);
    cr_expect(strstr(err, "b.rstrace: torchelastic_run_id=megasim run_id=run-1 attempt=1"), "%s",
              err);
    free(out), free(err);
    run_trace(f1, 0, "run-1", 0, 2000);
    cr_expect_eq(ab_run(AB_ARGS(dir), &out, &err), 2);
    cr_expect(strstr(err, "two traces of rank 0 in one job"), "%s", err);
    cr_expect(strstr(err, "a.rstrace") && strstr(err, "b.rstrace"), "%s", err);
    free(out), free(err);
    unlink(f0), unlink(f1);
    rmdir(dir);
}

/* Three cycle iterations (numbered 0..2): --iteration 7 is an error naming
 * the range; --iteration 2 is the last one the report prints. */
Test(robust, iteration_that_does_not_exist_exits_1)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 1, "python");
    ab_thread(a, AB_BWD, 2, "pt_autograd_0");
    uint64_t t = 100;
    for (int it = 0; it < 3; it++, t += 1000) {
        ab_push(a, AB_MAIN, t, "megatron.core.transformer.transformer_layer.TransformerLayer."
                               "_forward_attention.self_attention");
        ab_alloc(a, AB_MAIN, t + 1, 0x1000000, 100);
        ab_pop(a, AB_MAIN, t + 2);
        ab_alloc(a, AB_BWD, t + 50, 0x9000000, 10);
        ab_free(a, AB_BWD, t + 51, 0x9000000);
        ab_free(a, AB_BWD, t + 52, 0x1000000);
        ab_push(a, AB_MAIN, t + 60, "Optimizer.step#Adam.step");
        if (it == 0)
            ab_alloc(a, AB_MAIN, t + 61, 0x8000000, 4000);
        ab_pop(a, AB_MAIN, t + 62);
    }
    ab_write(a, f, 1);
    char *out, *err;
    cr_expect_eq(ab_run(AB_ARGS("--iteration", "7", f), &out, &err), 1);
    cr_expect_str_eq(out, "");
    cr_expect(strstr(err, "--iteration 7: no such iteration"), "%s", err);
    cr_expect(strstr(err, "rank 0: 0..2 (3 iteration(s), numbered from 0"), "%s", err);
    free(out), free(err);
    char *txt = run_text(AB_ARGS("--no-advice", "--ranks", "all", "--iteration", "2", f));
    cr_expect(strstr(txt, "    iteration 2: "), "%s", txt);
    cr_expect(strstr(txt, "  iteration 2:\n"), "%s", txt);
    free(txt);
    unlink(f);
    rmdir(dir);
}

/* --rank 0 of two traces: the job-level fields say they cover only it. */
Test(robust, rank_selection_scopes_job_fields)
{
    char *dir = ab_tmpdir();
    char *f0 = path_in(dir, "r0.rstrace"), *f1 = path_in(dir, "r1.rstrace");
    run_trace(f0, 0, "run-1", -1, 1000);
    run_trace(f1, 1, "run-1", -1, 5000);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", "--rank", "0", dir));
    cr_expect_eq(ab_int(j, "job.nranks"), 1);
    cr_expect(strstr(ab_str(j, "job.scope"), "selected ranks only (--rank 0, 2 trace(s) given)"),
              "%s", ab_str(j, "job.scope"));
    yajl_tree_free(j);
    j = run_json(AB_ARGS("--json", "--no-advice", dir));
    cr_expect_str_eq(ab_str(j, "job.scope"), "all ranks given");
    yajl_tree_free(j);
    char *txt = run_text(AB_ARGS("--no-advice", "--rank", "0", dir));
    cr_expect(strstr(txt, "(--rank 0 of 2 trace(s): job-level figures cover only it)"), "%s",
              txt);
    free(txt);
    unlink(f0), unlink(f1);
    rmdir(dir);
}

/* A first optimizer step that only allocates and frees temporaries creates
 * no state: a plain optimizer step (the state existed before the trace). */
Test(robust, first_optimizer_step_without_state_is_plain_optimizer)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 1, "python");
    ab_thread(a, AB_BWD, 2, "pt_autograd_0");
    uint64_t t = 100;
    for (int it = 0; it < 3; it++, t += 1000) {
        ab_push(a, AB_MAIN, t, "ProfilerStep#" "1");
        ab_pop(a, AB_MAIN, t + 1);
        ab_alloc(a, AB_MAIN, t + 2, 0x1000000, 100);
        ab_alloc(a, AB_BWD, t + 50, 0x9000000, 10);
        ab_free(a, AB_BWD, t + 51, 0x9000000);
        ab_free(a, AB_BWD, t + 52, 0x1000000);
        ab_push(a, AB_MAIN, t + 60, "Optimizer.step#Adam.step");
        ab_alloc(a, AB_MAIN, t + 61, 0x8000000, 4000);     /* a temporary */
        ab_free(a, AB_MAIN, t + 62, 0x8000000);
        ab_pop(a, AB_MAIN, t + 63);
    }
    ab_write(a, f, 1);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", f));
    cr_expect(ab_is_null(j, "ranks[0].steady_state.optimizer_state_init_iteration"));
    cr_expect_eq(ab_get(j, "ranks[0].steady_state.reached")->type, yajl_t_true);
    cr_expect(strstr(ab_str(j, "ranks[0].steady_state.reason"), "allocates no state"));
    cr_expect_str_eq(ab_str(j, "ranks[0].peak.phase"), "optimizer");
    cr_expect_eq(ab_int(j, "ranks[0].peak.bytes"), 4000);
    yajl_tree_free(j);
    unlink(f);
    rmdir(dir);
}

/* hnew2 finding 11: ranges named like torch.profiler's step markers but not
 * one ("ProfilerStep#abc", "ProfilerStep#", a number past 10^9) began
 * iterations and made the iterations "from step markers"; now only
 * ProfilerStep#<digits> is a marker, and the cycle gives the iterations. */
Test(robust, step_marker_needs_a_step_number)
{
    static const char *const names[] = {"ProfilerStep#abc", "ProfilerStep#",
                                        "ProfilerStep#99999999999999999999"};
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_thread(a, AB_MAIN, 1, "python");
    uint64_t t = 100;
    for (int it = 0; it < 3; it++, t += 1000) {
        ab_push(a, AB_MAIN, t, names[it]);
        ab_pop(a, AB_MAIN, t + 1);
        ab_push(a, AB_MAIN, t + 2, "forward");
        ab_alloc(a, AB_MAIN, t + 3, 0x1000000, 100);
        ab_pop(a, AB_MAIN, t + 4);
        ab_push(a, AB_MAIN, t + 5, "backward");
        ab_free(a, AB_MAIN, t + 6, 0x1000000);
        ab_pop(a, AB_MAIN, t + 7);
        ab_push(a, AB_MAIN, t + 60, "Optimizer.step#Adam.step");
        ab_pop(a, AB_MAIN, t + 63);
    }
    ab_write(a, f, 1);
    yajl_val j = run_json(AB_ARGS("--json", "--no-advice", f));
    cr_expect_str_eq(ab_str(j, "ranks[0].iteration_source"), "cycle");
    yajl_tree_free(j);
    unlink(f);
    rmdir(dir);
}

/* Found by adversarial testing: both readers blocked forever in open() on a
 * FIFO. Now: not a regular file, exit 2, nothing read. */
Test(robust, fifo_is_refused_not_waited_on)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "trace.rstrace");
    cr_assert_eq(mkfifo(f, 0600), 0);
    char *out, *err;
    int rc = ab_run(AB_ARGS(f), &out, &err);
    cr_expect_eq(rc, 2, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "not a regular file") != NULL, "%s", err);
    free(out);
    free(err);
    unlink(f);
    rmdir(dir);
}

/* Found by adversarial testing: the directory scan followed a link to ..
 * (the same traces counted as more ranks) and counted a hard-linked copy. */
Test(robust, directory_links_are_not_followed_and_files_count_once)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "rank0.rstrace");
    ab *a = ab_new();
    ab_rank(a, 0, 1);
    ab_thread(a, AB_MAIN, 5, "python");
    ab_alloc(a, AB_MAIN, 10, 0x1000, 4096);
    ab_write(a, f, 1);
    char *loop = path_in(dir, "loop"), *hard = path_in(dir, "again.rstrace");
    cr_assert_eq(symlink("..", loop), 0);
    cr_assert_eq(link(f, hard), 0);
    char *out, *err;
    int rc = ab_run(AB_ARGS("--json", dir), &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    yajl_val j = ab_json(out);
    cr_assert(j);
    cr_expect_eq(ab_get(j, "ranks")->u.array.len, 1, "one rank, not one per path");
    cr_expect(strstr(err, "a link to a directory") != NULL, "%s", err);
    cr_expect(strstr(err, "the same file again") != NULL, "%s", err);
    yajl_tree_free(j);
    free(out);
    free(err);
    unlink(loop);
    unlink(hard);
    unlink(f);
    rmdir(dir);
}

/* #11: one flipped bit in a sealed chunk (the backward thread's) fails the
 * file, naming the chunk's offset; --salvage reads every other chunk and
 * marks the rank incomplete with what was lost. */
Test(robust, salvage_skips_a_damaged_chunk_and_says_so)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_alloc(a, AB_MAIN, 10, 0x100000, 1000);
    ab_alloc(a, AB_MAIN, 20, 0x200000, 3000);
    ab_free(a, AB_MAIN, 30, 0x200000);
    ab_alloc(a, AB_BWD, 40, 0x300000, 5000);
    ab_write(a, f, 1);
    /* chunk 1 is the backward thread's: flip a bit of its first record */
    FILE *fp = fopen(f, "r+b");
    cr_assert(fp);
    rs_file_header h;
    cr_assert_eq(fread(&h, sizeof h, 1, fp), 1);
    long c1 = (long)h.header_size + (long)h.chunk_size;
    unsigned char byte;
    cr_assert_eq(fseek(fp, c1 + (long)sizeof(rs_chunk_header) + 24, SEEK_SET), 0);
    cr_assert_eq(fread(&byte, 1, 1, fp), 1);
    byte ^= 0x10;
    cr_assert_eq(fseek(fp, c1 + (long)sizeof(rs_chunk_header) + 24, SEEK_SET), 0);
    cr_assert_eq(fwrite(&byte, 1, 1, fp), 1);
    fclose(fp);

    char *out, *err, want[64];
    snprintf(want, sizeof want, "offset %ld: chunk 1: checksum mismatch", c1);
    int rc = ab_run(AB_ARGS("--json", "--no-advice", f), &out, &err);
    cr_expect_eq(rc, 2, "without --salvage: exit %d", rc);
    cr_expect(strstr(err, want), "want '%s' in: %s", want, err);
    free(out);
    free(err);

    rc = ab_run(AB_ARGS("--json", "--no-advice", "--salvage", f), &out, &err);
    cr_assert_eq(rc, 0, "--salvage: exit %d: %s", rc, err);
    yajl_val j = ab_json(out);
    cr_assert(j, "%s", out);
    cr_expect_str_eq(ab_str(j, "ranks[0].coverage.status"), "salvaged");
    cr_expect_eq(ab_get(j, "ranks[0].coverage.complete")->type, yajl_t_false);
    cr_expect(strstr(ab_str(j, "ranks[0].coverage.summary"), "1 damaged chunk(s) skipped"),
              "%s", ab_str(j, "ranks[0].coverage.summary"));
    cr_expect(strstr(err, "salvage: skipped chunk 1") && strstr(err, want), "stderr: %s", err);
    yajl_tree_free(j);
    free(out);
    free(err);
    unlink(f);
    rmdir(dir);
}

/* Flip one byte of chunk k's first record (chunk k of a file written by
 * ab_write: one chunk per thread, in order of first use). */
static void
damage_chunk(const char *f, uint32_t k)
{
    FILE *fp = fopen(f, "r+b");
    cr_assert(fp);
    rs_file_header h;
    cr_assert_eq(fread(&h, sizeof h, 1, fp), 1);
    long off = (long)h.header_size + (long)k * (long)h.chunk_size + (long)sizeof(rs_chunk_header) + 24;
    unsigned char byte;
    cr_assert_eq(fseek(fp, off, SEEK_SET), 0);
    cr_assert_eq(fread(&byte, 1, 1, fp), 1);
    byte ^= 0x10;
    cr_assert_eq(fseek(fp, off, SEEK_SET), 0);
    cr_assert_eq(fwrite(&byte, 1, 1, fp), 1);
    fclose(fp);
}

/* hnew finding 3: chunk 0 (the main thread's segments) lost to damage made
 * the memory it held read as another process's: X:NCCL_BUFFERS "free the
 * device", exit 0, with a window's advice, a broken confirm template and an
 * empty "ranges:  > " line. Property over every chunk of the trace: a
 * salvaged trace never yields a verdict (n/a, COVERAGE: INCOMPLETE naming
 * the salvage), never a window's advice, never an empty range step. */
Test(robust, salvaged_trace_withholds_the_verdict)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    for (uint32_t k = 0; k < 2; k++) {
        ab *a = ab_new();
        ab_rank(a, 0, 1);
        ab_thread(a, AB_MAIN, 5, "python");
        ab_alloc(a, AB_MAIN, 10, 0x100000, 60ull << 30); /* chunk 0 */
        ab_push(a, AB_BWD, 20, "");                       /* chunk 1: an unnamed range */
        ab_meminfo(a, AB_BWD, 30, 1ull << 30, 80ull << 30);
        ab_oom(a, AB_BWD, 40, 4ull << 30, 1ull << 30, 80ull << 30, NULL, 0);
        ab_write(a, f, 1);
        char *out, *err;
        int rc = ab_run(AB_ARGS(f), &out, &err);
        cr_expect_eq(rc, 0, "undamaged: exit %d: %s", rc, err);
        cr_expect(!strstr(out, "ranges:  >") && !strstr(out, "ranges: \n"), "%s", out);
        cr_expect(!strstr(out, "under the shim with free") && !strstr(out, "shim with leave"),
                  "%s", out);
        free(out), free(err);
        damage_chunk(f, k);
        rc = ab_run(AB_ARGS("--salvage", f), &out, &err);
        cr_expect_eq(rc, 0, "chunk %u: exit %d: %s", k, rc, err);
        cr_expect(strstr(out, "verdict: n/a\n"), "chunk %u:\n%s", k, out);
        cr_expect(strstr(out, "COVERAGE: INCOMPLETE (rank 0: salvaged: 1 damaged chunk(s)"),
                  "chunk %u:\n%s", k, out);
        cr_expect(strstr(out, "analyse an undamaged copy of the trace"), "chunk %u:\n%s", k, out);
        cr_expect(!strstr(out, "RECOMPSHIM_WINDOW"), "chunk %u:\n%s", k, out);
        cr_expect(!strstr(out, "ranges:  >") && !strstr(out, "ranges: \n"), "chunk %u:\n%s", k,
                  out);
        cr_expect(!strstr(out, "not a Megatron job"), "chunk %u:\n%s", k, out);
        free(out), free(err);
    }
    unlink(f);
    rmdir(dir);
}

/* hnew finding 7: a truncated copy (whole chunks present) is refused with
 * what --salvage could do, and --salvage reads the whole chunks, marking
 * the rank salvaged with the chunks lost. */
Test(robust, salvage_reads_the_whole_chunks_of_a_truncated_file)
{
    char *dir = ab_tmpdir(), *f = path_in(dir, "r0.rstrace");
    ab *a = ab_new();
    ab_alloc(a, AB_MAIN, 10, 0x100000, 1000);
    ab_alloc(a, AB_BWD, 40, 0x300000, 5000);
    ab_write(a, f, 1);
    FILE *fp = fopen(f, "rb");
    cr_assert(fp);
    rs_file_header h;
    cr_assert_eq(fread(&h, sizeof h, 1, fp), 1);
    fclose(fp);
    cr_assert_eq(h.chunks_published, 2);
    cr_assert_eq(truncate(f, (off_t)h.header_size + h.chunk_size + 100), 0);
    char *out, *err;
    int rc = ab_run(AB_ARGS("--json", "--no-advice", f), &out, &err);
    cr_expect_eq(rc, 2, "without --salvage: exit %d", rc);
    cr_expect(strstr(err, "file shorter than its published counts") &&
                  strstr(err, "1 whole chunk(s) present, --salvage reads them"),
              "%s", err);
    free(out), free(err);
    rc = ab_run(AB_ARGS("--json", "--no-advice", "--salvage", f), &out, &err);
    cr_assert_eq(rc, 0, "--salvage: exit %d: %s", rc, err);
    yajl_val j = ab_json(out);
    cr_assert(j, "%s", out);
    cr_expect_str_eq(ab_str(j, "ranks[0].coverage.status"), "salvaged");
    cr_expect(strstr(err, "truncated file") && strstr(err, "1 of 2 published chunk(s) whole"),
              "%s", err);
    yajl_tree_free(j);
    free(out), free(err);
    /* a header cut short is nothing salvage can read */
    cr_assert_eq(truncate(f, 100), 0);
    rc = ab_run(AB_ARGS("--salvage", f), &out, &err);
    cr_expect_eq(rc, 2);
    free(out), free(err);
    unlink(f);
    rmdir(dir);
}

/* hnew finding 9: ranks 0, 1 and 3 of a 4-rank job. The missing rank is
 * named on stderr, in the notes and at the head of the verdict's why, and
 * the why never says "every rank" of ranks it did not see. With --rank the
 * gates judge that rank only, and say so: --rank 0 --fail-on oom passes
 * where rank 1 ran out of memory; without --rank the gate fails. */
Test(robust, missing_rank_is_named_and_gates_state_their_scope)
{
    char *dir = ab_tmpdir();
    char *f[3];
    const int ranks[3] = {0, 1, 3};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "rank%d.rstrace", ranks[i]);
        f[i] = path_in(dir, name);
        ab *a = ab_new();
        ab_rank(a, ranks[i], 4);
        ab_job(a, "megasim");
        ab_meminfo(a, AB_MAIN, 5, 70ull << 30, 80ull << 30);
        ab_alloc(a, AB_MAIN, 10, 0x100000, 1ull << 30);
        if (ranks[i] == 1)
            ab_oom(a, AB_MAIN, 20, 90ull << 30, 69ull << 30, 80ull << 30, NULL, 0);
        ab_free(a, AB_MAIN, 30, 0x100000);
        ab_write(a, f[i], 1);
    }
    char *out, *err;
    int rc = ab_run(AB_ARGS("--json", dir), &out, &err);
    cr_expect_eq(rc, 0, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "warning: partial job: no trace of rank 2 (3 of the job's 4 ranks"),
              "%s", err);
    yajl_val j = ab_json(out);
    cr_assert(j, "%s", out);
    const char *why = ab_str(j, "verdict.why");
    cr_expect(strstr(why, "COVERAGE: PARTIAL JOB (rank 2 missing: 3 of the job's 4 ranks "
                          "analysed)"), "%s", why);
    cr_expect(!strstr(why, "every rank"), "\"every rank\" in a partial job's why: %s", why);
    cr_expect(strstr(out, "missing: rank 2"), "%s", out);
    yajl_tree_free(j);
    free(out), free(err);

    rc = ab_run(AB_ARGS("--fail-on", "oom", dir), &out, &err);
    cr_expect_eq(rc, 3, "the job's gate: exit %d: %s", rc, err);
    free(out), free(err);
    rc = ab_run(AB_ARGS("--rank", "0", "--fail-on", "oom", dir), &out, &err);
    cr_expect_eq(rc, 0, "--rank 0: exit %d: %s", rc, err);
    cr_expect(strstr(err, "gates judge rank 0 only (--rank): 3 trace file(s) given"), "%s", err);
    cr_expect(!strstr(err, "partial job"), "--rank is a selection, not a partial job: %s", err);
    free(out), free(err);
    for (int i = 0; i < 3; i++)
        unlink(f[i]), free(f[i]);
    rmdir(dir);
}

/* hnew finding 10: the same directory given twice read as "no trace files
 * in this directory", the same file twice as "two traces of rank 0". An
 * input reached again (by device and inode) is taken once, with a note. */
Test(robust, same_input_twice_is_taken_once)
{
    char *dir = ab_tmpdir();
    char *f0 = path_in(dir, "rank0.rstrace"), *f1 = path_in(dir, "rank1.rstrace");
    run_trace(f0, 0, "run-1", 0, 1000);
    run_trace(f1, 1, "run-1", 0, 2000);
    char *out, *err;
    int rc = ab_run(AB_ARGS("--no-advice", dir, dir), &out, &err);
    cr_expect_eq(rc, 0, "the same directory twice: exit %d: %s", rc, err);
    cr_expect(strstr(out, "recomp-analyze: 2 rank(s)"), "%.300s", out);
    cr_expect(strstr(err, "(the same directory again)"), "%s", err);
    free(out), free(err);
    rc = ab_run(AB_ARGS("--no-advice", f0, f0), &out, &err);
    cr_expect_eq(rc, 0, "the same file twice: exit %d: %s", rc, err);
    cr_expect(strstr(out, "recomp-analyze: 1 rank(s)"), "%.300s", out);
    cr_expect(strstr(err, "(the same file again)"), "%s", err);
    free(out), free(err);
    rc = ab_run(AB_ARGS("--no-advice", dir, f1), &out, &err);
    cr_expect_eq(rc, 0, "a file also inside a directory given: exit %d: %s", rc, err);
    cr_expect(strstr(out, "recomp-analyze: 2 rank(s)"), "%.300s", out);
    free(out), free(err);
    unlink(f0), unlink(f1);
    free(f0), free(f1);
    rmdir(dir);
}
