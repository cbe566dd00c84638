/* advisor_counterfactual.c: rewrite a rank's tensor-level op stream with a
 * recompute setting's real semantics and sweep it again (docs/architecture.md).
 *
 * Units. A setting becomes units, each owning allocations by identity (an
 * allocation belongs to at most one unit: full > checkpoint-style >
 * discard-style, so nested labels never add savings):
 *
 *   checkpoint-style (core_attn, mlp, moe, shared_experts, full): the region's
 *     allocations that live on into backward (freed on the backward thread at
 *     or after the region's backward starts) are internals: freed where the
 *     region's no_grad forward drops them (nograd_free: when the Python
 *     function holding them returns, from the allocations' Python stacks; the
 *     region's forward exit without stacks); at the start of the region's backward the whole
 *     region is replayed (its transients allocated and freed again, its
 *     internals allocated and kept until their original free). Allocations of
 *     the region freed by later regions' backward are its output (kept by the
 *     consumer).
 *   discard-style (layernorm, moe_act, mla_up_proj): the output is freed at
 *     the discard point (after the consumer ran) and allocated again when the
 *     hook on the hook tensor fires: the moment the backward reaches the
 *     discard point; mla_up_proj also runs its region under no_grad (its
 *     saved internals are freed at its exit and replayed).
 *
 * "The backward reaches forward position P" (R(P)): just after the last
 * backward free of the instance's allocations made after P (the autograd
 * tape runs in reverse); when nothing made after P lives into backward, the
 * start of the instance's backward job (after the main thread's last op before
 * its first backward free).
 *
 * The sweep covers the whole recorded trace (optimizer included). When the
 * trace stops early, the last complete iteration is projected onto the next
 * one with the persistent bytes it created (optimizer state) present from the
 * start; before any optimizer step the predicted optimizer state is added.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor.h"
#include "grow.h"

enum { C_T = 1, C_O, C_I, C_D };

typedef struct unit {
    uint32_t b, e;            /* region ops to replay */
    uint32_t R;               /* replay position, ADV_NONE never */
    int32_t inst;
} unit;

typedef struct ins {
    uint32_t pos;
    int kind;                 /* 0 discard, 1 replay, 2 release a kept input */
    uint32_t v;               /* alloc id or unit index */
} ins;

typedef struct cf {
    const adv_trace *t;
    uint32_t *owner;
    uint8_t *cls;
    unit *u;
    size_t nu, capu;
    ins *in;
    size_t nin, capin;
    /* survivors per instance, sorted by a_pos, with suffix max of f_pos */
    uint32_t **sv_a, **sv_f;
    size_t *nsv;
    uint32_t *bwd_start;
    uint32_t *unreached;      /* per instance, a trace cut before its backward
                               * ended: the last op position at which its forward
                               * made a tensor never freed (not forward state);
                               * ADV_NONE none */
    uint32_t *keep_to;        /* per allocation: a checkpoint's input kept to this op
                               * position (its recorded forward free skipped; freed by
                               * an insertion of kind 2 there, if its own free has
                               * passed); ADV_NONE not kept (checkpoint_inputs,
                               * mla_hold_inputs) */
} cf;

static int
push_unit(cf *c, unit u)
{
    if (am_grow((void **)&c->u, &c->capu, c->nu + 1, sizeof *c->u, 64) < 0)
        return -1;
    c->u[c->nu++] = u;
    return 0;
}

static int
push_ins(cf *c, uint32_t pos, int kind, uint32_t v)
{
    if (pos == ADV_NONE)
        return 0;
    if (am_grow((void **)&c->in, &c->capin, c->nin + 1, sizeof *c->in, 256) < 0)
        return -1;
    c->in[c->nin++] = (ins){pos, kind, v};
    return 0;
}

/* The forward instance whose backward frees allocation x, -1 none: a
 * main-thread forward allocation freed on the backward thread, made inside one
 * of the instance's layers, or after its last layer (before the next instance
 * starts) and freed inside that instance's backward job, before its layers'
 * last free (the last stage's final norm, output layer and loss: the autograd
 * tape reaches those first, so the backward reaches the instance's last layer
 * only after freeing them; the next microbatch's embedding output, made there
 * too, lives until the end of its own backward and is not the instance's).
 * "Inside the job" is from job[k] on, so a tensor made there for the next
 * instance (the interleaved schedule's p2p receive of the next model chunk's
 * input) and freed by that instance's backward is not taken for this one's:
 * with VPP that other backward can come long before this one's.
 * last_f[k]: the last backward free of instance k's layers' allocations (op
 * position); job[k]: where its backward job starts (job_start); both NULL
 * while they are being computed. */
static int32_t
survivor_inst(const adv_trace *t, const adv_alloc *x, const uint32_t *last_f,
              const uint32_t *job)
{
    if (x->bwd || !x->fbwd || x->f_pos == ADV_NONE)
        return -1;
    if (x->inst >= 0)
        return x->inst;
    if (!last_f || !job || x->phase != AM_PH_forward || !t->ninsts)
        return -1;
    size_t lo = 0, hi = t->ninsts;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->insts[mid].begin <= x->a_pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo || x->a_pos < t->insts[lo - 1].end || last_f[lo - 1] == ADV_NONE ||
        x->f_pos >= last_f[lo - 1] || job[lo - 1] == ADV_NONE || x->f_pos < job[lo - 1])
        return -1;
    return (int32_t)(lo - 1);
}

/* Where instance k's backward job starts, walking back from op position p (a
 * backward free of one of its allocations) over the backward thread's ops
 * (allocations made there, frees of tensors it frees), up to the main thread's
 * last op before it or a backward op on another instance's layer allocation
 * (the interleaved schedule runs the backward of several model chunks one
 * after another with no main-thread op between them). ADV_NONE for p ADV_NONE. */
static uint32_t
job_start(const adv_trace *t, int32_t k, uint32_t p)
{
    if (p == ADV_NONE)
        return ADV_NONE;
    while (p > 0) {
        int32_t v = t->ops[p - 1];
        const adv_alloc *x = &t->a[(v > 0 ? v : -v) - 1];
        int bwd = v > 0 ? x->bwd : x->fbwd;
        if (!bwd || (x->inst >= 0 && x->inst != k))
            break;
        p--;
    }
    return p;
}

/* Where instance k's backward job starts when nothing it made in its layers
 * lives into backward (a full-recompute group spanning all its layers: one
 * layer per model chunk under the interleaved schedule; ADV_NONE unknown):
 * at the first backward free of its input, the main thread's allocations
 * outside any instance between the later of the previous instance's end and
 * the last backward-thread op before it, and its first layer's code (pre_b:
 * the embedding output or the p2p-received hidden states the checkpoint
 * saves, the batch's tensors the loss keeps), freed on the backward thread
 * after its forward. Without this the interleaved schedule's replays were
 * taken in forward order: the first chunk's instance took the last chunk's
 * replay, which runs first (dense-vpp, full[block,1]: every undone
 * prediction on the last stage 5-7% high). */
static uint32_t
input_job(const adv_trace *t, size_t k)
{
    uint32_t b = t->insts[k].begin, lo = k ? t->insts[k - 1].end : 0;
    for (size_t i = 0; i < t->nlayers; i++)
        if (t->layers[i].inst == (int32_t)k) {
            if (t->layers[i].pre_b < b)
                b = t->layers[i].pre_b;
            break;
        }
    uint32_t p = b;
    while (p > lo) {
        int32_t v = t->ops[p - 1];
        const adv_alloc *x = &t->a[(v > 0 ? v : -v) - 1];
        if (v > 0 ? x->bwd : x->fbwd)
            break;
        p--;
    }
    uint32_t first = ADV_NONE;
    for (; p < b; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        const adv_alloc *x = &t->a[v - 1];
        if (x->inst >= 0 || x->bwd || !x->fbwd || x->f_pos == ADV_NONE ||
            x->f_pos < t->insts[k].end)
            continue;
        if (x->f_pos < first)
            first = x->f_pos;
    }
    return job_start(t, (int32_t)k, first);
}

/* c->unreached (see cf) in a truncated trace: the main thread's forward
 * allocations of an instance whose backward started, not forward state,
 * never freed. 0, -1 out of memory. */
static int
prep_unreached(cf *c)
{
    const adv_trace *t = c->t;
    if (!t->trunc)
        return 0;
    c->unreached = malloc((t->ninsts ? t->ninsts : 1) * sizeof *c->unreached);
    if (!c->unreached)
        return -1;
    for (size_t k = 0; k < t->ninsts; k++)
        c->unreached[k] = ADV_NONE;
    for (size_t i = 0; i < t->na; i++) {
        const adv_alloc *x = &t->a[i];
        if (x->inst < 0 || (size_t)x->inst >= t->ninsts || x->bwd || x->state ||
            x->f_pos != ADV_NONE || x->size == 0 || c->bwd_start[x->inst] == ADV_NONE)
            continue;
        uint32_t *u = &c->unreached[x->inst];
        if (*u == ADV_NONE || x->a_pos > *u)
            *u = x->a_pos;
    }
    return 0;
}

static int
prep(cf *c)
{
    const adv_trace *t = c->t;
    size_t ni = t->ninsts;
    c->sv_a = calloc(ni ? ni : 1, sizeof *c->sv_a);
    c->sv_f = calloc(ni ? ni : 1, sizeof *c->sv_f);
    c->nsv = calloc(ni ? ni : 1, sizeof *c->nsv);
    c->bwd_start = malloc((ni ? ni : 1) * sizeof *c->bwd_start);
    uint32_t *last_f = malloc((ni ? ni : 1) * sizeof *last_f);
    uint32_t *job = malloc((ni ? ni : 1) * sizeof *job);
    if (!c->sv_a || !c->sv_f || !c->nsv || !c->bwd_start || !last_f || !job) {
        free(last_f);
        free(job);
        return -1;
    }
    /* the layers' first (kept in job until the job start replaces it) and
     * last backward free per instance */
    for (size_t k = 0; k < ni; k++)
        last_f[k] = job[k] = ADV_NONE;
    for (size_t i = 0; i < t->na; i++) {
        int32_t k = survivor_inst(t, &t->a[i], NULL, NULL);
        if (k < 0 || (size_t)k >= ni)
            continue;
        if (last_f[k] == ADV_NONE || t->a[i].f_pos > last_f[k])
            last_f[k] = t->a[i].f_pos;
        if (job[k] == ADV_NONE || t->a[i].f_pos < job[k])
            job[k] = t->a[i].f_pos;
    }
    for (size_t k = 0; k < ni; k++)
        job[k] = job_start(t, (int32_t)k, job[k]);
    for (size_t i = 0; i < t->na; i++) {
        int32_t k = survivor_inst(t, &t->a[i], last_f, job);
        if (k >= 0 && (size_t)k < ni)
            c->nsv[k]++;
    }
    int bad = 0;
    for (size_t k = 0; k < ni; k++) {
        c->sv_a[k] = malloc((c->nsv[k] + 1) * sizeof **c->sv_a);
        c->sv_f[k] = malloc((c->nsv[k] + 1) * sizeof **c->sv_f);
        bad |= !c->sv_a[k] || !c->sv_f[k];
        c->nsv[k] = 0;
    }
    for (size_t i = 0; i < t->na && !bad; i++) {
        const adv_alloc *x = &t->a[i];
        int32_t k = survivor_inst(t, x, last_f, job);
        if (k >= 0 && (size_t)k < ni) {
            c->sv_a[k][c->nsv[k]] = x->a_pos;
            c->sv_f[k][c->nsv[k]] = x->f_pos;
            c->nsv[k]++;
        }
    }
    free(last_f);
    free(job);
    if (bad)
        return -1;
    for (size_t k = 0; k < ni; k++) {
        uint32_t mx = 0, mn = ADV_NONE;
        for (size_t j = c->nsv[k]; j-- > 0;) {
            if (c->sv_f[k][j] > mx)
                mx = c->sv_f[k][j];
            if (c->sv_f[k][j] < mn)
                mn = c->sv_f[k][j];
            c->sv_f[k][j] = mx; /* suffix max */
        }
        c->bwd_start[k] = job_start(t, (int32_t)k, mn); /* start of its backward job */
        if (c->bwd_start[k] == ADV_NONE)
            c->bwd_start[k] = input_job(t, k);
    }
    return prep_unreached(c);
}

/* R(P) for instance k: where its backward reaches op position P (after the
 * last backward free of what the instance made from P on); ADV_NONE when the
 * trace was cut before (unreached: a tensor the instance made at or after P
 * is still live, never freed, at the cut, so the backward never got there:
 * its replays never ran in the recorded window). Before this rule such
 * regions were replayed at the cut, on top of the live bytes there (bigcode
 * 1B at 8192 tokens, cut in iteration 1's backward: full[uniform,1]
 * predicted 42.79 GiB over the measured 41.73, megasim runs it at 31.61). */
static uint32_t
reach(const cf *c, int32_t k, uint32_t P)
{
    if (k < 0 || (size_t)k >= c->t->ninsts)
        return ADV_NONE;
    if (c->unreached && c->unreached[k] != ADV_NONE && c->unreached[k] >= P)
        return ADV_NONE;
    size_t n = c->nsv[k], lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->sv_a[k][mid] < P)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n)
        return c->sv_f[k][lo] + 1;
    return c->bwd_start[k];
}

/* A checkpoint-style unit over ops [b, e) of instance k; member(x) selects
 * which allocations of the region it owns. */
typedef int (*member_fn)(const adv_alloc *x, const adv_layer *L);

static int
m_all(const adv_alloc *x, const adv_layer *L)
{
    (void)x;
    (void)L;
    return 1;
}

static int
m_core(const adv_alloc *x, const adv_layer *L)
{
    (void)L;
    return (x->ctx & ADV_C_ATTN2) != 0;
}

static int
m_shared(const adv_alloc *x, const adv_layer *L)
{
    (void)L;
    return (x->ctx & ADV_C_SUBMLP) != 0;
}

/* The op after the shared experts' own forward in MoE layer L: after its last
 * allocation inside the mlp.forward.* ranges (m_shared) and the frees of the
 * shared experts' tensors right after it; their checkpoint ends there, not at
 * the MoE layer's end (the router, dispatch and experts follow). L->mlp_e when
 * there is none. */
static uint32_t
shared_end(const adv_trace *t, const adv_layer *L)
{
    if (L->mlp_b == ADV_NONE || L->mlp_e == ADV_NONE)
        return L->mlp_e;
    uint32_t last = ADV_NONE;
    for (uint32_t p = L->mlp_b; p < L->mlp_e && p < t->nops; p++) {
        int32_t v = t->ops[p];
        if (v > 0 && t->a[v - 1].inst == L->inst && !t->a[v - 1].bwd && m_shared(&t->a[v - 1], L))
            last = p;
    }
    if (last == ADV_NONE)
        return L->mlp_e;
    uint32_t e = last + 1;
    while (e < L->mlp_e && t->ops[e] < 0) {
        const adv_alloc *x = &t->a[-t->ops[e] - 1];
        if (x->a_pos < L->mlp_b || !m_shared(x, L))
            break;
        e++;
    }
    return e;
}

/* pre-region: ops [b, pre_e) are the code before the group's first Megatron
 * range (a full-recompute group starts at its first layer's pre_b); main-thread
 * forward allocations there without an instance are the group's too */
static int
own_pre(const adv_alloc *x, uint32_t p, uint32_t pre_e)
{
    return x->inst < 0 && p < pre_e && x->phase == AM_PH_forward;
}

/* The number of outermost frames Python stacks of allocations x and y share
 * (their stacks: frame ids innermost first, so the outermost frames are the
 * tails) */
static uint32_t
py_common(const adv_trace *t, const adv_alloc *x, const adv_alloc *y)
{
    const uint32_t *a = t->py + x->py + x->npy, *b = t->py + y->py + y->npy;
    uint32_t n = x->npy < y->npy ? x->npy : y->npy, k = 0;
    while (k < n && a[-1 - (int32_t)k] == b[-1 - (int32_t)k])
        k++;
    return k;
}

/* 1 when allocation y was made inside the call of frame depth h (0 the
 * outermost) that made x: their stacks share frames 0..h */
static int
py_inside(const adv_trace *t, const adv_alloc *x, const adv_alloc *y, uint32_t h)
{
    if (y->npy <= h || !y->npy)
        return 0;
    const uint32_t *a = t->py + x->py + x->npy - 1 - h, *b = t->py + y->py + y->npy - 1 - h;
    return memcmp(a, b, (h + 1) * sizeof *a) == 0;
}

static int same_block(uint64_t a, uint64_t b);

/* Where a checkpointed region's forward, run under no_grad, frees internal
 * allocation id (a tensor the recorded run saved for backward): the op
 * position before which its last Python reference is gone, e the region's
 * exit when that is not known (docs/advisor.md "The allocator model").
 *
 * Under no_grad nothing saves a tensor, so it lives as long as Python holds
 * it: as a local of the function that received it, until that function
 * returns. From the Python stacks of the region's allocations (main thread,
 * forward; frame ids per function): the next allocation y whose stack
 * differs from x's shows x's call finished (allocations with x's very stack
 * are the same call of one function -- frame ids are functions, not lines --
 * and share its fate, e.g. a tuple, unless one is x's size: then x was an
 * elementwise op's operand, the call's temporary, freed when it returns,
 * docs/advisor.md "The redo's free times"); they first
 * differ at depth k, so the function at depth h = min(k, len(x)) - 1 called
 * on after x was made: x is held there, and freed when that function returns
 * -- before the first later allocation that is not inside its call. When the
 * holder is the region's own function (no such allocation before e), or x
 * or y has no stack, x lives to the region's exit, as a function's result
 * would. Never earlier than the next allocation after x, so a consumer that
 * is the next statement still sees it. */
static uint32_t
nograd_free(const adv_trace *t, uint32_t id, uint32_t e)
{
    const adv_alloc *x = &t->a[id];
    if (!x->npy)
        return e;
    uint32_t q = x->a_pos + 1, h = ADV_NONE;
    for (; q < e && q < t->nops; q++) {
        int32_t v = t->ops[q];
        if (v <= 0 || t->a[v - 1].bwd)
            continue;
        const adv_alloc *y = &t->a[v - 1];
        if (!y->npy)
            return e;
        if (y->py == x->py && y->npy == x->npy) {
            /* the same stack: the same call of x's function (or a tuple of
             * one statement, e.g. a norm's output and statistics). A result
             * of x's very size made after it (its block: same_block, the
             * recorded sizes are blocks) is an elementwise op's on x
             * (the GLU's linear half, then its product with the activation):
             * the call went on with that, x was its temporary, gone when the
             * call returns; otherwise x shares the call's fate */
            if (same_block(y->size, x->size)) {
                h = x->npy - 1;
                break;
            }
            continue;
        }
        uint32_t k = py_common(t, x, y);
        if (k == 0)
            return e;
        h = (k < x->npy ? k : x->npy) - 1;
        break;
    }
    if (h == ADV_NONE)
        return e;
    for (q++; q < e && q < t->nops; q++) {
        int32_t v = t->ops[q];
        if (v <= 0 || t->a[v - 1].bwd)
            continue;
        if (!py_inside(t, x, &t->a[v - 1], h))
            return q;
    }
    return e;
}

/* 1 when a same-size allocation of the same instance, made on the main thread
 * after allocation id and before op b, is freed on the backward thread (saved
 * for backward): id was the input of a shape-preserving transform (RoPE, a
 * norm) whose output the code goes on with (checkpoint_inputs). */
static int
superseded(const adv_trace *t, uint32_t id, uint32_t b)
{
    const adv_alloc *x = &t->a[id];
    for (uint32_t p = x->a_pos + 1; p < b && p < t->nops; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        const adv_alloc *y = &t->a[v - 1];
        if (y->size == x->size && !y->bwd && y->fbwd && y->inst == x->inst)
            return 1;
    }
    return 0;
}

/* The inputs a checkpoint keeps: Megatron-Core's CheckpointFunction
 * (tensor_parallel/random.py) saves its arguments with save_for_backward until
 * its backward (the replay and the replayed region's backward) is done, and a
 * view among them pins its whole base (the selective core_attn checkpoint's
 * value, a view of the fused QKV output). The run without recompute frees
 * what its region did not save when the caller lets go (attention.py: the key
 * after RoPE and the fused QKV buffer at the attention's return).
 *
 * From the trace: allocations of instance k made on the main thread by the
 * caller's own code before the region, ops [in_b, b), that are alive at the
 * region's exit e and freed later in the forward (the region's backward did
 * not need them) are what the caller holds when it calls the checkpoint; each
 * is kept to where the backward has passed the region's start (R(b)), unless
 * the recorded free comes later anyway. Not one that a same-size tensor made
 * after it, before the region, and saved for backward superseded (superseded:
 * a shape-preserving transform's input, the checkpoint gets its output:
 * Megatron-Core's pre-RoPE query copy, which its qkv_output tuple holds to the
 * attention's return, while the roped query goes in). Otherwise an upper
 * bound: a tensor the caller holds without passing it is kept too
 * (docs/advisor.md "Checkpoint inputs"). The
 * checkpoints of mlp, moe, shared experts and full recompute take their input
 * from an op that saves it anyway (a norm or a linear): in_b == b, none. */
static int
checkpoint_inputs(cf *c, int32_t k, uint32_t in_b, uint32_t b, uint32_t e)
{
    const adv_trace *t = c->t;
    if (in_b == ADV_NONE || in_b >= b)
        return 0;
    uint32_t Rb = reach(c, k, b);
    for (uint32_t p = in_b; p < b && p < t->nops; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        const adv_alloc *x = &t->a[id];
        if (x->inst != k || x->bwd || x->fbwd || x->state || x->phase != AM_PH_forward ||
            x->f_pos == ADV_NONE || x->f_pos < e || c->owner[id] != ADV_NONE)
            continue;
        if ((Rb != ADV_NONE && Rb <= x->f_pos) || superseded(t, id, b))
            continue;
        /* never reached (a trace cut before): kept to the end */
        c->keep_to[id] = Rb != ADV_NONE ? Rb : (uint32_t)t->nops + 1;
        if (push_ins(c, Rb, 2, id) < 0)
            return -1;
    }
    return 0;
}

/* A full-recompute group's output: the largest tensor its last layer's
 * mlp_bda step (ops [out_b, e)) made that the unit (ui) classed as an
 * internal, the latest among equals (the bda output; with hidden dropout its
 * mask is smaller, bool against the activation dtype). It is the next group's
 * checkpoint input (the post-process's input after the last group):
 * CheckpointFunction saves it until that consumer's backward is done, so the
 * no_grad forward does not free it; the consumer lets it go where the
 * backward reaches this group (R), before its replay makes its own copy.
 * Classed by when the recorded run freed it, it was an internal whenever
 * that free came after R: the next layer's norm backward frees its saved
 * input after the last free of what that layer made (bigcode 1B at 8192
 * tokens, hidden dropout: every full setting 2.4% low, one hidden state per
 * group). -1 out of memory. */
static int
group_output(cf *c, uint32_t ui, uint32_t out_b, uint32_t e, uint32_t R)
{
    const adv_trace *t = c->t;
    uint32_t out = ADV_NONE;
    for (uint32_t p = out_b; out_b != ADV_NONE && p < e && p < t->nops; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        if (c->owner[id] == ui && c->cls[id] == C_I && (t->a[id].ctx & ADV_C_BDA) &&
            (out == ADV_NONE || t->a[id].size >= t->a[out].size))
            out = id;
    }
    if (out == ADV_NONE)
        return 0;
    c->cls[out] = C_O;
    const adv_alloc *x = &t->a[out];
    if (R != ADV_NONE && (x->f_pos == ADV_NONE || x->f_pos > R))
        return push_ins(c, R, 0, out); /* freed before the replay's own copy */
    return 0;
}

static int
checkpoint_unit(cf *c, int32_t k, uint32_t b, uint32_t e, uint32_t pre_e, uint32_t in_b,
                const adv_layer *L, member_fn mf, int unfused_core, uint32_t out_b)
{
    const adv_trace *t = c->t;
    if (b == ADV_NONE || e == ADV_NONE || e <= b)
        return 0;
    uint32_t R = reach(c, k, e);
    uint32_t ui = (uint32_t)c->nu;
    int any = 0;
    uint32_t last_surv = ADV_NONE;
    for (uint32_t p = b; p < e; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        const adv_alloc *x = &t->a[id];
        if ((x->inst != k && !own_pre(x, p, pre_e)) || x->bwd || x->state ||
            c->owner[id] != ADV_NONE || !mf(x, L))
            continue;
        c->owner[id] = ui;
        any = 1;
        if (x->f_pos != ADV_NONE && x->f_pos < e) {
            c->cls[id] = C_T;
        } else if (x->f_pos != ADV_NONE && R != ADV_NONE && x->f_pos <= R) {
            c->cls[id] = C_O;
        } else if (x->f_pos == ADV_NONE || x->fbwd) {
            c->cls[id] = C_I;
            last_surv = id;
        } else {
            c->cls[id] = C_O;
        }
    }
    if (unfused_core && last_surv != ADV_NONE)
        c->cls[last_surv] = C_O; /* the attention output stays with linear_proj */
    if (!any)
        return 0;
    if (group_output(c, ui, out_b, e, R) < 0)
        return -1;
    for (uint32_t p = b; p < e; p++) {
        int32_t v = t->ops[p];
        if (v > 0 && c->owner[v - 1] == ui && c->cls[v - 1] == C_I)
            if (push_ins(c, nograd_free(t, (uint32_t)v - 1, e), 0, (uint32_t)v - 1) < 0)
                return -1;
    }
    if (push_unit(c, (unit){b, e, R, k}) < 0 || checkpoint_inputs(c, k, in_b, b, e) < 0)
        return -1;
    return push_ins(c, R, 1, ui);
}

/* discard-style: output `id` freed at `disc`, allocated again at R(disc) */
static int
discard_unit(cf *c, uint32_t id, uint32_t disc)
{
    const adv_trace *t = c->t;
    if (id == ADV_NONE || disc == ADV_NONE || c->owner[id] != ADV_NONE)
        return 0;
    const adv_alloc *x = &t->a[id];
    if (x->state || (x->f_pos != ADV_NONE && x->f_pos <= disc))
        return 0;
    uint32_t R = reach(c, x->inst, disc);
    if (x->f_pos != ADV_NONE && R != ADV_NONE && x->f_pos < R)
        return 0; /* freed before the hook fires anyway */
    uint32_t ui = (uint32_t)c->nu;
    c->owner[id] = ui;
    c->cls[id] = C_D;
    if (push_unit(c, (unit){x->a_pos, x->a_pos + 1, R, x->inst}) < 0)
        return -1;
    if (push_ins(c, disc, 0, id) < 0)
        return -1;
    return push_ins(c, R, 1, ui);
}

/* moe_act (TEGroupedMLP's activation under CheckpointWithoutOutput): the
 * region [a_pos(moe_act), moe_act_e) runs under no_grad. Of its allocations
 * that the recorded run kept into backward, the last is the activation's
 * output (saved by fc2): freed at the discard point, after fc2; the others
 * (the unfused GLU's silu output, its linear half plus the offset and their
 * product, which autograd saved) are internals, freed where the no_grad
 * forward drops them (nograd_free). Transients stay transients. At R(discard)
 * the region is replayed: internals and output kept until their recorded
 * free. So the saving follows from the trace: the fused weighted SwiGLU
 * saves one tensor, the unfused GLU four (megatron-core 0.19.2
 * moe/experts.py bias_act_func; docs/validation/megatron-core.md). */
static int
moe_act_unit(cf *c, const adv_layer *L)
{
    const adv_trace *t = c->t;
    if (L->moe_act == ADV_NONE || L->moe_act_e == ADV_NONE || L->moe_act_discard == ADV_NONE)
        return 0;
    uint32_t b = t->a[L->moe_act].a_pos, e = L->moe_act_e, disc = L->moe_act_discard;
    uint32_t R = reach(c, L->inst, disc), out = ADV_NONE;
    uint32_t ui = (uint32_t)c->nu;
    for (uint32_t p = b; p < e && p < t->nops; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        const adv_alloc *x = &t->a[v - 1];
        if (x->inst == L->inst && !x->bwd && !x->state && c->owner[v - 1] == ADV_NONE &&
            (x->f_pos == ADV_NONE || x->f_pos > disc))
            out = (uint32_t)v - 1;
    }
    if (out == ADV_NONE || (t->a[out].f_pos != ADV_NONE && R != ADV_NONE && t->a[out].f_pos < R))
        return 0; /* nothing kept past the discard, or freed before the hook fires */
    for (uint32_t p = b; p < e && p < t->nops; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        const adv_alloc *x = &t->a[id];
        if (x->inst != L->inst || x->bwd || x->state || c->owner[id] != ADV_NONE)
            continue;
        c->owner[id] = ui;
        if (id == out) {
            c->cls[id] = C_D;
            if (push_ins(c, disc, 0, id) < 0)
                return -1;
        } else if (x->f_pos != ADV_NONE && x->f_pos < e) {
            c->cls[id] = C_T;
        } else if (x->f_pos != ADV_NONE && x->f_pos <= disc) {
            c->cls[id] = C_T; /* dropped by fc2 in forward: not kept either way */
        } else if (x->f_pos != ADV_NONE && R != ADV_NONE && x->f_pos < R) {
            c->cls[id] = C_O;
        } else {
            c->cls[id] = C_I;
            if (push_ins(c, nograd_free(t, id, e), 0, id) < 0)
                return -1;
        }
    }
    if (push_unit(c, (unit){b, e, R, L->inst}) < 0)
        return -1;
    return push_ins(c, R, 1, ui);
}

/* mla_up_proj's saved inputs: CheckpointWithoutOutput saves the function's
 * arguments (megatron-core 0.19.2 tensor_parallel/random.py,
 * ctx.save_for_backward(*args)) until its backward, after the recomputed
 * region's: the layer's attention tensors made before the region [b, ...),
 * live at b and freed before the backward reaches the discard point (R: the
 * down-projection's output, of which kv_compressed and k_pos_emb are slices:
 * freed when the attention returns without the checkpoint) are held to `rel`,
 * the last original free of the region's saved internals (R if none). */
static int
mla_hold_inputs(cf *c, const adv_layer *L, uint32_t b, uint32_t R, uint32_t rel)
{
    const adv_trace *t = c->t;
    if (R == ADV_NONE || L->attn_b == ADV_NONE)
        return 0;
    for (uint32_t p = L->attn_b; p < b; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        const adv_alloc *x = &t->a[id];
        if (x->inst != L->inst || x->bwd || x->state || c->owner[id] != ADV_NONE ||
            x->f_pos == ADV_NONE || x->f_pos < b || x->f_pos >= R)
            continue;
        c->keep_to[id] = rel;
        if (push_ins(c, rel, 2, id) < 0)
            return -1;
    }
    return 0;
}

/* mla_up_proj: region [b, V] under no_grad, Q/K/V discarded after attention */
static int
mla_unit(cf *c, const adv_layer *L)
{
    const adv_trace *t = c->t;
    if (L->mla_q == ADV_NONE || L->mla_v == ADV_NONE || L->mla_up_b == ADV_NONE ||
        L->core_e == ADV_NONE)
        return 0;
    uint32_t b = L->mla_up_b, qpos = t->a[L->mla_q].a_pos, e = t->a[L->mla_v].a_pos + 1;
    uint32_t disc = L->core_e;
    uint32_t R = reach(c, L->inst, disc), rel = ADV_NONE;
    uint32_t ui = (uint32_t)c->nu;
    for (uint32_t p = b; p < e; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        uint32_t id = (uint32_t)v - 1;
        const adv_alloc *x = &t->a[id];
        if (x->inst != L->inst || x->bwd || x->state || c->owner[id] != ADV_NONE)
            continue;
        c->owner[id] = ui;
        if (id == L->mla_q || id == L->mla_k || id == L->mla_v) {
            c->cls[id] = C_D;
            if (push_ins(c, disc, 0, id) < 0)
                return -1;
        } else if (x->f_pos != ADV_NONE && x->f_pos < e) {
            c->cls[id] = C_T;
        } else if (x->f_pos != ADV_NONE && R != ADV_NONE && x->f_pos < R) {
            c->cls[id] = C_O;
        } else {
            c->cls[id] = C_I;
            if (x->f_pos != ADV_NONE && (rel == ADV_NONE || x->f_pos > rel))
                rel = x->f_pos;
            if (push_ins(c, qpos, 0, id) < 0)
                return -1;
        }
    }
    if (mla_hold_inputs(c, L, b, R, rel != ADV_NONE && R != ADV_NONE && rel > R ? rel : R) < 0)
        return -1;
    if (push_unit(c, (unit){b, e, R, L->inst}) < 0)
        return -1;
    return push_ins(c, R, 1, ui);
}

/* an extra's alloc or free event inside one simulated replay */
typedef struct xev {
    uint32_t anchor, seq, id;
    uint8_t alloc, keep;
} xev;

static int
xev_cmp(const void *a, const void *b)
{
    const xev *x = a, *y = b;
    if (x->anchor != y->anchor)
        return x->anchor < y->anchor ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int
ins_cmp(const void *a, const void *b)
{
    const ins *x = a, *y = b;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind - y->kind; /* discards first */
    return x->v < y->v ? -1 : x->v > y->v;
}

static void
cf_free(cf *c)
{
    if (c->sv_a)
        for (size_t k = 0; k < c->t->ninsts; k++) {
            free(c->sv_a[k]);
            free(c->sv_f[k]);
        }
    free(c->sv_a);
    free(c->sv_f);
    free(c->nsv);
    free(c->bwd_start);
    free(c->unreached);
    free(c->keep_to);
    free(c->owner);
    free(c->cls);
    free(c->u);
    free(c->in);
}

static int
build_units(cf *c, const adv_cfg *cfg, const adv_setting *s)
{
    const adv_trace *t = c->t;
    if (s->full_method) {
        /* per instance: groups of n layers (uniform) or the first n (block) */
        size_t i = 0;
        while (i < t->nlayers) {
            const adv_layer *L = &t->layers[i];
            size_t j = i;
            while (j < t->nlayers && t->layers[j].inst == L->inst)
                j++;
            size_t nl = j - i, n = (size_t)s->full_n;
            if (s->full_method == 1) {
                for (size_t g = 0; g < nl; g += n) {
                    size_t last = g + n < nl ? g + n : nl;
                    const adv_layer *F = &t->layers[i + g];
                    if (checkpoint_unit(c, L->inst, F->pre_b, t->layers[i + last - 1].end,
                                        F->begin, ADV_NONE, F, m_all, 0,
                                        t->layers[i + last - 1].mlp_e) < 0)
                        return -1;
                }
            } else {
                for (size_t g = 0; g < n && g < nl; g++) {
                    const adv_layer *F = &t->layers[i + g];
                    if (checkpoint_unit(c, L->inst, F->pre_b, F->end, F->begin, ADV_NONE, F,
                                        m_all, 0, F->mlp_e) < 0)
                        return -1;
                }
            }
            i = j;
        }
        return 0;
    }
    unsigned m = s->labels;
    for (size_t i = 0; i < t->nlayers; i++) {
        const adv_layer *L = &t->layers[i];
        if ((m & (1u << ADV_L_moe)) && L->moe)
            if (checkpoint_unit(c, L->inst, L->mlp_b, L->mlp_e, L->mlp_b, ADV_NONE, L, m_all,
                                0, ADV_NONE) < 0)
                return -1;
        if ((m & (1u << ADV_L_mlp)) && !L->moe)
            if (checkpoint_unit(c, L->inst, L->mlp_b, L->mlp_e, L->mlp_b, ADV_NONE, L, m_all,
                                0, ADV_NONE) < 0)
                return -1;
        if ((m & (1u << ADV_L_shared_experts)) && L->moe && !cfg->shared_overlap)
            if (checkpoint_unit(c, L->inst, L->mlp_b, shared_end(t, L), L->mlp_b, ADV_NONE, L,
                                m_shared, 0, ADV_NONE) < 0)
                return -1;
        if (m & (1u << ADV_L_core_attn)) {
            /* fused attention owns its second call's tensors; under context
             * parallelism TE's CP attention (Python autograd functions) saves
             * copies of its own, all of which the checkpoint drops, as the
             * unfused attention's: all the region's tensors but the output.
             * Its inputs: what the attention's code made before it (qkv, RoPE);
             * none kept on an MLA layer, whose up-projection's Q, K and V the
             * run without the checkpoint holds as long (the real library's
             * `mla` row: core_attn saves exactly the probabilities; the
             * undo's early frees skip MLA layers alike) */
            int own = cfg->fused_attn && cfg->cp <= 1;
            if (checkpoint_unit(c, L->inst, L->core_b, L->core_e, L->core_b,
                                L->mla ? ADV_NONE : L->attn_b, L, own ? m_core : m_all, !own,
                                ADV_NONE) < 0)
                return -1;
        }
    }
    for (size_t i = 0; i < t->nlayers; i++) {
        const adv_layer *L = &t->layers[i];
        if ((m & (1u << ADV_L_mla_up_proj)) && L->mla)
            if (mla_unit(c, L) < 0)
                return -1;
        if ((m & (1u << ADV_L_moe_act)) && L->moe && L->moe_act != ADV_NONE)
            if (moe_act_unit(c, L) < 0)
                return -1;
        if (m & (1u << ADV_L_layernorm)) {
            if (discard_unit(c, L->in_ln, L->attn_e) < 0)
                return -1;
            if (discard_unit(c, L->pre_ln, L->mlp_e) < 0)
                return -1;
        }
    }
    return 0;
}

uint64_t
adv_foreign_bytes(const adv_trace *t, const adv_setting *s)
{
    if (!s->full_method || s->full_n < 1)
        return 0;
    uint64_t most = 0;
    size_t i = 0;
    while (i < t->nlayers) {
        size_t j = i;
        while (j < t->nlayers && t->layers[j].inst == t->layers[i].inst)
            j++;
        size_t nl = j - i, n = (size_t)s->full_n;
        for (size_t g = 0; g < nl && (s->full_method == 1 || g < n);
             g += s->full_method == 1 ? n : 1) {
            size_t last = s->full_method == 1 ? (g + n < nl ? g + n : nl) : g + 1;
            uint32_t b = t->layers[i + g].pre_b, e = t->layers[i + last - 1].end;
            uint64_t sum = 0;
            for (uint32_t p = b; b != ADV_NONE && e != ADV_NONE && p < e && p < t->nops; p++) {
                int32_t v = t->ops[p];
                const adv_alloc *x = v > 0 ? &t->a[v - 1] : NULL;
                /* a Transformer Engine call's allocation (a layer's standalone
                 * norm between its ranges) is Megatron's own code */
                if (x && x->inst < 0 && !x->bwd && x->phase == AM_PH_forward &&
                    x->te == ADV_T_NONE)
                    sum += x->size;
            }
            if (sum > most)
                most = sum;
        }
        i = j;
    }
    return most;
}

/* the caching allocator model along the sweep (advisor_cache.c): reserved
 * bytes plus the projection's offset, their max in best_res */

uint64_t
adv_counterfactual(const adv_trace *t, const adv_cfg *cfg, const adv_setting *s,
                   uint64_t extra_state, uint8_t *phase_out)
{
    return adv_counterfactual_reserved(t, cfg, s, extra_state, phase_out, 0, NULL);
}

/* one counterfactual sweep's state: the rewritten op stream's live bytes, the
 * projection window and the peaks found so far (all sizes in bytes) */
typedef struct sweep {
    const adv_trace *t;
    const cf *c;
    adv_cache_sim *sim;       /* caching allocator model, NULL when not asked for */
    uint8_t *alive;           /* per allocation: 1 live, 2 discarded, 3 allocated at the
                               * projected window's start (sweep_preallocate) */
    uint64_t live;            /* tensor bytes live now */
    uint64_t best;            /* peak of live plus the projection's bytes */
    uint64_t best_res;        /* peak of reserved plus the projection's bytes */
    uint8_t best_phase;       /* phase of the op that made best */
    /* projection window [wb, we): D bytes present from its start, dalloc of
     * them allocated inside it so far */
    uint32_t wb, we;
    uint64_t D, dalloc;
    int proj_persist;         /* D holds the window's persistent bytes */
    uint32_t *outs;           /* one replay's outputs, freed at its end */
    size_t nouts, capouts;
    xev *xe;                  /* one replay's recorded extras, in replay order */
    size_t nxe, capxe;
    int replayed;             /* a replay ran (replay_thread_buffers) */
    uint64_t step;            /* the largest adv_cache_step of a replayed block */
    FILE *dump;               /* RECOMP_ADVISOR_DUMP_STREAM: the rewritten stream, or NULL */
    uint32_t pos;             /* the op position being swept (for the dump) */
} sweep;

static void sweep_alloc(sweep *w, uint32_t id, uint64_t size);

/* RECOMP_ADVISOR_DUMP_STREAM=DIR (a debugging aid, docs/advisor.md): each
 * candidate's rewritten stream as it reaches the allocator model, one line per
 * event ("+"/"-", allocation id, bytes, op position, the allocation's phase,
 * iteration and thread, the model's reserved and live bytes after it; for an
 * allocation where the model placed it: segment start, segment size, offset,
 * adv_cache_where) in
 * DIR/<setting>.<n>.txt, n counting the sweeps of this process. NULL when the
 * variable is unset or the file cannot be made (the sweep goes on). */
static FILE *
dump_open(const adv_setting *s)
{
    static unsigned seq;
    const char *dir = getenv("RECOMP_ADVISOR_DUMP_STREAM");
    if (!dir || !*dir)
        return NULL;
    static const char *const meth[] = {"", "uniform", "block"};
    char path[4096];
    unsigned n = __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED);
    if (s->full_method)
        snprintf(path, sizeof path, "%s/full-%s-%d.%u.txt", dir,
                 meth[s->full_method < 3 ? s->full_method : 0], s->full_n, n);
    else
        snprintf(path, sizeof path, "%s/labels-%x.%u.txt", dir, s->labels, n);
    return fopen(path, "w");
}

/* one dump line (dump_open) for an event of the rewritten stream */
static void
dump_event(const sweep *w, char kind, uint32_t id, uint64_t size)
{
    if (!w->dump)
        return;
    const adv_alloc *x = id < w->t->na ? &w->t->a[id] : NULL;
    fprintf(w->dump, "%c %u %llu p=%u ph=%s it=%d bwd=%d res=%llu live=%llu", kind, id,
            (unsigned long long)size, w->pos, x ? am_phase_name(x->phase) : "oom",
            x ? x->iteration : -1, x ? x->bwd : 0,
            (unsigned long long)adv_cache_reserved(w->sim), (unsigned long long)w->live);
    uint64_t seg, seg_size, off;
    if (kind == '+' && adv_cache_where(w->sim, id, &seg, &seg_size, &off) == 0)
        fprintf(w->dump, " seg=%llu segsize=%llu off=%llu", (unsigned long long)seg,
                (unsigned long long)seg_size, (unsigned long long)off);
    fputc('\n', w->dump);
}

/* x was made in the projected window of a truncated trace and outlives it
 * (the persistent bytes the window's step created) */
static int
persistent_in_window(const sweep *w, const adv_alloc *x)
{
    return w->proj_persist && w->wb != ADV_NONE && x->a_pos >= w->wb && x->a_pos < w->we &&
           (x->f_pos == ADV_NONE || x->f_pos >= w->we);
}

/* the projection window: the last complete iteration, or the last iteration
 * when no optimizer step happened; D: the persistent bytes it created that a
 * unit owns (a truncated trace; the others are allocated at its start) plus
 * extra_state */
static void
sweep_window(sweep *w, uint64_t extra_state)
{
    const adv_trace *t = w->t;
    int proj_it = -2;
    w->wb = w->we = ADV_NONE;
    if (t->trunc && t->last_complete_iter >= 0)
        proj_it = t->last_complete_iter;
    else if (extra_state) {
        int mx = -1;
        for (size_t i = 0; i < t->na; i++)
            if (t->a[i].iteration > mx)
                mx = t->a[i].iteration;
        proj_it = mx;
    }
    w->proj_persist = t->trunc && t->last_complete_iter >= 0;
    if (proj_it < -1)
        return;
    const cf *c = w->c;
    for (size_t i = 0; i < t->na; i++) {
        const adv_alloc *x = &t->a[i];
        if (x->iteration == proj_it && w->wb == ADV_NONE)
            w->wb = x->a_pos;
        if (x->iteration > proj_it && w->we == ADV_NONE && w->wb != ADV_NONE)
            w->we = x->a_pos;
    }
    if (w->we == ADV_NONE)
        w->we = (uint32_t)t->nops;
    /* the window's persistent bytes that no unit owns (the optimizer state
     * its step created) are allocated at its start (sweep_preallocate), in the
     * allocator model too: the state takes the room the cache holds then, as
     * it did when the step made it, instead of being added on top of the
     * reserved bytes (a construction transient's cached segments host it) */
    if (w->proj_persist)
        for (size_t i = 0; i < t->na; i++) {
            const adv_alloc *x = &t->a[i];
            if (persistent_in_window(w, x) && c->owner[i] != ADV_NONE)
                w->D += x->size;
        }
    w->D += extra_state;
}

/* the projected window's persistent bytes that no unit owns, allocated when
 * the sweep reaches the window's start (marked 3: their own allocation op
 * then only notes the peak) */
static void
sweep_preallocate(sweep *w)
{
    const adv_trace *t = w->t;
    for (size_t i = 0; i < t->na; i++) {
        const adv_alloc *x = &t->a[i];
        if (persistent_in_window(w, x) && w->c->owner[i] == ADV_NONE && x->size) {
            sweep_alloc(w, (uint32_t)i, x->size);
            w->alive[i] = 3;
        }
    }
}

/* bytes the projection adds at op position p: the window's D less the part
 * of it already allocated, 0 outside the window */
static uint64_t
window_bytes(const sweep *w, uint32_t p)
{
    return p >= w->wb && p < w->we ? w->D - w->dalloc : 0;
}

/* a candidate peak at op position p: live bytes plus the window's (best,
 * with the phase), reserved bytes plus the window's (best_res) */
static void
note_peak(sweep *w, uint32_t p, uint8_t phase)
{
    uint64_t off = window_bytes(w, p);
    uint64_t proj = w->live + off;
    if (w->sim && adv_cache_reserved(w->sim) + off > w->best_res)
        w->best_res = adv_cache_reserved(w->sim) + off;
    if (proj > w->best) {
        w->best = proj;
        w->best_phase = phase;
    }
}

/* allocation id's size bytes become live (and reach the allocator model) */
static void
sweep_alloc(sweep *w, uint32_t id, uint64_t size)
{
    w->live += size;
    if (w->sim)
        adv_cache_alloc(w->sim, id, size);
    dump_event(w, '+', id, size);
}

/* allocation id's size bytes are freed (also in the allocator model) */
static void
sweep_free(sweep *w, uint32_t id, uint64_t size)
{
    w->live -= size;
    if (w->sim)
        adv_cache_free(w->sim, id);
    dump_event(w, '-', id, size);
}

/* a block of size bytes allocated by a replay: the reserved peak's
 * uncertainty is at least the segment it would open (adv_counterfactual_model) */
static void
note_step(sweep *w, uint64_t size)
{
    uint64_t b = adv_cache_step(w->sim, size);
    if (b > w->step)
        w->step = b;
}

/* a discard point: a live allocation's bytes are freed until its replay */
static void
sweep_discard(sweep *w, uint32_t id)
{
    if (w->alive[id] == 1) {
        sweep_free(w, id, w->t->a[id].size);
        w->alive[id] = 2;
    }
}

/* a checkpoint's kept input (checkpoint_inputs, mla_hold_inputs) is freed
 * where its checkpoint's backward is done, if its own free has passed */
static void
sweep_release(sweep *w, uint32_t id)
{
    if (w->alive[id] == 4) {
        sweep_free(w, id, w->t->a[id].size);
        w->alive[id] = 0;
    }
}

/* keep allocation id as an output of the running replay: its bytes are freed
 * when the replay ends; -1 out of memory */
static int
push_out(sweep *w, uint32_t id)
{
    if (am_grow((void **)&w->outs, &w->capouts, w->nouts + 1, sizeof *w->outs, 64) < 0)
        return -1;
    w->outs[w->nouts++] = id;
    return 0;
}

/* the recorded replay's own extras whose anchors unit u's region holds
 * (adv_extra), their alloc and free events sorted by anchor: same sizes, same
 * place among the replayed ops; -1 out of memory */
static int
collect_extras(sweep *w, const unit *u)
{
    const adv_trace *t = w->t;
    w->nxe = 0;
    if (!t->nxr)
        return 0;
    size_t lo = 0, hi = t->nxr;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->xr[mid].a_anchor < u->b)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t r = lo; r < t->nxr && t->xr[r].a_anchor < u->e; r++) {
        const adv_extra *xr = &t->xr[r];
        if (xr->f_anchor != ADV_NONE && (xr->f_anchor < u->b || xr->f_anchor >= u->e))
            continue;
        if (am_grow((void **)&w->xe, &w->capxe, w->nxe + 2, sizeof *w->xe, 64) < 0)
            return -1;
        w->xe[w->nxe++] = (xev){xr->a_anchor, xr->a_seq, xr->id, 1, xr->f_anchor == ADV_NONE};
        if (xr->f_anchor != ADV_NONE)
            w->xe[w->nxe++] = (xev){xr->f_anchor, xr->f_seq, xr->id, 0, 0};
    }
    if (w->nxe > 1)
        am_sort(w->xe, w->nxe, sizeof *w->xe, xev_cmp);
    return 0;
}

/* the extras' events anchored at region op q of a replay at position p
 * (*ei: the next event); a kept extra whose own free already passed is an
 * output, otherwise it stays live until its own free; -1 out of memory */
static int
replay_extras_at(sweep *w, uint32_t q, uint32_t p, size_t *ei)
{
    for (; *ei < w->nxe && w->xe[*ei].anchor == q; (*ei)++) {
        const xev *e = &w->xe[*ei];
        const adv_alloc *x = &w->t->a[e->id];
        if (!e->alloc) {
            sweep_free(w, e->id, x->size);
            continue;
        }
        sweep_alloc(w, e->id, x->size);
        note_step(w, x->size);
        if (e->keep && x->f_pos != ADV_NONE && x->f_pos < p) {
            /* its own free already passed: gone with the replay */
            if (push_out(w, e->id) < 0)
                return -1;
        } else if (e->keep) {
            w->alive[e->id] = 1; /* freed later by its own free op */
        }
        note_peak(w, p, AM_PH_backward_replay);
    }
    return 0;
}

/* region op q of unit ui's replay at position p, when the unit owns its
 * allocation: internals and discarded outputs stay live, outputs until the
 * replay ends, transients are freed again; -1 out of memory */
static int
replay_op(sweep *w, uint32_t ui, uint32_t q, uint32_t p)
{
    const adv_trace *t = w->t;
    const cf *c = w->c;
    int32_t v = t->ops[q];
    uint32_t id = (uint32_t)(v > 0 ? v : -v) - 1;
    if (c->owner[id] != ui)
        return 0;
    const adv_alloc *x = &t->a[id];
    if (v > 0) {
        sweep_alloc(w, id, x->size);
        note_step(w, x->size);
        note_peak(w, p, AM_PH_backward_replay);
        if (c->cls[id] == C_I || c->cls[id] == C_D)
            w->alive[id] = 1;
        else if (c->cls[id] == C_O || (c->cls[id] == C_T && x->f_pos >= c->u[ui].e))
            return push_out(w, id);
    } else if (c->cls[id] == C_T) {
        sweep_free(w, id, x->size);
    }
    return 0;
}

/* The first replay of the sweep, at op position p, makes the backward
 * thread's own persistent buffers of that iteration: allocations the backward
 * thread made later in it and never freed (PyTorch's cuBLAS workspace, one per
 * thread's handle and stream, 32 MiB in the real Megatron-Core job here:
 * made by that thread's first GEMM, CUDABlas.cpp getCUDABlasLtWorkspace). A
 * replay is forward code run on the backward thread, so its first GEMM comes
 * before the first one of the backward the trace recorded; kept at its
 * recorded place the buffer is made after the replay's tensors instead of
 * before, and the allocator lays the segments out differently (the real
 * Megatron-Core job, full[uniform,1]: the replay's 128 MiB score tensor fit
 * the cache in the model but opened a new segment in the run). Marked 3: their
 * own op only notes the peak. A replay without a GEMM (a norm's) makes it
 * early in the model, a conservative error of one buffer. */
static void
replay_thread_buffers(sweep *w, uint32_t p)
{
    const adv_trace *t = w->t;
    if (w->replayed++ || p >= t->nops)
        return;
    int32_t v = t->ops[p];
    int32_t it = t->a[(uint32_t)(v > 0 ? v : -v) - 1].iteration;
    for (size_t i = 0; i < t->na; i++) {
        const adv_alloc *x = &t->a[i];
        if (x->bwd && x->a_pos >= p && x->f_pos == ADV_NONE && x->iteration == it &&
            x->size && !x->graph && !w->alive[i] && w->c->owner[i] == ADV_NONE &&
            !persistent_in_window(w, x)) {
            sweep_alloc(w, (uint32_t)i, x->size);
            w->alive[i] = 3;
        }
    }
}

/* unit ui replayed at position p: its region's ops and the recorded replay's
 * extras, then its outputs freed; -1 out of memory */
static int
replay_unit(sweep *w, uint32_t ui, uint32_t p)
{
    const unit *u = &w->c->u[ui];
    replay_thread_buffers(w, p);
    w->nouts = 0;
    if (collect_extras(w, u) < 0)
        return -1;
    size_t ei = 0;
    for (uint32_t q = u->b; q < u->e; q++)
        if (replay_extras_at(w, q, p, &ei) < 0 || replay_op(w, ui, q, p) < 0)
            return -1;
    for (size_t z = 0; z < w->nouts; z++)
        sweep_free(w, w->outs[z], w->t->a[w->outs[z]].size);
    return 0;
}


/* the failed request would have been allocated at the OOM's position p: it
 * enters the prediction (a request of a replay is 0 in an undone trace) */
static void
sweep_oom_request(sweep *w, uint32_t p)
{
    const adv_trace *t = w->t;
    uint64_t off = window_bytes(w, p);
    uint64_t proj = w->live + t->oom_request + off;
    if (w->sim) {
        adv_cache_alloc(w->sim, (uint32_t)t->na, t->oom_request);
        if (adv_cache_reserved(w->sim) + off > w->best_res)
            w->best_res = adv_cache_reserved(w->sim) + off;
        adv_cache_free(w->sim, (uint32_t)t->na);
    }
    if (proj > w->best) {
        w->best = proj;
        w->best_phase = t->oom_phase;
    }
}

/* the recorded op at position p: an allocation becomes live (persistent bytes
 * of the projected window counted once: allocated at its start, or in D from
 * its start when a unit owns them), a free frees it unless a discard already
 * did */
static void
sweep_op(sweep *w, uint32_t p)
{
    const adv_trace *t = w->t;
    int32_t v = t->ops[p];
    uint32_t id = (uint32_t)(v > 0 ? v : -v) - 1;
    const adv_alloc *x = &t->a[id];
    if (v > 0) {
        /* 3: allocated at the window's start already (sweep_preallocate) */
        if (w->alive[id] != 3)
            sweep_alloc(w, id, x->size);
        if (w->alive[id] != 3 && persistent_in_window(w, x))
            w->dalloc += x->size; /* a unit's: in D from the window's start */
        w->alive[id] = 1;
        note_peak(w, p, x->phase);
    } else if (w->alive[id] == 1 && w->c->keep_to[id] != ADV_NONE && w->c->keep_to[id] > p) {
        w->alive[id] = 4; /* a checkpoint's saved input: freed at its release */
    } else if (w->alive[id] == 1) {
        sweep_free(w, id, x->size);
        w->alive[id] = 0;
    } else {
        w->alive[id] = 0;
    }
}

uint64_t
adv_counterfactual_reserved(const adv_trace *t, const adv_cfg *cfg, const adv_setting *s,
                            uint64_t extra_state, uint8_t *phase_out, uint64_t limit,
                            uint64_t *reserved_out)
{
    return adv_counterfactual_model(t, cfg, s, extra_state, phase_out, limit, reserved_out,
                                    NULL);
}

uint64_t
adv_counterfactual_model(const adv_trace *t, const adv_cfg *cfg, const adv_setting *s,
                         uint64_t extra_state, uint8_t *phase_out, uint64_t limit,
                         uint64_t *reserved_out, uint64_t *step_out)
{
    sweep w;
    memset(&w, 0, sizeof w);
    w.t = t;
    w.sim = reserved_out ? adv_cache_new(t->na + 1, limit) : NULL;
    if (w.sim)
        adv_cache_configure(w.sim, cfg);
    w.dump = w.sim ? dump_open(s) : NULL;
    w.best_phase = AM_PH_other;
    cf c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.owner = malloc((t->na ? t->na : 1) * sizeof *c.owner);
    c.cls = calloc(t->na ? t->na : 1, 1);
    c.keep_to = malloc((t->na ? t->na : 1) * sizeof *c.keep_to);
    w.c = &c;
    w.alive = calloc(t->na ? t->na : 1, 1);
    if (!c.owner || !c.cls || !c.keep_to || !w.alive || prep(&c) < 0)
        goto out;
    memset(c.owner, 0xff, (t->na ? t->na : 1) * sizeof *c.owner);
    memset(c.keep_to, 0xff, (t->na ? t->na : 1) * sizeof *c.keep_to);
    if ((s->labels || s->full_method) && build_units(&c, cfg, s) < 0)
        goto out;
    if (c.nin > 1)
        am_sort(c.in, c.nin, sizeof *c.in, ins_cmp);
    sweep_window(&w, extra_state);
    /* where the stream leaves the recorded one: the step covers a segment
     * for every block served from the cache after it (adv_cache_depart) */
    uint32_t dep = t->departs ? t->departs - 1 : ADV_NONE;
    if (c.nin && c.in[0].pos < dep)
        dep = c.in[0].pos;
    size_t k = 0;
    for (uint32_t p = 0; p <= t->nops; p++) {
        w.pos = p;
        if (p == dep)
            adv_cache_depart(w.sim);
        /* discards and replays inserted before the op at p */
        for (; k < c.nin && c.in[k].pos == p; k++) {
            if (c.in[k].kind == 0)
                sweep_discard(&w, c.in[k].v);
            else if (c.in[k].kind == 2)
                sweep_release(&w, c.in[k].v);
            else if (replay_unit(&w, c.in[k].v, p) < 0)
                goto out;
        }
        if (p == w.wb && w.proj_persist)
            sweep_preallocate(&w);
        if (t->oom && p == t->oom_pos && t->oom_request)
            sweep_oom_request(&w, p);
        if (p == t->nops)
            break;
        sweep_op(&w, p);
    }
out:
    if (w.dump)
        fclose(w.dump);
    free(w.outs);
    free(w.xe);
    cf_free(&c);
    free(w.alive);
    if (phase_out)
        *phase_out = w.best_phase;
    if (reserved_out)
        *reserved_out = w.best_res > w.best ? w.best_res : w.best;
    if (step_out)
        *step_out = w.step > adv_cache_served_step(w.sim) ? w.step
                                                          : adv_cache_served_step(w.sim);
    adv_cache_del(w.sim);
    return w.best;
}

/* ---- undoing the recorded recompute (advisor.h adv_trace_undo) ----
 *
 * A unit of the active setting: its forward allocations that the no_grad
 * forward (or the discard) freed on the main thread, in allocation order, and
 * the op position where the backward reaches it (the order of the replays in
 * one instance's backward job: later positions first). */
typedef struct uundo {
    int32_t inst;
    uint32_t key;             /* region end / discard point */
    int discard;              /* discard-style: replayed before a checkpoint at the same key */
    uint32_t *f;              /* forward alloc ids freed in forward */
    size_t nf;
    size_t npre;              /* full group: f[0..npre) made before its first Megatron range */
    int full;
    uint32_t rb, re;          /* full group: forward region [pre_b, end) */
    int ok;                   /* matched: twins are bal[lo, hi) */
    size_t lo, hi;
    uint8_t ctxmask;          /* ADV_C_* range flags its replay re-emits: a twin's
                               * flags under the mask equal its forward's */
    int32_t layer;            /* selective units: the layer's index in its instance */
    uint8_t win;              /* its replay is searched only in op positions [wlo, whi):
                               * its layer's backward (undo_windows) */
    uint32_t wlo, whi;
    uint32_t *o;              /* its outputs: region tensors a consumer outside the
                               * unit saved (freed on the backward thread) */
    size_t no;
    uint32_t attn_b;          /* core_attn of a non-MLA layer: its attention's first op
                               * (undo_early_frees), else ADV_NONE */
} uundo;

/* the range flags a replay re-emits ([M] in docs/sources.md): full recompute
 * every layer range; mlp, moe and shared experts the mlp.forward.* ranges
 * (the outer _run_mlp.mlp / _forward_mlp.mlp is pushed outside the
 * checkpoint); core_attn only TE's ranges, discard-style replays none */
enum { UU_CTX_FULL = ADV_C_ATTN | ADV_C_CORE | ADV_C_MLP | ADV_C_SUBMLP | ADV_C_BDA,
       UU_CTX_MLP = ADV_C_SUBMLP };

/* Replay twin: the same request gives the same block size, except that the
 * caching allocator does not split a cached large block whose remainder is at
 * most 1 MiB (PyTorch's kSmallSize; small blocks are split from 512 B), so a
 * forward block and its replay may differ by up to that remainder. */
static int
same_block(uint64_t a, uint64_t b)
{
    uint64_t d = a > b ? a - b : b - a;
    return d == 0 || (a >= ((uint64_t)1 << 20) && b >= ((uint64_t)1 << 20) &&
                      d <= ((uint64_t)1 << 20));
}

static int
uu_cmp(const void *a, const void *b)
{
    const uundo *x = a, *y = b;
    if (x->inst != y->inst)
        return x->inst < y->inst ? -1 : 1;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;  /* later regions are replayed first */
    return y->discard - x->discard;
}

static int
uu_add(uundo **u, size_t *n, size_t *cap, const adv_trace *t, int32_t k, uint32_t b,
       uint32_t e, uint32_t key, int discard, uint32_t only, uint32_t pre_e)
{
    if (k < 0)
        return 0;
    if (am_grow((void **)u, cap, *n + 1, sizeof **u, 64) < 0)
        return -1;
    uundo *x = &(*u)[*n];
    memset(x, 0, sizeof *x);
    x->inst = k;
    x->key = key;
    x->attn_b = ADV_NONE;
    x->discard = discard;
    if (only != ADV_NONE) {
        const adv_alloc *a = &t->a[only];
        if (a->bwd || a->fbwd || a->f_pos == ADV_NONE)
            return 0;
        x->f = malloc(sizeof *x->f);
        if (!x->f)
            return -1;
        x->f[x->nf++] = only;
        (*n)++;
        return 0;
    }
    if (b == ADV_NONE || e == ADV_NONE || e <= b)
        return 0;
    x->f = malloc((e - b) * sizeof *x->f);
    if (!x->f)
        return -1;
    x->rb = b;
    x->re = e;
    for (uint32_t p = b; p < e; p++) {
        int32_t v = t->ops[p];
        if (v <= 0)
            continue;
        const adv_alloc *a = &t->a[v - 1];
        /* a full group (pre_e set) also owns the main thread's forward code
         * between its layers (no instance: after a layer's last range, before
         * the next one's first): the replay runs it too */
        int mine = a->inst == k || own_pre(a, p, pre_e) ||
                   (pre_e && a->inst < 0 && a->phase == AM_PH_forward);
        if (mine && a->fbwd && !a->bwd && a->f_pos != ADV_NONE && p >= pre_e) {
            if (!x->o && !(x->o = malloc((e - b) * sizeof *x->o))) {
                free(x->f);
                return -1;
            }
            x->o[x->no++] = (uint32_t)v - 1;
        }
        if (!mine || a->bwd || a->fbwd || a->f_pos == ADV_NONE)
            continue;
        /* before the group's first Megatron range: matched after its Megatron
         * part, newest first, as far as the replay repeats them */
        if (p < pre_e)
            x->npre++;
        x->f[x->nf++] = (uint32_t)v - 1;
    }
    if (!x->nf) {
        free(x->f);
        free(x->o);
        return 0;
    }
    (*n)++;
    return 0;
}

/* A full group's replay x that follows the replay of group prev (the next
 * layers' group) in one backward job: the backward thread's allocations
 * between prev's last op on its replayed tensors and x's first matched one
 * (bal[lo]; lo == nbal: x never matched, the trace stops in it) that have no
 * forward twin are x's own extra work. Only when that window holds nothing
 * but the backward thread's allocations and frees of tensors of the two
 * groups (no other module's backward). Each becomes an adv_extra anchored at
 * the forward twins (t's positions) and is marked in used: 2 alloc and free
 * replayed, 3 alloc replayed and its free op kept. 0, -1 out of memory. */
static int
undo_extras(const adv_trace *t, const uint32_t *bal, size_t nbal, uint8_t *used,
            uint32_t *twin, uint8_t *ext, const uundo *x, const uundo *prev, size_t lo,
            adv_extra **xr, size_t *nxr, size_t *capxr)
{
    uint32_t first_a = lo < nbal ? t->a[bal[lo]].a_pos : (uint32_t)t->nops;
    uint32_t w0 = 0;
    for (size_t j = prev->lo; j < prev->hi; j++) {
        const adv_alloc *a = &t->a[bal[j]];
        if (a->a_pos < first_a && a->a_pos > w0)
            w0 = a->a_pos;
        if (a->f_pos != ADV_NONE && a->f_pos < first_a && a->f_pos > w0)
            w0 = a->f_pos;
    }
    if (!w0 || w0 >= first_a)
        return 0;
    for (uint32_t p = w0 + 1; p < first_a; p++) {
        int32_t v = t->ops[p];
        const adv_alloc *a = &t->a[(v > 0 ? v : -v) - 1];
        if (a->bwd)
            continue;
        if (v > 0 || a->a_pos < x->rb || a->a_pos >= prev->re)
            return 0;
    }
    uint32_t a_anchor = lo < nbal ? t->a[twin[bal[lo]]].a_pos : t->a[x->f[0]].a_pos;
    uint32_t last_a = lo < nbal ? t->a[bal[x->hi - 1]].a_pos : 0;
    size_t j = lo;
    while (j > 0 && t->a[bal[j - 1]].a_pos > w0)
        j--;
    size_t end = lo;
    if (lo == nbal) {
        /* the trace stops in this replay: its last allocations that repeat
         * the forward's first ones are its twins, the rest before them extra */
        size_t nw = 0;
        for (size_t q = j; q < lo; q++)
            nw += !used[bal[q]];
        for (size_t m = nw < x->nf ? nw : x->nf; m > 0; m--) {
            size_t q = lo, z = m, okm = 1;
            while (z > 0 && q > j) {
                q--;
                if (used[bal[q]])
                    continue;
                z--;
                if (t->a[bal[q]].size != t->a[x->f[z]].size) {
                    okm = 0;
                    break;
                }
            }
            if (!okm || z)
                continue;
            end = q;
            for (z = 0; q < lo; q++) {
                if (used[bal[q]])
                    continue;
                used[bal[q]] = 1;
                twin[bal[q]] = x->f[z];
                if (t->a[bal[q]].f_pos == ADV_NONE)
                    ext[x->f[z]] = 1;
                z++;
            }
            break;
        }
    }
    for (; j < end; j++) {
        uint32_t y = bal[j];
        if (used[y])
            continue;
        const adv_alloc *a = &t->a[y];
        uint32_t f_anchor = ADV_NONE;
        if (lo < nbal && a->f_pos != ADV_NONE && a->f_pos < last_a) {
            size_t q = lo;
            while (q < x->hi && t->a[bal[q]].a_pos < a->f_pos)
                q++;
            if (q < x->hi)
                f_anchor = t->a[twin[bal[q]]].a_pos;
        }
        if (am_grow((void **)xr, capxr, *nxr + 1, sizeof **xr, 64) < 0)
            return -1;
        (*xr)[(*nxr)++] = (adv_extra){y, a_anchor, f_anchor, a->a_pos,
                                      a->f_pos == ADV_NONE ? ADV_NONE : a->f_pos};
        used[y] = f_anchor == ADV_NONE ? 3 : 2;
    }
    return 0;
}

static int
xr_cmp(const void *a, const void *b)
{
    const adv_extra *x = a, *y = b;
    if (x->a_anchor != y->a_anchor)
        return x->a_anchor < y->a_anchor ? -1 : 1;
    return x->a_seq < y->a_seq ? -1 : x->a_seq > y->a_seq;
}

void
adv_setting_of_cfg(const adv_cfg *c, adv_setting *s)
{
    memset(s, 0, sizeof *s);
    if (c->granularity == 2) {
        s->full_method = c->method ? c->method : 1;
        s->full_n = c->recompute_num_layers > 0 ? c->recompute_num_layers : 1;
    } else if (c->granularity == 1) {
        s->labels = c->modules ? c->modules : 1u << ADV_L_core_attn;
    }
}

/* The state adv_trace_undo's steps share: the trace, its prepared view, the
 * active setting's units, the backward thread's allocations and their marks,
 * the replays' extras and the map of op positions into the rewritten stream. */
typedef struct undo_st {
    const adv_trace *t;
    cf c;
    uundo *u;                 /* the active setting's units */
    size_t nu, capu;
    uint32_t *bal;            /* backward-thread allocation ids, in op order */
    size_t nbal;
    uint32_t *twin;           /* a replay allocation's forward twin (ADV_NONE: none) */
    uint8_t *used;            /* 1 replay twin, 2/3 replay extra (undo_extras) */
    uint8_t *ext;             /* a forward allocation whose replay twin outlives the replay */
    adv_extra *xr;            /* the replays' extras */
    size_t nxr, capxr;
    uint32_t *newpos;         /* t's op position -> the rewritten stream's (nops + 1) */
    uint32_t *early;          /* early frees (undo_early_frees): pairs of op position, id,
                               * sorted by position */
    size_t nearly, capearly;
    uint32_t last_alloc;      /* op position of the trace's last allocation */
    int by_size;              /* selective units matched without their layer's window */
    int missing;              /* units the setting implies that the trace's layers lack */
} undo_st;

/* The units of full recompute: per instance, its layers in groups of full_n
 * (method 1) or its first full_n layers one each (method 2), each unit the
 * forward region from the group's pre_b to its last layer's end. 0, -1 out
 * of memory. */
static int
undo_units_full(undo_st *st, const adv_setting *s)
{
    const adv_trace *t = st->t;
    size_t i = 0;
    while (i < t->nlayers) {
        const adv_layer *L = &t->layers[i];
        size_t j = i;
        while (j < t->nlayers && t->layers[j].inst == L->inst)
            j++;
        size_t nl = j - i, n = (size_t)s->full_n;
        for (size_t g = 0; g < nl; g += (s->full_method == 1 ? n : 1)) {
            if (s->full_method == 2 && g >= n)
                break;
            size_t last = s->full_method == 1 ? (g + n < nl ? g + n : nl) : g + 1;
            uint32_t e = t->layers[i + last - 1].end;
            const adv_layer *F = &t->layers[i + g];
            size_t before = st->nu;
            if (uu_add(&st->u, &st->nu, &st->capu, t, L->inst, F->pre_b, e, e, 0, ADV_NONE,
                       F->begin) < 0)
                return -1;
            if (st->nu > before) {
                st->u[before].full = 1;
                st->u[before].ctxmask = UU_CTX_FULL;
            }
        }
        i = j;
    }
    return 0;
}

/* The units of selective recompute: per layer, one for each checkpointed
 * module of the setting's labels (its forward region, or the one tensor a
 * discard-style module frees). 0, -1 out of memory. */
static int
undo_units_selective(undo_st *st, const adv_setting *s)
{
    const adv_trace *t = st->t;
    unsigned m = s->labels;
    for (size_t i = 0; i < t->nlayers; i++) {
        const adv_layer *L = &t->layers[i];
        int e = 0;
        size_t before = st->nu;
        if (((m & (1u << ADV_L_moe)) && L->moe) || ((m & (1u << ADV_L_mlp)) && !L->moe)) {
            e |= uu_add(&st->u, &st->nu, &st->capu, t, L->inst, L->mlp_b, L->mlp_e, L->mlp_e, 0,
                        ADV_NONE, 0);
            if (st->nu > before)
                st->u[before].ctxmask = UU_CTX_MLP;
        } else if ((m & (1u << ADV_L_shared_experts)) && L->moe) {
            uint32_t se = shared_end(t, L);
            e |= uu_add(&st->u, &st->nu, &st->capu, t, L->inst, L->mlp_b, se, se, 0,
                        ADV_NONE, 0);
            if (st->nu > before)
                st->u[before].ctxmask = UU_CTX_MLP;
            /* only the shared experts' own ranges are checkpointed (and
             * replayed), not the whole MoE layer */
            if (st->nu > before) {
                uundo *x = &st->u[before];
                size_t w = 0;
                for (size_t q = 0; q < x->nf; q++)
                    if (m_shared(&t->a[x->f[q]], L))
                        x->f[w++] = x->f[q];
                x->nf = w;
                if (!w) {
                    free(x->f);
                    free(x->o);
                    st->nu--;
                }
            }
        }
        if (m & (1u << ADV_L_core_attn)) {
            size_t c0 = st->nu;
            e |= uu_add(&st->u, &st->nu, &st->capu, t, L->inst, L->core_b, L->core_e, L->core_e,
                        0, ADV_NONE, 0);
            if (st->nu > c0 && !L->mla)
                st->u[c0].attn_b = L->attn_b;
        }
        if ((m & (1u << ADV_L_mla_up_proj)) && L->mla && L->mla_up_b != ADV_NONE &&
            L->mla_v != ADV_NONE)
            e |= uu_add(&st->u, &st->nu, &st->capu, t, L->inst, L->mla_up_b,
                        t->a[L->mla_v].a_pos + 1, L->core_e, 1, ADV_NONE, 0);
        if ((m & (1u << ADV_L_moe_act)) && L->moe && L->moe_act != ADV_NONE &&
            L->moe_act_e != ADV_NONE)
            e |= uu_add(&st->u, &st->nu, &st->capu, t, L->inst, t->a[L->moe_act].a_pos,
                        L->moe_act_e, L->moe_act_discard, 1, ADV_NONE, 0);
        if (m & (1u << ADV_L_layernorm)) {
            if (L->in_ln != ADV_NONE)
                e |= uu_add(&st->u, &st->nu, &st->capu, t, L->inst, 0, 0, L->attn_e, 1,
                            L->in_ln, 0);
            if (L->pre_ln != ADV_NONE)
                e |= uu_add(&st->u, &st->nu, &st->capu, t, L->inst, 0, 0, L->mlp_e, 1,
                            L->pre_ln, 0);
        }
        if (e)
            return -1;
        for (size_t q = before; q < st->nu; q++)
            st->u[q].layer = L->layer;
    }
    return 0;
}

/* The op positions of instance k's attention backward calls (t->abwd), one
 * per layer, the last layer's first: those in its backward job (from its
 * backward start to the next instance's, or the trace's end). *first gets the
 * index of the first in t->abwd; returns how many, or 0 when the instance's
 * backward start is unknown. */
static size_t
undo_inst_abwd(const undo_st *st, int32_t k, size_t *first)
{
    const adv_trace *t = st->t;
    uint32_t bs = st->c.bwd_start[k], next = ADV_NONE;
    if (bs == ADV_NONE)
        return 0;
    for (size_t j = 0; j < t->ninsts; j++)
        if (st->c.bwd_start[j] != ADV_NONE && st->c.bwd_start[j] > bs &&
            st->c.bwd_start[j] < next)
            next = st->c.bwd_start[j];
    size_t i = 0, n = 0;
    while (i < t->nabwd && t->abwd[i] < bs)
        i++;
    *first = i;
    while (i + n < t->nabwd && (next == ADV_NONE || t->abwd[i + n] < next))
        n++;
    return n;
}

/* Issue 14 item 11: a layer's core attention and its discarded tensors (the
 * norms' outputs, the expert activation, MLA's Q/K/V) are replayed inside
 * that layer's backward, which Megatron does not mark with a range: it
 * starts after the next layer's attention backward call (TE's
 * nvte_*_attn_bwd on the backward thread; for the instance's last layer, at
 * its backward start) and ends with its own. When an instance's backward job
 * holds exactly one such call per layer, each such unit gets that window:
 * its replay is searched only there, so two layers' equal-sized tensors (or
 * a gradient of the same size) are never taken for it. Otherwise the unit is
 * matched by size and position alone, and counted so (the note says so). */
static void
undo_windows(undo_st *st)
{
    const adv_trace *t = st->t;
    for (size_t q = 0; q < st->nu; q++) {
        uundo *x = &st->u[q];
        if (x->full || x->ctxmask || (size_t)x->inst >= t->ninsts || x->layer < 0)
            continue;
        size_t first = 0, nl = (size_t)t->insts[x->inst].nlayers;
        if (undo_inst_abwd(st, x->inst, &first) != nl || (size_t)x->layer >= nl)
            continue;
        size_t own = first + nl - 1 - (size_t)x->layer;
        x->win = 1;
        x->wlo = own > first ? t->abwd[own - 1] : st->c.bwd_start[x->inst];
        x->whi = t->abwd[own];
    }
}

/* A tensor of a unit's region that the main thread frees only after its
 * instance's backward began (a buffer the first forward creates and keeps to
 * the end of the run) is no forward transient: the replay does not make it
 * again, so it leaves the unit (discard-style units keep theirs). So does
 * forward state (adv_alloc.state) when the instance's backward start is not
 * known (full recompute with one layer per model chunk: the instance saves
 * nothing of its own, so no backward free of it marks that start). */
static void
undo_drop_kept(undo_st *st)
{
    const adv_trace *t = st->t;
    for (size_t k = 0; k < st->nu; k++) {
        uundo *x = &st->u[k];
        uint32_t bs = (size_t)x->inst < t->ninsts ? st->c.bwd_start[x->inst] : ADV_NONE;
        size_t w = 0, npre = x->npre;
        for (size_t q = 0; q < x->nf; q++) {
            const adv_alloc *a = &t->a[x->f[q]];
            if (((bs != ADV_NONE && a->f_pos >= bs) || a->state) && !x->discard) {
                if (q < x->npre)
                    npre--;
                continue;
            }
            x->f[w++] = x->f[q];
        }
        x->nf = w;
        x->npre = npre;
    }
}

/* The backward thread's allocations in op order (bal), with the marks the
 * matching sets on them cleared (used, ext; twin ADV_NONE). 0, -1 out of
 * memory. */
static int
undo_backward_allocs(undo_st *st)
{
    const adv_trace *t = st->t;
    st->bal = malloc((t->na ? t->na : 1) * sizeof *st->bal);
    st->twin = malloc((t->na ? t->na : 1) * sizeof *st->twin);
    st->used = calloc(t->na ? t->na : 1, 1);
    st->ext = calloc(t->na ? t->na : 1, 1);
    if (!st->bal || !st->twin || !st->used || !st->ext)
        return -1;
    memset(st->twin, 0xff, (t->na ? t->na : 1) * sizeof *st->twin);
    for (size_t p = 0; p < t->nops; p++) {
        if (t->ops[p] > 0 && t->a[t->ops[p] - 1].bwd)
            st->bal[st->nbal++] = (uint32_t)t->ops[p] - 1;
        if (t->ops[p] > 0)
            st->last_alloc = (uint32_t)p;
    }
    return 0;
}

/* 1 when backward-thread allocation y is state the backward thread keeps,
 * not a replay's tensor: made in an iteration the trace saw complete and
 * never freed, or freed only at teardown (on the main thread, after every
 * allocation): the cuBLAS workspace of the autograd thread's stream, made by
 * the first GEMM that runs there (real Megatron-Core's first replay in a
 * run, 32 MiB between two of its forward twins). It has no forward twin and
 * is made with or without recompute, so a replay's sequence passes over it
 * and it stays in the undone trace. Before this rule that replay matched no
 * unit, and under the interleaved schedule the units after it took each
 * other's replays, the last one none (llama-vpp, full[uniform,1]: 46-47 of
 * 48 units). */
static int
undo_bwd_state(const undo_st *st, uint32_t y)
{
    const adv_alloc *a = &st->t->a[y];
    return a->bwd && a->iteration >= 0 && a->iteration <= st->t->last_complete_iter &&
           (a->f_pos == ADV_NONE || (!a->fbwd && a->f_pos > st->last_alloc));
}

/* Where instance inst's backward job starts (its backward start, else the
 * instance's end: *inst_bs, an op position) and the index in bal of the first
 * backward allocation at or after it. */
static size_t
undo_inst_cursor(const undo_st *st, int32_t inst, uint32_t *inst_bs)
{
    const adv_trace *t = st->t;
    uint32_t bs = (size_t)inst < t->ninsts ? st->c.bwd_start[inst] : ADV_NONE;
    if (bs == ADV_NONE)
        bs = t->insts[inst].end;
    *inst_bs = bs;
    size_t lo = 0, hi = st->nbal;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->t->a[st->bal[mid]].a_pos < bs)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* 1 when backward allocation y (unused) is the replay's copy of one of unit
 * x's outputs: the same block and range path as an output's forward
 * allocation. */
static int
undo_is_output(const undo_st *st, const uundo *x, uint32_t y)
{
    const adv_trace *t = st->t;
    for (size_t k = 0; k < x->no; k++)
        if (x->o[k] != ADV_NONE && same_block(t->a[y].size, t->a[x->o[k]].size) &&
            (t->a[y].ctx & x->ctxmask) == (t->a[x->o[k]].ctx & x->ctxmask))
            return 1;
    return 0;
}

/* Unit x's replay tried at bal[q]: each of its forward allocations after the
 * pre part is the next backward allocation, unused, of the same block size
 * (bytes) and range path (the Megatron ranges the replay re-emits,
 * x->ctxmask). The replay re-makes the region's outputs too (the forward's
 * copies, saved by a consumer outside the unit, are freed on the backward
 * thread and so are not in x->f), and they may come between those
 * allocations, at most x->no of them: a layer's bias-dropout-add makes its
 * output before the dropout mask it saves (Megatron's default hidden dropout
 * 0.1; megasim's order). Backward-thread state between them that is no
 * twin (undo_bwd_state) is passed over. Returns the number of backward
 * allocations the replay spans (0: no replay at q); with idx, each forward
 * allocation's index in bal and, in outs (at most x->no), the skipped
 * outputs' indices ((size_t)-1 after the last). */
static size_t
undo_run_at(const undo_st *st, const uundo *x, size_t q, size_t *idx, size_t *outs)
{
    const adv_trace *t = st->t;
    const uint32_t *fm = x->f + x->npre;
    size_t nm = x->nf - x->npre, z = 0, p = q, skipped = 0;
    while (z < nm && p < st->nbal) {
        uint32_t y = st->bal[p];
        if (st->used[y])
            return 0;
        if (same_block(t->a[y].size, t->a[fm[z]].size) &&
            (t->a[y].ctx & x->ctxmask) == (t->a[fm[z]].ctx & x->ctxmask)) {
            if (idx)
                idx[z] = p;
            z++;
        } else if (z > 0 && skipped < x->no && undo_is_output(st, x, y)) {
            if (outs)
                outs[skipped] = p;
            skipped++;
        } else if (z == 0 || !undo_bwd_state(st, y)) {
            return 0;
        }
        p++;
    }
    if (outs && skipped < x->no)
        outs[skipped] = (size_t)-1;
    return z == nm ? p - q : 0;
}

/* The first unused replay of unit x after its pre part (a full group's own
 * Megatron-range part; undo_run_at), searched from cursor (the instance's
 * backward: its microbatch), then from the first backward allocation after
 * the unit's forward region ends (x->key: its region end or discard point; a
 * replay never precedes its forward), and only in its instance's iteration
 * (every microbatch's backward ends before the step's optimizer: a unit that
 * missed its own replay took the next iteration's before, and the miss
 * moved on to the trace's last instance): its index in bal, (size_t)-1
 * none. */
static size_t
undo_find_run(const undo_st *st, const uundo *x, size_t cursor)
{
    const adv_trace *t = st->t;
    size_t nm = x->nf - x->npre;
    size_t found = (size_t)-1;
    size_t after = 0, hi = st->nbal;
    while (after < hi) {
        size_t mid = (after + hi) / 2;
        if (t->a[st->bal[mid]].a_pos < x->key)
            after = mid + 1;
        else
            hi = mid;
    }
    if (cursor < after)
        cursor = after;
    int32_t it = (size_t)x->inst < t->ninsts ? t->insts[x->inst].iteration : -1;
    /* a unit placed in its layer's backward (undo_windows) is searched there
     * only; RECOMP_ADVISOR_SIZE_ONLY (a diagnostic: the matching before issue 14
     * item 11) searches by size and position alone */
    size_t wlo = 0, whi = st->nbal;
    if (x->win && !getenv("RECOMP_ADVISOR_SIZE_ONLY")) {
        while (wlo < st->nbal && t->a[st->bal[wlo]].a_pos < x->wlo)
            wlo++;
        whi = wlo;
        while (whi < st->nbal && t->a[st->bal[whi]].a_pos < x->whi)
            whi++;
    }
    for (int pass = 0; pass < 2 && found == (size_t)-1 && nm; pass++) {
        size_t from = pass ? after : cursor;
        if (from < wlo)
            from = wlo;
        for (size_t q = from; q + nm <= whi; q++) {
            if (it >= 0 && t->a[st->bal[q]].iteration > it)
                break;
            size_t len = undo_run_at(st, x, q, NULL, NULL);
            if (len && q + len <= whi) {
                found = q;
                break;
            }
        }
    }
    return found;
}

/* With RECOMP_ADVISOR_DEBUG set: says on stderr that unit x found no replay,
 * with its forward allocations' sizes (bytes). */
static void
undo_debug_unmatched(const adv_trace *t, const uundo *x)
{
    if (!getenv("RECOMP_ADVISOR_DEBUG"))
        return;
    fprintf(stderr, "advisor: undo: unit inst %d key %u full %d unmatched (%zu "
                    "forward allocs, %zu before its first range:", x->inst, x->key,
            x->full, x->nf, x->npre);
    for (size_t w = 0; w < x->nf && w < 80; w++)
        fprintf(stderr, " %llu", (unsigned long long)t->a[x->f[w]].size);
    fprintf(stderr, ")\n");
}

/* The replay's copies of unit x's outputs, at bal indices outs (undo_run_at;
 * (size_t)-1 ends the list): each is its output's twin (the same block, the
 * first not yet taken), gone from the rewritten stream; the forward copy
 * keeps its own free (its consumer's saved input). */
static void
undo_mark_outputs(undo_st *st, const uundo *x, const size_t *outs)
{
    const adv_trace *t = st->t;
    for (size_t k = 0; k < x->no && outs[k] != (size_t)-1; k++) {
        uint32_t y = st->bal[outs[k]];
        for (size_t q = 0; q < x->no; q++)
            if (x->o[q] != ADV_NONE && same_block(t->a[y].size, t->a[x->o[q]].size)) {
                st->used[y] = 1;
                st->twin[y] = x->o[q];
                x->o[q] = ADV_NONE;
                break;
            }
    }
}

/* Where matched unit x's replayed forward code ends (an op position): the
 * first backward-thread allocation after its matched span (bal[x->hi...])
 * that is not the replay's own, passing over (up to x->no) the replay's
 * copies of the unit's outputs (undo_is_output: the layer's output that the
 * replay makes after its last matched tensor, a bias-dropout-add's result)
 * and backward-thread state (undo_bwd_state); the trace's end when there is
 * none. Before, the output copy itself ended the code: the MLA model's dense
 * layer replays fc2's output, then the layer's output (both 8 MiB) and
 * frees fc2's output, a transient, right after; that free counted as
 * "after the code", so the undo kept fc2's output to the layer's backward
 * where the run without recompute frees it in the forward (one 8 MiB block
 * per layer and microbatch: `none` from the full-recompute runs +2.46%
 * reserved, test_matrix.py's former KNOWN_RESERVED "mla"). */
static uint32_t
undo_code_end(const undo_st *st, const uundo *x)
{
    const adv_trace *t = st->t;
    size_t j = x->hi, outs = 0;
    while (j < st->nbal) {
        uint32_t y = st->bal[j];
        if (!st->used[y] && outs < x->no && undo_is_output(st, x, y))
            outs++;
        else if (!st->used[y] && undo_bwd_state(st, y))
            ; /* the autograd stream's workspace: no replay's work */
        else
            break;
        j++;
    }
    return j < st->nbal ? t->a[st->bal[j]].a_pos : (uint32_t)t->nops;
}

/* Unit x's replay found at bal[found]: extends it back over the pre part
 * (the forward's last allocations before the group's first range are the
 * replay's allocations just before, within the instance's backward from
 * inst_bs), records it in x (ok, lo, hi) and marks each replay allocation as
 * its forward twin's, noting in ext the twins the replay keeps alive; span
 * and idx are undo_run_at's at found. Returns the replay's first index in
 * bal. */
static size_t
undo_mark_twins(undo_st *st, uundo *x, size_t found, uint32_t inst_bs, size_t span,
                const size_t *idx)
{
    const adv_trace *t = st->t;
    const uint32_t *bal = st->bal;
    size_t lo = found, z = x->npre;
    while (z > 0 && lo > 0 && !st->used[bal[lo - 1]] &&
           same_block(t->a[bal[lo - 1]].size, t->a[x->f[z - 1]].size) &&
           t->a[bal[lo - 1]].a_pos >= inst_bs) {
        lo--;
        z--;
    }
    size_t nmatch = x->nf - z, npre = x->npre - z;
    x->ok = 1;
    x->lo = lo;
    x->hi = found + span;
    /* the replay's forward code ends before the next backward-thread
     * allocation that is not its own (its nested backward's first gradient,
     * or the next replay): a twin freed by then was a transient of the
     * forward code (freed at its scope's exit), one freed later was saved */
    uint32_t last_a = undo_code_end(st, x);
    for (size_t w = 0; w < nmatch; w++) {
        uint32_t y = bal[w < npre ? lo + w : idx[w - npre]];
        uint32_t fid = x->f[z + w];
        st->used[y] = 1;
        st->twin[y] = fid;
        /* saved in a grad-enabled forward: the replay twin lives past the
         * replay's forward code; transients keep their own free. The
         * region's output (its forward copy freed after the region ended, by
         * its consumer, which did not save it) is held past the replay only by
         * the checkpoint's nested backward: without recompute the consumer
         * frees it in forward, as recorded. Not for a full group: its output
         * is the next group's saved input, and what its no_grad forward frees
         * just after its last range (the residual a layer's locals hold until
         * it returns) was saved with grad on. A discarded tensor (a norm's
         * output, the expert activation) is kept until its twin's free; an
         * MLA up-projection region's other tensors follow the rules above */
        const adv_alloc *ya = &t->a[y];
        int output = !x->discard && !x->full && x->re && t->a[fid].f_pos >= x->re;
        int kept = ya->f_pos == ADV_NONE || ya->f_pos > last_a || (x->discard && x->nf == 1);
        if (kept && !output)
            st->ext[fid] = 1;
    }
    return lo;
}

/* A unit of an instance whose backward the trace never reached (a fatal OOM
 * cut it; nothing the instance made was freed on the backward thread) has no
 * replay to match: another instance's backward allocations of the same sizes
 * are not its twins. A discard-style unit's output would have stayed saved
 * without recompute: it is kept to the trace's end (ext 2). 1 when x is
 * such a unit. */
static int
undo_cut_keep(undo_st *st, const uundo *x)
{
    const adv_trace *t = st->t;
    if (!t->trunc || (size_t)x->inst >= t->ninsts || st->c.bwd_start[x->inst] != ADV_NONE)
        return 0;
    if (x->discard && !x->re)
        for (size_t q = 0; q < x->nf; q++)
            st->ext[x->f[q]] = 2;
    return 1;
}

/* Matches each unit (in replay order) of the instances whose backward job
 * start is known (known 1) or not (known 0) to its replay among the backward
 * thread's allocations, counting the matched ones in *matched (units of an
 * instance whose backward the trace never reached leave *units), and collects
 * the full groups' replays' own extra work (undo_extras). 0, -1 out of
 * memory. */
static int
undo_match_pass(undo_st *st, int known, int *matched, int *units)
{
    const adv_trace *t = st->t;
    size_t cursor = 0;
    int32_t cur_inst = -1;
    uint32_t inst_bs = 0;
    for (size_t k = 0; k < st->nu; k++) {
        uundo *x = &st->u[k];
        const uundo *prev = k > 0 ? &st->u[k - 1] : NULL;
        if (((size_t)x->inst < t->ninsts && st->c.bwd_start[x->inst] != ADV_NONE) != known)
            continue;
        if (x->inst != cur_inst) {
            cur_inst = x->inst;
            cursor = undo_inst_cursor(st, x->inst, &inst_bs);
        }
        if (undo_cut_keep(st, x)) {
            (*units)--; /* nothing to match: its backward never ran */
            continue;
        }
        size_t found = undo_find_run(st, x, cursor);
        if (found == (size_t)-1) {
            undo_debug_unmatched(t, x);
            if (x->full && prev && prev->inst == x->inst && prev->ok && t->trunc &&
                undo_extras(t, st->bal, st->nbal, st->used, st->twin, st->ext, x, prev,
                            st->nbal, &st->xr, &st->nxr, &st->capxr) < 0)
                return -1; /* the replay the trace stops in */
            continue;
        }
        size_t *idx = malloc((x->nf + x->no + 1) * sizeof *idx);
        if (!idx)
            return -1;
        size_t *outs = idx + x->nf;
        size_t span = undo_run_at(st, x, found, idx, outs);
        size_t lo = undo_mark_twins(st, x, found, inst_bs, span, idx);
        undo_mark_outputs(st, x, outs);
        free(idx);
        (*matched)++;
        uint32_t at = t->a[st->bal[found]].a_pos;
        if (getenv("RECOMP_ADVISOR_DEBUG") && !x->full && !x->ctxmask)
            fprintf(stderr, "advisor: undo: rank trace of %zu ops: unit inst %d layer %d key %u "
                            "discard %d: replay at op %u, %s\n", t->nops, x->inst, x->layer,
                    x->key, x->discard, at,
                    !x->win ? "its layer's backward unknown"
                    : at >= x->wlo && at < x->whi ? "inside its layer's backward"
                                                   : "OUTSIDE its layer's backward");
        if (!x->full && !x->ctxmask && (!x->win || getenv("RECOMP_ADVISOR_SIZE_ONLY")))
            st->by_size++;
        /* the replay's own work with no forward twin (it did more than the
         * forward): between the previous group's nested backward and it */
        if (x->full && prev && prev->inst == x->inst && prev->ok &&
            undo_extras(t, st->bal, st->nbal, st->used, st->twin, st->ext, x, prev, lo,
                        &st->xr, &st->nxr, &st->capxr) < 0)
            return -1;
        size_t end = found + span;
        if (end > cursor)
            cursor = end;
    }
    return 0;
}

/* undo_match_pass over the units of instances whose backward job start is
 * known first (each searched from its own job), then the others (searched
 * from their forward's end, in forward order, among the replays left). The
 * interleaved schedule runs the model chunks' backward in another order than
 * their forward; within one chunk the microbatches keep their order, so once
 * the chunks with a known job have their replays, forward order assigns the
 * rest (real Megatron-Core frees a p2p-received input on the main thread:
 * the first stage's second chunk has no known job). 0, -1 out of memory. */
static int
undo_match(undo_st *st, int *matched, int *units)
{
    if (undo_match_pass(st, 1, matched, units) < 0)
        return -1;
    return undo_match_pass(st, 0, matched, units);
}

static int undo_is_early(const undo_st *st, uint32_t id);

/* The checkpoint inputs of a matched discard-style unit x (Megatron-Core's
 * CheckpointWithoutOutputFunction saves its arguments, detached, until its
 * backward returns: tensor_parallel/random.py): after the last free of its
 * replay's twins (op position last), past the nested backward's own work on
 * the backward thread (its gradients made and freed, the replayed output's
 * free), the first run of frees of main-thread forward allocations of x's
 * instance made before its region (x->rb): the saved inputs go together when
 * that backward returns. The scan passes only over the nested backward's own
 * work (backward-thread allocations, frees of tensors made since the replay
 * began) and stops at anything else (a main-thread allocation, the free of
 * an older tensor that is no input: the outer backward has moved on). Each
 * found is handed to fn with its id, last and arg. Returns fn's first
 * negative result, else 0. */
static int
undo_each_input(undo_st *st, const uundo *x, int (*fn)(undo_st *, const uundo *, uint32_t,
                                                       uint32_t, void *), void *arg)
{
    const adv_trace *t = st->t;
    uint32_t last = 0;
    for (size_t j = x->lo; j < x->hi; j++) {
        const adv_alloc *y = &t->a[st->bal[j]];
        if (st->used[st->bal[j]] == 1 && y->f_pos != ADV_NONE && y->f_pos > last)
            last = y->f_pos;
    }
    uint32_t began = t->a[st->bal[x->lo]].a_pos;
    int in_run = 0;
    for (uint32_t q = last + 1; last && q < t->nops; q++) {
        int32_t v = t->ops[q];
        uint32_t id = (uint32_t)(v > 0 ? v : -v) - 1;
        const adv_alloc *a = &t->a[id];
        int input = v < 0 && a->inst == x->inst && !a->bwd && a->a_pos < x->rb;
        int nested = v > 0 ? a->bwd : a->a_pos >= began;
        if (input) {
            in_run = 1;
            if (fn(st, x, id, last, arg) < 0)
                return -1;
        } else if (in_run || !nested) {
            break;
        }
    }
    return 0;
}

/* undo_each_input's step for undo_input_frees: input id of unit x, whose
 * replay's twins were last freed at op position last (arg unused). Finds
 * the first backward-thread allocation, not a replay's, of the input's block
 * size (its gradient, assembled by a view op's backward: chunk's cat) made
 * after the nested backward first freed a tensor the replay saved (a twin
 * kept past the replay's forward code, whose forward twin is extended:
 * st->ext; that first free before last) and before the input's recorded
 * free; the input's free moves to just before it (st->early). None found:
 * the input keeps its free. 0, -1 out of memory. */
static int
undo_input_free_at(undo_st *st, const uundo *x, uint32_t id, uint32_t last, void *arg)
{
    const adv_trace *t = st->t;
    uint32_t first_saved = ADV_NONE;
    (void)arg;
    for (size_t j = x->lo; j < x->hi; j++) {
        uint32_t y = st->bal[j];
        const adv_alloc *a = &t->a[y];
        if (st->used[y] == 1 && st->twin[y] != ADV_NONE && st->ext[st->twin[y]] &&
            a->f_pos != ADV_NONE && a->f_pos < first_saved)
            first_saved = a->f_pos;
    }
    if (getenv("RECOMP_ADVISOR_DEBUG"))
        fprintf(stderr, "advisor: undo: unit inst %d key %u: input %u (%llu bytes), first saved "
                "twin free %u, last %u\n", x->inst, x->key, id,
                (unsigned long long)t->a[id].size, first_saved, last);
    uint32_t end = t->a[id].f_pos;
    if (first_saved == ADV_NONE || first_saved >= last || end == ADV_NONE)
        return 0;
    for (uint32_t q = first_saved + 1; q < end; q++) {
        int32_t v = t->ops[q];
        if (v <= 0)
            continue;
        const adv_alloc *g = &t->a[v - 1];
        if (!g->bwd || st->used[v - 1] || !same_block(g->size, t->a[id].size))
            continue;
        if (undo_is_early(st, id))
            return 0; /* moved already (another unit's input too) */
        if (am_grow((void **)&st->early, &st->capearly, st->nearly + 2, sizeof *st->early,
                    16) < 0)
            return -1;
        st->early[st->nearly++] = q;
        st->early[st->nearly++] = id;
        return 0;
    }
    return 0;
}

/* An undone discard-style checkpoint's inputs freed where the run without
 * that recompute frees them (issue 14 invariant 4 and item 11, the class "an
 * undo's free times"). With the checkpoint, its saved inputs live until its
 * backward returns, after the nested backward has made the inputs' gradient;
 * without it, an input that the region's ops hold only through views (the
 * unfused GLU: chunk's halves, silu saves one) goes when the last of those
 * ops has run, before chunk's backward assembles the input's gradient. The
 * replay's own free times show both: the nested backward frees the tensors
 * the replay saved as their ops run, and a backward allocation of the
 * input's block size after the first of those frees is that gradient. Where
 * the region's first op saves the input itself (a fused activation, a norm)
 * no saved internal is freed before the gradient, and the input keeps its
 * recorded free. Found on the label matrix's moe-unfused-act model: fc1's
 * output (46,137,344 bytes), the moe_act checkpoint's saved input, was kept
 * past the GLU's input gradient of the same size; the run without moe_act
 * frees it just before and the gradient takes its block (reserved from the
 * moe_act run: none +2.73%, full[block,1] -4.35%). Checkpoint-style units
 * (CheckpointFunction) are left as recorded: their first op (a linear layer)
 * saves its input and releases it after making the input's gradient. 0, -1
 * out of memory. */
static int
undo_input_frees(undo_st *st)
{
    for (size_t k = 0; k < st->nu; k++) {
        const uundo *x = &st->u[k];
        if (!x->discard || !x->ok || x->hi <= x->lo || !x->re || x->nf < 2)
            continue;
        if (undo_each_input(st, x, undo_input_free_at, NULL) < 0)
            return -1;
    }
    return 0;
}

/* The QKV projection's output that a core_attn checkpoint kept (Megatron-
 * Core's CheckpointFunction saves the value, a view of it, to the end of its
 * backward; docs/advisor.md "Checkpoint inputs"): without the checkpoint the
 * attention saves its own copies of what it needs (TE's contiguous V, the
 * local spec's GQA-expanded K and V), and the buffer is freed at the
 * attention's return. Per matched core_attn unit of a non-MLA layer: among
 * the frees that follow the last free of its replay's twins (the checkpoint's
 * saved inputs go when its backward returns, before the next backward op
 * allocates), the first-made main-thread allocation of the attention's .qkv
 * range; its free moves to the region's exit (st->early). 0, -1 out of
 * memory. */
static int
undo_early_frees(undo_st *st)
{
    const adv_trace *t = st->t;
    for (size_t k = 0; k < st->nu; k++) {
        const uundo *x = &st->u[k];
        if (x->attn_b == ADV_NONE || !x->ok || x->hi <= x->lo)
            continue;
        uint32_t last = 0;
        for (size_t j = x->lo; j < x->hi; j++) {
            const adv_alloc *y = &t->a[st->bal[j]];
            if (st->used[st->bal[j]] == 1 && y->f_pos != ADV_NONE && y->f_pos > last)
                last = y->f_pos;
        }
        uint32_t best = ADV_NONE;
        for (uint32_t q = last + 1; last && q < t->nops && t->ops[q] < 0; q++) {
            uint32_t id = (uint32_t)-t->ops[q] - 1;
            const adv_alloc *a = &t->a[id];
            if (a->inst == x->inst && !a->bwd && (a->ctx & ADV_C_QKV) && a->a_pos >= x->attn_b &&
                a->a_pos < x->rb && (best == ADV_NONE || a->a_pos < t->a[best].a_pos))
                best = id;
        }
        if (best == ADV_NONE)
            continue;
        if (am_grow((void **)&st->early, &st->capearly, st->nearly + 2, sizeof *st->early,
                    16) < 0)
            return -1;
        st->early[st->nearly++] = x->key;
        st->early[st->nearly++] = best;
    }
    /* sort the pairs by position (few: insertion sort) */
    for (size_t i = 2; i < st->nearly; i += 2)
        for (size_t j = i; j >= 2 && st->early[j - 2] > st->early[j]; j -= 2) {
            uint32_t p0 = st->early[j], p1 = st->early[j + 1];
            st->early[j] = st->early[j - 2];
            st->early[j + 1] = st->early[j - 1];
            st->early[j - 2] = p0;
            st->early[j - 1] = p1;
        }
    return 0;
}

/* 1 when allocation id's free moved early (undo_early_frees) */
static int
undo_is_early(const undo_st *st, uint32_t id)
{
    for (size_t i = 0; i + 1 < st->nearly; i += 2)
        if (st->early[i + 1] == id)
            return 1;
    return 0;
}

/* The rewritten op stream in o (o->a, o->ops, o->nops) and st->newpos: a
 * replay's extras leave it (a late free stays), a replay twin's alloc and
 * free leave it (size 0), its forward twin's free moving there when the twin
 * outlives the replay; the forward frees of such twins leave it. 0, -1 out
 * of memory. */
static int
undo_rewrite_ops(undo_st *st, adv_trace *o)
{
    const adv_trace *t = st->t;
    const uint8_t *used = st->used, *ext = st->ext;
    const uint32_t *twin = st->twin;
    uint32_t *newpos = st->newpos = malloc((t->nops + 1) * sizeof *newpos);
    o->a = malloc((t->na ? t->na : 1) * sizeof *o->a);
    o->ops = malloc((t->nops ? t->nops : 1) * sizeof *o->ops);
    if (!newpos || !o->a || !o->ops)
        return -1;
    memcpy(o->a, t->a, t->na * sizeof *o->a);
    o->na = o->capa = t->na;
    o->capops = t->nops ? t->nops : 1;
    size_t np = 0, ei = 0;
    for (size_t p = 0; p < t->nops; p++) {
        newpos[p] = (uint32_t)np;
        for (; ei + 1 < st->nearly && st->early[ei] == p; ei += 2) {
            uint32_t y = st->early[ei + 1];
            o->ops[np] = -(int32_t)(y + 1);
            o->a[y].f_pos = (uint32_t)np;
            /* freed on the thread of the op it now precedes: the region's
             * exit (main thread) or a gradient's allocation (backward) */
            o->a[y].fbwd = t->ops[p] > 0 && t->a[t->ops[p] - 1].bwd;
            np++;
        }
        int32_t v = t->ops[p];
        uint32_t id = (uint32_t)(v > 0 ? v : -v) - 1;
        if (v < 0 && st->nearly && undo_is_early(st, id))
            continue;
        if (used[id] >= 2) {
            /* a replay's extra: gone from the stream; a late free stays */
            if (v > 0) {
                o->a[id].a_pos = (uint32_t)np;
                o->a[id].f_pos = (uint32_t)np;
            } else if (used[id] == 3) {
                o->ops[np] = v;
                o->a[id].f_pos = (uint32_t)np;
                np++;
            }
            continue;
        }
        if (used[id]) {
            uint32_t x = twin[id];
            if (v < 0 && x != ADV_NONE && ext[x]) {
                o->ops[np] = -(int32_t)(x + 1);
                o->a[x].f_pos = (uint32_t)np;
                o->a[x].fbwd = t->a[id].fbwd;
                np++;
            }
            if (v > 0)
                o->a[id].a_pos = (uint32_t)np;
            else
                o->a[id].f_pos = (uint32_t)np;
            o->a[id].size = 0;
            continue;
        }
        if (v < 0 && ext[id])
            continue;
        o->ops[np] = v;
        if (v > 0)
            o->a[id].a_pos = (uint32_t)np;
        else
            o->a[id].f_pos = (uint32_t)np;
        np++;
    }
    newpos[t->nops] = (uint32_t)np;
    o->nops = np;
    /* an extended tensor whose twin was never freed stays alive, and so does
     * a discarded output whose backward the trace never reached */
    for (size_t y = 0; y < t->na; y++)
        if (ext[y] == 2) {
            o->a[y].f_pos = ADV_NONE;
            o->a[y].fbwd = 0;
        }
    for (size_t y = 0; y < t->na; y++)
        if (used[y] == 1 && twin[y] != ADV_NONE && ext[twin[y]] && t->a[y].f_pos == ADV_NONE) {
            o->a[twin[y]].f_pos = ADV_NONE;
            o->a[twin[y]].fbwd = 0;
        }
    return 0;
}

/* Op position x of t in the rewritten stream (past the end: its end;
 * ADV_NONE stays ADV_NONE). */
static uint32_t
undo_np(const undo_st *st, uint32_t x)
{
    return x == ADV_NONE ? ADV_NONE : st->newpos[x > st->t->nops ? st->t->nops : x];
}

/* The replays' extras, anchored in the rewritten stream and sorted, handed
 * to o, with o->xr_bytes the most bytes the extras at one anchor hold. */
static void
undo_place_extras(undo_st *st, adv_trace *o)
{
    const adv_trace *t = st->t;
    adv_extra *xr = st->xr;
    size_t nxr = st->nxr;
    for (size_t r = 0; r < nxr; r++) {
        xr[r].a_anchor = undo_np(st, xr[r].a_anchor);
        xr[r].f_anchor = undo_np(st, xr[r].f_anchor);
    }
    if (nxr > 1)
        am_sort(xr, nxr, sizeof *xr, xr_cmp);
    uint64_t sum = 0, mx = 0;
    for (size_t r = 0; r < nxr; r++) {
        sum = r && xr[r].a_anchor == xr[r - 1].a_anchor ? sum + t->a[xr[r].id].size
                                                        : t->a[xr[r].id].size;
        if (sum > mx)
            mx = sum;
    }
    o->xr_bytes = mx;
    o->xr = xr;
    o->nxr = nxr;
    st->xr = NULL;
}

/* The rest of o from t: layers and instances with their op positions moved
 * into the rewritten stream, the trace's scalars (no replays left; an OOM
 * request a replay made is the replay's). 0, -1 out of memory. */
static int
undo_copy_meta(const undo_st *st, adv_trace *o)
{
    const adv_trace *t = st->t;
    o->layers = malloc((t->nlayers ? t->nlayers : 1) * sizeof *o->layers);
    o->insts = malloc((t->ninsts ? t->ninsts : 1) * sizeof *o->insts);
    if (!o->layers || !o->insts)
        return -1;
    o->nlayers = o->caplayers = t->nlayers;
    o->ninsts = o->capinsts = t->ninsts;
    for (size_t i = 0; i < t->nlayers; i++) {
        adv_layer L = t->layers[i];
        L.pre_b = undo_np(st, L.pre_b);
        L.begin = undo_np(st, L.begin);
        L.end = undo_np(st, L.end);
        L.attn_b = undo_np(st, L.attn_b);
        L.attn_e = undo_np(st, L.attn_e);
        L.core_b = undo_np(st, L.core_b);
        L.core_e = undo_np(st, L.core_e);
        L.mlp_b = undo_np(st, L.mlp_b);
        L.mlp_e = undo_np(st, L.mlp_e);
        L.moe_act_discard = undo_np(st, L.moe_act_discard);
        L.moe_act_e = undo_np(st, L.moe_act_e);
        L.mla_up_b = undo_np(st, L.mla_up_b);
        o->layers[i] = L;
    }
    for (size_t i = 0; i < t->ninsts; i++) {
        o->insts[i] = t->insts[i];
        o->insts[i].begin = undo_np(st, t->insts[i].begin);
        o->insts[i].end = undo_np(st, t->insts[i].end);
    }
    if (t->npyf) {
        o->py = malloc(t->npyf * sizeof *o->py);
        if (!o->py)
            return -1;
        memcpy(o->py, t->py, t->npyf * sizeof *o->py);
        o->npyf = o->cappyf = t->npyf;
    }
    o->megatron_ranges = t->megatron_ranges;
    o->replays = 0;
    o->max_outside = t->max_outside;
    o->graph_pool_bytes = t->graph_pool_bytes;
    o->graph_capture_oom = t->graph_capture_oom;
    o->last_complete_iter = t->last_complete_iter;
    o->opt_state_init_end = undo_np(st, t->opt_state_init_end);
    o->trunc = t->trunc;
    o->oom = t->oom;
    o->oom_pos = undo_np(st, t->oom_pos);
    o->oom_phase = t->oom_phase;
    o->oom_boundary = t->oom_boundary;
    o->oom_lib = t->oom_lib;
    o->oom_in_capture = t->oom_in_capture;
    /* a request made by a replay is the replay's: candidates that replay do it */
    o->oom_request = t->oom_phase == AM_PH_backward_replay ? 0 : t->oom_request;
    o->oom_allocated = t->oom_allocated;
    o->oom_reserved = t->oom_reserved;
    o->oom_device_live = t->oom_device_live;
    o->init_bytes = t->init_bytes;
    o->optimizer_seen = t->optimizer_seen;
    return 0;
}

/* Units per forward instance that full recompute with setting s implies on
 * a chunk of lpc layers: ceil(lpc / n) groups (uniform), min(n, lpc) single
 * layers (block); Megatron-Core's TransformerBlock._checkpointed_forward ([M]
 * in docs/sources.md). */
static int
full_units_of(const adv_setting *s, int lpc)
{
    int n = s->full_n > 0 ? s->full_n : 1;
    if (lpc <= 0)
        return 0;
    return s->full_method == 1 ? (lpc + n - 1) / n : (n < lpc ? n : lpc);
}

/* The layers per chunk full recompute's groups are counted over: the
 * configuration's when the job has one pipeline stage and no virtual chunks,
 * else the most layers any instance of this rank shows (uneven stage layouts
 * are not read from the configuration). */
static int
undo_full_lpc(const undo_st *st, const adv_cfg *cfg)
{
    const adv_trace *t = st->t;
    int lpc = 0;
    for (size_t i = 0; i < t->nlayers;) {
        size_t j = i;
        while (j < t->nlayers && t->layers[j].inst == t->layers[i].inst)
            j++;
        if ((int)(j - i) > lpc)
            lpc = (int)(j - i);
        i = j;
    }
    if ((cfg->pp <= 1 && cfg->vpp <= 1) && adv_cfg_layers_per_chunk(cfg) > lpc)
        lpc = adv_cfg_layers_per_chunk(cfg);
    return lpc;
}

/* Forward instances per iteration on one rank that the configuration implies:
 * microbatches (global batch / (micro batch x data-parallel size)) times
 * model chunks; 0 when the configuration does not say. */
static int
cfg_insts_per_iter(const adv_cfg *cfg)
{
    long per = (long)(cfg->mbs > 0 ? cfg->mbs : 1) * (cfg->dp > 0 ? cfg->dp : 1);
    if (cfg->gbs <= 0 || cfg->gbs % per)
        return 0;
    return (int)(cfg->gbs / per) * (cfg->vpp > 1 ? cfg->vpp : 1);
}

/* Issue 14: the units the setting implies that the trace lacks (st->missing),
 * from the job's configuration where it has one. Per instance (microbatch x
 * chunk) whose backward the trace reached, full recompute implies the groups
 * of its chunk's layers (undo_full_lpc; a layer the trace does not show is a
 * unit the undo cannot match). Per complete iteration the trace recorded
 * (from its first to the last whose optimizer step it saw), the
 * configuration implies microbatches x chunks instances; each one the
 * trace's forward does not show (its layer ranges outside the NVTX profile
 * window, not recorded or not recognised) implies the units of the sparest
 * instance that it does show (full: the chunk's groups). Before, selective
 * units were counted from the recorded forward only: with the profile window
 * from step 1 and no Python frames, megasim's selective[mlp] run matched
 * "32 of 32 units" while iteration 0's 16 replays stayed in the trace without
 * recompute, as if complete. */
static void
undo_expected(undo_st *st, const adv_cfg *cfg, const adv_setting *s)
{
    const adv_trace *t = st->t;
    int lpc = undo_full_lpc(st, cfg), want = 0;
    if (s->full_method)
        want = full_units_of(s, lpc);
    int sparest = -1;
    for (size_t k = 0; k < t->ninsts; k++) {
        int have = 0;
        for (size_t q = 0; q < st->nu; q++)
            have += st->u[q].inst == (int32_t)k;
        if (sparest < 0 || have < sparest)
            sparest = have;
        if (!s->full_method || (t->trunc && st->c.bwd_start[k] == ADV_NONE))
            continue; /* its backward never ran: nothing to match */
        if (want > have)
            st->missing += want - have;
    }
    int per_iter = cfg_insts_per_iter(cfg), first = -1;
    int upi = s->full_method ? want : sparest;
    if (!per_iter || upi <= 0 || t->last_complete_iter < 0)
        return;
    for (size_t i = 0; i < t->na; i++)
        if (t->a[i].iteration >= 0 && (first < 0 || t->a[i].iteration < first))
            first = t->a[i].iteration;
    for (int it = first < 0 ? 0 : first; it <= t->last_complete_iter; it++) {
        int seen = 0;
        for (size_t k = 0; k < t->ninsts; k++)
            seen += t->insts[k].iteration == it;
        if (seen < per_iter)
            st->missing += (per_iter - seen) * upi;
    }
}

/* In a trace a fatal OOM cut in a backward phase, the instance whose
 * backward ran last (the greatest backward start) was cut in its backward:
 * its last units in replay order that found no replay were never replayed
 * (or their replay was cut), so they are not expected; the count of such
 * units. */
static int
undo_cut_tail(const undo_st *st)
{
    const adv_trace *t = st->t;
    if (!t->trunc || !t->oom ||
        (t->oom_phase != AM_PH_backward && t->oom_phase != AM_PH_backward_replay))
        return 0;
    int32_t last = -1;
    for (size_t k = 0; k < t->ninsts; k++)
        if (st->c.bwd_start[k] != ADV_NONE &&
            (last < 0 || st->c.bwd_start[k] > st->c.bwd_start[last]))
            last = (int32_t)k;
    int n = 0;
    for (size_t q = st->nu; q > 0; q--) {
        const uundo *x = &st->u[q - 1];
        if (x->inst != last)
            continue;
        if (x->ok)
            break;
        n++;
    }
    return n;
}

int
adv_trace_undo(const adv_trace *t, const adv_cfg *cfg, adv_trace *o, int *matched,
               int *units)
{
    memset(o, 0, sizeof *o);
    *matched = *units = 0;
    adv_setting s;
    adv_setting_of_cfg(cfg, &s);
    int rc = -1;
    undo_st st;
    memset(&st, 0, sizeof st);
    st.t = t;
    st.c.t = t;
    if (prep(&st.c) < 0)
        goto out;
    /* the active setting's units, in replay order */
    if ((s.full_method ? undo_units_full(&st, &s) : undo_units_selective(&st, &s)) < 0)
        goto out;
    undo_drop_kept(&st);
    undo_expected(&st, cfg, &s);
    if (st.nu > 1)
        am_sort(st.u, st.nu, sizeof *st.u, uu_cmp);
    undo_windows(&st);
    *units = (int)st.nu + st.missing;
    /* their replays among the backward thread's allocations, then the trace
     * without them */
    if (undo_backward_allocs(&st) < 0 || undo_match(&st, matched, units) < 0 ||
        undo_input_frees(&st) < 0 || undo_early_frees(&st) < 0 ||
        undo_rewrite_ops(&st, o) < 0)
        goto out;
    *units -= undo_cut_tail(&st);
    undo_place_extras(&st, o);
    if (undo_copy_meta(&st, o) < 0)
        goto out;
    o->undo_by_size = st.by_size;
    rc = 0;
out:
    for (size_t k = 0; k < st.nu; k++) {
        free(st.u[k].f);
        free(st.u[k].o);
    }
    free(st.u);
    free(st.twin);
    free(st.newpos);
    free(st.early);
    free(st.bal);
    free(st.used);
    free(st.ext);
    free(st.xr);
    cf_free(&st.c);
    if (rc < 0)
        adv_trace_free(o);
    return rc;
}
