/* drvmod.c: a library loaded after start (like NCCL or cuBLAS) that gets
 * cuMemAlloc/cuMemFree from the runtime and allocates: its records'
 * callers must resolve to this library. */
#include "drv_util.h"

__attribute__((visibility("default"))) int
drvmod_run(void)
{
    alloc_fn a = (alloc_fn)drv_by_version("cuMemAlloc", cudaEnableDefault);
    free_fn f = (free_fn)drv_by_version("cuMemFree", cudaEnableDefault);
    CUdeviceptr p;
    if (a(&p, 8192) != CUDA_SUCCESS)
        return 1;
    return f(p) != CUDA_SUCCESS;
}
