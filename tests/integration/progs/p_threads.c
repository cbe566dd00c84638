/* p_threads: NVTX nesting per thread, thread renames.
 *
 * main pushes "main.outer" BEFORE its first CUDA call (replayed into the
 * trace as pre_trace), allocates 1 MiB (creates the trace), pushes
 * "main.inner", then runs three workers concurrently. Worker i:
 *   cudaMalloc(256*(i+1))           first record, name inherited from main
 *   rename: i=0 pthread_setname_np(self,"worker_a"), i=1 prctl "worker_b",
 *           i=2 pthread_setname_np(self,"pt_autograd_0")
 *   push T<i>.outer (depth 1), cudaMalloc(4096*(i+1))
 *   push T<i>.inner (depth 2), cudaMalloc(512*(i+1)+100)
 *   push T<i>.leaf (depth 3), pop (2), cudaFree(inner), pop (1),
 *   cudaFree(outer), pop (0), cudaFree(first)
 * Output: "worker i tid=T first=P outer=P inner=P" per worker, "main tid=T".
 */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>

#include "prog_util.h"

static pthread_barrier_t g_bar;
static const char *const g_names[3] = { "worker_a", "worker_b", "pt_autograd_0" };

static void *
worker(void *arg)
{
    int i = (int)(intptr_t)arg;
    char name[32];
    void *first, *outer, *inner;

    OK(cudaMalloc(&first, (size_t)256 * (i + 1)));
    if (i == 1)
        prctl(PR_SET_NAME, (unsigned long)g_names[i], 0, 0, 0);
    else
        pthread_setname_np(pthread_self(), g_names[i]);
    pthread_barrier_wait(&g_bar);

    snprintf(name, sizeof name, "T%d.outer", i);
    nvtxRangePushA(name);
    OK(cudaMalloc(&outer, (size_t)4096 * (i + 1)));
    snprintf(name, sizeof name, "T%d.inner", i);
    nvtxRangePushA(name);
    OK(cudaMalloc(&inner, (size_t)512 * (i + 1) + 100));
    snprintf(name, sizeof name, "T%d.leaf", i);
    nvtxRangePushA(name);
    nvtxRangePop();
    OK(cudaFree(inner));
    nvtxRangePop();
    OK(cudaFree(outer));
    nvtxRangePop();
    OK(cudaFree(first));
    printf("worker %d tid=%d pthread=%#lx first=%p outer=%p inner=%p\n", i, prog_gettid(),
           (unsigned long)pthread_self(), first, outer, inner);
    fflush(stdout);
    return NULL;
}

int
main(void)
{
    pthread_t th[3];
    void *p;

    nvtxRangePushA("main.outer");
    OK(cudaMalloc(&p, 1048576));
    nvtxRangePushA("main.inner");
    pthread_barrier_init(&g_bar, NULL, 3);
    for (int i = 0; i < 3; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            printf("FAIL: pthread_create\n");
            return 3;
        }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    nvtxRangePop();
    OK(cudaFree(p));
    nvtxRangePop();
    printf("main tid=%d pthread=%#lx p=%p\n", prog_gettid(), (unsigned long)pthread_self(), p);
    printf("done\n");
    return 0;
}
