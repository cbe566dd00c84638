/* p_tensor_env: prints the allocator configuration as the job sees it at
 * main() (after the shim's constructor), then one cudaMallocAsync (or,
 * with P_TENSOR_SYNC=1 in the environment, one cudaMalloc). Arguments are
 * ignored: tests pass Megatron/PyTorch flags for the shim to see. */
#include <stdlib.h>

#include "prog_util.h"

static void
show(const char *name)
{
    const char *v = getenv(name);
    printf("%s=%s\n", name, v ? v : "(unset)");
}

int
main(void)
{
    show("PYTORCH_ALLOC_CONF");
    show("PYTORCH_CUDA_ALLOC_CONF");
    show("PYTORCH_NO_CUDA_MEMORY_CACHING");
    void *p = NULL;
    if (getenv("P_TENSOR_SYNC")) {
        OK(cudaMalloc(&p, 4096));
        OK(cudaFree(p));
    } else {
        OK(cudaMallocAsync(&p, 4096, STREAM(0x1234)));
        OK(cudaFreeAsync(p, STREAM(0x1234)));
    }
    printf("done\n");
    return 0;
}
