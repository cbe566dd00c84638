/* pre2.c: a second preloaded interposer (like torch_memory_saver): defines
 * cudaMalloc, forwarding to dlsym(RTLD_NEXT, "cudaMalloc"), and
 * pre2_report(), which prints where its own dlsym(RTLD_NEXT, ...),
 * dlsym(RTLD_DEFAULT, ...) and dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34")
 * lookups landed, as "key=LIB:SYMBOL" lines. glibc resolves RTLD_NEXT
 * relative to the caller: the answers depend on the LD_PRELOAD order, and
 * must not depend on whether librecompshim.so's dlsym is in between. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef cudaError_t (*cuda_malloc_fn)(void **, size_t);
static cuda_malloc_fn next_cuda_malloc;
static int calls;

static void
where(const char *key, const void *fn)
{
    Dl_info di;
    char path[512];
    if (!fn || !dladdr(fn, &di) || !di.dli_fname) {
        printf("%s=none\n", key);
        return;
    }
    snprintf(path, sizeof path, "%s", di.dli_fname);
    printf("%s=%s:%s\n", key, basename(path), di.dli_sname ? di.dli_sname : "?");
}

EXPORT cudaError_t CUDARTAPI
cudaMalloc(void **devPtr, size_t size)
{
    calls++;
    if (!next_cuda_malloc)
        next_cuda_malloc = (cuda_malloc_fn)dlsym(RTLD_NEXT, "cudaMalloc");
    if (!next_cuda_malloc || (void *)next_cuda_malloc == (void *)cudaMalloc)
        return cudaErrorUnknown;   /* would recurse: RTLD_NEXT resolved for someone else */
    return next_cuda_malloc(devPtr, size);
}

EXPORT void
pre2_report(void)
{
    where("next_malloc", dlsym(RTLD_NEXT, "malloc"));
    where("next_cudaMalloc", dlsym(RTLD_NEXT, "cudaMalloc"));
    where("next_dlsym", dlsym(RTLD_NEXT, "dlsym"));
    where("default_cudaMalloc", dlsym(RTLD_DEFAULT, "cudaMalloc"));
    where("dlvsym_dlsym", dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    where("dlvsym_malloc", dlvsym(RTLD_NEXT, "malloc", "GLIBC_2.2.5"));
    printf("pre2_calls=%d\n", calls);
    fflush(stdout);
}
