/* timeline.c: per-thread NVTX stacks, thread roles, program phase,
 * iterations, microbatches and layer counters (see timeline.h).
 *
 * The program phase moves on signals (catalog.def) and on thread activity:
 *
 *   init --FWD on main / STEP / first backward activity--> forward
 *   forward --activity on pt_autograd_* / BWD range--> backward
 *   backward --main thread allocates--> other (between backward and the
 *            next recognised signal)
 *   backward|other --all_reduce/reduce_scatter on main--> grad_sync
 *   * --OPT (Optimizer.step#, nvte_multi_tensor_adam)--> optimizer
 *            (optimizer_state_init in the first iteration with an optimizer)
 *   optimizer --all_gather--> param_sync
 *   * --FWD on main--> forward: a new iteration when an optimizer,
 *            grad sync or param sync ran since the last one (no markers);
 *            else a new microbatch when a backward ran since.
 * ProfilerStep#N markers, when present, define the iterations instead.
 */
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "pyframes.h"

static int
grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return am_grow(p, cap, need, elem, 8);
}

void
tl_init(tl *t, int pid, am_rank *out)
{
    memset(t, 0, sizeof *t);
    t->pid = pid;
    t->out = out;
    t->phase = AM_PH_init;
    t->iteration = -1;
    t->opt_init_iteration = -1;
    out->opt_init_iteration = -1;
    out->first_opt_iteration = -1;
}

void
tl_fini(tl *t)
{
    for (size_t i = 0; i < t->nthreads; i++) {
        free(t->threads[i].stack);
        free(t->threads[i].pending);
        free(t->threads[i].cpc);
    }
    free(t->threads);
    free(t->starts);
    am_memo_fini(&t->memo);
    memset(t, 0, sizeof *t);
}

/* tl_thread_get past its one-entry cache: search, or create (kept out of
 * line so the cache check inlines into the per-event callers). */
tl_thread *
tl_thread_find(tl *t, uint32_t tid)
{
    for (size_t i = 0; i < t->nthreads; i++)
        if (t->threads[i].tid == tid) {
            t->last_thread = i;
            return &t->threads[i];
        }
    if (grow((void **)&t->threads, &t->capthreads, t->nthreads + 1, sizeof *t->threads) < 0)
        return NULL;
    tl_thread *th = &t->threads[t->nthreads];
    memset(th, 0, sizeof *th);
    th->tid = tid;
    th->role = (t->pid > 0 && tid == (uint32_t)t->pid) ? AM_ROLE_MAIN : AM_ROLE_OTHER;
    th->last_nvte_bd = AM_BD_INHERIT;
    t->last_thread = t->nthreads++;
    return th;
}

/* ---- phases and iterations ---- */

static am_phase_span *
cur_span(tl *t)
{
    if (!t->out->niters)
        return NULL;
    am_iteration *it = &t->out->iters[t->out->niters - 1];
    return it->nphases ? &it->phases[it->nphases - 1] : NULL;
}

static void
open_span(tl *t, uint8_t phase)
{
    if (!t->out->niters || t->iteration < 0 || t->no_spans)
        return;
    am_iteration *it = &t->out->iters[t->out->niters - 1];
    if (it->nphases && it->phases[it->nphases - 1].start_ns == t->now) {
        it->phases[it->nphases - 1].phase = phase; /* zero-length: replace */
        return;
    }
    if (grow((void **)&it->phases, &it->capphases, it->nphases + 1, sizeof *it->phases) < 0)
        return; /* spans are informative: drop on out of memory */
    it->phases[it->nphases++] = (am_phase_span){phase, t->now, t->now};
}

static void
set_phase(tl *t, uint8_t phase)
{
    if (phase == t->phase)
        return;
    if (t->phase == AM_PH_init && !t->out->init_end_ns)
        t->out->init_end_ns = t->now;
    am_phase_span *s = cur_span(t);
    if (s && t->iteration >= 0)
        s->end_ns = t->now;
    t->phase = phase;
    open_span(t, phase);
    /* pending TE allocations never cross a phase change */
    for (size_t i = 0; i < t->nthreads; i++) {
        t->npending_total -= t->threads[i].npending;
        t->threads[i].npending = 0;
    }
}

static void
new_iteration(tl *t, int number)
{
    am_rank *o = t->out;
    if (o->niters) {
        am_iteration *prev = &o->iters[o->niters - 1];
        prev->end_ns = t->now;
        am_phase_span *s = cur_span(t);
        if (s)
            s->end_ns = t->now;
    }
    if (t->opt_in_iter && !t->opt_init_done)
        t->opt_init_done = 1;
    size_t cap = o->niters; /* iters grow by doubling: track capacity in nphases trick */
    static const size_t chunk = 64;
    if (o->niters % chunk == 0) {
        am_iteration *q = realloc(o->iters, (cap + chunk) * sizeof *q);
        if (!q)
            return;
        o->iters = q;
    }
    am_iteration *it = &o->iters[o->niters++];
    memset(it, 0, sizeof *it);
    it->number = number;
    it->start_ns = t->now;
    it->end_ns = t->now;
    it->microbatches = 0;
    t->iteration = number;
    t->next_iteration = number + 1;
    t->opt_in_iter = 0;
    t->bwd_in_iter = 0;
    t->fwd_layer = 0;
    if (t->phase == AM_PH_init && !o->init_end_ns)
        o->init_end_ns = t->now;
    if (t->phase != AM_PH_init)
        open_span(t, t->phase);
}

static am_iteration *
cur_iter(tl *t)
{
    return t->iteration >= 0 && t->out->niters ? &t->out->iters[t->out->niters - 1] : NULL;
}

/* The forward pass that starts now is the k-th of its iteration (k: the
 * iteration's forward passes counted so far, less one; -1 before the first
 * iteration): its model chunk follows from k (am_rank_chunk) */
static void
fwd_chunk_now(tl *t)
{
    am_iteration *it = cur_iter(t);
    t->fwd_k = it ? it->microbatches - 1 : -1;
}

/* A forward pass of another microbatch (or model chunk) starts on the
 * main thread before any backward ran since the last one (1F1B warmup). */
static void
new_forward_pass(tl *t)
{
    am_iteration *it = cur_iter(t);
    if (it)
        it->microbatches++;
    t->fwd_layer = 0;
    fwd_chunk_now(t);
    t->post_norm_seen = 0;
    t->post_logits_seen = 0;
}

/* Megatron's post-process on the last pipeline stage (final layernorm,
 * output layer, vocab-parallel cross entropy) runs in GPTModel.forward,
 * which has no NVTX range ([M] in docs/sources.md): it is the main thread's
 * forward after the model chunk's last layer, with no layer range open. */
static int
post_process_place(const tl *t, const tl_thread *th)
{
    const am_rank *o = t->out;
    if (th->role != AM_ROLE_MAIN || t->phase != AM_PH_forward || o->layers_per_chunk <= 0 ||
        t->fwd_layer < o->layers_per_chunk || o->stage < 0 || o->stage != o->pp - 1)
        return 0;
    /* the interleaved schedule's own sections (warmup, steady, cooldown)
     * stay open around its forward steps */
    for (size_t k = 0; k < th->depth; k++)
        if (!(th->stack[k].m.flags & AM_CF_NVTE) && th->stack[k].m.signal != AM_SIG_PIPE)
            return 0;
    return 1;
}

/* With virtual pipeline stages (layers per chunk below the stage's layers, or
 * the stage's count unknown) only the last model chunk runs the
 * post-process, and which chunk a forward is is not known here: after a
 * chunk's last layer it is the post-process only from the final norm's TE
 * call on (no other chunk makes a TE call outside a layer). */
static int
in_post_process(const tl *t, const tl_thread *th)
{
    const am_rank *o = t->out;
    if (!post_process_place(t, th))
        return 0;
    return o->layers_per_chunk == o->layers_per_stage || t->post_norm_seen;
}

/* An iteration that ends in grad sync and is followed by the next forward
 * had its optimizer step even when no range said so: Megatron's train_step
 * always steps after finalize_model_grads, and only Transformer Engine's
 * FusedAdam (nvte_multi_tensor_adam) or a profiler annotation name it --
 * torch.optim.AdamW and Apex's FusedAdam (Megatron-Core without TE) emit no
 * NVTX range (checked on Megatron-Core 0.19.2, docs/megasim.md). The step is
 * placed at the end of the iteration: the first one initialised the state
 * (its allocations keep the grad_sync label), unless the state predates the
 * trace. */
static void
infer_optimizer_step(tl *t)
{
    am_rank *o = t->out;
    if (o->first_opt_iteration < 0)
        o->first_opt_iteration = t->iteration;
    if (!t->opt_init_done && !o->opt_state_preexisting && o->opt_init_iteration < 0)
        o->opt_init_iteration = t->iteration;
    o->opt_inferred = 1;
    t->opt_in_iter = 1;
}

static void
begin_forward(tl *t)
{
    int newit = 0;
    if (!t->markers) {
        if (t->iteration < 0 || t->opt_in_iter || t->phase == AM_PH_grad_sync ||
            t->phase == AM_PH_param_sync)
            newit = 1;
        if (newit && t->iteration >= 0 && !t->opt_in_iter)
            infer_optimizer_step(t);
        if (newit)
            new_iteration(t, t->next_iteration);
    }
    am_iteration *it = cur_iter(t);
    if (t->phase != AM_PH_forward) {
        if (newit || (it && it->microbatches == 0) || t->bwd_in_iter ||
            t->phase == AM_PH_init) {
            if (it)
                it->microbatches++;
            t->fwd_layer = 0;
            fwd_chunk_now(t);
            t->post_norm_seen = 0;
            t->post_logits_seen = 0;
            t->bwd_in_iter = 0;
        }
        set_phase(t, AM_PH_forward);
    }
}

static void
begin_backward(tl *t)
{
    if (t->phase == AM_PH_backward)
        return;
    if (t->phase != AM_PH_forward && t->phase != AM_PH_init && t->phase != AM_PH_other)
        return; /* activity of the autograd thread during grad sync etc. */
    if (t->iteration < 0 && !t->markers)
        new_iteration(t, t->next_iteration);
    am_iteration *it = cur_iter(t);
    if (it && it->microbatches == 0)
        it->microbatches = 1;
    t->bwd_in_iter = 1;
    for (size_t i = 0; i < t->nthreads; i++)
        t->threads[i].bwd_layer = t->fwd_layer;
    set_phase(t, AM_PH_backward);
}

/* The phase an optimizer step has now: the first one initialises the state. */
static uint8_t
opt_phase(const tl *t)
{
    return t->opt_init_done || t->out->opt_state_preexisting ? AM_PH_optimizer
                                                             : AM_PH_optimizer_state_init;
}

static void
begin_optimizer(tl *t)
{
    if (t->iteration < 0 && !t->markers)
        new_iteration(t, t->next_iteration);
    if (t->out->first_opt_iteration < 0)
        t->out->first_opt_iteration = t->iteration;
    uint8_t ph = opt_phase(t);
    if (ph == AM_PH_optimizer_state_init && t->out->opt_init_iteration < 0)
        t->out->opt_init_iteration = t->iteration;
    t->opt_in_iter = 1;
    set_phase(t, ph);
}

/* The step number of a ProfilerStep#N marker (torch.profiler names its
 * ranges so: digits only after '#'), or -1 when the name is not one: no
 * '#', nothing or anything but digits after it, or a number above 10^9
 * (hnew2 finding 11: "ProfilerStep#abc" and "ProfilerStep#9999...9" began
 * iterations). */
static int
parse_step(const char *s, uint32_t len)
{
    const char *h = memchr(s, '#', len);
    if (!h || h + 1 >= s + len)
        return -1;
    long v = 0;
    for (const char *p = h + 1; p < s + len; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
        if (v > 1000000000)
            return -1;
    }
    return (int)v;
}

static void
apply_signal(tl *t, uint8_t role, am_cat_match m, const am_event *ev)
{
    switch ((am_signal)m.signal) {
    case AM_SIG_STEP: {
        int n = ev->name ? parse_step(ev->name, ev->name_len) : -1;
        if (n < 0)
            break; /* a range named like a marker, not one */
        t->markers = 1;
        t->out->has_step_markers = 1;
        new_iteration(t, n >= 0 ? n : t->next_iteration);
        am_iteration *it = cur_iter(t);
        if (it)
            it->microbatches = 1;
        set_phase(t, AM_PH_forward);
        break;
    }
    case AM_SIG_ZERO:
        if (!t->markers && t->iteration >= 0 &&
            (t->opt_in_iter || t->phase == AM_PH_grad_sync || t->phase == AM_PH_param_sync)) {
            new_iteration(t, t->next_iteration);
            set_phase(t, AM_PH_other);
        }
        break;
    case AM_SIG_FWD:
        if (role == AM_ROLE_BACKWARD) {
            begin_backward(t);
            break;
        }
        begin_forward(t);
        /* Under 1F1B a stage runs several forwards before the first
         * backward: a forward pass restarts at the embedding (first stage)
         * or when a layer signal comes after the last layer of the model
         * chunk (layers per chunk from the recorded flags). */
        if (m.boundary == AM_BD_embedding && t->fwd_layer > 0)
            new_forward_pass(t);
        if (m.flags & AM_CF_LAYER) {
            t->layer_ranges_seen = 1;
            t->out->layer_signal = 1;
            if (t->out->layers_per_chunk > 0 && t->fwd_layer >= t->out->layers_per_chunk)
                new_forward_pass(t);
            t->fwd_layer++;
        } else if ((m.flags & AM_CF_LAYER_FALLBACK) && !t->layer_ranges_seen) {
            t->te_layers_seen = 1;
            if (!t->out->layer_signal)
                t->out->layer_signal = 2;
            if (t->out->layers_per_chunk > 0 && t->fwd_layer >= t->out->layers_per_chunk)
                new_forward_pass(t);
            t->fwd_layer++;
        }
        if (t->fwd_layer > t->fwd_max_layer)
            t->fwd_max_layer = t->fwd_layer;
        break;
    case AM_SIG_BWD:
        begin_backward(t);
        break;
    case AM_SIG_OPT:
        begin_optimizer(t);
        break;
    case AM_SIG_EVAL:
        set_phase(t, AM_PH_eval);
        break;
    case AM_SIG_SAVE:
        set_phase(t, AM_PH_checkpoint_save);
        break;
    case AM_SIG_GSYNC:
        /* finalize_model_grads (a Python frame): the collectives it runs
         * would say the same, later */
        if (role == AM_ROLE_MAIN && (t->phase == AM_PH_backward || t->phase == AM_PH_other))
            set_phase(t, AM_PH_grad_sync);
        break;
    case AM_SIG_NONE:
    case AM_SIG_PIPE:
    case AM_SIG_P2P:
    case AM_SIG_NCCL:
        break;
    }
}

/* ---- the TE nearest-range rule ---- */

/* The pending allocations of th get the boundary of the TE call just pushed
 * (match). Those made after the grad sync (phase_open) are resolved only by
 * the optimizer's own TE call (TE FusedAdam allocates exp_avg / exp_avg_sq
 * lazily right before nvte_multi_tensor_adam: [M] in docs/sources.md), which also
 * makes them optimizer state in phase; any other TE call leaves them as
 * they were. */
static void
resolve_pending(tl *t, tl_thread *th, am_cat_match m, uint8_t boundary)
{
    if (boundary != AM_BD_INHERIT && t->resolve)
        for (size_t i = 0; i < th->npending; i++) {
            const tl_pending *p = &th->pending[i];
            if (!p->phase_open)
                t->resolve(t->resolve_ctx, p, boundary, AM_PH_COUNT);
            else if (m.signal == AM_SIG_OPT)
                t->resolve(t->resolve_ctx, p, boundary, opt_phase(t));
        }
    t->npending_total -= th->npending;
    th->npending = 0;
}

/* ---- stacks ---- */

static uint8_t
frame_role_boundary(const tl_thread *th)
{
    return th->depth ? th->stack[th->depth - 1].boundary : AM_BD_INHERIT;
}

static int
push(tl *t, tl_thread *th, const am_event *ev)
{
    am_cat_match m = am_memo_range(&t->memo, ev->name, ev->name_len, ev->domain, ev->domain_len);
    if (grow((void **)&th->stack, &th->cap, th->depth + 1, sizeof *th->stack) < 0)
        return -1;
    const tl_frame *parent = th->depth ? &th->stack[th->depth - 1] : NULL;
    tl_frame f = {ev->name, ev->name_len, ev->domain_id, m, m.boundary, 0, 0, 0};
    if (f.boundary == AM_BD_INHERIT && ev->domain_id != AM_PYF_DOMAIN_ID && !(m.flags & AM_CF_NVTE)) {
        /* a range of the trace's own inherits from its own kind: a range made
         * from a Python frame closes only at the thread's next allocation
         * (model/pyframes.h), so it may be stale when this one opens */
        f.boundary = AM_BD_INHERIT;
        for (size_t k = th->depth; k > 0; k--)
            if (th->stack[k - 1].domain_id != AM_PYF_DOMAIN_ID) {
                f.boundary = th->stack[k - 1].boundary;
                break;
            }
    } else if (f.boundary == AM_BD_INHERIT) {
        f.boundary = frame_role_boundary(th);
    }
    f.replay = (m.signal == AM_SIG_FWD && th->role == AM_ROLE_BACKWARD) ||
               (parent && parent->replay);
    f.eval = m.signal == AM_SIG_EVAL || (parent && parent->eval);
    f.save = m.signal == AM_SIG_SAVE || (parent && parent->save);
    if ((m.flags & AM_CF_NVTE) && post_process_place(t, th)) {
        if (f.boundary == AM_BD_layernorm)
            t->post_norm_seen = 1;
        else if (t->post_norm_seen)
            t->post_logits_seen = 1; /* the output layer's GEMM */
    }
    if (m.flags & AM_CF_NVTE) {
        tl_cp_clear(t, th); /* what the TE call's outputs follow is no CP buffer */
        f.call_id = th->module_call;
        if (th->npending && th->pending_call == th->module_call)
            resolve_pending(t, th, m, f.boundary);
        th->last_nvte_bd = f.boundary;
        th->last_nvte_call = th->module_call;
    } else {
        /* pending allocations of the outer call keep what they have */
        t->npending_total -= th->npending;
        th->npending = 0;
        f.call_id = ++t->next_call;
        th->module_call = f.call_id;
    }
    /* a layer starts once: a layer range inside another (the one made from
     * TransformerLayer._forward_attention's frame around Megatron's own
     * .self_attention, or the other way round) does not start another. A
     * hybrid model's Mamba layer holds no other layer: a layer range pushed
     * while its frame's range is still open (frame ranges close at the next
     * allocation outside them, model/pyframes.h) is the next layer. */
    if (m.flags & AM_CF_LAYER)
        for (size_t k = 0; k < th->depth; k++)
            if ((th->stack[k].m.flags & AM_CF_LAYER) && th->stack[k].m.boundary != AM_BD_mamba) {
                m.flags &= (uint8_t)~AM_CF_LAYER;
                break;
            }
    th->stack[th->depth++] = f;
    apply_signal(t, th->role, m, ev);
    /* a recompute (forward code on the backward thread) is a phase span */
    if (f.replay && !(parent && parent->replay) && t->phase == AM_PH_backward)
        set_phase(t, AM_PH_backward_replay);
    return 0;
}

static void
pop(tl *t, tl_thread *th, uint32_t domain)
{
    if (!th->depth)
        return;
    size_t i = th->depth;
    while (i > 0 && th->stack[i - 1].domain_id != domain)
        i--;
    if (i == 0)
        return; /* unmatched pop: ignore */
    tl_frame f = th->stack[i - 1];
    memmove(&th->stack[i - 1], &th->stack[i], (th->depth - i) * sizeof *th->stack);
    th->depth--;
    if (!(f.m.flags & AM_CF_NVTE)) {
        if (th->ncpc && f.call_id == th->cpc_call)
            tl_cp_clear(t, th);
        t->npending_total -= th->npending;
        th->npending = 0;
        th->module_call = 0;
        for (size_t k = th->depth; k > 0; k--)
            if (!(th->stack[k - 1].m.flags & AM_CF_NVTE)) {
                th->module_call = th->stack[k - 1].call_id;
                break;
            }
        th->last_nvte_call = (uint32_t)-1;
    }
    if ((f.m.flags & AM_CF_ATTN_BWD) && th->role == AM_ROLE_BACKWARD && th->bwd_layer > 1)
        th->bwd_layer--;
    if (f.m.signal == AM_SIG_EVAL && t->phase == AM_PH_eval)
        set_phase(t, AM_PH_other);
    if (f.m.signal == AM_SIG_SAVE && t->phase == AM_PH_checkpoint_save)
        set_phase(t, AM_PH_other);
    if (f.replay && t->phase == AM_PH_backward_replay) {
        int still = 0;
        for (size_t k = 0; k < th->depth; k++)
            still |= th->stack[k].replay;
        if (!still)
            set_phase(t, AM_PH_backward);
    }
}

int
tl_event(tl *t, const am_event *ev)
{
    t->now = ev->t_ns;
    tl_thread *th = tl_thread_get(t, ev->tid);
    if (!th)
        return -1;
    switch ((am_ev_kind)ev->kind) {
    case AM_EV_THREAD_NAME:
        snprintf(th->name, sizeof th->name, "%.*s", (int)ev->name_len, ev->name);
        if (th->role != AM_ROLE_MAIN)
            th->role = (uint8_t)am_catalog_thread(th->name);
        break;
    case AM_EV_RANGE_PUSH:
        if (th->role == AM_ROLE_BACKWARD)
            begin_backward(t);
        return push(t, th, ev);
    case AM_EV_RANGE_POP:
        pop(t, th, ev->domain_id);
        break;
    case AM_EV_MARK: {
        am_cat_match m = am_memo_range(&t->memo, ev->name, ev->name_len, ev->domain, ev->domain_len);
        if (m.signal == AM_SIG_STEP || m.signal == AM_SIG_OPT || m.signal == AM_SIG_ZERO)
            apply_signal(t, th->role, m, ev);
        break;
    }
    case AM_EV_RANGE_START: {
        am_cat_match m = am_memo_range(&t->memo, ev->name, ev->name_len, ev->domain, ev->domain_len);
        apply_signal(t, th->role, m, ev);
        if (grow((void **)&t->starts, &t->capstarts, t->nstarts + 1, sizeof *t->starts) == 0)
            t->starts[t->nstarts++] = (typeof(*t->starts)){ev->id, m.signal};
        break;
    }
    case AM_EV_RANGE_END:
        for (size_t i = 0; i < t->nstarts; i++)
            if (t->starts[i].id == ev->id) {
                if (t->starts[i].signal == AM_SIG_EVAL && t->phase == AM_PH_eval)
                    set_phase(t, AM_PH_other);
                if (t->starts[i].signal == AM_SIG_SAVE && t->phase == AM_PH_checkpoint_save)
                    set_phase(t, AM_PH_other);
                t->starts[i] = t->starts[--t->nstarts];
                break;
            }
        break;
    case AM_EV_ALLOC:
        if (th->role == AM_ROLE_BACKWARD)
            begin_backward(t);
        else if (th->role == AM_ROLE_MAIN && t->phase == AM_PH_backward &&
                 ev->lib != AM_LIB_NCCL)
            set_phase(t, AM_PH_other);
        break;
    case AM_EV_FREE:
    case AM_EV_OOM:
    case AM_EV_MEMINFO:
        break;
    case AM_EV_COLLECTIVE:
        t->out->ncollectives++;
        tl_cp_collective(t, th, ev);
        tl_moe_collective(t, th, ev);
        switch (ev->op) {
        case AM_COLL_ALL_REDUCE:
        case AM_COLL_REDUCE_SCATTER:
            if (th->role == AM_ROLE_MAIN &&
                (t->phase == AM_PH_backward || t->phase == AM_PH_other))
                set_phase(t, AM_PH_grad_sync);
            break;
        case AM_COLL_ALL_GATHER:
            if (t->phase == AM_PH_optimizer || t->phase == AM_PH_optimizer_state_init)
                set_phase(t, AM_PH_param_sync);
            break;
        default:
            break;
        }
        break;
    case AM_EV_GRAPH_BEGIN:
        t->capture_depth++;
        break;
    case AM_EV_GRAPH_END:
        if (t->capture_depth > 0)
            t->capture_depth--;
        break;
    }
    return 0;
}

int
tl_layer_boundary(uint8_t b)
{
    switch ((am_boundary)b) {
    case AM_BD_core_attn: case AM_BD_mla_up_proj: case AM_BD_layernorm: case AM_BD_moe_act:
    case AM_BD_mlp: case AM_BD_moe: case AM_BD_shared_experts: case AM_BD_gdn_norm_out:
    case AM_BD_gdp_in_proj: case AM_BD_gdp_qkv: case AM_BD_mhc: case AM_BD_attention_other:
    case AM_BD_cp_comm: case AM_BD_mamba:
        return 1;
    default:
        return 0;
    }
}

static uint8_t
phase_fallback_boundary(uint8_t phase)
{
    switch ((am_phase)phase) {
    case AM_PH_init: return AM_BD_params;
    case AM_PH_optimizer:
    case AM_PH_optimizer_state_init: return AM_BD_optimizer_state;
    case AM_PH_grad_sync: return AM_BD_grads;
    case AM_PH_param_sync: return AM_BD_params;
    default: return AM_BD_unknown;
    }
}

am_attr
tl_attr(tl *t, const am_event *ev, uint64_t seq)
{
    am_attr a = {t->phase, AM_BD_unknown, 0};
    tl_thread *th = tl_thread_get(t, ev->tid);
    if (!th)
        return a;
    const tl_frame *top = th->depth ? &th->stack[th->depth - 1] : NULL;
    if (top && top->eval)
        a.phase = AM_PH_eval;
    else if (top && top->save)
        a.phase = AM_PH_checkpoint_save;
    else if (th->role == AM_ROLE_BACKWARD)
        a.phase = (top && top->replay) ? AM_PH_backward_replay : AM_PH_backward;
    else if (th->role == AM_ROLE_MAIN && t->phase == AM_PH_backward)
        a.phase = AM_PH_backward;

    a.layer = th->role == AM_ROLE_BACKWARD ? th->bwd_layer : t->fwd_layer;
    /* a backward pass's model chunk is not tracked: known only without VPP */
    a.fwd = (int16_t)(th->role != AM_ROLE_BACKWARD && t->fwd_k < INT16_MAX ? t->fwd_k : -1);
    a.first = t->out->niters <= 1;

    if (ev->lib == AM_LIB_NCCL) {
        a.boundary = AM_BD_nccl;
    } else if (in_post_process(t, th)) {
        /* the final norm and the output GEMM (its logits are allocated
         * just before TE's GEMM call) are the output layer; what the cross
         * entropy allocates after that GEMM is the loss. Without a TE GEMM
         * range (a plain torch matmul) it all stays output_layer. */
        a.boundary = t->post_logits_seen ? AM_BD_loss : AM_BD_output_layer;
        a.layer = 0;
    } else if (ev->lib == AM_LIB_CUBLAS || ev->lib == AM_LIB_CUDNN) {
        a.boundary = AM_BD_workspace;
    } else if (t->capture_depth > 0) {
        a.boundary = AM_BD_cuda_graph_pool;
    } else if (top && (top->m.flags & AM_CF_NVTE) && top->boundary != AM_BD_INHERIT) {
        a.boundary = top->boundary;          /* inside a TE call */
    } else {
        uint8_t b = top ? top->boundary : AM_BD_INHERIT;
        int in_nvte = 0;
        for (size_t k = th->depth; k > 0; k--)
            if (th->stack[k - 1].m.flags & AM_CF_NVTE) {
                in_nvte = 1;
                break;
            }
        /* after the grad sync the optimizer step may allocate its state
         * before its first TE call: pending too (resolve_pending) */
        int opt_open = th->role == AM_ROLE_MAIN &&
                       (a.phase == AM_PH_grad_sync || a.phase == AM_PH_other);
        if (!in_nvte && (a.phase == AM_PH_forward || a.phase == AM_PH_backward ||
                         a.phase == AM_PH_backward_replay || opt_open)) {
            /* nearest TE range: previous one in this module call for now,
             * the next one (if any) wins when it is pushed */
            if (!opt_open && th->last_nvte_call == th->module_call &&
                th->last_nvte_bd != AM_BD_INHERIT)
                b = th->last_nvte_bd;
            if (th->npending && th->pending_call != th->module_call) {
                t->npending_total -= th->npending;
                th->npending = 0;
            }
            if (th->npending < 4096 &&
                grow((void **)&th->pending, &th->cappending, th->npending + 1,
                     sizeof *th->pending) == 0) {
                th->pending_call = th->module_call;
                th->pending[th->npending++] =
                    (tl_pending){ev->addr, seq, ev->size, ev->space, ev->levels, (uint8_t)opt_open};
                t->npending_total++;
            }
        }
        a.boundary = b != AM_BD_INHERIT ? b : phase_fallback_boundary(a.phase);
    }
    if (ev->kind == AM_EV_ALLOC)
        tl_cp_note(t, th, ev, seq, a);
    return a; /* layer is kept raw: reports drop it for non-layer boundaries */
}

void
tl_where(tl *t, uint32_t tid, char *buf, size_t n)
{
    tl_thread *th = tl_thread_get(t, tid);
    size_t off = 0;
    if (n)
        buf[0] = 0;
    if (!th)
        return;
    for (size_t i = 0; i < th->depth && off + 1 < n; i++) {
        /* a range without a name (an empty NVTX message, or one whose
         * string a salvaged trace lost) is shown as such, never as an empty
         * step of the path (hnew finding 3: "ranges:  > ") */
        const char *nm = th->stack[i].name && th->stack[i].len ? th->stack[i].name
                                                                : "(unnamed range)";
        size_t len = th->stack[i].name && th->stack[i].len ? th->stack[i].len : strlen(nm);
        int w = snprintf(buf + off, n - off, "%s%.*s", i ? " > " : "",
                         (int)(len > 120 ? 120 : len), nm);
        if (w < 0)
            break;
        off += (size_t)w;
    }
}

void
tl_end(tl *t, uint64_t end_ns)
{
    t->now = end_ns;
    if (t->out->niters) {
        am_iteration *it = &t->out->iters[t->out->niters - 1];
        it->end_ns = end_ns;
        if (it->nphases)
            it->phases[it->nphases - 1].end_ns = end_ns;
    }
    if (t->phase == AM_PH_init && !t->out->init_end_ns)
        t->out->init_end_ns = end_ns;
}
