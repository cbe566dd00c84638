/* jobid.h: the run directory a rank writes into (jobid.c). */
#ifndef RECOMPSHIM_JOBID_H
#define RECOMPSHIM_JOBID_H

#include <stddef.h>

#include "record.h"

/* The run directory's name (not a path) into dst (size cap), from the
 * launcher's identity (recomp/jobid.h) and the attempt:
 *   strong identity  "<stem>[-a<attempt>]", shared by every rank of the job
 *                    on every node; "<stem>-<launch>[-a<attempt>]" when that
 *                    directory already holds this rank's trace from another
 *                    job (an id reused by a later job)
 *   otherwise        "[slurm<job>-]<launch>[-a<attempt>]" (the process tree's
 *                    own run, as before launcher identities)
 * launch: RECOMPSHIM_RUN_ID; out_dir: RECOMPSHIM_OUT; rank: -1 unknown;
 * host: the sanitised host name used in trace file names. Never fails;
 * names longer than cap are cut. */
RS_HIDDEN void rs_job_run_dir(char *dst, size_t cap, const char *launch, const char *out_dir,
                              int rank, const char *host);

#endif
