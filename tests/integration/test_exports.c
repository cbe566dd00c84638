/* test_exports: librecompshim.so exports exactly the hooked entry points
 * (include/recomp/apis.def) and InitializeInjectionNvtx2, nothing else.
 * apis.def's rule: RS_LIB_CUDA rows are driver entry points handed out as
 * wrappers, never exported; the c10_ rows are exported under their mangled
 * C++ names. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

enum { RS_LIB_CUDART = 1, RS_LIB_LIBC = 2, RS_LIB_CUDA = 3, RS_LIB_NCCL = 4, RS_LIB_C10 = 5 };

static const char *
exported_name(const char *name, int lib)
{
    if (lib == RS_LIB_CUDA)
        return NULL;
    if (!strcmp(name, "c10_reportMemoryUsageToProfiler"))
        return "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE";
    if (!strcmp(name, "c10_reportMemoryUsageToProfiler_i64"))
        return "_ZN3c1027reportMemoryUsageToProfilerEPvlllNS_6DeviceE";
    return name;
}

static const struct {
    const char *name;
    int lib;
} k_rows[] = {
#define RS_API(name, code, lib) {#name, lib},
#include "recomp/apis.def"
#undef RS_API
    {"InitializeInjectionNvtx2", RS_LIB_LIBC},
};
#define NROWS (sizeof k_rows / sizeof k_rows[0])
static const char *expected[NROWS];
#define NEXP NROWS

/* Symbols the linker itself may put into the dynamic symbol table. */
static const char *const linker_syms[] = { "_init", "_fini", "_edata", "_end", "__bss_start" };

Test(exports, exactly_the_hooks)
{
    for (size_t i = 0; i < NROWS; i++)
        expected[i] = exported_name(k_rows[i].name, k_rows[i].lib);
    FILE *p = popen("nm -D --defined-only '" RS_SHIM_PATH "'", "r");
    cr_assert(p != NULL);
    char line[512];
    int found[NEXP] = { 0 };
    char unexpected[4096] = "";
    size_t nunexp = 0, nlines = 0;
    while (fgets(line, sizeof line, p)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
            continue;
        nlines++;
        char *at = strchr(name, '@');
        if (at)
            *at = '\0';
        int known = 0;
        for (size_t i = 0; i < NEXP; i++)
            if (expected[i] && !strcmp(name, expected[i])) {
                known = 1;
                found[i]++;
                cr_expect(!strcmp(type, "T"), "%s has type %s, expected T", name, type);
            }
        for (size_t i = 0; i < sizeof linker_syms / sizeof *linker_syms; i++)
            known |= !strcmp(name, linker_syms[i]);
        if (!known) {
            nunexp++;
            if (strlen(unexpected) + strlen(name) + 2 < sizeof unexpected) {
                strcat(unexpected, " ");
                strcat(unexpected, name);
            }
        }
    }
    int rc = pclose(p);
    cr_assert_eq(rc, 0, "nm failed");
    cr_assert_gt(nlines, 0);
    for (size_t i = 0; i < NEXP; i++)
        if (expected[i])
            cr_expect_eq(found[i], 1, "%s exported %d times", expected[i], found[i]);
        else
            cr_expect_eq(found[i], 0, "%s is a driver entry point and must not be exported",
                         k_rows[i].name);
    cr_expect_eq(nunexp, 0, "unexpected exports:%s", unexpected);
}
