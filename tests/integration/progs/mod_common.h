/* mod_common.h: body of the two dlopen'ed NVTX modules (mod_a.c, mod_b.c).
 * Each module includes the NVTX3 headers itself, so NVTX injection is
 * initialised separately in each. */
#include <nvtx3/nvToolsExt.h>

#include "prog_util.h"

#define MOD_BODY(fname, range, bytes)              \
    __attribute__((visibility("default"))) int     \
    fname(void)                                    \
    {                                              \
        void *p;                                   \
        nvtxRangePushA(range);                     \
        if (cudaMalloc(&p, bytes) != cudaSuccess)  \
            return 1;                              \
        nvtxMarkA(range ".mark");                  \
        if (cudaFree(p) != cudaSuccess)            \
            return 1;                              \
        nvtxRangePop();                            \
        return 0;                                  \
    }
