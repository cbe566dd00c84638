/* summary.h: per-rank summaries of an analysed run (recomp-analyze
 * summarize) and their reading back (recomp-analyze merge); the format is
 * docs/summary-format.md.
 *
 * A summary holds, per rank, what the reporters and the advisor's job part
 * read: the source's metadata, the analysed am_rank (peaks at both levels
 * with their grouped live sets, iterations and phases, OOMs, coverage,
 * notes) and the advisor's per-rank part (adv_rank_part). Merging summaries
 * rebuilds those ranks; the reports and the verdict are then computed by the
 * same code as for traces.
 */
#ifndef RECOMP_ANALYZER_SUMMARY_H
#define RECOMP_ANALYZER_SUMMARY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "advisor.h"
#include "analysis.h"

#define AM_SUMMARY_MAGIC "RSSUMMRY"
#define AM_SUMMARY_MAJOR 6
#define AM_SUMMARY_MINOR 1 /* 6.1: after the last rank, each rank's ppid and exit, then
                            * each rank's caught OOMs */
#define AM_SUMMARY_HEADER 32 /* bytes before the payload */
#define AM_SUMMARY_DEFLATE 1 /* flags: the payload is stored as its length (u64) and a
                              * zlib stream of it */

/* adv_cfg as a summary holds it: its int fields in this order, then its
 * strings (char arrays), then offload_fraction, modules and flags_style
 * (summary.c v_cfg). A field added to adv_cfg goes here (appended), or the
 * round trip test (tests/summary/test_summary_cfg.c) fails: every byte of the
 * struct must come back. 6.0 appended first_stage_layers, last_stage_layers,
 * mb_group, layout_other and the strings alloc_conf, hybrid. */
#define AM_SUMMARY_CFG_INTS(X) X(megatron) X(num_layers) X(hidden) X(ffn) X(heads) X(groups) \
    X(kv_channels) X(seq) X(mbs) X(gbs) X(vocab) X(train_iters) X(ce_fusion) X(tp) X(pp) \
    X(cp) X(ep) X(etp) X(vpp) X(sp) X(world) X(dp) X(dist_opt) X(bf16) X(fp16) X(swiglu)   \
    X(fused_attn) X(num_experts) X(topk) X(moe_ffn) X(shared_ffn) X(grouped_gemm)          \
    X(shared_overlap) X(ep_overlap) X(mla) X(q_lora) X(kv_lora) X(qk_head) X(qk_pos)       \
    X(v_head) X(granularity) X(method) X(recompute_num_layers) X(fp8) X(distribute_saved)  \
    X(cpu_offloading) X(exp_avg_bf16) X(moe_layer_freq_k) X(alloc_expandable) X(no_te)      \
    X(optimizer_cpu_offload) X(ckpt_fully_reshardable) X(ckpt_mem_efficient) X(ckpt_torch) \
    X(bias_linear) X(first_stage_layers) X(last_stage_layers) X(mb_group) X(layout_other)
#define AM_SUMMARY_CFG_STRS(X) X(source) X(fp8_recipe) X(cuda_graph_impl) \
    X(cuda_graph_modules) X(moe_pattern) X(unknown) X(alloc_conf) X(hybrid)

/* The analysis options a summary was made with; merge refuses others, as the
 * per-rank values depend on them. */
typedef struct am_summary_opts {
    uint64_t budget;          /* --budget bytes, 0 none */
    uint64_t headroom;        /* --headroom bytes */
    char config[1024];        /* --config FILE, "" none */
    int iteration;            /* --iteration K, -1 none */
    int advice;               /* 1: the advisor's per-rank part is held */
} am_summary_opts;

/* One summary read back: its ranks (each with a source that holds only the
 * metadata) and their advisor parts. */
typedef struct am_summary {
    char path[1024];
    am_summary_opts opts;
    adv_cfg cfg;              /* the advisor's configuration (opts.advice) */
    am_rank *ranks;
    adv_rank_part *parts;     /* per rank when opts.advice, else NULL */
    size_t nranks;
} am_summary;

/* Write the summary of an analysed job (ranks in j, parts[i] the advisor's
 * part of rank i for i < min(nranks, ADV_MAX_RANKS), or NULL with
 * opts->advice 0) to path. 0, or -1 with a line naming the file in err. */
int am_summary_write(const char *path, const am_job *j, const am_summary_opts *opts,
                     const adv_cfg *cfg, const adv_rank_part *parts, char *err, size_t errlen);

/* Read a summary (validated: magic, version, length, checksum, every field
 * within the payload and within its limits). 0, or -1 with a line "FILE:
 * offset N: field F: what" in err (s is then freed). */
int am_summary_read(const char *path, am_summary *s, char *err, size_t errlen);

/* The same from memory (the fuzz target). name names it in errors. */
int am_summary_parse(const char *name, const unsigned char *buf, size_t len, am_summary *s,
                     char *err, size_t errlen);

/* 1 when the file starts with AM_SUMMARY_MAGIC. */
int am_summary_sniff(const char *path);

/* Free what am_summary_read left in s (ranks not moved out: moving a rank
 * out sets its slot's src to NULL and its parts to zero). */
void am_summary_free(am_summary *s);

#endif
