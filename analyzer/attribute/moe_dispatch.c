/* moe_dispatch.c: the tokens each MoE layer's dispatch all-to-all delivers to
 * this rank, read from the NCCL calls the shim records.
 *
 * Megatron-Core's alltoall token dispatcher (token_dispatcher.py,
 * MoEAlltoAllTokenDispatcher.token_dispatch, core_v0.19.0) sends the permuted
 * tokens with all_to_all(ep_group, tokens, output_splits, input_splits), the
 * first all-to-all inside the MoE layer's forward (the probs' and the
 * combine's follow). PyTorch posts an all-to-all with splits as one NCCL group
 * of a ncclSend and a ncclRecv per peer with a non-zero count
 * (all2all_single_unequal_split), so the group's received bytes are the
 * tokens this rank's experts get, times h x the element size. Dropless
 * (no capacity factor), a rank always sends n x topk copies, so with
 * balanced routing it receives what it sends; more means routing sends it
 * more than its share (docs/analysis.md "MoE dispatch").
 *
 * Counted: on the main thread in the forward phase, the first group with
 * receives from two or more peers inside one call of a Megatron `.mlp`
 * range (the MoE layer's `_forward_mlp.mlp`; MoE has no range of its own).
 * Without Megatron's ranges (no --nvtx-ranges) and without Python frames
 * (RECOMPSHIM_PYSTACK=0; with frames, MoELayer.forward is the `.mlp` call)
 * nothing is counted and the
 * report says nothing. */
#include <stdlib.h>

#include "timeline.h"

/* The MoE layer's `.mlp` call around the group: the innermost frame with
 * boundary mlp, passing over NCCL's own ranges, TE C calls and the MoE
 * layer's inner parts (the token dispatcher, router and experts, boundary
 * moe: ranges made from Megatron-Core's Python frames, analyzer/model/
 * pyframes.c, sit between the `.mlp` range and the NCCL calls). NULL when
 * the group is not inside an `.mlp` call. */
static const tl_frame *
caller_frame(const tl_thread *th)
{
    for (size_t k = th->depth; k > 0; k--) {
        const tl_frame *f = &th->stack[k - 1];
        if (f->m.signal == AM_SIG_NCCL || (f->m.flags & AM_CF_NVTE))
            continue;
        if (f->boundary == AM_BD_mlp)
            return f;
        if (f->boundary != AM_BD_moe)
            return NULL;
    }
    return NULL;
}

static void
group_done(tl *t, tl_thread *th)
{
    if (th->moeg_recv_peers < 2 || th->role != AM_ROLE_MAIN || t->phase != AM_PH_forward)
        return;
    const tl_frame *f = caller_frame(th);
    if (!f || f->boundary != AM_BD_mlp || f->call_id == th->moe_call)
        return;
    th->moe_call = f->call_id;
    am_moe_dispatch *m = &t->moe;
    m->n++;
    if (th->moeg_recv != th->moeg_send)
        m->uneven++;
    if (th->moeg_recv > m->max_recv) {
        m->max_recv = th->moeg_recv;
        m->sent_at_max = th->moeg_send;
        m->layer = t->fwd_layer;
        m->fwd = t->fwd_k;
        m->first = t->out->niters <= 1;
        m->iteration = t->iteration;
    }
    if (!m->min_recv || th->moeg_recv < m->min_recv)
        m->min_recv = th->moeg_recv;
}

void
tl_moe_collective(tl *t, tl_thread *th, const am_event *ev)
{
    switch ((am_coll)ev->op) {
    case AM_COLL_GROUP_START:
        if (th->moeg_depth++ == 0) {
            th->moeg_send = th->moeg_recv = 0;
            th->moeg_recv_peers = 0;
            th->moeg_last_peer = -1;
        }
        break;
    case AM_COLL_GROUP_END:
        if (th->moeg_depth > 0 && --th->moeg_depth == 0)
            group_done(t, th);
        break;
    case AM_COLL_SEND:
        if (th->moeg_depth > 0)
            th->moeg_send += ev->size;
        break;
    case AM_COLL_RECV:
        if (th->moeg_depth > 0) {
            th->moeg_recv += ev->size;
            if (ev->peer != th->moeg_last_peer)
                th->moeg_recv_peers++;
            th->moeg_last_peer = ev->peer;
        }
        break;
    default:
        break;
    }
}

/* Bytes per dispatched token: --hidden-size x 2 (bf16/fp16) or 4; 0 when the
 * command line does not give the hidden size. */
static uint64_t
token_bytes(const am_meta *meta)
{
    const char *h = am_argv_value(meta, "--hidden-size");
    if (!h || !*h)
        return 0;
    uint64_t hv = strtoull(h, NULL, 10);
    int half = am_argv_value(meta, "--bf16") || am_argv_value(meta, "--fp16");
    return hv * (half ? 2 : 4);
}

void
tl_moe_report(tl *t)
{
    const am_moe_dispatch *m = &t->moe;
    if (!m->n || !m->uneven || !m->sent_at_max || !t->out->src)
        return;
    uint64_t tb = token_bytes(&t->out->src->meta);
    double ratio = (double)m->max_recv / (double)m->sent_at_max;
    int layer = am_rank_layer(t->out, m->layer, m->fwd, m->first);
    if (tb)
        am_note(t->out,
                "MoE dispatch: routing is uneven: this rank's experts received up to %llu "
                "tokens in one MoE layer's all-to-all (layer %d, iteration %d), %.2fx the %llu "
                "it sent (dropless and balanced: equal), at least %llu; %zu dispatches",
                (unsigned long long)(m->max_recv / tb), layer, m->iteration, ratio,
                (unsigned long long)(m->sent_at_max / tb), (unsigned long long)(m->min_recv / tb),
                m->n);
    else
        am_note(t->out,
                "MoE dispatch: routing is uneven: this rank received up to %llu bytes in one MoE "
                "layer's all-to-all (layer %d, iteration %d), %.2fx the %llu it sent (dropless "
                "and balanced: equal); tokens unknown (no --hidden-size); %zu dispatches",
                (unsigned long long)m->max_recv, layer, m->iteration, ratio,
                (unsigned long long)m->sent_at_max, m->n);
}
