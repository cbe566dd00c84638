/* timeline.h: the streaming timeline: per-thread NVTX stacks, thread roles,
 * the program's phase, iterations, microbatches and layer counters.
 *
 * Fed every event in time order (tl_event); classifies each allocation
 * (tl_attr). Deterministic: a second pass over the same events gives the
 * same answers, which is what lets the peak sweep replay to its peak.
 *
 *   events --> tl_event() --> thread stacks, program phase, iteration
 *                  |                                 |
 *   ALLOC  --> tl_attr()  = phase x boundary x layer (+ pending TE rule)
 */
#ifndef RECOMP_ANALYZER_TIMELINE_H
#define RECOMP_ANALYZER_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "analysis.h"
#include "catalog.h"
#include "catalog_memo.h"
#include "model.h"

typedef struct tl_frame {
    const char *name;
    uint32_t len;
    uint32_t domain_id;
    am_cat_match m;
    uint8_t boundary;         /* resolved (inherit applied) */
    uint8_t replay;           /* FWD frame on a backward thread */
    uint8_t eval;             /* inside an EVAL frame */
    uint8_t save;             /* inside a SAVE frame (checkpoint save) */
    uint32_t call_id;         /* module call this frame belongs to */
} tl_frame;

typedef struct tl_pending {
    uint64_t addr;
    uint64_t seq;
    uint64_t size;            /* bytes (the CP buffer rule, cp_comm.c) */
    uint8_t space, levels;
    uint8_t phase_open;       /* made between the grad sync and the optimizer on the main
                               * thread: an optimizer call resolving it also sets its phase */
} tl_pending;

typedef struct tl_thread {
    uint32_t tid;
    uint8_t role;             /* am_role */
    char name[16];
    tl_frame *stack;
    size_t depth, cap;
    uint32_t module_call;     /* call id of the innermost non-NVTE frame, 0 top */
    uint8_t last_nvte_bd;     /* boundary of the last NVTE range in module_call */
    uint32_t last_nvte_call;
    tl_pending *pending;      /* allocations waiting for the next NVTE range */
    size_t npending, cappending;
    uint32_t pending_call;
    int bwd_layer;
    tl_pending *cpc;          /* core-attention allocations a CP collective may use
                               * (cp_comm.c), made in module call cpc_call */
    size_t ncpc, capcpc;
    uint32_t cpc_call;
    int cpg_depth;            /* ncclGroupStart nesting; sends and receives */
    uint64_t cpg_send, cpg_recv; /* posted in the open group, bytes */
    int moeg_depth;           /* the same group, for the MoE dispatch (moe_dispatch.c) */
    uint64_t moeg_send, moeg_recv;
    uint32_t moeg_recv_peers; /* receives from a new peer in the open group */
    int32_t moeg_last_peer;
    uint32_t moe_call;        /* the .mlp call whose dispatch was counted */
} tl_thread;


/* Called when pending allocations get a boundary (seq, addr, space, levels,
 * new boundary) and, for an allocation the optimizer step made before its
 * first TE call (TE FusedAdam's lazy exp_avg / exp_avg_sq), a new phase
 * (optimizer or optimizer_state_init; AM_PH_COUNT: keep); set by the sweep. */
typedef void (*tl_resolve_fn)(void *ctx, const tl_pending *p, uint8_t boundary, uint8_t phase);

typedef struct tl {
    int pid;
    tl_thread *threads;
    size_t nthreads, capthreads;
    uint8_t phase;            /* am_phase of the program now */
    int iteration;            /* -1 before the first */
    int next_iteration;       /* numbering when there are no markers */
    int markers;              /* ProfilerStep markers seen */
    int opt_in_iter;          /* optimizer phase seen in this iteration */
    int opt_init_done;        /* the first optimizer step is over */
    int opt_init_iteration;
    int bwd_in_iter;
    int fwd_layer;            /* layer counter of the current forward */
    int fwd_k;                /* its ordinal in the iteration (am_attr.fwd), -1 none */
    int fwd_max_layer;
    int layer_ranges_seen;
    int te_layers_seen;
    int post_norm_seen;       /* post-process: the final layernorm's TE call ran */
    int post_logits_seen;     /* post-process: the output layer's logits were allocated */
    int capture_depth;        /* CUDA-graph capture windows open */
    uint32_t next_call;
    uint64_t now;
    /* results being built */
    am_rank *out;
    am_iteration *cur;        /* current iteration or NULL (init) */
    /* START/END ranges open: id -> signal (small, linear) */
    struct { uint64_t id; uint8_t signal; } *starts;
    size_t nstarts, capstarts;
    tl_resolve_fn resolve;
    void *resolve_ctx;
    size_t npending_total;
    am_catalog_memo memo;     /* catalog verdicts by (domain, name) */
    int no_spans;             /* 1: iterations get no phase spans (nobody reads them) */
    am_moe_dispatch moe;      /* moe_dispatch.c */
    size_t last_thread;       /* index of the thread record tl_thread_get returned
                               * last: consecutive events are mostly of one thread */
} tl;

/* Set up for a source with process id pid; results go to out (iterations,
 * init_end_ns, opt_init_iteration, counters). */
void tl_init(tl *t, int pid, am_rank *out);
void tl_fini(tl *t);

/* Feed one event (every kind). Returns 0, -1 out of memory. */
int tl_event(tl *t, const am_event *ev);

/* Attribution of allocation ev (kind ALLOC) made now, with seq = its
 * ordinal; may register it as pending (TE nearest-range rule). */
am_attr tl_attr(tl *t, const am_event *ev, uint64_t seq);

/* The thread record of tid (created when new), or NULL on out of memory:
 * tl_thread_get past its one-entry cache (t->last_thread). */
tl_thread *tl_thread_find(tl *t, uint32_t tid);

/* The thread record of tid (created when new), or NULL on out of memory.
 * Inline: called two or three times per event. The cache is a field of t,
 * not of the OS thread, so analyses on worker threads keep their own. */
static inline tl_thread *
tl_thread_get(tl *t, uint32_t tid)
{
    size_t last = t->last_thread;
    if (last < t->nthreads && t->threads[last].tid == tid)
        return &t->threads[last];
    return tl_thread_find(t, tid);
}

/* "a > b > c" of tid's stack into buf. */
void tl_where(tl *t, uint32_t tid, char *buf, size_t n);

/* 1 when boundary b is inside a transformer layer (has a layer index). */
int tl_layer_boundary(uint8_t b);

/* Context parallelism's communication buffers (cp_comm.c): note tensor
 * allocation ev (seq, attribution a) as a candidate buffer of the next CP
 * collective; forget th's candidates; a collective ev on th relabels the
 * candidates it uses as boundary cp_comm (through t->resolve). */
void tl_cp_note(tl *t, tl_thread *th, const am_event *ev, uint64_t seq, am_attr a);
void tl_cp_clear(tl *t, tl_thread *th);
void tl_cp_collective(tl *t, tl_thread *th, const am_event *ev);

/* The MoE dispatch (moe_dispatch.c): collective ev on th updates t->moe;
 * tl_moe_report adds a note to t->out when the dispatches were uneven. */
void tl_moe_collective(tl *t, tl_thread *th, const am_event *ev);
void tl_moe_report(tl *t);

/* Close the timeline at time end_ns (the last event). */
void tl_end(tl *t, uint64_t end_ns);

#endif
