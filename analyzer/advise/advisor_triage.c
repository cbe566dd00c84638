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
 *                      fits the budget: reserved - allocated (the inactive
 *                      split) that the allocator could not return decided it
 *   X:OPTIMIZER_STATE  the OOM/peak is in the optimizer step, or activations
 *   X:PARAM_STATE      are a negligible share of what is live (state dominates)
 *   X:RETENTION        activation or replay bytes alive into the next iteration
 *   X:HOT_RANK[pp=k]   one pipeline stage's peak stands out (a finding: where,
 *                      not why)
 *   X:SHAPE_OUTLIER    one microbatch's layers keep far more than the others'
 *                      (a longer sequence, more routed tokens: a finding)
 *   X:MOE_IMBALANCE    the rank's MoE dispatches received >= 1.1x the tokens
 *                      they sent (dropless routing skewed to its experts: a
 *                      finding)
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
        v->findings[v->nfindings - 1].ranked = bytes != 0;
    }
}

/* A fix of the finding just added (code) and the bytes it addresses. */
#define LEVER(code, change, bytes) adv_finding_lever(v, (code), (change), (bytes), 1)
#define LEVER_UNKNOWN(code, change) adv_finding_lever(v, (code), (change), 0, 0)

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

/* The most tensor bytes live at any op position before p of t's op stream
 * (bytes; the recorded trace, no projection). */
static uint64_t
max_live_before(const adv_trace *t, uint32_t p)
{
    uint64_t live = 0, mx = 0;
    for (uint32_t q = 0; q < p && q < t->nops; q++) {
        int32_t o = t->ops[q];
        live = o > 0 ? live + t->a[o - 1].size : live - t->a[-o - 1].size;
        if (live > mx)
            mx = live;
    }
    return mx;
}

/* The lever on optimizer state the first step left on the device when the
 * job already offloads optimizer state (--optimizer-cpu-offload, Megatron-
 * Core's HybridDeviceOptimizer, docs/megasim.md "Optimizer CPU offload"):
 * the device keeps, per parameter not offloaded, an fp32 main-param copy (4
 * B, made at construction) and fp32 Adam moments (8 B, made at the first
 * step: the state measured here); --exp-avg-dtype does not reach that Adam,
 * so 16-bit moments are no lever. Raising the fraction from f to F moves
 * (F - f)/(1 - f) of the kept parameters, 12/8 x state x that share; the
 * threshold rule offloads the parameter that crosses it too, so the real
 * move is at least that. F: the least multiple of 0.05 whose predicted peak
 * with the model's 2% error bound fits the budget (1.0 when none does: then
 * the text says it is not enough alone). Writes the lever's text and the
 * change; returns the bytes it removes from the peak. */
static uint64_t
offload_lever(const adv_cfg *c, uint64_t state, uint64_t peak, uint64_t budget, char *lever,
              size_t n, char *change, size_t cn)
{
    double f = c->offload_fraction, kept = 1.0 - f;
    if (kept <= 0.0) {
        snprintf(lever, n, "the optimizer state is already all on the host "
                           "(--optimizer-offload-fraction %.2f); ", f);
        return 0;
    }
    double F = 1.0, per = 1.5 * (double)state / kept; /* bytes per unit of fraction */
    for (int q = (int)(f * 20.0) + 1; q <= 20; q++) {
        double pred = (double)peak - per * (q / 20.0 - f);
        if (pred * 1.02 <= (double)budget) {
            F = q / 20.0;
            break;
        }
    }
    uint64_t fix = (uint64_t)(per * (F - f));
    if (fix > peak)
        fix = peak;
    snprintf(lever, n,
             "--optimizer-offload-fraction %.2f (now %.2f) moves the fp32 main-param copies and "
             "Adam moments of %.0f%% of the parameters the device still updates to the host: "
             "-%s (peak %s%s; 16-bit moments do not apply: the hybrid optimizer's Adam takes no "
             "--exp-avg-dtype); ",
             F, f, 100.0 * (F - f) / kept, GB(fix), GB(peak - fix),
             (double)(peak - fix) * 1.02 <= (double)budget ? "" : ", not enough alone");
    snprintf(change, cn, "--optimizer-offload-fraction %.2f", F);
    return fix;
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
    /* the state counts only against peaks after it was created: a peak over
     * the budget before the step (model construction, the first iteration)
     * is not one these bytes were live at, and removing them leaves it */
    uint64_t before = max_live_before(t, lo + 1);
    if (state < ((uint64_t)256 << 20) || peak <= budget || before > budget ||
        peak - state > budget)
        return 0;
    uint64_t f0 = live_at(t, first_fwd[k]), f1 = live_at(t, hi);
    char lever[512];
    int off = 0;
    uint64_t fix = c->exp_avg_bf16 ? 0 : state / 2;
    char change[128] = "";
    if (c->optimizer_cpu_offload) {
        fix = offload_lever(c, state, peak, budget, lever, sizeof lever, change, sizeof change);
        off = (int)strlen(lever);
    } else if (!c->exp_avg_bf16)
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
                    "iteration floor rose from %s to %s. The peak %s (baseline) is over the %s "
                    "left for allocations (the budget less the baseline's allocator cache) by "
                    "%s and would fit without those bytes (%s). Levers on these bytes: %s"
                    "%sor more DP/TP/PP; recompute can only offset them with activation bytes",
                    k, GB(state), n, GB(f0), GB(f1), GB(peak), GB(budget), GB(peak - budget),
                    GB(peak - state), lever,
                    c->optimizer_cpu_offload ? "" : "optimizer CPU offload, ");
    /* the distributed optimizer keeps 1/dp of the same bytes: its best lever
     * is the larger of the two (issue 14 item 6) */
    uint64_t shard = !c->dist_opt && c->dp > 1 ? state - state / (uint64_t)c->dp : 0;
    set_bytes(v, "X:OPTIMIZER_STATE", state, shard > fix ? shard : fix);
    if (v->nfindings && strcmp(v->findings[v->nfindings - 1].code, "X:OPTIMIZER_STATE") == 0)
        snprintf(v->findings[v->nfindings - 1].lever, sizeof v->findings[0].lever, "%s",
                 shard > fix ? "--use-distributed-optimizer" : change);
    if (c->optimizer_cpu_offload && change[0])
        LEVER("X:OPTIMIZER_STATE", change, fix);
    else if (!c->optimizer_cpu_offload && !c->exp_avg_bf16)
        LEVER("X:OPTIMIZER_STATE", "--use-precision-aware-optimizer --exp-avg-dtype bf16 "
                                   "--exp-avg-sq-dtype bf16", state / 2);
    if (shard)
        LEVER("X:OPTIMIZER_STATE", "--use-distributed-optimizer", shard);
    if (!c->optimizer_cpu_offload)
        LEVER_UNKNOWN("X:OPTIMIZER_STATE", "optimizer CPU offload");
    LEVER_UNKNOWN("X:OPTIMIZER_STATE", "more DP/TP/PP");
    return 1;
}

/* X:PARAM_STATE / init_transient: the recorded tensor-level peak lies in
 * model construction (before the first forward allocation) and is over the
 * budget left for allocations. The construction tensors live there and freed
 * before the first forward are a transient (the parameters while DDP copies
 * them into its contiguous buffers, a temporary of the job's own init), not
 * state that stays; when the peak without them fits (the construction peak
 * less them, and the highest peak after construction, the projection's
 * included), they decide it. Neither optimizer state (made at the first
 * step) nor activations are live there. Bytes: the transient; its fix: the
 * peak less the peak without it. Returns 1 when a finding was added. */
static int
triage_init_transient(const adv_trace *t, adv_verdict *v, size_t i, int rank)
{
    uint32_t fwd0 = ADV_NONE;
    for (size_t k = 0; k < t->na; k++)
        if (!t->a[k].bwd && t->a[k].phase == AM_PH_forward &&
            (fwd0 == ADV_NONE || t->a[k].a_pos < fwd0))
            fwd0 = t->a[k].a_pos;
    if (fwd0 == ADV_NONE)
        return 0;
    uint64_t live = 0, ipeak = 0, after = 0;
    uint32_t at = ADV_NONE;
    for (uint32_t p = 0; p < t->nops; p++) {
        int32_t o = t->ops[p];
        live = o > 0 ? live + t->a[o - 1].size : live - t->a[-o - 1].size;
        if (p < fwd0 && live > ipeak) {
            ipeak = live;
            at = p + 1;
        } else if (p >= fwd0 && live > after) {
            after = live;
        }
    }
    uint64_t budget = alloc_budget(v, i), peak = v->baseline[i];
    if (at == ADV_NONE || ipeak <= budget || peak < ipeak)
        return 0;
    if (peak > ipeak && peak > after)
        after = peak; /* the prediction's peak is after construction (projection) */
    uint64_t tr = 0;
    size_t n = 0;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->a_pos < at && x->f_pos != ADV_NONE && x->f_pos >= at && x->f_pos < fwd0) {
            tr += x->size;
            n++;
        }
    }
    uint64_t without = ipeak - tr > after ? ipeak - tr : after;
    if (tr < ((uint64_t)256 << 20) || without > budget)
        return 0;
    adv_finding_add(v, "X:PARAM_STATE", "init_transient", rank,
                    "the tensor-level peak %s is in model construction, before the first "
                    "forward: %s in %zu tensors made there are freed before the first forward "
                    "(a transient: the parameters while DDP copies them into its contiguous "
                    "buffers, or a temporary of the job's own init), next to %s of parameters, "
                    "gradient buffers and optimizer main params that stay. The peak is over the "
                    "%s left for allocations (the budget less the baseline's allocator cache) by %s and "
                    "would fit without those bytes (%s; the highest peak after construction is "
                    "%s). Optimizer state (made at the first step) and activations are not live "
                    "there: recompute, bf16 moments and optimizer offload cannot help. Levers on "
                    "these bytes: fewer parameters per rank during construction (more TP/PP, EP "
                    "for experts, or sharded parameters: FSDP), which shrinks the transient with "
                    "them; torch.cuda.empty_cache() after construction returns the segments it "
                    "leaves cached (PyTorch reserved)",
                    GB(ipeak), GB(tr), n, GB(ipeak - tr), GB(budget), GB(ipeak - budget),
                    GB(without), GB(after));
    set_bytes(v, "X:PARAM_STATE", tr, peak - without);
    LEVER("X:PARAM_STATE", "fewer parameters per rank during construction (more TP/PP, EP, "
                           "FSDP)", peak - without);
    LEVER_UNKNOWN("X:PARAM_STATE", "torch.cuda.empty_cache() after construction");
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
                    "%s left for allocations (the budget less the baseline's allocator cache) in iteration "
                    "%" PRId64 "%s, %s. Recompute cannot free them: "
                    "drop the references",
                    GB(g), GB(l0), k0, GB(l1), k1, kl, GB(peak), GB(budget), it_b, dev, horizon);
    adv_finding_held(v, "X:RETENTION", l1);
    LEVER("X:RETENTION", "drop the references", l1);
    return 1;
}

/* Op position of the recorded tensor-level peak (ADV_NONE when there is
 * none), whatever failed. */
static uint32_t
recorded_peak_pos(const adv_trace *t)
{
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

/* Op position of the OOM, else of the recorded tensor-level peak (ADV_NONE
 * when there is none); an OOM recorded after the byte limit has no live set
 * of its own (issue 14 E): the recorded peak. */
static uint32_t
peak_pos(const adv_trace *t)
{
    return t->oom && !t->oom_past_limit ? t->oom_pos : recorded_peak_pos(t);
}

static int
is_logits(uint8_t boundary)
{
    return boundary == AM_BD_output_layer || boundary == AM_BD_loss;
}

/* Which of the output layer's forward tensors a replay leaves out. */
enum { LG_DROP_OUTPUT = 1, LG_DROP_LOSS = 2 };

static int
logits_dropped(uint8_t boundary, uint8_t phase, int drop)
{
    return phase == AM_PH_forward &&
           ((boundary == AM_BD_output_layer && (drop & LG_DROP_OUTPUT)) ||
            (boundary == AM_BD_loss && (drop & LG_DROP_LOSS)));
}

/* The most bytes an iteration's forward and backward added over its floor:
 * over the ops from `from` (its first forward allocation) to `to` (the next
 * iteration's), with the forward tensors `drop` selects left out (LG_DROP_*),
 * the highest activation moment's live bytes made in the iteration and not
 * kept past `to` (what it keeps, such as the optimizer state or buffers made
 * once, is in the next iteration's floor already). 0 when none. */
static uint64_t
iteration_activations(const adv_trace *t, int drop, uint32_t from, uint32_t to)
{
    int64_t live = 0, mx = 0;
    for (uint32_t p = from; p < to && p < t->nops; p++) {
        int32_t o = t->ops[p];
        const adv_alloc *x = &t->a[o > 0 ? o - 1 : -o - 1];
        if (logits_dropped(x->boundary, x->phase, drop) || x->a_pos < from ||
            x->f_pos == ADV_NONE || x->f_pos >= to)
            continue;
        live += o > 0 ? (int64_t)x->size : -(int64_t)x->size;
        if (is_act(x) && live > mx)
            mx = live;
    }
    return (uint64_t)mx;
}

/* The highest moment of t's recorded tensor-level timeline (bytes) with the
 * forward tensors `drop` selects left out (LG_DROP_*: the output layer's
 * logits, the loss's copies), a fatal PyTorch OOM's failed request counted at
 * its position unless it is itself left out; *at: that moment's op position
 * (ADV_NONE when nothing was live). Each moment is one instant of the trace:
 * what is left out is what was live at that same instant, never bytes of
 * another moment (issue 14 B: logits live at an OOM were once subtracted from
 * a construction peak that held none). An OOM in the forward or backward of
 * iteration k cut the rest of it: that rest is estimated from iteration k-1
 * (iteration_activations: what its forward and backward added, `drop` left
 * out) on the floor of iteration k (the live bytes at its first forward
 * allocation, the state the step added included); *lower = 1 when there is
 * no such iteration (the figure is then a lower bound). */
static uint64_t
peak_without_logits(const adv_trace *t, int drop, uint32_t *at, int *lower)
{
    enum { NIT = 64 };
    uint32_t first[NIT];
    uint64_t floor_[NIT] = {0};
    for (int q = 0; q < NIT; q++)
        first[q] = ADV_NONE;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->iteration >= 0 && x->iteration < NIT && !x->bwd && x->phase == AM_PH_forward &&
            (first[x->iteration] == ADV_NONE || x->a_pos < first[x->iteration]))
            first[x->iteration] = x->a_pos;
    }
    uint64_t live = 0, mx = 0;
    int req = t->oom && t->oom_lib == AM_LIB_PYTORCH &&
              !logits_dropped(t->oom_boundary, t->oom_phase, drop);
    int cut = -1; /* the iteration the OOM cut */
    *at = ADV_NONE;
    *lower = 0;
    for (uint32_t p = 0; p <= t->nops; p++) {
        if (t->oom && p == t->oom_pos && p > 0) {
            int32_t o = t->ops[p - 1];
            cut = t->a[o > 0 ? o - 1 : -o - 1].iteration;
        }
        if (req && p == t->oom_pos && live + t->oom_request > mx) {
            mx = live + t->oom_request;
            *at = p;
        }
        if (p == t->nops)
            break;
        int32_t o = t->ops[p];
        const adv_alloc *x = &t->a[o > 0 ? o - 1 : -o - 1];
        int it = x->iteration;
        if (it >= 0 && it < NIT && first[it] == p)
            floor_[it] = live;
        if (logits_dropped(x->boundary, x->phase, drop))
            continue;
        live = o > 0 ? live + x->size : live - x->size;
        if (live > mx) {
            mx = live;
            *at = p + 1;
        }
    }
    if (cut >= 0 && cut < NIT && (t->oom_phase == AM_PH_forward || t->oom_phase == AM_PH_backward ||
                                  t->oom_phase == AM_PH_backward_replay)) {
        uint64_t act = cut > 0 && first[cut - 1] != ADV_NONE && first[cut] != ADV_NONE
                           ? iteration_activations(t, drop, first[cut - 1], first[cut])
                           : 0;
        if (!act) {
            *lower = 1;
        } else if (act + floor_[cut] > mx) {
            mx = act + floor_[cut];
            *at = (uint32_t)t->nops + 1; /* moment_name: the estimated rest */
        }
    }
    return mx;
}

/* The moment of op position `at` in words: "iteration 1, forward" (an
 * OOM's position: the failed request's phase), "model construction (before
 * iteration 0)", "an unknown moment" (nothing live). */
static void
moment_name(const adv_trace *t, uint32_t at, char *buf, size_t n)
{
    if (at == ADV_NONE || at == 0 || !t->nops) {
        snprintf(buf, n, "an unknown moment");
        return;
    }
    if (at == t->nops + 1 && t->oom && t->oom_pos > 0) {
        int32_t c = t->ops[t->oom_pos - 1];
        int k = t->a[c > 0 ? c - 1 : -c - 1].iteration;
        snprintf(buf, n, "the rest of iteration %d, which the OOM cut, estimated from "
                 "iteration %d's forward and backward on iteration %d's floor", k, k - 1, k);
        return;
    }
    int32_t o = t->ops[(at > t->nops ? t->nops : at) - 1];
    const adv_alloc *x = &t->a[o > 0 ? o - 1 : -o - 1];
    uint8_t ph = t->oom && at == t->oom_pos ? t->oom_phase : x->phase;
    if (x->iteration < 0 || ph == AM_PH_init)
        snprintf(buf, n, "model construction (before iteration 0)");
    else
        snprintf(buf, n, "iteration %d, %s", (int)x->iteration, am_phase_name(ph));
}

/* The fp32 copy of the logits the unfused vocabulary-parallel cross entropy
 * makes for one microbatch: 4*s/cp*b*V/tp bytes, V padded to 128*tp ([M] in
 * docs/sources.md); 0 when the vocabulary is unknown. */
static uint64_t
fp32_logits(const adv_cfg *c)
{
    uint64_t tp = c->tp > 0 ? (uint64_t)c->tp : 1, cp = c->cp > 0 ? (uint64_t)c->cp : 1;
    uint64_t unit = 128 * tp, vp = ((uint64_t)c->vocab + unit - 1) / unit * unit;
    if (c->vocab <= 0)
        return 0;
    return 4 * ((uint64_t)c->seq / cp) * (uint64_t)(c->mbs > 0 ? c->mbs : 1) * vp / tp;
}

/* X:LOGITS (issue 14 item 10): at the OOM (its failed request counted when
 * the output layer or the loss made it) or the peak, the output layer's
 * logits and the loss's copies (boundaries output_layer, loss: the last
 * stage's post-process) decide the over-budget peak: they hold more than
 * every transformer layer's activations together and the recorded run
 * replayed without them (peak_without_logits: every instant less what was
 * live at that instant) fits, or the fused loss alone makes it fit. Not
 * judged when the OOM came after the byte limit (its live set was not
 * recorded). A projection of the run beyond the trace
 * (v->baseline above the recorded peak) is added to that replay whole: its
 * logits are not known. Layer recompute does not touch them. Levers with
 * bytes: TE's fused loss (ADV_CE_LEVER) drops the fp32 copy of
 * the logits, 4*s/cp*b*V/tp bytes (V padded to 128*tp, [M] in
 * docs/sources.md), when the loss holds it: the peak with it is the replay
 * without the loss's copies; twice the TP size halves the vocabulary-parallel
 * logits; an uneven pipeline layout moves layers (their activations) off this
 * stage. fix_bytes: what the fused loss removes from the peak (0 when it does
 * not apply). */
static int
triage_logits(const adv_trace *t, const adv_cfg *c, adv_verdict *v, size_t i, int rank)
{
    uint32_t at = peak_pos(t);
    if (at == ADV_NONE || t->oom_past_limit) /* the OOM's live set was not recorded */
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
    int req_pt = t->oom && t->oom_lib == AM_LIB_PYTORCH;
    uint64_t moment = live_at(t, at) + (req_pt ? t->oom_request : 0);
    if (t->oom && is_logits(t->oom_boundary) && t->oom_phase == AM_PH_forward) {
        lg += t->oom_request;
        loss += t->oom_boundary == AM_BD_loss ? t->oom_request : 0;
    }
    uint32_t w_at, r_at, f_at;
    int lower, wl = 0, fl = 0;
    uint64_t rec = peak_without_logits(t, 0, &r_at, &lower);
    uint64_t budget = alloc_budget(v, i), peak = v->baseline[i];
    uint64_t proj = peak > rec ? peak - rec : 0; /* beyond the trace: logits unknown */
    uint64_t without = peak_without_logits(t, LG_DROP_OUTPUT | LG_DROP_LOSS, &w_at, &wl) + proj;
    uint64_t fp32 = fp32_logits(c);
    int fusable = !ADV_CE_NO_COPY(c) && fp32 && loss >= fp32;
    uint64_t fpeak = fusable ? peak_without_logits(t, LG_DROP_LOSS, &f_at, &fl) + proj : peak;
    /* the logits decide the peak: they outweigh the layers and the run fits
     * without them, or the fused loss alone makes it fit (issue 14: a
     * 151936-token vocabulary's 4.64 GiB fp32 copy, under the layers' bytes) */
    int dominate = lg > layers && without <= budget, fixes = fusable && fpeak <= budget;
    if (lg < ((uint64_t)1 << 30) || peak <= budget || (!dominate && !fixes))
        return 0;
    uint64_t fused = fusable && peak > fpeak ? peak - fpeak : 0;
    uint64_t tp = c->tp > 0 ? (uint64_t)c->tp : 1;
    char lever[256] = "", when[192], wmom[192], pmom[192];
    if (fused)
        snprintf(lever, sizeof lever, "%s (Transformer Engine's cross-entropy; "
                 "the native fused loss keeps the copy) drops the loss's fp32 "
                 "copies of the logits (%s at the %s): the peak without them %s%s, %s; ",
                 ADV_CE_CHANGE(c), GB(loss), t->oom ? "OOM" : "peak", fl ? "at least " : "",
                 GB(fpeak), fpeak > budget ? "still over" : fl ? "fits as far as recorded"
                                                                : "fits");
    moment_name(t, at, when, sizeof when);
    moment_name(t, w_at, wmom, sizeof wmom);
    moment_name(t, r_at, pmom, sizeof pmom);
    adv_finding_add(v, "X:LOGITS", t->oom && is_logits(t->oom_boundary) ? "oom_in_loss"
                                                                         : "logits_dominate",
                    rank,
                    "the output layer's logits and the loss's copies hold %s at the %s "
                    "(%s; the loss %s), %s the %s of activations of %d transformer layers "
                    "there; %s live then in all. The peak %s (%s%s) is over the %s left for "
                    "allocations (the budget less the baseline's allocator cache) by %s; without them, "
                    "every moment of the run less the logits live at that same moment, it "
                    "would peak at %s%s (%s%s), which %s%s. Layer recompute does not touch "
                    "them. Levers: %sBF16 logits / chunked cross-entropy; "
                    "--tensor-model-parallel-size %d splits the vocabulary-parallel "
                    "logits (-%s); an uneven pipeline layout "
                    "(--decoder-last-pipeline-num-layers) moves layers off this stage",
                    GB(lg), t->oom ? "OOM" : "peak", when, GB(loss),
                    lg > layers ? "more than" : "less than", GB(layers), nl, GB(moment),
                    GB(peak), pmom, proj ? ", with the projection of the run beyond the trace"
                                         : "",
                    GB(budget), GB(peak - budget), wl ? "at least " : "", GB(without), wmom,
                    proj ? ", the projection added whole" : "",
                    without <= budget ? "fits" : "is still over",
                    wl ? " as far as recorded: the rest of the iteration the OOM cut was not "
                         "recorded and no complete iteration precedes it, so this is a lower "
                         "bound" : "",
                    lever, (int)tp * 2, GB(lg / 2));
    set_bytes(v, "X:LOGITS", lg, fused);
    if (fused)
        LEVER("X:LOGITS", ADV_CE_CHANGE(c), fused);
    LEVER_UNKNOWN("X:LOGITS", "BF16 logits / chunked cross-entropy");
    char tp2[64];
    snprintf(tp2, sizeof tp2, "--tensor-model-parallel-size %d", (int)tp * 2);
    LEVER("X:LOGITS", tp2, lg / 2);
    LEVER_UNKNOWN("X:LOGITS", "an uneven pipeline layout (--decoder-last-pipeline-num-layers)");
    return 1;
}

/* X:PARAM_STATE / loaded_state (issue 14 items 2, 10): which tensors live
 * at op position `at` are a loaded state dict or its copy. From the Python
 * frames (or a range) the trace shows: made inside `load_checkpoint` and not
 * by the optimizer-state initialisation the load calls (AM_PYLOAD_*; those
 * moments are optimizer state and stay), and freed later or cut off by the
 * trace's end (one kept to the end of a trace that went on is state the job
 * keeps: an optimizer may keep loaded tensors as its own). By behaviour,
 * when the trace has no Python frames at all (with frames and no
 * load_checkpoint among them nothing was loaded): made before the first forward (init)
 * and freed within the first recorded iteration (before `second`, the next
 * iteration's first forward allocation; later frees are the job's
 * teardown). */
static int
is_loaded(const adv_trace *t, const adv_alloc *x, uint32_t at, uint32_t second)
{
    if (x->a_pos >= at || (x->f_pos != ADV_NONE && x->f_pos < at))
        return 0;
    /* made inside the load and never freed in a trace that went on: what
     * the job keeps (an optimizer may take loaded tensors over as its state),
     * not told from a copy left referenced: not counted */
    if (x->load)
        return x->load == AM_PYLOAD_COPY && (x->f_pos != ADV_NONE || t->trunc);
    /* by behaviour only in a trace without Python frames: with frames and no
     * load_checkpoint among them nothing was loaded, and init tensors freed
     * early are a construction transient (DDP's copy of the parameters) */
    return !t->py_seen && !t->load_seen && !t->trunc && x->phase == AM_PH_init && x->f_pos != ADV_NONE &&
           second != ADV_NONE && x->f_pos < second;
}

/* The recorded op stream replayed with the loaded tensors (drop[]) never on
 * the device (*without: loaded to CPU) and dropped when the first forward
 * starts (*freed: del after loading; fwd0 ADV_NONE: no forward recorded, the
 * same as *without only when the load ended before the OOM). A fatal OOM's
 * request (PyTorch's) enters both unless it was itself the loaded state's. */
static void
loaded_replay(const adv_trace *t, const uint8_t *drop, uint32_t fwd0, uint64_t *without,
              uint64_t *freed)
{
    uint64_t live = 0, lf = 0, held = 0;
    *without = *freed = 0;
    for (uint32_t p = 0; p <= t->nops; p++) {
        if (p == fwd0) {
            lf -= held;
            held = 0;
        }
        if (t->oom && p == t->oom_pos && t->oom_load != AM_PYLOAD_COPY &&
            t->oom_lib == AM_LIB_PYTORCH) {
            uint64_t r = t->oom_request;
            *without = live + r > *without ? live + r : *without;
            *freed = lf + r > *freed ? lf + r : *freed;
        }
        if (p == t->nops)
            break;
        int32_t o = t->ops[p];
        uint32_t id = (uint32_t)(o > 0 ? o - 1 : -o - 1);
        uint64_t sz = t->a[id].size;
        if (drop[id]) {
            if (o > 0 && p < fwd0) {
                lf += sz;
                held += sz;
            }
        } else {
            live = o > 0 ? live + sz : live - sz;
            lf = o > 0 ? lf + sz : lf - sz;
        }
        *without = live > *without ? live : *without;
        *freed = lf > *freed ? lf : *freed;
    }
}

/* X:PARAM_STATE / loaded_state: the loaded state (is_loaded) live at the
 * OOM / peak, with the failed request when the load made it, is a state dict
 * or its copy still referenced, not parameters, grads or optimizer state.
 * A finding when it holds >= 256 MiB of an over-budget peak and either the
 * OOM came inside the load (it is what failed) or the peak fits without it.
 * The evidence gives its bytes, where the trace saw it made and freed, the
 * state that stays, and the recorded peak replayed without it (loaded to
 * CPU) and with it dropped when loading ends; the levers: load to CPU, drop
 * the references before the first step, a distributed checkpoint format
 * (each rank loads its own shards). The figures are lower bounds when an
 * OOM cut the trace. Returns 1 when a finding was added. */
/* The loaded state's levers and the bytes each removes from the peak
 * (bytes): loading to CPU leaves the peak at `without`, dropping the
 * references at the first forward at `freed` (the peak itself when the load
 * already dropped them: no effect); a distributed checkpoint format's effect
 * is not known. */
static void
loaded_levers(adv_verdict *v, const adv_cfg *c, uint64_t peak, uint64_t without,
              uint64_t freed)
{
    LEVER("X:PARAM_STATE", "load it to CPU (map_location='cpu')",
          peak > without ? peak - without : 0);
    LEVER("X:PARAM_STATE", "drop its references before the first step",
          peak > freed ? peak - freed : 0);
    /* a Megatron job already on a distributed format (torch_dist, Megatron's
     * default, or another but the legacy `torch`) is not told to use one */
    if (!c->megatron || c->ckpt_torch)
        LEVER_UNKNOWN("X:PARAM_STATE", c->megatron ? "--ckpt-format torch_dist"
                                                   : "torch.distributed.checkpoint");
}

static int
triage_loaded_state(const adv_trace *t, const adv_cfg *c, adv_verdict *v, size_t i, int rank)
{
    /* a library's failed request says nothing about PyTorch's bytes: judged at
     * PyTorch's recorded tensor-level peak, as the parameter-state rule is */
    uint32_t at = t->oom && t->oom_lib != AM_LIB_PYTORCH ? recorded_peak_pos(t) : peak_pos(t);
    uint32_t second = ADV_NONE, fwd0 = ADV_NONE;
    if (at == ADV_NONE)
        return 0;
    int it0 = -1;
    for (size_t k = 0; k < t->na; k++)
        if (t->a[k].iteration >= 0 && (it0 < 0 || t->a[k].iteration < it0))
            it0 = t->a[k].iteration;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if (x->bwd || x->phase != AM_PH_forward)
            continue;
        if (fwd0 == ADV_NONE && x->iteration == it0)
            fwd0 = x->a_pos;
        if (second == ADV_NONE && x->iteration > it0)
            second = x->a_pos;
    }
    uint8_t *drop = calloc(t->na ? t->na : 1, 1);
    if (!drop)
        return 0;
    uint64_t tr = 0, persist = 0;
    size_t n = 0, kept = 0;
    uint32_t last_free = 0;
    for (size_t k = 0; k < t->na; k++) {
        const adv_alloc *x = &t->a[k];
        if ((drop[k] = (uint8_t)is_loaded(t, x, at, second))) {
            tr += x->size;
            n++;
            kept += x->f_pos == ADV_NONE;
            if (x->f_pos != ADV_NONE && x->f_pos > last_free)
                last_free = x->f_pos;
        } else if (x->phase == AM_PH_init && x->a_pos < at &&
                   (x->f_pos == ADV_NONE || x->f_pos >= at)) {
            persist += x->size;
        }
    }
    int it = -1; /* the iteration of the last free */
    for (size_t k = 0; k < t->na && t->a[k].a_pos < last_free; k++)
        it = t->a[k].iteration > it ? t->a[k].iteration : it;
    /* the OOM came inside the load: the copy (its request counted) or the
     * optimizer state the load initialises (made so far: state) failed */
    int in_load = t->oom && at == t->oom_pos && t->oom_load != AM_PYLOAD_NONE;
    uint64_t state = 0;
    for (size_t k = 0; in_load && k < t->na; k++)
        if (t->a[k].load == AM_PYLOAD_STATE && t->a[k].a_pos < at &&
            (t->a[k].f_pos == ADV_NONE || t->a[k].f_pos >= at))
            state += t->a[k].size;
    if (in_load && t->oom_load == AM_PYLOAD_COPY)
        tr += t->oom_request;
    uint64_t without, freed, budget = alloc_budget(v, i), peak = v->baseline[i];
    loaded_replay(t, drop, fwd0 != ADV_NONE && fwd0 < at ? fwd0 : ADV_NONE, &without, &freed);
    free(drop);
    if (tr < ((uint64_t)256 << 20) || peak <= budget || (!in_load && without > budget))
        return 0;
    char made[256], fmt[160];
    if (in_load)
        snprintf(made, sizeof made, "live when the OOM came inside the load (its %s request "
                 "made by %s; the optimizer state the load initialises, %s so far, would "
                 "grow on: every figure is a lower bound)", GB(t->oom_request),
                 t->oom_load == AM_PYLOAD_COPY ? "the load" : "the optimizer state's "
                 "initialisation", GB(state));
    else if (kept == n && t->trunc && at == t->oom_pos)
        snprintf(made, sizeof made, "still live when the OOM cut the trace (were they the "
                 "optimizer's state taken over from the loaded dict, a later step would show "
                 "them kept: the trace ends first)");
    else if (kept == n)
        snprintf(made, sizeof made, "never freed before the trace ends");
    else if (it < 0)
        snprintf(made, sizeof made, "freed when loading ended, before the first forward: "
                 "the load's one-off peak");
    else
        snprintf(made, sizeof made, "freed only in iteration %d", it);
    /* the load already dropped it before the first forward: dropping it
     * later cannot lower the peak (replayed "dropped at the first forward",
     * it would only stay live longer), so the lever is stated as moot */
    char drop_txt[96];
    if (kept == 0 && it < 0)
        snprintf(drop_txt, sizeof drop_txt, "already dropped when loading ended here: no effect");
    else
        snprintf(drop_txt, sizeof drop_txt, "peak %s", GB(freed));
    snprintf(fmt, sizeof fmt, "%s", !c->megatron ? "; a distributed checkpoint (torch."
             "distributed.checkpoint), each rank loading only its own shards"
             : c->ckpt_torch ? "; a distributed checkpoint format (--ckpt-format torch_dist), "
             "each rank loading only its own shards" : "");
    adv_finding_add(v, "X:PARAM_STATE", "loaded_state", rank,
                    "the loaded state: %s in %zu tensors %s, %s: a loaded state dict or its "
                    "copy, not parameters, grads or optimizer state (the state the job keeps "
                    "holds %s there). The %s %s is over the %s left for allocations by %s. "
                    "Levers: load it to CPU (map_location='cpu'): peak %s; drop its references "
                    "before the first step (del, gc.collect(), torch.cuda.empty_cache()): "
                    "%s%s%s",
                    GB(tr), n + (in_load && t->oom_load == AM_PYLOAD_COPY),
                    t->load_seen ? "made inside load_checkpoint (Python frames)"
                                 : "made before the first forward",
                    made, GB(persist),
                    t->oom && at == t->oom_pos ? "OOM's predicted peak" : "peak", GB(peak),
                    GB(budget),
                    GB(peak - budget), GB(without), drop_txt, fmt,
                    t->trunc && !in_load ? " (lower bounds: the OOM cut the trace)" : "");
    set_bytes(v, "X:PARAM_STATE", tr, peak > without ? peak - without : 0);
    loaded_levers(v, c, peak, without, kept == 0 && it < 0 ? peak : freed);
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
        adv_finding_held(v, "X:FRAGMENTATION", free_np);
        LEVER("X:FRAGMENTATION", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", free_np);
        LEVER_UNKNOWN("X:FRAGMENTATION", "NCCL_GRAPH_REGISTER=0");
        return 1;
    }
    /* full_iteration graphs capture the whole step: no module list narrows them
     * (issue 14 item 5) */
    int whole = strcmp(v->cfg.cuda_graph_impl, "full_iteration") == 0;
    adv_finding_add(v, "X:CUDA_GRAPH_POOL", t->graph_capture_oom ? "oom_in_capture" : "pool_grew",
                    r->rank,
                    "PyTorch's request of %s failed %s: CUDA-graph private pools hold %s of "
                    "the %s device (%s of it allocated tensors), and the non-graph pools had "
                    "only %s free (%s reserved there, %s allocated), less than the request: the "
                    "graph pools took the room, not fragmentation. %s, share pools / reuse "
                    "static buffers, or turn graphs off as the baseline; full recompute needs "
                    "full_iteration graphs",
                    GB(req), where, GB(g), GB(v->capacity[i]), GB(ag), GB(free_np), GB(dres),
                    GB(dal), whole ? "The full_iteration graph captures the whole step "
                    "(--cuda-graph-impl none turns it off)" : "Narrow the graph scope "
                    "(--cuda-graph-modules: drop moe_* first)");
    adv_finding_held(v, "X:CUDA_GRAPH_POOL", g);
    if (whole)
        LEVER("X:CUDA_GRAPH_POOL", "--cuda-graph-impl none", g);
    else
        LEVER_UNKNOWN("X:CUDA_GRAPH_POOL", "--cuda-graph-modules (narrow the graph scope)");
    LEVER_UNKNOWN("X:CUDA_GRAPH_POOL", "share pools / reuse static buffers");
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
    /* the OOM's figures only when there was one: a job that ran has none
     * (issue 14 B: "allocated 0 B, reserved 0 B at the OOM" on a job that
     * completed) */
    char at_oom[160] = "";
    if (t->oom)
        snprintf(at_oom, sizeof at_oom, "; PyTorch allocated %s, reserved %s at the OOM (the "
                 "pool counts as reserved: not fragmentation)",
                 GB(t->oom_allocated), GB(t->oom_reserved));
    else
        snprintf(at_oom, sizeof at_oom, "; no OOM was recorded on this rank");
    adv_finding_add(v, "X:CUDA_GRAPH_POOL", t->graph_capture_oom ? "oom_in_capture"
                                                                 : "pool_over_half",
                    k->r->rank,
                    "CUDA-graph private pools hold %s of %s capacity%s%s. Narrow the graph "
                    "scope (--cuda-graph-modules: drop moe_* first), share pools / reuse "
                    "static buffers, or turn graphs off as the baseline; full recompute "
                    "needs full_iteration graphs",
                    GB(t->graph_pool_bytes), GB(k->cap),
                    t->graph_capture_oom ? ", and the OOM happened inside a capture "
                                           "window"
                                         : "",
                    at_oom);
    adv_finding_held(v, "X:CUDA_GRAPH_POOL", t->graph_pool_bytes);
    LEVER_UNKNOWN("X:CUDA_GRAPH_POOL", "--cuda-graph-modules (narrow the graph scope)");
    LEVER_UNKNOWN("X:CUDA_GRAPH_POOL", "share pools / reuse static buffers");
    LEVER("X:CUDA_GRAPH_POOL", "CUDA graphs off", t->graph_pool_bytes);
    return 2;
}

/* Step 2a, a library outside PyTorch (NCCL, cuBLAS, cuDNN) failed to
 * allocate req bytes while PyTorch's cache (reserved but unallocated, cache
 * bytes) held at least as much, and PyTorch's allocated bytes + memory
 * outside PyTorch (its maximum over the trace, the context included) + the
 * request fit the device: the request would have succeeded had the cache
 * been released, so PyTorch's cached pool starved the library, not the
 * job's own peak (a one-off peak such as a checkpoint load's transient
 * leaves the cache at its height while NCCL connects a communicator at its
 * first collective). The cache's bytes are PyTorch's reserved minus
 * allocated at the failure (the shim's TENSOR records). Returns 1 when a
 * finding was added. */
static int
triage_cache_starved(const triage_rank *k, adv_verdict *v, int lib, uint64_t req, uint64_t cache)
{
    const adv_trace *t = k->t;
    uint64_t held = v->outside[k->i] + t->oom_allocated;
    if (!(t->oom && req && cache >= req && k->cap && held + req <= k->cap))
        return 0;
    adv_finding_add(v, "X:NCCL_BUFFERS", "cache_starved", k->r->rank,
                    "the failing %s allocation was made by %s, outside PyTorch, while "
                    "PyTorch's cache held %s reserved but unallocated (%.1fx the request): "
                    "PyTorch's allocated %s + memory outside PyTorch up to %s + the request "
                    "is %s, within the %s device, so PyTorch's cached pool starved %s, not "
                    "the job's own peak. Release the cache before %s allocates: "
                    "torch.cuda.empty_cache() after a one-off peak (checkpoint loading) and "
                    "before the first collective of each group, create the communicators "
                    "eagerly (init_process_group(device_id=...)) so their buffers exist "
                    "before the cache grows, or cap the cache "
                    "(torch.cuda.set_per_process_memory_fraction)",
                    GB(req), am_lib_name(lib), GB(cache), (double)cache / (double)req,
                    GB(t->oom_allocated), GB(v->outside[k->i]), GB(held + req), GB(k->cap),
                    am_lib_name(lib), am_lib_name(lib));
    adv_finding_held(v, "X:NCCL_BUFFERS", cache);
    LEVER("X:NCCL_BUFFERS", "torch.cuda.empty_cache() after the one-off peak, before the first "
                            "collective", cache);
    LEVER_UNKNOWN("X:NCCL_BUFFERS", "create the communicators eagerly");
    LEVER_UNKNOWN("X:NCCL_BUFFERS", "torch.cuda.set_per_process_memory_fraction");
    return 1;
}

/* Step 2, a library outside PyTorch (NCCL, cuBLAS, cuDNN) made the failing
 * request of req bytes; cache is PyTorch's reserved-but-unallocated bytes
 * then. Returns 1 when a finding was added. */
static int
triage_library_oom(const triage_rank *k, adv_verdict *v, int lib, uint64_t req, uint64_t cache)
{
    if (lib != AM_LIB_NCCL && lib != AM_LIB_CUBLAS && lib != AM_LIB_CUDNN)
        return 0;
    if (triage_cache_starved(k, v, lib, req, cache))
        return 1;
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
    adv_finding_held(v, "X:NCCL_BUFFERS", v->outside[k->i]);
    LEVER("X:NCCL_BUFFERS", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", cache);
    LEVER_UNKNOWN("X:NCCL_BUFFERS", "fewer/lazier communicators, NCCL_BUFFSIZE, "
                                    "NCCL_NVLS_ENABLE=0");
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
    adv_finding_held(v, "X:NCCL_BUFFERS", outside);
    if (other)
        LEVER("X:NCCL_BUFFERS", "free the device (another process holds memory on it)",
              r->max_other);
    else
        LEVER_UNKNOWN("X:NCCL_BUFFERS", "fewer/lazier communicators, NCCL_BUFFSIZE, "
                                        "NCCL_NVLS_ENABLE=0");
    return 1;
}

/* The expandable-segments lever cannot be confirmed from the trace when at
 * least 1 GiB of the device is held by memory the trace never saw allocated
 * (cudaMemGetInfo's used bytes beyond everything recorded, the context
 * included): another process, or an allocator in this process that calls the
 * driver directly, such as a colocated inference engine's memory pool
 * (torch.cuda.MemPool with a CUDAPluggableAllocator: vLLM's sleep mode maps
 * its memory with cuMemCreate/cuMemMap from an extension linked against
 * libcuda, and refuses to start under expandable_segments:True,
 * pytorch/pytorch issue 147851). Then `out` gets the caveat and the lever
 * that works with such a pool: max_split_size_mb at the largest power of two
 * MiB not above the failed request (req bytes), so blocks of that size are
 * no longer split and are released whole on an OOM (PyTorch's
 * CUDACachingAllocator; the option must be above 20 MiB). Returns 1 when
 * the caveat applies, else 0 with out empty. */
static int
fragmentation_unseen_memory(const triage_rank *k, uint64_t req, char *out, size_t len)
{
    out[0] = 0;
    uint64_t unseen = k->r->max_other;
    if (unseen < ((uint64_t)1 << 30))
        return 0;
    uint64_t mib = req >> 20, n = 32;
    while (n * 2 <= mib)
        n *= 2;
    if (mib < 32)
        snprintf(out, len,
                 ". The trace did not see %s of the used memory: another process, or a pool "
                 "in this process calling the driver directly (a colocated engine's "
                 "torch.cuda.MemPool, e.g. vLLM sleep mode), which refuses "
                 "expandable_segments:True; then free or sleep that pool around the "
                 "training step (the request is too small for max_split_size_mb)",
                 GB(unseen));
    else
        snprintf(out, len,
                 ". The trace did not see %s of the used memory: another process, or a pool "
                 "in this process calling the driver directly (a colocated engine's "
                 "torch.cuda.MemPool, e.g. vLLM sleep mode), which refuses "
                 "expandable_segments:True; then set "
                 "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:%" PRIu64 " instead, or free or "
                 "sleep that pool around the training step",
                 GB(unseen), n);
    return 1;
}

/* Step 3, fragmentation: PyTorch's own request of req bytes failed although
 * allocated + req, and the rank's allocated peak, fit the expandable-segments
 * budget (capacity - outside PyTorch - headroom). Then the bytes that decided
 * the OOM are the allocator's cache (cache: reserved - allocated bytes at the
 * OOM, after release_cached_blocks returned the whole free segments): free
 * blocks inside segments that also hold live tensors, which PyTorch cannot
 * return to the device (c10/cuda/CUDACachingAllocator.cpp) and which, with
 * the device's free bytes, did not hold the request. The cache need not
 * exceed the request (issue 14, hplay8 D: a 15.16 GiB loss request failed
 * with 13.04 GiB allocated and 13.80 GiB cached on a 40 GiB device, and
 * expandable_segments:True ran it). Returns 1 when a finding was added. */
static int
triage_fragmentation(const triage_rank *k, adv_verdict *v, uint64_t req, uint64_t cache)
{
    const adv_trace *t = k->t;
    if (!(t->oom && (k->r->levels & AM_LVL_TENSOR) && t->oom_reserved &&
          t->oom_allocated + req <= k->budget_exp && cache &&
          v->baseline[k->i] <= k->budget_exp))
        return 0;
    char unseen[512], held[256];
    int pool = fragmentation_unseen_memory(k, req, unseen, sizeof unseen);
    if (cache > req)
        snprintf(held, sizeof held, "exceeds the request %.1fx",
                 (double)cache / (double)(req ? req : 1));
    else
        snprintf(held, sizeof held,
                 "could not be returned to the device (free blocks in segments that "
                 "hold live tensors) and, with the device's free bytes, did not hold "
                 "the request");
    adv_finding_add(v, "X:FRAGMENTATION", pool ? "inactive_split_unseen" : "inactive_split",
                    k->r->rank,
                    "PyTorch's request of %s failed with %s allocated (+ request = "
                    "%s, within the %s budget) and %s reserved: %s reserved but "
                    "unallocated (inactive split) %s. Set "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (zero "
                    "throughput cost); with CUDA graphs on pre-Blackwell GPUs also "
                    "NCCL_GRAPH_REGISTER=0%s",
                    GB(req), GB(t->oom_allocated), GB(t->oom_allocated + req),
                    GB(k->budget_exp), GB(t->oom_reserved), GB(cache), held, unseen);
    const char *fk = "X:FRAGMENTATION";
    adv_finding_held(v, fk, cache);
    LEVER(fk, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", cache);
    if (pool)
        LEVER_UNKNOWN(fk, req >> 20 >= 32 ? "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb"
                                          : "free or sleep the colocated pool");
    return 1;
}

/* Step 3b, the cache a one-off transient left (issue 14 class D, hplay6 W1:
 * a distributed-optimizer resume whose loaded copy was freed before the
 * first forward, then an OOM there; expandable_segments:True ran it).
 * PyTorch's own request of req bytes failed although the rank's allocated
 * bytes + the request, and its allocated peak, fit the device (capacity -
 * memory outside PyTorch: the OOM happened on the device, the headroom is
 * the advisor's margin), while at least 256 MiB were reserved but
 * unallocated after the allocator had released what it could (the device
 * bytes live at the OOM, or PyTorch's reserved if lower, less its allocated
 * bytes): segments split between live tensors and free blocks, which
 * release_cached_blocks cannot return (c10/cuda/CUDACachingAllocator.cpp).
 * Those segments were cut by the checkpoint load's copies (AM_PYLOAD_COPY:
 * load_checkpoint frames), made before the first forward and freed before
 * the OOM, at least as large as that cache: the forward's tensors took part
 * of their segments. Only for an OOM in the first iteration recorded,
 * before its optimizer step (later the iteration's own tensors have cut the
 * segments again: the generic rule above). Not with expandable segments on
 * (PyTorch unmaps free pages before failing). The levers, each
 * with the cache's bytes: expandable segments, or torch.cuda.empty_cache()
 * right after the load (the segments are whole then and are returned).
 * Returns 1 when a finding was added. */
static int
triage_load_cache(const triage_rank *k, adv_verdict *v, uint64_t req)
{
    const adv_trace *t = k->t;
    const am_rank *r = k->r;
    uint64_t dev = k->cap > v->outside[k->i] ? k->cap - v->outside[k->i] : 0;
    if (!(t->oom && r->oom && t->oom_lib == AM_LIB_PYTORCH && (r->levels & AM_LVL_TENSOR) &&
          dev && !v->cfg.alloc_expandable && t->oom_load == AM_PYLOAD_NONE &&
          t->oom_allocated + req <= dev && v->baseline[k->i] <= dev))
        return 0;
    uint64_t res = t->oom_reserved, live = r->oom->live[AM_L_DEVICE];
    if (live && live < res)
        res = live;
    uint64_t held = res > t->oom_allocated ? res - t->oom_allocated : 0;
    if (held < ((uint64_t)256 << 20))
        return 0;
    uint32_t fwd0 = ADV_NONE;
    for (size_t q = 0; q < t->na && fwd0 == ADV_NONE; q++)
        if (!t->a[q].bwd && t->a[q].phase == AM_PH_forward)
            fwd0 = t->a[q].a_pos;
    if (fwd0 == ADV_NONE || t->oom_pos <= fwd0)
        return 0;
    /* the OOM came in the first iteration the trace records, before its
     * optimizer step: later, a whole iteration of activations has cut and
     * freed the load's segments again, and the cache is the iteration's own
     * (the generic fragmentation rule) */
    int it0 = -1;
    for (size_t q = 0; q < t->na; q++)
        if (t->a[q].iteration >= 0 && (it0 < 0 || t->a[q].iteration < it0))
            it0 = t->a[q].iteration;
    if ((t->opt_state_init_end != ADV_NONE && t->opt_state_init_end < t->oom_pos) ||
        (it0 >= 0 && r->oom->iteration > it0))
        return 0;
    uint64_t loaded = 0;
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (x->a_pos < fwd0 && x->f_pos != ADV_NONE && x->f_pos < t->oom_pos &&
            x->load == AM_PYLOAD_COPY)
            loaded += x->size;
    }
    if (loaded < held)
        return 0;
    char marg[192] = "";
    if (t->oom_allocated + req > k->budget)
        snprintf(marg, sizeof marg, "; not within the %s budget: the fixed job runs inside "
                 "the headroom, MARGINAL", GB(k->budget));
    adv_finding_add(v, "X:FRAGMENTATION", "load_cache", r->rank,
                    "PyTorch's request of %s failed with %s allocated (+ request = %s, within "
                    "the device's %s: capacity less memory outside PyTorch%s) while %s stayed "
                    "reserved but unallocated after the allocator released its whole free "
                    "segments: segments split between live tensors and free blocks. The "
                    "checkpoint load made %s of copies (load_checkpoint frames) before the "
                    "first forward and freed them before the OOM, in the first iteration, and "
                    "the forward's tensors took parts of their segments: the cache the load "
                    "left. Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (free pages are "
                    "unmapped before an OOM), or call torch.cuda.empty_cache() right after the "
                    "load, before the first forward (its segments are whole then and go back "
                    "to the device)",
                    GB(req), GB(t->oom_allocated), GB(t->oom_allocated + req), GB(dev), marg,
                    GB(held), GB(loaded));
    adv_finding_held(v, "X:FRAGMENTATION", held);
    LEVER("X:FRAGMENTATION", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", held);
    LEVER("X:FRAGMENTATION", "torch.cuda.empty_cache() after the checkpoint load", held);
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
    if (triage_fragmentation(k, v, req, cache) || triage_load_cache(k, v, req))
        return 4;
    return 0;
}

/* What the optimizer's sharding is and what more of it would save, for an
 * optimizer-state finding with the distributed optimizer already on
 * (hplay7: "--use-distributed-optimizer, more DP" told to a job that had it,
 * its experts' state on one expert-data-parallel rank). Megatron-Core's
 * distributed optimizer shards the dense parameters' state over the data-
 * parallel group (world / (TP x PP x CP)) and the expert parameters' state
 * over the expert-data-parallel group (parallel_state: world / (ETP x EP x
 * PP)). state: the optimizer-state bytes live at the moment judged (those
 * the optimizer phases allocated); the trace does not tell dense from
 * expert state, so doubling both groups saves at most state/2 (bytes,
 * returned). Writes the sentence (text) and the lever's change (lever). */
static uint64_t
sharding_note(const adv_cfg *c, uint64_t state, char *text, size_t n, char *lever, size_t ln)
{
    int etp = c->etp > 0 ? c->etp : 1, ep = c->ep > 0 ? c->ep : 1, pp = c->pp > 0 ? c->pp : 1;
    int edp = c->world % (etp * ep * pp) == 0 ? c->world / (etp * ep * pp) : 1;
    if (edp < 1)
        edp = 1;
    char ex[200] = "";
    if (c->num_experts > 0)
        snprintf(ex, sizeof ex, ", the expert parameters' over expert DP %d (world %d / ETP %d x "
                 "EP %d x PP %d%s)", edp, c->world, etp, ep, pp,
                 edp == 1 ? ": not sharded; more ranks or a smaller EP shard it" : "");
    snprintf(text, n,
             "The distributed optimizer is already on: the dense parameters' optimizer state is "
             "sharded over DP %d (world %d / TP x PP x CP)%s. Of the %s of optimizer state live "
             "here, doubling %s would keep half: at most -%s%s",
             c->dp, c->world, ex, GB(state),
             c->num_experts > 0 ? "DP and expert DP" : "DP", GB(state / 2),
             c->num_experts > 0 ? " (the trace does not tell dense from expert state)" : "");
    snprintf(lever, ln, "more data-parallel ranks (now DP %d%s)", c->dp,
             c->num_experts > 0 ? (edp == 1 ? ", expert DP 1" : ", expert DP >1") : "");
    if (c->num_experts > 0 && edp > 1)
        snprintf(lever, ln, "more data-parallel ranks (now DP %d, expert DP %d)", c->dp, edp);
    return state / 2;
}

/* Step 4, optimizer / parameter state: at the OOM (else the recorded
 * tensor-level peak) the job is over its budget and the peak is in the
 * optimizer step, or activations are under 1% of the live bytes; a loaded
 * state dict's bytes there (`loaded`, from loaded_state) are left out of
 * both. Returns 1 when a finding was added. */
static int
triage_optimizer_state(const triage_rank *k, adv_verdict *v, uint64_t loaded)
{
    const adv_trace *t = k->t;
    const am_rank *r = k->r;
    uint64_t act = 0, all = 0, opt = 0;
    /* a library's failed request (NCCL, cuBLAS) says nothing about what
     * PyTorch needed then: judge PyTorch's own tensor-level peak instead */
    int oom = t->oom && t->oom_lib == AM_LIB_PYTORCH && !t->oom_past_limit;
    uint32_t at = oom ? t->oom_pos : ADV_NONE;
    uint8_t ph = oom ? t->oom_phase : r->peak[AM_L_TENSOR].phase;
    if (!oom && r->peak[AM_L_TENSOR].known)
        at = recorded_peak_pos(t); /* the tensor-level peak of the recorded trace */
    if (at != ADV_NONE)
        for (size_t q = 0; q < t->na; q++) {
            const adv_alloc *x = &t->a[q];
            if (x->a_pos < at && (x->f_pos == ADV_NONE || x->f_pos >= at)) {
                all += x->size;
                if (is_act(x))
                    act += x->size;
                if (x->phase == AM_PH_optimizer || x->phase == AM_PH_optimizer_state_init)
                    opt += x->size;
            }
        }
    int in_opt = ph == AM_PH_optimizer || ph == AM_PH_optimizer_state_init;
    /* a loaded state dict's bytes (loaded_state) are neither: judged without them */
    all = all > loaded ? all - loaded : 0;
    int over = v->baseline[k->i] > k->budget + loaded;
    if (!(over && all && (in_opt || act * 100 < all)))
        return 0;
    const char *code = ph == AM_PH_init ? "X:PARAM_STATE" : "X:OPTIMIZER_STATE";
    const adv_cfg *c = &v->cfg;
    int sharded = c->megatron && c->dist_opt;
    char shard[640] = "", shard_lever[96] = "";
    uint64_t shard_saves = sharded ? sharding_note(c, opt, shard, sizeof shard, shard_lever,
                                                   sizeof shard_lever)
                                   : 0;
    adv_finding_add(v, code, in_opt ? "peak_in_optimizer" : "state_dominates", r->rank,
                    "%s in phase %s with %s live, of which activations %s (%.2f%%): "
                    "recompute cannot help. Use %s, "
                    "lower-precision states (--use-precision-aware-optimizer "
                    "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16), optimizer CPU "
                    "offload, or more TP/PP%s%s%s",
                    oom ? "the OOM" : "the peak", am_phase_name(ph), GB(all), GB(act),
                    all ? 100.0 * (double)act / (double)all : 0.0,
                    sharded ? "more data-parallel ranks for the distributed optimizer"
                            : "the distributed optimizer over a larger domain "
                              "(--use-distributed-optimizer, more DP)",
                    ph == AM_PH_init && !t->py_seen
                        ? ". The trace has no Python frames: a loaded checkpoint's state dict "
                          "in these bytes could not be told from parameters (record with "
                          "RECOMPSHIM_PYSTACK=1)"
                        : "", sharded ? ". " : "", shard);
    adv_finding_held(v, code, all > act ? all - act : 0);
    if (sharded && opt)
        LEVER(code, shard_lever, shard_saves);
    else if (sharded)
        LEVER_UNKNOWN(code, shard_lever);
    else
        LEVER_UNKNOWN(code, "--use-distributed-optimizer, more DP");
    LEVER_UNKNOWN(code, "--use-precision-aware-optimizer --exp-avg-dtype bf16 "
                        "--exp-avg-sq-dtype bf16");
    LEVER_UNKNOWN(code, "optimizer CPU offload");
    LEVER_UNKNOWN(code, "more TP/PP");
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
        if (is_act(x) && !x->state && x->iteration == it && x->a_pos < first_fwd[it + 1] &&
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
        if (!is_act(x) || x->state || x->iteration < 0 || x->iteration + 1 >= 64 ||
            x->iteration >= maxit)
            continue;
        uint32_t nf = first_fwd[x->iteration + 1];
        if (nf == ADV_NONE || x->a_pos >= nf)
            continue;
        if ((x->f_pos == ADV_NONE || x->f_pos > nf) && (it < 0 || x->iteration == it)) {
            it = x->iteration;
            kept += x->size;
        }
    }
    /* both counts leave forward state out (x->state), so the subtraction
     * cannot pass zero; saturate anyway: a wrapped count read 16 EiB (the
     * real Megatron-Core job, when only one of them left state out) */
    if (it >= 0 && it + 2 < 64 && first_fwd[it + 2] != ADV_NONE &&
        never_freed_kept(t, first_fwd, it + 1) == 0) {
        uint64_t once = never_freed_kept(t, first_fwd, it);
        kept = kept > once ? kept - once : 0;
    }
    if (!(kept > ((uint64_t)256 << 20) && v->baseline[k->i] > k->budget))
        return 0;
    adv_finding_add(v, "X:RETENTION", t->replay_bytes ? "replay_bytes" : "activations",
                    k->r->rank,
                    "%s of activation%s bytes allocated in iteration %d are still "
                    "alive in iteration %d's forward: something keeps references "
                    "(replay outputs, logged tensors, a cache); recompute cannot "
                    "free them",
                    GB(kept), t->replay_bytes ? "/recompute-replay" : "", it, it + 1);
    adv_finding_held(v, "X:RETENTION", kept);
    LEVER("X:RETENTION", "drop the references", kept);
    return 1;
}

/* Retention until the step ends (issue 21): tensors the main thread made in
 * the forward of a complete iteration k (not inside a CUDA-graph capture)
 * that outlive every backward-thread op of that iteration (the last
 * allocation or free made by a backward of k) and are freed on the main
 * thread before iteration k+1's first forward allocation: the training step
 * keeps each microbatch's outputs (a loss function handing back undetached
 * tensors into the schedule's forward_data_store, a metrics list) until it
 * returns. In a real backward every saved activation dies on the backward
 * thread, so nothing of the forward is left for the main thread to free
 * after it. K = their bytes, all live together when the last backward ends.
 * Over 256 MiB while the job is over its budget: a finding with K as its
 * bytes and its fix (the lever: stop keeping them), so it is the primary
 * when dropping them covers the deficit. Returns 1 when a finding was added. */
static int
triage_retention_step(const triage_rank *k, adv_verdict *v)
{
    enum { NIT = 64 };
    const adv_trace *t = k->t;
    uint32_t first_fwd[NIT], last_bwd[NIT];
    for (int q = 0; q < NIT; q++)
        first_fwd[q] = last_bwd[q] = ADV_NONE;
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (x->iteration >= 0 && x->iteration < NIT && !x->bwd && x->phase == AM_PH_forward &&
            first_fwd[x->iteration] == ADV_NONE)
            first_fwd[x->iteration] = x->a_pos;
    }
    /* the last backward-thread op (allocation, or free of an allocation of the
     * same iteration) before the next iteration's first forward allocation: a
     * free the garbage collector makes later on that thread is not its backward */
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        int it = x->iteration;
        if (it < 0 || it + 1 >= NIT)
            continue;
        uint32_t end = first_fwd[it + 1], last = x->bwd ? x->a_pos : ADV_NONE;
        if (x->fbwd && x->f_pos != ADV_NONE && (end == ADV_NONE || x->f_pos < end) &&
            (last == ADV_NONE || x->f_pos > last))
            last = x->f_pos;
        if (last != ADV_NONE && (end == ADV_NONE || last < end) &&
            (last_bwd[it] == ADV_NONE || last > last_bwd[it]))
            last_bwd[it] = last;
    }
    int it = -1;
    for (int q = 0; q + 1 < NIT && it < 0; q++)
        if (last_bwd[q] != ADV_NONE && first_fwd[q + 1] != ADV_NONE &&
            last_bwd[q] < first_fwd[q + 1])
            it = q;
    if (it < 0)
        return 0;
    uint64_t kept = 0, largest = 0;
    size_t n = 0;
    for (size_t q = 0; q < t->na; q++) {
        const adv_alloc *x = &t->a[q];
        if (x->iteration != it || x->bwd || x->graph || x->phase != AM_PH_forward ||
            x->fbwd || x->f_pos == ADV_NONE || x->f_pos <= last_bwd[it] ||
            x->f_pos >= first_fwd[it + 1] || x->a_pos >= last_bwd[it])
            continue;
        kept += x->size;
        largest = x->size > largest ? x->size : largest;
        n++;
    }
    uint64_t budget = alloc_budget(v, k->i), peak = v->baseline[k->i];
    if (kept < ((uint64_t)256 << 20) || peak <= budget)
        return 0;
    adv_finding_add(v, "X:RETENTION", "step", k->r->rank,
                    "%s in %zu tensors made in iteration %d's forward (the largest %s) outlive "
                    "its last backward and are freed only when the training step ends: the "
                    "step keeps each microbatch's outputs (a loss function handing back "
                    "tensors that are not detached, kept in the schedule's "
                    "forward_data_store or a metrics list); recompute cannot free them. The "
                    "peak %s is over the %s budget by %s and %s without them (%s)",
                    GB(kept), n, it, GB(largest), GB(peak), GB(budget), GB(peak - budget),
                    peak - kept <= budget ? "would fit" : "would still not fit",
                    GB(peak > kept ? peak - kept : 0));
    set_bytes(v, "X:RETENTION", kept, kept);
    if (v->nfindings && strcmp(v->findings[v->nfindings - 1].code, "X:RETENTION") == 0)
        snprintf(v->findings[v->nfindings - 1].lever, sizeof v->findings[0].lever,
                 "keep only detached values (.detach(), .item()) of what each microbatch's "
                 "loss function returns");
    LEVER("X:RETENTION", "keep only detached values of what the loss function returns", kept);
    return 1;
}

/* A checkpoint save (issue 21): the OOM, or the over-budget tensor-level
 * peak, is in phase checkpoint_save (a range around save_checkpoint,
 * docs/analysis.md). What the save allocates on the device (its tensors live
 * there, and the failed request) comes on top of what the job keeps between
 * steps; no layer's activations are live, so recompute cannot help. With the
 * distributed optimizer's fully reshardable format gathered over NCCL
 * (--dist-ckpt-optim-fully-reshardable without
 * --distrib-optim-fully-reshardable-mem-efficient) the bytes are that
 * gather's buffers (docs/megasim.md "Checkpoint save"), and the change is
 * the Gloo gather on the host or the default dp_reshardable format. Returns 1
 * when a finding was added. */
static int
triage_checkpoint_save(const triage_rank *k, adv_verdict *v)
{
    const adv_trace *t = k->t;
    const am_rank *r = k->r;
    int in_oom = t->oom && t->oom_phase == AM_PH_checkpoint_save;
    uint64_t budget = alloc_budget(v, k->i), peak = v->baseline[k->i];
    if (!in_oom && !(r->peak[AM_L_TENSOR].known &&
                     r->peak[AM_L_TENSOR].phase == AM_PH_checkpoint_save && peak > budget))
        return 0;
    uint32_t at = peak_pos(t);
    uint64_t save = in_oom ? t->oom_request : 0, kept = 0;
    for (size_t q = 0; q < t->na && at != ADV_NONE; q++) {
        const adv_alloc *x = &t->a[q];
        if (x->a_pos < at && (x->f_pos == ADV_NONE || x->f_pos >= at)) {
            if (x->phase == AM_PH_checkpoint_save)
                save += x->size;
            else
                kept += x->size;
        }
    }
    const adv_cfg *c = &v->cfg;
    int gather = c->dist_opt && !c->ckpt_torch && c->ckpt_fully_reshardable &&
                 !c->ckpt_mem_efficient;
    adv_finding_add(v, "X:CHECKPOINT_SAVE", in_oom ? "oom_in_save" : "peak_in_save", r->rank,
                    "the checkpoint save %s: its own device buffers hold %s%s on top of the %s "
                    "the job keeps between steps (parameters, grads, optimizer state); no "
                    "activations are live, so recompute cannot help%s",
                    in_oom ? "ran out of memory" : "sets the peak", GB(save),
                    in_oom ? " (the failed request included)" : "", GB(kept),
                    gather ? ". They are the fully reshardable optimizer state's NCCL gather "
                             "(--dist-ckpt-optim-fully-reshardable): every DP shard of each "
                             "bucket's fp32 params and Adam moments, one key at a time"
                           : "");
    set_bytes(v, "X:CHECKPOINT_SAVE", save, peak > save && peak - save <= budget ? save : 0);
    if (v->nfindings && strcmp(v->findings[v->nfindings - 1].code, "X:CHECKPOINT_SAVE") == 0)
        snprintf(v->findings[v->nfindings - 1].lever, sizeof v->findings[0].lever, "%s",
                 gather ? "--distrib-optim-fully-reshardable-mem-efficient (gathers on the host "
                          "with Gloo), or drop --dist-ckpt-optim-fully-reshardable"
                        : "make the save allocate less on the device (its buffers are listed), "
                          "or save from host copies");
    if (gather)
        LEVER("X:CHECKPOINT_SAVE", "--distrib-optim-fully-reshardable-mem-efficient, or drop "
                                   "--dist-ckpt-optim-fully-reshardable", save);
    else
        LEVER("X:CHECKPOINT_SAVE", "the save's device buffers (fewer, or from host copies)",
              save);
    return 1;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Shapes that change (issue 21): the bytes each forward instance (one
 * microbatch of one model chunk) allocates inside its layers, over the
 * instances that allocate any (a captured CUDA graph allocates none). With
 * four or more, when the largest is at least 1.5 x the median and 256 MiB
 * above it, that microbatch carried more tokens (a longer sequence, an
 * expert-parallel rank receiving more routed tokens): a finding, not a
 * primary code; whether it is live at the peak (the OOM or the recorded
 * tensor peak) is stated, and the counterfactuals, made from the same trace,
 * already size every setting for it. Returns 1 when a finding was added. */
static int
triage_shape_outlier(const adv_trace *t, adv_verdict *v, int rank)
{
    if (t->ninsts < 4)
        return 0;
    uint64_t *b = calloc(t->ninsts, sizeof *b), *sorted = calloc(t->ninsts, sizeof *b);
    if (!b || !sorted) {
        free(b);
        free(sorted);
        return 0;
    }
    for (size_t q = 0; q < t->na; q++)
        if (t->a[q].inst >= 0 && (size_t)t->a[q].inst < t->ninsts && !t->a[q].bwd &&
            !t->a[q].state)
            b[t->a[q].inst] += t->a[q].size;
    size_t n = 0, big = 0;
    for (size_t q = 0; q < t->ninsts; q++) {
        if (b[q])
            sorted[n++] = b[q];
        if (b[q] > b[big])
            big = q;
    }
    int added = 0;
    if (n >= 4) {
        qsort(sorted, n, sizeof *sorted, cmp_u64);
        uint64_t med = sorted[n / 2], top = b[big];
        if (top >= med + med / 2 && top - med >= ((uint64_t)256 << 20)) {
            /* the outliers (>= 1.5 x the median); the one most live at the peak */
            uint32_t at = peak_pos(t);
            size_t nout = 0, hot = big;
            uint64_t hot_live = 0;
            for (size_t i = 0; i < t->ninsts; i++) {
                if (b[i] < med + med / 2)
                    continue;
                nout++;
                uint64_t live = 0;
                for (size_t q = 0; q < t->na && at != ADV_NONE; q++) {
                    const adv_alloc *x = &t->a[q];
                    if (x->inst == (int32_t)i && x->a_pos < at &&
                        (x->f_pos == ADV_NONE || x->f_pos >= at))
                        live += x->size;
                }
                if (live > hot_live) {
                    hot = i;
                    hot_live = live;
                }
            }
            int k = 0;
            for (size_t q = 0; q < hot; q++)
                k += t->insts[q].iteration == t->insts[hot].iteration;
            char where[160];
            if (hot_live)
                snprintf(where, sizeof where, "forward instance %d of iteration %d (microbatch x "
                         "chunk) holds %s of them at %s", k, t->insts[hot].iteration,
                         GB(hot_live), t->oom ? "the OOM" : "the peak");
            else
                snprintf(where, sizeof where, "none of them is live at %s",
                         t->oom ? "the OOM" : "the peak");
            adv_finding_add(v, "X:SHAPE_OUTLIER", "microbatch", rank,
                            "%zu of the %zu recorded forward instances allocate at least 1.5x "
                            "the median %s in their layers, the largest %s (%.1fx): they "
                            "carried more tokens (longer sequences, or more tokens routed to "
                            "this rank's experts); %s. The predictions are sized for them; "
                            "capping or splitting the longest samples lowers what they add",
                            nout, n, GB(med), GB(top), (double)top / (double)(med ? med : 1),
                            where);
            adv_finding_held(v, "X:SHAPE_OUTLIER", hot_live);
            LEVER_UNKNOWN("X:SHAPE_OUTLIER", "cap or split the longest samples");
            added = 1;
        }
    }
    free(b);
    free(sorted);
    return added;
}

/* MoE routing imbalance (issue 21): the rank's MoE dispatch all-to-alls
 * (attribute/moe_dispatch.c) received up to R = received / sent >= 1.1 times
 * the tokens it sent; dropless and balanced, a rank receives what it sends.
 * The bytes: what the MoE layers' forward regions (the `.mlp` range of a MoE
 * layer) hold live at the peak (the OOM or the recorded tensor peak), of
 * which at most (1 - 1/R) is above the balanced share (the expert-side
 * tensors scale with the received tokens; the router's, the shared
 * experts' and the MoE input do not, so the share above is smaller). A
 * finding, not a primary code: the counterfactuals are made from this trace
 * and already size every recompute setting for the imbalance; recompute
 * removes expert activations between a layer's forward and its backward,
 * not the dispatch's transient buffers, and leaves the imbalance itself.
 * Returns 1 when a finding was added. */
static int
triage_moe_imbalance(const adv_trace *t, adv_verdict *v, int rank)
{
    const am_moe_dispatch *m = &t->moe;
    if (!m->n || !m->sent_at_max || m->max_recv * 10 < m->sent_at_max * 11)
        return 0;
    double R = (double)m->max_recv / (double)m->sent_at_max;
    uint32_t at = peak_pos(t);
    uint64_t live = 0;
    for (size_t l = 0; l < t->nlayers && at != ADV_NONE; l++) {
        const adv_layer *L = &t->layers[l];
        if (!L->moe || L->mlp_b == ADV_NONE || L->mlp_e == ADV_NONE)
            continue;
        for (size_t q = 0; q < t->na; q++) {
            const adv_alloc *x = &t->a[q];
            if (x->inst == L->inst && x->layer == L->layer && !x->bwd && !x->state &&
                x->a_pos >= L->mlp_b && x->a_pos < L->mlp_e && x->a_pos < at &&
                (x->f_pos == ADV_NONE || x->f_pos >= at))
                live += x->size;
        }
    }
    uint64_t above = (uint64_t)((double)live * (1.0 - 1.0 / R));
    /* what the MoE layers held at that moment, stated only as the trace shows
     * it: nothing live is no cause of that OOM/peak; past the byte limit the
     * OOM's live set was not recorded (issue 14 E) */
    int past = t->oom && t->oom_past_limit; /* peak_pos: the recorded peak */
    const char *when = t->oom && !past ? "the OOM" : past ? "the recorded peak" : "the peak";
    char held[400];
    int off = past ? snprintf(held, sizeof held, "What its MoE layers held at the OOM was not "
                              "recorded (the OOM came after the byte limit): the imbalance is "
                              "not shown to be a cause of it. ")
                   : 0;
    if (!live)
        snprintf(held + off, sizeof held - (size_t)off, "Its MoE layers hold no activations "
                 "at %s: the imbalance is not a cause of it", when);
    else
        snprintf(held + off, sizeof held - (size_t)off, "Its MoE layers hold %s at %s, at "
                 "most %s of it above the balanced share", GB(live), when, GB(above));
    adv_finding_add(v, "X:MOE_IMBALANCE", "dropless", rank,
                    "MoE routing is uneven: this rank's experts received up to %.2fx the "
                    "tokens it sent in one MoE layer's dispatch (layer %d, iteration %d; "
                    "balanced dropless routing receives what it sends). %s. Levers on the "
                    "imbalance: --moe-expert-capacity-factor 1.0 with "
                    "--moe-pad-expert-input-to-capacity caps each expert's tokens (drops the "
                    "excess), a larger --moe-aux-loss-coeff balances the router, more "
                    "expert-parallel ranks spread the hot experts; moe_act and moe recompute "
                    "remove expert activations between forward and backward (their predicted "
                    "peaks are among the candidates) but not the dispatch's buffers nor the "
                    "imbalance",
                    R, m->layer, m->iteration, held);
    /* its bytes are stated, but it is not ranked: never the primary by bytes */
    adv_finding_held(v, "X:MOE_IMBALANCE", above);
    LEVER_UNKNOWN("X:MOE_IMBALANCE", "--moe-expert-capacity-factor 1.0 "
                                     "--moe-pad-expert-input-to-capacity");
    LEVER_UNKNOWN("X:MOE_IMBALANCE", "a larger --moe-aux-loss-coeff");
    LEVER_UNKNOWN("X:MOE_IMBALANCE", "more expert-parallel ranks");
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
        /* triage diagnoses the run that happened: on the device it ran on, not
         * on a --budget for another one (adv_ran_capacity) */
        uint64_t ran = adv_ran_capacity(r);
        k.cap = ran ? ran : v->capacity[i];
        uint64_t keep = v->outside[i] + v->headroom;
        k.budget = ran ? (k.cap > keep ? k.cap - keep : 0) : v->budget[i];
        /* with expandable segments the cache needs no extra: the budget without it */
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
        /* 3b. a checkpoint save's own buffers */
        if (triage_checkpoint_save(&k, v))
            primary |= 1;
        /* 4a. the output layer's logits and the loss; a loaded state dict */
        if (triage_logits(t, &v->cfg, v, i, r->rank))
            primary |= 32;
        uint64_t loaded = 0;
        if (triage_loaded_state(t, &v->cfg, v, i, r->rank)) {
            primary |= 8;
            loaded = v->findings[v->nfindings - 1].bytes;
        }
        /* 4. optimizer / parameter state: a construction transient first (the
         * state is not live at a peak before the first step); bytes a loaded
         * checkpoint made are that finding's, not a construction transient's */
        if (!loaded && triage_init_transient(t, v, i, r->rank))
            primary |= 8;
        else if (triage_optimizer_state(&k, v, loaded) ||
                 triage_state_growth(t, &v->cfg, v, i, r->rank))
            primary |= 8;
        /* 5. retention: a trend over three or more iterations, else activation/
         * replay bytes alive into the next iteration */
        if (triage_retention_trend(t, r, &v->cfg, v, i) || triage_retention_once(&k, v))
            primary |= 16;
        /* 5b. retention until the step ends (outputs kept per microbatch) */
        if (triage_retention_step(&k, v))
            primary |= 16;
        /* 6. a microbatch far larger than the others (a finding) */
        triage_shape_outlier(t, v, r->rank);
        /* 6b. MoE routing that sends this rank more than its share (a finding) */
        triage_moe_imbalance(t, v, r->rank);
    }
    adv_findings_generic(v, 0);
    return primary;
}
