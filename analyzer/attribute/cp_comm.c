/* cp_comm.c: context parallelism's communication buffers, told apart from
 * core attention's own tensors (boundary cp_comm instead of core_attn).
 *
 * Inside Megatron's core attention the only collectives are context
 * parallelism's (TE's attention with CP; tensor parallelism communicates in
 * the linears around it). Transformer Engine allocates each exchange's
 * buffers in the same Python call right before it posts the exchange
 * (context_parallel.py, TE v2.9; docs/megasim.md "Context parallelism"):
 *
 *   p2p (ring)   p2p_comm_buffers[i+1] = torch.empty_like(p2p_comm_buffers[i])
 *                (after torch.cat((k, v)) for step 0), then isend/irecv of that
 *                size on the CP group: a send and a receive buffer of B bytes;
 *   a2a          x.contiguous() and torch.empty_like(x), then all_to_all_single
 *                of B bytes: the send copy and the receive buffer;
 *   all_gather   gather_along_first_dim: an output of cp x B (B = the bytes
 *                each rank sends), then all_gather.
 *
 * So on a collective of B bytes inside core attention, the tensors allocated
 * since the last TE C call (its outputs are allocated just before it) in that
 * module call, most recent first, are its buffers: one of exactly B for a
 * send or a receive, two for an all-to-all, one of k x B (k >= 2) for an
 * all-gather. Sends and receives posted in one NCCL group (PyTorch's
 * all_to_all_single posts one of each per peer, batch_isend_irecv the ring's
 * pair) count as one send and one receive of their summed bytes. Sizes compare as PyTorch reports them
 * (B or B rounded up to its 512-byte blocks). What the exchange's tensors
 * become afterwards (the reordered copy the attention reads, the output) is
 * allocated after it, so it stays core_attn. Not matched, and left core_attn:
 * buffers that are views of a larger one (TE's backward ring sends KV and dKV
 * as halves of one (2, kv) buffer) and buffers allocated before an earlier TE
 * call; the trace records no buffer addresses for collectives. Tensor level
 * only: a cudaMalloc segment is not a buffer.
 */
#include "timeline.h"

#include "grow.h"

#define CPC_MAX 64

static int
attention_phase(uint8_t ph)
{
    return ph == AM_PH_forward || ph == AM_PH_backward || ph == AM_PH_backward_replay;
}

/* 1 when a range of the thread's own (not a TE C call's) names core
 * attention: Megatron's .core_attention, or TE's attention function (its
 * Python ranges, NVTE_NVTX_ENABLED=1), the backward's only name. */
static int
in_core_range(const tl_thread *th)
{
    for (size_t k = th->depth; k > 0; k--) {
        const tl_frame *f = &th->stack[k - 1];
        if (!(f->m.flags & AM_CF_NVTE) && f->m.signal != AM_SIG_NCCL)
            return f->boundary == AM_BD_core_attn;
    }
    return 0;
}

/* Remember tensor allocation ev (its attribution a) when core attention made
 * it: a candidate buffer of the next CP collective of this module call. */
void
tl_cp_note(tl *t, tl_thread *th, const am_event *ev, uint64_t seq, am_attr a)
{
    if (a.boundary != AM_BD_core_attn || !attention_phase(a.phase) ||
        !(ev->levels & AM_LVL_TENSOR) || !in_core_range(th))
        return;
    if (th->ncpc && th->cpc_call != th->module_call)
        tl_cp_clear(t, th);
    if (th->ncpc >= CPC_MAX ||
        am_grow((void **)&th->cpc, &th->capcpc, th->ncpc + 1, sizeof *th->cpc, 8) < 0)
        return;
    th->cpc_call = th->module_call;
    th->cpc[th->ncpc++] = (tl_pending){ev->addr, seq, ev->size, ev->space, ev->levels, 0};
    t->npending_total++;
}

void
tl_cp_clear(tl *t, tl_thread *th)
{
    t->npending_total -= th->ncpc;
    th->ncpc = 0;
}

/* 1 when a tensor of `size` bytes is a buffer of a collective of b bytes:
 * equal (or b in 512-byte blocks), or, for an all-gather's output, k x b. */
static int
fits(uint64_t size, uint64_t b, int gather)
{
    if (!b)
        return 0;
    uint64_t k = gather ? size / b : 1;
    if (gather && k < 2)
        return 0;
    uint64_t want = k * b;
    return size == want || size == (want + 511) / 512 * 512;
}

/* Drop candidate i of th, and the same allocation from the TE pending list
 * (a later TE call must not give it back to core_attn). */
static void
take(tl *t, tl_thread *th, size_t i)
{
    uint64_t seq = th->cpc[i].seq;
    for (size_t k = 0; k < th->npending; k++)
        if (th->pending[k].seq == seq) {
            th->pending[k] = th->pending[--th->npending];
            t->npending_total--;
            break;
        }
    for (size_t k = i + 1; k < th->ncpc; k++)
        th->cpc[k - 1] = th->cpc[k];
    th->ncpc--;
    t->npending_total--;
}

/* The module call that made the collective: NCCL's own ranges (the library
 * pushes one around each call) are not the caller's. */
static uint32_t
caller_call(const tl_thread *th)
{
    for (size_t k = th->depth; k > 0; k--) {
        const tl_frame *f = &th->stack[k - 1];
        if (f->m.signal != AM_SIG_NCCL && !(f->m.flags & AM_CF_NVTE))
            return f->call_id;
    }
    return 0;
}

/* Relabel the most recent candidates used by an exchange of b bytes: `want`
 * of them, of exactly b (an all-gather's output: k x b). */
static void
match(tl *t, tl_thread *th, uint64_t b, int want, int gather)
{
    for (size_t i = th->ncpc; i > 0 && want > 0; i--) {
        tl_pending p = th->cpc[i - 1];
        if (!fits(p.size, b, gather))
            continue;
        take(t, th, i - 1);
        if (t->resolve)
            t->resolve(t->resolve_ctx, &p, AM_BD_cp_comm, AM_PH_COUNT);
        want--;
    }
}

void
tl_cp_collective(tl *t, tl_thread *th, const am_event *ev)
{
    switch ((am_coll)ev->op) {
    case AM_COLL_GROUP_START:
        if (th->cpg_depth++ == 0)
            th->cpg_send = th->cpg_recv = 0;
        return;
    case AM_COLL_GROUP_END:
        if (th->cpg_depth > 0 && --th->cpg_depth == 0 && th->ncpc &&
            th->cpc_call == caller_call(th)) {
            /* all_to_all_single and batch_isend_irecv: one send and one
             * receive per peer in a group; the buffers hold all of them */
            match(t, th, th->cpg_send, 1, 0);
            match(t, th, th->cpg_recv, 1, 0);
        }
        return;
    default:
        break;
    }
    if (th->cpg_depth > 0 && (ev->op == AM_COLL_SEND || ev->op == AM_COLL_RECV)) {
        *(ev->op == AM_COLL_SEND ? &th->cpg_send : &th->cpg_recv) += ev->size;
        return;
    }
    if (!th->ncpc || th->cpc_call != caller_call(th))
        return;
    switch ((am_coll)ev->op) {
    case AM_COLL_SEND: case AM_COLL_RECV: match(t, th, ev->size, 1, 0); break;
    case AM_COLL_ALL_TO_ALL: match(t, th, ev->size, 2, 0); break;
    case AM_COLL_ALL_GATHER: match(t, th, ev->size, 1, 1); break;
    default: break;
    }
}
