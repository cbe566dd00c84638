/* test_jobid: the launcher rules of recomp/jobid.h (shim/jobid_rules.c),
 * one row per launcher, and properties over every row. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <string.h>

#include "recomp/jobid.h"

typedef struct row {
    const char *what;
    const char *env[12]; /* "NAME=value", NULL-terminated */
    int strength;
    const char *stem;    /* strong only */
    const char *key;
} row;

static const row k_rows[] = {
    {"plain program", {NULL}, RS_JOB_NONE, "", ""},
    {"torchrun c10d", {"TORCHELASTIC_RUN_ID=job42", "TORCHELASTIC_RESTART_COUNT=2", "MASTER_ADDR=h",
                       "MASTER_PORT=1", NULL},
     RS_JOB_STRONG, "job42", "torchelastic=job42 attempt=2"},
    {"torchrun static", {"TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
                         "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", NULL},
     RS_JOB_WEAK, "", "master=10.0.0.1:29500 attempt=0"},
    {"srun", {"SLURM_JOB_ID=123", "SLURM_STEP_ID=0", "SLURM_PROCID=4", NULL}, RS_JOB_STRONG,
     "slurm123.0", "slurm=123.0"},
    {"srun requeued", {"SLURM_JOB_ID=123", "SLURM_STEP_ID=0", "SLURM_RESTART_COUNT=2", NULL},
     RS_JOB_STRONG, "slurm123.0.requeue2", "slurm=123.0.requeue2"},
    {"srun + torchrun static", {"SLURM_JOB_ID=9", "SLURM_STEP_ID=3", "TORCHELASTIC_RUN_ID=none",
                                "TORCHELASTIC_RESTART_COUNT=1", "MASTER_ADDR=n0", "MASTER_PORT=2",
                                NULL},
     RS_JOB_STRONG, "slurm9.3", "slurm=9.3 attempt=1"},
    {"srun + torchrun c10d", {"SLURM_JOB_ID=9", "SLURM_STEP_ID=3", "TORCHELASTIC_RUN_ID=9",
                              "TORCHELASTIC_RESTART_COUNT=0", NULL},
     RS_JOB_STRONG, "9", "torchelastic=9 attempt=0"},
    {"sbatch batch step", {"SLURM_JOB_ID=77", NULL}, RS_JOB_NONE, "", ""},
    {"Open MPI 4", {"OMPI_COMM_WORLD_RANK=1", "OMPI_MCA_ess_base_jobid=936706049",
                    "PMIX_NAMESPACE=936706049", NULL},
     RS_JOB_STRONG, "ompi936706049", "openmpi=936706049"},
    {"PMIx", {"PMIX_NAMESPACE=prterun-n1-42@1", "PMIX_RANK=0", NULL}, RS_JOB_STRONG,
     "pmix-prterun-n1-42_1", "pmix=prterun-n1-42@1"},
    {"Hydra", {"PMI_RANK=0", "PMI_SIZE=2", "PMI_FD=6", NULL}, RS_JOB_NONE, "", ""},
    {"hostile id", {"TORCHELASTIC_RUN_ID=../a b", NULL}, RS_JOB_STRONG, "_._a_b",
     "torchelastic=../a b"},
    {"empty values", {"TORCHELASTIC_RUN_ID=", "SLURM_JOB_ID=", "SLURM_STEP_ID=", NULL}, RS_JOB_NONE,
     "", ""},
};

static const char *
row_get(void *ctx, const char *name)
{
    const row *r = ctx;
    size_t n = strlen(name);
    for (size_t i = 0; r->env[i]; i++)
        if (!strncmp(r->env[i], name, n) && r->env[i][n] == '=')
            return r->env[i] + n + 1;
    return NULL;
}

Test(jobid, each_launcher)
{
    for (size_t i = 0; i < sizeof k_rows / sizeof *k_rows; i++) {
        const row *r = &k_rows[i];
        rs_job_identity id;
        char key[256];
        rs_job_identity_get(&id, row_get, (void *)r);
        rs_job_identity_key(&id, key, sizeof key);
        cr_expect_eq(id.strength, r->strength, "%s: strength %d", r->what, id.strength);
        cr_expect_str_eq(id.stem, r->stem, "%s", r->what);
        cr_expect_str_eq(key, r->key, "%s", r->what);
    }
}

Test(jobid, properties_over_every_row)
{
    for (size_t i = 0; i < sizeof k_rows / sizeof *k_rows; i++) {
        const row *r = &k_rows[i];
        rs_job_identity id;
        rs_job_identity_get(&id, row_get, (void *)r);
        /* a directory stem exactly when the identity names one job */
        cr_expect_eq(id.stem[0] != 0, id.strength == RS_JOB_STRONG, "%s", r->what);
        /* one path component inside RECOMPSHIM_OUT, never hidden, . or .. */
        cr_expect(id.stem[0] != '.', "%s: %s", r->what, id.stem);
        for (const char *p = id.stem; *p; p++)
            cr_expect(isalnum((unsigned char)*p) || strchr("._-", *p), "%s: %s", r->what, id.stem);
        /* every variable the rule read is one the shim records */
        for (size_t k = 0; r->env[k]; k++) {
            const char *kv = r->env[k];
            rs_job_identity without;
            row r2 = *r;
            for (size_t m = k; r->env[m]; m++)
                r2.env[m] = r->env[m + 1];
            rs_job_identity_get(&without, row_get, &r2);
            char a[256], b[256];
            rs_job_identity_key(&id, a, sizeof a);
            rs_job_identity_key(&without, b, sizeof b);
            if (strcmp(a, b) != 0)
                cr_expect(rs_job_env_entry(kv), "%s: %s changes the identity but is not recorded",
                          r->what, kv);
        }
    }
}
