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

#include "model.h"

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
static uint64_t
env_bytes(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    double m = *end == 'K' || *end == 'k' ? 1024.0
               : *end == 'M' || *end == 'm' ? 1048576.0
               : *end == 'G' || *end == 'g' ? 1073741824.0
                                            : 1.0;
    return x > 0 ? (uint64_t)(x * m) : 0;
}

void
am_import_limit_init(am_import_limit *l, uint64_t file_bytes)
{
    uint64_t ratio = file_bytes * 200u, floor = (uint64_t)1 << 30, top = (uint64_t)64 << 30;
    l->max_bytes = ratio > floor ? ratio : floor;
    if (l->max_bytes > top)
        l->max_bytes = top;
    uint64_t b = env_bytes("RECOMP_IMPORT_MAX_BYTES");
    if (b)
        l->max_bytes = b;
    const char *s = getenv("RECOMP_IMPORT_MAX_SECONDS");
    l->max_seconds = s && *s ? strtod(s, NULL) : 1800.0;
    l->start = mono_seconds();
}

int
am_import_limit_check(const am_import_limit *l, const char *path, uint64_t decompressed,
                      uint64_t offset, char *err, size_t errlen)
{
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
