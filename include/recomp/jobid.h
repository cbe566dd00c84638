/* jobid.h: the identity a launcher gives every rank of one job.
 *
 * One rule set, two users: the shim names the run directory from it
 * (shim/jobid.c, called from rs_trace_names()), and recomp-analyze joins
 * traces of one job from it, reading the same variables back from the
 * trace's recorded environment. The rules and each launcher's variables are
 * listed in README.md ("Launchers and job identity"). */
#ifndef RECOMP_JOBID_H
#define RECOMP_JOBID_H

#include <stddef.h>

/* How far an identity can be trusted to name one job. */
enum rs_job_strength {
    RS_JOB_NONE = 0,   /* no launcher identity: the run is the process tree's own */
    RS_JOB_WEAK = 1,   /* shared by the ranks but reused by later jobs
                        * (MASTER_ADDR:MASTER_PORT): never a directory name */
    RS_JOB_STRONG = 2, /* names one launch of one job (per attempt) */
};

typedef struct rs_job_identity {
    int strength;         /* enum rs_job_strength */
    const char *launcher; /* "torchelastic", "slurm", "openmpi", "pmix", "master"; "" none */
    char value[96];       /* the launcher's id as given ("123.0" for SLURM job.step) */
    char stem[112];       /* run-directory stem (strong only), [A-Za-z0-9._-]:
                           * "<run id>", "slurm<job>.<step>", "ompi<jobid>", "pmix-<ns>" */
    int attempt;          /* TORCHELASTIC_RESTART_COUNT, -1 when unset */
} rs_job_identity;

/* Environment lookup: the value of `name` or NULL. */
typedef const char *(*rs_job_getenv)(void *ctx, const char *name);

/* Derive the job identity from the launcher's variables, in this order:
 * TORCHELASTIC_RUN_ID (unless empty or torchrun's static placeholder
 * "none"), SLURM_JOB_ID with SLURM_STEP_ID (an srun step; plus
 * SLURM_RESTART_COUNT after a requeue), OMPI_MCA_ess_base_jobid (Open MPI's
 * mpirun), PMIX_NAMESPACE (PMIx launchers), then MASTER_ADDR:MASTER_PORT
 * (weak). Pure: reads only through `get`. Never fails; strength NONE when
 * nothing applies. */
void rs_job_identity_get(rs_job_identity *id, rs_job_getenv get, void *ctx);

/* The join key of an identity: "<launcher>=<value>[ attempt=N]" in buf
 * (size n); "" for strength NONE. */
void rs_job_identity_key(const rs_job_identity *id, char *buf, size_t n);

/* Names of every variable the rules read (NULL-terminated): the shim
 * records them in the trace so the analyzer can apply the same rules. */
extern const char *const rs_job_env_names[];

/* 1 when the environment entry "NAME=value" is one of rs_job_env_names. */
int rs_job_env_entry(const char *kv);

#endif
