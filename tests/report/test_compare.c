/* compare.c and gates.c rules called directly: settings unknown are said so,
 * never guessed; every differing setting is named; a run with an OOM never
 * passes; a gate on a level that is n/a fails and says it cannot decide. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "gates.h"

static am_runsum *
run(const char *label, int megatron)
{
    am_runsum *s = calloc(1, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", label);
    s->settings_known = s->cfg.megatron = megatron;
    s->cfg.num_layers = 32;
    s->cfg.seq = 8192;
    s->completed = 3;
    for (int l = 0; l < AM_NLEVELS; l++) {
        s->known[l] = 1;
        s->peak[l] = (uint64_t)70 << 30;
    }
    return s;
}

Test(compare, unknown_settings_are_not_guessed)
{
    am_runsum *a = run("control", 1), *b = run("snapshot_0.pickle", 0);
    char buf[512];
    cr_expect_eq(am_settings_diff(a, b, buf, sizeof buf), -1);
    cr_expect(strstr(buf, "settings unknown for snapshot_0.pickle"), "%s", buf);
    cr_expect_eq(am_settings_diff(b, a, buf, sizeof buf), -1);
    free(a), free(b);
}

Test(compare, every_differing_setting_named)
{
    am_runsum *a = run("a", 1), *b = run("b", 1);
    char buf[512];
    cr_expect_eq(am_settings_diff(a, b, buf, sizeof buf), 0);
    b->cfg.seq = 4096;
    b->cfg.tp = 2;
    snprintf(b->cfg.cuda_graph_impl, sizeof b->cfg.cuda_graph_impl, "local");
    b->cfg.granularity = 2; /* recompute itself is not a difference */
    cr_expect_eq(am_settings_diff(a, b, buf, sizeof buf), 3);
    cr_expect(strstr(buf, "seq_length 8192->4096"), "%s", buf);
    cr_expect(strstr(buf, "tensor_model_parallel_size 0->2"), "%s", buf);
    cr_expect(strstr(buf, "cuda_graph_impl -->local"), "%s", buf);
    cr_expect(!strstr(buf, "recompute"), "%s", buf);
    free(a), free(b);
}

Test(compare, a_run_with_an_oom_or_killed_never_passes)
{
    am_runsum *a = run("a", 1);
    cr_expect(am_run_passes(a));
    a->oom = 1; /* even one that completed more iterations */
    a->completed = 100;
    cr_expect(!am_run_passes(a));
    a->oom = 0; /* a killed run (trace not closed) does not pass either */
    a->killed = 1;
    cr_expect(!am_run_passes(a));
    free(a);
}

Test(gates, undecidable_gate_fails_and_says_why)
{
    am_runsum *c = run("control", 1), *s = run("cand", 1);
    s->known[AM_L_TENSOR] = 0;
    snprintf(s->na[AM_L_TENSOR], sizeof s->na[0], "rank 0: no tensor level");
    am_gates g = {0};
    char err[256];
    cr_assert_eq(am_gates_parse("peak=+3%", &g, err, sizeof err), 0, "%s", err);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    cr_expect_eq(am_gates_eval(&g, c, s, 1, f), 1);
    fclose(f);
    cr_expect(strstr(out, "cannot decide: tensor-level peak n/a (rank 0: no tensor level)"), "%s",
              out);
    free(out);
    am_gates_free(&g);
    free(c), free(s);
}

Test(gates, parse_errors_name_the_item)
{
    am_gates g = {0};
    char err[256];
    cr_expect_eq(am_gates_parse("oom,peak=+x%", &g, err, sizeof err), -1);
    cr_expect(strstr(err, "'peak=+x%' is not a gate"), "%s", err);
    am_gates_free(&g);
    cr_expect_eq(am_gates_parse("", &g, err, sizeof err), -1);
    am_gates_free(&g);
    cr_expect_eq(am_gates_parse("verdict=R:FULL[block,2],reserved=+1GiB", &g, err, sizeof err), 0);
    cr_expect_eq(g.n, 2);
    cr_expect_str_eq(g.v[0].pattern, "R:FULL[block,2]");
    cr_expect_eq(g.v[1].value, 1073741824.0);
    am_gates_free(&g);
}

/* An OOM-cut peak is a lower bound: only certain answers pass. */
static int
eval1(const char *spec, const am_runsum *c, const am_runsum *s, char **out)
{
    am_gates g = {0};
    char err[256];
    cr_assert_eq(am_gates_parse(spec, &g, err, sizeof err), 0, "%s", err);
    size_t len = 0;
    FILE *f = open_memstream(out, &len);
    int k = am_gates_eval(&g, c, s, 1, f);
    fclose(f);
    am_gates_free(&g);
    return k;
}

Test(gates, oom_cut_peaks_decide_only_what_is_certain)
{
    am_runsum *c = run("control", 1), *s = run("cand", 1);
    char *out;
    /* candidate 1% above a complete control: pass; cut candidate: cannot decide */
    s->peak[AM_L_TENSOR] = c->peak[AM_L_TENSOR] / 100 * 101;
    cr_expect_eq(eval1("peak=+3%", c, s, &out), 0, "%s", out);
    free(out);
    s->oom = 1;
    cr_expect_eq(eval1("peak=+3%", c, s, &out), 1);
    cr_expect(strstr(out, "cannot decide") && strstr(out, "candidate stopped at an OOM"), "%s",
              out);
    free(out);
    cr_expect_eq(eval1("peak=80GiB", c, s, &out), 1);
    cr_expect(strstr(out, "cannot decide"), "%s", out);
    free(out);
    /* a cut control: a candidate below it passes (its true peak is higher still) */
    s->oom = 0;
    c->oom = 1;
    cr_expect_eq(eval1("peak=+3%", c, s, &out), 0, "%s", out);
    free(out);
    /* ... a rise over it is not known */
    s->peak[AM_L_TENSOR] = c->peak[AM_L_TENSOR] / 100 * 110;
    cr_expect_eq(eval1("peak=+3%", c, s, &out), 1);
    cr_expect(strstr(out, "control stopped at an OOM"), "%s", out);
    free(out);
    /* a complete run over an absolute threshold fails plainly */
    c->oom = 0;
    cr_expect_eq(eval1("peak=70GiB", c, s, &out), 1);
    cr_expect(strstr(out, "> 70.00 GiB") && !strstr(out, "cannot decide"), "%s", out);
    free(out);
    free(c), free(s);
}
