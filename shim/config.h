/* config.h: RECOMPSHIM_* settings, read once (env.def). */
#ifndef RECOMPSHIM_CONFIG_H
#define RECOMPSHIM_CONFIG_H

#include <stdint.h>
#include <limits.h>

#include "record.h"

typedef struct rs_config {
    char out_dir[PATH_MAX];      /* RECOMPSHIM_OUT */
    size_t out_dir_len;          /* its full length: >= PATH_MAX is refused */
    int disable;                 /* RECOMPSHIM_DISABLE */
    uint64_t max_bytes;          /* RECOMPSHIM_MAX_BYTES, 0 = unlimited */
    uint32_t window_kind;        /* enum rs_window_kind */
    uint64_t window_a;           /* ns (time), index (events) or step */
    uint64_t window_b;
    char step_marker[64];        /* RECOMPSHIM_STEP_MARKER */
    uint64_t meminfo_interval_ns;/* RECOMPSHIM_MEMINFO_MS in ns, 0 = never sample */
    int log_level;               /* RECOMPSHIM_LOG */
    char run_id[96];             /* RECOMPSHIM_RUN_ID (inherited or generated) */
    char tensors[16];            /* RECOMPSHIM_TENSORS as given */
    char clock[16];              /* RECOMPSHIM_CLOCK: "" auto, "gettime" */
    int compact;                 /* RECOMPSHIM_COMPACT */
    int pystack;                 /* RECOMPSHIM_PYSTACK */
} rs_config;

extern rs_config g_rs_cfg RS_HIDDEN;

/* Read the environment into g_rs_cfg. Invalid values are reported on
 * stderr (one line each) and replaced by the default. Generates and
 * exports RECOMPSHIM_RUN_ID when unset so child processes share it. */
RS_HIDDEN void rs_config_load(void);

/* 1 in the one process of the job that reports bad settings: the first shim
 * of the process tree (it generates RECOMPSHIM_RUN_ID; children inherit it)
 * unless a launcher rank variable (SLURM_PROCID, RANK, OMPI_COMM_WORLD_RANK,
 * PMI_RANK, PMIX_RANK) names another rank than 0, as under srun, where the
 * ranks share no parent. Valid after rs_config_load(). */
RS_HIDDEN int rs_config_reports(void);

/* 1 when a launcher rank variable (as above) names a rank other than 0. */
RS_HIDDEN int rs_config_other_rank(void);

/* Parse a byte size with an optional K/M/G/T suffix (powers of 1024), by
 * the project's one size parser (recomp/bytesize.h: overflow, nan, inf,
 * signs and garbage refused). Returns 0 and sets *out on success, -1 on
 * malformed input. */
RS_HIDDEN int rs_parse_size(const char *s, uint64_t *out);

/* Parse RECOMPSHIM_WINDOW ("time:A-B" seconds, "events:A-B", "steps:A-B";
 * B may be empty for open-ended). Returns 0 on success, -1 on error. */
RS_HIDDEN int rs_parse_window(const char *s, uint32_t *kind, uint64_t *a, uint64_t *b);

/* rs_parse_window, and on error *why (when why is not NULL) says what is
 * wrong: a bound that overflows 64 bits (time: seconds x 1e9 ns), a
 * fraction of an event or step, a sign, B before A. Exact integer
 * arithmetic (recomp/bytesize.h), never a silent wrap to 0..0. */
RS_HIDDEN int rs_parse_window_why(const char *s, uint32_t *kind, uint64_t *a, uint64_t *b,
                                  const char **why);

/* Copy `src` to `dst` (size `cap`) keeping only [A-Za-z0-9._-]; other
 * bytes become '_', and so does a leading '.': the result is always one
 * path component that stays where it is put (never ".", "..", a hidden
 * name or a '/'). Used for every name derived from the environment. */
RS_HIDDEN void rs_sanitize_name(char *dst, size_t cap, const char *src);

#endif
