/* source.c: the importer registry; opening a file with the importer that
 * recognises it. A new importer (PyTorch snapshot, Kineto) is one row in
 * g_importers. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
