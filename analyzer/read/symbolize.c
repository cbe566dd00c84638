/* symbolize.c: native frames named at analysis time with libdwfl (symbolize.h). */
#include "symbolize.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef AM_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#endif

/* One module as reported to libdwfl, or why it could not be. */
typedef struct sym_mod {
    char *path;
    uint64_t base;
    void *dwfl_mod;           /* Dwfl_Module *, NULL on failure */
    char why[200];            /* the reason when dwfl_mod is NULL */
} sym_mod;

struct am_symbolizer {
    void *dwfl;               /* Dwfl *, created on first use */
    sym_mod *mods;
    size_t nmods, cap;
};

am_symbolizer *
am_sym_new(void)
{
    return calloc(1, sizeof(am_symbolizer));
}

void
am_sym_free(am_symbolizer *s)
{
    if (!s)
        return;
#ifdef AM_HAVE_LIBDW
    if (s->dwfl)
        dwfl_end(s->dwfl);
#endif
    for (size_t i = 0; i < s->nmods; i++)
        free(s->mods[i].path);
    free(s->mods);
    free(s);
}

/* The base name of a module path (not NUL-terminated in the trace). */
static void
base_name(const rs_module_info *m, const char **b, int *len)
{
    *b = m->path;
    *len = (int)m->path_len;
    for (uint32_t i = 0; i < m->path_len; i++)
        if (m->path[i] == '/') {
            *b = m->path + i + 1;
            *len = (int)(m->path_len - i - 1);
        }
}

#ifdef AM_HAVE_LIBDW
static const Dwfl_Callbacks g_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = NULL,   /* libdwfl's default: beside, .debug/, /usr/lib/debug */
};

/* Report the file at m->path at the recorded load bias; check that its build
 * id is the one the trace recorded. Fills x->dwfl_mod or x->why. */
static void
report_module(am_symbolizer *s, const rs_module_info *m, sym_mod *x)
{
    if (!s->dwfl && !(s->dwfl = dwfl_begin(&g_callbacks))) {
        snprintf(x->why, sizeof x->why, "libdwfl: %s", dwfl_errmsg(-1));
        return;
    }
    if (access(x->path, R_OK) != 0) {
        snprintf(x->why, sizeof x->why, "%s is not on this machine", x->path);
        return;
    }
    dwfl_report_begin_add(s->dwfl);
    Dwfl_Module *dm = dwfl_report_elf(s->dwfl, x->path, x->path, -1, m->base, false);
    dwfl_report_end(s->dwfl, NULL, NULL);
    if (!dm) {
        snprintf(x->why, sizeof x->why, "%s: %s", x->path, dwfl_errmsg(-1));
        return;
    }
    const unsigned char *bits;
    GElf_Addr vaddr;
    int len = dwfl_module_build_id(dm, &bits, &vaddr);
    if (m->build_id_len &&
        (len != (int)m->build_id_len || memcmp(bits, m->build_id, m->build_id_len) != 0)) {
        snprintf(x->why, sizeof x->why,
                 "the build id of %s differs from the recorded one (changed since the run)",
                 x->path);
        return;
    }
    x->dwfl_mod = dm;
}
#endif

/* The module's state, reported on first use. */
static sym_mod *
module_of(am_symbolizer *s, const rs_module_info *m)
{
    for (size_t i = 0; i < s->nmods; i++)
        if (s->mods[i].base == m->base && strlen(s->mods[i].path) == m->path_len &&
            !memcmp(s->mods[i].path, m->path, m->path_len))
            return &s->mods[i];
    if (s->nmods == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        sym_mod *q = realloc(s->mods, cap * sizeof *q);
        if (!q)
            return NULL;
        s->mods = q;
        s->cap = cap;
    }
    sym_mod *x = &s->mods[s->nmods];
    memset(x, 0, sizeof *x);
    if (!(x->path = strndup(m->path, m->path_len)))
        return NULL;
    x->base = m->base;
    s->nmods++;
#ifdef AM_HAVE_LIBDW
    report_module(s, m, x);
#else
    snprintf(x->why, sizeof x->why, "recomp-analyze was built without libdw");
#endif
    return x;
}

void
am_sym_format(am_symbolizer *s, const rs_module_info *m, uint64_t addr, char *buf, size_t n)
{
    const char *b;
    int blen;
    base_name(m, &b, &blen);
    int k = snprintf(buf, n, "%.*s+0x%" PRIx64, blen, b, addr - m->base);
    if (k < 0 || (size_t)k >= n)
        return;
    char *rest = buf + k;
    size_t left = n - (size_t)k;
    sym_mod *x = s ? module_of(s, m) : NULL;
    if (!x) {
        snprintf(rest, left, " (no symbol: out of memory)");
        return;
    }
#ifdef AM_HAVE_LIBDW
    if (x->dwfl_mod) {
        Dwfl_Module *dm = x->dwfl_mod;
        GElf_Addr pc = addr - 1, off = 0;
        GElf_Sym sym;
        const char *name = dwfl_module_addrinfo(dm, pc, &off, &sym, NULL, NULL, NULL);
        if (!name) {
            Dwarf_Addr bias;
            snprintf(rest, left, " (no symbol: %s)",
                     dwfl_module_getdwarf(dm, &bias)
                         ? "no symbol covers this address"
                         : "the file is stripped and no separate debug file was found");
            return;
        }
        int lineno = 0;
        Dwfl_Line *line = dwfl_module_getsrc(dm, pc);
        const char *file = line ? dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL) : NULL;
        if (file && strrchr(file, '/'))
            file = strrchr(file, '/') + 1;
        if (file && lineno > 0)
            snprintf(rest, left, " in %s+0x%" PRIx64 " at %s:%d", name, (uint64_t)off + 1, file,
                     lineno);
        else
            snprintf(rest, left, " in %s+0x%" PRIx64, name, (uint64_t)off + 1);
        return;
    }
#endif
    snprintf(rest, left, " (no symbol: %s)", x->why);
}
