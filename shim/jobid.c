/* jobid.c: the run directory the shim names from the launcher's job
 * identity (jobid_rules.c, include/recomp/jobid.h). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "recomp/jobid.h"
#include "jobid.h"
#include "config.h"

/* ---- the shim's run directory ---- */

static const char *
real_getenv(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

/* Does `dir` hold a trace of `rank` left by another job? A trace of the
 * same rank from another host, or from a process of this host that is
 * gone, is another job's (the ranks of one job are distinct and alive
 * together); a live process of this host is this job's (a forked rank). */
static int
rank_taken(const char *dir, int rank, const char *host)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char pre[32];
    int np = snprintf(pre, sizeof pre, "rank%d-", rank);
    int taken = 0;
    struct dirent *e;
    while (!taken && (e = readdir(d))) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (strncmp(n, pre, (size_t)np) != 0 || len < 8 || strcmp(n + len - 8, ".rstrace") != 0)
            continue;
        const char *dash = NULL;
        for (const char *p = n + np; p < n + len - 8; p++)
            if (*p == '-')
                dash = p;
        if (!dash)
            continue;
        size_t hl = (size_t)(dash - (n + np));
        long pid = strtol(dash + 1, NULL, 10);
        if (hl != strlen(host) || strncmp(n + np, host, hl) != 0)
            taken = 1;
        else if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            taken = 1;
    }
    closedir(d);
    return taken;
}

void
rs_job_run_dir(char *dst, size_t cap, const char *launch, const char *out_dir, int rank,
               const char *host)
{
    rs_job_identity id;
    rs_job_identity_get(&id, real_getenv, NULL);
    char att[16] = "";
    if (id.attempt >= 0)
        snprintf(att, sizeof att, "-a%d", id.attempt);
    if (id.strength == RS_JOB_STRONG) {
        char path[4096];
        snprintf(dst, cap, "%s%s", id.stem, att);
        snprintf(path, sizeof path, "%s/%s", out_dir, dst);
        if (rank < 0 || !rank_taken(path, rank, host))
            return;
        /* the id was reused (a fixed --rdzv-id, a recycled MPI job id):
         * this launch's own directory, never another job's */
        snprintf(dst, cap, "%s-%s%s", id.stem, launch, att);
        return;
    }
    /* no identity shared beyond this process tree: today's name, the
     * launch (RECOMPSHIM_RUN_ID), prefixed by the batch job's id */
    const char *job = getenv("SLURM_JOB_ID");
    char pre[48] = "";
    if (job && *job) {
        char tmp[48];
        snprintf(tmp, sizeof tmp, "slurm%s", job);
        rs_sanitize_name(pre, sizeof pre - 1, tmp);
        strcat(pre, "-");
    }
    snprintf(dst, cap, "%s%s%s", pre, launch, att);
}
