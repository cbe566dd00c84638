/* test_tensor_modes: RECOMPSHIM_TENSORS=async|nocache (docs/architecture.md, Modes).
 * p_tensor_env prints the allocator variables as the job sees them at
 * main() and makes one cudaMallocAsync (cudaMalloc with P_TENSOR_SYNC=1).
 *
 * Accepted: the variables are set as specified, header mode=async|nocache,
 * no refusal bit. Refused: exactly one "recompshim:" line on stderr, the
 * variables untouched, header mode=default, the refusal bit, a META note. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "itest_fields.h"
#include "recomp/trace_format.h"

#define UNSET "(unset)"

typedef struct tm_case {
    const char *const *env;
    const char *const *argv;    /* extra arguments (NULL: none) */
    const char *alloc_conf;     /* expected PYTORCH_ALLOC_CONF at main() */
    const char *cuda_alloc_conf;
    const char *no_caching;     /* PYTORCH_NO_CUDA_MEMORY_CACHING */
    const char *mode;           /* header mode= */
    uint32_t refusals;          /* header refusal bits */
} tm_case;

static void
run_case(const tm_case *tc)
{
    it_ctx c;
    it_run r;
    it_dump d;
    const char *argv[16] = { IT_PROG("p_tensor_env") };
    size_t na = 1;
    for (size_t i = 0; tc->argv && tc->argv[i] && na < 15; i++)
        argv[na++] = tc->argv[i];
    argv[na] = NULL;
    it_init(&c);
    it_run_traced(&c, &r, &d, argv, tc->env);

    char v[512];
    cr_assert(it_out_field(r.out, "PYTORCH_ALLOC_CONF", v, sizeof v), "%s", r.out);
    cr_expect_str_eq(v, tc->alloc_conf, "PYTORCH_ALLOC_CONF at main(): %s, expected %s", v, tc->alloc_conf);
    cr_assert(it_out_field(r.out, "PYTORCH_CUDA_ALLOC_CONF", v, sizeof v), "%s", r.out);
    cr_expect_str_eq(v, tc->cuda_alloc_conf, "PYTORCH_CUDA_ALLOC_CONF at main(): %s, expected %s", v,
                     tc->cuda_alloc_conf);
    cr_assert(it_out_field(r.out, "PYTORCH_NO_CUDA_MEMORY_CACHING", v, sizeof v), "%s", r.out);
    cr_expect_str_eq(v, tc->no_caching, "PYTORCH_NO_CUDA_MEMORY_CACHING at main(): %s, expected %s", v,
                     tc->no_caching);

    const char *l = it_line(&d, "header device=");
    cr_assert(l != NULL);
    cr_assert(it_field(l, "mode", v, sizeof v), "%s", l);
    cr_expect_str_eq(v, tc->mode, "header mode=%s, expected %s", v, tc->mode);

    rs_file_header h;
    it_read_header(c.out, &h);
    cr_expect_eq(h.refusals, tc->refusals, "header refusals %#x, expected %#x", h.refusals, tc->refusals);

    size_t lines = it_count_prefix(r.err, "recompshim:");
    size_t notes = 0;
    for (size_t i = 0; i < d.nlines; i++) {
        char kind[32], key[32];
        it_kind(d.lines[i], kind, sizeof kind);
        if (!strcmp(kind, "META") && it_field(d.lines[i], "key", key, sizeof key) && !strcmp(key, "note"))
            notes++;
    }
    if (tc->refusals) {
        cr_expect_eq(lines, 1, "refusal: %zu 'recompshim:' lines on stderr, expected 1:\n%s", lines, r.err);
        cr_expect_geq(notes, 1, "refusal: no META note");
    } else {
        cr_expect_eq(lines, 0, "accepted: 'recompshim:' lines on stderr:\n%s", r.err);
        cr_expect_eq(notes, 0, "accepted: META note");
    }
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

#define ASYNC "backend:cudaMallocAsync"

/* ---- async accepted ---- */

Test(tensor_modes, async_neither_set_sets_both)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async"), NULL, ASYNC, ASYNC, UNSET, "async", 0 };
    run_case(&tc);
}

Test(tensor_modes, async_keeps_cuda_conf_options)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"), NULL,
                   UNSET, "expandable_segments:False," ASYNC, UNSET, "async", 0 };
    run_case(&tc);
}

Test(tensor_modes, async_keeps_alloc_conf_options)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async", "PYTORCH_ALLOC_CONF=max_split_size_mb:512"), NULL,
                   "max_split_size_mb:512," ASYNC, UNSET, UNSET, "async", 0 };
    run_case(&tc);
}

Test(tensor_modes, async_both_set_both_changed)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async", "PYTORCH_ALLOC_CONF=max_split_size_mb:512",
                          "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6"),
                   NULL, "max_split_size_mb:512," ASYNC, "garbage_collection_threshold:0.6," ASYNC, UNSET, "async", 0 };
    run_case(&tc);
}

Test(tensor_modes, async_already_async_unchanged)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async", "PYTORCH_CUDA_ALLOC_CONF=" ASYNC), NULL, UNSET, ASYNC, UNSET,
                   "async", 0 };
    run_case(&tc);
}

Test(tensor_modes, async_seen_flag)
{
    /* RS_HDR_ASYNC_SEEN: set once a cudaMallocAsync succeeded, so the
     * analyzer knows the async mode took effect; not set without one. */
    it_ctx c;
    it_run r;
    it_dump d;
    rs_file_header h;
    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_tensor_env")), IT_ENV("RECOMPSHIM_TENSORS=async"));
    it_read_header(c.out, &h);
    cr_expect(h.flags & RS_HDR_ASYNC_SEEN, "flags %#x lack ASYNC_SEEN after a cudaMallocAsync", h.flags);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);

    it_init(&c);
    it_run_traced(&c, &r, &d, IT_ARGV(IT_PROG("p_tensor_env")), IT_ENV("RECOMPSHIM_TENSORS=async", "P_TENSOR_SYNC=1"));
    it_read_header(c.out, &h);
    cr_expect(!(h.flags & RS_HDR_ASYNC_SEEN), "flags %#x have ASYNC_SEEN without any cudaMallocAsync", h.flags);
    it_dump_free(&d);
    it_run_free(&r);
    it_fini(&c);
}

/* ---- async refused ---- */

Test(tensor_modes, async_refused_backend_native)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async", "PYTORCH_CUDA_ALLOC_CONF=backend:native"), NULL, UNSET,
                   "backend:native", UNSET, "default", RS_REFUSE_ASYNC_BACKEND_NATIVE };
    run_case(&tc);
}

Test(tensor_modes, async_refused_backend_native_in_alloc_conf)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async", "PYTORCH_ALLOC_CONF=max_split_size_mb:64,backend:native"),
                   NULL, "max_split_size_mb:64,backend:native", UNSET, UNSET, "default",
                   RS_REFUSE_ASYNC_BACKEND_NATIVE };
    run_case(&tc);
}

Test(tensor_modes, async_refused_expandable_segments)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async", "PYTORCH_ALLOC_CONF=expandable_segments:True"), NULL,
                   "expandable_segments:True", UNSET, UNSET, "default", RS_REFUSE_ASYNC_EXPANDABLE };
    run_case(&tc);
}

Test(tensor_modes, async_refused_memory_history)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=async"), IT_ARGV("--lr", "0.1", "--record-memory-history"), UNSET,
                   UNSET, UNSET, "default", RS_REFUSE_ASYNC_MEMORY_HISTORY };
    run_case(&tc);
}

/* ---- nocache ---- */

Test(tensor_modes, nocache_accepted)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=nocache", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"),
                   IT_ARGV("--cuda-graph-impl", "none"), UNSET, "expandable_segments:False", "1", "nocache", 0 };
    run_case(&tc);
}

Test(tensor_modes, nocache_refused_backend_async)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=nocache", "PYTORCH_CUDA_ALLOC_CONF=" ASYNC), NULL, UNSET, ASYNC, UNSET,
                   "default", RS_REFUSE_NOCACHE_BACKEND_ASYNC };
    run_case(&tc);
}

Test(tensor_modes, nocache_refused_enable_cuda_graph)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=nocache"), IT_ARGV("--enable-cuda-graph"), UNSET, UNSET, UNSET,
                   "default", RS_REFUSE_NOCACHE_CUDA_GRAPHS };
    run_case(&tc);
}

Test(tensor_modes, nocache_refused_external_cuda_graph)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=nocache"), IT_ARGV("--external-cuda-graph"), UNSET, UNSET, UNSET,
                   "default", RS_REFUSE_NOCACHE_CUDA_GRAPHS };
    run_case(&tc);
}

Test(tensor_modes, nocache_refused_cuda_graph_impl)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=nocache"), IT_ARGV("--cuda-graph-impl", "local"), UNSET, UNSET,
                   UNSET, "default", RS_REFUSE_NOCACHE_CUDA_GRAPHS };
    run_case(&tc);
}

Test(tensor_modes, nocache_refused_cuda_graph_impl_equals)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=nocache"), IT_ARGV("--cuda-graph-impl=transformer_engine"), UNSET,
                   UNSET, UNSET, "default", RS_REFUSE_NOCACHE_CUDA_GRAPHS };
    run_case(&tc);
}

/* ---- other ---- */

Test(tensor_modes, unknown_mode_refused)
{
    tm_case tc = { IT_ENV("RECOMPSHIM_TENSORS=bogus", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"), NULL,
                   UNSET, "expandable_segments:False", UNSET, "default", RS_REFUSE_UNKNOWN_MODE };
    run_case(&tc);
}

Test(tensor_modes, default_mode_untouched)
{
    tm_case tc = { IT_ENV("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"), IT_ARGV("--enable-cuda-graph"), UNSET,
                   "expandable_segments:True", UNSET, "default", 0 };
    run_case(&tc);
}
