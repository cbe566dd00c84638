/* The advisor's configuration parser (analyzer/advise/advisor_config.c): Megatron's
 * command line, --config FILE in YAML and JSON with TransformerConfig field
 * names, Megatron-Bridge / NeMo overrides, precedence (file < overrides < CLI
 * flags) and the list of settings that matter and were not recorded. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "advisor.h"

static void
read_cfg(const char *const *argv, size_t argc, const char *extra, adv_cfg *c)
{
    am_meta m;
    memset(&m, 0, sizeof m);
    m.argc = argc;
    m.argv = argv;
    m.world_size = 8;
    memset(c, 0, sizeof *c);
    cr_assert_eq(adv_config_read(&m, extra, "/nonexistent", c), 0);
}

static char *
write_tmp(const char *suffix, const char *text)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/advcfg-%d-XXXXXX%s", (int)getpid(), suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

#define M(l) (1u << ADV_L_##l)

Test(config, command_line_exact_spellings)
{
    const char *argv[] = {"python", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size",
                          "4096", "--num-attention-heads", "32", "--seq-length", "8192",
                          "--micro-batch-size", "1", "--tensor-model-parallel-size", "2",
                          "--pipeline-model-parallel-size", "2", "--sequence-parallel",
                          "--recompute-granularity", "selective", "--recompute-modules",
                          "core_attn", "mlp", "--use-distributed-optimizer", "--bf16"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    cr_assert(c.megatron);
    cr_assert_eq(c.num_layers, 32);
    cr_assert_eq(c.hidden, 4096);
    cr_assert_eq(c.tp, 2);
    cr_assert_eq(c.pp, 2);
    cr_assert_eq(c.sp, 1);
    cr_assert_eq(c.dp, 2); /* world 8 / (tp 2 * pp 2) */
    cr_assert_eq(c.granularity, 1);
    cr_assert_eq(c.modules, M(core_attn) | M(mlp));
    cr_assert_eq(c.dist_opt, 1);
    cr_assert_str_eq(c.source, "command line");
    cr_assert_str_eq(c.unknown, "");
}

Test(config, unknown_settings_listed)
{
    const char *argv[] = {"python", "pretrain_gpt.py", "--num-layers", "8",
                          "--recompute-activations"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    cr_assert(c.megatron);
    cr_assert_eq(c.granularity, 1);
    cr_assert_eq(c.modules, M(core_attn)); /* --recompute-activations: core_attn default */
    cr_assert_str_eq(c.unknown,
                     "hidden_size, num_attention_heads, seq_length, micro_batch_size");
}

Test(config, yaml_transformer_config_fields)
{
    const char *y = write_tmp(".yaml",
                              "# a TransformerConfig\n"
                              "model:\n"
                              "  num_layers: 24\n"
                              "  hidden_size: 2048\n"
                              "  num_attention_heads: 16\n"
                              "  seq_length: 4096\n"
                              "  micro_batch_size: 2\n"
                              "  tensor_model_parallel_size: 2\n"
                              "  recompute_granularity: full\n"
                              "  recompute_method: block\n"
                              "  recompute_num_layers: 3\n"
                              "  num_moe_experts: 8\n"
                              "  moe_grouped_gemm: true\n"
                              "  multi_latent_attention: false\n");
    const char *argv[] = {"python", "train.py"};
    adv_cfg c;
    read_cfg(argv, 2, y, &c);
    unlink(y);
    cr_assert(c.megatron);
    cr_assert_eq(c.num_layers, 24);
    cr_assert_eq(c.hidden, 2048);
    cr_assert_eq(c.heads, 16);
    cr_assert_eq(c.seq, 4096);
    cr_assert_eq(c.mbs, 2);
    cr_assert_eq(c.tp, 2);
    cr_assert_eq(c.granularity, 2);
    cr_assert_eq(c.method, 2);
    cr_assert_eq(c.recompute_num_layers, 3);
    cr_assert_eq(c.num_experts, 8);
    cr_assert_eq(c.grouped_gemm, 1);
    cr_assert_eq(c.mla, 0);
    cr_assert(strstr(c.source, "--config") != NULL, "%s", c.source);
    cr_assert_str_eq(c.unknown, "");
}

Test(config, yaml_list_of_modules)
{
    const char *y = write_tmp(".yaml",
                              "num_layers: 4\nhidden_size: 1024\nnum_attention_heads: 8\n"
                              "seq_length: 1024\nmicro_batch_size: 1\n"
                              "recompute_granularity: selective\n"
                              "recompute_modules:\n  - moe_act\n  - layernorm\n");
    const char *argv[] = {"python", "train.py"};
    adv_cfg c;
    read_cfg(argv, 2, y, &c);
    unlink(y);
    cr_assert_eq(c.granularity, 1);
    cr_assert_eq(c.modules, M(moe_act) | M(layernorm));
}

Test(config, json_transformer_config_fields)
{
    const char *j = write_tmp(".json",
                              "{\"num_layers\": 16, \"hidden_size\": 4096,\n"
                              " \"num_attention_heads\": 32, \"seq_length\": 2048,\n"
                              " \"micro_batch_size\": 1, \"pipeline_model_parallel_size\": 4,\n"
                              " \"recompute_granularity\": \"selective\",\n"
                              " \"recompute_modules\": [\"mlp\", \"layernorm\"],\n"
                              " \"fp8\": \"hybrid\", \"fp8_recipe\": \"delayed\"}\n");
    const char *argv[] = {"python", "train.py"};
    adv_cfg c;
    read_cfg(argv, 2, j, &c);
    unlink(j);
    cr_assert(c.megatron);
    cr_assert_eq(c.num_layers, 16);
    cr_assert_eq(c.pp, 4);
    cr_assert_eq(c.dp, 2);
    cr_assert_eq(c.granularity, 1);
    cr_assert_eq(c.modules, M(mlp) | M(layernorm));
    cr_assert_eq(c.fp8, 1);
    cr_assert_str_eq(c.fp8_recipe, "delayed");
    cr_assert_str_eq(c.unknown, "");
}

Test(config, json_nested_on_one_line)
{
    const char *j = write_tmp(".json",
                              "{\"model\": {\"num_layers\": 6, \"hidden_size\": 1024, "
                              "\"num_attention_heads\": 8, \"recompute_granularity\": "
                              "\"selective\", \"recompute_modules\": [\"core_attn\", "
                              "\"mlp\"]}, \"train\": {\"micro_batch_size\": 2}, "
                              "\"dataset\": {\"seq_length\": 512}}\n");
    const char *argv[] = {"python", "train.py"};
    adv_cfg c;
    read_cfg(argv, 2, j, &c);
    unlink(j);
    cr_assert_eq(c.num_layers, 6);
    cr_assert_eq(c.hidden, 1024);
    cr_assert_eq(c.heads, 8);
    cr_assert_eq(c.mbs, 2);
    cr_assert_eq(c.seq, 512);
    cr_assert_eq(c.modules, M(core_attn) | M(mlp));
    cr_assert_str_eq(c.unknown, "");
}

Test(config, config_named_on_the_command_line)
{
    const char *y = write_tmp(".yaml", "num_layers: 12\nhidden_size: 768\n"
                                       "num_attention_heads: 12\n");
    const char *argv[] = {"python", "pretrain_gpt.py", "--yaml-cfg", y, "--seq-length", "1024",
                          "--micro-batch-size", "4"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    unlink(y);
    cr_assert_eq(c.num_layers, 12);
    cr_assert_eq(c.hidden, 768);
    cr_assert_eq(c.seq, 1024);
    cr_assert_eq(c.mbs, 4);
    cr_assert_str_eq(c.unknown, "");
}

Test(config, bridge_overrides)
{
    const char *argv[] = {"python", "run_recipe.py", "model.num_layers=8",
                          "model.hidden_size=4096", "++model.num_attention_heads=32",
                          "model.seq_length=8192", "train.micro_batch_size=1",
                          "model.recompute_granularity=selective",
                          "model.recompute_modules=[moe,layernorm]",
                          "cfg.model.expert_model_parallel_size=8"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    cr_assert(c.megatron);
    cr_assert_eq(c.num_layers, 8);
    cr_assert_eq(c.hidden, 4096);
    cr_assert_eq(c.heads, 32);
    cr_assert_eq(c.seq, 8192);
    cr_assert_eq(c.mbs, 1);
    cr_assert_eq(c.ep, 8);
    cr_assert_eq(c.granularity, 1);
    cr_assert_eq(c.modules, M(moe) | M(layernorm));
    cr_assert_str_eq(c.source, "Megatron-Bridge overrides");
    cr_assert_eq(c.flags_style, 'o');
    cr_assert_str_eq(c.unknown, "");
}

Test(config, precedence_file_overrides_cli)
{
    const char *y = write_tmp(".yaml", "num_layers: 12\nrecompute_granularity: full\n"
                                       "recompute_method: uniform\nrecompute_num_layers: 2\n");
    const char *argv[] = {"python", "pretrain_gpt.py", "--config", y,
                          "model.recompute_granularity=selective", "--num-layers", "40"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    unlink(y);
    cr_assert_eq(c.num_layers, 40);  /* CLI flag beats the file */
    cr_assert_eq(c.granularity, 1);  /* override beats the file */
    cr_assert_eq(c.modules, M(core_attn)); /* selective default */
    cr_assert(strstr(c.unknown, "hidden_size") != NULL, "%s", c.unknown);
}

Test(config, unreadable_config_is_reported)
{
    const char *argv[] = {"python", "pretrain_gpt.py", "--config", "/nonexistent/cfg.yaml",
                          "--num-layers", "2"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    cr_assert(strstr(c.unknown, "config file /nonexistent/cfg.yaml not readable") != NULL, "%s",
              c.unknown);
}

Test(config, not_megatron)
{
    const char *argv[] = {"python", "train.py", "--lr", "3e-4", "--batch-size", "8"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    cr_assert_eq(c.megatron, 0);
    cr_assert_str_eq(c.unknown, "");
}

/* issue 14 (12): a flag given twice takes its last value, as argparse does,
 * both in the advisor's configuration and in am_argv_value (which the
 * layer numbering reads) */
Test(config, flag_given_twice_takes_the_last_value)
{
    const char *argv[] = {"python", "pretrain_gpt.py", "--num-layers", "32",
                          "--pipeline-model-parallel-size", "2", "--num-layers=8",
                          "--num-layers", "16", "--pipeline-model-parallel-size"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    cr_assert_eq(c.num_layers, 16);
    am_meta m;
    memset(&m, 0, sizeof m);
    m.argv = argv;
    m.argc = sizeof argv / sizeof *argv;
    cr_assert_str_eq(am_argv_value(&m, "--num-layers"), "16");
    /* the last one has no value: "" (the flag is there, its value is not) */
    cr_assert_str_eq(am_argv_value(&m, "--pipeline-model-parallel-size"), "");
    cr_assert_null(am_argv_value(&m, "--hidden-size"));
    /* a prefix is not the flag */
    cr_assert_null(am_argv_value(&m, "--num-layer"));
}

/* add_bias_linear (docs/advisor.md "Cost, validity, verdict"): Megatron-LM's
 * default on a command line, --disable-bias-linear / --add-bias-linear (the
 * last wins), a config file's add_bias_linear / disable_bias_linear, unknown
 * (-1) without a Megatron command line that settles it */
Test(config, add_bias_linear)
{
    adv_cfg c;
    const char *dflt[] = {"python", "pretrain_gpt.py", "--num-layers", "2"};
    read_cfg(dflt, sizeof dflt / sizeof *dflt, NULL, &c);
    cr_assert_eq(c.bias_linear, 1);
    const char *off[] = {"python", "pretrain_gpt.py", "--num-layers", "2",
                         "--disable-bias-linear"};
    read_cfg(off, sizeof off / sizeof *off, NULL, &c);
    cr_assert_eq(c.bias_linear, 0);
    const char *last[] = {"python", "pretrain_gpt.py", "--disable-bias-linear", "--num-layers",
                          "2", "--add-bias-linear"};
    read_cfg(last, sizeof last / sizeof *last, NULL, &c);
    cr_assert_eq(c.bias_linear, 1);
    const char *bridge[] = {"python", "run_recipe.py", "model.num_layers=8"};
    read_cfg(bridge, sizeof bridge / sizeof *bridge, NULL, &c);
    cr_assert_eq(c.bias_linear, -1); /* the provider's code decides; not recorded */
    const char *y = write_tmp(".yaml", "num_layers: 12\nadd_bias_linear: false\n");
    const char *file[] = {"python", "pretrain_gpt.py", "--config", y};
    read_cfg(file, sizeof file / sizeof *file, NULL, &c);
    cr_assert_eq(c.bias_linear, 0);
    unlink(y);
    y = write_tmp(".yaml", "num_layers: 12\n");
    const char *silent[] = {"python", "pretrain_gpt.py", "--config", y};
    read_cfg(silent, sizeof silent / sizeof *silent, NULL, &c);
    cr_assert_eq(c.bias_linear, -1);
    unlink(y);
    const char *other[] = {"python", "train.py", "--lr", "3e-4"};
    read_cfg(other, sizeof other / sizeof *other, NULL, &c);
    cr_assert_eq(c.bias_linear, -1);
}

/* Megatron's layer placement (advisor_layers.c). Expected values printed by
 * megatron-core 0.19.2 itself: get_transformer_layer_offset(config, vp_stage,
 * pp_rank), get_num_layers_to_build(config, vp_stage, pp_rank) and
 * get_schedule_table(M, VPP, group) called with these configurations (python3.12,
 * build/mcore-cache/site). {offset, layers} per stage and chunk. */
typedef struct { const char *layers, *pp, *vpp, *first, *last; int off[4][4], n[4][4]; } placement;

static const placement placements[] = {
    {"8", "2", "2", NULL, NULL, {{0, 4}, {2, 6}}, {{2, 2}, {2, 2}}},
    {"8", "2", "4", NULL, NULL, {{0, 2, 4, 6}, {1, 3, 5, 7}}, {{1, 1, 1, 1}, {1, 1, 1, 1}}},
    {"14", "4", "2", "2", "4", {{0, 7}, {1, 8}, {3, 10}, {5, 12}}, {{1, 1}, {2, 2}, {2, 2}, {2, 2}}},
    {"10", "3", NULL, "2", NULL, {{0}, {2}, {6}}, {{2}, {4}, {4}}},
    {"14", "4", "2", "2", NULL, {{0, 7}, {1, 8}, {3, 10}, {5, 12}}, {{1, 1}, {2, 2}, {2, 2}, {2, 2}}},
    {"13", "4", NULL, NULL, "1", {{0}, {4}, {8}, {12}}, {{4}, {4}, {4}, {1}}},
    {"64", "4", "4", NULL, NULL,
     {{0, 16, 32, 48}, {4, 20, 36, 52}, {8, 24, 40, 56}, {12, 28, 44, 60}},
     {{4, 4, 4, 4}, {4, 4, 4, 4}, {4, 4, 4, 4}, {4, 4, 4, 4}}},
};

Test(config, layer_placement_matches_megatron)
{
    for (size_t k = 0; k < sizeof placements / sizeof *placements; k++) {
        const placement *p = &placements[k];
        const char *argv[16] = {"python", "pretrain_gpt.py", "--num-layers", p->layers,
                                "--pipeline-model-parallel-size", p->pp};
        size_t n = 6;
        if (p->vpp) {
            argv[n++] = "--num-virtual-stages-per-pipeline-rank";
            argv[n++] = p->vpp;
        }
        if (p->first) {
            argv[n++] = "--decoder-first-pipeline-num-layers";
            argv[n++] = p->first;
        }
        if (p->last) {
            argv[n++] = "--decoder-last-pipeline-num-layers";
            argv[n++] = p->last;
        }
        adv_cfg c;
        read_cfg(argv, n, NULL, &c);
        int pp = atoi(p->pp), vp = p->vpp ? atoi(p->vpp) : 1;
        for (int s = 0; s < pp; s++)
            for (int v = 0; v < vp; v++) {
                cr_expect_eq(adv_cfg_layer_offset(&c, s, v), p->off[s][v],
                             "case %zu stage %d chunk %d: offset %d, Megatron %d", k, s, v,
                             adv_cfg_layer_offset(&c, s, v), p->off[s][v]);
                cr_expect_eq(adv_cfg_chunk_layers(&c, s), p->n[s][v],
                             "case %zu stage %d: %d layers per chunk, Megatron %d", k, s,
                             adv_cfg_chunk_layers(&c, s), p->n[s][v]);
            }
    }
}

Test(config, layer_placement_not_modelled_is_unknown)
{
    const char *argv[] = {"python", "pretrain_gpt.py", "--num-layers", "8",
                          "--pipeline-model-parallel-size", "2",
                          "--pipeline-model-parallel-layout", "Et|(tt|)*3tL"};
    adv_cfg c;
    read_cfg(argv, sizeof argv / sizeof *argv, NULL, &c);
    cr_assert_eq(adv_cfg_layer_offset(&c, 1, 0), -1);
    const char *argv2[] = {"python", "pretrain_gpt.py", "--num-layers", "7",
                           "--pipeline-model-parallel-size", "2",
                           "--account-for-embedding-in-pipeline-split"};
    read_cfg(argv2, sizeof argv2 / sizeof *argv2, NULL, &c);
    cr_assert_eq(adv_cfg_layer_offset(&c, 1, 0), -1);
}

/* get_schedule_table's chunk of each forward (M microbatches, VPP, group) */
Test(config, forward_chunk_order_matches_megatron)
{
    static const struct { const char *vpp, *group; int m; int chunk[32]; } cases[] = {
        {"2", "4", 8, {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1}},
        {"3", "4", 10, {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
                        0, 0, 1, 1, 2, 2}},
        {"2", NULL, 4, {0, 0, 1, 1, 0, 0, 1, 1}}, /* group defaults to PP (2) */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const char *argv[12] = {"python", "pretrain_gpt.py", "--num-layers", "24",
                                "--pipeline-model-parallel-size", "2",
                                "--num-virtual-stages-per-pipeline-rank", cases[k].vpp};
        size_t n = 8;
        if (cases[k].group) {
            argv[n++] = "--microbatch-group-size-per-virtual-pipeline-stage";
            argv[n++] = cases[k].group;
        }
        adv_cfg c;
        read_cfg(argv, n, NULL, &c);
        int vp = atoi(cases[k].vpp);
        for (int f = 0; f < cases[k].m * vp; f++)
            cr_expect_eq(adv_cfg_fwd_chunk(&c, f, cases[k].m), cases[k].chunk[f],
                         "case %zu forward %d: chunk %d, Megatron %d", k, f,
                         adv_cfg_fwd_chunk(&c, f, cases[k].m), cases[k].chunk[f]);
    }
}
