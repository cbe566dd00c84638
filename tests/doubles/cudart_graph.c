/* cudart_graph.c: mock libcudart CUDA graphs: stream capture with a
 * per-stream capture state, instantiation and launch. Handles are fake
 * numbers: the k-th graph (1-based, per process) is 0x67000000 + k*0x100,
 * the k-th executable graph 0x6e000000 + k*0x100.
 *
 *   cudaStreamBeginCapture on a capturing stream: cudaErrorIllegalState
 *   cudaStreamEndCapture on a stream not capturing: cudaErrorIllegalState
 *   cudaGraphInstantiate* of an unknown graph: cudaErrorInvalidValue
 *   cudaGraphLaunch of an unknown exec: cudaErrorInvalidResourceHandle
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>

#include "mock_state.h"

#define GRAPH_BASE 0x67000000ull
#define EXEC_BASE  0x6e000000ull
#define HANDLE_STRIDE 0x100ull
#define MAX_STREAMS 256

typedef struct capture {
    uint64_t stream;
    int used;
    int active;
    int mode;
} capture;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static capture g_cap[MAX_STREAMS];
static uint64_t g_graphs, g_execs;

#define CHECK_FAIL(fn)                       \
    do {                                     \
        int injected_ = mock_fail_check(fn); \
        if (injected_)                       \
            return (cudaError_t)mock_set_error(injected_); \
    } while (0)

/* The capture slot of a stream (caller holds g_lock). */
static capture *
cap_of(cudaStream_t s)
{
    uint64_t v = (uint64_t)(uintptr_t)s;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (g_cap[i].used && g_cap[i].stream == v)
            return &g_cap[i];
    for (int i = 0; i < MAX_STREAMS; i++)
        if (!g_cap[i].used) {
            g_cap[i].used = 1;
            g_cap[i].stream = v;
            return &g_cap[i];
        }
    return NULL;
}

static cudaError_t
begin_capture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    if ((unsigned)mode > cudaStreamCaptureModeRelaxed)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    pthread_mutex_lock(&g_lock);
    capture *c = cap_of(stream);
    cudaError_t rc = cudaSuccess;
    if (!c || c->active)
        rc = cudaErrorIllegalState;
    else {
        c->active = 1;
        c->mode = (int)mode;
    }
    pthread_mutex_unlock(&g_lock);
    return (cudaError_t)mock_set_error(rc);
}

static cudaError_t
end_capture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    if (!pGraph)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *pGraph = NULL;
    pthread_mutex_lock(&g_lock);
    capture *c = cap_of(stream);
    cudaError_t rc = cudaSuccess;
    if (!c || !c->active)
        rc = cudaErrorIllegalState;
    else {
        c->active = 0;
        *pGraph = (cudaGraph_t)(uintptr_t)(GRAPH_BASE + ++g_graphs * HANDLE_STRIDE);
    }
    pthread_mutex_unlock(&g_lock);
    return (cudaError_t)mock_set_error(rc);
}

static cudaError_t
is_capturing(cudaStream_t stream, enum cudaStreamCaptureStatus *st)
{
    if (!st)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    pthread_mutex_lock(&g_lock);
    capture *c = cap_of(stream);
    *st = c && c->active ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    pthread_mutex_unlock(&g_lock);
    return cudaSuccess;
}

static cudaError_t
instantiate(cudaGraphExec_t *pExec, cudaGraph_t graph)
{
    if (!pExec)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    *pExec = NULL;
    uint64_t g = (uint64_t)(uintptr_t)graph;
    pthread_mutex_lock(&g_lock);
    cudaError_t rc = cudaSuccess;
    if (g <= GRAPH_BASE || (g - GRAPH_BASE) % HANDLE_STRIDE || (g - GRAPH_BASE) / HANDLE_STRIDE > g_graphs)
        rc = (cudaError_t)MOCK_ERR_INVALID_VALUE;
    else
        *pExec = (cudaGraphExec_t)(uintptr_t)(EXEC_BASE + ++g_execs * HANDLE_STRIDE);
    pthread_mutex_unlock(&g_lock);
    return (cudaError_t)mock_set_error(rc);
}

static cudaError_t
launch(cudaGraphExec_t exec)
{
    uint64_t e = (uint64_t)(uintptr_t)exec;
    pthread_mutex_lock(&g_lock);
    int ok = e > EXEC_BASE && (e - EXEC_BASE) % HANDLE_STRIDE == 0 && (e - EXEC_BASE) / HANDLE_STRIDE <= g_execs;
    pthread_mutex_unlock(&g_lock);
    return ok ? cudaSuccess : (cudaError_t)mock_set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t CUDARTAPI
cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    CHECK_FAIL("cudaStreamBeginCapture");
    return begin_capture(stream, mode);
}

cudaError_t CUDARTAPI
cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    CHECK_FAIL("cudaStreamBeginCapture_ptsz");
    return begin_capture(stream, mode);
}

cudaError_t CUDARTAPI
cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    CHECK_FAIL("cudaStreamEndCapture");
    return end_capture(stream, pGraph);
}

cudaError_t CUDARTAPI
cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    CHECK_FAIL("cudaStreamEndCapture_ptsz");
    return end_capture(stream, pGraph);
}

cudaError_t CUDARTAPI
cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    CHECK_FAIL("cudaStreamIsCapturing");
    return is_capturing(stream, pCaptureStatus);
}

cudaError_t CUDARTAPI
cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    CHECK_FAIL("cudaStreamIsCapturing_ptsz");
    return is_capturing(stream, pCaptureStatus);
}

cudaError_t CUDARTAPI
cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    CHECK_FAIL("cudaGraphInstantiate");
    return instantiate(pGraphExec, graph);
}

cudaError_t CUDARTAPI
cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    CHECK_FAIL("cudaGraphInstantiateWithFlags");
    return instantiate(pGraphExec, graph);
}

static cudaError_t
with_params(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *p)
{
    if (!p)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    cudaError_t rc = instantiate(pGraphExec, graph);
    p->errNode_out = NULL;
    p->result_out = rc == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
    return rc;
}

cudaError_t CUDARTAPI
cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                               cudaGraphInstantiateParams *instantiateParams)
{
    CHECK_FAIL("cudaGraphInstantiateWithParams");
    return with_params(pGraphExec, graph, instantiateParams);
}

cudaError_t CUDARTAPI
cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                    cudaGraphInstantiateParams *instantiateParams)
{
    CHECK_FAIL("cudaGraphInstantiateWithParams_ptsz");
    return with_params(pGraphExec, graph, instantiateParams);
}

cudaError_t CUDARTAPI
cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    (void)stream;
    CHECK_FAIL("cudaGraphLaunch");
    return launch(graphExec);
}

cudaError_t CUDARTAPI
cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    (void)stream;
    CHECK_FAIL("cudaGraphLaunch_ptsz");
    return launch(graphExec);
}

/* The calling thread's stream-capture interaction mode (starts global). */
static __thread enum cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

cudaError_t CUDARTAPI
cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    CHECK_FAIL("cudaThreadExchangeStreamCaptureMode");
    if (!mode || (unsigned)*mode > cudaStreamCaptureModeRelaxed)
        return (cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE);
    enum cudaStreamCaptureMode old = t_capture_mode;
    t_capture_mode = *mode;
    *mode = old;
    return cudaSuccess;
}
