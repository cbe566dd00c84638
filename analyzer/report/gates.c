/* gates.c: --fail-on regression gates and their one-line CI summary
 * (docs/analysis.md "Gates"). Exit code 3 when one fails (cli.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gates.h"
#include "recomp/bytesize.h"
#include "report.h"

int
am_parse_size(const char *s, uint64_t *out)
{
    return rs_bytes_parse(s, out) ? -1 : 0;
}

/* Does code match pattern? '*' matches any run of characters; everything
 * else, brackets included (R:FULL[block,2]), is literal. */
static int
code_match(const char *pat, const char *code)
{
    if (!*pat)
        return !*code;
    if (*pat == '*')
        return code_match(pat + 1, code) || (*code && code_match(pat, code + 1));
    return *pat == *code && code_match(pat + 1, code + 1);
}

/* "+3%", "+2GiB" (relative) or "70GiB" (absolute) into g. 0, -1. */
static int
parse_threshold(const char *v, am_gate *g)
{
    g->relative = *v == '+';
    if (g->relative)
        v++;
    size_t n = strlen(v);
    if (n && v[n - 1] == '%') {
        char num[64], *end;
        if (!g->relative || n >= sizeof num)
            return -1; /* a percentage is of the control */
        memcpy(num, v, n - 1);
        num[n - 1] = 0;
        g->value = strtod(num, &end);
        g->percent = 1;
        return end == num || *end || g->value < 0 ? -1 : 0;
    }
    uint64_t b;
    if (am_parse_size(v, &b) < 0)
        return -1;
    g->value = (double)b;
    return 0;
}

/* One gate from item (NUL-terminated). 0, -1. */
static int
parse_gate(const char *item, am_gate *g)
{
    memset(g, 0, sizeof *g);
    snprintf(g->text, sizeof g->text, "%s", item);
    if (strcmp(item, "oom") == 0) {
        g->kind = AM_G_OOM;
        return 0;
    }
    if (strcmp(item, "unmatched") == 0) {
        g->kind = AM_G_UNMATCHED;
        return 0;
    }
    if (strncmp(item, "verdict!=", 9) == 0 || strncmp(item, "verdict=", 8) == 0) {
        g->kind = AM_G_VERDICT;
        g->negate = item[7] == '!';
        const char *p = item + (g->negate ? 9 : 8);
        if (!*p || strlen(p) >= sizeof g->pattern)
            return -1;
        snprintf(g->pattern, sizeof g->pattern, "%s", p);
        return 0;
    }
    if (strncmp(item, "peak=", 5) == 0) {
        g->kind = AM_G_PEAK;
        return parse_threshold(item + 5, g);
    }
    /* device=: the device-level peak (segments + outside PyTorch); reserved=
     * is its older name, kept (it is not PyTorch's reserved alone) */
    if (strncmp(item, "device=", 7) == 0) {
        g->kind = AM_G_RESERVED;
        return parse_threshold(item + 7, g);
    }
    if (strncmp(item, "reserved=", 9) == 0) {
        g->kind = AM_G_RESERVED;
        return parse_threshold(item + 9, g);
    }
    return -1;
}

int
am_gates_parse(const char *spec, am_gates *g, char *err, size_t n)
{
    const char *p = spec;
    while (*p) {
        const char *e = p;
        int depth = 0;
        while (*e && (*e != ',' || depth > 0)) {
            depth += *e == '[' ? 1 : *e == ']' ? -1 : 0;
            e++;
        }
        char item[160];
        size_t len = (size_t)(e - p);
        if (len >= sizeof item)
            len = sizeof item - 1;
        memcpy(item, p, len);
        item[len] = 0;
        am_gate *q = realloc(g->v, (g->n + 1) * sizeof *q);
        if (!q) {
            snprintf(err, n, "out of memory");
            return -1;
        }
        g->v = q;
        if (!len || parse_gate(item, &g->v[g->n]) < 0) {
            snprintf(err, n,
                     "'%s' is not a gate (oom, unmatched, verdict=PATTERN, verdict!=PATTERN, "
                     "peak=SIZE, peak=+SIZE, peak=+P%%, reserved=... as peak)",
                     item);
            return -1;
        }
        g->n++;
        p = *e ? e + 1 : e;
    }
    if (!g->n) {
        snprintf(err, n, "no gate given");
        return -1;
    }
    return 0;
}

int
am_gates_check(const am_gates *g, int compare, int advice, char *err, size_t n)
{
    for (size_t i = 0; i < g->n; i++) {
        const am_gate *x = &g->v[i];
        if (!compare && (x->relative || x->kind == AM_G_UNMATCHED)) {
            snprintf(err, n, "'%s' compares against a control run: use recomp-analyze compare",
                     x->text);
            return -1;
        }
        if (!advice && x->kind == AM_G_VERDICT) {
            snprintf(err, n, "'%s' needs the advisor (drop --no-advice)", x->text);
            return -1;
        }
    }
    return 0;
}

/* Evaluate gate x on subject s (control c or NULL): 1 failed (why in buf),
 * 0 passed. */
static int
eval_one(const am_gate *x, const am_runsum *c, const am_runsum *s, char *buf, size_t n)
{
    char b1[32], b2[32];
    buf[0] = 0;
    switch (x->kind) {
    case AM_G_OOM:
        if (!s->oom)
            return 0;
        snprintf(buf, n, "%s: OOM on rank %d in %s%d, phase %s", s->label, s->oom_rank,
                 s->oom_iter >= 0 ? "iteration " : "init", s->oom_iter >= 0 ? s->oom_iter : 0,
                 am_phase_name(s->oom_phase));
        return 1;
    case AM_G_VERDICT: {
        const char *code = s->has_verdict ? s->verdict : "";
        int match = code_match(x->pattern, code);
        if (match == !x->negate) {
            snprintf(buf, n, "%s: verdict %s", s->label, code[0] ? code : "n/a");
            return 1;
        }
        return 0;
    }
    case AM_G_UNMATCHED: {
        char d[384];
        int k = am_settings_diff(c, s, d, sizeof d);
        if (!k)
            return 0;
        if (k < 0)
            snprintf(buf, n, "%.200s: %s", s->label, d);
        else
            snprintf(buf, n, "%.200s: differs in %s", s->label, d);
        return 1;
    }
    case AM_G_PEAK:
    case AM_G_RESERVED: {
        int l = x->kind == AM_G_PEAK ? AM_L_TENSOR : AM_L_DEVICE;
        const char *lv = l == AM_L_TENSOR ? "tensor" : "device";
        if (!s->known[l] || (x->relative && !c->known[l])) {
            snprintf(buf, n, "cannot decide: %s-level peak n/a (%s)", lv,
                     !s->known[l] ? s->na[l] : c->na[l]);
            return 1;
        }
        /* A run cut by an OOM has a peak that is only a lower bound: a
         * candidate's below the threshold, or a rise over a cut control,
         * is not known. Only certain results pass or fail plainly. */
        double v = (double)s->peak[l];
        if (!x->relative) {
            if (v <= x->value && !s->oom)
                return 0;
            snprintf(buf, n, "%s%s: %s-level peak %s %s %s", v <= x->value ? "cannot decide: " : "",
                     s->label, lv, am_fmt_bytes(s->peak[l], b1, sizeof b1),
                     v <= x->value ? "<=" : ">", am_fmt_bytes((uint64_t)x->value, b2, sizeof b2));
            if (v <= x->value)
                snprintf(buf + strlen(buf), n - strlen(buf), " but the run stopped at an OOM");
            return 1;
        }
        double base = (double)c->peak[l], d = v - base;
        double limit = x->percent ? base * x->value / 100.0 : x->value;
        int over = d > limit;
        if (!over && !s->oom)
            return 0;
        snprintf(buf, n, "%s%s: %s-level peak %s -> %s (%+.2f%%)%s",
                 !over || c->oom ? "cannot decide: " : "", s->label, lv,
                 am_fmt_bytes(c->peak[l], b1, sizeof b1), am_fmt_bytes(s->peak[l], b2, sizeof b2),
                 base > 0 ? 100.0 * d / base : 100.0,
                 !over ? " but the candidate stopped at an OOM"
                 : c->oom ? " but the control stopped at an OOM (its peak is a lower bound)"
                          : "");
        return 1;
    }
    }
    return 0;
}

int
am_gates_eval(const am_gates *g, const am_runsum *control, const am_runsum *subj, size_t n,
              FILE *f)
{
    int failed = 0;
    char line[4096] = "", why[768];
    size_t at = 0;
    for (size_t i = 0; i < g->n; i++) {
        int fail = 0;
        for (size_t k = 0; k < n && !fail; k++)
            fail = eval_one(&g->v[i], control, &subj[k], why, sizeof why);
        failed += fail;
        int w = snprintf(line + at, sizeof line - at, "%s%s %s%s%s%s", i ? "; " : "",
                         g->v[i].text, fail ? "FAIL" : "pass", fail ? " (" : "",
                         fail ? why : "", fail ? ")" : "");
        if (w > 0 && (size_t)w < sizeof line - at)
            at += (size_t)w;
    }
    fprintf(f, "recomp-analyze: gates: %s (%d of %zu failed%s): %s\n", failed ? "FAIL" : "PASS",
            failed, g->n, failed ? ", exit 3" : "", line);
    return failed;
}

void
am_gates_free(am_gates *g)
{
    free(g->v);
    g->v = NULL;
    g->n = 0;
}
