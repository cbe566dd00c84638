/* ms_cuda.c: device, NVTX, thread and autograd-worker parts of
 * libmegasim_cuda.so (see ms_cuda.h). The allocator model is ms_alloc.c. */
#include "ms_cuda.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ms_internal.h"

static __thread char t_msg[512];

void
ms_set_message(const char *fmt, const char *arg)
{
    snprintf(t_msg, sizeof t_msg, fmt, arg ? arg : "");
}

const char *
ms_last_message(void)
{
    return t_msg;
}

uint32_t
ms_caps(void)
{
    uint32_t c = 0;
#ifdef MS_HAVE_C10
    c |= MS_CAP_C10_REPORT;
#endif
#ifdef MS_HAVE_NCCL
    c |= MS_CAP_NCCL;
#endif
#ifdef MS_HAVE_VMM
    c |= MS_CAP_VMM;
#endif
    return c;
}

int
ms_set_device(int dev)
{
    return (int)cudaSetDevice(dev);
}

int
ms_mem_get_info(uint64_t *free_b, uint64_t *total_b)
{
    size_t f = 0, t = 0;
    int rc = (int)cudaMemGetInfo(&f, &t);
    if (free_b)
        *free_b = f;
    if (total_b)
        *total_b = t;
    return rc;
}

int
ms_malloc(uint64_t size, uint64_t *ptr)
{
    void *p = NULL;
    int rc = (int)cudaMalloc(&p, (size_t)size);
    if (ptr)
        *ptr = (uint64_t)(uintptr_t)p;
    if (rc)
        (void)cudaGetLastError();
    return rc;
}

int
ms_free(uint64_t ptr)
{
    return (int)cudaFree((void *)(uintptr_t)ptr);
}

/* ---- PyTorch's allocator report (part-2 "libc10" double) ---- */
#ifdef MS_HAVE_C10
typedef struct { int8_t type, index; } ms_c10_device;
extern void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t alloc_size,
                                                                  size_t total_allocated,
                                                                  size_t total_reserved,
                                                                  ms_c10_device device);
#endif

int
ms_report_block(uint64_t ptr, int64_t delta, uint64_t allocated, uint64_t reserved, int device)
{
#ifdef MS_HAVE_C10
    ms_c10_device d = { 1 /* DeviceType::CUDA */, (int8_t)device };
    _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE((void *)(uintptr_t)ptr, delta,
                                                          (size_t)allocated, (size_t)reserved, d);
    return MS_OK;
#else
    (void)ptr; (void)delta; (void)allocated; (void)reserved; (void)device;
    return MS_ENOTAVAIL;
#endif
}

/* ---- CUDA graphs ---- */
#define MS_CAPTURE_STREAM ((cudaStream_t)(uintptr_t)0x5e0100)   /* a side stream */

int
ms_graph_capture_begin(void)
{
    return (int)cudaStreamBeginCapture(MS_CAPTURE_STREAM, cudaStreamCaptureModeGlobal);
}

uint64_t
ms_graph_capture_end(void)
{
    cudaGraph_t g = NULL;
    if (cudaStreamEndCapture(MS_CAPTURE_STREAM, &g) != cudaSuccess)
        return 0;
    cudaGraphExec_t e = NULL;
    if (cudaGraphInstantiate(&e, g, 0) != cudaSuccess)
        return 0;
    return (uint64_t)(uintptr_t)e;
}

int
ms_graph_launch(uint64_t exec)
{
    return (int)cudaGraphLaunch((cudaGraphExec_t)(uintptr_t)exec, MS_CAPTURE_STREAM);
}

/* ---- NVTX ---- */
void
ms_nvtx_push(const char *name)
{
    nvtxRangePushA(name);
}

void
ms_nvtx_pop(void)
{
    nvtxRangePop();
}

void
ms_nvtx_mark(const char *name)
{
    nvtxMarkA(name);
}

/* ---- threads ---- */
int
ms_thread_name(const char *name)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%s", name);
    return pthread_setname_np(pthread_self(), buf);
}

/* The backward worker. PyTorch's engine starts one thread per device
 * (Engine::thread_init: "pt_autograd_" + device); the thread that calls
 * backward() blocks (without the GIL) until the graph is done; Python
 * Function.backward bodies and hooks run on the worker after it acquires the
 * GIL (PyNode::apply: gil_scoped_acquire). Here: ms_autograd_run() is called
 * from Python through ctypes (which releases the GIL), posts the task and
 * waits; the worker takes the GIL with PyGILState_Ensure (looked up with
 * dlsym(RTLD_DEFAULT), as the shim does) and calls the task. Like PyTorch's
 * worker (PythonEngine::thread_init: a gil_scoped_acquire then a
 * gil_scoped_release around the whole thread_main, "without having to
 * create a new PyThreadState each time"), it makes its thread state once,
 * at start, and keeps it until it stops: a profile function set on it
 * (the shim's, before Python 3.12) stays from one backward to the next. */
typedef int (*gil_ensure_fn)(void);
typedef void (*gil_release_fn)(int);
typedef void *(*save_thread_fn)(void);
typedef void (*restore_thread_fn)(void *);

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int started, stop, device;
    ms_task_fn fn;
    int64_t arg;
    int pending, done, result;
    int tid;
} g_ag = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };

static void *
autograd_main(void *unused)
{
    (void)unused;
    char name[16];
    snprintf(name, sizeof name, "pt_autograd_%d", g_ag.device);
    pthread_setname_np(pthread_self(), name);
    /* the worker runs on its device, as PyTorch's sets it in thread_init */
    cudaSetDevice(g_ag.device);
    gil_ensure_fn ensure = (gil_ensure_fn)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    gil_release_fn release = (gil_release_fn)dlsym(RTLD_DEFAULT, "PyGILState_Release");
    save_thread_fn save = (save_thread_fn)dlsym(RTLD_DEFAULT, "PyEval_SaveThread");
    restore_thread_fn restore = (restore_thread_fn)dlsym(RTLD_DEFAULT, "PyEval_RestoreThread");
    int held = 0, hold = 0;
    void *ts = NULL;
    if (ensure && release && save && restore) {
        hold = ensure(); /* the thread state kept for the thread's life */
        ts = save();     /* ... without the GIL */
        held = 1;
    }
    pthread_mutex_lock(&g_ag.mu);
    g_ag.tid = (int)syscall(SYS_gettid);
    pthread_cond_broadcast(&g_ag.cv);
    for (;;) {
        while (!g_ag.pending && !g_ag.stop)
            pthread_cond_wait(&g_ag.cv, &g_ag.mu);
        if (g_ag.stop && !g_ag.pending)
            break;
        ms_task_fn fn = g_ag.fn;
        int64_t arg = g_ag.arg;
        g_ag.pending = 0;
        pthread_mutex_unlock(&g_ag.mu);
        int st = ensure ? ensure() : 0;
        int r = fn(arg);
        if (release)
            release(st);
        pthread_mutex_lock(&g_ag.mu);
        g_ag.result = r;
        g_ag.done = 1;
        pthread_cond_broadcast(&g_ag.cv);
    }
    pthread_mutex_unlock(&g_ag.mu);
    if (held) {
        restore(ts);
        release(hold);
    }
    return NULL;
}

int
ms_autograd_start(int device)
{
    pthread_mutex_lock(&g_ag.mu);
    if (g_ag.started) {
        pthread_mutex_unlock(&g_ag.mu);
        return MS_OK;
    }
    g_ag.device = device;
    g_ag.stop = 0;
    if (pthread_create(&g_ag.th, NULL, autograd_main, NULL) != 0) {
        pthread_mutex_unlock(&g_ag.mu);
        return MS_EINVAL;
    }
    g_ag.started = 1;
    while (!g_ag.tid)
        pthread_cond_wait(&g_ag.cv, &g_ag.mu);
    pthread_mutex_unlock(&g_ag.mu);
    return MS_OK;
}

int
ms_autograd_tid(void)
{
    return g_ag.tid;
}

int
ms_autograd_run(ms_task_fn fn, int64_t arg)
{
    if (!g_ag.started && ms_autograd_start(0) != MS_OK)
        return MS_EINVAL;
    pthread_mutex_lock(&g_ag.mu);
    g_ag.fn = fn;
    g_ag.arg = arg;
    g_ag.done = 0;
    g_ag.pending = 1;
    pthread_cond_broadcast(&g_ag.cv);
    while (!g_ag.done)
        pthread_cond_wait(&g_ag.cv, &g_ag.mu);
    int r = g_ag.result;
    pthread_mutex_unlock(&g_ag.mu);
    return r;
}

int
ms_autograd_stop(void)
{
    pthread_mutex_lock(&g_ag.mu);
    if (!g_ag.started) {
        pthread_mutex_unlock(&g_ag.mu);
        return MS_OK;
    }
    g_ag.stop = 1;
    pthread_cond_broadcast(&g_ag.cv);
    pthread_mutex_unlock(&g_ag.mu);
    pthread_join(g_ag.th, NULL);
    g_ag.started = 0;
    g_ag.tid = 0;
    return MS_OK;
}
