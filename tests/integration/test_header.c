/* test_header: rank and job detection, header lines, file names. */
#include <criterion/criterion.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "recomp/trace_format.h"

#ifndef RS_VERSION
#error "RS_VERSION must be defined by meson"
#endif

typedef struct hdr_case {
    const char *const *env;
    const char *rank_line;     /* expected "header rank=..." line */
    const char *job_prefix;    /* expected "header job ..." up to run_id= */
    const char *file_prefix;   /* trace file name starts with this */
} hdr_case;

static void
run_case(const hdr_case *hc)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_minimal")), hc->env);
    const char *l = it_line(&d, "header rank=");
    cr_assert(l != NULL, "%s", d.text);
    cr_expect_str_eq(l, hc->rank_line);
    l = it_line(&d, "header job ");
    cr_assert(l != NULL);
    cr_expect(!strncmp(l, hc->job_prefix, strlen(hc->job_prefix)), "\n  expected: %s...\n  got:      %s",
              hc->job_prefix, l);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 1);
    char *base = basename(paths[0]);
    char host[64] = "";
    gethostname(host, sizeof host);
    char want[256];
    snprintf(want, sizeof want, "%s%s-%d.rstrace", hc->file_prefix, host, (int)r.pid);
    cr_expect_str_eq(base, want);
    /* run_id is the run directory's name */
    char rid[128];
    cr_assert(it_field(l, "run_id", rid, sizeof rid));
    char dir[512];
    snprintf(dir, sizeof dir, "%s", paths[0]);
    cr_expect_str_eq(basename(dirname(dir)), rid);
    it_free_paths(paths, n);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(header, default_lines)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_basic")), NULL);
    char host[64] = "", want[512];
    gethostname(host, sizeof host);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 1);
    snprintf(want, sizeof want, "recompshim trace v%d.%d %s", RS_TRACE_VERSION_MAJOR, RS_TRACE_VERSION_MINOR,
             paths[0]);
    cr_expect_str_eq(d.lines[0], want);
    snprintf(want, sizeof want, "header host=%s pid=%d ppid=%d closed=yes", host, (int)r.pid, (int)getpid());
    cr_expect_str_eq(d.lines[1], want);
    cr_expect_str_eq(d.lines[2], "header rank=-1 local_rank=-1 world_size=-1 local_world_size=-1 rank_source=none");
    char dir[512];
    snprintf(dir, sizeof dir, "%s", paths[0]);
    snprintf(want, sizeof want,
             "header job torchelastic_run_id=- restart_count=-1 slurm_job_id=- master=- run_id=%s",
             basename(dirname(dir)));
    cr_expect_str_eq(d.lines[3], want);
    /* device checked in header.first_device */
    const char *l = d.lines[4];
    const char *cap = strstr(l, " capacity=");
    cr_assert(cap != NULL, "%s", l);
    cr_expect_str_eq(cap, " capacity=85899345920 mode=default runtime_version=13000 shim_version=" RS_VERSION
                          " nvtx_foreign=no");
    cr_expect_str_eq(d.lines[5], "header max_bytes=0 limit_hit=no dropped=0 reserved_chunks=0 window=none chunks=1");
    it_free_paths(paths, n);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(header, first_device)
{
    /* header device = the first device a record named (trace_format.h):
     * p_basic's first records are on device 0 (it switches to 1 later). */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_basic")), NULL);
    const char *l = it_line(&d, "header device=");
    cr_assert(l != NULL);
    char dev[16];
    cr_assert(it_field(l, "device", dev, sizeof dev));
    cr_expect_str_eq(dev, "0", "%s", l);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(header, torchrun)
{
    hdr_case hc = {
        IT_ENV("RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4", "TORCHELASTIC_RUN_ID=job42",
               "TORCHELASTIC_RESTART_COUNT=2", "MASTER_ADDR=10.1.2.3", "MASTER_PORT=29500"),
        "header rank=3 local_rank=1 world_size=8 local_world_size=4 rank_source=torchrun",
        "header job torchelastic_run_id=job42 restart_count=2 slurm_job_id=- master=10.1.2.3:29500 run_id=job42-",
        "rank3-",
    };
    run_case(&hc);
}

Test(header, torchrun_wins_over_slurm)
{
    hdr_case hc = {
        IT_ENV("RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", "SLURM_PROCID=9", "SLURM_LOCALID=1",
               "SLURM_NTASKS=16", "SLURM_JOB_ID=777"),
        "header rank=0 local_rank=0 world_size=2 local_world_size=2 rank_source=torchrun",
        "header job torchelastic_run_id=- restart_count=-1 slurm_job_id=777 master=- run_id=slurm777-",
        "rank0-",
    };
    run_case(&hc);
}

Test(header, ompi)
{
    hdr_case hc = {
        IT_ENV("OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_SIZE=16",
               "OMPI_COMM_WORLD_LOCAL_SIZE=4"),
        "header rank=5 local_rank=1 world_size=16 local_world_size=4 rank_source=ompi",
        "header job torchelastic_run_id=- restart_count=-1 slurm_job_id=- master=- run_id=",
        "rank5-",
    };
    run_case(&hc);
}

Test(header, slurm)
{
    hdr_case hc = {
        IT_ENV("SLURM_PROCID=7", "SLURM_LOCALID=3", "SLURM_NTASKS=32", "SLURM_NTASKS_PER_NODE=4",
               "SLURM_JOB_ID=123456"),
        "header rank=7 local_rank=3 world_size=32 local_world_size=4 rank_source=slurm",
        "header job torchelastic_run_id=- restart_count=-1 slurm_job_id=123456 master=- run_id=slurm123456-",
        "rank7-",
    };
    run_case(&hc);
}

Test(header, pmi)
{
    hdr_case hc = {
        IT_ENV("PMI_RANK=2", "PMI_SIZE=4"),
        "header rank=2 local_rank=-1 world_size=4 local_world_size=-1 rank_source=pmi",
        "header job torchelastic_run_id=- restart_count=-1 slurm_job_id=- master=- run_id=",
        "rank2-",
    };
    run_case(&hc);
}

Test(header, foreign_nvtx_owner)
{
    /* Another tool owns NVTX: recorded (header flag + META), tracing goes on. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_minimal")),
                  IT_ENV("NVTX_INJECTION64_PATH=/opt/other-tool/libinject.so"));
    const char *l = it_line(&d, "header device=");
    cr_assert(l != NULL);
    cr_expect(strstr(l, " nvtx_foreign=yes") != NULL, "%s", l);
    cr_expect_eq(it_count_rec(&d, "META key=nvtx_owner value=\"/opt/other-tool/libinject.so\""), 1);
    cr_expect_eq(it_count_sub(&d, "ALLOC "), 1);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}
