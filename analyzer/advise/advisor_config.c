/* advisor_config.c: the Megatron configuration of a job, from
 *   1. the recorded command line, with Megatron's exact flag spellings
 *      ([M] in docs/sources.md: allow_abbrev=False, so no prefixes);
 *   2. a config file named by --config / --yaml-cfg on that command line or
 *      by recomp-analyze --config: TransformerConfig field names, YAML
 *      (key: value, nested keys flattened to their last component, lists as
 *      [a, b] or "- a" lines) or JSON ("key": value);
 *   3. Megatron-Bridge / NeMo style overrides on the command line:
 *      model.recompute_granularity=selective, ++model.x=y, cfg.model.x=y.
 * Later sources override earlier ones (file < overrides < CLI flags). Every
 * setting the advisor needs and no source gave is listed in cfg->unknown.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"

static const char *const label_names[] = {
#define X(n) #n,
    ADV_LABELS(X)
#undef X
};

const char *
adv_label_name(int l)
{
    return l >= 0 && l < ADV_NLABELS ? label_names[l] : "?";
}

int
adv_label_parse(const char *s, size_t n)
{
    for (int i = 0; i < ADV_NLABELS; i++)
        if (strlen(label_names[i]) == n && strncmp(label_names[i], s, n) == 0)
            return i;
    return -1;
}

/* ---- one setting: field name (TransformerConfig / argparse dest) = value ---- */

typedef struct seen {
    char names[64][40];
    int n;
} seen;

static void
mark(seen *s, const char *k)
{
    if (s->n < 64)
        snprintf(s->names[s->n++], sizeof s->names[0], "%s", k);
}

static int
was(const seen *s, const char *k)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], k) == 0)
            return 1;
    return 0;
}

static int
truthy(const char *v)
{
    return !v || !*v || strcmp(v, "true") == 0 || strcmp(v, "True") == 0 ||
           strcmp(v, "1") == 0 || strcmp(v, "yes") == 0;
}

/* modules list: "mlp moe", "[mlp, moe]", "mlp,moe", "['mlp','moe']" */
static unsigned
parse_modules(const char *v)
{
    unsigned m = 0;
    const char *p = v;
    while (*p) {
        while (*p && !(isalnum((unsigned char)*p) || *p == '_'))
            p++;
        const char *b = p;
        while (*p && (isalnum((unsigned char)*p) || *p == '_'))
            p++;
        if (p > b) {
            int l = adv_label_parse(b, (size_t)(p - b));
            if (l >= 0)
                m |= 1u << l;
        }
    }
    return m;
}

static void
set_str(char *dst, size_t n, const char *v)
{
    size_t k = 0;
    for (const char *p = v; *p && k + 1 < n; p++)
        if (*p != '"' && *p != '\'')
            dst[k++] = *p;
    dst[k] = 0;
}

/* --hybrid-layer-pattern (megatron-core 0.19.2, hybrid_layer_allocation.py): one
 * symbol per layer of the main pattern; '|' separates pipeline segments and '/'
 * starts the MTP patterns, which are no decoder layers. Megatron takes the layer
 * count from the pattern whatever --num-layers says (arguments.py validate_args):
 * derive() applies it. */
static void
hybrid_pattern(adv_cfg *c, const char *v)
{
    size_t k = 0;
    if (v && strchr(v, '|'))
        c->layout_other = 1; /* pipeline segments: a placement advisor_layers.c does not model */
    for (const char *p = v ? v : ""; *p && *p != '/' && k + 1 < sizeof c->hybrid; p++)
        if (*p != '"' && *p != '\'' && *p != '|' && *p != ' ')
            c->hybrid[k++] = *p;
    c->hybrid[k] = 0;
}

/* Apply key=value (key in TransformerConfig/argparse-dest spelling). Returns
 * 1 when the key is one the advisor knows. */
static int
apply(adv_cfg *c, seen *s, const char *key, const char *v)
{
    int iv = v ? atoi(v) : 0;
#define INT(k, f) if (strcmp(key, k) == 0) { c->f = iv; mark(s, k); return 1; }
#define BOOL(k, f) if (strcmp(key, k) == 0) { c->f = truthy(v); mark(s, k); return 1; }
    INT("num_layers", num_layers)
    INT("hidden_size", hidden)
    INT("ffn_hidden_size", ffn)
    INT("num_attention_heads", heads)
    INT("num_query_groups", groups)
    INT("kv_channels", kv_channels)
    INT("seq_length", seq)
    INT("micro_batch_size", mbs)
    INT("global_batch_size", gbs)
    INT("train_iters", train_iters)
    if (strcmp(key, "cross_entropy_loss_fusion") == 0) { /* bit 0; bit 1 is the impl */
        c->ce_fusion = (c->ce_fusion & 2) | (truthy(v) ? 1 : 0);
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "cross_entropy_fusion_impl") == 0) { /* te, or native (the default) */
        const char *x = v ? v : "";
        while (*x == '"' || *x == '\'' || *x == ' ')
            x++;
        c->ce_fusion = (c->ce_fusion & 1) | (!strncmp(x, "te", 2) && !isalnum((unsigned char)x[2])
                                                 ? 2 : 0);
        mark(s, key);
        return 1;
    }
    INT("vocab_size", vocab)
    INT("tensor_model_parallel_size", tp)
    INT("pipeline_model_parallel_size", pp)
    INT("context_parallel_size", cp)
    INT("expert_model_parallel_size", ep)
    INT("expert_tensor_parallel_size", etp)
    INT("num_virtual_stages_per_pipeline_rank", vpp)
    INT("virtual_pipeline_model_parallel_size", vpp)
    BOOL("sequence_parallel", sp)
    BOOL("use_distributed_optimizer", dist_opt)
    BOOL("bf16", bf16)
    BOOL("fp16", fp16)
    BOOL("swiglu", swiglu)
    BOOL("add_bias_linear", bias_linear)
    if (strcmp(key, "disable_bias_linear") == 0) { /* a config file's spelling of the flag */
        c->bias_linear = !truthy(v);
        mark(s, "add_bias_linear");
        return 1;
    }
    BOOL("gated_linear_unit", swiglu)
    INT("num_experts", num_experts)
    INT("num_moe_experts", num_experts)
    INT("moe_router_topk", topk)
    INT("moe_ffn_hidden_size", moe_ffn)
    INT("moe_shared_expert_intermediate_size", shared_ffn)
    BOOL("moe_grouped_gemm", grouped_gemm)
    BOOL("moe_shared_expert_overlap", shared_overlap)
    BOOL("overlap_moe_expert_parallel_comm", ep_overlap)
    BOOL("multi_latent_attention", mla)
    INT("q_lora_rank", q_lora)
    INT("kv_lora_rank", kv_lora)
    INT("qk_head_dim", qk_head)
    INT("qk_pos_emb_head_dim", qk_pos)
    INT("v_head_dim", v_head)
    INT("recompute_num_layers", recompute_num_layers)
    BOOL("distribute_saved_activations", distribute_saved)
    INT("microbatch_group_size_per_vp_stage", mb_group)
    INT("microbatch_group_size_per_virtual_pipeline_stage", mb_group)
    if (strcmp(key, "decoder_first_pipeline_num_layers") == 0 ||
        strcmp(key, "num_layers_in_first_pipeline_stage") == 0) {
        c->first_stage_layers = v && *v >= '0' && *v <= '9' ? iv + 1 : 0;
        mark(s, "num_layers_in_first_pipeline_stage");
        return 1;
    }
    if (strcmp(key, "decoder_last_pipeline_num_layers") == 0 ||
        strcmp(key, "num_layers_in_last_pipeline_stage") == 0) {
        c->last_stage_layers = v && *v >= '0' && *v <= '9' ? iv + 1 : 0;
        mark(s, "num_layers_in_last_pipeline_stage");
        return 1;
    }
    if (strcmp(key, "pipeline_model_parallel_layout") == 0) {
        c->layout_other = v && *v && !strstr(v, "null") && !strstr(v, "None");
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "account_for_embedding_in_pipeline_split") == 0 ||
        strcmp(key, "account_for_loss_in_pipeline_split") == 0) {
        c->layout_other |= truthy(v);
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "num_layers_per_virtual_pipeline_stage") == 0) {
        c->vpp = -iv; /* resolved when num_layers and pp are known */
        mark(s, "num_virtual_stages_per_pipeline_rank");
        return 1;
    }
    if (strcmp(key, "recompute_granularity") == 0) {
        c->granularity = !v || strstr(v, "null") || strstr(v, "None") ? 0
                         : strstr(v, "full")                          ? 2
                         : strstr(v, "selective")                     ? 1
                                                                      : 0;
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "recompute_activations") == 0) {
        if (truthy(v))
            c->granularity = 1;
        mark(s, "recompute_granularity");
        return 1;
    }
    if (strcmp(key, "recompute_method") == 0) {
        c->method = v && strstr(v, "uniform") ? 1 : v && strstr(v, "block") ? 2 : 0;
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "recompute_modules") == 0) {
        c->modules = v ? parse_modules(v) : 0;
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "moe_layer_recompute") == 0) {
        if (truthy(v)) {
            c->granularity = 1;
            c->modules |= 1u << ADV_L_moe;
            mark(s, "recompute_modules");
        }
        return 1;
    }
    if (strcmp(key, "fp8") == 0 || strcmp(key, "fp8_format") == 0) {
        c->fp8 = v && *v && strcmp(v, "null") && strcmp(v, "None") && strcmp(v, "false");
        mark(s, "fp8");
        return 1;
    }
    if (strcmp(key, "fp8_recipe") == 0) {
        set_str(c->fp8_recipe, sizeof c->fp8_recipe, v ? v : "");
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "cuda_graph_impl") == 0) {
        set_str(c->cuda_graph_impl, sizeof c->cuda_graph_impl, v ? v : "none");
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "enable_cuda_graph") == 0 && truthy(v)) {
        snprintf(c->cuda_graph_impl, sizeof c->cuda_graph_impl, "local");
        return 1;
    }
    if (strcmp(key, "external_cuda_graph") == 0 && truthy(v)) {
        snprintf(c->cuda_graph_impl, sizeof c->cuda_graph_impl, "transformer_engine");
        return 1;
    }
    if (strcmp(key, "cuda_graph_modules") == 0 || strcmp(key, "cuda_graph_scope") == 0) {
        set_str(c->cuda_graph_modules, sizeof c->cuda_graph_modules, v ? v : "");
        return 1;
    }
    if (strcmp(key, "transformer_impl") == 0) {
        if (v && strstr(v, "local")) {
            c->fused_attn = 0;
            c->no_te = 1;
        }
        mark(s, key);
        return 1;
    }
    if (strcmp(key, "attention_backend") == 0) {
        if (v && (strstr(v, "unfused") || strstr(v, "local")))
            c->fused_attn = 0;
        return 1;
    }
    if (strcmp(key, "cpu_offloading_num_layers") == 0) {
        c->cpu_offloading = iv > 0;
        return 1;
    }
    BOOL("optimizer_cpu_offload", optimizer_cpu_offload)
    BOOL("dist_ckpt_optim_fully_reshardable", ckpt_fully_reshardable)
    BOOL("distrib_optim_fully_reshardable_mem_efficient", ckpt_mem_efficient)
    if (strcmp(key, "ckpt_format") == 0) {
        c->ckpt_torch = v && strcmp(v, "torch") == 0;
        return 1;
    }
    if (strcmp(key, "optimizer_offload_fraction") == 0) {
        c->offload_fraction = v ? atof(v) : -1;
        return 1;
    }
    if (strcmp(key, "exp_avg_dtype") == 0 || strcmp(key, "exp_avg_sq_dtype") == 0) {
        if (v && (strstr(v, "bf16") || strstr(v, "fp16") || strstr(v, "half")))
            c->exp_avg_bf16 = 1;
        return 1;
    }
    if (strcmp(key, "hybrid_layer_pattern") == 0 || strcmp(key, "hybrid_override_pattern") == 0) {
        hybrid_pattern(c, v);
        mark(s, "num_layers");
        return 1;
    }
    if (strcmp(key, "moe_layer_freq") == 0) {
        if (!v)
            return 1;
        if (strchr(v, '[')) {
            /* "([0]+[1]*26)" style: expand the simple a*n + b*m forms */
            char pat[512] = "";
            size_t pn = 0;
            const char *p = v;
            while (*p && pn + 1 < sizeof pat) {
                if (*p == '[') {
                    const char *q = strchr(p, ']');
                    if (!q)
                        break;
                    char item[256];
                    size_t il = 0;
                    for (const char *r = p + 1; r < q && il + 1 < sizeof item; r++)
                        if (*r == '0' || *r == '1')
                            item[il++] = *r;
                    item[il] = 0;
                    int rep = 1;
                    const char *r = q + 1;
                    while (*r == ' ')
                        r++;
                    if (*r == '*')
                        rep = atoi(r + 1);
                    for (int k = 0; k < rep; k++)
                        for (size_t z = 0; z < il && pn + 1 < sizeof pat; z++)
                            pat[pn++] = item[z];
                    p = q + 1;
                } else {
                    p++;
                }
            }
            pat[pn] = 0;
            snprintf(c->moe_pattern, sizeof c->moe_pattern, "%s", pat);
        } else {
            c->moe_layer_freq_k = iv > 0 ? iv : 1;
        }
        return 1;
    }
    return 0;
#undef INT
#undef BOOL
}

/* "--recompute-modules" -> "recompute_modules" */
static void
flag_to_key(const char *flag, char *key, size_t n)
{
    size_t k = 0;
    for (const char *p = flag + 2; *p && *p != '=' && k + 1 < n; p++)
        key[k++] = *p == '-' ? '_' : *p;
    key[k] = 0;
}

static const struct { const char *flag, *key; } renames[] = {
    {"--num-experts", "num_experts"},
    {"--fp8-format", "fp8"},
    {"--group-query-attention", NULL},
    {"--no-rope-fusion", NULL},
    {"--disable-bias-linear", NULL},
};

/* one "key: value" / "\"key\": value" piece of a config file */
static void
parse_piece(adv_cfg *c, seen *s, char *line, char *listkey, size_t lkn, char *listval,
            size_t lvn)
{
    {
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '{' || *p == ',')
            p++;
        if (*p == '#' || !*p || *p == '\n')
            return;
        if (*p == '-' && listkey[0]) { /* YAML list item */
            p++;
            size_t l = strlen(listval);
            snprintf(listval + l, lvn - l, " %s", p);
            apply(c, s, listkey, listval);
            return;
        }
        listkey[0] = 0;
        /* key: value / "key": value */
        char key[64];
        size_t k = 0;
        if (*p == '"')
            p++;
        while (*p && (isalnum((unsigned char)*p) || *p == '_' || *p == '.') && k + 1 < sizeof key)
            key[k++] = *p++;
        key[k] = 0;
        if (*p == '"')
            p++;
        while (*p == ' ')
            p++;
        if (*p != ':' || !k)
            return;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        char *e = p + strlen(p);
        while (e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == ','))
            *--e = 0;
        const char *last = strrchr(key, '.');
        const char *kk = last ? last + 1 : key;
        if (!*p) { /* nested map or a YAML list follows */
            snprintf(listkey, lkn, "%s", kk);
            listval[0] = 0;
            return;
        }
        if (*p == '{')
            return;
        char val[512];
        set_str(val, sizeof val, p);
        if (strcmp(val, "null") == 0 || strcmp(val, "~") == 0 || strcmp(val, "None") == 0) {
            if (apply(c, s, kk, NULL))
                c->megatron = 1;
            return;
        }
        if (apply(c, s, kk, val))
            c->megatron = 1;
    }
}

/* Config files: YAML (one key per line, nested maps flattened, "- x" lists)
 * or JSON (several "key": value pairs per line are split at the commas and
 * braces outside strings and lists). */
static void
parse_file(adv_cfg *c, seen *s, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[4096], listkey[64] = "", listval[512] = "";
    while (fgets(line, sizeof line, f)) {
        char *q = line;
        while (*q == ' ' || *q == '\t' || *q == '{')
            q++;
        if (*q != '"') {
            parse_piece(c, s, line, listkey, sizeof listkey, listval, sizeof listval);
            continue;
        }
        /* JSON: split at top-level commas */
        int depth = 0, str = 0;
        char *start = q;
        for (char *p = q;; p++) {
            if (*p == '"' && (p == q || p[-1] != '\\'))
                str = !str;
            else if (!str && *p == '[')
                depth++;
            else if (!str && *p == ']' && depth > 0)
                depth--;
            /* nested maps are flattened: '{' and '}' end a piece like ',' */
            if (!*p || (!str && !depth && (*p == ',' || *p == '{' || *p == '}'))) {
                char save = *p;
                *p = 0;
                parse_piece(c, s, start, listkey, sizeof listkey, listval, sizeof listval);
                if (!save)
                    break;
                start = p + 1;
            }
        }
    }
    fclose(f);
}

int
adv_cfg_layers_per_chunk(const adv_cfg *c)
{
    if (c->num_layers <= 0)
        return 0;
    int pp = c->pp > 0 ? c->pp : 1, vp = c->vpp > 0 ? c->vpp : 1;
    return c->num_layers / pp / vp;
}

int
adv_cfg_hybrid_has(const adv_cfg *c, char symbol)
{
    return c->hybrid[0] && strchr(c->hybrid, symbol) != NULL;
}

int
adv_cfg_is_moe_layer(const adv_cfg *c, int l)
{
    if (c->hybrid[0])    /* a hybrid model's MoE layers are its pattern's E */
        return l >= 0 && (size_t)l < strlen(c->hybrid) && c->hybrid[l] == 'E';
    if (!c->num_experts)
        return 0;
    if (c->moe_pattern[0]) {
        if (l >= 0 && (size_t)l < strlen(c->moe_pattern))
            return c->moe_pattern[l] == '1';
        return 1;
    }
    int k = c->moe_layer_freq_k > 0 ? c->moe_layer_freq_k : 1;
    return l % k == 0;
}

/* Megatron's defaults for what a configuration does not say ([M] in
 * docs/sources.md) and this advisor's assumptions until told otherwise. */
static void
set_defaults(adv_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->tp = c->pp = c->cp = c->ep = 1;
    c->groups = 0;
    c->fused_attn = 1;
    c->offload_fraction = -1;
    c->topk = 2;
    c->kv_lora = 32;
    c->qk_head = 128;
    c->qk_pos = 64;
    c->v_head = 128;
    c->moe_layer_freq_k = 1;
    snprintf(c->fp8_recipe, sizeof c->fp8_recipe, "delayed");
    snprintf(c->cuda_graph_impl, sizeof c->cuda_graph_impl, "none");
}

/* Append to a "; "- or " + "-separated text field. */
static void
append(char *buf, size_t n, const char *sep, const char *fmt, const char *arg)
{
    size_t l = strlen(buf);
    if (l >= n)
        return;
    snprintf(buf + l, n - l, "%s", l ? sep : "");
    l = strlen(buf);
    snprintf(buf + l, n - l, fmt, arg);
}

/* Pass 1a: the job's config file (--config/--yaml-cfg/--config-file on its
 * command line) and the one given to recomp-analyze, each read from its
 * path or beside the traces. */
static void
read_config_files(adv_cfg *c, seen *s, const am_meta *m, const char *extra_config,
                  const char *trace_dir)
{
    const char *cfgfile = NULL;
    for (size_t i = 0; i < m->argc; i++) {
        const char *a = m->argv[i];
        if ((strcmp(a, "--config") == 0 || strcmp(a, "--yaml-cfg") == 0 ||
             strcmp(a, "--config-file") == 0) && i + 1 < m->argc)
            cfgfile = m->argv[i + 1];
    }
    const char *files[2] = {cfgfile, extra_config};
    for (int fi = 0; fi < 2; fi++) {
        const char *f = files[fi];
        if (!f)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s", f);
        FILE *t = fopen(path, "r");
        if (!t && trace_dir && f[0] != '/') {
            snprintf(path, sizeof path, "%s/%s", trace_dir, f);
            t = fopen(path, "r");
        }
        if (t) {
            fclose(t);
            parse_file(c, s, path);
            append(c->source, sizeof c->source, " + ", "--config %s", f);
            c->flags_style = 'y';
        } else {
            append(c->unknown, sizeof c->unknown, "; ", "config file %s not readable", f);
        }
    }
}

/* Pass 1b: Megatron-Bridge overrides on the command line
 * (`model.num_layers=8`, `+cfg.model.x=y`): the key after the last dot. */
static void
read_overrides(adv_cfg *c, seen *s, const am_meta *m)
{
    int overrides = 0;
    for (size_t i = 0; i < m->argc; i++) {
        const char *a = m->argv[i];
        const char *eq = strchr(a, '=');
        if (!eq || a[0] == '-')
            continue;
        const char *k = a;
        while (*k == '+')
            k++;
        const char *dot = NULL;
        for (const char *p = k; p < eq; p++)
            if (*p == '.')
                dot = p;
        if (!dot)
            continue;
        char key[64];
        size_t kl = (size_t)(eq - dot - 1);
        if (kl >= sizeof key)
            continue;
        memcpy(key, dot + 1, kl);
        key[kl] = 0;
        if (apply(c, s, key, eq + 1)) {
            c->megatron = 1;
            overrides = 1;
        }
    }
    if (overrides) {
        append(c->source, sizeof c->source, " + ", "%s", "Megatron-Bridge overrides");
        if (!c->flags_style || c->flags_style == 'y')
            c->flags_style = 'o';
    }
}

/* The value of command-line flag argv[i]: `--flag=value`, or the following
 * words that are not flags (one word unless the flag takes a list). */
static void
flag_value(const am_meta *m, size_t i, const char *key, char *val, size_t n)
{
    const char *a = m->argv[i];
    const char *eq = strchr(a, '=');
    val[0] = 0;
    if (eq) {
        snprintf(val, n, "%s", eq + 1);
        return;
    }
    size_t vl = 0;
    for (size_t j = i + 1; j < m->argc && !(m->argv[j][0] == '-' && m->argv[j][1] == '-'); j++) {
        if (strchr(m->argv[j], '=') && strchr(m->argv[j], '.'))
            break; /* an override, not a value */
        vl += (size_t)snprintf(val + vl, vl < n ? n - vl : 0, "%s%s", vl ? " " : "",
                               m->argv[j]);
        if (vl >= n)
            break;
        if (strcmp(key, "recompute_modules") && strcmp(key, "cuda_graph_modules") &&
            strcmp(key, "cuda_graph_scope"))
            break; /* single-valued */
    }
}

/* Pass 2: Megatron's command-line flags, which win over files and
 * overrides; a flag given twice takes its last value. Sets *gqa for
 * --group-query-attention. */
static void
read_flags(adv_cfg *c, seen *s, const am_meta *m, int *gqa)
{
    int cli = 0;
    for (size_t i = 0; i < m->argc; i++) {
        const char *a = m->argv[i];
        if (a[0] != '-' || a[1] != '-' || !a[2])
            continue;
        if (strcmp(a, "--group-query-attention") == 0) {
            *gqa = 1;
            continue;
        }
        if (strcmp(a, "--recompute-activations") == 0) {
            c->granularity = 1;
            mark(s, "recompute_granularity");
            cli = 1;
            continue;
        }
        /* Megatron-LM's --disable-bias-linear (store_false into add_bias_linear);
         * --add-bias-linear, megasim's spelling of the default, a bare switch */
        if (strcmp(a, "--disable-bias-linear") == 0 || strcmp(a, "--add-bias-linear") == 0) {
            c->bias_linear = a[2] == 'a';
            mark(s, "add_bias_linear");
            c->megatron = 1;
            cli = 1;
            continue;
        }
        if (strcmp(a, "--no-rope-fusion") == 0)
            continue;
        char key[64], val[512];
        flag_to_key(a, key, sizeof key);
        for (size_t r = 0; r < sizeof renames / sizeof renames[0]; r++)
            if (strcmp(a, renames[r].flag) == 0 && renames[r].key)
                snprintf(key, sizeof key, "%s", renames[r].key);
        flag_value(m, i, key, val, sizeof val);
        if (apply(c, s, key, val[0] ? val : NULL)) {
            c->megatron = 1;
            cli = 1;
        }
    }
    if (cli) {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", c->source);
        snprintf(c->source, sizeof c->source, "command line%s%.200s", tmp[0] ? " + " : "", tmp);
        c->flags_style = 'c';
    }
}

/* What follows from what was given ([M] in docs/sources.md): query groups, head
 * size, FFN size, MoE FFN, expert TP, sequence parallelism off at TP=1,
 * selective recompute's default module, VPP, data parallelism from the
 * world size, the vocabulary. */
static void
derive(adv_cfg *c, const seen *s, const am_meta *m, int gqa)
{
    if (c->hybrid[0])
        c->num_layers = (int)strlen(c->hybrid);
    if (!gqa && !was(s, "num_query_groups"))
        c->groups = c->heads;
    if (!gqa && c->groups == 0)
        c->groups = c->heads;
    if (gqa && !c->groups)
        c->groups = 1;
    if (c->heads && !c->kv_channels)
        c->kv_channels = c->hidden / c->heads;
    if (!c->ffn && c->hidden)
        c->ffn = c->swiglu ? (4 * c->hidden * 2 / 3 / 64) * 64 : 4 * c->hidden;
    if (c->num_experts && !c->moe_ffn)
        c->moe_ffn = c->ffn;
    if (!c->etp)
        c->etp = c->tp;
    if (c->tp == 1)
        c->sp = 0;
    /* add_bias_linear: Megatron-LM's parser defaults it to True
     * (--disable-bias-linear turns it off), so a recorded Megatron command line
     * that does not say otherwise has biases; a config file or Megatron-Bridge
     * overrides that do not name it leave it unknown (Bridge's model providers,
     * Llama's among them, set it in code, not in the overrides) */
    if (!was(s, "add_bias_linear"))
        c->bias_linear = c->flags_style == 'c' ? 1 : -1;
    if (c->granularity == 1 && !was(s, "recompute_modules"))
        c->modules = 1u << ADV_L_core_attn; /* __post_init__ default */
    if (c->vpp < 0 && c->num_layers && c->pp)
        c->vpp = c->num_layers / c->pp / -c->vpp;
    if (c->offload_fraction < 0) /* arguments.py's default 1.0; OptimizerConfig's 0.0 */
        c->offload_fraction = c->flags_style == 'c' ? 1.0 : 0.0;
    c->world = m->world_size > 0 ? m->world_size : 1;
    int mp = c->tp * c->pp * (c->cp > 0 ? c->cp : 1);
    c->dp = mp > 0 && c->world % mp == 0 ? c->world / mp : 1;
    if (c->dp < 1)
        c->dp = 1;
    if (!c->vocab)
        c->vocab = 50257;
}

int
adv_config_read(const am_meta *m, const char *extra_config, const char *trace_dir,
                adv_cfg *c)
{
    seen s = {.n = 0};
    int gqa = 0;
    set_defaults(c);
    /* pass 1: config files and overrides; pass 2: CLI flags (win) */
    read_config_files(c, &s, m, extra_config, trace_dir);
    read_overrides(c, &s, m);
    read_flags(c, &s, m, &gqa);
    /* Megatron frames in the command line: pretrain_gpt.py etc. */
    for (size_t i = 0; i < m->argc && !c->megatron; i++)
        if (strstr(m->argv[i], "pretrain_gpt") || strstr(m->argv[i], "megatron"))
            c->megatron = 1;
    /* environment */
    for (size_t i = 0; i < m->nenv; i++)
        if ((strncmp(m->env[i], "PYTORCH_CUDA_ALLOC_CONF=", 24) == 0 ||
             strncmp(m->env[i], "PYTORCH_ALLOC_CONF=", 19) == 0) &&
            strstr(m->env[i], "expandable_segments:True"))
            c->alloc_expandable = 1;
    /* the allocator model's settings: PyTorch reads PYTORCH_CUDA_ALLOC_CONF
     * first, PYTORCH_ALLOC_CONF when it is unset */
    for (int pass = 0; pass < 2 && !c->alloc_conf[0]; pass++)
        for (size_t i = 0; i < m->nenv; i++) {
            const char *k = pass ? "PYTORCH_ALLOC_CONF=" : "PYTORCH_CUDA_ALLOC_CONF=";
            if (strncmp(m->env[i], k, strlen(k)) == 0)
                snprintf(c->alloc_conf, sizeof c->alloc_conf, "%s", m->env[i] + strlen(k));
        }
    derive(c, &s, m, gqa);
    /* what matters and is unknown */
    static const char *const need[] = {"num_layers", "hidden_size", "num_attention_heads",
                                       "seq_length", "micro_batch_size"};
    if (c->megatron)
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
            if (!was(&s, need[i]))
                append(c->unknown, sizeof c->unknown, ", ", "%s", need[i]);
    if (!c->source[0])
        snprintf(c->source, sizeof c->source, "none recorded");
    return 0;
}
