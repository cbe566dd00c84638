/* analysis.h: the results of analysing one source (a rank) and a job.
 *
 * Reporters (report_text.c, report_json.c) take these structs, never bytes.
 * Sizes in bytes, times in ns since the source's start.
 */
#ifndef RECOMP_ANALYZER_ANALYSIS_H
#define RECOMP_ANALYZER_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "model.h"
#include "placement.h"

enum { AM_L_DEVICE = 0, AM_L_TENSOR = 1, AM_NLEVELS = 2 };

/* Attribution of one allocation. layer: 0 = none, else local 1-based. */
typedef struct am_attr {
    uint8_t phase;            /* am_phase of the allocation */
    uint8_t boundary;         /* am_boundary */
    int32_t layer;            /* local 1-based layer, 0 none */
    int16_t fwd;              /* the forward pass it was made in: its 0-based ordinal in
                               * its iteration, -1 none (a backward, before the first
                               * iteration); its model chunk: am_rank_chunk */
    uint8_t first;            /* made in the trace's first recorded iteration */
} am_attr;

/* One group of a live set: phase of allocation x boundary x layer (x the
 * allocation site when the rank groups by it, am_rank.by_site). */
typedef struct am_group {
    uint8_t phase, boundary;
    int32_t layer;            /* as reported (global when known), 0 none */
    uint32_t site;            /* index + 1 into am_rank.sites, 0 none */
    uint64_t bytes;
    uint64_t count;
} am_group;

typedef struct am_setter {
    int pretrace;             /* memory that existed before the trace (am_event.pretrace) */
    uint64_t addr, size;
    uint32_t tid;
    am_attr attr;
    uint8_t lib;
    char where[256];          /* the allocating thread's range stack, "a > b" */
    char python[512];         /* its Python stack, "f (file:line) < g", "" unknown (am_event.pystack) */
} am_setter;

/* A peak at one level. */
/* One live allocation at a peak: its address and size in bytes. */
typedef struct am_block {
    uint64_t addr, size;
} am_block;

typedef struct am_peak {
    int known;                /* 0: n/a, reason says why */
    const char *reason;
    uint64_t bytes;
    uint64_t time_ns;
    int iteration;            /* -1 before the first iteration (init) */
    uint8_t phase;            /* phase of the allocation that set it */
    uint8_t program_phase;    /* the program's phase then */
    am_setter setter;
    uint64_t event_index;     /* ordinal of the setting event (pass 2 target) */
    am_group *groups;         /* sorted by bytes, descending */
    size_t ngroups;
    uint64_t untracked_bytes; /* source's own total minus the tracked live set */
    uint64_t by_lib[AM_LIB_COUNT]; /* device level: live bytes per owner library */
    uint64_t reserved_bytes;  /* tensor level with totals: PyTorch's reserved then */
    am_block *blocks;         /* with am_opts.peak_blocks: the live blocks, by address */
    size_t nblocks;
} am_peak;

typedef struct am_phase_span {
    uint8_t phase;
    uint64_t start_ns, end_ns;
} am_phase_span;

typedef struct am_iteration {
    int number;
    uint64_t start_ns, end_ns;
    uint64_t peak[AM_NLEVELS];      /* per-level peak inside the iteration */
    uint8_t peak_phase[AM_NLEVELS];
    uint8_t peak_carried[AM_NLEVELS]; /* 1: the peak is the level the iteration
                                       * started at (nothing in it went higher) */
    int microbatches;
    am_phase_span *phases;
    size_t nphases, capphases;
} am_iteration;

typedef struct am_retry {
    uint64_t t_ns, size;
    int iteration;
    uint8_t phase;
} am_retry;

typedef struct am_oom {
    uint64_t t_ns;
    uint32_t tid;
    int iteration;
    uint8_t phase;
    uint8_t lib;              /* owner library of the failing call */
    uint16_t api;
    int32_t status;
    uint64_t requested;       /* at the CUDA API: the segment size asked for; for a
                               * page of expandable segments the allocator's request,
                               * at least: the pages it created for the request
                               * before one failed, plus that one
                               * (am_event.request_pages; PyTorch's "Tried to
                               * allocate" is the exact figure) */
    uint64_t call_size;       /* what the failing call asked for (a page under
                               * expandable segments); the sweep's only */
    uint64_t free_bytes, total_bytes; /* 0 unknown */
    uint64_t live[AM_NLEVELS];
    am_group *groups;         /* device-level live set, grouped */
    size_t ngroups;
    char **frames;            /* symbolised "module+0xOFF" (or 0x... raw) */
    size_t nframes;
    char where[256];
    uint64_t offset;          /* file offset of the OOM record */
    int past_limit;           /* recorded after the byte limit stopped recording:
                               * iteration, phase and live set are those of the
                               * last recorded event before it */
    size_t shim_frames;       /* frames inside librecompshim.so, dropped */
} am_oom;

/* What part of the run a rank's source holds (docs/analysis.md, Coverage). */
typedef struct am_coverage {
    int complete;             /* 1: the whole run as far as the source knows */
    int capped, windowed;
    const char *status;       /* "complete", "capped", "windowed", "capped_windowed" */
    char summary[160];        /* "capped at 1.234 s", "windowed: steps 3..5" */
    char meaning[768];        /* what is missing and what it means for the figures */
} am_coverage;

typedef struct am_rank {
    am_source *src;
    const char *path;
    int rank;                 /* meta rank, or index when unknown */
    int levels;               /* AM_LVL_* seen in the trace */
    const char *tensor_na;    /* why there is no tensor level */
    am_peak peak[AM_NLEVELS];
    am_peak iter_peak[AM_NLEVELS]; /* --iteration K */
    int iter_selected;        /* K, or -1 */
    am_iteration *iters;
    size_t niters;
    uint64_t init_end_ns;
    int steady;               /* steady state reached */
    const char *steady_reason;
    int opt_init_iteration;   /* -1 never */
    int opt_state_preexisting;/* 1: the first optimizer step left nothing allocated:
                               * plain optimizer (the state existed before the trace,
                               * or the optimizer keeps none); decided in pass 1 */
    int first_opt_iteration;  /* iteration of the first optimizer step, -1 none */
    int opt_inferred;         /* 1: an optimizer step was inferred from an iteration
                               * that ended in grad sync without an optimizer range */
    am_oom *oom;              /* first fatal OOM, or NULL */
    size_t noom_fatal;
    am_retry *retries;
    size_t nretries;
    am_retry *caught;         /* OOMs the job caught and ran on from (a later
                               * allocation of the failing thread succeeded and
                               * the trace closed cleanly): not fatal, in no
                               * peak, verdict or `oom` gate; time order */
    size_t ncaught;
    /* cudaMemGetInfo samples */
    size_t nmeminfo;
    uint64_t meminfo_total;
    uint64_t min_free;
    uint64_t max_other;       /* max over samples of total - free - tracked device */
    /* layer numbering */
    int layer_global;         /* 1: layers reported as Megatron's global numbers */
    am_placement place;       /* Megatron's layer placement from the command line
                               * (placement.h; num_layers 0: unknown) */
    int microbatches;         /* per iteration from the command line, 0 unknown */
    int first_fwd_offset;     /* forward passes of the first recorded iteration before a
                               * window opened (am_rank_chunk), -1 unknown */
    int pp, stage, layers_per_stage;
    int layers_per_chunk;     /* layers of one model chunk on this rank (VPP: per
                               * virtual stage), 0 unknown: a forward pass of the
                               * next microbatch starts after this many layers */
    const char *stage_source; /* "command line", "p2p peers", or NULL */
    /* counts */
    uint64_t nevents, nallocs, nfrees, nunmatched_frees, ncollectives;
    int has_step_markers;
    int layer_signal;         /* 0 none, 1 Megatron layer ranges, 2 TE fallback */
    /* allocation sites (the allocating Python function, "file:line:function",
     * from importers that know it), interned; groups refer to them */
    char **sites;
    size_t nsites, capsites;
    uint32_t *site_hash;      /* open addressing: index + 1, 0 empty */
    size_t site_hcap;
    int by_site;              /* not a Megatron job and sites known: live sets are
                               * grouped by allocation site too */
    am_coverage coverage;
    int device_lower_bound;   /* the device peak is below the tensor peak: device
                               * memory outside the recorded part is missing */
    /* analysis notes (NUL-terminated lines) */
    char **notes;
    size_t nnotes;
} am_rank;

/* MoE dispatch all-to-alls seen in forward (attribute/moe_dispatch.c): how
 * many, how many received other than they sent, the largest received
 * (bytes), what the rank sent in that one and where (layer as the report
 * numbers them, iteration), the smallest received. */
typedef struct am_moe_dispatch {
    size_t n, uneven;
    uint64_t max_recv, sent_at_max, min_recv;
    int layer, iteration;     /* layer: local (am_rank_layer numbers it) */
    int fwd, first;           /* its forward pass (am_attr) */
} am_moe_dispatch;

/* An observer of an analysis' first pass (capture.c: --perfetto, --html):
 * every event in time order, and every change of a level's counter (the
 * value the peaks are taken from, so the observer sees the peak exactly). */
typedef struct am_observer {
    void *ctx;
    void (*event)(void *ctx, const am_event *ev);
    void (*counter)(void *ctx, int level, uint64_t t_ns, uint64_t bytes);
} am_observer;

/* Options of an analysis. */
typedef struct am_opts {
    int iteration;            /* --iteration K or -1 */
    const am_observer *observe; /* NULL none */
    int phase_spans;          /* 1: keep each iteration's phase spans (only the JSON
                               * report lists them); 0: drop them, so memory does not
                               * grow with the number of phase changes */
    int peak_blocks;          /* 1: keep the live blocks (address, size) at each peak
                               * (am_peak.blocks; --peak-blocks), so that two views of
                               * one run can be compared block by block */
    int replay_peaks;         /* 1: take the live set at each peak by replaying the
                               * source (pass 2) instead of from pass 1's journals
                               * (peak_journal.h); the two give identical results,
                               * tests compare them */
} am_opts;

/* Analyse one source (one streaming pass; a second one, replaying the
 * source to its peaks, only where keeping the live set at a peak during the
 * first ran out of memory, or with replay_peaks). Fills *out (caller zeroes it);
 * returns 0, or -1 with a line naming file and offset in err. */
int am_analyze(am_source *src, const am_opts *opts, am_rank *out, char *err, size_t errlen);

void am_rank_free(am_rank *r);

/* Analyse srcs[i] into *outs[i] (zeroed by the caller) for i in [0, n) with
 * `workers` threads (< 2: in this thread, in order), each taking the next
 * rank when done with one, so memory grows with the workers, not the ranks:
 * one rank's working set per worker (plus every rank's results). The results
 * are identical to analysing in turn. Returns 0; or -1 with the error of the
 * first failing rank in input order in err and its index in *failed. Every
 * rank is analysed either way (am_analyze takes each source into its
 * am_rank, which the caller frees). */
int am_analyze_ranks(am_source *const *srcs, am_rank *const *outs, size_t n, const am_opts *opts,
                     int workers, size_t *failed, char *err, size_t errlen);

/* Worker threads for per-rank work: the online CPUs (1..256). */
int am_workers_default(void);

/* Call fn(ctx, i) once for every i in [0, n) on `workers` threads (< 2: in
 * this thread, in order); a worker takes the next i when done with one. fn
 * must touch only item i's data. Every i is called, failing or not. Returns
 * the lowest i whose call returned < 0, or n when none did. */
size_t am_parallel_for(size_t n, int workers, int (*fn)(void *ctx, size_t i), void *ctx);

/* Open paths[i] into srcs[i] for i in [0, n) (am_source_open: each file is
 * read and validated), `workers` at a time. A file that cannot be opened
 * leaves srcs[i] NULL and its one-line error in errs[i]. Returns the lowest
 * failing i, or n. */
size_t am_open_sources(const char *const *paths, size_t n, am_source **srcs, char (*errs)[1024],
                       int workers);

/* The allocation site of a group ("file:line:function"), or NULL. */
const char *am_site_name(const am_rank *r, uint32_t site);

/* Append a note (printf-style) to r->notes. */
void am_note(am_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The model chunk of forward pass `fwd` of an iteration (am_attr.fwd, first:
 * the trace's first recorded iteration) on rank r: the interleaved schedule's
 * order (placement.h), the first recorded iteration of a windowed trace
 * shifted by the passes before the window (first_fwd_offset); 0 without
 * virtual stages; -1 unknown (a backward pass, a window that opened in the
 * trace's only iteration). */
int am_rank_chunk(const am_rank *r, int fwd, int first);

/* The layer number a report shows for local 1-based layer `layer` made in
 * forward pass `fwd` (am_attr: fwd, first) on rank r: Megatron's global
 * 1-based number when the rank's placement is known (r->layer_global;
 * placement.h: the first layer of that pass's model chunk on r's stage + the
 * local index), else the local index; 0 for none, and 0 when the chunk is
 * unknown under a known placement (am_rank_chunk) rather than a local index
 * among global ones. */
int32_t am_rank_layer(const am_rank *r, int32_t layer, int fwd, int first);

struct adv_verdict;

/* Job-level results (ranks.c). */
typedef struct am_job {
    am_rank *ranks;
    size_t nranks;
    char id[128];             /* job identity shown in reports */
    int hot;                  /* index into ranks of the hot rank, -1 */
    int hot_level;            /* AM_L_* compared */
    uint64_t min_peak, max_peak;
    int rank_selected;        /* 1: --rank given: job-level fields cover only it */
    int rank_filter;          /* the N of --rank N */
    size_t nfiles;            /* traces given (before --rank) */
    struct adv_verdict *verdict; /* the recompute advisor's (advisor.h), NULL none */
} am_job;

/* The job key of a source: the job ("torchelastic_run_id=ID", "slurm_job_id=ID",
 * "master=HOST:PORT") plus the run ("run_id=DIR") and attempt ("attempt=N")
 * when known; "" none. The report's job line; joining uses am_job_join_key. */
void am_job_key(const am_meta *m, char *buf, size_t n);

/* The key that joins sources into one job: the launcher's identity and
 * attempt ("slurm=123.0 attempt=0", rules in recomp/jobid.h, read from the
 * recorded environment), so that ranks split over several run directories
 * (one per node) join; am_job_key (which names the run directory) when the
 * source has no launcher identity. Sources with different keys are never
 * one job. */
void am_job_join_key(const am_meta *m, char *buf, size_t n);

/* Sources that share a join key are one job only if they are one run
 * (am_job_run_groups), in one directory or in several: the ranks of a job
 * are alive together, while a reused id (a fixed --rdzv-id, the static
 * rendezvous's MASTER_ADDR:MASTER_PORT) names later jobs too, and two runs
 * copied into one folder are two jobs. Returns 0 for one run; -1 with a
 * message naming two traces that did not meet in err otherwise. */
int am_job_check_concurrent(am_source *const *srcs, size_t n, char *err, size_t errn);

/* The runs among srcs[0..n): group[i] = 1, 2, ... numbered by first
 * wall-clock start. Two traces are one run when their spans overlap in one
 * chain (the ranks of one job are alive together; a killed trace's span
 * reaches its file's mtime) or when both record the same launch
 * (RECOMPSHIM_RUN_ID, inherited by every rank of one launcher's process
 * tree, whose short ranks need not overlap). 0 for a trace without a start
 * time. Returns the number of runs, or -1 out of memory. */
int am_job_run_groups(am_source *const *srcs, size_t n, int *group);

/* The ranks of the job (its world size) with no trace among the ranks
 * analysed, as "rank 2, ranks 5-7" into buf (cut at n); the number of
 * them. 0 with --rank (the selection is not a partial job) or an unknown
 * world size. */
size_t am_job_missing_ranks(const am_job *j, char *buf, size_t n);

/* Cross-rank: pipeline stages from the command line, hot rank, spread. */
void am_job_finish(am_job *j);


#endif
