/* native_thread.c: a native pthread for tests/pystack/frames_prog.py, made
 * like PyTorch's autograd worker: it creates its Python thread state once
 * (PyGILState_Ensure, then releases the GIL and keeps the state, as
 * torch's engine does with pybind11 at thread start), allocates without
 * ever holding the GIL, and later enters Python through a ctypes callback
 * (PyGILState_Ensure again) `rounds` times, 100 ms apart. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <unistd.h>

typedef int (*malloc_fn)(void **, size_t);

static struct job {
    size_t size;
    int rounds;
    void (*enter_python)(int);
    int rc;
    pthread_t thread;
} g_job;

static void *
thread_main(void *arg)
{
    struct job *j = arg;
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    void *(*save)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyEval_SaveThread");
    void (*restore)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "PyEval_RestoreThread");
    if (!ensure || !release || !save || !restore)
        return NULL;
    int g = ensure();
    void *ts = save();
    /* the global scope's cudaMalloc: the preloaded shim's */
    malloc_fn m = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
    void *p = NULL;
    j->rc = m ? m(&p, j->size) : -1;
    for (int r = 0; r < j->rounds; r++) {
        usleep(100000);
        j->enter_python(r);
    }
    restore(ts);
    release(g);
    return NULL;
}

/* Start the thread: cudaMalloc(size) without the GIL, then enter_python(r)
 * for r = 0..rounds-1. 0 when started. */
__attribute__((visibility("default"))) int
start_native_thread(size_t size, int rounds, void (*enter_python)(int))
{
    g_job = (struct job){size, rounds, enter_python, -1, 0};
    return pthread_create(&g_job.thread, NULL, thread_main, &g_job);
}

/* Wait for it; its cudaMalloc's result (0 success). */
__attribute__((visibility("default"))) int
join_native_thread(void)
{
    pthread_join(g_job.thread, NULL);
    return g_job.rc;
}
