/* ms_cuda.h: libmegasim_cuda.so, megasim's only way to CUDA, NVTX and
 * threads (docs/architecture.md). Python loads it with ctypes and calls these
 * functions; every CUDA call they make goes through this library's PLT to
 * libcudart.so.13 (the mock in tests/doubles), exactly as libc10_cuda's do,
 * so an LD_PRELOADed shim interposes them. Nothing here is shipped to users.
 *
 * Parts:
 *   device     ms_set_device, ms_mem_get_info, ms_malloc, ms_free
 *   allocator  ms_alloc_*: a model of PyTorch's CUDA caching allocator
 *              ([PT] in docs/sources.md: rounding, small/large pools, splitting,
 *              block reuse, free-and-retry) plus the tensor modes
 *              (backend:cudaMallocAsync, PYTORCH_NO_CUDA_MEMORY_CACHING)
 *   nvtx       ms_nvtx_push/pop/mark through the real NVTX3 header API
 *   threads    ms_thread_name; ms_autograd_*: the backward worker, a native
 *              pthread named pt_autograd_<dev> that enters Python through
 *              PyGILState_Ensure, as PyTorch's engine thread does
 *   part 2     ms_caps() says which doubles this build was linked with
 *              (PyTorch's allocator report "libc10", NCCL, driver VMM);
 *              the functions for an absent double return MS_ENOTAVAIL.
 */
#ifndef MS_CUDA_H
#define MS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#define MS_OK           0
#define MS_EOOM         2     /* cudaErrorMemoryAllocation */
#define MS_ENOTAVAIL  (-100)  /* the double this needs is not linked in */
#define MS_EREFUSED   (-101)  /* allocator setting not supported (see message) */
#define MS_EINVAL     (-102)

/* ms_caps() bits */
#define MS_CAP_C10_REPORT  0x1   /* c10::reportMemoryUsageToProfiler double */
#define MS_CAP_NCCL        0x2   /* mock libnccl */
#define MS_CAP_VMM         0x4   /* mock libcuda (cuMemCreate/Map: expandable segments) */

/* allocator modes */
#define MS_MODE_NATIVE   0
#define MS_MODE_ASYNC    1
#define MS_MODE_NOCACHE  2
#define MS_MODE_EXPANDABLE 3

typedef struct ms_stats {
    uint64_t allocated;          /* active block bytes (memory_allocated) */
    uint64_t reserved;           /* segment bytes (memory_reserved) */
    uint64_t max_allocated, max_reserved;
    uint64_t active_blocks, segments;
    uint64_t inactive_split;     /* free blocks inside split segments */
    uint64_t inactive_split_blocks;
    uint64_t largest_free;       /* largest cached free block */
    uint64_t num_alloc_retries, num_ooms, num_cuda_mallocs, num_cuda_frees;
    uint64_t oom_request;        /* last OOM: the segment size asked for */
    uint64_t oom_free, oom_total;/* cudaMemGetInfo at the last OOM */
    int32_t mode, device;
} ms_stats;

uint32_t ms_caps(void);
const char *ms_last_message(void);

int ms_set_device(int dev);
int ms_mem_get_info(uint64_t *free_b, uint64_t *total_b);
int ms_malloc(uint64_t size, uint64_t *ptr);      /* raw cudaMalloc */
int ms_free(uint64_t ptr);                        /* raw cudaFree */

/* Reads PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF /
 * PYTORCH_NO_CUDA_MEMORY_CACHING like PyTorch does (once). Returns the mode
 * or MS_EREFUSED with ms_last_message() saying why. */
int ms_alloc_init(int device);
int ms_alloc(uint64_t size, uint64_t *ptr);       /* MS_OK or MS_EOOM */
int ms_alloc_free(uint64_t ptr);
uint64_t ms_alloc_block_size(uint64_t ptr);       /* 0 unknown */
int ms_alloc_empty_cache(void);
void ms_alloc_stats(ms_stats *out);
/* Private pools (CUDA-graph capture): allocations made between begin and end
 * come from a separate pool whose segments are never reused by the default
 * pools and are not freed by empty_cache while the pool is alive. */
int ms_alloc_pool_begin(void);                    /* returns pool id >0 */
int ms_alloc_pool_use(int id);                    /* make an existing pool current again */
int ms_alloc_pool_end(void);
uint64_t ms_alloc_pool_reserved(void);

/* CUDA graphs (torch.cuda.graph / TE make_graphed_callables): capture on a
 * side stream with cudaStreamBeginCapture/EndCapture, cudaGraphInstantiate,
 * cudaGraphLaunch (the mock runtime's graph API). */
int ms_graph_capture_begin(void);
uint64_t ms_graph_capture_end(void);              /* the executable graph, 0 on error */
int ms_graph_launch(uint64_t exec);

/* NVTX (default domain) */
void ms_nvtx_push(const char *name);
void ms_nvtx_pop(void);
void ms_nvtx_mark(const char *name);

/* threads */
int ms_thread_name(const char *name);
typedef int (*ms_task_fn)(int64_t arg);
int ms_autograd_start(int device);
int ms_autograd_run(ms_task_fn fn, int64_t arg);  /* blocks; returns fn's value */
int ms_autograd_stop(void);
int ms_autograd_tid(void);

/* part-2 plug points */
int ms_nccl_buffer_alloc(uint64_t size, uint64_t *ptr);   /* libmegasim_nccl.so */
int ms_nccl_buffer_free(uint64_t ptr);                     /* libmegasim_nccl.so */
int ms_report_block(uint64_t ptr, int64_t delta, uint64_t allocated, uint64_t reserved, int device);

#endif
