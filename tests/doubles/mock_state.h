/* mock_state.h: the one shared state of the CUDA test doubles.
 *
 * Every API family file (cudart_*.c now; cuda_driver_*.c, nccl_*.c later)
 * calls only these functions; nothing else holds state. The state models
 * what the driver owns: devices, their contexts, a virtual address space per
 * device, the live allocations and the memory pools. A later mock libcuda can
 * take this file over (exporting these functions under a mock_ prefix) and
 * the mock libcudart would then call into it, as the real runtime does.
 *
 * Configuration (read once, at the first call):
 *   MOCK_CUDA_CAPACITY       bytes per device (default 80 GiB)
 *   MOCK_CUDA_DEVICES        number of devices (default 8, at most 64)
 *   MOCK_CUDA_CONTEXT_BYTES  bytes a context uses once a device is touched
 *                            (default 512 MiB)
 *   MOCK_CUDA_FAIL           "fn@N=code,...": the Nth call (1-based, counted
 *                            per process) of fn returns code, doing nothing
 *   MOCK_CUDA_THREAD_ARENAS  1: device and async blocks come from per-thread
 *                            arenas, not the one locked table (a benchmark
 *                            mode: no capacity limit for them; mock_arena.c)
 *
 * Device addresses are numbers only: device d hands out
 * mock_range_base(MOCK_RANGE_RUNTIME, d) upwards, 512-byte aligned, never
 * reused, and no host memory backs them. Managed and host-pinned memory is
 * real (malloc).
 */
#ifndef MOCK_STATE_H
#define MOCK_STATE_H

#include <stddef.h>
#include <stdint.h>

#define MOCK_DEV_BASE       0x7e0000000000ull
#define MOCK_DEV_SHIFT      40
#define MOCK_ALIGN          512ull
#define MOCK_POOL_BASE      0x7d0000000000ull   /* fake cudaMemPool_t handles */
#define MOCK_POOL_STRIDE    0x100ull
#define MOCK_MAX_DEVICES    64
#define MOCK_RUNTIME_VERSION 13000
#define MOCK_DRIVER_VERSION  13000

/* Device address ranges (mock_range_base), one TiB per device and kind:
 * the runtime's cudaMalloc/cudaMallocAsync blocks, the driver's
 * cuMemAlloc blocks and its cuMemAddressReserve reservations.
 *
 * Nothing backs these addresses, and the copies tell device from host memory
 * by whether the page is mapped (cudart_copy.c), so no range may lie where the
 * kernel places the process's own mappings: a host mapping there is written
 * by copies "into device memory" and read by copies out of it (a SIGSEGV of
 * the real Megatron-Core job's rank 1, once in a few dozen runs:
 * docs/validation/megatron-core.md). On x86-64 with 4-level page tables the
 * kernel puts mmap()s and shared libraries below a base randomised over the
 * TiB under the top of user space, 0x7fffffffffff (vm.mmap_rnd_bits 28: 2^28
 * pages), and PIE executables and their brk heap within the TiB above
 * 0x555555554000. Device 0 keeps the ranges below those (0x7e0000000000,
 * 0x600000000000, 0x500000000000: 1 TiB and more away); every other device
 * lies above the user address space (bit 48 and up), which the kernel never
 * maps without being asked for such an address:
 *   device 0:  runtime 0x7e0000000000, driver alloc 0x600000000000,
 *              driver VA 0x500000000000
 *   device d:  ((kind + 1) << 48) + (d << 40), kind 0 runtime, 1 driver
 *              alloc, 2 driver VA
 * Device 1 used to be 0x7f0000000000, inside the mmap TiB. */
enum mock_range {
    MOCK_RANGE_RUNTIME = 0,
    MOCK_RANGE_DRV_ALLOC = 1,
    MOCK_RANGE_DRV_VA = 2,
    MOCK_RANGE_KINDS = 3,
};

/* The state's functions are private to the library that compiles
 * mock_state.c (the minimal libcudart), except with MOCK_STATE_EXPORT: the
 * mock libcuda.so.1 (megasim's and the fake GPU's) exports them and the mock
 * libcudart.so.13 calls them, so runtime and driver share one device memory
 * state. */
#ifdef MOCK_STATE_EXPORT
#define MOCK_HIDDEN __attribute__((visibility("default")))
#else
#define MOCK_HIDDEN __attribute__((visibility("hidden")))
#endif

/* Error codes (cudaError_t values; kept numeric so driver/NCCL mocks can map them). */
enum {
    MOCK_OK = 0,
    MOCK_ERR_INVALID_VALUE = 1,
    MOCK_ERR_MEMORY_ALLOCATION = 2,
    MOCK_ERR_INVALID_DEVICE = 101,
};

enum mock_kind {
    MOCK_KIND_DEVICE = 0,   /* cudaMalloc: counted */
    MOCK_KIND_ASYNC = 1,    /* stream-ordered, from a device's pool: counted */
    MOCK_KIND_MANAGED = 2,  /* cudaMallocManaged: real memory, not counted */
    MOCK_KIND_HOST = 3,     /* cudaMallocHost / cudaHostAlloc: real memory */
};

typedef struct mock_alloc_info {
    uint64_t size;
    int device;
    int kind;               /* enum mock_kind */
} mock_alloc_info;

/* First address of device `dev`'s range of `kind` (enum mock_range). */
MOCK_HIDDEN uint64_t mock_range_base(int kind, int dev);
/* The device whose range (any kind, 1 TiB each) holds `addr`, or -1. */
MOCK_HIDDEN int mock_range_device(uint64_t addr);

/* Configuration. */
MOCK_HIDDEN uint64_t mock_capacity(void);
MOCK_HIDDEN int mock_device_count(void);
MOCK_HIDDEN uint64_t mock_context_bytes(void);

/* Fault injection: counts this call of `fn` and returns the configured
 * error code for it, or 0. Every entry point calls it first. */
MOCK_HIDDEN int mock_fail_check(const char *fn);

/* Per-thread current device (starts at 0) and last error. */
MOCK_HIDDEN int mock_current_device(void);
MOCK_HIDDEN void mock_set_current_device(int dev);
/* The device of the calling thread's current context, which the driver's
 * calls act on: the runtime's current device (cudaSetDevice makes that
 * device's primary context current on the thread, as CUDA 12+ does), or the
 * device whose primary context cuCtxSetCurrent made current; -1 after
 * cuCtxSetCurrent(NULL), until a device or context is made current again. */
MOCK_HIDDEN int mock_context_device(void);
MOCK_HIDDEN void mock_clear_current_context(void);
MOCK_HIDDEN int mock_set_error(int err);       /* records err when != 0, returns it */
MOCK_HIDDEN int mock_take_error(void);         /* returns and clears */
MOCK_HIDDEN int mock_peek_error(void);

/* Device contexts: created (and counted as used) at the first call on a device. */
MOCK_HIDDEN int mock_valid_device(int dev);
MOCK_HIDDEN void mock_touch_device(int dev);

/* Device-side allocation of `size` bytes (kind DEVICE or ASYNC) on `dev`:
 * MOCK_ERR_MEMORY_ALLOCATION with nothing allocated when it does not fit.
 * size 0 gives address 0 and success. */
MOCK_HIDDEN int mock_dev_alloc(int dev, uint64_t size, int kind, uint64_t *out);
/* Device memory without an address from this state (the driver's
 * cuMemAlloc blocks and cuMemCreate handles): counted like DEVICE bytes, the
 * context created; MOCK_ERR_MEMORY_ALLOCATION over capacity (nothing
 * counted). Uncharging more than is live leaves 0. */
MOCK_HIDDEN int mock_charge(int dev, uint64_t size);
MOCK_HIDDEN void mock_uncharge(int dev, uint64_t size);
/* 1 once the device's context exists (its first call). */
MOCK_HIDDEN int mock_device_touched(int dev);
/* Host-side allocation (kind MANAGED or HOST): real memory, registered. */
MOCK_HIDDEN int mock_host_alloc(uint64_t size, int kind, void **out);
/* Removes `ptr` if it is live and its kind is in `kind_mask` (1 << kind);
 * releases real memory for host kinds. Returns MOCK_ERR_INVALID_VALUE for
 * unknown pointers or kinds outside the mask. */
MOCK_HIDDEN int mock_release(uint64_t ptr, unsigned kind_mask, mock_alloc_info *info);

/* Bytes on a device: the context (when created) plus live DEVICE and ASYNC. */
MOCK_HIDDEN uint64_t mock_device_used(int dev);

/* Device properties (mock_props.c; constants, no state): an H100 SXM5 with
 * MOCK_CUDA_CAPACITY bytes. `props` is a struct cudaDeviceProp *. */
MOCK_HIDDEN void mock_device_props(int dev, void *props);
MOCK_HIDDEN int mock_device_attr(int attr, int dev);
/* Memory pools: the default pool of each device (fixed fake handles). */
MOCK_HIDDEN uint64_t mock_default_pool(int dev);
MOCK_HIDDEN int mock_pool_device(uint64_t pool);           /* -1 unknown handle */
MOCK_HIDDEN uint64_t mock_pool_live(int dev);              /* live async bytes */
MOCK_HIDDEN uint64_t mock_pool_high(int dev);
MOCK_HIDDEN void mock_pool_reset_high(int dev);
MOCK_HIDDEN uint64_t mock_pool_release_threshold(int dev);
MOCK_HIDDEN void mock_pool_set_release_threshold(int dev, uint64_t v);

/* Per-thread arenas (mock_arena.c, MOCK_CUDA_THREAD_ARENAS=1): private to
 * the library that compiles mock_state.c. mock_arena_alloc and
 * mock_arena_release return -1 when the arena does not serve the call (mode
 * off, no slot free, slice used up, size 0, another kind; a pointer outside
 * every arena), and the locked path then does; otherwise a MOCK_ERR code.
 * mock_arena_live: the arena blocks' bytes on `dev` (async_only: ASYNC). */
#define MOCK_ARENAS 64
__attribute__((visibility("hidden"))) int mock_arena_on(void);
__attribute__((visibility("hidden"))) int mock_arena_alloc(int dev, uint64_t size, int kind,
                                                            uint64_t *out);
__attribute__((visibility("hidden"))) int mock_arena_release(uint64_t ptr, unsigned kind_mask,
                                                              mock_alloc_info *info);
__attribute__((visibility("hidden"))) uint64_t mock_arena_live(int dev, int async_only);

#endif
