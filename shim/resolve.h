/* resolve.h: the real functions behind every hook, resolved lazily. */
#ifndef RECOMPSHIM_RESOLVE_H
#define RECOMPSHIM_RESOLVE_H

#include "record.h"

enum { RS_LIB_CUDART = 1, RS_LIB_LIBC = 2, RS_LIB_CUDA = 3, RS_LIB_NCCL = 4, RS_LIB_C10 = 5 };

/* The real function for API `code` (enum rs_api), or NULL when it cannot be
 * found: dlsym(RTLD_NEXT), then the loaded library itself (dlopen with
 * RTLD_NOLOAD of the path dl_iterate_phdr reports; RTLD_NEXT returns NULL
 * when libcudart sits in a local scope, [PT] in docs/sources.md). Resolved once
 * per API; a miss is remembered and reported as META hook_missing. */
RS_HIDDEN void *rs_real(int code);

/* Resolved functions by API code (resolve.c; NULL until resolved). */
extern void *rs_real_table[] RS_HIDDEN;

/* rs_real inline: one load once the API is resolved (every call after the
 * first), rs_real otherwise. */
static inline __attribute__((always_inline)) void *
rs_real_fast(int code)
{
    void *p = __atomic_load_n(&rs_real_table[code], __ATOMIC_ACQUIRE);
    return __builtin_expect(p != NULL, 1) ? p : rs_real(code);
}

/* Typed access: RS_REAL(cudaMalloc) has cudaMalloc's exact type. */
#define RS_REAL(name) ((__typeof__(&name))rs_real_fast(RS_API_##name))

/* Look up any symbol the way hooks are resolved (RTLD_NEXT, then the
 * loaded libcudart when lib is RS_LIB_CUDART). Not cached. */
RS_HIDDEN void *rs_resolve_sym(const char *name, int lib);

/* The current device from `getter`, a function `int getter(int *device)`
 * returning 0 on success (cudaGetDevice, cuCtxGetDevice: neither creates
 * a context), resolved once into *cache. -1 when unknown. */
RS_HIDDEN int rs_query_device(void *_Atomic *cache, const char *getter, int lib);
/* Set this thread's device from rs_query_device unless already known. */
RS_HIDDEN void rs_learn_device_slow(void *_Atomic *cache, const char *getter, int lib);
static inline void
rs_learn_device(void *_Atomic *cache, const char *getter, int lib)
{
    if (__builtin_expect(t_rs.device < 0, 0))
        rs_learn_device_slow(cache, getter, lib);
}

/* Name of a hooked API code ("cudaMalloc"), or "?" (apis.def). */
RS_HIDDEN const char *rs_hook_name(int code);

/* Write META hook_missing records for every miss so far (file open). */
RS_HIDDEN void rs_resolve_report_missing(void);

/* cudaRuntimeGetVersion of the loaded runtime, 0 when unavailable. Does
 * not initialise CUDA. */
RS_HIDDEN int rs_cuda_runtime_version(void);

#endif
