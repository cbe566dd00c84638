/* trace_format.h: the recompshim trace file format, version 1.
 *
 * One file per process that touches CUDA. All integers are little-endian,
 * fixed width; every struct below has a _Static_assert on its size. The
 * prose description with examples is docs/trace-format.md.
 *
 *   offset 0                 rs_file_header (RS_HEADER_SIZE bytes)
 *   RS_HEADER_SIZE + k*chunk chunk k: rs_chunk_header, then records
 *
 * Chunks belong to one thread each (chunk.tid); within a chunk records are
 * in time order. A thread fills a chunk, seals it (checksum) and claims the
 * next free index. Records are 8-byte aligned; each starts with
 * rs_record_header whose `size` covers header, payload and any variable
 * bytes, padded to 8.
 *
 * Crash safety: the file is mmap'd MAP_SHARED. A writer publishes
 * chunk.used (release store) after each record and header.chunks_published
 * after initialising a chunk, so a reader of a SIGKILLed process's file sees
 * every record published before the kill. header.flags has RS_HDR_CLOSED only
 * after a clean exit.
 *
 * Versioning: bump RS_TRACE_VERSION_MINOR when adding record kinds, API codes
 * or using reserved bytes (old readers reject unknown kinds by offset); bump
 * MAJOR when changing any existing layout. Readers accept the same major and
 * any minor up to their own, and refuse newer files naming both versions.
 */
#ifndef RECOMP_TRACE_FORMAT_H
#define RECOMP_TRACE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define RS_TRACE_MAGIC "RSTRACE1"         /* 8 bytes, no NUL in the file */
#define RS_TRACE_MAGIC_LEN 8
#define RS_TRACE_VERSION_MAJOR 1
#define RS_TRACE_VERSION_MINOR 6
/* The first minor version whose header page carries rs_header_exit (how a
 * process that left through _exit/_Exit ended). */
#define RS_TRACE_MINOR_EXIT 6
/* The first minor version with ALLOC_P and FREE_P (packed records) and the
 * four-lane chunk checksum (rs_checksum4). */
#define RS_TRACE_MINOR_PACKED 5
/* The first minor version with SITE, ALLOC_C and FREE_C (compact records). */
#define RS_TRACE_MINOR_COMPACT 4
/* The first minor version whose header carries header_checksum. */
#define RS_TRACE_MINOR_HEADER_CHECKSUM 2

#define RS_HEADER_SIZE 4096u              /* bytes before chunk 0 */
#define RS_CHUNK_SIZE (256u * 1024u)      /* bytes per chunk, header included */
#define RS_CHUNK_MAGIC 0x4b484352u        /* "RCHK" little-endian */
#define RS_RECORD_ALIGN 8u
#define RS_MAX_RECORD_SIZE 65528u         /* largest `size` a record may have */
#define RS_OOM_MAX_FRAMES 64u             /* native frames kept per OOM */
#define RS_THREAD_NAME_LEN 16u            /* Linux comm length, NUL included */

/* ---- file header flags ---- */
#define RS_HDR_CLOSED        0x1u  /* set by a clean exit (atexit/destructor) */
#define RS_HDR_LIMIT_HIT     0x2u  /* RECOMPSHIM_MAX_BYTES stopped recording */
#define RS_HDR_DISABLED      0x4u  /* shim disabled itself after an error */
#define RS_HDR_NVTX_FOREIGN  0x8u  /* NVTX_INJECTION64_PATH named another tool */
#define RS_HDR_ASYNC_SEEN    0x10u /* a cudaMallocAsync succeeded (v1.1): the async mode took effect */
#define RS_HDR_KNOWN_FLAGS   0x1fu

/* Where the rank numbers came from. */
enum rs_rank_source {
    RS_RANK_NONE = 0,       /* no launcher variables: rank -1 */
    RS_RANK_TORCHRUN = 1,   /* RANK / LOCAL_RANK / WORLD_SIZE */
    RS_RANK_OMPI = 2,       /* OMPI_COMM_WORLD_RANK / _LOCAL_RANK / _SIZE */
    RS_RANK_SLURM = 3,      /* SLURM_PROCID / SLURM_LOCALID / SLURM_NTASKS */
    RS_RANK_PMI = 4,        /* PMI_RANK / PMI_SIZE */
};

/* Recording mode of the process (docs/architecture.md, Modes). */
enum rs_mode {
    RS_MODE_DEFAULT = 0,    /* observe the allocator as configured */
    RS_MODE_ASYNC = 1,      /* RECOMPSHIM_TENSORS=async took effect */
    RS_MODE_NOCACHE = 2,    /* RECOMPSHIM_TENSORS=nocache took effect */
};

/* Window mode (RECOMPSHIM_WINDOW). */
enum rs_window_kind {
    RS_WINDOW_NONE = 0,
    RS_WINDOW_TIME = 1,     /* a..b: ns since start */
    RS_WINDOW_EVENTS = 2,   /* a..b: index of gated events, 0-based */
    RS_WINDOW_STEPS = 3,    /* a..b: step numbers of ProfilerStep#N markers */
};

typedef struct rs_file_header {
    char magic[RS_TRACE_MAGIC_LEN];      /* RS_TRACE_MAGIC */
    uint16_t version_major;
    uint16_t version_minor;
    uint32_t header_size;                /* RS_HEADER_SIZE */
    uint32_t chunk_size;                 /* RS_CHUNK_SIZE */
    uint32_t flags;                      /* RS_HDR_* (updated atomically) */
    uint32_t chunks_published;           /* chunks initialised (atomic, monotonic) */
    uint32_t mode;                       /* enum rs_mode */
    int32_t pid;
    int32_t ppid;
    int32_t rank;                        /* -1 unknown */
    int32_t local_rank;                  /* -1 unknown */
    int32_t world_size;                  /* -1 unknown */
    int32_t local_world_size;            /* -1 unknown */
    uint32_t rank_source;                /* enum rs_rank_source */
    int32_t restart_count;               /* TORCHELASTIC_RESTART_COUNT, -1 unset */
    int32_t device;                      /* first device a record named, -1 */
    uint64_t mono_start_ns;              /* CLOCK_MONOTONIC at trace creation */
    uint64_t real_start_ns;              /* CLOCK_REALTIME at the same moment */
    uint64_t device_capacity;            /* bytes; from cudaMemGetInfo total, 0 unknown */
    uint64_t max_bytes;                  /* RECOMPSHIM_MAX_BYTES, 0 = unlimited */
    uint64_t limit_hit_ns;               /* CLOCK_MONOTONIC when the limit stopped recording, 0 */
    uint64_t dropped_records;            /* records not written after the limit */
    uint64_t close_ns;                   /* CLOCK_MONOTONIC at clean exit, 0 */
    uint32_t window_kind;                /* enum rs_window_kind */
    uint32_t cuda_runtime_version;       /* cudaRuntimeGetVersion, 0 unknown */
    uint64_t window_a;
    uint64_t window_b;
    uint32_t reserved_chunks;            /* chunks kept for OOM records past the limit */
    uint32_t refusals;                   /* tensor-mode refusals (part 2), bitmask */
    char host[64];                       /* gethostname, NUL-terminated */
    char run_id[96];                     /* run directory name */
    char torchelastic_run_id[64];        /* TORCHELASTIC_RUN_ID */
    char slurm_job_id[32];               /* SLURM_JOB_ID */
    char master[80];                     /* MASTER_ADDR:MASTER_PORT */
    char shim_version[32];
    /* (1.2) rs_header_checksum(): the fields written once, at creation. */
    uint64_t header_checksum;
} rs_file_header;
/* The rest of the first RS_HEADER_SIZE bytes is zero (room for minor versions). */

_Static_assert(sizeof(rs_file_header) == 536, "file header fields (v1.2)");
_Static_assert(sizeof(rs_file_header) <= RS_HEADER_SIZE, "file header fits its page");

/* How the process left, when the shim saw it leave (v1.6). */
enum rs_exit_via {
    RS_EXIT_NONE = 0,         /* not seen: exit()/return from main (closed), or killed */
    RS_EXIT__EXIT = 1,        /* _exit(status) (os._exit, multiprocessing workers) */
    RS_EXIT__EXIT_C = 2,      /* _Exit(status) */
};
#define RS_EXIT_VIA_MAX 2u

/* (1.6) In the zero bytes of the header page right after rs_file_header
 * (outside rs_file_header, so the header checksum of 1.2-1.5 files keeps
 * its length): written once, by the interposed _exit/_Exit, together with
 * RS_HDR_CLOSED and close_ns; all zero otherwise. Not covered by the header
 * checksum (like flags and close_ns, it is written after creation). */
typedef struct rs_header_exit {
    uint32_t via;                        /* enum rs_exit_via; 0 the rest is 0 */
    int32_t status;                      /* the argument as passed (the parent's
                                          * wait status holds its low 8 bits) */
} rs_header_exit;
#define RS_HEADER_EXIT_OFFSET 536u       /* sizeof(rs_file_header) */
_Static_assert(sizeof(rs_header_exit) == 8, "header exit fields (v1.6)");
_Static_assert(RS_HEADER_EXIT_OFFSET == sizeof(rs_file_header), "exit fields follow the header");

#define RS_CHUNK_SEALED   0x1u   /* checksum covers checksum_len bytes */
#define RS_CHUNK_TAIL     0x2u   /* claimed from the reserved tail (OOM past the limit) */
#define RS_CHUNK_KNOWN_FLAGS 0x3u

typedef struct rs_chunk_header {
    uint32_t magic;                      /* RS_CHUNK_MAGIC; 0 = claimed, never initialised */
    uint32_t index;                      /* its own index, checked by readers */
    uint32_t tid;                        /* Linux thread id of the writer */
    uint32_t flags;                      /* RS_CHUNK_* */
    uint32_t used;                       /* record bytes after this header (published) */
    uint32_t record_count;               /* records in `used` (published after `used`) */
    uint32_t checksum_len;               /* bytes covered by checksum when SEALED */
    uint32_t reserved0;
    uint64_t checksum;                   /* FNV-1a 64 of the first checksum_len record bytes */
    uint64_t reserved[3];
} rs_chunk_header;
_Static_assert(sizeof(rs_chunk_header) == 64, "chunk header");

#define RS_CHUNK_PAYLOAD (RS_CHUNK_SIZE - (uint32_t)sizeof(rs_chunk_header))

/* Record kinds, from records.def. */
enum rs_record_kind {
#define RS_RECORD(NAME, code, st, var) RS_REC_##NAME = code,
#include "recomp/records.def"
#undef RS_RECORD
};

/* API codes, from apis.def. */
enum rs_api {
    RS_API_NONE = 0,
#define RS_API(name, code, lib) RS_API_##name = code,
#include "recomp/apis.def"
#undef RS_API
};

/* Memory kinds of allocations. Only DEVICE counts toward device peaks. */
enum rs_mem_kind {
    RS_MEM_DEVICE = 0,
    RS_MEM_HOST_PINNED = 1,   /* cudaMallocHost / cudaHostAlloc */
    RS_MEM_MANAGED = 2,       /* cudaMallocManaged */
};

/* Why a MEMINFO record was taken. */
enum rs_meminfo_reason {
    RS_MEMINFO_APP = 0,       /* the job called cudaMemGetInfo itself */
    RS_MEMINFO_SAMPLE = 1,    /* rate-limited sample after a successful call */
    RS_MEMINFO_OOM = 2,       /* taken right after a failed allocation */
};

/* META keys. */
enum rs_meta_key {
    RS_META_CMDLINE = 1,      /* /proc/self/cmdline: NUL-separated arguments */
    RS_META_ENV = 2,          /* one "NAME=value" that matters (see docs) */
    RS_META_NVTX_OWNER = 3,   /* NVTX_INJECTION64_PATH of another tool */
    RS_META_HOOK_MISSING = 4, /* name of a hook whose real function is missing */
    RS_META_EXE = 5,          /* /proc/self/exe */
    RS_META_NOTE = 6,         /* free-form note from the shim (refusals, errors) */
    RS_META_UNWINDER = 7,     /* "libunwind", "glibc" or "none" (v1.1) */
    RS_META_TENSORS = 8,      /* RECOMPSHIM_TENSORS as requested, and what took effect (v1.1) */
    RS_META_PYSTACK = 9,      /* how Python frames are recorded, or why not (v1.3) */
};

/* Window record states. */
enum rs_window_state { RS_WINDOW_OPEN = 1, RS_WINDOW_CLOSE = 2 };

/* Every record starts with this. t_ns is CLOCK_MONOTONIC; the writing
 * thread is the chunk's tid. */
typedef struct rs_record_header {
    uint16_t kind;                       /* enum rs_record_kind */
    uint16_t size;                       /* bytes, multiple of 8, header included */
    uint32_t aux;                        /* kind-specific small field (see each) */
    uint64_t t_ns;
} rs_record_header;
_Static_assert(sizeof(rs_record_header) == 16, "record header");

/* ALLOC: a successful allocation. aux = the Python stack (PYSTACK id) the
 * allocating thread was in, 0 none or unknown (v1.3; 0 before). */
typedef struct rs_rec_alloc {
    rs_record_header h;
    uint64_t ptr;                        /* device or host address */
    uint64_t size;                       /* bytes requested */
    uint64_t stream;                     /* cudaStream_t or pool handle, 0 */
    uint64_t caller;                     /* return address of the hooked call */
    uint16_t api;                        /* enum rs_api */
    uint8_t mem;                         /* enum rs_mem_kind */
    int8_t device;                       /* current device, -1 unknown */
    int32_t status;                      /* cudaError_t; failed calls are OOM records */
} rs_rec_alloc;
_Static_assert(sizeof(rs_rec_alloc) == 56, "alloc");

/* FREE: a release. status != 0 means the real call failed. aux = 0. */
typedef struct rs_rec_free {
    rs_record_header h;
    uint64_t ptr;
    uint64_t stream;
    uint64_t caller;
    uint16_t api;
    uint8_t mem;
    int8_t device;
    int32_t status;
} rs_rec_free;
_Static_assert(sizeof(rs_rec_free) == 48, "free");

/* MEMINFO: cudaMemGetInfo result. aux = enum rs_meminfo_reason. */
typedef struct rs_rec_meminfo {
    rs_record_header h;
    uint64_t free_bytes;
    uint64_t total_bytes;
    int32_t device;
    int32_t status;
} rs_rec_meminfo;
_Static_assert(sizeof(rs_rec_meminfo) == 40, "meminfo");

/* SET_DEVICE: cudaSetDevice(device). aux = 0. */
typedef struct rs_rec_set_device {
    rs_record_header h;
    int32_t device;
    int32_t status;
} rs_rec_set_device;
_Static_assert(sizeof(rs_rec_set_device) == 24, "set_device");

/* OOM: a failed allocation; nframes uint64 return addresses follow
 * (innermost first), aux = nframes. free/total are 0 when no sample could be
 * taken safely (no current context). */
typedef struct rs_rec_oom {
    rs_record_header h;
    uint64_t size;                       /* bytes requested */
    uint64_t caller;
    uint64_t free_bytes;
    uint64_t total_bytes;
    uint16_t api;
    uint8_t mem;
    int8_t device;
    int32_t status;                      /* the error returned to the job */
    int32_t meminfo_status;              /* cudaMemGetInfo's status, -1 not taken */
    uint32_t pystack;                    /* (v1.3) PYSTACK id, 0 none; was reserved (0) */
} rs_rec_oom;
_Static_assert(sizeof(rs_rec_oom) == 64, "oom");

/* THREAD: a thread's name, at its first record and on every rename.
 * aux = 1 when a rename, 0 when first seen. tid = 0 when the renamed
 * thread is another one whose tid is unknown: match it by pthread. */
typedef struct rs_rec_thread {
    rs_record_header h;
    uint32_t tid;
    uint32_t reserved;
    uint64_t pthread;                    /* pthread_t value */
    char name[RS_THREAD_NAME_LEN];       /* NUL-padded */
} rs_rec_thread;
_Static_assert(sizeof(rs_rec_thread) == 48, "thread");

/* STRING: interned string `id` (>= 1); len bytes follow, no NUL. aux = 0. */
typedef struct rs_rec_string {
    rs_record_header h;
    uint32_t id;
    uint32_t len;
} rs_rec_string;
_Static_assert(sizeof(rs_rec_string) == 24, "string");

/* NVTX_PUSH / NVTX_START / NVTX_MARK / NVTX_DOMAIN.
 *   domain   domain id; 0 = the default domain
 *   name_id  interned string id, or 0 with text_len inline bytes following
 *   range_id NVTX_START: the id returned to the job; NVTX_DOMAIN: 0
 * For NVTX_DOMAIN, `domain` is the id being defined and the name is its name.
 * aux = this thread's depth in that domain after the push (NVTX_PUSH; NVTX
 * levels are per thread and domain), else 0. */
typedef struct rs_rec_nvtx_name {
    rs_record_header h;
    uint64_t range_id;
    uint32_t domain;
    uint32_t name_id;
    uint32_t text_len;
    uint32_t category;
} rs_rec_nvtx_name;
_Static_assert(sizeof(rs_rec_nvtx_name) == 40, "nvtx name");

/* Flag in NVTX_PUSH aux: a range the thread pushed before the trace file
 * existed, replayed when the thread first wrote to the file (its t_ns is
 * that moment, not the push). The low 31 bits are the depth. */
#define RS_NVTX_PRE_TRACE 0x80000000u

/* NVTX_POP: pop of the innermost range of `domain` on this thread.
 * aux = this thread's depth in that domain after the pop. */
typedef struct rs_rec_nvtx_pop {
    rs_record_header h;
    uint32_t domain;
    uint32_t reserved;
} rs_rec_nvtx_pop;
_Static_assert(sizeof(rs_rec_nvtx_pop) == 24, "nvtx pop");

/* NVTX_END: end of a start/end range (may be another thread). */
typedef struct rs_rec_nvtx_end {
    rs_record_header h;
    uint64_t range_id;
} rs_rec_nvtx_end;
_Static_assert(sizeof(rs_rec_nvtx_end) == 24, "nvtx end");

/* META: key (enum rs_meta_key) and len bytes following. aux = 0. */
typedef struct rs_rec_meta {
    rs_record_header h;
    uint32_t key;
    uint32_t len;
} rs_rec_meta;
_Static_assert(sizeof(rs_rec_meta) == 24, "meta");

/* MODULE: a loaded ELF object, for offline symbolisation of callers and
 * stacks. build_id_len bytes of GNU build id, then path_len bytes of path. */
typedef struct rs_rec_module {
    rs_record_header h;
    uint64_t base;                       /* load bias (dlpi_addr) */
    uint64_t lo;                         /* lowest mapped address of PT_LOAD */
    uint64_t hi;                         /* one past the highest */
    uint32_t build_id_len;
    uint32_t path_len;
} rs_rec_module;
_Static_assert(sizeof(rs_rec_module) == 48, "module");

/* LIMIT: recording stopped at RECOMPSHIM_MAX_BYTES. aux = 0. */
typedef struct rs_rec_limit {
    rs_record_header h;
    uint64_t max_bytes;
} rs_rec_limit;
_Static_assert(sizeof(rs_rec_limit) == 24, "limit");

/* WINDOW: the window opened or closed. aux = enum rs_window_state. */
typedef struct rs_rec_window {
    rs_record_header h;
    uint32_t window_kind;
    uint32_t reserved;
    uint64_t value;                      /* step number, event index or ns */
} rs_rec_window;
_Static_assert(sizeof(rs_rec_window) == 32, "window");

/* POOL_ATTR: cudaMemPoolGetAttribute(pool, attr) = value. aux = 0. */
typedef struct rs_rec_pool_attr {
    rs_record_header h;
    uint64_t pool;
    uint64_t value;
    uint32_t attr;
    int32_t status;
} rs_rec_pool_attr;
_Static_assert(sizeof(rs_rec_pool_attr) == 40, "pool attr");

/* ---- v1.1: part 2 ---- */

/* VMM_CREATE / VMM_RELEASE / VMM_MAP / VMM_UNMAP / VA_RESERVE / VA_FREE:
 * the driver's virtual-memory calls (expandable segments, NCCL's cuMem
 * buffers). Physical memory is counted at VMM_CREATE/VMM_RELEASE (by
 * handle); a VA reservation is never memory ([PT] in docs/sources.md).
 *   VMM_CREATE   handle, size, device (location id)
 *   VMM_RELEASE  handle
 *   VMM_MAP      ptr, size, offset, handle
 *   VMM_UNMAP    ptr, size
 *   VA_RESERVE   ptr (the reserved base), size, offset = requested alignment
 *   VA_FREE      ptr, size
 * aux = 0. Failed calls are recorded with their status; a VMM_CREATE that
 * failed with CUDA_ERROR_OUT_OF_MEMORY (the expandable-segments OOM) is
 * followed by an OOM record with api cuMemCreate. device: the handle's
 * location for VMM_CREATE, else the calling thread's current device. */
typedef struct rs_rec_vmm {
    rs_record_header h;
    uint64_t handle;                     /* CUmemGenericAllocationHandle, 0 */
    uint64_t ptr;                        /* CUdeviceptr, 0 */
    uint64_t size;                       /* bytes */
    uint64_t offset;
    uint64_t caller;
    uint16_t api;                        /* enum rs_api */
    uint8_t reserved0;
    int8_t device;                       /* -1 unknown */
    int32_t status;                      /* CUresult */
} rs_rec_vmm;
_Static_assert(sizeof(rs_rec_vmm) == 64, "vmm");

/* TENSOR: PyTorch's caching allocator reported a block
 * (c10::reportMemoryUsageToProfiler, [PT] in docs/sources.md): size > 0 an
 * allocation of that block size, < 0 a free; totals are PyTorch's own
 * allocated and reserved bytes after the event. CUDA devices only.
 * aux = the signature (1: size_t totals, 2: int64_t totals). */
typedef struct rs_rec_tensor {
    rs_record_header h;
    uint64_t ptr;
    int64_t size;
    uint64_t total_allocated;
    uint64_t total_reserved;
    uint64_t caller;
    int8_t device_type;                  /* c10::DeviceType (1 = CUDA) */
    int8_t device;
    uint16_t reserved0;
    uint32_t pystack;                    /* (v1.3) PYSTACK id, 0 none; was reserved (0) */
} rs_rec_tensor;
_Static_assert(sizeof(rs_rec_tensor) == 64, "tensor");

/* GRAPH ops. */
enum rs_graph_op {
    RS_GRAPH_BEGIN_CAPTURE = 1,   /* stream, mode */
    RS_GRAPH_END_CAPTURE = 2,     /* stream, graph */
    RS_GRAPH_IS_CAPTURING = 3,    /* stream, mode = capture status */
    RS_GRAPH_INSTANTIATE = 4,     /* graph, exec */
    RS_GRAPH_LAUNCH = 5,          /* exec, stream */
};

/* GRAPH: CUDA-graph capture windows and launches. aux = enum rs_graph_op. */
typedef struct rs_rec_graph {
    rs_record_header h;
    uint64_t stream;
    uint64_t graph;                      /* cudaGraph_t */
    uint64_t exec;                       /* cudaGraphExec_t */
    uint16_t api;
    uint16_t reserved0;
    int32_t status;
    uint32_t mode;                       /* cudaStreamCaptureMode / status */
    uint32_t reserved1;
} rs_rec_graph;
_Static_assert(sizeof(rs_rec_graph) == 56, "graph");

/* COLLECTIVE ops (the NCCL API call). */
enum rs_coll_op {
    RS_COLL_ALL_REDUCE = 1,
    RS_COLL_REDUCE_SCATTER = 2,
    RS_COLL_ALL_GATHER = 3,
    RS_COLL_BROADCAST = 4,
    RS_COLL_REDUCE = 5,
    RS_COLL_SEND = 6,
    RS_COLL_RECV = 7,
    RS_COLL_ALL_TO_ALL = 8,
    RS_COLL_GROUP_START = 9,
    RS_COLL_GROUP_END = 10,
    RS_COLL_COMM_INIT = 11,      /* nranks, rank, comm_hash */
    RS_COLL_COMM_SPLIT = 12,     /* parent in peer... see docs */
    RS_COLL_COMM_DESTROY = 13,
};

/* COLLECTIVE: one NCCL API call. aux = enum rs_coll_op.
 *   bytes    count * sizeof(datatype) (send side; per rank for all-gather)
 *   peer     send/recv peer, broadcast/reduce root, else -1
 *   comm_hash first 8 bytes of the ncclUniqueId (COMM_INIT), which all
 *            ranks of one communicator share; else 0 */
typedef struct rs_rec_collective {
    rs_record_header h;
    uint64_t comm;                       /* ncclComm_t */
    uint64_t count;
    uint64_t bytes;
    uint64_t stream;
    uint64_t comm_hash;
    uint16_t api;
    int8_t datatype;                     /* ncclDataType_t, -1 none */
    int8_t redop;                        /* ncclRedOp_t, -1 none */
    int32_t peer;
    int32_t nranks;                      /* COMM_INIT, else -1 */
    int32_t rank;                        /* COMM_INIT, else -1 */
    int32_t status;                      /* ncclResult_t */
    uint32_t reserved0;
} rs_rec_collective;
_Static_assert(sizeof(rs_rec_collective) == 80, "collective");

/* CTX_SET: cuCtxSetCurrent(ctx); device from cuCtxGetDevice when the
 * context is valid, else -1. aux = 0. */
typedef struct rs_rec_ctx {
    rs_record_header h;
    uint64_t ctx;
    int32_t device;
    int32_t status;
} rs_rec_ctx;
_Static_assert(sizeof(rs_rec_ctx) == 32, "ctx");

/* PYFRAME (v1.3): a Python code object, interned once (shim/pystack.c).
 * name_id and file_id are STRING ids (0: not interned, the table was full):
 * the code object's qualified name (co_qualname; co_name before 3.11) and
 * file name; line is its first line. aux = 0. */
typedef struct rs_rec_pyframe {
    rs_record_header h;
    uint32_t id;                         /* >= 1 */
    uint32_t name_id;
    uint32_t file_id;
    uint32_t line;                       /* co_firstlineno */
} rs_rec_pyframe;
_Static_assert(sizeof(rs_rec_pyframe) == 32, "pyframe");

/* PYSTACK (v1.3): an interned Python stack: frame `frame` (a PYFRAME id)
 * called from stack `parent` (a PYSTACK id, 0 for the outermost frame the
 * shim saw on that thread). ALLOC, TENSOR and OOM records name the stack
 * their thread was in by id. aux = 0. */
typedef struct rs_rec_pystack {
    rs_record_header h;
    uint32_t id;                         /* >= 1 */
    uint32_t parent;                     /* PYSTACK id, 0 none */
    uint32_t frame;                      /* PYFRAME id, >= 1 */
    uint32_t reserved;
} rs_rec_pystack;
_Static_assert(sizeof(rs_rec_pystack) == 32, "pystack");

/* ---- v1.4: compact allocation records (issue 19) ----
 *
 * Most ALLOC and FREE records of a thread repeat the same caller, stream,
 * api, memory kind and device, and follow the thread's previous record
 * closely in time. The writer names each distinct (caller, stream, api,
 * mem, device) once per chunk with a SITE record and then writes ALLOC_C
 * (32 bytes, against 56) and FREE_C (24, against 48) records that name the
 * site by id and carry their time as a delta from the previous record of
 * the same chunk. Scope is one chunk: a chunk can be read, checked and
 * salvaged on its own, as before.
 *
 * Rules a reader checks (each damage is reported by file offset):
 *   - SITE ids in a chunk are 1, 2, 3, ... in record order (no gaps,
 *     no redefinition); an ALLOC_C/FREE_C names an id defined earlier
 *     in the same chunk.
 *   - An ALLOC_C/FREE_C is never a chunk's first record: its time is the
 *     previous record's time (every record's: t_ns of a full record, the
 *     reconstructed time of a compact one) plus dt_ns.
 *   - A compact record always stands for a successful call (status 0);
 *     failed calls, and records whose delta does not fit 32 bits or goes
 *     back in time, are written as full ALLOC/FREE records.
 * A reader's time-ordered iteration hands out each compact record expanded
 * into the full ALLOC/FREE record it stands for, so consumers see one
 * layout whatever the file's minor version. */

/* The first 8 bytes of a compact record (the first 8 of rs_record_header:
 * kind and size where every record has them). */
typedef struct rs_compact_header {
    uint16_t kind;                       /* RS_REC_ALLOC_C / RS_REC_FREE_C */
    uint16_t size;
    uint32_t dt_ns;                      /* ns after the chunk's previous record */
} rs_compact_header;
_Static_assert(sizeof(rs_compact_header) == 8, "compact header");

/* SITE: the allocation call site `id` of this chunk. aux = id (>= 1). */
typedef struct rs_rec_site {
    rs_record_header h;
    uint64_t caller;                     /* return address of the hooked call */
    uint64_t stream;                     /* cudaStream_t or pool handle, 0 */
    uint16_t api;                        /* enum rs_api */
    uint8_t mem;                         /* enum rs_mem_kind */
    int8_t device;                       /* -1 unknown */
    uint32_t reserved;                   /* 0 */
} rs_rec_site;
_Static_assert(sizeof(rs_rec_site) == 40, "site");

/* ALLOC_C: ALLOC with status 0 at site `site`; pystack as ALLOC's aux. */
typedef struct rs_rec_alloc_c {
    rs_compact_header h;
    uint64_t ptr;
    uint64_t size;                       /* bytes requested */
    uint32_t site;                       /* SITE id in this chunk */
    uint32_t pystack;                    /* PYSTACK id, 0 none */
} rs_rec_alloc_c;
_Static_assert(sizeof(rs_rec_alloc_c) == 32, "alloc_c");

/* FREE_C: FREE with status 0 at site `site`. */
typedef struct rs_rec_free_c {
    rs_compact_header h;
    uint64_t ptr;
    uint32_t site;                       /* SITE id in this chunk */
    uint32_t reserved;                   /* 0 */
} rs_rec_free_c;
_Static_assert(sizeof(rs_rec_free_c) == 24, "free_c");

/* ---- v1.5: packed allocation records and the four-lane seal (issue 19) ----
 *
 * ALLOC_P (24 bytes, against ALLOC_C's 32) and FREE_P (16, against
 * FREE_C's 24) are ALLOC_C and FREE_C with the pointer and the site id in
 * one word: bits 0-47 the pointer, bits 48-63 the site id. The writer uses
 * them when the pointer is below 2^48 (every user-space and CUDA unified
 * address on x86-64 and aarch64 with 48-bit virtual addresses) and, for
 * ALLOC_P, the size below 2^32; else ALLOC_C/FREE_C (or the full records,
 * as in 1.4). Every other rule of the compact records holds: the header is
 * rs_compact_header (time as a delta from the chunk's previous record),
 * the site is defined earlier in the same chunk by a SITE record, and the
 * record is never its chunk's first. */
#define RS_PACKED_PTR_BITS 48u
#define RS_PACKED_PTR_MASK ((1ull << RS_PACKED_PTR_BITS) - 1)

/* The packed word of pointer ptr (< 2^48; higher bits would overlap the
 * site, so the writer packs only such pointers) and site id (< 2^16). */
static inline uint64_t
rs_packed_word(uint64_t ptr, uint32_t site)
{
    return ptr | (uint64_t)site << RS_PACKED_PTR_BITS;
}

/* The pointer of packed word w: its low 48 bits, zero-extended. */
static inline uint64_t
rs_packed_ptr(uint64_t w)
{
    return w & RS_PACKED_PTR_MASK;
}

/* The site id of packed word w: its top 16 bits. */
static inline uint32_t
rs_packed_site(uint64_t w)
{
    return (uint32_t)(w >> RS_PACKED_PTR_BITS);
}

/* ALLOC_P: ALLOC with status 0, pointer < 2^48, size < 2^32. */
typedef struct rs_rec_alloc_p {
    rs_compact_header h;                 /* RS_REC_ALLOC_P, 24, dt_ns */
    uint64_t ptr_site;                   /* rs_packed_word(ptr, site) */
    uint32_t size;                       /* bytes requested */
    uint32_t pystack;                    /* PYSTACK id, 0 none */
} rs_rec_alloc_p;
_Static_assert(sizeof(rs_rec_alloc_p) == 24, "alloc_p");

/* FREE_P: FREE with status 0, pointer < 2^48. */
typedef struct rs_rec_free_p {
    rs_compact_header h;                 /* RS_REC_FREE_P, 16, dt_ns */
    uint64_t ptr_site;                   /* rs_packed_word(ptr, site) */
} rs_rec_free_p;
_Static_assert(sizeof(rs_rec_free_p) == 16, "free_p");

/* Tensor-mode refusals (header.refusals bits, docs/architecture.md, Modes). */
#define RS_REFUSE_ASYNC_BACKEND_NATIVE     0x01u /* backend:native set explicitly */
#define RS_REFUSE_ASYNC_EXPANDABLE         0x02u /* expandable_segments:True set */
#define RS_REFUSE_ASYNC_MEMORY_HISTORY     0x04u /* --record-memory-history in argv */
#define RS_REFUSE_NOCACHE_BACKEND_ASYNC    0x08u /* backend:cudaMallocAsync set */
#define RS_REFUSE_NOCACHE_CUDA_GRAPHS      0x10u /* CUDA graphs in the Megatron flags */
#define RS_REFUSE_UNKNOWN_MODE             0x20u /* RECOMPSHIM_TENSORS not async|nocache */

/* Round a record size up to RS_RECORD_ALIGN. */
#define RS_RECORD_ROUND(n) (((n) + (RS_RECORD_ALIGN - 1)) & ~(uint32_t)(RS_RECORD_ALIGN - 1))

/* The chunk checksum: FNV-1a 64 taken over 64-bit little-endian words
 * (then any tail bytes one at a time), so it runs at a word per multiply.
 * Offset basis and prime from the FNV reference (Fowler, Noll, Vo;
 * http://www.isthe.com/chongo/tech/comp/fnv/). Also the shim's string hash. */
#define RS_CHECKSUM_INIT 0xcbf29ce484222325ull /* FNV-1a 64's offset basis */

/* rs_checksum continued from state h over len more bytes at data: folding
 * a buffer piece by piece gives rs_checksum of the whole when every piece
 * but the last is a multiple of 8 bytes long (records are). */
static inline uint64_t
rs_checksum_more(uint64_t h, const void *data, uint64_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        __builtin_memcpy(&w, p + i, 8);
        h ^= w;
        h *= 0x100000001b3ull;
    }
    for (; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline uint64_t
rs_checksum(const void *data, uint64_t len)
{
    return rs_checksum_more(RS_CHECKSUM_INIT, data, len);
}

/* The four-lane chunk checksum (format 1.5): the serial FNV-1a chain
 * above does one multiply per 8 bytes, each waiting for the previous one;
 * four independent chains over interleaved words run about four times as
 * fast on a CPU with a pipelined multiplier. Byte for byte
 * (docs/trace-format.md, "Chunk checksum"):
 *   - the data are read as little-endian 64-bit words w0, w1, ...; a tail
 *     of len % 8 bytes is zero-padded to one more word;
 *   - lane j (0..3) starts at RS_CHECKSUM_INIT + j and folds the words
 *     w_i with i % 4 == j in order: lane = (lane ^ w_i) * FNV prime;
 *   - the result starts at RS_CHECKSUM_INIT and folds lane 0, 1, 2, 3 and
 *     then len (bytes) the same way.
 * The prime and offset basis are FNV-1a 64's (above). Folding a buffer piece
 * by piece (rs_checksum4_more) gives the same result as one call when every
 * piece but the last is a multiple of 8 bytes long. */
#define RS_FNV_PRIME 0x100000001b3ull  /* FNV 64-bit prime */

/* rs_checksum4 in progress: the four lanes and the bytes folded so far. */
typedef struct rs_checksum4_state {
    uint64_t lane[4];
    uint64_t len;                        /* bytes folded so far */
} rs_checksum4_state;

/* Start a four-lane checksum: lane j = RS_CHECKSUM_INIT + j, len 0. */
static inline void
rs_checksum4_init(rs_checksum4_state *s)
{
    for (int j = 0; j < 4; j++)
        s->lane[j] = RS_CHECKSUM_INIT + (uint64_t)j;
    s->len = 0;
}

/* Fold len more bytes at data into s: word i of the whole (counting from
 * the first byte ever folded) goes to lane i % 4; a last piece whose
 * length is not a multiple of 8 is zero-padded (fold nothing after it). */
static inline void
rs_checksum4_more(rs_checksum4_state *s, const void *data, uint64_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t i = 0;
    /* one word at a time until the next word is lane 0's */
    for (; i + 8 <= len && ((s->len + i) & 31); i += 8) {
        uint64_t w;
        __builtin_memcpy(&w, p + i, 8);
        uint64_t *l = &s->lane[((s->len + i) >> 3) & 3];
        *l = (*l ^ w) * RS_FNV_PRIME;
    }
    uint64_t h0 = s->lane[0], h1 = s->lane[1], h2 = s->lane[2], h3 = s->lane[3];
    for (; i + 32 <= len; i += 32) {
        uint64_t w[4];
        __builtin_memcpy(w, p + i, 32);
        h0 = (h0 ^ w[0]) * RS_FNV_PRIME;
        h1 = (h1 ^ w[1]) * RS_FNV_PRIME;
        h2 = (h2 ^ w[2]) * RS_FNV_PRIME;
        h3 = (h3 ^ w[3]) * RS_FNV_PRIME;
    }
    s->lane[0] = h0, s->lane[1] = h1, s->lane[2] = h2, s->lane[3] = h3;
    for (; i < len; i += 8) {
        uint64_t w = 0;
        __builtin_memcpy(&w, p + i, len - i < 8 ? len - i : 8);
        uint64_t *l = &s->lane[((s->len + i) >> 3) & 3];
        *l = (*l ^ w) * RS_FNV_PRIME;
    }
    s->len += len;
}

/* The checksum of what s folded: FNV-1a's fold of lanes 0..3, then len. */
static inline uint64_t
rs_checksum4_final(const rs_checksum4_state *s)
{
    uint64_t h = RS_CHECKSUM_INIT;
    for (int j = 0; j < 4; j++)
        h = (h ^ s->lane[j]) * RS_FNV_PRIME;
    return (h ^ s->len) * RS_FNV_PRIME;
}

/* The four-lane checksum of len bytes at data (format 1.5's chunk seal). */
static inline uint64_t
rs_checksum4(const void *data, uint64_t len)
{
    rs_checksum4_state s;
    rs_checksum4_init(&s);
    rs_checksum4_more(&s, data, len);
    return rs_checksum4_final(&s);
}

/* The checksum a sealed chunk of a file of format 1.`minor` carries:
 * rs_checksum4 from 1.5 (RS_TRACE_MINOR_PACKED), rs_checksum before. */
static inline uint64_t
rs_chunk_checksum(unsigned minor, const void *data, uint64_t len)
{
    return minor >= RS_TRACE_MINOR_PACKED ? rs_checksum4(data, len) : rs_checksum(data, len);
}

/* The header checksum (format 1.2): rs_checksum over the whole
 * rs_file_header with the fields a running writer still updates (flags,
 * chunks_published, device, device_capacity, limit_hit_ns, dropped_records,
 * close_ns) and header_checksum itself taken as zero. Written once, before
 * the magic, so a reader can tell a damaged creation field (rank, pid,
 * clocks, sizes, job identity) from a valid one. */
static inline uint64_t
rs_header_checksum(const rs_file_header *h)
{
    rs_file_header c;
    __builtin_memcpy(&c, h, sizeof c);
    c.flags = 0;
    c.chunks_published = 0;
    c.device = 0;
    c.device_capacity = 0;
    c.limit_hit_ns = 0;
    c.dropped_records = 0;
    c.close_ns = 0;
    c.header_checksum = 0;
    return rs_checksum(&c, sizeof c);
}

#endif
