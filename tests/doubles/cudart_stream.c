/* cudart_stream.c: mock libcudart streams, events and host callbacks.
 *
 * Nothing runs on a device, so all work is complete when it is queued:
 * streams and events are always idle/complete (cudaStreamQuery and
 * cudaEventQuery return cudaSuccess), synchronisation returns at once, host
 * functions (cudaLaunchHostFunc, cudaStreamAddCallback) run before the call
 * returns, and the elapsed time between two events is 0 ms. A consequence
 * (docs/validation/README.md): PyTorch's cross-stream frees, which wait for
 * an event, complete sooner than on a GPU.
 *
 * Handles: a created stream or event is a heap object tagged with a magic
 * word; the legacy (NULL) and per-thread (cudaStreamPerThread) default
 * streams are accepted everywhere. Priorities: the H100's range, greatest
 * -5 (high) to least 0; a request outside it is clamped, as CUDA does.
 *   unknown handle: cudaErrorInvalidResourceHandle; NULL out-pointer:
 *   cudaErrorInvalidValue.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>

#include "mock_state.h"

#define STREAM_MAGIC 0x5354524dU   /* "STRM" */
#define EVENT_MAGIC  0x45564e54U   /* "EVNT" */
#define PRIO_GREATEST (-5)
#define PRIO_LEAST 0

typedef struct mock_stream {
    unsigned magic;
    int device;
    int priority;
    unsigned flags;
} mock_stream;

typedef struct mock_event {
    unsigned magic;
    int device;
    unsigned flags;
} mock_event;

static int
stream_ok(cudaStream_t s)
{
    if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
        return 1;
    return ((mock_stream *)s)->magic == STREAM_MAGIC;
}

static int
event_ok(cudaEvent_t e)
{
    return e && ((mock_event *)e)->magic == EVENT_MAGIC;
}

#define BAD_HANDLE() ((cudaError_t)mock_set_error(cudaErrorInvalidResourceHandle))
#define BAD_VALUE() ((cudaError_t)mock_set_error(MOCK_ERR_INVALID_VALUE))

cudaError_t
cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    if (leastPriority)
        *leastPriority = PRIO_LEAST;
    if (greatestPriority)
        *greatestPriority = PRIO_GREATEST;
    return cudaSuccess;
}

cudaError_t
cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    if (!pStream)
        return BAD_VALUE();
    mock_stream *s = malloc(sizeof *s);
    if (!s)
        return (cudaError_t)mock_set_error(cudaErrorMemoryAllocation);
    s->magic = STREAM_MAGIC;
    s->device = mock_current_device();
    s->priority = priority < PRIO_GREATEST ? PRIO_GREATEST : priority > PRIO_LEAST ? PRIO_LEAST : priority;
    s->flags = flags;
    mock_touch_device(s->device);
    *pStream = (cudaStream_t)s;
    return cudaSuccess;
}

cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return cudaStreamCreateWithPriority(pStream, flags, PRIO_LEAST);
}

cudaError_t
cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, PRIO_LEAST);
}

cudaError_t
cudaStreamDestroy(cudaStream_t stream)
{
    if (!stream || !stream_ok(stream) || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        return BAD_HANDLE();
    ((mock_stream *)stream)->magic = 0;
    free(stream);
    return cudaSuccess;
}

cudaError_t
cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    if (!priority)
        return BAD_VALUE();
    if (!stream_ok(hStream))
        return BAD_HANDLE();
    *priority = (hStream && hStream != cudaStreamLegacy && hStream != cudaStreamPerThread)
                    ? ((mock_stream *)hStream)->priority : PRIO_LEAST;
    return cudaSuccess;
}

cudaError_t
cudaStreamQuery(cudaStream_t stream)
{
    return stream_ok(stream) ? cudaSuccess : BAD_HANDLE();
}

cudaError_t
cudaStreamSynchronize(cudaStream_t stream)
{
    return stream_ok(stream) ? cudaSuccess : BAD_HANDLE();
}

cudaError_t
cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)flags;
    return stream_ok(stream) && event_ok(event) ? cudaSuccess : BAD_HANDLE();
}

cudaError_t
cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    if (!fn)
        return BAD_VALUE();
    if (!stream_ok(stream))
        return BAD_HANDLE();
    fn(userData);
    return cudaSuccess;
}

cudaError_t
cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
                      unsigned int flags)
{
    if (!callback || flags)
        return BAD_VALUE();
    if (!stream_ok(stream))
        return BAD_HANDLE();
    callback(stream, cudaSuccess, userData);
    return cudaSuccess;
}

cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!event)
        return BAD_VALUE();
    mock_event *e = malloc(sizeof *e);
    if (!e)
        return (cudaError_t)mock_set_error(cudaErrorMemoryAllocation);
    e->magic = EVENT_MAGIC;
    e->device = mock_current_device();
    e->flags = flags;
    *event = (cudaEvent_t)e;
    return cudaSuccess;
}

cudaError_t
cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t
cudaEventDestroy(cudaEvent_t event)
{
    if (!event_ok(event))
        return BAD_HANDLE();
    ((mock_event *)event)->magic = 0;
    free(event);
    return cudaSuccess;
}

cudaError_t
cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    return event_ok(event) && stream_ok(stream) ? cudaSuccess : BAD_HANDLE();
}

cudaError_t
cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    (void)flags;
    return cudaEventRecord(event, stream);
}

cudaError_t
cudaEventQuery(cudaEvent_t event)
{
    return event_ok(event) ? cudaSuccess : BAD_HANDLE();
}

cudaError_t
cudaEventSynchronize(cudaEvent_t event)
{
    return event_ok(event) ? cudaSuccess : BAD_HANDLE();
}

/* Both events completed when recorded: 0 ms apart. */
cudaError_t
cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms)
        return BAD_VALUE();
    if (!event_ok(start) || !event_ok(end))
        return BAD_HANDLE();
    *ms = 0.0f;
    return cudaSuccess;
}
