/* test_shim.c: the analyzer end to end through the real shim and the mock
 * CUDA runtime: prog_megatron runs under LD_PRELOAD=librecompshim.so, its
 * trace goes through recomp-analyze --json, and the answers are exact. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abuild.h"
#include "itest.h"

Test(analyze_shim, megatron_ranges_through_the_shim)
{
    it_ctx c;
    it_run r;
    it_init(&c);
    it_run_prog(&c, &r, c.out, IT_ARGV(RS_ANALYZE_PROG), IT_ENV("RANK=0", "WORLD_SIZE=1"));
    cr_assert(r.exited && r.code == 0, "program failed: %s\n%s", r.out, r.err);
    char **paths;
    size_t n = it_find_traces(c.out, &paths);
    cr_assert_eq(n, 1, "one trace");
    char *out, *err;
    int rc = ab_run(AB_ARGS("--json", c.out), &out, &err);
    cr_assert_eq(rc, 0, "recomp-analyze: %s", err);
    yajl_val j = ab_json(out);
    cr_assert(j, "JSON: %s", out);

    const char *pk = "ranks[0].peak";
    cr_expect_eq(ab_int(j, "ranks[0].rank"), 0);
    cr_expect_eq(ab_int(j, "ranks[0].peak.bytes"), 1000 + 100 + 2000 + 3000 + 2001 + 3001 + 500);
    cr_expect_str_eq(ab_str(j, "ranks[0].peak.phase"), "backward_replay");
    cr_expect_str_eq(ab_str(j, "ranks[0].peak.set_by.boundary"), "mlp");
    cr_expect_eq(ab_int(j, "ranks[0].peak.set_by.layer"), 2);
    struct { const char *ph, *bd; int layer; long long bytes; } want[] = {
        {"forward", "mlp", 2, 3001},       {"forward", "mlp", 1, 3000},
        {"forward", "core_attn", 2, 2001}, {"forward", "core_attn", 1, 2000},
        {"init", "params", 0, 1000},       {"backward_replay", "mlp", 2, 500},
        {"forward", "embedding", 0, 100},
    };
    yajl_val arr = ab_get(j, "ranks[0].peak.contributors");
    cr_assert(arr && YAJL_IS_ARRAY(arr));
    cr_expect_eq(arr->u.array.len, 7, "%s", out);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int k = ab_contrib(j, pk, want[i].ph, want[i].bd, want[i].layer);
        cr_assert(k >= 0, "no contributor %s/%s/%d in\n%s", want[i].ph, want[i].bd,
                  want[i].layer, out);
        char p[128];
        snprintf(p, sizeof p, "%s.contributors[%d].bytes", pk, k);
        cr_expect_eq(ab_int(j, p), want[i].bytes);
        snprintf(p, sizeof p, "%s.contributors[%d].count", pk, k);
        cr_expect_eq(ab_int(j, p), 1);
    }
    cr_expect_str_eq(ab_str(j, "ranks[0].iterations[0].phases[0].phase"), "forward");
    cr_expect_str_eq(ab_str(j, "ranks[0].iterations[0].phases[1].phase"), "backward_replay");
    yajl_tree_free(j);
    free(out);
    free(err);
    it_free_paths(paths, n);
    it_run_free(&r);
    it_fini(&c);
}
