/* test_pyframes.c: Python frames to Megatron ranges (analyzer/model/pyframes.c).
 *
 * The mapping of Megatron-Core 0.19.2 stacks (qualified names as the shim
 * records them) to catalog rows, and the synthesizer's ranges on sequences
 * of allocations and frees: what opens and closes when, the code between
 * two calls, the trace's own range made once, frees that only open. */
#include <criterion/criterion.h>
#include <string.h>

#include "catalog.h"
#include "pyframes.h"

/* the range names of stack `q` (outermost first), joined by " > " */
static void
mapped(const char *const *q, size_t n, char *out, size_t cap)
{
    uint32_t lens[64];
    uint16_t rows[AM_PYF_MAX];
    for (size_t i = 0; i < n; i++)
        lens[i] = (uint32_t)strlen(q[i]);
    size_t k = am_pyframes_map(q, lens, n, rows, AM_PYF_MAX);
    out[0] = 0;
    for (size_t i = 0; i < k; i++) {
        if (i)
            strncat(out, " > ", cap - strlen(out) - 1);
        strncat(out, am_pyframes_range(rows[i]), cap - strlen(out) - 1);
    }
}

#define N(a) (sizeof(a) / sizeof(*(a)))

Test(pyframes, megatron_core_0_19_stacks)
{
    char got[1024];
    const char *attn[] = {"pretrain", "train_step", "forward_step", "GPTModel.forward",
                          "TransformerBlock.forward", "TransformerLayer.forward",
                          "TransformerLayer._forward_attention", "Module._wrapped_call_impl",
                          "Module._call_impl", "Attention.forward",
                          "DotProductAttention.forward"};
    /* torch's Module.__call__ frames between them change nothing */
    mapped(attn, N(attn), got, sizeof got);
    cr_assert_str_eq(got, "py:TransformerLayer._forward_attention > "
                          "py:TransformerLayer._forward_attention.self_attention > "
                          "py:Attention.forward.core_attention");
    const char *norm[] = {"TransformerLayer._forward_mlp", "TransformerLayer._forward_pre_mlp_layernorm",
                          "RMSNorm.forward"};
    mapped(norm, N(norm), got, sizeof got);
    cr_assert_str_eq(got, "py:TransformerLayer._forward_mlp > py:TransformerLayer.pre_mlp_layernorm");
    /* a norm outside a layer (the final norm, a user's model) maps to nothing */
    const char *final[] = {"TransformerBlock.forward", "RMSNorm.forward"};
    mapped(final, N(final), got, sizeof got);
    cr_assert_str_eq(got, "");
    /* MLP.forward outside a transformer layer is somebody else's MLP */
    const char *user[] = {"Model.forward", "MLP.forward", "ColumnParallelLinear.forward"};
    mapped(user, N(user), got, sizeof got);
    cr_assert_str_eq(got, "");
    /* a selective mlp replay: no .mlp (Megatron pushes it outside the checkpoint) */
    const char *replay[] = {"CheckpointFunction.backward", "MLP.forward",
                            "ColumnParallelLinear.forward"};
    mapped(replay, N(replay), got, sizeof got);
    cr_assert_str_eq(got, "py:CheckpointFunction.backward > py:MLP.forward > "
                          "py:mlp.forward.linear_fc1");
    /* the core-attention checkpoint: one range, its inner custom_forward adds none */
    const char *ca[] = {"TransformerLayer._forward_attention", "Attention.forward",
                        "Attention._checkpointed_attention_forward", "checkpoint",
                        "CheckpointFunction.forward",
                        "Attention._checkpointed_attention_forward.<locals>.custom_forward",
                        "DotProductAttention.forward"};
    mapped(ca, N(ca), got, sizeof got);
    cr_assert_str_eq(got, "py:TransformerLayer._forward_attention > "
                          "py:TransformerLayer._forward_attention.self_attention > "
                          "py:Attention.forward.core_attention");
    const char *moe[] = {"MoETransformerLayer._forward_mlp", "MoELayer.forward",
                         "MoELayer.route", "TopKRouter.forward"};
    mapped(moe, N(moe), got, sizeof got);
    cr_assert_str_eq(got, "py:TransformerLayer._forward_mlp > py:TransformerLayer._forward_mlp.mlp > "
                          "py:MoELayer.moe_router");
    const char *opt[] = {"train_step", "ChainedOptimizer.step", "MixedPrecisionOptimizer.step",
                         "DistributedOptimizer.step_with_ready_grads", "AdamW.step"};
    mapped(opt, N(opt), got, sizeof got);
    cr_assert_str_eq(got, "py:optimizer.step");
}

/* ---- the synthesizer ---- */

static am_pysyn *S;
static char log_[2048];

static uint16_t
row_of(const char *const *q, size_t n, uint16_t *rows)
{
    uint32_t lens[32];
    for (size_t i = 0; i < n; i++)
        lens[i] = (uint32_t)strlen(q[i]);
    return (uint16_t)am_pyframes_map(q, lens, n, rows, AM_PYF_MAX);
}

/* an allocation (free: a tensor free) on thread 1 made in stack q: the
 * synthetic events before it appended to log_ as "+name" / "-" */
static void
ev(int is_free, const char *const *q, size_t n)
{
    uint16_t rows[AM_PYF_MAX];
    size_t k = row_of(q, n, rows);
    am_event e;
    memset(&e, 0, sizeof e);
    e.tid = 1;
    e.kind = is_free ? AM_EV_FREE : AM_EV_ALLOC;
    am_event out[2 * AM_PYF_MAX + 2];
    int m = am_pysyn_sync(S, &e, rows, k, is_free, out, N(out));
    cr_assert(m >= 0);
    for (int i = 0; i < m; i++) {
        cr_assert_eq(out[i].domain_id, AM_PYF_DOMAIN_ID);
        cr_assert_eq(out[i].tid, 1u);
        if (out[i].kind == AM_EV_RANGE_PUSH) {
            strcat(log_, "+");
            strncat(log_, out[i].name, out[i].name_len);
        } else {
            strcat(log_, "-");
        }
        strcat(log_, " ");
    }
    strcat(log_, is_free ? "f " : "a ");
}

static void
real(int push, const char *name)
{
    am_event e;
    memset(&e, 0, sizeof e);
    e.tid = 1;
    e.kind = push ? AM_EV_RANGE_PUSH : AM_EV_RANGE_POP;
    e.name = name;
    e.name_len = name ? (uint32_t)strlen(name) : 0;
    cr_assert_eq(am_pysyn_note(S, &e), 0);
}

static void
setup(void)
{
    S = am_pysyn_new();
    cr_assert(S);
    log_[0] = 0;
}

static void
teardown(void)
{
    am_pysyn_free(S);
}

#define L "TransformerLayer._forward_mlp"
#define M "MLP.forward"

TestSuite(pysyn, .init = setup, .fini = teardown);

Test(pysyn, mlp_calls_and_the_activation_between_them)
{
    const char *fc1[] = {L, M, "ColumnParallelLinear.forward"};
    const char *act[] = {L, M, "bias_swiglu_impl"};
    const char *fc2[] = {L, M, "RowParallelLinear.forward"};
    const char *out[] = {L, M};
    ev(0, fc1, 3);
    ev(0, act, 3);   /* code in MLP.forward after fc1: the activation */
    ev(0, fc2, 3);
    ev(0, out, 2);   /* after fc2: MLP.forward's own */
    ev(0, NULL, 0);  /* outside: all closes */
    cr_assert_str_eq(log_, "+py:TransformerLayer._forward_mlp +py:TransformerLayer._forward_mlp.mlp "
                           "+py:mlp.forward.linear_fc1 a "
                           "- +py:mlp.forward.activation a "
                           "- +py:mlp.forward.linear_fc2 a "
                           "- a "
                           "- - a ");
}

Test(pysyn, frees_open_ranges_but_never_close_them)
{
    const char *fc1[] = {L, M, "ColumnParallelLinear.forward"};
    const char *mlp[] = {L, M};
    const char *lay[] = {L};
    ev(0, mlp, 2);
    ev(1, fc1, 3);  /* a free deeper: opens fc1 */
    ev(1, lay, 1);  /* a free after MLP.forward returned: stays inside (its locals) */
    ev(0, lay, 1);  /* the next allocation outside closes */
    cr_assert_str_eq(log_, "+py:TransformerLayer._forward_mlp +py:TransformerLayer._forward_mlp.mlp a "
                           "+py:mlp.forward.linear_fc1 f "
                           "f "
                           "- - a ");
}

Test(pysyn, megatrons_own_range_is_not_made_again_nor_the_frames_around_it)
{
    const char *in[] = {"TransformerLayer._forward_attention", "Attention.forward"};
    const char *bda[] = {"TransformerLayer._forward_attention", "_bias_dropout_add_func"};
    real(1, "megatron.core.transformer.transformer_layer._forward_attention.self_attention");
    ev(0, in, 2);    /* nothing made: .self_attention is open, _forward_attention is outside it */
    real(0, NULL);
    ev(0, bda, 2);   /* the bias-dropout-add after the attention: a range of its own */
    cr_assert_str_eq(log_, "a +py:TransformerLayer._forward_attention.self_attn_bda a ");
}

Test(pysyn, stack_without_megatron_frames_closes_everything)
{
    const char *in[] = {"CheckpointFunction.backward", "MLP.forward"};
    ev(0, in, 2);
    ev(0, NULL, 0);  /* C++ autograd: no Python frame */
    cr_assert_str_eq(log_, "+py:CheckpointFunction.backward +py:MLP.forward a - - a ");
    am_pysyn_reset(S);
    log_[0] = 0;
    ev(0, in, 2);    /* after a reset the thread starts empty */
    cr_assert_str_eq(log_, "+py:CheckpointFunction.backward +py:MLP.forward a ");
}
