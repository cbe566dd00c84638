/* p_minimal: only cudaMalloc/cudaFree/cudaMemGetInfo; run against the
 * minimal double (LD_LIBRARY_PATH). Prints "minimal=1" when the runtime it
 * runs against lacks cudaRuntimeGetVersion (i.e. it is the minimal one).
 * cudaMalloc(1 MiB) -> 0x7e0000000000, cudaMemGetInfo, cudaFree. */
#include <dlfcn.h>

#include "prog_util.h"

int
main(void)
{
    void *a;
    size_t fr = 0, tot = 0;
    printf("minimal=%d\n", dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion") == NULL);
    OK(cudaMalloc(&a, 1048576));
    OK(cudaMemGetInfo(&fr, &tot));
    OK(cudaFree(a));
    printf("a=%p free=%zu total=%zu\n", a, fr, tot);
    printf("done\n");
    return 0;
}
