/* placement.c: Megatron-Core's layer placement over pipeline stages and
 * virtual model chunks, and the interleaved schedule's chunk order
 * (placement.h; megatron-core 0.19.2):
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
 */
#include "placement.h"

static int
pp_of(const am_placement *p)
{
    return p->pp > 0 ? p->pp : 1;
}

static int
vp_of(const am_placement *p)
{
    return p->vp > 1 ? p->vp : 1;
}

static int
uneven(const am_placement *p)
{
    return pp_of(p) > 1 && (p->first >= 0 || p->last >= 0);
}

int
am_place_stage_layers(const am_placement *p, int stage)
{
    int pp = pp_of(p);
    if (p->num_layers <= 0 || p->other || stage < 0 || stage >= pp)
        return -1;
    if (!uneven(p))
        return p->num_layers / pp;
    if (stage == 0 && p->first >= 0)
        return p->first;
    if (stage == pp - 1 && p->last >= 0)
        return p->last;
    int rest = p->num_layers - (p->first > 0 ? p->first : 0) - (p->last > 0 ? p->last : 0);
    int mid = pp - (p->first >= 0) - (p->last >= 0);
    return mid > 0 ? rest / mid : 0;
}

int
am_place_chunk_layers(const am_placement *p, int stage)
{
    int n = am_place_stage_layers(p, stage);
    return n > 0 ? n / vp_of(p) : 0;
}

int
am_place_layer_offset(const am_placement *p, int stage, int chunk)
{
    int pp = pp_of(p), vp = vp_of(p);
    if (p->num_layers <= 0 || p->other || stage < 0 || stage >= pp || chunk < 0 ||
        chunk >= vp)
        return -1;
    if (pp == 1)
        return chunk * (p->num_layers / vp);
    if (!uneven(p)) {
        int per = p->num_layers / pp / vp; /* layers of one chunk */
        return (chunk * pp + stage) * per;
    }
    int first = p->first >= 0 ? p->first : 0;
    int last = p->last >= 0 ? p->last : 0;
    int mid_stages = pp - (p->first >= 0) - (p->last >= 0);
    int mid_layers = p->num_layers - first - last;
    int mid_rank = p->first >= 0 ? stage - 1 : stage;
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

/* microbatch groups of G = microbatch_group_size_per_vp_stage (default PP); a
 * group runs every chunk in turn over its microbatches; the last group holds
 * what is left */
int
am_place_fwd_chunk(const am_placement *p, int k, int microbatches)
{
    int vp = vp_of(p);
    if (k < 0)
        return -1;
    if (vp == 1)
        return 0;
    int g = p->mb_group > 0 ? p->mb_group : pp_of(p);
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
