/* placement.h: where Megatron-Core places transformer layers over pipeline
 * stages and virtual (interleaved) model chunks, and which model chunk the
 * k-th forward pass of an iteration runs (megatron-core 0.19.2:
 * get_num_layers_to_build and get_transformer_layer_offset in
 * transformer_block.py / transformer_layer.py, get_schedule_table in
 * pipeline_parallel/schedules.py).
 *
 * One implementation for the two stages that need it: the attribution
 * (analyzer/attribute/peak.c: the report's global layer numbers) and the
 * advisor (analyzer/advise/advisor_layers.c: which layers a recompute label
 * reaches). Checked against megatron-core 0.19.2's placements by
 * tests/analyze/test_config.c.
 */
#ifndef RECOMP_ANALYZER_PLACEMENT_H
#define RECOMP_ANALYZER_PLACEMENT_H

typedef struct am_placement {
    int num_layers;           /* --num-layers, <= 0 unknown */
    int pp;                   /* pipeline stages (>= 1) */
    int vp;                   /* virtual model chunks per stage (1: no VPP) */
    int first, last;          /* --decoder-first/last-pipeline-num-layers, -1 not given */
    int mb_group;             /* microbatch_group_size_per_vp_stage, <= 0: PP */
    int other;                /* a placement not modelled (--pipeline-model-parallel-layout,
                               * --account-for-embedding/loss-in-pipeline-split) */
} am_placement;

/* Layers on pipeline stage `stage`, all its chunks together; -1 unknown. */
int am_place_stage_layers(const am_placement *p, int stage);

/* Layers of one model chunk on pipeline stage `stage`; 0 unknown. */
int am_place_chunk_layers(const am_placement *p, int stage);

/* The 0-based global number of the first layer of model chunk `chunk` on
 * pipeline stage `stage`; -1 unknown (a placement not modelled, stage or
 * chunk out of range). */
int am_place_layer_offset(const am_placement *p, int stage, int chunk);

/* The model chunk of the k-th (0-based) forward pass of an iteration
 * (microbatches per iteration, <= 0 unknown: every microbatch group full);
 * 0 without VPP, -1 for k < 0 or past the iteration's forwards. */
int am_place_fwd_chunk(const am_placement *p, int k, int microbatches);

#endif
