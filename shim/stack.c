/* stack.c: native stacks for OOM records (libunwind when present). */
#include "stack.h"

#include <dlfcn.h>
#include <execinfo.h>

static int (*g_unw_backtrace)(void **, int);
static int g_have_glibc;

void
rs_stack_init(void)
{
    void *h = dlopen("libunwind.so.8", RTLD_LAZY | RTLD_LOCAL);
    if (h)
        g_unw_backtrace = (int (*)(void **, int))dlsym(h, "unw_backtrace");
    if (!g_unw_backtrace) {
        void *warm[4];
        g_have_glibc = backtrace(warm, 4) > 0;
    }
}

const char *
rs_stack_unwinder(void)
{
    return g_unw_backtrace ? "libunwind" : g_have_glibc ? "glibc" : "none";
}

int
rs_capture_stack(uint64_t *frames, int max, int skip)
{
    void *buf[RS_OOM_MAX_FRAMES + 8];
    int cap = max + skip + 1;
    if (cap > (int)(sizeof buf / sizeof *buf))
        cap = (int)(sizeof buf / sizeof *buf);
    int n = 0;
    if (g_unw_backtrace)
        n = g_unw_backtrace(buf, cap);
    else if (g_have_glibc)
        n = backtrace(buf, cap);
    int out = 0;
    for (int i = skip + 1; i < n && out < max; i++)
        frames[out++] = (uint64_t)(uintptr_t)buf[i];
    return out;
}
