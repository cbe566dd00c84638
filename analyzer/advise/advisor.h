/* advisor.h: the recompute advisor (docs/architecture.md; docs/advisor.md).
 *
 *   recorded command line / --config / overrides --> adv_cfg (advisor_config.c)
 *   each rank's source, one more pass --> adv_trace: one compact record per
 *       tensor-level allocation, the op stream (alloc/free order), the forward
 *       layer instances with the positions of Megatron's regions (advisor_trace.c)
 *   triage in DESIGN §4's order, each with numbers (advisor_triage.c)
 *   counterfactuals: rewrite the op stream with each label's semantics and
 *       sweep the whole iteration again (advisor_counterfactual.c)
 *   replay cost: FLOP model of the replayed forward (advisor_cost.c)
 *   validity: [M] in docs/sources.md (advisor_validity.c)
 *   verdict: primary code, findings, candidates, config diff (advisor_verdict.c)
 */
#ifndef RECOMP_ANALYZER_ADVISOR_H
#define RECOMP_ANALYZER_ADVISOR_H

#include <stddef.h>
#include <stdint.h>

#include "analysis.h"

/* ---- recompute labels ([M] in docs/sources.md) ---- */
#define ADV_LABELS(X) X(core_attn) X(moe_act) X(layernorm) X(mla_up_proj) X(mlp) X(moe) \
    X(shared_experts) X(gdn_norm_out) X(gdp_in_proj) X(gdp_qkv) X(mhc)
enum {
#define X(n) ADV_L_##n,
    ADV_LABELS(X)
#undef X
    ADV_NLABELS
};
const char *adv_label_name(int l);
int adv_label_parse(const char *s, size_t n); /* -1 unknown */

/* ---- configuration (advisor_config.c) ---- */
typedef struct adv_cfg {
    int megatron;             /* Megatron flags or a Megatron config were found */
    char source[256];         /* "command line", "command line + --config FILE", ... */
    int num_layers, hidden, ffn, heads, groups, kv_channels, seq, mbs, gbs, vocab;
    int train_iters;          /* --train-iters, 0 unknown */
    int ce_fusion;            /* bit 0 --cross-entropy-loss-fusion, bit 1
                               * --cross-entropy-fusion-impl te (ADV_CE_NO_COPY) */
    int tp, pp, cp, ep, etp, vpp, sp, world, dp;
    int dist_opt, bf16, fp16, swiglu, fused_attn; /* fused_attn: TE fused/flash (not local/unfused) */
    int no_te;                /* no Transformer Engine (--transformer-impl local, or the trace) */
    int num_experts, topk, moe_ffn, shared_ffn, grouped_gemm, shared_overlap, ep_overlap;
    int mla, q_lora, kv_lora, qk_head, qk_pos, v_head;
    int granularity;          /* 0 none, 1 selective, 2 full */
    int method;               /* 0 none, 1 uniform, 2 block */
    int recompute_num_layers;
    unsigned modules;         /* bitmask of ADV_L_* (selective) */
    int fp8;                  /* --fp8-format set */
    char fp8_recipe[24];
    char cuda_graph_impl[24]; /* none, local, transformer_engine, full_iteration */
    char cuda_graph_modules[128];
    int distribute_saved;
    int cpu_offloading;
    int exp_avg_bf16;         /* precision-aware optimizer with bf16 moments */
    int moe_layer_freq_k;     /* 1 every layer; k: every k-th */
    char moe_pattern[512];    /* 0/1 per layer when a list pattern was given */
    int alloc_expandable;     /* PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True */
    char alloc_conf[256];     /* PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) as recorded,
                               * "" none: the caching allocator model's settings */
    char unknown[512];        /* settings that matter and were not recorded */
    char flags_style;         /* 'c' CLI, 'y' config file, 'o' overrides */
    int optimizer_cpu_offload; /* --optimizer-cpu-offload (HybridDeviceOptimizer) */
    double offload_fraction;  /* --optimizer-offload-fraction; < 0 not given (resolved: the
                                 CLI's default 1.0, OptimizerConfig's 0.0) */
    int ckpt_fully_reshardable; /* --dist-ckpt-optim-fully-reshardable */
    int ckpt_mem_efficient;   /* --distrib-optim-fully-reshardable-mem-efficient */
    int ckpt_torch;           /* --ckpt-format torch (legacy: gathers with Gloo) */
    char hybrid[512];         /* --hybrid-layer-pattern (or --hybrid-override-pattern): one
                               * symbol per layer (M Mamba, * attention, - MLP, E MoE, ...),
                               * "" not a hybrid model */
    int bias_linear;          /* add_bias_linear: 1 on (Megatron's default), 0 off
                               * (--disable-bias-linear), -1 unknown (no Megatron
                               * configuration recorded) */
    /* pipeline layer placement (advisor_layers.c): --decoder-first/last-pipeline-num-layers
     * (num_layers_in_first/last_pipeline_stage) PLUS ONE, 0 not given (a zeroed
     * configuration is the even split; a summary carries all four:
     * docs/summary-format.md 6.0);
     * --microbatch-group-size-per-virtual-pipeline-stage, 0 not given (PP);
     * layout_other: a placement the advisor does not model
     * (--pipeline-model-parallel-layout, --account-for-embedding/loss-in-pipeline-split) */
    int first_stage_layers, last_stage_layers, mb_group, layout_other;
} adv_cfg;

/* Fill cfg from the source's argv and environment (and a --config file named
 * there or in extra_config). 0; cfg->megatron says whether it is Megatron. */
int adv_config_read(const am_meta *m, const char *extra_config, const char *trace_dir,
                    adv_cfg *cfg);
int adv_cfg_layers_per_chunk(const adv_cfg *c);
int adv_cfg_is_moe_layer(const adv_cfg *c, int global_layer0);
/* Whether a hybrid model's pattern has a layer of this symbol ('*', '-', 'E', ...). */
int adv_cfg_hybrid_has(const adv_cfg *c, char symbol);
/* Megatron's layer placement over pipeline stages and virtual chunks
 * (advisor_layers.c; megatron-core 0.19.2 get_num_layers_to_build,
 * get_transformer_layer_offset, get_schedule_table). */
int adv_cfg_chunk_layers(const adv_cfg *c, int stage);
int adv_cfg_max_chunk_layers(const adv_cfg *c);
int adv_cfg_layer_offset(const adv_cfg *c, int stage, int chunk);
int adv_cfg_microbatches(const adv_cfg *c);
int adv_cfg_fwd_chunk(const adv_cfg *c, int k, int microbatches);

/* ---- the per-rank tensor-level trace (advisor_trace.c) ---- */
enum { ADV_NONE = 0xffffffffu };

/* Context flags of an allocation (where in a layer's forward it happened). */
enum {
    ADV_C_ATTN = 1 << 0,      /* inside .self_attention */
    ADV_C_CORE = 1 << 1,      /* inside .core_attention */
    ADV_C_MLP = 1 << 2,       /* inside _run_mlp.mlp / _forward_mlp.mlp */
    ADV_C_SUBMLP = 1 << 3,    /* inside mlp.forward.linear_fc1/activation/linear_fc2 */
    ADV_C_BDA = 1 << 4,       /* inside a bda step */
    ADV_C_MEGA = 1 << 5,      /* inside any Megatron layer range */
    ADV_C_ATTN2 = 1 << 6,     /* made for the second fused-attention call (softmax stats) */
    ADV_C_QKV = 1 << 7,       /* main thread, inside attention.forward.qkv (the QKV
                               * projection: its output, views of which attention gets) */
};

/* TE call class of the nvte range an allocation is attributed to (the next
 * nvte_* call on its thread, TE allocates just before its calls). */
enum { ADV_T_NONE = 0, ADV_T_NORM, ADV_T_GEMM, ADV_T_GROUPED, ADV_T_ATTN, ADV_T_ROPE,
       ADV_T_OTHER };

typedef struct adv_alloc {
    uint64_t size;
    uint32_t a_pos, f_pos;    /* positions in the op stream; f_pos ADV_NONE: never freed */
    int32_t inst;             /* forward instance (microbatch x chunk), -1 none */
    int16_t layer;            /* layer index inside the instance (0-based), -1 none */
    uint8_t phase;            /* am_phase (analyzer attribution) */
    uint8_t bwd;              /* allocated on the backward thread */
    uint8_t fbwd;             /* freed on the backward thread */
    uint8_t ctx;              /* ADV_C_* (backward thread: the Megatron ranges open there,
                               * a checkpoint replay's re-emitted forward ranges) */
    uint8_t te;               /* ADV_T_* */
    uint8_t boundary;         /* am_boundary (analyzer attribution) */
    uint8_t graph;            /* allocated inside a CUDA-graph capture window */
    uint8_t state;            /* forward state, not an activation (advisor_trace.c
                               * mark_forward_state): recompute does not remove it */
    uint8_t load;             /* made while loading a checkpoint: AM_PYLOAD_COPY (the loaded
                               * state dict, its copies), AM_PYLOAD_STATE (optimizer state the
                               * load initialises); 0 not, or unknown (advisor_trace.c) */
    int32_t iteration;
    uint32_t py;              /* its Python stack: frame ids at t->py[py..py+npy),
                               * innermost first; npy 0 unknown */
    uint32_t npy;
} adv_alloc;

/* One layer of one forward instance: op-stream positions of its regions
 * (ADV_NONE when absent). */
typedef struct adv_layer {
    int32_t inst, layer;      /* instance, layer index in it (0-based) */
    int32_t global_layer;     /* 0-based global layer, -1 unknown */
    int moe, mla;
    uint32_t begin, end;      /* first op of the layer, op after its last (mlp_bda pop) */
    uint32_t pre_b;           /* start of the code before the layer's first Megatron range:
                               * after the last main-thread range pop or non-forward op
                               * (previous layer's end; embedding / p2p range); <= begin.
                               * A full-recompute group's forward region starts here */
    uint32_t attn_b, attn_e, core_b, core_e, mlp_b, mlp_e;
    /* standalone norms: alloc ids of their outputs (ADV_NONE absent) */
    uint32_t in_ln, pre_ln;
    /* moe_act: the expert activation's first allocation (alloc id), the op
     * after its last one (the region [a_pos(moe_act), moe_act_e): the fused
     * activation's output, or the unfused GLU's intermediates and output)
     * and the op after the fc2 output (the discard point) */
    uint32_t moe_act, moe_act_discard, moe_act_e;
    /* mla_up_proj: Q, K, V alloc ids; region start op */
    uint32_t mla_q, mla_k, mla_v, mla_up_b;
} adv_layer;

typedef struct adv_inst {
    int32_t iteration;
    uint32_t begin, end;      /* forward ops of the instance */
    int nlayers;
    int32_t chunk;            /* its model chunk (virtual pipeline stage), -1 unknown */
} adv_inst;

/* A replay's own extra allocation (adv_trace_undo): made on the backward
 * thread by a full-recompute replay, with no forward twin (the replay did more
 * work than the forward). Removed from the undone op stream; a candidate whose
 * replayed region holds both anchors allocates it again, same size, same place
 * relative to the replayed forward ops. */
typedef struct adv_extra {
    uint32_t id;              /* alloc id (size from a[id]) */
    uint32_t a_anchor;        /* allocated just before this forward op is replayed */
    uint32_t f_anchor;        /* freed just before this forward op is replayed; ADV_NONE:
                               * freed after the replay, by its free op left in the stream */
    uint32_t a_seq, f_seq;    /* order among extras at one anchor (recorded positions) */
} adv_extra;

typedef struct adv_trace {
    adv_alloc *a;
    size_t na, capa;
    int32_t *ops;             /* +(id+1) alloc, -(id+1) free */
    size_t nops, capops;
    adv_layer *layers;
    size_t nlayers, caplayers;
    adv_inst *insts;
    size_t ninsts, capinsts;
    uint32_t *py;             /* the allocations' Python stacks (adv_alloc.py) */
    size_t npyf, cappyf;
    adv_extra *xr;            /* replays' own extra allocations (undone traces only) */
    size_t nxr;
    uint64_t xr_bytes;        /* their largest size sum in one replay */
    uint32_t *abwd;           /* op positions of the backward thread's attention backward
                               * calls (TE's nvte_{flash,fused}_attn_bwd pushes), in order:
                               * each layer's backward ends with its own (adv_trace_undo) */
    size_t nabwd, capabwd;
    int undo_by_size;         /* undone traces: selective units (core_attn, discard-style)
                               * matched by size and position alone, no attention-backward
                               * structure to place them in their layer's backward */
    int megatron_ranges;      /* Megatron layer ranges were seen */
    int core_regions;         /* forward .core_attention regions seen */
    int core_te_attn;         /* ... holding a TE fused/flash attention call */
    int te_calls;             /* Transformer Engine C API ranges (nvte_*) seen */
    int replays;              /* forward code on the backward thread (recompute on) */
    uint64_t replay_bytes;    /* bytes allocated in backward_replay */
    uint64_t max_outside;     /* max(device live - PyTorch reserved), bytes */
    uint64_t graph_pool_bytes;/* tensor+device bytes allocated inside capture windows, live max */
    int graph_capture_oom;    /* the OOM happened inside a capture window */
    int last_complete_iter;   /* last iteration whose optimizer step finished, -1 */
    uint32_t opt_state_init_end; /* op after the first optimizer step, ADV_NONE */
    int trunc;                /* the trace stops with a fatal OOM / unclosed */
    /* the first fatal OOM */
    int oom;
    uint32_t oom_pos;
    uint8_t oom_phase, oom_lib, oom_in_capture;
    uint8_t oom_boundary;     /* am_boundary the failed request would have had */
    uint64_t oom_request, oom_allocated, oom_reserved, oom_device_live;
    int oom_past_limit;       /* recorded after the byte limit: phase, boundary, reserved and
                               * device live unknown (0); oom_allocated is a lower bound */
    uint64_t init_bytes;      /* tensor bytes allocated in init and alive at the end */
    uint8_t oom_load;         /* the failed request's AM_PYLOAD_* */
    int load_seen;            /* allocations made while loading a checkpoint were seen */
    int py_seen;              /* allocations with a Python stack were seen */
    int optimizer_seen;       /* 1 an optimizer step was seen; 2 none, but a checkpoint
                               * load made optimizer state that stays (init_state_fn) */
    am_moe_dispatch moe;      /* MoE dispatch all-to-alls (attribute/moe_dispatch.c) */
    uint32_t departs;         /* undone traces: 1 + the first op position whose op differs
                               * from the recorded trace's (adv_trace_departure); 0 none */
} adv_trace;

int adv_trace_build(am_rank *r, const adv_cfg *cfg, adv_trace *t, char *err, size_t errlen);
void adv_trace_free(adv_trace *t);

/* ---- candidates and the verdict ---- */
/* effects; MARGINAL: within the budget, but not with the prediction's error
 * bound added (recommended only when nothing fits clearly, and said so) */
enum { ADV_E_FITS = 0, ADV_E_INSUFFICIENT, ADV_E_INEFFECTIVE, ADV_E_COUNTER, ADV_E_MARGINAL };
const char *adv_effect_name(int e);

#define ADV_MAX_RANKS 256
typedef struct adv_cand {
    char name[96];            /* "selective[mlp]", "full[uniform,1]", "none" */
    char code[96];            /* R:SELECTIVE[mlp] / R:FULL[uniform,1] */
    unsigned labels;          /* selective labels */
    int full_method, full_n;  /* 0 none */
    int family_best;          /* full: the best member of its family */
    uint64_t peak[ADV_MAX_RANKS];     /* allocated (tensor-level) peak, bytes */
    uint64_t reserved[ADV_MAX_RANKS]; /* the caching allocator's reserved peak along the
                                       * candidate's own timeline (advisor_cache.c): what
                                       * must fit the budget, bytes */
    uint64_t step[ADV_MAX_RANKS];     /* the reserved peak's uncertainty from the rewrite
                                       * (adv_counterfactual_model's step_out), bytes; 0 for
                                       * the current setting (measured) */
    int fails_rank;           /* worst rank not fitting, -1 fits */
    uint8_t fails_phase;
    uint64_t max_peak;
    int64_t saving;           /* baseline max - candidate max (bytes, may be < 0) */
    double cost;              /* replay cost as a share of the step */
    int effect, valid;
    char reason[256];
} adv_cand;

/* One fix a finding offers and the bytes it addresses (issue 14 item 6). */
#define ADV_MAX_LEVERS 4
typedef struct adv_lever {
    char change[96];          /* the fix, as the evidence names it */
    uint64_t bytes;           /* bytes it removes from the peak / OOM it is about */
    uint8_t known;            /* 0: its byte effect is unknown (JSON null), never 0 B */
} adv_lever;

typedef struct adv_finding {
    char code[64];
    char subtype[48];
    int rank;                 /* -1 job */
    char evidence[1024];
    uint64_t bytes;           /* the cause's bytes at the peak / OOM (0 not stated) */
    uint64_t fix_bytes;       /* what its best lever removes from the peak (0 unknown) */
    char lever[128];          /* the change that lever is, when the code's usual change
                                 does not apply to this job ("" none) */
    uint8_t ranked;           /* the primary is chosen among such findings by their bytes
                               * (advisor_verdict.c primary_by_bytes); 0: by triage order */
    uint8_t nlevers;
    adv_lever levers[ADV_MAX_LEVERS]; /* each fix and the bytes it addresses */
} adv_finding;

typedef struct adv_verdict {
    int available;            /* 0: no advice (note says why) */
    char code[96];
    char why[1536];
    char change[512];         /* the one-line change */
    char config_diff[1024];   /* CLI flags + cfg.model.* lines, '\n' separated */
    char confirm[512];        /* matched run */
    char level_note[1024];    /* what the source allows / what is needed */
    char cost_source[96];     /* "FLOP model ..." */
    adv_cfg cfg;
    adv_finding *findings;
    size_t nfindings;
    adv_cand *cands;
    size_t ncands;
    int chosen;               /* index into cands, -1 */
    uint64_t budget[ADV_MAX_RANKS];
    uint64_t baseline[ADV_MAX_RANKS];
    uint64_t predicted[ADV_MAX_RANKS];
    uint64_t outside[ADV_MAX_RANKS];
    uint64_t cache[ADV_MAX_RANKS];    /* the prediction's allocator cache: its reserved
                                       * peak - its allocated peak (modelled) */
    uint64_t reserved[ADV_MAX_RANKS]; /* the baseline's reserved peak (modelled, bytes) */
    uint64_t pred_reserved[ADV_MAX_RANKS]; /* the prediction's reserved peak (bytes) */
    uint64_t capacity[ADV_MAX_RANKS]; /* 0: unknown (no header, cudaMemGetInfo, OOM
                                       * total or --budget): budget unknown, never 0 B */
    int budget_unknown;       /* ranks whose capacity is unknown */
    char device_note[256];    /* the first rank whose device figures contradict its
                               * trace (adv_device_inconsistent), said with the budget */
    int rank_id[ADV_MAX_RANKS];
    size_t nranks;
    uint64_t headroom;
    char next_wall[512];      /* predicted optimizer state note */
    char **hot_functions;     /* non-Megatron: where activation bytes were (lines) */
    size_t nhot_functions;
    struct adv_hotfn {        /* ... the same, per allocating Python function */
        int rank;
        char function[256];   /* "file:line:function" */
        uint64_t bytes, count;
        uint8_t phase;        /* phase holding most of its bytes */
    } *hot;
    size_t nhot;
    int cache_short;          /* ranks whose cache term is a lower bound (adv_cache_history) */
    char cache_why[320];      /* the first such rank's reason */
    /* what binds each binding rank (adv_binding_why), in rank order: the
     * verdict's BINDS in the JSON; binds_known 0: never evaluated */
    struct adv_bind {
        int rank;
        int oom;              /* 1: its fatal OOM binds it (iteration, phase) */
        int past_limit;       /* ... recorded after the byte limit: iteration and phase
                               * unknown (the last recorded event's, not the OOM's) */
        int iteration;        /* -1 before iteration 0 */
        uint8_t phase;        /* am_phase */
        uint64_t over_budget; /* no OOM: reserved peak - budget (bytes) */
        uint64_t over_device; /* its allocated peak's bytes over the device (capacity -
                               * outside PyTorch), 0 when within (adv_real_deficit) */
        char code[64], subtype[48]; /* the finding the why names for it, "" none */
        uint8_t allocator_only_aside; /* that finding is an allocator fix for this rank's
                                       * cache, not the job's verdict */
    } binds[ADV_MAX_RANKS];
    size_t nbinds;
    int binds_known;
    /* a lever that costs no replay (advisor_lever.c, docs/advisor.md rule 45):
     * its change ("" none), its finding's code, its tier and the predicted
     * reserved peak per rank with it (bytes) */
    char lever_fit[96];
    char lever_code[64];
    int lever_tier;           /* adv_lever_fit.tier: -1 it does not fit */
    uint64_t lever_reserved[ADV_MAX_RANKS];
} adv_verdict;

typedef struct adv_opts {
    uint64_t budget;          /* --budget bytes (0: capacity from the trace) */
    uint64_t headroom;        /* --headroom bytes */
    const char *config;       /* --config FILE */
    int workers;              /* ranks' timelines rebuilt this many at a time (< 2: in turn) */
} adv_opts;

/* The whole advisor over an analysed job (ranks already analysed; sources
 * are rewound and read once more). 0, or -1 with err. */
int adv_run(am_job *j, const adv_opts *o, adv_verdict *v, char *err, size_t errlen);
void adv_verdict_free(adv_verdict *v);

/* internals shared by the advisor's files */
/* Append a finding (code, subtype, rank or -1, evidence from fmt) to v;
 * silently dropped when out of memory (advisor_findings.c). */
void adv_finding_add(adv_verdict *v, const char *code, const char *subtype, int rank,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int adv_triage(am_job *j, adv_trace *tr, adv_verdict *v);

/* For a job that is not Megatron: the findings from index `from` on name no
 * Megatron flag in evidence, lever or levers, each rewritten as what it
 * means for any PyTorch job (invariant 5; advisor_generic.c). */
void adv_findings_generic(adv_verdict *v, size_t from);
/* 1 when some rank of j recorded a fatal OOM (a failed request that was
 * retried and succeeded is an alloc_retry, not an OOM), else 0
 * (advisor_ran.c). */
int adv_job_oomed(const am_job *j);
/* The least room the job left on any rank's device at its baseline: capacity
 * - memory outside PyTorch - the baseline's reserved peak (bytes, in
 * *spare). Returns that rank's index, or -1 when a capacity is unknown or a
 * rank's reserved peak is over its device (no spare). The headroom is not
 * subtracted: this is the margin the job really had (advisor_ran.c). */
int adv_device_spare(const adv_verdict *v, uint64_t *spare);
/* 1 when rank r's fatal OOM carries device figures that contradict the
 * trace: cudaMemGetInfo's in use (total - free, bytes, in *in_use) below the
 * bytes PyTorch had allocated then (the tensor level, in *held). A device
 * always holds at least the allocated bytes of the process on it (plus its
 * context), so such a reading is of another device or otherwise wrong
 * (issue 14 case M: a driver that answered for device 0 on ranks 1-3). It
 * is never used as a limit or a capacity: that rank's budget is unknown
 * unless --budget is given. 0 when consistent or not recorded, or recorded
 * past the byte limit (advisor_ran.c). */
int adv_device_inconsistent(const am_rank *r, uint64_t *held, uint64_t *in_use);
/* The device bytes in use when rank r's fatal OOM failed although the
 * device had at least the request free (cudaMemGetInfo in the OOM record:
 * total - free, bytes): the job met a limit below the capacity (a
 * per-process memory fraction, an MPS, MIG or container limit, the
 * driver's), and that is where its budget ends (issue 14 E). 0 when there
 * is no such OOM or its free bytes are unknown (advisor_ran.c). */
uint64_t adv_oom_limit(const am_rank *r);
/* With such a limit (adv_oom_limit) below capacity (bytes): adds the
 * BUDGET:DEVICE_LIMIT finding (its bytes: the capacity out of reach) and returns
 * the limit, the capacity the budget is then made from; else returns
 * capacity unchanged (advisor_ran.c). */
uint64_t adv_limit_finding(adv_verdict *v, const am_rank *r, uint64_t capacity);
/* The capacity rank r's device had as the job ran (bytes): the trace
 * header's, else cudaMemGetInfo's total, else the failing call's total,
 * lowered to a limit an OOM met (adv_oom_limit); never --budget. 0 when
 * nothing recorded it. Triage diagnoses what happened against it (a
 * --budget above it is a what-if for another device: issue 14, hnew
 * finding 4) (advisor_ran.c). */
uint64_t adv_ran_capacity(const am_rank *r);
/* A --budget (bytes, 0 none) above adv_ran_capacity(r): adds the
 * BUDGET:ABOVE_DEVICE finding (its bytes: budget - recorded capacity) so
 * the report states that the advice is for a larger device than the traced
 * one (advisor_ran.c). */
void adv_budget_above_device(adv_verdict *v, const am_rank *r, uint64_t budget);
/* A recompute fallback c offered next to finding f (issue 14 C): under
 * X:FRAGMENTATION the gap f names (reserved but unallocated at the OOM, or
 * free in the non-graph pools: f->bytes) stays while the allocator is
 * unchanged, so c's nominal cache says nothing; it is stated against its
 * allocated peak + that gap on f's rank, and offered only together with
 * the allocator fix, since the gap does not keep its size when the
 * allocations change (megasim: a setting within the budget with the gap ran
 * out of memory with a larger one). Writes the qualifier into out; returns
 * 1 when peak + gap is within the budget, 0 when over, -1 when f is no
 * fragmentation finding (out empty) (advisor_ran.c). */
int adv_fallback_with_gap(const adv_verdict *v, const adv_finding *f, const adv_cand *c,
                          char *out, size_t n);
/* The last finding added (if its code is code): the bytes its cause holds at
 * the peak / OOM it is about (bytes; 0 leaves them unstated). */
void adv_finding_held(adv_verdict *v, const char *code, uint64_t bytes);
/* Append a fix to the last finding (if its code is code) with the bytes it
 * addresses (known 0: unknown, reported null); dropped past ADV_MAX_LEVERS. */
void adv_finding_lever(adv_verdict *v, const char *code, const char *change, uint64_t bytes,
                       int known);
/* The deficit finding f is judged against: its rank's modelled reserved
 * peak less its budget (bytes, 0 when it fits). 1, or 0 when unknown (a
 * job-level finding, a rank not evaluated, an unknown capacity). */
int adv_finding_deficit(const adv_verdict *v, const adv_finding *f, uint64_t *deficit);

/* ---- which ranks bind, which findings may speak for them (advisor_binding.c;
 * issue 14 classes A and D) ---- */
/* The binding ranks (bind[i] = 1 per rank index i < v->nranks): those with a
 * fatal OOM, else those whose modelled reserved peak is over their budget.
 * Returns how many (0: the job fits). */
size_t adv_binding_ranks(const am_job *j, const adv_verdict *v, uint8_t *bind);
/* 1 when rank index i's allocated peak alone (the baseline: the recorded or
 * projected tensor-level peak with a fatal OOM's failed request) is over its
 * device, capacity - memory outside PyTorch (bytes over in *over, may be
 * NULL): no allocator setting can fit it. 0 otherwise or when unknown. */
int adv_real_deficit(const adv_verdict *v, size_t i, uint64_t *over);
/* 1 when f's fix is the allocator's alone (fragmentation: expandable segments;
 * a library starved by PyTorch's cache: emptying it). */
int adv_allocator_only(const adv_finding *f);
/* 1 when text names as a change a setting the recorded configuration already
 * has (expandable segments, the distributed optimizer, bf16 moments, the fused
 * cross-entropy, a distributed checkpoint format, optimizer CPU offload,
 * --recompute-activations). */
int adv_names_in_use(const char *text, const adv_cfg *c);
/* 1 when f's only fix is a setting the job already has (fragmentation with
 * expandable segments on). */
int adv_fix_in_use(const adv_finding *f, const adv_cfg *c);
/* Drop every finding whose only fix is in use (adv_fix_in_use: its cause
 * cannot be what it says) and every lever naming a setting already in use
 * (adv_names_in_use) from v's findings; a finding's fix_bytes becomes its
 * best known lever left. */
void adv_drop_levers_in_use(adv_verdict *v, const adv_cfg *c);
/* 1 when f may be the verdict: it is a finding of a binding rank (bind from
 * adv_binding_ranks, nbind of them; a job-level finding always), its fix is
 * not in use, and it is not an allocator-only fix while a binding rank is
 * over its device in allocated bytes. */
int adv_finding_eligible(const am_job *j, const adv_verdict *v, const uint8_t *bind,
                         size_t nbind, const adv_finding *f);
/* 1 when every binding rank has a finding ok[] allows (per finding index)
 * that may be a primary code (not X:HOT_RANK, X:SHAPE_OUTLIER,
 * X:MOE_IMBALANCE, R:..., BUDGET:...): a triage code is the verdict only
 * when it leaves no binding rank unexplained (a rank whose bytes no triage
 * cause holds needs the counterfactuals). */
int adv_binding_explained(const adv_verdict *v, const uint8_t *bind, const uint8_t *ok);
/* "BINDS: rank R (OOM in iteration i, phase p: CODE subtype); ranks ..." into
 * out (n bytes): each binding rank (ranks with the same statement grouped, at
 * most six groups) with what binds it; prim, the verdict's finding, when it
 * is that rank's. "" when no rank binds. The same per rank, structured, into
 * v->binds (binds_known set): the JSON's verdict.binds. */
void adv_binding_why(const am_job *j, adv_verdict *v, const uint8_t *bind,
                     const adv_finding *prim, char *out, size_t n);

/* ---- levers that cost no replay, ranked against recompute (advisor_lever.c;
 * docs/advisor.md rule 45) ---- */
/* The fused loss that keeps no fp32 copy of the logits: Transformer Engine's
 * cross-entropy (--cross-entropy-loss-fusion --cross-entropy-fusion-impl te:
 * te_parallel_cross_entropy computes the loss and writes the gradient in
 * place in the bf16 logits it saves). Megatron-Core's default impl, native
 * (fused_vocab_parallel_cross_entropy), keeps one as the unfused loss does
 * (calculate_logits_max's .float(), the fp32 softmax saved for the backward;
 * megatron-core 0.19.2 fusions/fused_cross_entropy.py, language_module.py
 * compute_language_model_loss; hplay8 B, SkyRL PR 1841 measured it). */
#define ADV_CE_LEVER "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te"
#define ADV_CE_IMPL "--cross-entropy-fusion-impl te" /* the fused loss already on (native) */
#define ADV_CE_NO_COPY(c) ((c)->ce_fusion == 3)
#define ADV_CE_CHANGE(c) ((c)->ce_fusion & 1 ? ADV_CE_IMPL : ADV_CE_LEVER)

/* 1 when a finding's lever `change` costs no replay: a switch that adds no
 * compute and changes neither numerics, parallel layout nor device count,
 * whose bytes are what it removes from the allocated peak (the table in
 * advisor_lever.c: --cross-entropy-loss-fusion). */
int adv_lever_zero_replay(const char *change);
/* A zero-replay lever predicted to fit every rank (adv_zero_replay_lever). */
typedef struct adv_lever_fit {
    char change[96];          /* the lever, as its finding names it */
    int finding;              /* the finding offering it on the rank of least margin */
    int rank;                 /* that rank's index (< v->nranks) */
    int tier;                 /* as a recompute candidate's (advisor_verdict.c choose_tier):
                               * 0 fits with the 2% error bound, 1 only without it
                               * (marginal); +2 when a cache term is a lower bound;
                               * -1 it does not fit */
    uint64_t predicted[ADV_MAX_RANKS]; /* allocated peak with it: baseline - its bytes */
    uint64_t reserved[ADV_MAX_RANKS];  /* reserved peak with it: the baseline's modelled
                                        * reserved peak - its bytes (bytes) */
} adv_lever_fit;
/* The zero-replay lever (adv_lever_zero_replay) of v's findings, with known
 * bytes and not in the recorded configuration, that fits every rank in the
 * best tier by the recompute candidates' margin rules: on each rank a finding
 * offers it for, the baseline's modelled reserved peak less its bytes is
 * within the budget (tier 0 with the 2% error bound added, 1 only without it;
 * +2 when a cache term is a lower bound, v->cache_short); every other rank is
 * within its budget as measured and is not binding (bind: adv_binding_ranks).
 * 1 with *out filled; 0 when none fits (*out: the first such lever with
 * tier -1, or change "" when there is none) or a budget is unknown. */
int adv_zero_replay_lever(const adv_verdict *v, const uint8_t *bind, adv_lever_fit *out);

/* Counterfactual: peak bytes of the rewritten op stream of one rank for a
 * setting; *phase gets the phase of the peak. */
typedef struct adv_setting {
    unsigned labels;
    int full_method, full_n;  /* full recompute (labels ignored) */
} adv_setting;
uint64_t adv_counterfactual(const adv_trace *t, const adv_cfg *c, const adv_setting *s,
                            uint64_t extra_state, uint8_t *phase);
/* The same, also modelling PyTorch's caching allocator along the rewritten
 * stream (advisor_cache.c): *reserved_out gets the peak of reserved bytes
 * (>= the returned allocated peak; the projection's bytes included); limit:
 * capacity - outside PyTorch (bytes; 0 none), past which a new segment first
 * releases the wholly free ones. */
uint64_t adv_counterfactual_reserved(const adv_trace *t, const adv_cfg *c, const adv_setting *s,
                                     uint64_t extra_state, uint8_t *phase, uint64_t limit,
                                     uint64_t *reserved_out);
/* The same, and *step_out (may be NULL) gets the reserved peak's uncertainty
 * from the rewrite (bytes): the largest step (adv_cache_step) a block the
 * candidate's replays allocate, or the model serves from its cache after the
 * rewritten stream first leaves the recorded one (adv_cache_depart: the
 * first discard or replay inserted, or t->departs), would add to the
 * reserved bytes if the run found no cached block for it where the model
 * did; 0 without a rewrite. On Transformer Engine's spec the run opened a
 * segment for the loss's logits that the model served from its cache
 * (docs/validation/megatron-core.md "Reserved on TE's spec").
 * Measured on the real Megatron-Core job (docs/advisor.md "Reserved
 * uncertainty"): a rewrite that under-predicts the allocated bytes by up to 1.9%
 * opens one more such segment in the real run (-4.9% to -10% reserved; -16.3%
 * where the run found no free block for the logits on TE's spec). */
uint64_t adv_counterfactual_model(const adv_trace *t, const adv_cfg *c, const adv_setting *s,
                                  uint64_t extra_state, uint8_t *phase, uint64_t limit,
                                  uint64_t *reserved_out, uint64_t *step_out);
/* The most bytes one of a full-recompute setting's layer groups would
 * checkpoint that were allocated in forward outside Megatron's layer ranges
 * (a module of the job's own, before or between the layers' ranges: no NVTX
 * range, no Transformer Engine call), per group and microbatch; 0 for
 * selective settings. Its replay is Python the trace shows only when it was
 * recorded with full recompute on (advisor_counterfactual.c). */
uint64_t adv_foreign_bytes(const adv_trace *t, const adv_setting *s);
/* The caching allocator model (advisor_cache.c): alloc ids 0..nids-1. */
typedef struct adv_cache_sim adv_cache_sim;
adv_cache_sim *adv_cache_new(size_t nids, uint64_t limit);
void adv_cache_alloc(adv_cache_sim *s, uint32_t id, uint64_t size);
void adv_cache_free(adv_cache_sim *s, uint32_t id);
uint64_t adv_cache_reserved(const adv_cache_sim *s);
/* The most one request of size bytes adds to the reserved bytes when no
 * cached block holds it: its new segment (or pages, expandable segments). */
uint64_t adv_cache_step(const adv_cache_sim *s, uint64_t size);
/* Marks the stream fed from now on as having left the recorded one; then
 * adv_cache_served_step gives the largest step of a block the model served
 * from its cache since (bytes; 0 none): one segment the run may open that
 * the model did not (advisor_cache.c). */
void adv_cache_depart(adv_cache_sim *s);
uint64_t adv_cache_served_step(const adv_cache_sim *s);
/* 1 + the first op position at which undone's op stream differs from the
 * recorded trace t's (the undo keeps allocation ids), 0 when they agree:
 * where an undone trace's stream leaves the recorded one (advisor_cache.c). */
uint32_t adv_trace_departure(const adv_trace *t, const adv_trace *undone);
/* Where the model placed live allocation id (a debugging aid,
 * RECOMP_ADVISOR_DUMP_STREAM): its segment's start (bytes past the model's
 * first segment: segments are opened at rising addresses, so two models fed
 * the same requests give the same starts), the segment's size and the
 * block's offset in it (bytes); 0, or -1 when id holds no block. */
int adv_cache_where(const adv_cache_sim *s, uint32_t id, uint64_t *seg, uint64_t *seg_size,
                    uint64_t *off);
void adv_cache_del(adv_cache_sim *s);
/* Apply the recorded allocator settings (cfg->alloc_conf: max_split_size_mb,
 * expandable_segments) to a new model (advisor_cache.c). */
void adv_cache_configure(adv_cache_sim *s, const adv_cfg *cfg);
/* 1 when rank r's trace ended early (OOM, not closed, capped or windowed)
 * before the allocator's cache was seen at a steady state: fewer than two
 * complete iterations, or its memory still growing from one complete
 * iteration to the next; *why (n bytes) says which (advisor_cache.c). */
int adv_cache_history(const am_rank *r, char *why, size_t n);
/* The setting the recorded configuration runs (selective labels or full). */
void adv_setting_of_cfg(const adv_cfg *c, adv_setting *s);
/* Undo the recorded recompute: match each active unit's forward allocations
 * that its no_grad forward (or discard) freed against the replayed
 * allocations on the backward thread by size sequence (replay order: later
 * regions of an instance first), drop the replayed allocations and keep each
 * forward tensor saved by the replay alive until its twin's free. *o is the
 * trace as it would be without recompute; *matched of *units were found.
 * *units is what the setting implies (full recompute: the layer groups of
 * every instance whose backward ran, counted from the configuration's layers
 * per chunk where one stage holds them all), less the units of the instance
 * a fatal OOM cut in its backward that were never replayed: *matched <
 * *units means the undo is incomplete and nothing that depends on it is
 * known. 0, or -1 (out of memory). */
int adv_trace_undo(const adv_trace *t, const adv_cfg *c, adv_trace *o, int *matched,
                   int *units);
/* Replay cost of a setting as a share of the step (FLOP model). */
double adv_replay_cost(const adv_cfg *c, const adv_setting *s, int stage_layers);
/* Validity: 1 valid, else 0 with reason. */
int adv_valid(const adv_cfg *c, const adv_setting *s, char *reason, size_t n);
/* adv_valid's reason for `mlp` with biased linears; a candidate whose validity
 * depends on add_bias_linear while it is unknown says "validity unverified". */
extern const char *const ADV_BIAS_MLP_REASON;
/* Labels the model has (bitmask). */
unsigned adv_model_labels(const adv_cfg *c);
/* Predicted Adam state bytes when the trace stops before the first step. */
uint64_t adv_predict_optimizer_state(const adv_cfg *c, uint64_t init_bytes, char *note,
                                     size_t n);


/* ---- the per-rank part, for summaries (advisor_parts.c; recomp-analyze
 * summarize and merge, docs/summary-format.md) ----
 * adv_run reads every rank's trace. Split in two: the per-rank part is what
 * the job part reads of a rank's op trace (its scalars, its undo, triage's
 * findings for it, and the counterfactual of every setting the candidate
 * sweep can ask for); the job part (adv_run_merge) runs the same pipeline on
 * those values, so its verdict is the one adv_run gives on the traces. */
typedef struct adv_cf {
    adv_setting s;
    uint8_t undone;           /* 1: evaluated on the trace with the recorded recompute undone */
    uint8_t phase;            /* am_phase of the allocated peak */
    uint64_t peak, reserved;  /* allocated and modelled reserved peak (bytes) */
    uint64_t foreign;         /* full settings: adv_foreign_bytes of the trace (bytes) */
    uint64_t step;            /* adv_counterfactual_model's step_out (bytes) */
} adv_cf;

typedef struct adv_rank_part {
    adv_trace scal;           /* the op trace's scalars (no allocations, ops, layers,
                               * instances or extras; nlayers kept as a count) */
    int undo_matched, undo_units; /* adv_trace_undo of this rank (recompute on) */
    int undo_by_size;         /* ... of which matched by size alone (adv_trace.undo_by_size) */
    uint64_t undo_nxr, undo_xr_bytes;
    uint64_t undone_peak;     /* adv_counterfactual of the undone trace, no recompute (bytes) */
    adv_finding *findings;    /* triage's findings for this rank, in triage's order */
    size_t nfindings;
    adv_cf *cf;               /* the counterfactual table (adv_part_settings) */
    size_t ncf;
    int missing;              /* merge: a setting the table lacked was asked for */
    /* per label: whether its region was recorded in some layer it applies to,
     * and in how many layers it applies (adv_label_region_seen, on the trace
     * with the recorded recompute undone when it was on) */
    uint8_t label_seen[ADV_NLABELS];
    uint32_t label_layers[ADV_NLABELS];
} adv_rank_part;

/* The settings the candidate sweep can ask of a rank (into out, at most max;
 * returns how many): none, the active one, every subset of the model's labels
 * and the active labels, every full[method,n] with n in 1..layers per chunk. */
size_t adv_part_settings(const adv_cfg *c, const adv_setting *active, adv_setting *out,
                         size_t max);
/* Whether label l's region was recorded in some layer of t it applies to
 * (1), and in *applies how many layers of t it applies to; the region markers
 * adv_trace_build sets from Megatron's NVTX ranges, TE's calls and Python
 * frames: core_attn its start and end, mla_up_proj (MLA layers) its start,
 * Q/K/V and the core attention's end (what advisor_counterfactual.c's
 * mla_unit needs), mlp (dense layers) its range, moe_act (MoE layers) the
 * expert activation. Labels without a region of their own (layernorm, moe,
 * shared_experts, ...): 1, *applies 0. */
int adv_label_region_seen(const adv_trace *t, int l, uint32_t *applies);
/* The table entry of (undone, s), or NULL. */
const adv_cf *adv_part_find(const adv_rank_part *p, int undone, const adv_setting *s);
void adv_rank_part_free(adv_rank_part *p);
/* Append a copy of f to v's findings (dropped when out of memory). */
void adv_part_finding_append(adv_verdict *v, const adv_finding *f);

/* adv_run over the job's traces that also fills parts[i] (zeroed by the
 * caller) for every rank i < v->nranks. 0, or -1 with err. */
int adv_run_summarize(am_job *j, const adv_opts *o, adv_verdict *v, adv_rank_part *parts,
                      char *err, size_t errlen);
/* The job part alone: the verdict from rank i's part parts[i] (i in the job's
 * rank order, < min(nranks, ADV_MAX_RANKS)) and the configuration the parts
 * were computed with; the sources are not read. -1 with err when a part lacks
 * a setting the sweep asks for (written by another build). */
int adv_run_merge(am_job *j, const adv_opts *o, const adv_cfg *cfg, adv_rank_part *const *parts,
                  adv_verdict *v, char *err, size_t errlen);

#endif
