/* advisor_layers.c: which global layers a rank's forward instances hold.
 *
 * A recompute label reaches only some layer types (`mlp` dense layers,
 * `moe`/`moe_act`/`shared_experts` MoE layers: megatron-core 0.19.2
 * transformer_layer.py), and the type of a layer is a property of its GLOBAL
 * number (--moe-layer-freq, --hybrid-layer-pattern). A rank's trace only shows
 * local positions: the k-th forward instance of an iteration and the i-th
 * layer in it. This file maps them the way Megatron places layers:
 *
 *   - layers per model chunk on a stage: get_num_layers_to_build
 *     (transformer_block.py): num_layers / PP, or the uneven first/last stage's
 *     own count (--decoder-first/last-pipeline-num-layers) with the rest split
 *     evenly over the middle stages; divided by the virtual chunks (VPP);
 *   - the first global layer of (stage, chunk): get_transformer_layer_offset
 *     (transformer_layer.py), interleaved: chunk c of stage p starts at
 *     c * (layers of one chunk on every stage together) + the layers of
 *     chunk c on stages before p;
 *   - the chunk of the k-th forward of an iteration: get_schedule_table
 *     (pipeline_parallel/schedules.py): microbatch groups of
 *     microbatch_group_size_per_vp_stage (default PP), each group running
 *     chunk 0 for all its microbatches, then chunk 1, ...
 *
 * A placement this file does not model (--pipeline-model-parallel-layout,
 * --account-for-embedding/loss-in-pipeline-split) gives -1 (unknown).
 */
#include "advisor.h"

static int
pp_of(const adv_cfg *c)
{
    return c->pp > 0 ? c->pp : 1;
}

static int
vp_of(const adv_cfg *c)
{
    return c->vpp > 1 ? c->vpp : 1;
}

/* --decoder-first/last-pipeline-num-layers, -1 not given (adv_cfg keeps
 * them plus one) */
static int
first_of(const adv_cfg *c)
{
    return c->first_stage_layers - 1;
}

static int
last_of(const adv_cfg *c)
{
    return c->last_stage_layers - 1;
}

static int
uneven(const adv_cfg *c)
{
    return pp_of(c) > 1 && (first_of(c) >= 0 || last_of(c) >= 0);
}

/* layers on pipeline stage `stage` (all its chunks), get_num_layers_to_build
 * before the division by VPP; -1 unknown */
static int
stage_layers(const adv_cfg *c, int stage)
{
    int pp = pp_of(c);
    if (c->num_layers <= 0 || c->layout_other || stage < 0 || stage >= pp)
        return -1;
    if (!uneven(c))
        return c->num_layers / pp;
    if (stage == 0 && first_of(c) >= 0)
        return first_of(c);
    if (stage == pp - 1 && last_of(c) >= 0)
        return last_of(c);
    int rest = c->num_layers - (first_of(c) > 0 ? first_of(c) : 0) -
               (last_of(c) > 0 ? last_of(c) : 0);
    int mid = pp - (first_of(c) >= 0) - (last_of(c) >= 0);
    return mid > 0 ? rest / mid : 0;
}

/* Layers of one model chunk on pipeline stage `stage` (get_num_layers_to_build,
 * megatron-core 0.19.2); stage < 0 (unknown): the even split
 * (adv_cfg_layers_per_chunk). 0 unknown. */
int
adv_cfg_chunk_layers(const adv_cfg *c, int stage)
{
    if (stage < 0 || c->layout_other)
        return adv_cfg_layers_per_chunk(c);
    int n = stage_layers(c, stage);
    return n > 0 ? n / vp_of(c) : 0;
}

/* The most layers a model chunk holds on any stage (the range of
 * --recompute-num-layers worth sweeping). 0 unknown. */
int
adv_cfg_max_chunk_layers(const adv_cfg *c)
{
    int best = 0;
    for (int p = 0; p < pp_of(c); p++) {
        int n = adv_cfg_chunk_layers(c, p);
        if (n > best)
            best = n;
    }
    return best ? best : adv_cfg_layers_per_chunk(c);
}

/* The 0-based global number of the first layer of model chunk `chunk` on
 * pipeline stage `stage` (get_transformer_layer_offset, megatron-core 0.19.2,
 * even and uneven splits, with and without VPP). -1 unknown (a placement not
 * modelled, stage or chunk out of range). */
int
adv_cfg_layer_offset(const adv_cfg *c, int stage, int chunk)
{
    int pp = pp_of(c), vp = vp_of(c);
    if (c->num_layers <= 0 || c->layout_other || stage < 0 || stage >= pp || chunk < 0 ||
        chunk >= vp)
        return -1;
    if (pp == 1)
        return chunk * (c->num_layers / vp);
    if (!uneven(c)) {
        int per = c->num_layers / pp / vp; /* layers of one chunk */
        return (chunk * pp + stage) * per;
    }
    int first = first_of(c) >= 0 ? first_of(c) : 0;
    int last = last_of(c) >= 0 ? last_of(c) : 0;
    int mid_stages = pp - (first_of(c) >= 0) - (last_of(c) >= 0);
    int mid_layers = c->num_layers - first - last;
    int mid_rank = first_of(c) >= 0 ? stage - 1 : stage;
    if (vp == 1) {
        if (stage == 0)
            return 0;
        return mid_rank * (mid_stages > 0 ? mid_layers / mid_stages : 0) + first;
    }
    /* layers of chunk `chunk` over all stages: first/VP + middle/VP + last/VP */
    int all = first / vp + mid_layers / vp + last / vp;
    if (stage == 0)
        return chunk * all;
    return chunk * all + first / vp + mid_rank * (mid_stages > 0 ? mid_layers / vp / mid_stages : 0);
}

/* Microbatches per iteration: global batch / (micro batch x data parallel);
 * 0 unknown. */
int
adv_cfg_microbatches(const adv_cfg *c)
{
    int d = c->mbs * (c->dp > 0 ? c->dp : 1);
    return c->gbs > 0 && d > 0 && c->gbs % d == 0 ? c->gbs / d : 0;
}

/* The model chunk of the k-th (0-based) forward of an iteration under the
 * interleaved schedule (get_schedule_table, megatron-core 0.19.2): microbatch
 * groups of G = microbatch_group_size_per_vp_stage (default PP) microbatches;
 * a group runs every chunk in turn over its microbatches; the last group
 * holds what is left. microbatches <= 0 (unknown): every group full. Without
 * VPP, 0; k < 0, -1. */
int
adv_cfg_fwd_chunk(const adv_cfg *c, int k, int microbatches)
{
    int vp = vp_of(c);
    if (k < 0)
        return -1;
    if (vp == 1)
        return 0;
    int g = c->mb_group > 0 ? c->mb_group : pp_of(c);
    if (microbatches > 0) {
        /* the last group starts at the first multiple of G with start + G >= M */
        int last_start = ((microbatches - 1) / g) * g;
        int before = last_start * vp; /* forwards in the full groups before it */
        if (k >= before) {
            int size = microbatches - last_start;
            int chunk = (k - before) / size;
            return chunk < vp ? chunk : -1;
        }
    }
    return (k / g) % vp;
}
