/* itest_fields.c: record matching by fields (see itest_fields.h). */
#include "itest_fields.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recomp/trace_format.h"

/* Whether the space-separated token `tok` (length n) is a whole token of s. */
static int
has_token(const char *s, const char *tok, size_t n)
{
    for (const char *p = s; (p = strstr(p, tok)); p++) {
        if ((p == s || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    }
    return 0;
}

int
it_fields_match(const char *got, const char *exp)
{
    size_t kl = strcspn(exp, " ");
    if (strncmp(got, exp, kl) || (got[kl] != ' ' && got[kl] != '\0'))
        return 0;
    const char *p = exp + kl;
    while (*p) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (!n)
            break;
        char tok[512];
        if (n >= sizeof tok)
            return 0;
        memcpy(tok, p, n);
        tok[n] = '\0';
        if (!has_token(got, tok, n))
            return 0;
        p += n;
    }
    return 1;
}

void
it_expect_fields(const it_dump *d, const char *kinds, long tid, const char *const *expected, const char *what)
{
    char **got;
    size_t n = it_select(d, kinds, tid, &got);
    size_t ne = 0;
    while (expected[ne])
        ne++;
    int same = n == ne;
    for (size_t i = 0; same && i < n; i++)
        same = it_fields_match(got[i], expected[i]);
    if (!same) {
        size_t cap = 8192, len = 0;
        char *msg = malloc(cap);
        len += (size_t)snprintf(msg, cap, "%s: records [%s] differ (expected %zu, got %zu)\n", what, kinds, ne, n);
        for (size_t i = 0; i < (n > ne ? n : ne); i++) {
            const char *g = i < n ? got[i] : "(none)";
            const char *e = i < ne ? expected[i] : "(none)";
            size_t need = strlen(g) + strlen(e) + 64;
            if (len + need >= cap)
                msg = realloc(msg, cap = (len + need) * 2);
            len += (size_t)snprintf(msg + len, cap - len, "  %s #%zu\n    expected: %s\n    got:      %s\n",
                                    i < n && i < ne && it_fields_match(g, e) ? "ok" : "!!", i, e, g);
        }
        cr_log_error("%s", msg);
        cr_assert_fail("%s", msg);
    }
    it_free_lines(got, n);
}

size_t
it_count_fields(const it_dump *d, const char *exp)
{
    size_t c = 0;
    for (size_t i = 0; i < d->nlines; i++) {
        char *n = it_norm(d->lines[i]);
        c += it_fields_match(n, exp);
        free(n);
    }
    return c;
}

void
it_read_header(const char *dir, struct rs_file_header *h)
{
    char **paths;
    size_t n = it_find_traces(dir, &paths);
    cr_assert_eq(n, 1, "expected 1 trace under %s, found %zu", dir, n);
    FILE *f = fopen(paths[0], "rb");
    cr_assert(f != NULL);
    size_t got = fread(h, 1, sizeof *h, f);
    fclose(f);
    cr_assert_eq(got, sizeof *h, "short header in %s", paths[0]);
    it_free_paths(paths, n);
}

size_t
it_count_prefix(const char *text, const char *prefix)
{
    size_t c = 0, pl = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, prefix, pl))
            c++;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return c;
}
