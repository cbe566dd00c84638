/* jobid_rules.c: the launcher's job identity (include/recomp/jobid.h),
 * pure, compiled into both the shim and recomp-analyze.
 *
 * Why not a per-process start time: under srun, a multi-node torchrun or
 * mpirun no common parent hands RECOMPSHIM_RUN_ID to every rank, so the
 * ranks of one job must agree on a name from what their launcher shares.
 * Sources of the variables: torchrun sets TORCHELASTIC_RUN_ID (its
 * --rdzv-id, "none" by default and for the static rendezvous) and
 * TORCHELASTIC_RESTART_COUNT in each worker; srun sets SLURM_JOB_ID and
 * SLURM_STEP_ID in each task (the batch step of sbatch sets no step id);
 * SLURM_RESTART_COUNT counts requeues; Open MPI 4's mpirun sets
 * OMPI_MCA_ess_base_jobid and PMIX_NAMESPACE in each rank (seen with
 * Debian's openmpi-bin 4.1.4); MPICH's Hydra sets no job id (PMI_RANK,
 * PMI_SIZE, PMI_FD only) but forwards mpiexec's whole environment, so the
 * RECOMPSHIM_RUN_ID made by a shim in mpiexec reaches every rank. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recomp/jobid.h"

const char *const rs_job_env_names[] = {
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_STEP_ID",
    "SLURM_RESTART_COUNT", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "MASTER_ADDR",
    "MASTER_PORT", NULL,
};

int
rs_job_env_entry(const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq)
        return 0;
    size_t n = (size_t)(eq - kv);
    for (size_t i = 0; rs_job_env_names[i]; i++)
        if (strlen(rs_job_env_names[i]) == n && !strncmp(kv, rs_job_env_names[i], n))
            return 1;
    return 0;
}

/* [A-Za-z0-9._-] only, not starting with '.': the stem becomes a
 * directory name inside RECOMPSHIM_OUT. */
static void
clean(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = (isalnum(c) || c == '.' || c == '_' || c == '-') ? (char)c : '_';
    }
    dst[i] = '\0';
    if (dst[0] == '.') /* never ".", ".." or a hidden name */
        dst[0] = '_';
}

static const char *
nonempty(rs_job_getenv get, void *ctx, const char *name)
{
    const char *v = get(ctx, name);
    return v && *v ? v : NULL;
}

static int
count(rs_job_getenv get, void *ctx, const char *name)
{
    const char *v = nonempty(get, ctx, name);
    if (!v)
        return -1;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    return (*end == '\0' && x >= 0 && x <= 0x7fffffff) ? (int)x : -1;
}

static void
strong(rs_job_identity *id, const char *launcher, const char *value, const char *prefix)
{
    char tmp[160];
    id->strength = RS_JOB_STRONG;
    id->launcher = launcher;
    snprintf(id->value, sizeof id->value, "%s", value);
    snprintf(tmp, sizeof tmp, "%s%s", prefix, value);
    clean(id->stem, sizeof id->stem, tmp);
}

void
rs_job_identity_get(rs_job_identity *id, rs_job_getenv get, void *ctx)
{
    memset(id, 0, sizeof *id);
    id->launcher = "";
    id->attempt = count(get, ctx, "TORCHELASTIC_RESTART_COUNT");
    const char *te = nonempty(get, ctx, "TORCHELASTIC_RUN_ID");
    const char *job = nonempty(get, ctx, "SLURM_JOB_ID");
    const char *step = nonempty(get, ctx, "SLURM_STEP_ID");
    const char *ompi = nonempty(get, ctx, "OMPI_MCA_ess_base_jobid");
    const char *pmix = nonempty(get, ctx, "PMIX_NAMESPACE");
    const char *ma = nonempty(get, ctx, "MASTER_ADDR"), *mp = nonempty(get, ctx, "MASTER_PORT");
    if (te && strcmp(te, "none") != 0) {
        strong(id, "torchelastic", te, "");
    } else if (job && step) {
        char v[96];
        int requeue = count(get, ctx, "SLURM_RESTART_COUNT");
        if (requeue > 0)
            snprintf(v, sizeof v, "%s.%s.requeue%d", job, step, requeue);
        else
            snprintf(v, sizeof v, "%s.%s", job, step);
        strong(id, "slurm", v, "slurm");
    } else if (ompi) {
        strong(id, "openmpi", ompi, "ompi");
    } else if (pmix) {
        strong(id, "pmix", pmix, "pmix-");
    } else if (ma && mp) {
        id->strength = RS_JOB_WEAK;
        id->launcher = "master";
        snprintf(id->value, sizeof id->value, "%s:%s", ma, mp);
    }
}

void
rs_job_identity_key(const rs_job_identity *id, char *buf, size_t n)
{
    if (!n)
        return;
    buf[0] = '\0';
    if (id->strength == RS_JOB_NONE)
        return;
    if (id->attempt >= 0)
        snprintf(buf, n, "%s=%s attempt=%d", id->launcher, id->value, id->attempt);
    else
        snprintf(buf, n, "%s=%s", id->launcher, id->value);
}

