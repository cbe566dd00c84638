/* log.c: the shim's stderr log and its one failure policy (rs_disable). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "writer.h"

void
rs_log(int level, const char *fmt, ...)
{
    if (level > g_rs_cfg.log_level)
        return;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "recompshim[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof buf)
        vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strnlen(buf, sizeof buf - 2);
    buf[len++] = '\n';
    /* One write(2) per line so lines of many ranks do not interleave. */
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}

void
rs_disable(const char *what, int err)
{
    static atomic_int once;
    rs_writer_set_disabled();
    if (atomic_exchange(&once, 1))
        return;
    char buf[512];
    if (err)
        snprintf(buf, sizeof buf, "recompshim: disabled: %s: %s; the job continues untraced\n",
                 what, strerror(err));
    else
        snprintf(buf, sizeof buf, "recompshim: disabled: %s; the job continues untraced\n", what);
    ssize_t w = write(STDERR_FILENO, buf, strlen(buf));
    (void)w;
}
