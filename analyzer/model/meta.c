/* meta.c: questions about a job's metadata (am_meta) that every stage asks,
 * and the byte format every stage writes. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "recomp/trace_format.h"

const char *
am_argv_value(const am_meta *m, const char *flag)
{
    size_t fl = strlen(flag);
    const char *last = NULL;
    for (size_t i = 0; i < m->argc; i++) {
        const char *a = m->argv[i];
        if (strncmp(a, flag, fl) != 0)
            continue;
        if (a[fl] == '=')
            last = a + fl + 1;
        else if (a[fl] == 0)
            last = i + 1 < m->argc && strncmp(m->argv[i + 1], "--", 2) != 0 ? m->argv[i + 1]
                                                                            : "";
    }
    return last;
}

const char *
am_fmt_bytes(uint64_t b, char *buf, size_t n)
{
    static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024.0 && i < 4) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, n, "%" PRIu64 " B", b);
    else
        snprintf(buf, n, "%.2f %s", v, u[i]);
    return buf;
}

const char *
am_exit_via_name(int via)
{
    return via == RS_EXIT__EXIT ? "_exit" : via == RS_EXIT__EXIT_C ? "_Exit" : "?";
}
