/* test_nvtx: NVTX through the genuine NVTX3 loader into the shim's
 * injection: per-thread nesting, renames, domains, registered strings,
 * marks, start/end across threads, and two dlopen'ed modules. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

/* "worker I tid=T pthread=P first=.. outer=.. inner=.." */
typedef struct worker_out {
    int tid;
    char pthread[32], first[32], outer[32], inner[32];
} worker_out;

static void
parse_worker(const char *out, int i, worker_out *w)
{
    char key[32];
    snprintf(key, sizeof key, "worker %d ", i);
    const char *l = strstr(out, key);
    cr_assert(l != NULL, "no '%s' in output:\n%s", key, out);
    cr_assert(sscanf(l + strlen(key), "tid=%d pthread=%31s first=%31s outer=%31s inner=%31s", &w->tid, w->pthread,
                     w->first, w->outer, w->inner) == 5,
              "bad line: %.200s", l);
}

Test(nvtx, threads_nesting_and_renames)
{
    static const char *const names[3] = { "worker_a", "worker_b", "pt_autograd_0" };
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_threads")), NULL);

    for (int i = 0; i < 3; i++) {
        worker_out w;
        parse_worker(r.out, i, &w);
        char e[14][256];
        int k = 0;
#define E(...) snprintf(e[k++], 256, __VA_ARGS__)
        E("THREAD thread_tid=%d pthread=%s name=\"itp_threads\" rename=0", w.tid, w.pthread);
        E("ALLOC api=cudaMalloc mem=device dev=0 ptr=%s size=%d stream=0x0 status=0", w.first, 256 * (i + 1));
        E("THREAD thread_tid=%d pthread=%s name=\"%s\" rename=1", w.tid, w.pthread, names[i]);
        E("NVTX_PUSH domain=default name=\"T%d.outer\" depth=1 category=0", i);
        E("ALLOC api=cudaMalloc mem=device dev=0 ptr=%s size=%d stream=0x0 status=0", w.outer, 4096 * (i + 1));
        E("NVTX_PUSH domain=default name=\"T%d.inner\" depth=2 category=0", i);
        E("ALLOC api=cudaMalloc mem=device dev=0 ptr=%s size=%d stream=0x0 status=0", w.inner, 512 * (i + 1) + 100);
        E("NVTX_PUSH domain=default name=\"T%d.leaf\" depth=3 category=0", i);
        E("NVTX_POP domain=default depth=2");
        E("FREE api=cudaFree mem=device dev=0 ptr=%s stream=0x0 status=0", w.inner);
        E("NVTX_POP domain=default depth=1");
        E("FREE api=cudaFree mem=device dev=0 ptr=%s stream=0x0 status=0", w.outer);
        E("NVTX_POP domain=default depth=0");
        E("FREE api=cudaFree mem=device dev=0 ptr=%s stream=0x0 status=0", w.first);
#undef E
        const char *ev[15];
        for (int j = 0; j < k; j++)
            ev[j] = e[j];
        ev[k] = NULL;
        char what[32];
        snprintf(what, sizeof what, "worker %d (%s)", i, names[i]);
        it_expect_seq(&d, "THREAD ALLOC FREE NVTX_PUSH NVTX_POP NVTX_START NVTX_END NVTX_MARK", w.tid, ev, what);
    }

    /* main: "main.outer" was pushed before the trace existed (pre_trace) */
    int mtid;
    char mpt[32], mp[32];
    const char *l = strstr(r.out, "main tid=");
    cr_assert(l && sscanf(l, "main tid=%d pthread=%31s p=%31s", &mtid, mpt, mp) == 3, "%s", r.out);
    char e0[256], e2[256], e4[256];
    snprintf(e0, sizeof e0, "THREAD thread_tid=%d pthread=%s name=\"itp_threads\" rename=0", mtid, mpt);
    snprintf(e2, sizeof e2, "ALLOC api=cudaMalloc mem=device dev=0 ptr=%s size=1048576 stream=0x0 status=0", mp);
    snprintf(e4, sizeof e4, "FREE api=cudaFree mem=device dev=0 ptr=%s stream=0x0 status=0", mp);
    it_expect_seq(&d, "THREAD ALLOC FREE NVTX_PUSH NVTX_POP NVTX_START NVTX_END NVTX_MARK", mtid,
                  IT_SEQ(e0, "NVTX_PUSH domain=default name=\"main.outer\" depth=1 category=0 pre_trace=1", e2,
                         "NVTX_PUSH domain=default name=\"main.inner\" depth=2 category=0",
                         "NVTX_POP domain=default depth=1", e4, "NVTX_POP domain=default depth=0"),
                  "main thread");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(nvtx, domains_strings_marks_ranges)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_nvtx")), NULL);
    unsigned long long id1, id2;
    int mtid, etid;
    const char *l = strstr(r.out, "id1=");
    cr_assert(l && sscanf(l, "id1=%llu id2=%llu main_tid=%d ender_tid=%d", &id1, &id2, &mtid, &etid) == 4, "%s",
              r.out);
    cr_assert_neq(id1, id2);
    char s1[128], s2[128], s3[128], t0[128];
    snprintf(s1, sizeof s1, "NVTX_START id=%llu domain=default name=\"cross.range\"", id1);
    snprintf(s2, sizeof s2, "NVTX_START id=%llu domain=MyLib name=\"registered.message\"", id2);
    snprintf(s3, sizeof s3, "NVTX_END id=%llu", id2);
    it_expect_seq(&d, "ALLOC FREE NVTX_DOMAIN NVTX_PUSH NVTX_POP NVTX_START NVTX_END NVTX_MARK", mtid,
                  IT_SEQ("NVTX_DOMAIN id=1 name=\"EarlyDomain\"",
                         "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000000 size=4096 stream=0x0 status=0",
                         "NVTX_DOMAIN id=2 name=\"MyLib\"",
                         "NVTX_PUSH domain=MyLib name=\"registered.message\" depth=1 category=7",
                         "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000001000 size=8192 stream=0x0 status=0",
                         "NVTX_POP domain=MyLib depth=0",
                         "NVTX_PUSH domain=MyLib name=\"ascii.in.domain\" depth=1 category=0",
                         "NVTX_POP domain=MyLib depth=0",
                         "NVTX_MARK domain=default name=\"mark.default\"",
                         "NVTX_MARK domain=MyLib name=\"mark.in.domain\"",
                         "NVTX_PUSH domain=EarlyDomain name=\"early.range\" depth=1 category=0",
                         "NVTX_POP domain=EarlyDomain depth=0", s1, s2, s3,
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000001000 stream=0x0 status=0",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000000 stream=0x0 status=0"),
                  "main thread of p_nvtx");
    /* the range started on main is ended on the other thread */
    char end1[64];
    snprintf(end1, sizeof end1, "NVTX_END id=%llu", id1);
    snprintf(t0, sizeof t0, "THREAD thread_tid=%d ", etid);
    char **got;
    size_t n = it_select(&d, "THREAD NVTX_END NVTX_PUSH NVTX_POP ALLOC FREE", etid, &got);
    cr_assert_eq(n, 2, "ender thread records: %zu", n);
    cr_expect(!strncmp(got[0], t0, strlen(t0)) && strstr(got[0], "name=\"itp_nvtx\" rename=0"), "%s", got[0]);
    cr_expect_str_eq(got[1], end1);
    it_free_lines(got, n);
    /* the registered string is defined once as a STRING record */
    size_t strs = 0;
    for (size_t i = 0; i < d.nlines; i++)
        if (!strncmp(d.lines[i], "STRING ", 7) && strstr(d.lines[i], " text=\"registered.message\""))
            strs++;
    cr_expect_eq(strs, 1, "STRING records for registered.message: %zu", strs);
    cr_expect(strstr(it_line(&d, "header device="), "nvtx_foreign=no") != NULL);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(nvtx, two_dlopened_modules)
{
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_modules"), RS_MOD_A_PATH, RS_MOD_B_PATH), NULL);
    it_expect_seq(&d, "ALLOC FREE NVTX_PUSH NVTX_POP NVTX_MARK NVTX_START NVTX_END", 0,
                  IT_SEQ("ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000000 size=100 stream=0x0 status=0",
                         "NVTX_PUSH domain=default name=\"main.range\" depth=1 category=0",
                         "NVTX_PUSH domain=default name=\"mod_a.range\" depth=2 category=0",
                         "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000200 size=1111 stream=0x0 status=0",
                         "NVTX_MARK domain=default name=\"mod_a.range.mark\"",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000200 stream=0x0 status=0",
                         "NVTX_POP domain=default depth=1",
                         "NVTX_PUSH domain=default name=\"mod_b.range\" depth=2 category=0",
                         "ALLOC api=cudaMalloc mem=device dev=0 ptr=0x7e0000000800 size=2222 stream=0x0 status=0",
                         "NVTX_MARK domain=default name=\"mod_b.range.mark\"",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000800 stream=0x0 status=0",
                         "NVTX_POP domain=default depth=1", "NVTX_POP domain=default depth=0",
                         "FREE api=cudaFree mem=device dev=0 ptr=0x7e0000000000 stream=0x0 status=0"),
                  "p_modules");
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

Test(nvtx, dlopened_module_callers_resolved)
{
    /* Allocations made from a library dlopen'ed after the trace was created
     * must still resolve to that library: its MODULE record must exist. */
    it_ctx c;
    it_run r;
    it_dump d;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_modules"), RS_MOD_A_PATH, RS_MOD_B_PATH), NULL);
    static const char *const want[2][2] = { { "size=1111", "libitmod_a.so+0x" }, { "size=2222", "libitmod_b.so+0x" } };
    for (int m = 0; m < 2; m++) {
        const char *line = NULL;
        for (size_t i = 0; i < d.nlines; i++)
            if (!strncmp(d.lines[i], "ALLOC ", 6) && strstr(d.lines[i], want[m][0]))
                line = d.lines[i];
        cr_assert(line != NULL, "no ALLOC %s", want[m][0]);
        char lib[128] = "(none)";
        it_field(line, "caller_lib", lib, sizeof lib);
        cr_expect(!strncmp(lib, want[m][1], strlen(want[m][1])), "ALLOC %s: caller_lib expected %s..., got %s",
                  want[m][0], want[m][1], lib);
    }
    size_t mods[2] = { 0, 0 };
    for (size_t i = 0; i < d.nlines; i++)
        if (!strncmp(d.lines[i], "MODULE ", 7))
            for (int m = 0; m < 2; m++)
                mods[m] += strstr(d.lines[i], m ? "/libitmod_b.so\"" : "/libitmod_a.so\"") != NULL;
    cr_expect_eq(mods[0], 1, "MODULE records for libitmod_a.so: %zu", mods[0]);
    cr_expect_eq(mods[1], 1, "MODULE records for libitmod_b.so: %zu", mods[1]);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}
