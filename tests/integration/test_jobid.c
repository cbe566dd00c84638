/* test_jobid: the ranks of one job land in one run directory per attempt
 * under every launcher, given each launcher's environment, and
 * recomp-analyze analyses them as one job; ranks of one job split over
 * several directories join by job identity, two jobs never do. Each "node"
 * or rank is a separate process tree started with its own environment, as
 * srun, a per-node torchrun or mpirun's daemons start them. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#ifndef RS_ANALYZE_PATH
#error "RS_ANALYZE_PATH must be defined by meson"
#endif

#define P_JOB IT_PROG("p_job")

static void run_together(it_ctx *c, const char *const *env_a, const char *const *env_b);

/* One rank, alone, to completion. */
static void
run_rank(it_ctx *c, const char *const *env)
{
    it_run r;
    it_run_prog(c, &r, c->out, IT_ARGV(P_JOB), env);
    cr_assert(r.exited && r.code == 0, "rank exit %d\n%s%s", r.code, r.out, r.err);
    it_run_free(&r);
}

/* The run directories under out/, sorted; asserts there are `want`. */
static char **
run_dirs(it_ctx *c, size_t want)
{
    char **names;
    size_t n = it_list_subdirs(c->out, &names);
    cr_assert_eq(n, want, "%zu run directories under %s, want %zu (first %s)", n, c->out, want,
                 n ? names[0] : "-");
    return names;
}

/* Number of trace files in out/<dir>. */
static size_t
traces_in(it_ctx *c, const char *dir)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", c->out, dir);
    char **paths;
    size_t n = it_find_traces(p, &paths);
    it_free_paths(paths, n);
    return n;
}

typedef struct an_res {
    int rc;
    char *out, *err;
} an_res;

/* recomp-analyze ARGS... (paths relative to out/), stdout and stderr kept. */
static void
analyze(it_ctx *c, an_res *a, const char *const *args)
{
    char op[400], ep[400];
    snprintf(op, sizeof op, "%s/analyze%d.out", c->io, c->nruns);
    snprintf(ep, sizeof ep, "%s/analyze%d.err", c->io, c->nruns++);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        const char *argv[16] = {RS_ANALYZE_PATH};
        size_t k = 1;
        for (size_t i = 0; args[i] && k < 15; i++)
            argv[k++] = args[i];
        argv[k] = NULL;
        int o = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || chdir(c->out) != 0)
            _exit(126);
        dup2(o, 1);
        dup2(e, 2);
        char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
        execve(RS_ANALYZE_PATH, (char *const *)argv, envp);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    a->rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    a->out = it_slurp(op);
    a->err = it_slurp(ep);
    cr_assert(a->out && a->err);
}

static void
an_free(an_res *a)
{
    free(a->out);
    free(a->err);
}

/* recomp-analyze on `args` gives one job of `nranks` ranks whose job line
 * contains `job`. */
static void
expect_one_job(it_ctx *c, const char *const *args, size_t nranks, const char *job)
{
    an_res a;
    analyze(c, &a, args);
    cr_assert_eq(a.rc, 0, "recomp-analyze exit %d\n%s", a.rc, a.err);
    char want[300];
    snprintf(want, sizeof want, "recomp-analyze: %zu rank(s), job %s", nranks, job);
    cr_expect(strstr(a.out, want) != NULL, "want \"%s\" in:\n%.600s", want, a.out);
    an_free(&a);
}

Test(jobid, torchrun_c10d_two_nodes)
{
    /* torchrun --rdzv-backend c10d --rdzv-id job42 on two nodes: one
     * launcher per node, so no RECOMPSHIM_RUN_ID in common */
    it_ctx c;
    it_init(&c);
    /* ranks of one job are alive together (real launchers start them so) */
    run_together(&c, IT_ENV("RANK=0", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=job42",
                        "TORCHELASTIC_RESTART_COUNT=1", "MASTER_ADDR=node0", "MASTER_PORT=29400",
                        "RECOMPSHIM_RUN_ID=20261201T100000Z-111"),
                 IT_ENV("RANK=1", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=job42",
                        "TORCHELASTIC_RESTART_COUNT=1", "MASTER_ADDR=node0", "MASTER_PORT=29400",
                        "RECOMPSHIM_RUN_ID=20261201T100001Z-222"));
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "job42-a1");
    cr_expect_eq(traces_in(&c, d[0]), 2);
    expect_one_job(&c, IT_ARGV("job42-a1"), 2, "torchelastic_run_id=job42 run_id=job42-a1 attempt=1");
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, torchrun_restart_is_a_new_attempt)
{
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=job7", "TORCHELASTIC_RESTART_COUNT=0"));
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=job7", "TORCHELASTIC_RESTART_COUNT=1"));
    char **d = run_dirs(&c, 2);
    cr_expect_str_eq(d[0], "job7-a0");
    cr_expect_str_eq(d[1], "job7-a1");
    an_res a;
    analyze(&c, &a, IT_ARGV("."));
    cr_expect_eq(a.rc, 2, "two attempts are never one job: exit %d\n%s", a.rc, a.out);
    cr_expect(strstr(a.err, "attempt=0") && strstr(a.err, "attempt=1"), "%s", a.err);
    an_free(&a);
    it_free_paths(d, 2);
    it_fini(&c);
}

Test(jobid, torchrun_static_one_node)
{
    /* static rendezvous: run id "none"; the node's launcher (one shim
     * process tree) hands its RECOMPSHIM_RUN_ID to every worker */
    it_ctx c;
    it_init(&c);
    for (int r = 0; r < 2; r++) {
        char rank[16];
        snprintf(rank, sizeof rank, "RANK=%d", r);
        run_rank(&c, IT_ENV(rank, "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                            "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
                            "RECOMPSHIM_RUN_ID=20261201T100000Z-4242"));
    }
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "20261201T100000Z-4242-a0");
    expect_one_job(&c, IT_ARGV(d[0]), 2, "torchelastic_run_id=none run_id=20261201T100000Z-4242-a0");
    it_free_paths(d, 1);
    it_fini(&c);
}

/* Starts one p_job rank per env list at the same time, writing into out_a
 * and out_b, lets them finish together: ranks of one job are alive
 * together. */
static void
run_together_in(it_ctx *c, const char *out_a, const char *const *env_a, const char *out_b,
                const char *const *env_b)
{
    char go[400];
    snprintf(go, sizeof go, "%s/go", c->io);
    it_run a, b;
    it_spawn(c, &a, out_a, IT_ARGV(P_JOB, go), env_a);
    it_spawn(c, &b, out_b, IT_ARGV(P_JOB, go), env_b);
    cr_assert(it_wait_output(&a, "READY\n") && it_wait_output(&b, "READY\n"));
    int fd = open(go, O_WRONLY | O_CREAT, 0600);
    cr_assert(fd >= 0);
    close(fd);
    it_wait(&a);
    it_wait(&b);
    cr_assert(a.exited && a.code == 0 && b.exited && b.code == 0, "%s%s", a.err, b.err);
    unlink(go);
    it_run_free(&a);
    it_run_free(&b);
}

static void
run_together(it_ctx *c, const char *const *env_a, const char *const *env_b)
{
    run_together_in(c, c->out, env_a, c->out, env_b);
}

/* A second node's own disk: base/node1 (mode 0700), returned in buf. */
static const char *
node1_out(it_ctx *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s/node1", c->base);
    cr_assert(mkdir(buf, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", buf, strerror(errno));
    return buf;
}

Test(jobid, torchrun_static_two_nodes_join)
{
    /* static rendezvous on two nodes: nothing job-unique is shared but
     * MASTER_ADDR:MASTER_PORT, which later jobs reuse: one directory per
     * node, joined when named together because they ran at the same time */
    it_ctx c;
    it_init(&c);
    run_together(&c,
                 IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
                        "RECOMPSHIM_RUN_ID=20261201T100000Z-100"),
                 IT_ENV("RANK=1", "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
                        "RECOMPSHIM_RUN_ID=20261201T100000Z-200"));
    char **d = run_dirs(&c, 2);
    cr_expect_str_eq(d[0], "20261201T100000Z-100-a0");
    cr_expect_str_eq(d[1], "20261201T100000Z-200-a0");
    expect_one_job(&c, IT_ARGV(d[0], d[1]), 2,
                   "master=10.0.0.1:29500 attempt=0 (2 run directories)");
    it_free_paths(d, 2);
    it_fini(&c);
}

Test(jobid, torchrun_static_two_jobs_never_join)
{
    /* the same MASTER_ADDR:MASTER_PORT and attempt, one job after the
     * other: refused, naming both traces */
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
                        "RECOMPSHIM_RUN_ID=20261201T100000Z-100"));
    usleep(50000);
    run_rank(&c, IT_ENV("RANK=1", "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                        "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
                        "RECOMPSHIM_RUN_ID=20261201T100001Z-300"));
    char **d = run_dirs(&c, 2);
    an_res a;
    analyze(&c, &a, IT_ARGV("."));
    cr_expect_eq(a.rc, 2, "exit %d\n%s", a.rc, a.out);
    cr_expect(strstr(a.err, "did not run at the same time") && strstr(a.err, d[0]) &&
                  strstr(a.err, d[1]),
              "%s", a.err);
    an_free(&a);
    it_free_paths(d, 2);
    it_fini(&c);
}

Test(jobid, two_runs_in_one_directory_never_join)
{
    /* hnew finding 1: the traces of two runs of one job id copied into one
     * folder (different launches, one after the other) were joined as one
     * job; the overlap check ran only across directories. One rule
     * wherever the files come from: refused, each file named with its run */
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("RANK=0", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=same",
                        "TORCHELASTIC_RESTART_COUNT=0", "RECOMPSHIM_RUN_ID=20261202T112000Z-1"));
    usleep(50000);
    run_rank(&c, IT_ENV("RANK=1", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=same",
                        "TORCHELASTIC_RESTART_COUNT=0", "RECOMPSHIM_RUN_ID=20261202T112024Z-2"));
    char **d = run_dirs(&c, 1); /* rank 1 was free in same-a0: one directory */
    cr_expect_eq(traces_in(&c, d[0]), 2);
    an_res a;
    analyze(&c, &a, IT_ARGV(d[0]));
    cr_expect_eq(a.rc, 2, "two runs in one directory were joined: exit %d\n%s", a.rc, a.out);
    cr_expect(strstr(a.err, "did not run at the same time (2 runs)") &&
                  strstr(a.err, "run 1: same-a0/rank0-") && strstr(a.err, "run 2: same-a0/rank1-"),
              "%s", a.err);
    cr_expect_str_eq(a.out, "");
    an_free(&a);
    /* one launch (one launcher's process tree) is one run even when its
     * short ranks did not overlap */
    it_ctx c2;
    it_init(&c2);
    run_rank(&c2, IT_ENV("RANK=0", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=same",
                         "TORCHELASTIC_RESTART_COUNT=0", "RECOMPSHIM_RUN_ID=20261202T112000Z-1"));
    usleep(50000);
    run_rank(&c2, IT_ENV("RANK=1", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=same",
                         "TORCHELASTIC_RESTART_COUNT=0", "RECOMPSHIM_RUN_ID=20261202T112000Z-1"));
    expect_one_job(&c2, IT_ARGV("same-a0"), 2, "torchelastic_run_id=same run_id=same-a0");
    it_free_paths(d, 1);
    it_fini(&c2);
    it_fini(&c);
}

Test(jobid, reused_id_gets_its_own_directory)
{
    /* a fixed --rdzv-id used by two jobs in turn: the second finds its
     * rank taken and writes into a directory of its own launch */
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=fixed", "TORCHELASTIC_RESTART_COUNT=0",
                        "RECOMPSHIM_RUN_ID=20261201T100000Z-1"));
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=fixed", "TORCHELASTIC_RESTART_COUNT=0",
                        "RECOMPSHIM_RUN_ID=20261201T110000Z-2"));
    char **d = run_dirs(&c, 2);
    cr_expect_str_eq(d[0], "fixed-20261201T110000Z-2-a0");
    cr_expect_str_eq(d[1], "fixed-a0");
    cr_expect_eq(traces_in(&c, d[0]), 1);
    cr_expect_eq(traces_in(&c, d[1]), 1);
    an_res a;
    analyze(&c, &a, IT_ARGV("."));
    cr_expect_eq(a.rc, 2, "two jobs of one id were joined: exit %d\n%s", a.rc, a.out);
    cr_expect(strstr(a.err, "did not run at the same time") != NULL, "%s", a.err);
    an_free(&a);
    it_free_paths(d, 2);
    it_fini(&c);
}

Test(jobid, srun_two_nodes)
{
    /* srun: every task is its own process tree; job and step id shared */
    it_ctx c;
    it_init(&c);
    /* ranks of one job are alive together (real launchers start them so) */
    run_together(&c, IT_ENV("SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=123456",
                        "SLURM_STEP_ID=0"),
                 IT_ENV("SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=123456",
                        "SLURM_STEP_ID=0"));
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "slurm123456.0");
    expect_one_job(&c, IT_ARGV(d[0]), 2, "slurm_job_id=123456 run_id=slurm123456.0");
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, srun_node_local_disks)
{
    /* RECOMPSHIM_OUT on each node's own disk: a run directory of one name on
     * each, named together, one job (they ran at the same time) */
    it_ctx c;
    it_init(&c);
    char n1[400], d0[600], d1[600];
    node1_out(&c, n1, sizeof n1);
    run_together_in(&c, c.out, IT_ENV("SLURM_PROCID=0", "SLURM_JOB_ID=5", "SLURM_STEP_ID=0"), n1,
                    IT_ENV("SLURM_PROCID=1", "SLURM_JOB_ID=5", "SLURM_STEP_ID=0"));
    snprintf(d0, sizeof d0, "%s/slurm5.0", c.out);
    snprintf(d1, sizeof d1, "%s/slurm5.0", n1);
    expect_one_job(&c, IT_ARGV(d0, d1), 2, "slurm_job_id=5 run_id=slurm5.0");
    it_fini(&c);
}

Test(jobid, reused_id_on_node_local_disks_never_joins)
{
    /* a fixed --rdzv-id, one job after the other on two nodes' own disks:
     * no directory shows the reuse; the times do */
    it_ctx c;
    it_init(&c);
    char n1[400], d0[600], d1[600];
    node1_out(&c, n1, sizeof n1);
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=fixed", "TORCHELASTIC_RESTART_COUNT=0"));
    usleep(50000);
    it_run r;
    it_run_prog(&c, &r, n1, IT_ARGV(P_JOB),
                IT_ENV("RANK=1", "TORCHELASTIC_RUN_ID=fixed", "TORCHELASTIC_RESTART_COUNT=0"));
    cr_assert(r.exited && r.code == 0, "%s", r.err);
    it_run_free(&r);
    snprintf(d0, sizeof d0, "%s/fixed-a0", c.out);
    snprintf(d1, sizeof d1, "%s/fixed-a0", n1);
    an_res a;
    analyze(&c, &a, IT_ARGV(d0, d1));
    cr_expect_eq(a.rc, 2, "two jobs of one id were joined: exit %d\n%s", a.rc, a.out);
    cr_expect(strstr(a.err, "did not run at the same time") != NULL, "%s", a.err);
    an_free(&a);
    it_fini(&c);
}

Test(jobid, srun_steps_and_requeue)
{
    /* a second srun in one allocation is a new step; a requeued job reuses
     * its id and step numbers: SLURM_RESTART_COUNT keeps them apart */
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("SLURM_PROCID=0", "SLURM_JOB_ID=5", "SLURM_STEP_ID=0"));
    run_rank(&c, IT_ENV("SLURM_PROCID=0", "SLURM_JOB_ID=5", "SLURM_STEP_ID=1"));
    run_rank(&c, IT_ENV("SLURM_PROCID=0", "SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_RESTART_COUNT=1"));
    char **d = run_dirs(&c, 3);
    cr_expect_str_eq(d[0], "slurm5.0");
    cr_expect_str_eq(d[1], "slurm5.0.requeue1");
    cr_expect_str_eq(d[2], "slurm5.1");
    it_free_paths(d, 3);
    it_fini(&c);
}

Test(jobid, srun_with_torchrun_inside)
{
    /* srun --ntasks-per-node=1 torchrun (static): each node's torchrun is a
     * task of one step; the workers' rank is torchrun's, the job SLURM's */
    it_ctx c;
    it_init(&c);
    /* ranks of one job are alive together (real launchers start them so) */
    run_together(&c, IT_ENV("SLURM_PROCID=0", "SLURM_JOB_ID=9", "SLURM_STEP_ID=3", "RANK=0", "WORLD_SIZE=4",
                        "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                        "MASTER_ADDR=n0", "MASTER_PORT=29500", "RECOMPSHIM_RUN_ID=20261201T1Z-10"),
                 IT_ENV("SLURM_PROCID=1", "SLURM_JOB_ID=9", "SLURM_STEP_ID=3", "RANK=2", "WORLD_SIZE=4",
                        "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                        "MASTER_ADDR=n0", "MASTER_PORT=29500", "RECOMPSHIM_RUN_ID=20261201T1Z-20"));
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "slurm9.3-a0");
    char p[600];
    snprintf(p, sizeof p, "%s/%s", c.out, d[0]);
    char **paths;
    size_t n = it_find_traces(p, &paths);
    cr_assert_eq(n, 2);
    cr_expect(strstr(paths[0], "/rank0-") && strstr(paths[1], "/rank2-"), "%s %s", paths[0], paths[1]);
    it_free_paths(paths, n);
    an_res a;
    analyze(&c, &a, IT_ARGV(d[0]));
    cr_expect_eq(a.rc, 0, "%s", a.err);
    cr_expect(strstr(a.out, "recomp-analyze: 2 rank(s), job torchelastic_run_id=none run_id=slurm9.3-a0 attempt=0"),
              "%.400s", a.out);
    an_free(&a);
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, sbatch_batch_step_keeps_the_launch)
{
    /* a launcher run straight from the batch script (no srun): the batch
     * step has no step id and can run several jobs in turn, so the run is
     * the process tree's, prefixed by the job id */
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("SLURM_JOB_ID=77", "SLURM_PROCID=0", "RECOMPSHIM_RUN_ID=20261201T1Z-1"));
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "slurm77-20261201T1Z-1");
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, openmpi_by_environment)
{
    it_ctx c;
    it_init(&c);
    /* ranks of one job are alive together (real launchers start them so) */
    run_together(&c, IT_ENV("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
                            "OMPI_MCA_ess_base_jobid=936706049", "PMIX_NAMESPACE=936706049"),
                 IT_ENV("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                        "OMPI_MCA_ess_base_jobid=936706049", "PMIX_NAMESPACE=936706049"));
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "ompi936706049");
    expect_one_job(&c, IT_ARGV(d[0]), 2, "run_id=ompi936706049");
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, pmix_namespace)
{
    /* Open MPI 5 / PRRTE and srun --mpi=pmix set PMIX_NAMESPACE */
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("PMIX_NAMESPACE=prterun-node1-4242@1", "PMIX_RANK=0"));
    run_rank(&c, IT_ENV("PMIX_NAMESPACE=prterun-node1-4242@1", "PMIX_RANK=1"));
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "pmix-prterun-node1-4242_1");
    cr_expect_eq(traces_in(&c, d[0]), 2);
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, hydra_forwards_the_launch)
{
    /* MPICH's Hydra sets no job id but forwards mpiexec's environment,
     * RECOMPSHIM_RUN_ID included */
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("PMI_RANK=0", "PMI_SIZE=2", "PMI_FD=6", "RECOMPSHIM_RUN_ID=20261201T1Z-77"));
    run_rank(&c, IT_ENV("PMI_RANK=1", "PMI_SIZE=2", "PMI_FD=8", "RECOMPSHIM_RUN_ID=20261201T1Z-77"));
    char **d = run_dirs(&c, 1);
    cr_expect_str_eq(d[0], "20261201T1Z-77");
    expect_one_job(&c, IT_ARGV(d[0]), 2, "run_id=20261201T1Z-77");
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, plain_program_keeps_its_own_run)
{
    it_ctx c;
    it_init(&c);
    it_run r;
    it_run_prog(&c, &r, c.out, IT_ARGV(P_JOB), NULL);
    cr_assert(r.exited && r.code == 0);
    char **d = run_dirs(&c, 1);
    char tail[32];
    snprintf(tail, sizeof tail, "Z-%d", (int)r.pid);
    size_t n = strlen(d[0]), t = strlen(tail);
    cr_expect(n == 15 + t && !strcmp(d[0] + n - t, tail), "start time and pid: %s", d[0]);
    it_run_free(&r);
    it_free_paths(d, 1);
    it_fini(&c);
}

Test(jobid, hostile_ids_stay_inside_the_output_directory)
{
    it_ctx c;
    it_init(&c);
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=.."));
    run_rank(&c, IT_ENV("RANK=0", "TORCHELASTIC_RUN_ID=../../x/y", "TORCHELASTIC_RESTART_COUNT=0"));
    char **d = run_dirs(&c, 2);
    cr_expect_str_eq(d[0], "_.");
    cr_expect_str_eq(d[1], "_._.._x_y-a0");
    it_free_paths(d, 2);
    it_fini(&c);
}

/* Debian's Open MPI, when installed (tools/bootstrap.sh installs it). */
static const char *
openmpi_mpirun(void)
{
    static const char *const cand[] = {"/usr/bin/mpirun.openmpi", "/usr/local/bin/mpirun.openmpi"};
    for (size_t i = 0; i < sizeof cand / sizeof *cand; i++)
        if (access(cand[i], X_OK) == 0)
            return cand[i];
    return NULL;
}

Test(jobid, real_mpirun_openmpi)
{
    const char *mpirun = openmpi_mpirun();
    if (!mpirun) {
        fprintf(stderr, "SKIP jobid/real_mpirun_openmpi: Open MPI's mpirun.openmpi not installed "
                        "(tools/bootstrap.sh installs openmpi-bin)\n");
        cr_skip_test("Open MPI's mpirun.openmpi is not installed");
    }
    /* LD_PRELOAD=shim mpirun -x LD_PRELOAD ...: mpirun forwards only what -x
     * names to remote nodes, so the ranks must agree on the MPI job id */
    it_ctx c;
    it_init(&c);
    it_run r;
    char out[400];
    snprintf(out, sizeof out, "RECOMPSHIM_OUT=%s", c.out);
    /* under the sanitizer tier: Open MPI's launcher (not our code, and its
     * plugins are unloaded before LeakSanitizer can name them) is not leak
     * checked; ASan and UBSan stay on */
    char asan[1200] = "RS_UNUSED=1";
    const char *ao = getenv("ASAN_OPTIONS");
    if (getenv("RS_SANITIZER_RUNTIME"))
        snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s:detect_leaks=0", ao ? ao : "");
    it_run_prog(&c, &r, c.out,
                IT_ARGV(mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "2", "-x",
                        "LD_PRELOAD", "-x", "RECOMPSHIM_OUT", P_JOB),
                IT_ENV("HOME=/tmp", "OMPI_MCA_plm_rsh_agent=false", "OMPI_MCA_btl=self", asan));
    cr_assert(r.exited && r.code == 0, "mpirun exit %d\n%s%s", r.code, r.out, r.err);
    char **d = run_dirs(&c, 1);
    cr_expect(!strncmp(d[0], "ompi", 4), "named by the MPI job id: %s", d[0]);
    cr_expect_eq(traces_in(&c, d[0]), 2);
    char job[200];
    snprintf(job, sizeof job, "run_id=%s", d[0]);
    expect_one_job(&c, IT_ARGV(d[0]), 2, job);
    it_run_free(&r);
    it_free_paths(d, 1);
    it_fini(&c);
}

/* hnew finding 2: a rank forks a child that touches CUDA (a data-loader or
 * multiprocessing worker) and leaves through _exit(0). The child's trace
 * (its header ppid is the rank's pid, with the rank's RANK) is set apart as
 * a child of rank 0, never "two traces of rank 0" (exit 2) nor an extra
 * "rank 1"; its unclosed end is stated as _exit-or-kill, not as a kill.
 * With RANK set and without (a plain program). */
Test(jobid, forked_child_is_set_apart_not_a_rank)
{
    for (int ranked = 0; ranked < 2; ranked++) {
        it_ctx c;
        it_init(&c);
        it_run r;
        it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_fork"), "_exit"),
                    ranked ? IT_ENV("RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0",
                                    "TORCHELASTIC_RUN_ID=fk", "TORCHELASTIC_RESTART_COUNT=0")
                           : IT_ENV("RECOMPSHIM_RUN_ID=20261202T1Z-9"));
        cr_assert(r.exited && r.code == 0, "%s%s", r.out, r.err);
        it_run_free(&r);
        char **d = run_dirs(&c, 1);
        cr_expect_eq(traces_in(&c, d[0]), 2, "the rank's trace and the child's");
        an_res a;
        analyze(&c, &a, IT_ARGV(d[0]));
        cr_expect_eq(a.rc, 0, "ranked=%d: exit %d\n%s", ranked, a.rc, a.err);
        cr_expect(strstr(a.out, "recomp-analyze: 1 rank(s)"), "ranked=%d: %.300s", ranked,
                  a.out);
        cr_expect(strstr(a.err, "forked by pid") && strstr(a.err, "not a rank of the job") &&
                      strstr(a.err, "_exit"),
                  "ranked=%d: %s", ranked, a.err);
        cr_expect(!ranked || strstr(a.err, ", rank 0): a child"), "%s", a.err);
        cr_expect(!strstr(a.out, "rank 1"), "ranked=%d: %s", ranked, a.out);
        an_free(&a);
        it_free_paths(d, 1);
        it_fini(&c);
    }
}

/* Issue 14 (a, b): a forked child that leaves through _exit(3) or _Exit(5)
 * seals its trace with that status (trace format 1.6); one killed by
 * SIGKILL does not. recomp-dump's header, the child's own analysis (text
 * and JSON) and the note that sets it apart from the rank tell the two
 * apart. Each trace summarized on its own and the summaries merged set the
 * child apart exactly as the analysis of the directory does (summary
 * format 6.1 carries the ppid; 6.0 did not, and merge counted the child as
 * a second trace of rank 0). */
Test(jobid, forked_child_exit_status_told_from_a_kill)
{
    static const struct {
        const char *mode, *note, *text, *json, *dump;
    } k[] = {
        {"_exit3", "; it exited with status 3 via _exit", "exited with status 3 via _exit",
         "\"closed\":true,\"exit\":{\"via\":\"_exit\",\"status\":3}", "exit=_exit exit_status=3"},
        {"_Exit5", "; it exited with status 5 via _Exit", "exited with status 5 via _Exit",
         "\"closed\":true,\"exit\":{\"via\":\"_Exit\",\"status\":5}", "exit=_Exit exit_status=5"},
        {"kill", "; its trace is not closed: it was killed (or is still running)",
         "NOT CLOSED: killed (or still running): an _exit or _Exit would have closed",
         "\"closed\":false,\"coverage\"", NULL},
    };
    for (size_t t = 0; t < sizeof k / sizeof k[0]; t++) {
        it_ctx c;
        it_init(&c);
        it_run r;
        it_run_prog(&c, &r, c.out, IT_ARGV(IT_PROG("p_fork"), k[t].mode),
                    IT_ENV("RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=fx",
                           "TORCHELASTIC_RESTART_COUNT=0"));
        cr_assert(r.exited && r.code == 0, "%s: %s%s", k[t].mode, r.out, r.err);
        char ptail[64];
        snprintf(ptail, sizeof ptail, "-%d.rstrace", (int)r.pid);
        it_run_free(&r);
        char **d = run_dirs(&c, 1), dir[600], prel[800] = "", crel[800] = "";
        snprintf(dir, sizeof dir, "%s/%s", c.out, d[0]);
        char **paths;
        size_t n = it_find_traces(dir, &paths);
        cr_assert_eq(n, 2, "%s: the rank's trace and the child's", k[t].mode);
        for (size_t i = 0; i < n; i++) {
            const char *base = strrchr(paths[i], '/') + 1;
            int parent = strstr(paths[i], ptail) != NULL;
            snprintf(parent ? prel : crel, sizeof prel, "%s/%s", d[0], base);
            it_dump du;
            it_dump_trace(&du, paths[i]);
            cr_assert_eq(du.rc, 0, "%s: %s", paths[i], du.err);
            const char *h = it_line(&du, "header host=");
            cr_assert(h != NULL);
            int sealed = parent || k[t].dump;
            cr_expect(strstr(h, sealed ? "closed=yes" : "closed=no") != NULL, "%s: %s",
                      k[t].mode, h);
            if (!parent && k[t].dump)
                cr_expect(strstr(h, k[t].dump) != NULL, "%s: %s", k[t].mode, h);
            else
                cr_expect(strstr(h, "exit=") == NULL, "%s: %s", k[t].mode, h);
            it_dump_free(&du);
        }
        it_free_paths(paths, n);
        cr_assert(prel[0] && crel[0], "%s: the parent's and the child's trace", k[t].mode);

        an_res a;
        analyze(&c, &a, IT_ARGV(d[0]));
        cr_expect_eq(a.rc, 0, "%s: exit %d\n%s", k[t].mode, a.rc, a.err);
        cr_expect(strstr(a.out, "recomp-analyze: 1 rank(s)"), "%s: %.300s", k[t].mode, a.out);
        cr_expect(strstr(a.err, "forked by pid") && strstr(a.err, k[t].note), "%s: %s",
                  k[t].mode, a.err);
        an_free(&a);

        analyze(&c, &a, IT_ARGV(crel));
        cr_expect_eq(a.rc, 0, "%s: exit %d\n%s", k[t].mode, a.rc, a.err);
        cr_expect(strstr(a.out, k[t].text), "%s: want \"%s\" in\n%.800s", k[t].mode, k[t].text,
                  a.out);
        an_free(&a);
        analyze(&c, &a, IT_ARGV("--json", crel));
        cr_expect_eq(a.rc, 0, "%s: exit %d\n%s", k[t].mode, a.rc, a.err);
        cr_expect(strstr(a.out, k[t].json), "%s: want %s in\n%.800s", k[t].mode, k[t].json,
                  a.out);
        cr_expect(k[t].dump || !strstr(a.out, "\"exit\""), "%s: %.800s", k[t].mode, a.out);
        an_free(&a);

        analyze(&c, &a, IT_ARGV("summarize", prel, "--out", "rank.rssum"));
        cr_assert_eq(a.rc, 0, "%s: summarize exit %d\n%s", k[t].mode, a.rc, a.err);
        an_free(&a);
        analyze(&c, &a, IT_ARGV("summarize", crel, "--out", "child.rssum"));
        cr_assert_eq(a.rc, 0, "%s: summarize exit %d\n%s", k[t].mode, a.rc, a.err);
        an_free(&a);
        analyze(&c, &a, IT_ARGV("merge", "rank.rssum", "child.rssum"));
        cr_expect_eq(a.rc, 0, "%s: merge exit %d\n%s", k[t].mode, a.rc, a.err);
        cr_expect(strstr(a.out, "recomp-analyze: 1 rank(s)"), "%s: %.300s", k[t].mode, a.out);
        cr_expect(strstr(a.err, "forked by pid") && strstr(a.err, k[t].note), "%s: %s",
                  k[t].mode, a.err);
        an_free(&a);
        it_free_paths(d, 1);
        it_fini(&c);
    }
}
