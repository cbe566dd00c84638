/* p_preload: runs next to a second preloaded interposer (pre2.c): prints
 * its lookups, then one cudaMalloc/cudaFree that goes through both. */
#include "prog_util.h"

void pre2_report(void);

int
main(void)
{
    void *p = NULL;
    OK(cudaMalloc(&p, 4096));
    OK(cudaFree(p));
    pre2_report();
    printf("ptr=%p\ndone\n", p);
    return 0;
}
