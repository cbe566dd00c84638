/* p_graph: a CUDA-graph capture window with an allocation inside,
 * instantiation by each API and launches. argv[1] = "ptsz": the same
 * through the _ptsz entry points. Graph/exec handles are the mock's
 * (0x67000000 + k*0x100, 0x6e000000 + k*0x100). */
#include <string.h>

#include "prog_util.h"

extern cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t, enum cudaStreamCaptureMode);
extern cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t, cudaGraph_t *);
extern cudaError_t CUDARTAPI cudaStreamIsCapturing_ptsz(cudaStream_t, enum cudaStreamCaptureStatus *);
extern cudaError_t CUDARTAPI cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *, cudaGraph_t,
                                                                 cudaGraphInstantiateParams *);
extern cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);

static void
plain(void)
{
    enum cudaStreamCaptureStatus st;
    cudaGraph_t g;
    cudaGraphExec_t e1, e2, e3;
    void *p;
    OK(cudaStreamIsCapturing(STREAM(0x1234), &st));   /* none: not recorded */
    OK(cudaStreamBeginCapture(STREAM(0x1234), cudaStreamCaptureModeThreadLocal));
    OK(cudaStreamIsCapturing(STREAM(0x1234), &st));   /* active */
    if (st != cudaStreamCaptureStatusActive)
        exit(3);
    OK(cudaMallocAsync(&p, 4096, STREAM(0x1234)));
    OK(cudaStreamEndCapture(STREAM(0x1234), &g));
    OK(cudaStreamIsCapturing(STREAM(0x1234), &st));   /* none again */
    OK(cudaGraphInstantiate(&e1, g, 0));
    OK(cudaGraphInstantiateWithFlags(&e2, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    cudaGraphInstantiateParams prm;
    memset(&prm, 0, sizeof prm);
    OK(cudaGraphInstantiateWithParams(&e3, g, &prm));
    OK(cudaGraphLaunch(e1, STREAM(0x1234)));
    OK(cudaGraphLaunch(e1, STREAM(0x1234)));
    OK(cudaGraphLaunch(e2, STREAM(0x5678)));
    EXPECT_RC(cudaGraphLaunch((cudaGraphExec_t)0x99, STREAM(0x5678)), cudaErrorInvalidResourceHandle);
    OK(cudaFreeAsync(p, STREAM(0x1234)));
    printf("graph=%p exec1=%p exec2=%p exec3=%p\n", (void *)g, (void *)e1, (void *)e2, (void *)e3);
}

static void
ptsz(void)
{
    enum cudaStreamCaptureStatus st;
    cudaGraph_t g;
    cudaGraphExec_t e;
    OK(cudaStreamBeginCapture_ptsz(STREAM(0x2222), cudaStreamCaptureModeRelaxed));
    OK(cudaStreamIsCapturing_ptsz(STREAM(0x2222), &st));
    OK(cudaStreamEndCapture_ptsz(STREAM(0x2222), &g));
    cudaGraphInstantiateParams prm;
    memset(&prm, 0, sizeof prm);
    OK(cudaGraphInstantiateWithParams_ptsz(&e, g, &prm));
    OK(cudaGraphLaunch_ptsz(e, STREAM(0x2222)));
    printf("graph=%p exec=%p\n", (void *)g, (void *)e);
}

int
main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "ptsz"))
        ptsz();
    else
        plain();
    printf("done\n");
    return 0;
}
