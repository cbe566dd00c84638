/* catalog.h: vocabulary (phases, boundaries) and the lookup of the signal
 * catalog (catalog.def) for range names, thread names and caller modules.
 */
#ifndef RECOMP_ANALYZER_CATALOG_H
#define RECOMP_ANALYZER_CATALOG_H

#include <stddef.h>
#include <stdint.h>

/* Training phases (docs/architecture.md). Order is the JSON/text order. */
#define AM_PHASES(X) X(init) X(forward) X(backward) X(backward_replay) X(grad_sync) \
    X(optimizer) X(optimizer_state_init) X(param_sync) X(eval) X(checkpoint_save) X(other) \
    X(unknown)
typedef enum am_phase {
#define X(n) AM_PH_##n,
    AM_PHASES(X)
#undef X
    AM_PH_COUNT
} am_phase;

/* Module boundaries: Megatron's recompute labels ([M] in docs/sources.md) plus
 * the profiler's own. Appended after unknown (summaries store the index):
 * cp_comm, context parallelism's communication buffers inside core attention
 * (attribute/cp_comm.c); mamba, a hybrid model's Mamba mixer layer (MambaLayer:
 * in_proj, the conv + scan, the gated norm, out_proj; docs/megasim.md "Hybrid
 * Mamba layers"), which no recompute label reaches. */
#define AM_BOUNDARIES(X) X(core_attn) X(mla_up_proj) X(layernorm) X(moe_act) X(mlp) \
    X(moe) X(shared_experts) X(gdn_norm_out) X(gdp_in_proj) X(gdp_qkv) X(mhc)      \
    X(embedding) X(output_layer) X(loss) X(attention_other) X(params) X(grads)      \
    X(optimizer_state) X(nccl) X(workspace) X(cuda_graph_pool) X(unknown)         \
    X(cp_comm) X(mamba)
typedef enum am_boundary {
#define X(n) AM_BD_##n,
    AM_BOUNDARIES(X)
#undef X
    AM_BD_COUNT,
    AM_BD_INHERIT = 0xff  /* catalog only: take the enclosing range's */
} am_boundary;

/* What a range says about the program phase (catalog.def). */
typedef enum am_signal {
    AM_SIG_NONE = 0, AM_SIG_FWD, AM_SIG_BWD, AM_SIG_OPT, AM_SIG_STEP, AM_SIG_ZERO,
    AM_SIG_PIPE, AM_SIG_P2P, AM_SIG_NCCL, AM_SIG_EVAL, AM_SIG_SAVE,
    AM_SIG_GSYNC              /* the gradient sync (finalize_model_grads) on the main thread */
} am_signal;

enum {
    AM_CF_LAYER = 1,          /* layer starts here (forward) */
    AM_CF_NVTE = 2,           /* TE C API range: nearest-range rule */
    AM_CF_ATTN_BWD = 4,       /* attention backward of a layer */
    AM_CF_LAYER_FALLBACK = 8, /* layer start when no LAYER range is in the trace */
};

typedef enum am_role { AM_ROLE_OTHER = 0, AM_ROLE_MAIN, AM_ROLE_BACKWARD } am_role;

/* The catalog's verdict on one range name. */
typedef struct am_cat_match {
    uint8_t signal;           /* am_signal */
    uint8_t boundary;         /* am_boundary or AM_BD_INHERIT */
    uint8_t flags;            /* AM_CF_* */
    int16_t rule;             /* index of the matching row, -1 none */
} am_cat_match;

/* How a catalog.def pattern matches a name: EXACT, PREFIX, SUFFIX, CONTAINS. */
enum { M_EXACT, M_PREFIX, M_SUFFIX, M_CONTAINS };

/* 1 when name s (len bytes, not NUL-terminated) matches pattern pat (plen
 * bytes) the way `how` (M_*) says; 0 otherwise (an unknown `how` too). */
int am_catalog_name_match(int how, const char *pat, size_t plen, const char *s, size_t len);

/* Match a range name (len bytes, no NUL needed) in NVTX domain `domain`
 * (NULL/0 = default). Pure function of its inputs. */
am_cat_match am_catalog_range(const char *name, size_t len, const char *domain,
                              size_t domain_len);

/* Role of a thread by name (NUL-terminated or NULL); MAIN is decided by the
 * caller (tid == pid). */
am_role am_catalog_thread(const char *name);

/* am_lib (model.h) of a module path (full path or basename). */
int am_catalog_lib(const char *path, size_t len);

const char *am_phase_name(int phase);
const char *am_boundary_name(int b);
/* Row `rule`'s pattern text (for --explain style output), or "". */
const char *am_catalog_rule_pattern(int rule);

#endif
