/* advisor_layers.c: which global layers a rank's forward instances hold.
 *
 * A recompute label reaches only some layer types (`mlp` dense layers,
 * `moe`/`moe_act`/`shared_experts` MoE layers: megatron-core 0.19.2
 * transformer_layer.py), and the type of a layer is a property of its GLOBAL
 * number (--moe-layer-freq, --hybrid-layer-pattern). A rank's trace only shows
 * local positions: the k-th forward instance of an iteration and the i-th
 * layer in it. This file maps them the way Megatron places layers, from the
 * job's configuration (adv_cfg), with model/placement.c's arithmetic (the
 * attribution's global layer numbers use the same).
 *
 * A placement this file does not model (--pipeline-model-parallel-layout,
 * --account-for-embedding/loss-in-pipeline-split) gives -1 (unknown).
 */
#include "advisor.h"
#include "placement.h"

/* the configuration's placement fields (adv_cfg keeps the uneven stage sizes
 * plus one, 0 not given) */
static am_placement
placement_of(const adv_cfg *c)
{
    return (am_placement){c->num_layers, c->pp > 0 ? c->pp : 1, c->vpp > 1 ? c->vpp : 1,
                          c->first_stage_layers - 1, c->last_stage_layers - 1, c->mb_group,
                          c->layout_other};
}

/* Layers of one model chunk on pipeline stage `stage` (get_num_layers_to_build,
 * megatron-core 0.19.2); stage < 0 (unknown): the even split
 * (adv_cfg_layers_per_chunk). 0 unknown. */
int
adv_cfg_chunk_layers(const adv_cfg *c, int stage)
{
    if (stage < 0 || c->layout_other)
        return adv_cfg_layers_per_chunk(c);
    am_placement p = placement_of(c);
    return am_place_chunk_layers(&p, stage);
}

/* The most layers a model chunk holds on any stage (the range of
 * --recompute-num-layers worth sweeping). 0 unknown. */
int
adv_cfg_max_chunk_layers(const adv_cfg *c)
{
    int best = 0;
    for (int p = 0; p < (c->pp > 0 ? c->pp : 1); p++) {
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
    am_placement p = placement_of(c);
    return am_place_layer_offset(&p, stage, chunk);
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
 * interleaved schedule (get_schedule_table, megatron-core 0.19.2:
 * am_place_fwd_chunk). microbatches <= 0 (unknown): every group full. Without
 * VPP, 0; k < 0, -1. */
int
adv_cfg_fwd_chunk(const adv_cfg *c, int k, int microbatches)
{
    am_placement p = placement_of(c);
    return am_place_fwd_chunk(&p, k, microbatches);
}
