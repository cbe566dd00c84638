/* p_nocuda: never touches CUDA (like torchrun's launcher or a data-loader
 * worker), but uses NVTX, thread names and malloc. Must leave no trace. */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <string.h>
#include <sys/prctl.h>

#include "prog_util.h"

static void *
worker(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, (unsigned long)"nocuda_worker", 0, 0, 0);
    nvtxRangePushA("worker.range");
    nvtxRangePop();
    return NULL;
}

int
main(void)
{
    pthread_t th;
    nvtxDomainHandle_t d = nvtxDomainCreateA("NoCudaDomain");
    (void)d;
    nvtxRangePushA("launcher.range");
    nvtxMarkA("launcher.mark");
    pthread_setname_np(pthread_self(), "launcher");
    char *buf = malloc(1 << 20);
    memset(buf, 1, 1 << 20);
    free(buf);
    pthread_create(&th, NULL, worker, NULL);
    pthread_join(th, NULL);
    nvtxRangePop();
    printf("done\n");
    return 0;
}
