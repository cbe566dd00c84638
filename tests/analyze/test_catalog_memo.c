/* test_catalog_memo.c: the timeline's memo of catalog verdicts.
 *
 * Property, over every catalog row: GIVEN names built from the row's
 * pattern (itself, with text before, after, around, cut short) in the
 * default domain, an empty domain, NCCL's and another, WHEN asked through
 * the memo (first a miss, then a hit), THEN the verdict equals the
 * catalog's own for every one. And the memo matches each distinct name once,
 * keeps working past many growths, and keeps its own copy of the bytes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "catalog.h"
#include "catalog_memo.h"

static int
same(am_cat_match a, am_cat_match b)
{
    return a.signal == b.signal && a.boundary == b.boundary && a.flags == b.flags &&
           a.rule == b.rule;
}

static void
check(am_catalog_memo *m, const char *name, const char *domain)
{
    size_t dl = domain ? strlen(domain) : 0;
    am_cat_match want = am_catalog_range(name, strlen(name), domain, dl);
    for (int pass = 0; pass < 2; pass++) {
        am_cat_match got = am_memo_range(m, name, strlen(name), domain, dl);
        cr_assert(same(got, want), "memo differs from the catalog for \"%s\" in domain %s (pass %d)",
                  name, domain ? domain : "(default)", pass);
    }
}

Test(catalog_memo, every_row_same_verdict_as_the_catalog)
{
    am_catalog_memo m = {0};
    static const char *const domains[] = {NULL, "", "NCCL", "NCCL_comm", "megatron", "TE"};
    int rows = 0;
    for (int r = 0; am_catalog_rule_pattern(r)[0]; r++, rows++) {
        const char *p = am_catalog_rule_pattern(r);
        char names[6][600];
        snprintf(names[0], sizeof names[0], "%s", p);
        snprintf(names[1], sizeof names[1], "x.%s", p);
        snprintf(names[2], sizeof names[2], "%s.y", p);
        snprintf(names[3], sizeof names[3], "a.%s.b", p);
        snprintf(names[4], sizeof names[4], "%.*s", (int)strlen(p) - 1, p);
        snprintf(names[5], sizeof names[5], "%s, seq = 17", p);
        for (size_t d = 0; d < sizeof domains / sizeof domains[0]; d++)
            for (int n = 0; n < 6; n++)
                check(&m, names[n], domains[d]);
    }
    cr_assert_gt(rows, 20, "the catalog has rows");
    cr_assert_eq(m.misses, m.used, "each distinct (domain, name) is matched once: %llu scans, "
                 "%zu distinct", (unsigned long long)m.misses, m.used);
    cr_assert_lt(m.misses, m.lookups / 2 + 1, "the second ask of each name is a hit");
    am_memo_fini(&m);
    cr_assert_eq(m.cap, 0);
}

Test(catalog_memo, each_distinct_name_matched_once_across_growth)
{
    am_catalog_memo m = {0};
    char name[64];
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 5000; i++) {
            snprintf(name, sizeof name, "megatron.core.transformer.layer%d.forward", i);
            check(&m, name, NULL);
        }
    cr_assert_eq(m.misses, 5000, "5000 distinct names, %llu catalog scans",
                 (unsigned long long)m.misses);
    cr_assert_eq(m.lookups, 3 * 5000 * 2);
    cr_assert_eq(m.used, 5000);
    am_memo_fini(&m);
}

/* The key is the bytes, not the pointer: a buffer reused for another name
 * (a source's mapping replaced) gets that name's verdict. */
Test(catalog_memo, keyed_by_bytes_not_by_pointer)
{
    am_catalog_memo m = {0};
    for (int r = 0; am_catalog_rule_pattern(r)[0] && r < 40; r++) {
        char buf[600];
        snprintf(buf, sizeof buf, "%s", am_catalog_rule_pattern(r));
        check(&m, buf, NULL);
        snprintf(buf, sizeof buf, "zz%s", am_catalog_rule_pattern(r + 1));
        check(&m, buf, NULL);
        /* same address, same length, other bytes */
        snprintf(buf, sizeof buf, "%s", am_catalog_rule_pattern(r));
        check(&m, buf, NULL);
        buf[strlen(buf) / 2] ^= 0x20;
        check(&m, buf, NULL);
    }
    am_memo_fini(&m);
}
