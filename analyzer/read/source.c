/* source.c: the importer registry; opening a file with the importer that
 * recognises it. A new importer (PyTorch snapshot, Kineto) is one row in
 * g_importers. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <math.h>

#include "model.h"
#include "recomp/bytesize.h"

/* Importers of other formats (docs/importers.md). */
extern const am_importer am_kineto_importer;
extern const am_importer am_snapshot_importer;

static const am_importer *const g_importers[] = {
    &am_native_importer,
    &am_kineto_importer,
    &am_snapshot_importer,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const am_importer *
am_sniff(const char *path)
{
    unsigned char head[512];
    struct stat st;
    /* a FIFO or device would block or never end: regular files only */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    for (size_t i = 0; i < NELEM(g_importers); i++)
        if (g_importers[i]->sniff(path, head, n))
            return g_importers[i];
    return NULL;
}

static double
mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "64G", "500M", "1048576": bytes; 0 when absent or malformed. */
/* A byte-size setting (include/recomp/bytesize.h's grammar) into *out;
 * 0 when unset (out untouched); -1 with why in bad (the setting, the value)
 * when it is not a size or is 0. */
static int
env_bytes(const char *name, uint64_t *out, char *bad, size_t n)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    uint64_t b;
    const char *why = rs_bytes_parse(v, &b);
    if (!why && b == 0)
        why = "0 bytes would refuse every file";
    if (why) {
        snprintf(bad, n, "%s=%.40s: %s", name, v, why);
        return -1;
    }
    *out = b;
    return 0;
}

/* A seconds setting (a finite number >= 0) into *out; as env_bytes. */
static int
env_seconds(const char *name, double *out, char *bad, size_t n)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < 0) {
        snprintf(bad, n, "%s=%.40s: not a number of seconds >= 0", name, v);
        return -1;
    }
    *out = x;
    return 0;
}

void
am_import_limit_init(am_import_limit *l, uint64_t file_bytes)
{
    uint64_t ratio = file_bytes * 200u, floor = (uint64_t)1 << 30, top = (uint64_t)64 << 30;
    l->max_bytes = ratio > floor ? ratio : floor;
    if (l->max_bytes > top)
        l->max_bytes = top;
    l->max_seconds = 1800.0;
    l->bad[0] = 0;
    if (env_bytes("RECOMP_IMPORT_MAX_BYTES", &l->max_bytes, l->bad, sizeof l->bad) == 0)
        env_seconds("RECOMP_IMPORT_MAX_SECONDS", &l->max_seconds, l->bad, sizeof l->bad);
    l->start = mono_seconds();
}

int
am_import_limit_check(const am_import_limit *l, const char *path, uint64_t decompressed,
                      uint64_t offset, char *err, size_t errlen)
{
    if (l->bad[0]) {
        snprintf(err, errlen, "%s: offset %" PRIu64 ": %s: refused", path, offset, l->bad);
        return -1;
    }
    if (decompressed > l->max_bytes) {
        snprintf(err, errlen,
                 "%s: offset %" PRIu64 ": more than %" PRIu64 " bytes after decompression "
                 "(the limit for this file; a gzip bomb?): refused; RECOMP_IMPORT_MAX_BYTES "
                 "raises it", path, offset, l->max_bytes);
        return -1;
    }
    double t = mono_seconds() - l->start;
    if (t > l->max_seconds) {
        snprintf(err, errlen,
                 "%s: offset %" PRIu64 ": import stopped after %.0f s (limit %.0f s): "
                 "refused; RECOMP_IMPORT_MAX_SECONDS raises it", path, offset, t,
                 l->max_seconds);
        return -1;
    }
    return 0;
}

static int g_salvage;

void
am_source_set_salvage(int on)
{
    g_salvage = on;
}

int
am_source_salvage(void)
{
    return g_salvage;
}

int
am_source_open(const char *path, am_source **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: offset 0: not a regular file (a FIFO, device or directory "
                              "cannot be a trace)", path);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    fclose(f);
    const am_importer *imp = am_sniff(path);
    if (!imp) {
        snprintf(err, errlen,
                 "%s: offset 0: not a recompshim trace (no RSTRACE1 magic) nor a format "
                 "an importer recognises",
                 path);
        return -1;
    }
    return imp->open(path, out, err, errlen);
}

void
am_source_close(am_source *s)
{
    if (s)
        s->ops->close(s);
}

int
am_format_addr(am_source *s, uint64_t addr, char *buf, size_t n)
{
    if (n)
        buf[0] = 0;
    if (!s->ops->format_addr)
        return 0;
    return s->ops->format_addr(s, addr, buf, n);
}
