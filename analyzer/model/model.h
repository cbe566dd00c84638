/* model.h: the one in-memory event model every source produces.
 *
 * Data flows one way (docs/architecture.md): source -> am_event stream -> timeline
 * (phases, iterations, layers) -> attribution (boundary) -> peak/OOM sweep
 * -> reports. A source is anything that can stream events in time order:
 * the native recompshim trace (source_native.c) today; PyTorch memory
 * snapshots and Kineto traces (importers) next. Analyses never ask a source
 * for anything but the metadata below and the next event, so every analysis
 * works on every source.
 *
 * Contract for a source (an importer author's checklist):
 *   - events come in non-decreasing t_ns (ns since the source's own start);
 *     ties keep the source's order;
 *   - next() stores one event and returns 1, 0 at the end, -1 on an error
 *     (message in am_source_error, naming file and offset);
 *   - rewind() restarts the stream from the first event, producing exactly
 *     the same sequence again (analyses make a small fixed number of passes);
 *   - pointers in an event (names, frames) stay valid until close();
 *   - memory held is bounded by definitions (strings, threads), never by the
 *     number of events.
 *
 * Levels. Every allocation/free counts at one or both levels (a bitmask):
 *   AM_LVL_DEVICE  what the GPU sees: cudaMalloc segments, cuMem physical
 *                  memory (VMM create/release), memory outside PyTorch;
 *   AM_LVL_TENSOR  what PyTorch's allocated counter sees: TENSOR records
 *                  (the allocator report hook, block sizes), the allocations
 *                  of a tensor mode (async / nocache, request sizes), or an
 *                  importer's blocks.
 * Host-pinned and managed memory are carried with their mem kind and never
 * count in device peaks (nor tensor peaks).
 *
 * Units: times in ns, sizes in bytes, everywhere.
 */
#ifndef RECOMP_ANALYZER_MODEL_H
#define RECOMP_ANALYZER_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* ---- events ---- */

typedef enum am_ev_kind {
    AM_EV_ALLOC = 1,      /* addr, size, levels, mem, lib, caller; opt. totals */
    AM_EV_FREE,           /* addr (size 0 when unknown: the live set knows) */
    AM_EV_RANGE_PUSH,     /* name, domain: pushed on tid's stack */
    AM_EV_RANGE_POP,      /* domain: innermost range of that domain on tid */
    AM_EV_RANGE_START,    /* name, domain, id: start/end range (any thread) */
    AM_EV_RANGE_END,      /* id */
    AM_EV_MARK,           /* name, domain: an instant */
    AM_EV_THREAD_NAME,    /* name: tid's name from now on */
    AM_EV_COLLECTIVE,     /* op, size (bytes), peer, id = communicator */
    AM_EV_OOM,            /* size requested, free/total (0 unknown), frames */
    AM_EV_MEMINFO,        /* free/total from cudaMemGetInfo */
    AM_EV_GRAPH_BEGIN,    /* CUDA-graph capture window opens (id = stream) */
    AM_EV_GRAPH_END,      /* ... closes */
} am_ev_kind;

/* Level bits of an allocation or free. */
enum { AM_LVL_DEVICE = 1, AM_LVL_TENSOR = 2 };

/* Memory kinds (same values as the trace format's rs_mem_kind). */
typedef enum am_mem { AM_MEM_DEVICE = 0, AM_MEM_HOST = 1, AM_MEM_MANAGED = 2 } am_mem;

/* Address spaces of allocation keys: a pointer, or a driver handle
 * (cuMemCreate physical memory, released by handle). */
enum { AM_SPACE_PTR = 0, AM_SPACE_HANDLE = 1 };

/* Owner library of an allocation (from the caller address; catalog.def). */
typedef enum am_lib {
    AM_LIB_UNKNOWN = 0,
    AM_LIB_PYTORCH,       /* libtorch*, libc10* */
    AM_LIB_NCCL,          /* libnccl */
    AM_LIB_CUBLAS,        /* libcublas, libcublasLt */
    AM_LIB_TE,            /* libtransformer_engine */
    AM_LIB_CUDNN,         /* libcudnn* */
    AM_LIB_OTHER,         /* any other known module */
    AM_LIB_COUNT
} am_lib;

/* Collective ops (values of the trace format's rs_coll_op). */
typedef enum am_coll {
    AM_COLL_NONE = 0,
    AM_COLL_ALL_REDUCE = 1, AM_COLL_REDUCE_SCATTER = 2, AM_COLL_ALL_GATHER = 3,
    AM_COLL_BROADCAST = 4, AM_COLL_REDUCE = 5, AM_COLL_SEND = 6, AM_COLL_RECV = 7,
    AM_COLL_ALL_TO_ALL = 8, AM_COLL_GROUP_START = 9, AM_COLL_GROUP_END = 10,
    AM_COLL_COMM_INIT = 11, AM_COLL_COMM_SPLIT = 12, AM_COLL_COMM_DESTROY = 13,
} am_coll;

typedef struct am_event {
    uint64_t t_ns;            /* ns since the source's start */
    uint32_t tid;             /* OS thread id of the thread it happened on */
    uint8_t kind;             /* am_ev_kind */
    uint8_t levels;           /* AM_LVL_* (ALLOC/FREE) */
    uint8_t mem;              /* am_mem (ALLOC/FREE/OOM) */
    uint8_t lib;              /* am_lib of the caller (ALLOC/FREE/OOM) */
    uint8_t space;            /* AM_SPACE_* of addr */
    uint8_t has_totals;       /* 1: total_allocated/total_reserved are set */
    uint16_t api;             /* source-specific API code (native: rs_api) */
    uint32_t op;              /* am_coll (COLLECTIVE) */
    int32_t peer;             /* COLLECTIVE: send/recv peer, root, else -1 */
    int32_t device;           /* -1 unknown */
    int32_t status;           /* error code of the call (OOM) */
    uint64_t addr;            /* pointer or handle (see space) */
    uint64_t size;            /* bytes (ALLOC, FREE when known, OOM request, COLLECTIVE) */
    uint64_t id;              /* START/END range id; COLLECTIVE communicator; graph stream */
    uint64_t caller;          /* return address of the allocating call, 0 */
    uint64_t free_bytes;      /* MEMINFO/OOM: device free bytes then, 0 unknown */
    uint64_t total_bytes;     /* MEMINFO/OOM: device total bytes, 0 unknown */
    uint64_t total_allocated; /* ALLOC/FREE with has_totals: PyTorch's allocated after it */
    uint64_t total_reserved;  /* ALLOC/FREE with has_totals: PyTorch's reserved after it */
    const char *name;         /* range/mark/thread name, not NUL-terminated */
    uint32_t name_len;
    uint32_t nframes;         /* OOM: native stack, innermost first */
    const char *domain;       /* NVTX domain name; NULL = default domain */
    uint32_t domain_len;
    uint32_t domain_id;       /* source's domain id (0 = default) for push/pop pairing */
    const uint64_t *frames;
    /* ALLOC: the allocation site, the allocating Python function as
     * "file:line:function" (importers that know it: snapshots' frames,
     * Kineto's python_function events); NULL when unknown (the native trace) */
    const char *site;
    uint32_t site_len;
    uint64_t src_offset;      /* where in the source (file byte offset), for messages */
    /* ALLOC: 1 when the memory existed before the trace (a snapshot's
     * segments from before its window, the reserved amount a Kineto trace
     * shows at its first memory event): when and in which phase it was
     * allocated is unknown, and it is no allocation of the traced program */
    uint8_t pretrace;
    /* OOM of one page of PyTorch's expandable segments (a failed cuMemCreate
     * of size bytes): the pages of that size the same thread created for the
     * same request before this one failed (no other memory event between),
     * which the allocator releases (or keeps mapped, reserved but never
     * allocated) when the request fails. The allocator's request is at least
     * (request_pages + 1) * size; 0 when the failed call is no such page.
     * (Kept in padding: am_event stays 208 bytes.) */
    uint32_t request_pages;
    /* ALLOC/OOM: the Python stack it was made in, innermost first, as
     * "f (dir/file.py:line) < g < h" (native traces from format 1.3: the
     * code objects' first lines); NULL when unknown */
    const char *pystack;
    uint32_t pystack_len;
    /* ALLOC: the same stack's frame ids, innermost first (native traces: one
     * id per function's code object); NULL when unknown */
    const uint32_t *pychain;
    uint32_t pychain_len;
    /* ALLOC/OOM: made while loading a checkpoint, from the whole Python
     * stack (native traces): AM_PYLOAD_COPY inside `load_checkpoint`,
     * AM_PYLOAD_STATE inside the optimizer-state initialisation the load
     * calls; 0 otherwise or unknown */
    uint8_t py_load;
} am_event;

enum { AM_PYLOAD_NONE = 0, AM_PYLOAD_COPY = 1, AM_PYLOAD_STATE = 2 };

/* ---- per-source metadata ---- */

typedef struct am_meta {
    const char *path;         /* as given */
    const char *format;       /* "recompshim trace v1.0", "pytorch snapshot", ... */
    int rank, local_rank, world_size;   /* -1 unknown */
    int pid;
    int ppid;                 /* the parent's pid (native traces), 0 unknown */
    int device;               /* -1 unknown */
    char host[64];
    /* Job identity (empty strings when unknown). Two sources belong to one
     * job when their first non-empty key in this order matches:
     * torchelastic_run_id, slurm_job_id, master; and one run of it when
     * run_id (the run directory) and attempt match too. */
    char torchelastic_run_id[64];
    char slurm_job_id[32];
    char master[80];
    char run_id[96];          /* the run directory's name (native traces) */
    int attempt;              /* TORCHELASTIC_RESTART_COUNT, -1 unknown */
    /* Wall-clock span of the trace, ns since the epoch (0 unknown): from the
     * header's start to its clean close, or to the file's last modification
     * for a trace that was not closed. Ranks of one job overlap in time. */
    uint64_t real_start_ns, real_end_ns;
    uint64_t device_capacity; /* bytes, 0 unknown */
    const char *mode;         /* "default", "async", "nocache", or importer's */
    int closed;               /* 1 clean exit / complete file; 0 killed or cut */
    /* (trace format 1.6) How the process left when the shim saw it leave:
     * exit_via an enum rs_exit_via (1 _exit, 2 _Exit; 0 not seen), with
     * the status passed; exit_sealed: the trace's shim seals a trace at
     * _exit/_Exit (1.6 and later), so a trace not closed was killed (or is
     * still running), never a clean _exit (before 1.6 the two look alike). */
    int exit_via, exit_status, exit_sealed;
    /* Command line: argc strings (valid until close). */
    size_t argc;
    const char *const *argv;
    /* Environment that matters: "NAME=value" strings. */
    size_t nenv;
    const char *const *env;
    /* Warnings found by the source (not closed, dropped records, ...). */
    size_t nwarnings;
    const char *const *warnings;
    uint64_t record_count;    /* events/records the source holds (informative) */
    /* Coverage: what part of the run the source holds (native traces).
     * Set at open, except window_opened/open_ns/closed/close_ns, which
     * the source fills while streaming (final after the first pass). */
    int limit_hit;            /* 1: a byte limit (RECOMPSHIM_MAX_BYTES) stopped recording */
    uint64_t limit_ns;        /* when, ns since the start (0 unknown) */
    uint64_t max_bytes, dropped_records;
    int window_kind;          /* 0 none, 1 time (ns), 2 events (index), 3 steps */
    uint64_t window_a, window_b;
    int window_never_opened;  /* the source says the window never opened */
    int window_opened, window_closed;
    uint64_t window_open_ns, window_close_ns; /* first open, last close */
    uint32_t salvaged_chunks; /* --salvage: damaged chunks skipped */
    uint64_t salvage_lost_bytes; /* their record bytes */
} am_meta;

/* ---- the source interface ---- */

typedef struct am_source am_source;

typedef struct am_source_ops {
    const char *name;                                    /* "native", ... */
    int (*next)(am_source *s, am_event *ev);             /* 1 event, 0 end, -1 error */
    int (*rewind)(am_source *s);                         /* 0 ok, -1 error */
    void (*close)(am_source *s);
    /* "module+0xOFF" for a code address into buf; 1 when known. May be NULL. */
    int (*format_addr)(am_source *s, uint64_t addr, char *buf, size_t n);
} am_source_ops;

struct am_source {
    const am_source_ops *ops;
    am_meta meta;
    char error[512];          /* last error line: "FILE: offset N: what" */
    void *impl;
};

/* 1 when an event at t_ns (ns since the source's start) came after the byte
 * limit stopped recording (RECOMPSHIM_MAX_BYTES): only the shim's ungated
 * records land there (OOMs, and the successful retry of an OOM's request),
 * so it says nothing about the live set. */
static inline int
am_past_limit(const am_meta *m, uint64_t t_ns)
{
    return m->limit_hit && m->limit_ns && t_ns > m->limit_ns;
}

/* An importer: recognises its files and opens them. The registry in
 * source.c lists them; a new importer is one row there. */
typedef struct am_importer {
    const char *name;
    /* 1 when the file whose first `n` bytes are `head` (and name `path`) is
     * this importer's format. */
    int (*sniff)(const char *path, const unsigned char *head, size_t n);
    /* Open: 0 and *out set, or -1 with one line "FILE: offset N: ..." in err. */
    int (*open)(const char *path, am_source **out, char *err, size_t errlen);
} am_importer;

/* Is `path` a file some importer recognises? Returns the importer or NULL
 * (also NULL when the file cannot be read). */
const am_importer *am_sniff(const char *path);

/* Open `path` with the importer that recognises it. 0 ok; -1 with a line
 * in err (unknown format: says what the file is not). */
int am_source_open(const char *path, am_source **out, char *err, size_t errlen);
/* The Kineto importer keeps its time-sorted runs of events in memory up to
 * `bytes` (default 192 MiB, about 2.2 million events) and in an unlinked
 * temporary file past it (analyzer/read/import_kineto.c). For tests and
 * benchmarks: 0 sends every run to the file. Applies to later opens. */
void am_kineto_set_memory_limit(uint64_t bytes);
/* Import limits for compressed and slow inputs (docs/importers.md):
 * decompressed bytes at most max(1 GiB, 200 x the file's size) and 64 GiB,
 * and at most 1800 s of import time; RECOMP_IMPORT_MAX_BYTES (K/M/G
 * suffixes, include/recomp/bytesize.h's grammar) and RECOMP_IMPORT_MAX_SECONDS
 * (seconds, >= 0) replace the defaults; a value that is not one refuses the
 * import (am_import_limit_check) rather than being read as another limit.
 * The ratio: torch.profiler's JSON compresses 5-20x; a gzip bomb reaches 1000x. */
typedef struct am_import_limit {
    uint64_t max_bytes;       /* decompressed */
    double max_seconds;
    double start;             /* CLOCK_MONOTONIC seconds at am_import_limit_init */
    char bad[200];            /* "" or why a setting was refused (the setting, its value) */
} am_import_limit;
void am_import_limit_init(am_import_limit *l, uint64_t file_bytes);
/* 0 while within the limits; else -1 and one line in err naming the file,
 * the offset reached and the limit (and how to raise it). */
int am_import_limit_check(const am_import_limit *l, const char *path, uint64_t decompressed,
                          uint64_t offset, char *err, size_t errlen);

/* --salvage: native traces are opened with RS_READ_SALVAGE (damaged chunks
 * skipped, am_meta.salvaged_chunks counts them). Off by default. */
void am_source_set_salvage(int on);
int am_source_salvage(void);

/* Stream helpers (dispatch through ops). */
static inline int am_next(am_source *s, am_event *ev) { return s->ops->next(s, ev); }
static inline int am_rewind(am_source *s) { return s->ops->rewind(s); }
void am_source_close(am_source *s);

/* Symbolise a code address ("libfoo.so+0x1234"), "" and 0 when unknown. */
int am_format_addr(am_source *s, uint64_t addr, char *buf, size_t n);

/* The native trace importer (source_native.c). */
extern const am_importer am_native_importer;

/* The value of "--flag" in the job's recorded command line (the next
 * argument, "" when the next argument is another flag, or --flag=value),
 * NULL when absent. A flag given several times takes its last value, as
 * argparse does (model/meta.c). */
const char *am_argv_value(const am_meta *m, const char *flag);

/* b bytes in binary units with two decimals ("12.50 GiB"; whole bytes below
 * 1 KiB: "512 B") into buf of n bytes; returns buf (model/meta.c). */
const char *am_fmt_bytes(uint64_t b, char *buf, size_t n);

/* How a process left, am_meta.exit_via (trace format 1.6's enum
 * rs_exit_via): "_exit", "_Exit", or "?" for 0 and unknown values
 * (model/meta.c). */
const char *am_exit_via_name(int via);

/* Names for reports. */
const char *am_lib_name(int lib);
const char *am_coll_name(int op);

#endif
