/* record.h: the tracker core API of librecompshim.
 *
 * Hooks (hooks_cudart.c, nvtx_inject.c, threads.c) call only these
 * functions. None of them calls CUDA, NVTX, Python, the dynamic loader or
 * malloc on the steady-state path: each appends one record to the calling
 * thread's chunk of the mmap'd trace (writer.c). Until the process first
 * touches CUDA there is no trace file: records are dropped (see
 * rs_trace_open and the NVTX replay below).
 *
 * All sizes are bytes, all times CLOCK_MONOTONIC nanoseconds.
 */
#ifndef RECOMPSHIM_RECORD_H
#define RECOMPSHIM_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "recomp/trace_format.h"

#define RS_EXPORT __attribute__((visibility("default")))
#define RS_HIDDEN __attribute__((visibility("hidden")))

/* Per-thread state, initial-exec TLS (the shim is LD_PRELOADed). */
struct rs_chunk_ref;
typedef struct rs_tls {
    int guard;                  /* >0 while inside the shim: hooks pass through */
    uint32_t tid;               /* gettid(), 0 until first use */
    uint32_t gen;               /* writer generation this thread's chunk belongs to */
    unsigned char *chunk;       /* current chunk (header at offset 0), or NULL */
    uint32_t chunk_index;
    int8_t device;              /* last device set on this thread, -1 unknown */
    uint64_t last_ns;           /* time of this thread's last record (saves a clock read) */
    uint32_t chunk_epoch;       /* bumped at each chunk this thread claims (v1.4) */
    uint32_t ct_epoch;          /* chunk_epoch when ct_ns was written */
    uint64_t ct_ns;             /* time of the last record published in that chunk */
    uint64_t oom_size;          /* request of this thread's last OOM record until its next
                                 * allocation (a retry of it lands past the byte limit) */
} rs_tls;

extern __thread rs_tls t_rs __attribute__((tls_model("initial-exec")));

/* The writer's state every hook and record reads (writer.c owns it): one
 * cache line of its own, written only when the file opens or closes, the
 * byte limit is reached, or the process forks -- never per event, so
 * threads recording at once share it read-only (no line bounces between
 * CPUs). Accessed with __atomic builtins. */
typedef struct rs_writer_hot {
    int state;            /* enum rs_writer_state (writer.h) */
    int limit_hit;        /* 1 once the byte limit has stopped gated records */
    uint32_t gen;         /* bumped at open and fork: TLS chunks go stale */
    rs_file_header *hdr;  /* the mapped file header while one is mapped, else NULL */
} __attribute__((aligned(64))) rs_writer_hot;

extern rs_writer_hot rs_w_hot RS_HIDDEN;

/* 1 while the shim records (not disabled, not RECOMPSHIM_DISABLE): the
 * writer state is RS_W_NONE (0) or RS_W_OPEN (1). Inline: every hook asks. */
static inline int
rs_enabled(void)
{
    return (unsigned)__atomic_load_n(&rs_w_hot.state, __ATOMIC_ACQUIRE) <= 1u;
}

/* Monotonic clock in ns. */
RS_HIDDEN uint64_t rs_now_ns(void);

/* Linux thread id of the caller (cached in TLS). */
RS_HIDDEN uint32_t rs_gettid(void);

/* Create the trace file if this process has none yet (first CUDA touch).
 * Safe to call on every hook; returns 1 when a file is open. Never calls
 * CUDA. On any failure the shim disables itself with one stderr line. */
RS_HIDDEN int rs_trace_open_slow(void);
static inline int
rs_trace_open(void)
{
    if (__builtin_expect(__atomic_load_n(&rs_w_hot.state, __ATOMIC_ACQUIRE) == 1, 1))
        return 1; /* RS_W_OPEN */
    return rs_trace_open_slow();
}

/* 1 when a trace file is open and gated events are being recorded now
 * (inside the window, below the byte limit). */
RS_HIDDEN int rs_recording(void);

/* ---- records (each is a no-op when no file is open) ---- */

/* A successful allocation of `size` bytes at `ptr`; api is enum rs_api,
 * mem enum rs_mem_kind, caller the hooked call's return address. */
RS_HIDDEN void rs_record_alloc(uint16_t api, uint8_t mem, uint64_t ptr, uint64_t size,
                               uint64_t stream, uint64_t caller, int status);
/* A release of `ptr` (status is the real call's result). rs_record_free_at
 * takes the time explicitly: hooks take it before the real call, so a
 * reuse of the address by another thread is never ordered before it. */
RS_HIDDEN void rs_record_free(uint16_t api, uint8_t mem, uint64_t ptr, uint64_t stream,
                              uint64_t caller, int status);
RS_HIDDEN void rs_record_free_at(uint64_t t_ns, uint16_t api, uint8_t mem, uint64_t ptr,
                                 uint64_t stream, uint64_t caller, int status);
/* Constructor-time: read RECOMPSHIM_COMPACT (0: write only full ALLOC and
 * FREE records, as format 1.3 did; for side-by-side measurements and
 * tests). */
RS_HIDDEN void rs_record_init(void);

/* A failed allocation: captures a native stack and makes the record
 * durable at once (msync). free/total from a cudaMemGetInfo taken by the
 * caller, meminfo_status -1 when none was taken. Recorded even past the
 * byte limit (reserved tail) and outside the window. */
RS_HIDDEN void rs_record_oom(uint16_t api, uint8_t mem, uint64_t size, uint64_t caller,
                             int status, uint64_t free_bytes, uint64_t total_bytes,
                             int meminfo_status);
RS_HIDDEN void rs_record_meminfo(uint32_t reason, uint64_t free_bytes, uint64_t total_bytes,
                                 int device, int status);
/* 1 when a rate-limited memory sample (RS_MEMINFO_SAMPLE) is due and now
 * claimed by the caller, which takes it with its own API's memory query;
 * hooks call it only after a successful device allocation (hooks_cudart.c). */
RS_HIDDEN int rs_meminfo_due(void);
RS_HIDDEN void rs_record_set_device(int device, int status);
RS_HIDDEN void rs_record_pool_attr(uint64_t pool, uint32_t attr, uint64_t value, int status);
/* Driver virtual-memory call (kind RS_REC_VMM_* / RS_REC_VA_*), see
 * trace_format.h for which fields each kind uses. Gated. */
RS_HIDDEN void rs_record_vmm(uint16_t kind, uint16_t api, uint64_t handle, uint64_t ptr,
                             uint64_t size, uint64_t offset, uint64_t caller, int device,
                             int status);
/* PyTorch's allocator report: block at ptr, size > 0 allocated, < 0 freed,
 * PyTorch's totals after it (bytes). signature 1 = size_t totals, 2 =
 * int64_t totals. Gated. */
RS_HIDDEN void rs_record_tensor(uint64_t ptr, int64_t size, uint64_t total_allocated,
                                uint64_t total_reserved, uint64_t caller, int device_type,
                                int device, uint32_t signature);
/* CUDA-graph call (op = enum rs_graph_op). Ungated: capture windows must
 * stay paired. */
RS_HIDDEN void rs_record_graph(uint32_t op, uint16_t api, uint64_t stream, uint64_t graph,
                               uint64_t exec, uint32_t mode, int status);
/* NCCL call (op = enum rs_coll_op); bytes = count x datatype size. Gated,
 * but communicator creation and destruction are not. */
RS_HIDDEN void rs_record_collective(uint32_t op, uint16_t api, uint64_t comm, uint64_t count,
                                    uint64_t bytes, uint64_t stream, uint64_t comm_hash,
                                    int datatype, int redop, int peer, int nranks, int rank,
                                    int status);
/* cuCtxSetCurrent(ctx) on this thread; device -1 unknown. Ungated. */
RS_HIDDEN void rs_record_ctx(uint64_t ctx, int device, int status);

/* A thread name: tid 0 when only the pthread_t is known. */
RS_HIDDEN void rs_record_thread(uint32_t tid, uint64_t pthread, const char *name, int rename);
RS_HIDDEN void rs_record_meta(uint32_t key, const void *bytes, size_t len);

/* Intern `len` bytes of `s`; returns an id >= 1, or 0 when the bounded
 * table is full (callers then put the text inline). Thread-safe; lookups
 * are lock-free, inserts take a mutex (once per distinct string). The
 * STRING record is written when the file is open, or replayed at open. */
RS_HIDDEN uint32_t rs_intern(const char *s, size_t len);
/* The id rs_intern gave this thread for the same `len` bytes at the same
 * address `s`, when those bytes are still that string; 0 otherwise (then
 * call rs_intern, and rs_intern_memo_put its non-zero id). No lock, no
 * hash: one compare of the bytes with the interned copy. */
RS_HIDDEN uint32_t rs_intern_memo_get(const char *s, size_t len);
RS_HIDDEN void rs_intern_memo_put(const char *s, size_t len, uint32_t id);

/* NVTX records. kind is RS_REC_NVTX_PUSH/START/MARK/DOMAIN; name_id from
 * rs_intern or 0 with `text`/`text_len` inline; aux per trace_format.h.
 * NVTX_PUSH/POP/START/END/MARK are gated by the window; DOMAIN is not. */
RS_HIDDEN void rs_record_nvtx(uint16_t kind, uint32_t domain, uint32_t name_id,
                              const char *text, size_t text_len, uint64_t range_id,
                              uint32_t category, uint32_t aux);
RS_HIDDEN void rs_record_nvtx_pop(uint32_t domain, uint32_t depth);
RS_HIDDEN void rs_record_nvtx_end(uint64_t range_id);

/* At clean exit: if a RECOMPSHIM_WINDOW never opened, say so once on stderr
 * and in a META note (a steps window with no step markers records nothing). */
RS_HIDDEN void rs_window_report_at_exit(void);

/* A ProfilerStep#N-style marker was seen (window mode by steps). */
RS_HIDDEN void rs_window_step_marker(const char *name, size_t len);

/* ---- callbacks the writer makes into other modules ---- */

/* Called once when the trace file is created, with the file open, before
 * the first event record: re-emit definitions made before (NVTX domains). */
RS_HIDDEN void rs_nvtx_replay_definitions(void);
/* Called when a thread writes its first record into the file: re-emit the
 * NVTX ranges this thread pushed before the file existed, as NVTX_PUSH
 * records with RS_NVTX_PRE_TRACE in aux. */
RS_HIDDEN void rs_nvtx_thread_attach(void);
/* Called by the writer's fork handlers, which take every shim lock in the
 * one lock order (writer.c, docs/reliability.md): the NVTX registry lock
 * (rank 2) in prepare, the stack pool lock (rank 6) in prepare_leaf;
 * released in parent, re-initialised in child. */
RS_HIDDEN void rs_nvtx_atfork_prepare(void);
RS_HIDDEN void rs_nvtx_atfork_prepare_leaf(void);
RS_HIDDEN void rs_nvtx_atfork_parent(void);
RS_HIDDEN void rs_nvtx_atfork_child(void);

/* Called from the shim's constructor: set NVTX_INJECTION64_PATH to the
 * shim's own absolute path unless set; an inherited value resolving to the
 * shim itself is ours; any other value means another tool owns NVTX. */
RS_HIDDEN void rs_nvtx_setup_env(void);
/* The injection path of another tool that owns NVTX, or NULL. */
RS_HIDDEN const char *rs_nvtx_foreign_path(void);

/* Disable the shim for the rest of the process: one line on stderr naming
 * `what` (and errno's text when err != 0), header flag set, hooks pass
 * through from then on. Never aborts. */
RS_HIDDEN void rs_disable(const char *what, int err);

/* Log to stderr when RECOMPSHIM_LOG >= level (1 info, 2 debug). */
RS_HIDDEN void rs_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
