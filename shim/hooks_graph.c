/* hooks_graph.c: CUDA-graph capture windows, instantiation and launches.
 * Allocations inside a capture window come from the graph's private pool
 * ([PT] in docs/sources.md): the analyzer needs the windows to say so. Graph
 * records are ungated so windows stay paired. cudaStreamIsCapturing is
 * called constantly by PyTorch; only answers other than "not capturing"
 * are recorded. */
#include <cuda_runtime_api.h>

#include "record.h"
#include "resolve.h"
#include "writer.h"

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                       enum cudaStreamCaptureStatus *pCaptureStatus);
cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                cudaGraphInstantiateParams *instantiateParams);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);

#define U64(x) ((uint64_t)(uintptr_t)(x))

#define ENTER(name)                                                                             \
    __typeof__(&name) real = RS_REAL(name);                                                   \
    if (!real)                                                                                \
        return cudaErrorNotSupported;                                                         \
    if (t_rs.guard || !rs_enabled())                                                         \
        return

#define RECORD(op, api, stream, graph, exec, mode, rc)                                          \
    do {                                                                                      \
        t_rs.guard++;                                                                         \
        if (rs_trace_open())                                                                  \
            rs_record_graph(op, api, U64(stream), U64(graph), U64(exec), (uint32_t)(mode),    \
                            (int)(rc));                                                       \
        t_rs.guard--;                                                                         \
    } while (0)

#define BEGIN_CAPTURE(name)                                                                     \
    ENTER(name) real(stream, mode);                                                           \
    cudaError_t rc = real(stream, mode);                                                      \
    RECORD(RS_GRAPH_BEGIN_CAPTURE, RS_API_##name, stream, 0, 0, mode, rc);                    \
    return rc

RS_EXPORT cudaError_t
cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    BEGIN_CAPTURE(cudaStreamBeginCapture);
}

RS_EXPORT cudaError_t
cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    BEGIN_CAPTURE(cudaStreamBeginCapture_ptsz);
}

#define END_CAPTURE(name)                                                                       \
    ENTER(name) real(stream, pGraph);                                                         \
    cudaError_t rc = real(stream, pGraph);                                                    \
    RECORD(RS_GRAPH_END_CAPTURE, RS_API_##name, stream,                                      \
           (rc == cudaSuccess && pGraph) ? *pGraph : 0, 0, 0, rc);                            \
    return rc

RS_EXPORT cudaError_t
cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    END_CAPTURE(cudaStreamEndCapture);
}

RS_EXPORT cudaError_t
cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    END_CAPTURE(cudaStreamEndCapture_ptsz);
}

#define IS_CAPTURING(name)                                                                      \
    ENTER(name) real(stream, pCaptureStatus);                                                 \
    cudaError_t rc = real(stream, pCaptureStatus);                                            \
    if (rc != cudaSuccess ||                                                                  \
        (pCaptureStatus && *pCaptureStatus != cudaStreamCaptureStatusNone))                   \
        RECORD(RS_GRAPH_IS_CAPTURING, RS_API_##name, stream, 0, 0,                            \
               pCaptureStatus ? *pCaptureStatus : 0, rc);                                     \
    return rc

RS_EXPORT cudaError_t
cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    IS_CAPTURING(cudaStreamIsCapturing);
}

RS_EXPORT cudaError_t
cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    IS_CAPTURING(cudaStreamIsCapturing_ptsz);
}

RS_EXPORT cudaError_t
cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    ENTER(cudaGraphInstantiate) real(pGraphExec, graph, flags);
    cudaError_t rc = real(pGraphExec, graph, flags);
    RECORD(RS_GRAPH_INSTANTIATE, RS_API_cudaGraphInstantiate, 0, graph,
           (rc == cudaSuccess && pGraphExec) ? *pGraphExec : 0, 0, rc);
    return rc;
}

RS_EXPORT cudaError_t
cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                              unsigned long long flags)
{
    ENTER(cudaGraphInstantiateWithFlags) real(pGraphExec, graph, flags);
    cudaError_t rc = real(pGraphExec, graph, flags);
    RECORD(RS_GRAPH_INSTANTIATE, RS_API_cudaGraphInstantiateWithFlags, 0, graph,
           (rc == cudaSuccess && pGraphExec) ? *pGraphExec : 0, 0, rc);
    return rc;
}

#define INSTANTIATE_PARAMS(name)                                                                \
    ENTER(name) real(pGraphExec, graph, instantiateParams);                                   \
    cudaError_t rc = real(pGraphExec, graph, instantiateParams);                              \
    RECORD(RS_GRAPH_INSTANTIATE, RS_API_##name, 0, graph,                                     \
           (rc == cudaSuccess && pGraphExec) ? *pGraphExec : 0, 0, rc);                       \
    return rc

RS_EXPORT cudaError_t
cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                               cudaGraphInstantiateParams *instantiateParams)
{
    INSTANTIATE_PARAMS(cudaGraphInstantiateWithParams);
}

RS_EXPORT cudaError_t
cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                    cudaGraphInstantiateParams *instantiateParams)
{
    INSTANTIATE_PARAMS(cudaGraphInstantiateWithParams_ptsz);
}

#define LAUNCH(name)                                                                            \
    ENTER(name) real(graphExec, stream);                                                      \
    cudaError_t rc = real(graphExec, stream);                                                 \
    RECORD(RS_GRAPH_LAUNCH, RS_API_##name, stream, 0, graphExec, 0, rc);                      \
    return rc

RS_EXPORT cudaError_t
cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    LAUNCH(cudaGraphLaunch);
}

RS_EXPORT cudaError_t
cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    LAUNCH(cudaGraphLaunch_ptsz);
}
