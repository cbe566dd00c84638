/* config.c: read RECOMPSHIM_* settings once, from the list in env.def. */
#include "config.h"

#include "recomp/bytesize.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

rs_config g_rs_cfg;

int
rs_parse_size(const char *s, uint64_t *out)
{
    return rs_bytes_parse(s, out) ? -1 : 0;
}

/* One bound of RECOMPSHIM_WINDOW: seconds (fraction allowed, into ns) for
 * time, a whole number otherwise; *end after it. NULL or why not. */
static const char *
window_bound(const char *p, uint32_t kind, const char **end, uint64_t *out)
{
    int time = kind == RS_WINDOW_TIME;
    return rs_decimal_scaled(p, time ? 1000000000ull : 1, time, end, out);
}

int
rs_parse_window_why(const char *s, uint32_t *kind, uint64_t *a, uint64_t *b, const char **why)
{
    const char *colon = strchr(s, ':'), *dummy;
    if (!why)
        why = &dummy;
    *why = "not KIND:A-B with KIND time, events or steps";
    if (!colon)
        return -1;
    size_t klen = (size_t)(colon - s);
    uint32_t k;
    if (klen == 4 && !strncmp(s, "time", 4))
        k = RS_WINDOW_TIME;
    else if (klen == 6 && !strncmp(s, "events", 6))
        k = RS_WINDOW_EVENTS;
    else if (klen == 5 && !strncmp(s, "steps", 5))
        k = RS_WINDOW_STEPS;
    else
        return -1;
    const char *p = colon + 1, *end = p;
    uint64_t va, vb = UINT64_MAX;
    if ((*why = window_bound(p, k, &end, &va)) != NULL)
        return -1;
    *why = "A is not followed by '-'";
    if (*end != '-')
        return -1;
    p = end + 1;
    if (*p) {
        if ((*why = window_bound(p, k, &end, &vb)) != NULL)
            return -1;
        *why = "trailing text after B";
        if (*end)
            return -1;
        *why = "B is before A";
        if (vb < va)
            return -1;
    }
    *why = NULL;
    *kind = k;
    *a = va;
    *b = vb;
    return 0;
}

int
rs_parse_window(const char *s, uint32_t *kind, uint64_t *a, uint64_t *b)
{
    return rs_parse_window_why(s, kind, a, b, NULL);
}

void
rs_sanitize_name(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    if (cap == 0)
        return;
    for (; src && src[i] && i + 1 < cap; i++) {
        unsigned char c = (unsigned char)src[i];
        int keep = isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0);
        dst[i] = keep ? (char)c : '_';
    }
    dst[i] = '\0';
}

/* Settings are inherited by every process of a job: only one process per job
 * complains (rs_config_reports). */
static int g_quiet;

/* A launcher's rank variable other than 0: another rank of a job whose ranks
 * may share no parent process (srun, mpirun). */
int
rs_config_other_rank(void)
{
    static const char *const vars[] = {"SLURM_PROCID", "RANK", "OMPI_COMM_WORLD_RANK",
                                       "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v && strtol(v, NULL, 10) != 0)
            return 1;
    }
    return 0;
}

int
rs_config_reports(void)
{
    return !g_quiet;
}

static void
bad_value_why(const char *name, const char *value, const char *dflt, const char *why)
{
    if (g_quiet)
        return;
    fprintf(stderr, "recompshim: %s=\"%s\" is not valid%s%s; using the default \"%s\"\n", name,
            value, why ? ": " : "", why ? why : "", dflt);
}

static void
bad_value(const char *name, const char *value, const char *dflt)
{
    bad_value_why(name, value, dflt, NULL);
}

static void
set_STR(const char *name, const char *v, const char *dflt)
{
    const char *val = v ? v : dflt;
    if (!strcmp(name, "RECOMPSHIM_OUT")) {
        /* A longer path is refused at file creation (one stderr line),
         * never cut to a different directory. */
        g_rs_cfg.out_dir_len = strlen(*val ? val : dflt);
        snprintf(g_rs_cfg.out_dir, sizeof g_rs_cfg.out_dir, "%s", *val ? val : dflt);
    } else if (!strcmp(name, "RECOMPSHIM_WINDOW")) {
        const char *why = NULL;
        if (*val && rs_parse_window_why(val, &g_rs_cfg.window_kind, &g_rs_cfg.window_a,
                                        &g_rs_cfg.window_b, &why) != 0) {
            /* no window: the whole run is recorded; the trace keeps the value
             * (its RECOMPSHIM_* environment) next to a header without a window */
            if (!g_quiet)
                fprintf(stderr, "recompshim: %s=\"%s\" is not valid: %s; no window, the "
                                "whole run is recorded\n", name, val, why);
            g_rs_cfg.window_kind = RS_WINDOW_NONE;
        }
    } else if (!strcmp(name, "RECOMPSHIM_STEP_MARKER")) {
        /* hnew2 finding 13: an empty marker was taken and the window never opened */
        if (v && !*v && g_rs_cfg.window_kind == RS_WINDOW_STEPS)
            bad_value_why(name, v, dflt, "empty");
        snprintf(g_rs_cfg.step_marker, sizeof g_rs_cfg.step_marker, "%s", *val ? val : dflt);
    } else if (!strcmp(name, "RECOMPSHIM_CLOCK")) {
        /* the clock (clock.c) reads it too, before any record; any value but
         * gettime means the default there: say so (hnew2 finding 13) */
        if (*val && strcmp(val, "gettime") != 0) {
            bad_value_why(name, val, dflt, "the one choice is gettime");
            val = dflt;
        }
        snprintf(g_rs_cfg.clock, sizeof g_rs_cfg.clock, "%s", val);
    } else if (!strcmp(name, "RECOMPSHIM_TENSORS")) {
        snprintf(g_rs_cfg.tensors, sizeof g_rs_cfg.tensors, "%s", val);
    } else if (!strcmp(name, "RECOMPSHIM_RUN_ID")) {
        rs_sanitize_name(g_rs_cfg.run_id, sizeof g_rs_cfg.run_id, val);
    }
}

static void
set_BOOL(const char *name, const char *v, const char *dflt)
{
    const char *val = v ? v : dflt;
    int b;
    if (!strcmp(val, "1") || !strcasecmp(val, "true") || !strcasecmp(val, "yes"))
        b = 1;
    else if (!*val)
        b = atoi(dflt); /* set but empty: the default */
    else if (!strcmp(val, "0") || !strcasecmp(val, "false") || !strcasecmp(val, "no"))
        b = 0;
    else {
        bad_value(name, val, dflt);
        b = atoi(dflt);
    }
    if (!strcmp(name, "RECOMPSHIM_DISABLE"))
        g_rs_cfg.disable = b;
    else if (!strcmp(name, "RECOMPSHIM_PYSTACK"))
        g_rs_cfg.pystack = b;
    else if (!strcmp(name, "RECOMPSHIM_COMPACT"))
        g_rs_cfg.compact = b;
}

static void
set_SIZE(const char *name, const char *v, const char *dflt)
{
    uint64_t x = 0;
    const char *why = v && *v ? rs_bytes_parse(v, &x) : NULL;
    if (why) {
        bad_value_why(name, v, dflt, why);
        rs_parse_size(dflt, &x);
    } else if (!v || !*v) {
        rs_parse_size(dflt, &x);
    }
    if (!strcmp(name, "RECOMPSHIM_MAX_BYTES")) {
        /* the smallest trace: the header and two chunks (one for events, one
         * reserved for the OOM tail); a lower limit is raised to it, said once */
        uint64_t least = RS_HEADER_SIZE + 2ull * RS_CHUNK_SIZE;
        if (x && x < least) {
            if (!g_quiet)
                fprintf(stderr,
                        "recompshim: RECOMPSHIM_MAX_BYTES=\"%s\" is below the smallest trace "
                        "(4 KiB header + two 256 KiB chunks = %llu bytes, 516KiB): using "
                        "516KiB\n",
                        v, (unsigned long long)least);
            x = least;
        }
        g_rs_cfg.max_bytes = x;
    }
}

static void
set_INT(const char *name, const char *v, const char *dflt)
{
    long x = strtol(dflt, NULL, 10);
    if (v && *v) {
        char *end = NULL;
        errno = 0;
        long y = strtol(v, &end, 10);
        if (errno || *end || y < 0)
            bad_value(name, v, dflt);
        else
            x = y;
    }
    if (!strcmp(name, "RECOMPSHIM_MEMINFO_MS"))
        g_rs_cfg.meminfo_interval_ns = (uint64_t)x * 1000000ull;
    else if (!strcmp(name, "RECOMPSHIM_LOG"))
        g_rs_cfg.log_level = (int)x;
}

void
rs_config_load(void)
{
    memset(&g_rs_cfg, 0, sizeof g_rs_cfg);
    g_quiet = getenv("RECOMPSHIM_RUN_ID") != NULL || rs_config_other_rank();
#define RS_ENV(NAME, type, dflt, help) set_##type(#NAME, getenv(#NAME), dflt);
#include "env.def"
#undef RS_ENV
    if (!g_rs_cfg.run_id[0]) {
        /* First shim in this process tree: name the run by its start time
         * and pid; children (torchrun's workers) inherit it. */
        char stamp[32], id[96];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
        snprintf(id, sizeof id, "%s-%d", stamp, (int)getpid());
        rs_sanitize_name(g_rs_cfg.run_id, sizeof g_rs_cfg.run_id, id);
        setenv("RECOMPSHIM_RUN_ID", g_rs_cfg.run_id, 1);
    }
}
