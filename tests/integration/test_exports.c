/* test_exports: librecompshim.so exports exactly the hooked entry points
 * (include/recomp/apis.def) and InitializeInjectionNvtx2, nothing else. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

static const char *const expected[] = {
#define RS_API(name, code, lib) #name,
#include "recomp/apis.def"
#undef RS_API
    "InitializeInjectionNvtx2",
};
#define NEXP (sizeof expected / sizeof expected[0])

/* Symbols the linker itself may put into the dynamic symbol table. */
static const char *const linker_syms[] = { "_init", "_fini", "_edata", "_end", "__bss_start" };

Test(exports, exactly_the_hooks)
{
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
            if (!strcmp(name, expected[i])) {
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
        cr_expect_eq(found[i], 1, "%s exported %d times", expected[i], found[i]);
    cr_expect_eq(nunexp, 0, "unexpected exports:%s", unexpected);
}
