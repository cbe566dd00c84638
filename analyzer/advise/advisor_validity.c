/* advisor_validity.c: which recompute settings the recorded configuration
 * allows ([M] in docs/sources.md, TransformerConfig.__post_init__ and validate_args),
 * with Megatron's own message as the reason; and which labels the model has.
 */
#include <stdio.h>
#include <string.h>

#include "advisor.h"

/* A hybrid model's labels (megatron-core 0.19.2, hybrid_layer_specs.py): each
 * symbol is one layer with one half; Megatron accepts every label of
 * TransformerConfig's list, but none reaches a Mamba layer (MambaLayer and
 * MambaMixer read no recompute_modules), core_attn acts on the attention layers
 * (*), mlp on the MLP layers (-), the MoE labels and layernorm (the MoE layer's
 * pre-MLP TENorm; the other norms are fused into linear_qkv, linear_fc1 and
 * in_proj) on the MoE layers (E); full recompute checkpoints every layer. */
static unsigned
hybrid_labels(const adv_cfg *c)
{
    unsigned m = 0;
    if (adv_cfg_hybrid_has(c, '*'))
        m |= 1u << ADV_L_core_attn;
    if (adv_cfg_hybrid_has(c, '-'))
        m |= 1u << ADV_L_mlp;
    if (adv_cfg_hybrid_has(c, 'E')) {
        m |= 1u << ADV_L_moe | 1u << ADV_L_moe_act | 1u << ADV_L_layernorm;
        if (c->shared_ffn)
            m |= 1u << ADV_L_shared_experts;
    }
    return m;
}

unsigned
adv_model_labels(const adv_cfg *c)
{
    if (c->hybrid[0])
        return hybrid_labels(c);
    unsigned m = 1u << ADV_L_core_attn | 1u << ADV_L_layernorm;
    int dense = 0, moe = 0;
    for (int l = 0; l < (c->num_layers > 0 ? c->num_layers : 1); l++) {
        if (adv_cfg_is_moe_layer(c, l))
            moe = 1;
        else
            dense = 1;
    }
    if (dense)
        m |= 1u << ADV_L_mlp;
    if (moe) {
        m |= 1u << ADV_L_moe | 1u << ADV_L_moe_act;
        if (c->shared_ffn)
            m |= 1u << ADV_L_shared_experts;
    }
    if (c->mla)
        m |= 1u << ADV_L_mla_up_proj;
    return m;
}

/* observed, not validated (docs/validation/megatron-core.md, test `mcore bias
 * checkpoint`): with add_bias_linear the dense MLP's linear_fc2 has
 * skip_bias_add and returns its bias Parameter; TransformerLayer runs the MLP
 * under tensor_parallel.checkpoint (CheckpointFunction, reentrant), whose
 * output makes that Parameter non-leaf, and backward replays the MLP without
 * end. Only `mlp` on dense layers: MoE layers return no bias (MoELayer asserts
 * it), shared experts refuse biases, core attention returns no bias, and full
 * recompute checkpoints whole layers, whose output is past the bias-add. */
const char *const ADV_BIAS_MLP_REASON =
    "mlp recompute with add_bias_linear (Megatron's default, off with --disable-bias-linear) "
    "never ends in megatron-core 0.19.2: the checkpoint returns fc2's bias Parameter, making "
    "it non-leaf, and backward replays the MLP again and again";

#define FAIL(...) do { snprintf(reason, n, __VA_ARGS__); return 0; } while (0)

int
adv_valid(const adv_cfg *c, const adv_setting *s, char *reason, size_t n)
{
    reason[0] = 0;
    int graphs = strcmp(c->cuda_graph_impl, "none") != 0 && c->cuda_graph_impl[0];
    if (c->cpu_offloading)
        FAIL("CPU offloading does not work when activation recomputation is enabled");
    if (s->full_method) {
        if (graphs && strcmp(c->cuda_graph_impl, "full_iteration") != 0)
            FAIL("full recompute is only supported with full iteration CUDA graph.");
        if (c->ep_overlap)
            FAIL("disable full recomputation when enabling overlap_moe_expert_parallel_comm");
        return 1;
    }
    unsigned m = s->labels;
    if ((m & (1u << ADV_L_mlp)) && c->bias_linear == 1 && (adv_model_labels(c) & 1u << ADV_L_mlp))
        FAIL("%s", ADV_BIAS_MLP_REASON);
    if ((m & (1u << ADV_L_moe_act)) && !c->grouped_gemm)
        FAIL("moe_act in recompute_modules is only supported with moe_grouped_gemm.");
    /* observed, not validated: megatron-core 0.19.2's CheckpointWithoutOutput
     * (tensor_parallel/random.py), which layernorm recompute runs through,
     * reads TE's FP8GlobalStateManager, imported only with TE
     * (docs/validation/megatron-core.md) */
    if ((m & (1u << ADV_L_layernorm)) && c->no_te)
        FAIL("layernorm recompute needs Transformer Engine (megatron-core 0.19.2 without it: "
             "NameError: name 'FP8GlobalStateManager' is not defined)");
    if ((m & (1u << ADV_L_mla_up_proj)) && !c->mla)
        FAIL("mla_up_proj in recompute_modules is only supported with multi_latent_attention.");
    if ((m & (1u << ADV_L_shared_experts)) && c->shared_ffn && c->shared_overlap)
        FAIL("shared_experts recompute cannot work with --moe-shared-expert-overlap.");
    if ((m & (1u << ADV_L_moe)) && c->ep_overlap)
        FAIL("disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm");
    if (c->fp8 && (m & (1u << ADV_L_moe_act | 1u << ADV_L_layernorm)) &&
        strcmp(c->fp8_recipe, "delayed") == 0)
        FAIL("Delayed scaling does not support moe_act and layernorm recompute for fp8.");
    if ((m & (1u << ADV_L_moe)) && strcmp(c->cuda_graph_impl, "transformer_engine") == 0 &&
        strstr(c->cuda_graph_modules, "moe_router"))
        FAIL("moe recompute is not supported with moe_router CUDA graph");
    if ((m & (1u << ADV_L_gdn_norm_out)))
        FAIL("gdn_norm_out in recompute_modules is only supported with "
             "experimental_attention_variant='gdn' or 'gdn2'.");
    if ((m & (1u << ADV_L_mhc)))
        FAIL("'mhc' in recompute_modules requires enable_mhc_connections=True.");
    return 1;
}
