/* test_tensor_mode.c: RECOMPSHIM_TENSORS decisions (shim/tensor_mode.c),
 * from the allocator configuration and the command line alone. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tensor_mode.h"

/* tensor_mode.c logs through rs_log. */
void rs_log(int level, const char *fmt, ...) { (void)level; (void)fmt; }

#define CMD(s) s, sizeof(s) - 1

Test(tensor_mode, alloc_conf_parsing)
{
    cr_assert(rs_alloc_conf_has("expandable_segments:True", "expandable_segments", "true"));
    cr_assert(rs_alloc_conf_has("max_split_size_mb:128, backend:native", "backend", "native"));
    cr_assert(!rs_alloc_conf_has("expandable_segments:False", "expandable_segments", "true"));
    cr_assert(!rs_alloc_conf_has("backend:nativeX", "backend", "native"));
    cr_assert(!rs_alloc_conf_has("xbackend:native", "backend", "native"));
    cr_assert(!rs_alloc_conf_has(NULL, "backend", "native"));
    cr_assert(!rs_alloc_conf_has("", "backend", "native"));
}

Test(tensor_mode, async_accepted_by_default)
{
    cr_assert_eq(rs_tensor_refusals_for("async", NULL, "expandable_segments:False",
                                        CMD("python\0train.py\0--lr\0001")),
                 0);
}

Test(tensor_mode, async_refusals)
{
    cr_assert_eq(rs_tensor_refusals_for("async", "backend:native", NULL, CMD("python")),
                 RS_REFUSE_ASYNC_BACKEND_NATIVE);
    cr_assert_eq(rs_tensor_refusals_for("async", NULL, "expandable_segments:True", CMD("python")),
                 RS_REFUSE_ASYNC_EXPANDABLE);
    cr_assert_eq(rs_tensor_refusals_for("async", NULL, NULL,
                                        CMD("python\0pretrain_gpt.py\0--record-memory-history")),
                 RS_REFUSE_ASYNC_MEMORY_HISTORY);
}

Test(tensor_mode, nocache_refusals)
{
    cr_assert_eq(rs_tensor_refusals_for("nocache", NULL, "backend:cudaMallocAsync", CMD("python")),
                 RS_REFUSE_NOCACHE_BACKEND_ASYNC);
    cr_assert_eq(rs_tensor_refusals_for("nocache", NULL, NULL,
                                        CMD("python\0p.py\0--cuda-graph-impl\0local")),
                 RS_REFUSE_NOCACHE_CUDA_GRAPHS);
    cr_assert_eq(rs_tensor_refusals_for("nocache", NULL, NULL,
                                        CMD("python\0p.py\0--cuda-graph-impl=transformer_engine")),
                 RS_REFUSE_NOCACHE_CUDA_GRAPHS);
    cr_assert_eq(rs_tensor_refusals_for("nocache", NULL, NULL,
                                        CMD("python\0p.py\0--enable-cuda-graph")),
                 RS_REFUSE_NOCACHE_CUDA_GRAPHS);
    /* --cuda-graph-impl none is no graph at all */
    cr_assert_eq(rs_tensor_refusals_for("nocache", NULL, NULL,
                                        CMD("python\0p.py\0--cuda-graph-impl\0none")),
                 0);
    /* a flag that only starts with the name is another flag */
    cr_assert_eq(rs_tensor_refusals_for("nocache", NULL, NULL,
                                        CMD("python\0p.py\0--enable-cuda-graphx")),
                 0);
}

Test(tensor_mode, unknown_mode)
{
    cr_assert_eq(rs_tensor_refusals_for("fast", NULL, NULL, CMD("python")),
                 RS_REFUSE_UNKNOWN_MODE);
}

Test(tensor_mode, apply_async_keeps_options_and_sets_the_used_variable)
{
    setenv("RECOMPSHIM_TENSORS", "async", 1);
    unsetenv("PYTORCH_ALLOC_CONF");
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:256", 1);
    rs_config_load();
    rs_tensor_mode_apply();
    cr_assert_eq(rs_tensor_mode(), RS_MODE_ASYNC);
    cr_assert_str_eq(getenv("PYTORCH_CUDA_ALLOC_CONF"), "max_split_size_mb:256,backend:cudaMallocAsync");
    cr_assert_null(getenv("PYTORCH_ALLOC_CONF"));
}

Test(tensor_mode, apply_async_sets_both_when_neither)
{
    setenv("RECOMPSHIM_TENSORS", "async", 1);
    unsetenv("PYTORCH_ALLOC_CONF");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    rs_config_load();
    rs_tensor_mode_apply();
    cr_assert_str_eq(getenv("PYTORCH_CUDA_ALLOC_CONF"), "backend:cudaMallocAsync");
    cr_assert_str_eq(getenv("PYTORCH_ALLOC_CONF"), "backend:cudaMallocAsync");
}

Test(tensor_mode, apply_refusal_leaves_environment)
{
    setenv("RECOMPSHIM_TENSORS", "async", 1);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
    unsetenv("PYTORCH_ALLOC_CONF");
    rs_config_load();
    rs_tensor_mode_apply();
    cr_assert_eq(rs_tensor_mode(), RS_MODE_DEFAULT);
    cr_assert_eq(rs_tensor_refusals(), RS_REFUSE_ASYNC_EXPANDABLE);
    cr_assert_str_eq(getenv("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True");
    cr_assert_null(getenv("PYTORCH_ALLOC_CONF"));
    cr_assert_not_null(strstr(rs_tensor_note(), "refused"));
}

Test(tensor_mode, apply_nocache)
{
    setenv("RECOMPSHIM_TENSORS", "nocache", 1);
    unsetenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    unsetenv("PYTORCH_ALLOC_CONF");
    rs_config_load();
    rs_tensor_mode_apply();
    cr_assert_eq(rs_tensor_mode(), RS_MODE_NOCACHE);
    cr_assert_str_eq(getenv("PYTORCH_NO_CUDA_MEMORY_CACHING"), "1");
}
