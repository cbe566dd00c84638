/* advisor_triage.c: what recompute cannot fix, checked before any
 * counterfactual, in docs/architecture.md's order, each with its numbers:
 *
 *   X:CUDA_GRAPH_POOL  the OOM is inside a capture window, or private pools
 *                      hold > 50% of the capacity
 *   X:NCCL_BUFFERS     the failing allocation's caller is NCCL (or another
 *                      library outside PyTorch), or PyTorch's request failed
 *                      while memory outside PyTorch (NCCL buffers, another
 *                      process: >= 1 GiB and >= 5% of the device) held what
 *                      the job's own peak + cache + headroom needed
 *   X:FRAGMENTATION    PyTorch's request failed although allocated + request
 *                      fits the budget and reserved - allocated (the inactive
 *                      split) exceeds the request
 *   X:OPTIMIZER_STATE  the OOM/peak is in the optimizer step, or activations
 *   X:PARAM_STATE      are a negligible share of what is live (state dominates)
 *   X:RETENTION        activation or replay bytes alive into the next iteration
 *   X:HOT_RANK[pp=k]   one pipeline stage's peak stands out (a finding: where,
 *                      not why)
 * Returns a bitmask of primary-capable findings per rank in v (the verdict
 * code is decided in advisor_verdict.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"

#define GB(x) am_fmt_bytes((x), (char[32]){0}, 32)

/* The bytes rank i's allocations may reach: its budget (capacity - outside
 * PyTorch - headroom) less the allocator cache modelled for its own timeline
 * (v->cache, set before triage), since a fit is judged on reserved bytes. */
static uint64_t
alloc_budget(const adv_verdict *v, size_t i)
{
    return v->budget[i] > v->cache[i] ? v->budget[i] - v->cache[i] : 0;
}

static int
is_act(const adv_alloc *x)
{
    return x->inst >= 0 || x->phase == AM_PH_forward || x->phase == AM_PH_backward ||
           x->phase == AM_PH_backward_replay;
}

/* The bytes of the finding just added (code): the cause's bytes and what its
 * best lever removes (item 6: the primary is chosen by them). */
static void
set_bytes(adv_verdict *v, const char *code, uint64_t bytes, uint64_t fix)
{
    if (v->nfindings && strcmp(v->findings[v->nfindings - 1].code, code) == 0) {
        v->findings[v->nfindings - 1].bytes = bytes;
        v->findings[v->nfindings - 1].fix_bytes = fix;
    }
}

/* Live tensor bytes just before op position p of t's op stream. */
static uint64_t
live_at(const adv_trace *t, uint32_t p)
{
    uint64_t live = 0;
    for (uint32_t q = 0; q < p && q < t->nops; q++) {
        int32_t o = t->ops[q];
        live = o > 0 ? live + t->a[o - 1].size : live - t->a[-o - 1].size;
    }
    return live;
}

/* Optimizer state recognised by what it does (issue 14 item 7): the first
 * iteration k whose successor's first forward allocation (the floor of k+1)
 * is recorded; bytes allocated after k's last backward-thread allocation
 * (grad sync, optimizer step: on the main thread, whatever the phase label
 * says) and still live at that floor are the state the step created. When
 * the job is over its budget and the peak without those bytes fits, they
 * decide the OOM: X:OPTIMIZER_STATE / state_growth, even when the OOM is in
 * the next forward. Levers with their byte effect: 16-bit moments halve
 * fp32 Adam moments (the state here is at most the two moments when they are
 * fp32); the distributed optimizer keeps 1/dp of the state. Returns 1 when
 * a finding was added. */
static int
triage_state_growth(const adv_trace *t, const adv_cfg *c, adv_verdict *v, size_t i, int rank)
{
    enum { NIT = 64 };
    uint32_t first_fwd[NIT], last_bwd[NIT];
    for (int q = 0; q < NIT; q++)
        first_fwd[q] = last_bwd[q] = ADV_NONE;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->iteration < 0 || x->iteration >= NIT)
            continue;
        if (!x->bwd && x->phase == AM_PH_forward && first_fwd[x->iteration] == ADV_NONE)
            first_fwd[x->iteration] = x->a_pos;
        if (x->bwd && (last_bwd[x->iteration] == ADV_NONE || x->a_pos > last_bwd[x->iteration]))
            last_bwd[x->iteration] = x->a_pos;
    }
    int k = -1;
    for (int q = 0; q + 1 < NIT && k < 0; q++)
        if (first_fwd[q] != ADV_NONE && last_bwd[q] != ADV_NONE && first_fwd[q + 1] != ADV_NONE &&
            last_bwd[q] < first_fwd[q + 1])
            k = q;
    if (k < 0)
        return 0;
    uint32_t lo = last_bwd[k], hi = first_fwd[k + 1];
    uint64_t state = 0;
    size_t n = 0;
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (x->a_pos > lo && x->a_pos < hi && !x->bwd && (x->f_pos == ADV_NONE || x->f_pos > hi)) {
            state += x->size;
            n++;
        }
    }
    uint64_t budget = alloc_budget(v, i), peak = v->baseline[i];
    if (state < ((uint64_t)256 << 20) || peak <= budget || peak - state > budget)
        return 0;
    uint64_t f0 = live_at(t, first_fwd[k]), f1 = live_at(t, hi);
    char lever[320];
    int off = 0;
    if (!c->exp_avg_bf16)
        off += snprintf(lever + off, sizeof lever - (size_t)off,
                        "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype "
                        "bf16 halves fp32 Adam moments: up to -%s (peak %s); ",
                        GB(state / 2), GB(peak - state / 2));
    if (!c->dist_opt && c->dp > 1)
        snprintf(lever + off, sizeof lever - (size_t)off,
                 "--use-distributed-optimizer keeps 1/%d of it: -%s (peak %s); ", c->dp,
                 GB(state - state / (uint64_t)c->dp), GB(peak - (state - state / (uint64_t)c->dp)));
    adv_finding_add(v, "X:OPTIMIZER_STATE", "state_growth", rank,
                    "the first optimizer step (iteration %d) left %s in %zu tensors live: the "
                    "iteration floor rose from %s to %s. The peak %s is over the %s budget by "
                    "%s and would fit without those bytes (%s). Levers on these bytes: %s"
                    "optimizer CPU offload, or more DP/TP/PP; recompute can only offset them "
                    "with activation bytes",
                    k, GB(state), n, GB(f0), GB(f1), GB(peak), GB(budget), GB(peak - budget),
                    GB(peak - state), lever);
    set_bytes(v, "X:OPTIMIZER_STATE", state, c->exp_avg_bf16 ? 0 : state / 2);
    return 1;
}

/* Retention as a trend (issue 14 item 9). L_k: activation bytes made in
 * earlier iterations and still live at iteration k's first forward
 * allocation, for every recorded k >= 1. With three or more iterations (two
 * or more L_k) that never fall and rise by g >= 1 MiB per iteration on
 * average, each iteration leaves g more behind. Projection: the last
 * recorded iteration's tensor peak P plus n*g passes the budget at n =
 * floor((budget - P) / g) + 1 iterations later; the device-level peak D
 * (segments: it also grows by what the kept blocks fragment) grows by gd per
 * complete iteration and reaches the device (capacity - context and other
 * processes) at floor((room) / gd) + 1. The threshold is the earlier of the
 * two against the job's own length (--train-iters; unknown: reported as
 * unknown), not a share of the budget. Returns 1 when a finding was added. */
static int
triage_retention_trend(const adv_trace *t, const am_rank *r, const adv_cfg *c, adv_verdict *v,
                       size_t i)
{
    enum { NIT = 64 };
    uint32_t first_fwd[NIT];
    for (int q = 0; q < NIT; q++)
        first_fwd[q] = ADV_NONE;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->iteration >= 0 && x->iteration < NIT && !x->bwd && x->phase == AM_PH_forward &&
            first_fwd[x->iteration] == ADV_NONE)
            first_fwd[x->iteration] = x->a_pos;
    }
    int k0 = -1, k1 = -1, npts = 0, falls = 0;
    uint64_t l0 = 0, l1 = 0, prev = 0;
    for (int k = 1; k < NIT; k++) {
        if (first_fwd[k] == ADV_NONE)
            continue;
        uint64_t l = 0;
        for (size_t q = 0; q < t->na; q++) {
            const adv_alloc *x = &t->a[q];
            if (is_act(x) && x->iteration >= 0 && x->iteration < k && x->a_pos < first_fwd[k] &&
                (x->f_pos == ADV_NONE || x->f_pos > first_fwd[k]))
                l += x->size;
        }
        if (npts++ == 0) {
            k0 = k;
            l0 = l;
        } else if (l < prev) {
            falls = 1;
        }
        k1 = k;
        l1 = l;
        prev = l;
    }
    if (npts < 2 || falls || l1 <= l0)
        return 0;
    uint64_t g = (l1 - l0) / (uint64_t)(k1 - k0);
    if (g < ((uint64_t)1 << 20))
        return 0;
    /* the last complete iteration's tensor peak (the OOM's is cut short) */
    int kl = t->trunc ? k1 - 1 : k1;
    uint64_t live = 0, peak = 0;
    for (uint32_t p = 0; p < t->nops; p++) {
        int32_t o = t->ops[p];
        live = o > 0 ? live + t->a[o - 1].size : live - t->a[-o - 1].size;
        if (p >= first_fwd[kl] && (kl + 1 >= NIT || first_fwd[kl + 1] == ADV_NONE ||
                                   p < first_fwd[kl + 1]) && live > peak)
            peak = live;
    }
    uint64_t budget = alloc_budget(v, i);
    int64_t it_b = kl + (peak > budget ? 0 : (int64_t)((budget - peak) / g) + 1);
    /* device-level peaks of complete iterations k0..kl */
    uint64_t d0 = 0, dl = 0, room = 0, gd = 0;
    int64_t it_d = -1;
    for (size_t q = 0; q < r->niters; q++) {
        if (r->iters[q].number == k0)
            d0 = r->iters[q].peak[AM_L_DEVICE];
        if (r->iters[q].number == kl)
            dl = r->iters[q].peak[AM_L_DEVICE];
    }
    if (v->capacity[i] > r->max_other)
        room = v->capacity[i] - r->max_other;
    if (kl > k0 && dl > d0 && room && (r->levels & AM_LVL_DEVICE)) {
        gd = (dl - d0) / (uint64_t)(kl - k0);
        it_d = kl + (dl > room ? 0 : (int64_t)((room - dl) / gd) + 1);
    }
    int64_t first = it_d >= 0 && it_d < it_b ? it_d : it_b;
    int last = c->train_iters > 0 ? c->train_iters - 1 : -1;
    if (last >= 0 && first > last)
        return 0; /* the job ends first */
    char horizon[96], dev[256] = "";
    if (last >= 0)
        snprintf(horizon, sizeof horizon, "the job's last iteration is %d (--train-iters %d)",
                 last, c->train_iters);
    else
        snprintf(horizon, sizeof horizon, "(the job's --train-iters is unknown)");
    if (it_d >= 0)
        snprintf(dev, sizeof dev, "; the device-level peak (segments) grows faster, by %s per "
                 "iteration (%s in iteration %d, %s in %d: the cache around the kept blocks grows "
                 "too), "
                 "and reaches the %s device in iteration %" PRId64,
                 GB(gd), GB(d0), k0, GB(dl), kl, GB(room), it_d);
    adv_finding_add(v, "X:RETENTION", "growth", r->rank,
                    "activation bytes of earlier iterations still live at the start of an "
                    "iteration grow by %s per iteration (%s at iteration %d, %s at iteration "
                    "%d): something keeps references (logged tensors, a cache, replay "
                    "outputs). Iteration %d peaks at %s allocated; at this rate it passes the "
                    "%s budget in iteration %" PRId64 "%s, %s. Recompute cannot free them: "
                    "drop the references",
                    GB(g), GB(l0), k0, GB(l1), k1, kl, GB(peak), GB(budget), it_b, dev, horizon);
    return 1;
}

/* Op position of the OOM, else of the recorded tensor-level peak (ADV_NONE
 * when there is none). */
static uint32_t
peak_pos(const adv_trace *t)
{
    if (t->oom)
        return t->oom_pos;
    uint64_t live = 0, mx = 0;
    uint32_t at = ADV_NONE;
    for (uint32_t p = 0; p < t->nops; p++) {
        int32_t o = t->ops[p];
        live = o > 0 ? live + t->a[o - 1].size : live - t->a[-o - 1].size;
        if (live > mx) {
            mx = live;
            at = p + 1;
        }
    }
    return at;
}

static int
is_logits(uint8_t boundary)
{
    return boundary == AM_BD_output_layer || boundary == AM_BD_loss;
}

/* X:LOGITS (issue 14 item 10): at the OOM (its failed request counted when
 * the output layer or the loss made it) or the peak, the output layer's
 * logits and the loss's copies (boundaries output_layer, loss: the last
 * stage's post-process) hold more than every transformer layer's
 * activations together, and without them the over-budget peak would fit.
 * Layer recompute does not touch them. Levers with bytes: the fused loss
 * (--cross-entropy-loss-fusion) drops the fp32 copy of the logits, 4*s/cp*b*
 * V/tp bytes (V padded to 128*tp, [M] in docs/sources.md), when the loss holds it;
 * twice the TP size halves the vocabulary-parallel logits; an uneven
 * pipeline layout moves layers (their activations) off this stage.
 * fix_bytes: the fused loss's saving (0 when it does not apply). */
static int
triage_logits(const adv_trace *t, const adv_cfg *c, adv_verdict *v, size_t i, int rank)
{
    uint32_t at = peak_pos(t);
    if (at == ADV_NONE)
        return 0;
    uint64_t lg = 0, loss = 0, layers = 0;
    int nl = 0;
    int16_t seen[512] = {0};
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->a_pos >= at || (x->f_pos != ADV_NONE && x->f_pos < at))
            continue;
        if (is_logits(x->boundary) && x->phase == AM_PH_forward) {
            lg += x->size;
            loss += x->boundary == AM_BD_loss ? x->size : 0;
        } else if (x->layer >= 0 && is_act(x)) {
            layers += x->size;
            if (x->layer < 512 && !seen[x->layer]++)
                nl++;
        }
    }
    if (t->oom && is_logits(t->oom_boundary) && t->oom_phase == AM_PH_forward) {
        lg += t->oom_request;
        loss += t->oom_boundary == AM_BD_loss ? t->oom_request : 0;
    }
    uint64_t budget = alloc_budget(v, i), peak = v->baseline[i];
    if (lg < ((uint64_t)1 << 30) || lg <= layers || peak <= budget || peak - lg > budget)
        return 0;
    uint64_t tp = c->tp > 0 ? (uint64_t)c->tp : 1, cp = c->cp > 0 ? (uint64_t)c->cp : 1;
    uint64_t unit = 128 * tp, vp = ((uint64_t)c->vocab + unit - 1) / unit * unit;
    uint64_t fp32 = 4 * ((uint64_t)c->seq / cp) * (uint64_t)(c->mbs > 0 ? c->mbs : 1) * vp / tp;
    uint64_t fused = !c->ce_fusion && c->vocab && loss >= fp32 ? fp32 : 0;
    char lever[256] = "";
    if (fused)
        snprintf(lever, sizeof lever, "--cross-entropy-loss-fusion drops the fp32 copy of the "
                 "logits: -%s (peak %s, %s); ", GB(fused), GB(peak - fused),
                 peak - fused <= budget ? "fits" : "still over");
    adv_finding_add(v, "X:LOGITS", t->oom && is_logits(t->oom_boundary) ? "oom_in_loss"
                                                                         : "logits_dominate",
                    rank,
                    "the output layer's logits and the loss's copies hold %s at the %s (the "
                    "loss %s), more than the %s of activations of %d transformer layers there; "
                    "the peak %s is over the %s budget by %s and would fit without them. Layer "
                    "recompute does not touch them. Levers: %sBF16 logits / chunked cross-"
                    "entropy; --tensor-model-parallel-size %d splits the vocabulary-parallel "
                    "logits (-%s); an uneven pipeline layout "
                    "(--decoder-last-pipeline-num-layers) moves layers off this stage",
                    GB(lg), t->oom ? "OOM" : "peak", GB(loss), GB(layers), nl, GB(peak),
                    GB(budget), GB(peak - budget), lever, (int)tp * 2, GB(lg / 2));
    set_bytes(v, "X:LOGITS", lg, fused);
    return 1;
}

/* X:PARAM_STATE / loaded_state (issue 14 item 10): bytes allocated before
 * the first forward (init: model build, buffers, checkpoint loading) that
 * are live at the OOM / peak and freed within the first recorded iteration
 * (before the second one's first forward allocation; later frees are the
 * job's teardown) are not parameters, grads or optimizer state: a loaded
 * state dict (or its copy) still referenced. When the over-budget peak minus
 * them fits, they decide it; freeing them costs nothing. A trace cut short
 * by an OOM in the first iteration shows no such free: not recognised
 * there. Returns 1 when a finding was added. */
static int
triage_loaded_state(const adv_trace *t, adv_verdict *v, size_t i, int rank)
{
    uint32_t at = peak_pos(t), second = ADV_NONE;
    if (at == ADV_NONE)
        return 0;
    int it0 = -1;
    for (size_t k = 0; k < t->na; k++)
        if (t->a[k].iteration >= 0 && (it0 < 0 || t->a[k].iteration < it0))
            it0 = t->a[k].iteration;
    for (size_t k = 0; k < t->na && second == ADV_NONE; k++)
        if (t->a[k].iteration > it0 && !t->a[k].bwd && t->a[k].phase == AM_PH_forward)
            second = t->a[k].a_pos;
    uint64_t tr = 0, persist = 0;
    size_t n = 0;
    uint32_t last_free = 0;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->phase != AM_PH_init || x->a_pos >= at || (x->f_pos != ADV_NONE && x->f_pos < at))
            continue;
        if (x->f_pos == ADV_NONE || x->f_pos >= second) {
            persist += x->size;
        } else {
            tr += x->size;
            n++;
            if (x->f_pos > last_free)
                last_free = x->f_pos;
        }
    }
    uint64_t budget = alloc_budget(v, i), peak = v->baseline[i];
    if (t->trunc || second == ADV_NONE || tr < ((uint64_t)256 << 20) || peak <= budget ||
        peak - tr > budget)
        return 0;
    /* the recorded peak with those tensors never allocated */
    uint8_t *drop = calloc(t->na ? t->na : 1, 1);
    if (!drop)
        return 0;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        drop[k] = x->phase == AM_PH_init && x->a_pos < at && x->f_pos != ADV_NONE &&
                  x->f_pos >= at && x->f_pos < second;
    }
    /* without: never on the device (loaded to CPU); freed: dropped when the
     * first forward starts (del after loading) */
    uint32_t fwd0 = ADV_NONE;
    for (size_t k = 0; k < t->na && fwd0 == ADV_NONE; k++)
        if (t->a[k].iteration == it0 && !t->a[k].bwd && t->a[k].phase == AM_PH_forward)
            fwd0 = t->a[k].a_pos;
    uint64_t live = 0, without = 0, lf = 0, freed = 0, held = 0;
    for (uint32_t p = 0; p < t->nops; p++) {
        int32_t o = t->ops[p];
        uint32_t id = (uint32_t)(o > 0 ? o - 1 : -o - 1);
        if (p == fwd0) {
            lf -= held;
            held = 0;
        }
        if (drop[id]) {
            if (o > 0 && p < fwd0) {
                lf += t->a[id].size;
                held += t->a[id].size;
            }
        } else {
            live = o > 0 ? live + t->a[id].size : live - t->a[id].size;
            lf = o > 0 ? lf + t->a[id].size : lf - t->a[id].size;
        }
        without = live > without ? live : without;
        freed = lf > freed ? lf : freed;
    }
    free(drop);
    if (freed > budget)
        return 0;
    int it = -1;
    for (size_t k = 0; k < t->na; k++)
        if (t->a[k].a_pos < last_free && t->a[k].iteration > it)
            it = t->a[k].iteration;
    adv_finding_add(v, "X:PARAM_STATE", "loaded_state", rank,
                    "%s in %zu tensors made before the first forward (model build / checkpoint "
                    "loading) are still live at the %s and freed only later (in iteration %d): "
                    "a loaded state dict or its copy still referenced, not parameters, grads or "
                    "optimizer state (those hold %s and stay). The peak %s is over the %s "
                    "budget by %s and would fit without them. Drop the references when loading "
                    "ends (del the state dict, gc.collect(), torch.cuda.empty_cache()): peak "
                    "%s; or load it to CPU (map_location='cpu'): peak %s; both at no compute "
                    "cost",
                    GB(tr), n, t->oom ? "OOM" : "peak", it, GB(persist), GB(peak), GB(budget),
                    GB(peak - budget), GB(freed), GB(without));
    set_bytes(v, "X:PARAM_STATE", tr, peak - freed);
    return 1;
}

/* An OOM of PyTorch's allocator while CUDA graphs hold private pools
 * (issue 14 item 8), inside a capture window or after one (a full_iteration
 * graph's eager optimizer step in the default pool). From the allocator's own
 * numbers at the OOM: the private pools' segments G (device bytes allocated
 * inside capture windows), PyTorch's reserved R (after the release of cached
 * segments the allocator makes before it fails: at most the device bytes
 * live then) and allocated A, the tensors
 * of the pools Ag (allocated inside capture windows, live then); the non-graph
 * pools hold R - G reserved of which A - Ag allocated, so F = (R - G) - (A -
 * Ag) is free there. A request <= F would have fit in the free bytes of the
 * non-graph pools: fragmentation (expandable segments let them be reused);
 * else the graph pools grew into the room the request needed: graph scope.
 * Both figures are stated. Returns 1 when a finding was added. */
static int
triage_graph_oom(const adv_trace *t, const am_rank *r, adv_verdict *v, size_t i)
{
    if (!t->oom || !t->graph_pool_bytes || t->oom_lib != AM_LIB_PYTORCH || !t->oom_reserved)
        return 0;
    uint64_t ag = 0;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->graph && x->a_pos < t->oom_pos && (x->f_pos == ADV_NONE || x->f_pos >= t->oom_pos))
            ag += x->size;
    }
    /* the allocator releases its cached segments before it reports an OOM: the
     * device bytes live then bound what PyTorch still reserved */
    uint64_t g = t->graph_pool_bytes, res = t->oom_reserved, al = t->oom_allocated;
    if (t->oom_device_live && t->oom_device_live < res)
        res = t->oom_device_live;
    uint64_t dres = res > g ? res - g : 0, dal = al > ag ? al - ag : 0;
    uint64_t free_np = dres > dal ? dres - dal : 0, req = t->oom_request;
    const char *where = t->graph_capture_oom ? "inside a capture window"
                                             : "after the capture, outside any capture window";
    if (req <= free_np) {
        adv_finding_add(v, "X:FRAGMENTATION", "graph_default_pool", r->rank,
                        "PyTorch's request of %s failed %s although the non-graph pools held "
                        "%s free (%s reserved there, %s allocated): it would have fit there, so "
                        "the memory is fragmented, not taken by the graphs (their private pools "
                        "hold %s, %s of it allocated). Set PYTORCH_CUDA_ALLOC_CONF="
                        "expandable_segments:True; on pre-Blackwell GPUs with CUDA graphs also "
                        "NCCL_GRAPH_REGISTER=0",
                        GB(req), where, GB(free_np), GB(dres), GB(dal), GB(g), GB(ag));
        return 1;
    }
    adv_finding_add(v, "X:CUDA_GRAPH_POOL", t->graph_capture_oom ? "oom_in_capture" : "pool_grew",
                    r->rank,
                    "PyTorch's request of %s failed %s: CUDA-graph private pools hold %s of "
                    "the %s device (%s of it allocated tensors), and the non-graph pools had "
                    "only %s free (%s reserved there, %s allocated), less than the request: the "
                    "graph pools took the room, not fragmentation. Narrow the graph scope "
                    "(--cuda-graph-modules: drop moe_* first), share pools / reuse static "
                    "buffers, or turn graphs off as the baseline; full recompute needs "
                    "full_iteration graphs",
                    GB(req), where, GB(g), GB(v->capacity[i]), GB(ag), GB(free_np), GB(dres),
                    GB(dal));
    return 1;
}

/* One rank as triage sees it: its trace, its record, and the budgets the
 * steps compare against (bytes): cap the device capacity, budget capacity -
 * outside PyTorch - headroom, budget_exp the budget with expandable
 * segments (the cache needs no extra: capacity - outside - headroom). */
typedef struct triage_rank {
    const am_rank *r;
    const adv_trace *t;
    size_t i;
    uint64_t cap, budget, budget_exp;
} triage_rank;

/* Step 1, CUDA-graph private pools: an OOM with graphs in use (inside a
 * capture or after it), decided from the allocator's own numbers, else
 * pools holding more than half the capacity (bytes). Returns 0 when
 * neither, 1 for the OOM (other causes may still coexist), 2 for the pools
 * over half (the rank's triage ends there). */
static int
triage_graph_pools(const triage_rank *k, adv_verdict *v)
{
    const adv_trace *t = k->t;
    if (triage_graph_oom(t, k->r, v, k->i))
        return 1; /* other causes may coexist (item 6) */
    if (!k->cap || t->graph_pool_bytes * 2 <= k->cap)
        return 0;
    adv_finding_add(v, "X:CUDA_GRAPH_POOL", t->graph_capture_oom ? "oom_in_capture"
                                                                 : "pool_over_half",
                    k->r->rank,
                    "CUDA-graph private pools hold %s of %s capacity%s; PyTorch "
                    "allocated %s, reserved %s at the OOM (the pool counts as reserved: "
                    "not fragmentation). Narrow the graph scope (--cuda-graph-modules: "
                    "drop moe_* first), share pools / reuse static buffers, or turn "
                    "graphs off as the baseline; full recompute needs "
                    "full_iteration graphs",
                    GB(t->graph_pool_bytes), GB(k->cap),
                    t->graph_capture_oom ? ", and the OOM happened inside a capture "
                                           "window"
                                         : "",
                    GB(t->oom_allocated), GB(t->oom_reserved));
    return 2;
}

/* Step 2, a library outside PyTorch (NCCL, cuBLAS, cuDNN) made the failing
 * request of req bytes; cache is PyTorch's reserved-but-unallocated bytes
 * then. Returns 1 when a finding was added. */
static int
triage_library_oom(const triage_rank *k, adv_verdict *v, int lib, uint64_t req, uint64_t cache)
{
    if (lib != AM_LIB_NCCL && lib != AM_LIB_CUBLAS && lib != AM_LIB_CUDNN)
        return 0;
    adv_finding_add(v, "X:NCCL_BUFFERS", lib == AM_LIB_NCCL ? "nccl_failed" : "library_failed",
                    k->r->rank,
                    "the failing %s allocation was made by %s, outside PyTorch; "
                    "memory outside PyTorch up to %s; PyTorch's cache held %s "
                    "reserved but unallocated then. Leave NCCL a margin "
                    "(PYTORCH_CUDA_ALLOC_CONF expandable_segments:True lets the "
                    "cache shrink; fewer/lazier communicators, NCCL_BUFFSIZE, "
                    "NCCL_NVLS_ENABLE=0; torch.cuda.empty_cache() before the "
                    "first collective)",
                    GB(req), am_lib_name(lib), GB(v->outside[k->i]), GB(cache));
    return 1;
}

/* Step 2b, PyTorch's request of req bytes failed because memory outside
 * PyTorch (NCCL buffers, another process, the context: >= 1 GiB and >= 5%
 * of the device) took what it needed: without it the job's own peak +
 * cache + headroom fits, at no compute cost. Returns 1 when a finding was
 * added. */
static int
triage_outside_oom(const triage_rank *k, adv_verdict *v, uint64_t req)
{
    const am_rank *r = k->r;
    size_t i = k->i;
    uint64_t outside = v->outside[i], cap = k->cap;
    uint64_t need = v->baseline[i] + v->cache[i] + v->headroom;
    if (!(outside >= ((uint64_t)1 << 30) && outside * 20 >= cap && cap &&
          v->baseline[i] > k->budget && need <= cap))
        return 0;
    uint64_t nccl = r->peak[AM_L_DEVICE].known ? r->peak[AM_L_DEVICE].by_lib[AM_LIB_NCCL] : 0;
    int other = r->max_other * 2 > outside;
    adv_finding_add(v, "X:NCCL_BUFFERS", other ? "other_process" : "outside_pytorch", r->rank,
                    "PyTorch's request of %s failed with %s of the %s device "
                    "outside PyTorch (NCCL %s; context and other processes "
                    "%s, from cudaMemGetInfo): the job's own peak %s plus "
                    "the allocator cache %s and %s headroom fits the device "
                    "without it. %s",
                    GB(req), GB(outside), GB(cap), GB(nccl), GB(r->max_other),
                    GB(v->baseline[i]), GB(v->cache[i]), GB(v->headroom),
                    other ? "Free the device (another process holds memory "
                            "on it) or budget for it"
                          : "Leave NCCL a margin: fewer/lazier "
                            "communicators, NCCL_BUFFSIZE, "
                            "NCCL_NVLS_ENABLE=0");
    return 1;
}

/* Step 3, fragmentation: PyTorch's own request of req bytes failed although
 * allocated + req fits the expandable-segments budget and the inactive
 * split (cache: reserved - allocated bytes) exceeds the request. Returns 1
 * when a finding was added. */
static int
triage_fragmentation(const triage_rank *k, adv_verdict *v, uint64_t req, uint64_t cache)
{
    const adv_trace *t = k->t;
    if (!(t->oom && (k->r->levels & AM_LVL_TENSOR) && t->oom_reserved &&
          t->oom_allocated + req <= k->budget_exp && cache > req &&
          v->baseline[k->i] <= k->budget_exp))
        return 0;
    adv_finding_add(v, "X:FRAGMENTATION", "inactive_split", k->r->rank,
                    "PyTorch's request of %s failed with %s allocated (+ request = "
                    "%s, within the %s budget) and %s reserved: %s reserved but "
                    "unallocated (inactive split) exceeds the request %.1fx. Set "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (zero "
                    "throughput cost); with CUDA graphs on pre-Blackwell GPUs also "
                    "NCCL_GRAPH_REGISTER=0",
                    GB(req), GB(t->oom_allocated), GB(t->oom_allocated + req),
                    GB(k->budget_exp), GB(t->oom_reserved), GB(cache),
                    (double)cache / (double)(req ? req : 1));
    return 1;
}

/* Steps 2-3 for a rank with an OOM: the failing request's library and size
 * (bytes) and PyTorch's reserved-but-unallocated cache (bytes) decide
 * between a library outside PyTorch, memory outside PyTorch and
 * fragmentation; the first that applies wins. Returns the primary bits
 * (2: outside PyTorch, 4: fragmentation), 0 when none applies. */
static int
triage_oom_cause(const triage_rank *k, adv_verdict *v)
{
    const adv_trace *t = k->t;
    int lib = t->oom ? t->oom_lib : k->r->oom->lib;
    uint64_t req = t->oom ? t->oom_request : k->r->oom->requested;
    uint64_t cache = t->oom_reserved > t->oom_allocated ? t->oom_reserved - t->oom_allocated : 0;
    if (triage_library_oom(k, v, lib, req, cache))
        return 2; /* other causes may coexist (item 6) */
    if (triage_outside_oom(k, v, req))
        return 2;
    if (triage_fragmentation(k, v, req, cache))
        return 4;
    return 0;
}

/* Step 4, optimizer / parameter state: at the OOM (else the recorded
 * tensor-level peak) the job is over its budget and the peak is in the
 * optimizer step, or activations are under 1% of the live bytes. Returns 1
 * when a finding was added. */
static int
triage_optimizer_state(const triage_rank *k, adv_verdict *v)
{
    const adv_trace *t = k->t;
    const am_rank *r = k->r;
    uint64_t act = 0, all = 0;
    uint32_t at = t->oom ? t->oom_pos : ADV_NONE;
    uint8_t ph = t->oom ? t->oom_phase : r->peak[AM_L_TENSOR].phase;
    if (!t->oom && r->peak[AM_L_TENSOR].known)
        at = peak_pos(t); /* position of the tensor-level peak of the recorded trace */
    if (at != ADV_NONE)
        for (size_t q = 0; q < t->na; q++) {
            const adv_alloc *x = &t->a[q];
            if (x->a_pos < at && (x->f_pos == ADV_NONE || x->f_pos >= at)) {
                all += x->size;
                if (is_act(x))
                    act += x->size;
            }
        }
    int in_opt = ph == AM_PH_optimizer || ph == AM_PH_optimizer_state_init;
    int over = v->baseline[k->i] > k->budget;
    if (!(over && all && (in_opt || act * 100 < all)))
        return 0;
    const char *code = ph == AM_PH_init ? "X:PARAM_STATE" : "X:OPTIMIZER_STATE";
    adv_finding_add(v, code, in_opt ? "peak_in_optimizer" : "state_dominates", r->rank,
                    "%s in phase %s with %s live, of which activations %s (%.2f%%): "
                    "recompute cannot help. Use the distributed optimizer over a "
                    "larger domain (--use-distributed-optimizer, more DP), "
                    "lower-precision states (--use-precision-aware-optimizer "
                    "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16), optimizer CPU "
                    "offload, or more TP/PP",
                    t->oom ? "the OOM" : "the peak", am_phase_name(ph), GB(all), GB(act),
                    all ? 100.0 * (double)act / (double)all : 0.0);
    return 1;
}

/* Bytes of never-freed activation allocations made in iteration it before
 * iteration it + 1's first forward allocation (first_fwd[it + 1]). */
static uint64_t
never_freed_kept(const adv_trace *t, const uint32_t *first_fwd, int it)
{
    uint64_t b = 0;
    if (it < 0 || it + 1 >= 64 || first_fwd[it + 1] == ADV_NONE)
        return 0;
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (is_act(x) && x->iteration == it && x->a_pos < first_fwd[it + 1] &&
            x->f_pos == ADV_NONE)
            b += x->size;
    }
    return b;
}

/* Step 5 without a trend: activation/replay bytes allocated in one
 * iteration before the next iteration's first forward allocation and still
 * alive then (the first such iteration only). Over 256 MiB, when the job
 * is over its budget (the threshold is the margin, not a share of the
 * budget), a finding. Allocations of that iteration that are never freed
 * are left out when the next iteration, followed by another forward, keeps
 * none of its own: made once and kept for good, they are the job's
 * persistent buffers, not retained references -- on real Megatron-Core the
 * cuBLAS workspace of each thread, the global memory buffer of the local
 * DotProductAttention (b*np x s x s) and RoPE's cached embedding, all
 * created in the first forward/backward (docs/validation/megatron-core.md).
 * Returns 1 when a finding was added. */
static int
triage_retention_once(const triage_rank *k, adv_verdict *v)
{
    const adv_trace *t = k->t;
    uint64_t kept = 0;
    int it = -1, maxit = -1;
    for (size_t q = 0; q < t->na; q++)
        if (t->a[q].iteration > maxit)
            maxit = t->a[q].iteration;
    uint32_t first_fwd[64];
    for (int q = 0; q < 64; q++)
        first_fwd[q] = ADV_NONE;
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (x->iteration >= 0 && x->iteration < 64 && x->phase == AM_PH_forward &&
            first_fwd[x->iteration] == ADV_NONE)
            first_fwd[x->iteration] = x->a_pos;
    }
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (!is_act(x) || x->iteration < 0 || x->iteration + 1 >= 64 || x->iteration >= maxit)
            continue;
        uint32_t nf = first_fwd[x->iteration + 1];
        if (nf == ADV_NONE || x->a_pos >= nf)
            continue;
        if ((x->f_pos == ADV_NONE || x->f_pos > nf) && (it < 0 || x->iteration == it)) {
            it = x->iteration;
            kept += x->size;
        }
    }
    if (it >= 0 && it + 2 < 64 && first_fwd[it + 2] != ADV_NONE &&
        never_freed_kept(t, first_fwd, it + 1) == 0)
        kept -= never_freed_kept(t, first_fwd, it);
    if (!(kept > ((uint64_t)256 << 20) && v->baseline[k->i] > k->budget))
        return 0;
    adv_finding_add(v, "X:RETENTION", t->replay_bytes ? "replay_bytes" : "activations",
                    k->r->rank,
                    "%s of activation%s bytes allocated in iteration %d are still "
                    "alive in iteration %d's forward: something keeps references "
                    "(replay outputs, logged tensors, a cache); recompute cannot "
                    "free them",
                    GB(kept), t->replay_bytes ? "/recompute-replay" : "", it, it + 1);
    return 1;
}

int
adv_triage(am_job *j, adv_trace *tr, adv_verdict *v)
{
    int primary = 0;
    for (size_t i = 0; i < j->nranks && i < ADV_MAX_RANKS; i++) {
        triage_rank k = {.r = &j->ranks[i], .t = &tr[i], .i = i};
        const am_rank *r = k.r;
        const adv_trace *t = k.t;
        k.cap = v->capacity[i];
        k.budget = v->budget[i];
        /* with expandable segments the cache needs no extra: the budget without it */
        uint64_t keep = v->outside[i] + v->headroom;
        k.budget_exp = k.cap > keep ? k.cap - keep : 0;
        /* 1. CUDA-graph private pools */
        int graphs = triage_graph_pools(&k, v);
        if (graphs)
            primary |= 1;
        if (graphs == 2)
            continue;
        /* 2. memory outside PyTorch failing or starved; 3. fragmentation */
        if (!graphs && (t->oom || r->oom))
            primary |= triage_oom_cause(&k, v);
        /* 4a. the output layer's logits and the loss; a loaded state dict */
        if (triage_logits(t, &v->cfg, v, i, r->rank))
            primary |= 32;
        if (triage_loaded_state(t, v, i, r->rank))
            primary |= 8;
        /* 4. optimizer / parameter state */
        if (triage_optimizer_state(&k, v) || triage_state_growth(t, &v->cfg, v, i, r->rank))
            primary |= 8;
        /* 5. retention: a trend over three or more iterations, else activation/
         * replay bytes alive into the next iteration */
        if (triage_retention_trend(t, r, &v->cfg, v, i) || triage_retention_once(&k, v))
            primary |= 16;
    }
    return primary;
}
