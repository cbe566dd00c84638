/* fuzz_import_common.h: run one input through an importer and the full
 * analysis (both passes, rewind), as recomp-analyze would. Importers take
 * paths, so the input goes to a per-process temporary file. */
#ifndef FUZZ_IMPORT_COMMON_H
#define FUZZ_IMPORT_COMMON_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis.h"

static int
fuzz_import_run(const am_importer *imp, const char *suffix, const uint8_t *data, size_t size)
{
    char path[128];
    /* memory-backed where there is one: no disk write per execution */
    static const char *dir;
    if (!dir)
        dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/recomp-fuzz-import-%d%s", dir, (int)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    if (size)
        fwrite(data, 1, size, f);
    fclose(f);
    am_source *s = NULL;
    char err[1024];
    int ok = 0;
    if (imp->open(path, &s, err, sizeof err) == 0) {
        am_rank r;
        memset(&r, 0, sizeof r);
        am_opts o = {-1};
        ok = am_analyze(s, &o, &r, err, sizeof err) == 0;
        am_rank_free(&r); /* closes s */
    } else if (!strstr(err, path)) {
        abort(); /* every error names the file */
    }
    unlink(path);
    return ok;
}
#endif
