/* p_minimal_async: against the minimal double, calls cudaMallocAsync and
 * cudaFreeAsync, which that runtime lacks: only the shim defines them, and
 * must return an error instead of crashing.
 * cudaMalloc(4096) -> 0x7e0000000000; cudaMallocAsync(8192, 0x77) -> error;
 * cudaFreeAsync(NULL, 0x77); cudaFree(4096 block); cudaMalloc(512) again.
 * Output: "minimal=1", "async_rc=N freeasync_rc=N". */
#include <dlfcn.h>

#include "prog_util.h"

int
main(void)
{
    void *a, *b = NULL, *c;
    printf("minimal=%d\n", dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion") == NULL);
    OK(cudaMalloc(&a, 4096));
    int rc = (int)cudaMallocAsync(&b, 8192, STREAM(0x77));
    int rc2 = (int)cudaFreeAsync(b, STREAM(0x77));
    printf("async_rc=%d freeasync_rc=%d b=%p\n", rc, rc2, b);
    OK(cudaFree(a));
    OK(cudaMalloc(&c, 512));
    OK(cudaFree(c));
    printf("c=%p\n", c);
    printf("done\n");
    return 0;
}
