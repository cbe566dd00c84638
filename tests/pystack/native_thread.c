/* native_thread.c: a native pthread for tests/pystack/frames_prog.py. It
 * allocates without ever holding the GIL, then enters Python through a
 * ctypes callback (ctypes takes the GIL with PyGILState_Ensure on a thread
 * Python never saw, as PyTorch's autograd worker does with pybind11). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

typedef int (*malloc_fn)(void **, size_t);

struct job {
    size_t size;
    void (*enter_python)(void);
    int rc;
};

static void *
thread_main(void *arg)
{
    struct job *j = arg;
    /* the global scope's cudaMalloc: the preloaded shim's */
    malloc_fn m = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
    void *p = NULL;
    j->rc = m ? m(&p, j->size) : -1;
    j->enter_python();
    return NULL;
}

/* Run one native thread: cudaMalloc(size) without the GIL, then
 * enter_python(); 0 when the allocation succeeded and the thread ran. */
__attribute__((visibility("default"))) int
run_native_thread(size_t size, void (*enter_python)(void))
{
    struct job j = {size, enter_python, -1};
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, &j) != 0)
        return -1;
    pthread_join(t, NULL);
    return j.rc;
}
