/* tensor_mode.c: RECOMPSHIM_TENSORS=async|nocache (docs/architecture.md, Modes).
 * The default allocator shows segments at the CUDA API; these modes make
 * every tensor one CUDA call, at the user's choice and only when that
 * cannot break the job. */
#include "tensor_mode.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"

static uint32_t g_mode = RS_MODE_DEFAULT;
static uint32_t g_refusals;
static char g_note[512];

uint32_t
rs_tensor_mode(void)
{
    return g_mode;
}

uint32_t
rs_tensor_refusals(void)
{
    return g_refusals;
}

const char *
rs_tensor_note(void)
{
    return g_note;
}

int
rs_alloc_conf_has(const char *conf, const char *key, const char *value)
{
    if (!conf)
        return 0;
    size_t klen = strlen(key), vlen = strlen(value);
    const char *p = conf;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *colon = memchr(p, ':', len);
        if (colon && (size_t)(colon - p) == klen && !strncmp(p, key, klen)) {
            const char *v = colon + 1;
            size_t l = len - klen - 1;
            while (l && v[l - 1] == ' ')
                l--;
            if (l == vlen && !strncasecmp(v, value, vlen))
                return 1;
        }
        p += len;
    }
    return 0;
}

/* 1 when the NUL-separated argv has `flag` (or flag=...). With want_value,
 * the value (next argument or after '=') must not be "none". */
static int
argv_has(const char *cmd, size_t len, const char *flag, int want_value)
{
    size_t flen = strlen(flag);
    for (size_t i = 0; i < len;) {
        const char *a = cmd + i;
        size_t alen = strnlen(a, len - i);
        if (alen >= flen && !strncmp(a, flag, flen) && (alen == flen || a[flen] == '=')) {
            if (!want_value)
                return 1;
            const char *v = NULL;
            if (a[flen] == '=')
                v = a + flen + 1;
            else if (i + alen + 1 < len)
                v = a + alen + 1;
            return v && *v && strcmp(v, "none") != 0;
        }
        i += alen + 1;
    }
    return 0;
}

uint32_t
rs_tensor_refusals_for(const char *mode, const char *alloc_conf, const char *cuda_alloc_conf,
                       const char *cmdline, size_t cmdline_len)
{
    uint32_t r = 0;
    if (!strcmp(mode, "async")) {
        if (rs_alloc_conf_has(alloc_conf, "backend", "native") ||
            rs_alloc_conf_has(cuda_alloc_conf, "backend", "native"))
            r |= RS_REFUSE_ASYNC_BACKEND_NATIVE;
        if (rs_alloc_conf_has(alloc_conf, "expandable_segments", "true") ||
            rs_alloc_conf_has(cuda_alloc_conf, "expandable_segments", "true"))
            r |= RS_REFUSE_ASYNC_EXPANDABLE;
        if (argv_has(cmdline, cmdline_len, "--record-memory-history", 0))
            r |= RS_REFUSE_ASYNC_MEMORY_HISTORY;
    } else if (!strcmp(mode, "nocache")) {
        if (rs_alloc_conf_has(alloc_conf, "backend", "cudaMallocAsync") ||
            rs_alloc_conf_has(cuda_alloc_conf, "backend", "cudaMallocAsync"))
            r |= RS_REFUSE_NOCACHE_BACKEND_ASYNC;
        if (argv_has(cmdline, cmdline_len, "--enable-cuda-graph", 0) ||
            argv_has(cmdline, cmdline_len, "--external-cuda-graph", 0) ||
            argv_has(cmdline, cmdline_len, "--cuda-graph-impl", 1))
            r |= RS_REFUSE_NOCACHE_CUDA_GRAPHS;
    } else {
        r |= RS_REFUSE_UNKNOWN_MODE;
    }
    return r;
}

static const char *
refusal_text(uint32_t r)
{
    if (r & RS_REFUSE_UNKNOWN_MODE)
        return "RECOMPSHIM_TENSORS must be async or nocache";
    if (r & RS_REFUSE_ASYNC_BACKEND_NATIVE)
        return "the allocator configuration sets backend:native explicitly";
    if (r & RS_REFUSE_ASYNC_EXPANDABLE)
        return "the allocator configuration sets expandable_segments:True";
    if (r & RS_REFUSE_ASYNC_MEMORY_HISTORY)
        return "--record-memory-history needs the native allocator (the async backend keeps no history)";
    if (r & RS_REFUSE_NOCACHE_BACKEND_ASYNC)
        return "the allocator configuration sets backend:cudaMallocAsync explicitly";
    if (r & RS_REFUSE_NOCACHE_CUDA_GRAPHS)
        return "CUDA graphs are enabled in the Megatron flags (nocache fails under capture)";
    return "";
}

/* Append backend:cudaMallocAsync to one configuration variable. */
static void
add_async(const char *var)
{
    const char *old = getenv(var);
    if (rs_alloc_conf_has(old, "backend", "cudaMallocAsync"))
        return;
    char buf[2048];
    if (old && *old)
        snprintf(buf, sizeof buf, "%s,backend:cudaMallocAsync", old);
    else
        snprintf(buf, sizeof buf, "backend:cudaMallocAsync");
    setenv(var, buf, 1);
}

/* A refusal is reported once per job: by the first process that meets it
 * (it exports the refusal bits in RECOMPSHIM_TENSORS_REPORTED, which its
 * children inherit) or by rank 0 when the refusal is new to it (ranks started
 * with no common parent, or a refusal only the ranks' command lines cause). */
static void
report_refusal_once(void)
{
    const char *prev = getenv("RECOMPSHIM_TENSORS_REPORTED");
    unsigned long seen = prev ? strtoul(prev, NULL, 10) : 0;
    if (!(g_refusals & ~seen) || (!rs_config_reports() && rs_config_other_rank()))
        return;
    fprintf(stderr, "recompshim: %s\n", g_note);
    char bits[24];
    snprintf(bits, sizeof bits, "%lu", seen | g_refusals);
    setenv("RECOMPSHIM_TENSORS_REPORTED", bits, 1);
}

void
rs_tensor_mode_apply(void)
{
    const char *mode = g_rs_cfg.tensors;
    if (!*mode)
        return;
    char cmd[16384];
    size_t cmd_len = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        cmd_len = n > 0 ? (size_t)n : 0;
    }
    cmd[cmd_len] = '\0';
    const char *ac = getenv("PYTORCH_ALLOC_CONF");
    const char *cac = getenv("PYTORCH_CUDA_ALLOC_CONF");
    g_refusals = rs_tensor_refusals_for(mode, ac, cac, cmd, cmd_len);
    if (g_refusals) {
        snprintf(g_note, sizeof g_note, "RECOMPSHIM_TENSORS=%s refused: %s; recording in the default mode",
                 mode, refusal_text(g_refusals));
        report_refusal_once();
        return;
    }
    if (!strcmp(mode, "async")) {
        if (!ac && !cac) {
            add_async("PYTORCH_ALLOC_CONF");
            add_async("PYTORCH_CUDA_ALLOC_CONF");
        } else {
            if (ac)
                add_async("PYTORCH_ALLOC_CONF");
            if (cac)
                add_async("PYTORCH_CUDA_ALLOC_CONF");
        }
        g_mode = RS_MODE_ASYNC;
        const char *a = getenv("PYTORCH_ALLOC_CONF"), *c = getenv("PYTORCH_CUDA_ALLOC_CONF");
        snprintf(g_note, sizeof g_note, "async: PYTORCH_ALLOC_CONF=%s PYTORCH_CUDA_ALLOC_CONF=%s",
                 a ? a : "(unset)", c ? c : "(unset)");
    } else {
        setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", 1);
        g_mode = RS_MODE_NOCACHE;
        snprintf(g_note, sizeof g_note, "nocache: PYTORCH_NO_CUDA_MEMORY_CACHING=1");
    }
    rs_log(1, "%s", g_note);
}
