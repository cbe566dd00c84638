/* pystack.h: Python frames in the shim (docs/python-frames.md).
 *
 * In a Python process the shim keeps, per thread, a shadow stack of the
 * Python frames that thread is running, updated by Python itself through
 * sys.monitoring (3.12+) or a C profile function (PyEval_SetProfile,
 * before 3.12). Each level holds an interned stack id (a PYSTACK record:
 * frame + parent stack), so a hook learns "where in Python" with two TLS
 * loads, no lock and no call into Python. Installed once, with the GIL
 * held, from a pending call (Py_AddPendingCall) scheduled when the trace
 * file is created. A process without Python is never touched: every
 * Python symbol is looked up at run time (dlsym(RTLD_DEFAULT)).
 */
#ifndef RECOMPSHIM_PYSTACK_H
#define RECOMPSHIM_PYSTACK_H

#include <stdint.h>

#include "record.h"

#define RS_PY_DEPTH 256u   /* levels kept per thread; deeper calls keep the level-256 stack */

/* A thread's shadow stack. Written only by its own thread (inside Python's
 * callbacks), read by the same thread's hooks: no atomics needed. */
typedef struct rs_py_tls {
    uint32_t depth;                 /* Python frames entered and not left (may exceed RS_PY_DEPTH) */
    uint32_t lost;                  /* 1: another profiler replaced the shim's on this thread */
    uint32_t seen;                  /* 1: the shim's profile function ran on this thread */
    uint32_t rescans;               /* rescan requests made from this thread (before 3.12) */
    uint64_t next_rescan_ns;        /* no request before this time (backoff) */
    uint32_t node[RS_PY_DEPTH];     /* PYSTACK id of the stack up to and including level i */
    uint64_t code[RS_PY_DEPTH];     /* the code object at level i (identity only, never dereferenced) */
} rs_py_tls;

extern __thread rs_py_tls t_py __attribute__((tls_model("initial-exec")));

/* The PYSTACK id of the calling thread's current Python stack, 0 when it
 * runs no Python frame the shim saw (or frames are unknown). Lock-free,
 * calls nothing: safe in every hook. */
/* Before 3.12 only: 1 when threads the shim has not seen yet (native threads
 * that entered Python through PyGILState_Ensure) are looked for. */
extern int g_rs_py_rescan RS_HIDDEN;
/* Ask, rate-limited per thread, for the thread states without a profile
 * function to get the shim's (a pending call; pystack_py.c). */
RS_HIDDEN void rs_pystack_rescan_request(void);

static inline uint32_t
rs_pystack_current(void)
{
    uint32_t d = t_py.depth;
    if (!d || t_py.lost) {
        if (__builtin_expect(g_rs_py_rescan, 0) && !t_py.seen)
            rs_pystack_rescan_request();
        return 0;
    }
    return t_py.node[(d < RS_PY_DEPTH ? d : RS_PY_DEPTH) - 1];
}

/* Called once the trace file exists (writer.c, outside its lock): when
 * RECOMPSHIM_PYSTACK=1 and this process runs an initialised Python,
 * schedule the install as a pending call. Otherwise does nothing. */
RS_HIDDEN void rs_pystack_schedule(void);

/* Re-emit the PYFRAME and PYSTACK definitions made before the current
 * file existed (a fork child's new file). Takes no lock. */
RS_HIDDEN void rs_pystack_replay(void);

/* fork(): the table lock is rank 7 in the shim's lock order (writer.c). */
RS_HIDDEN void rs_pystack_atfork_prepare(void);
RS_HIDDEN void rs_pystack_atfork_parent(void);
RS_HIDDEN void rs_pystack_atfork_child(void);

/* ---- the core, exposed for unit tests (tests/shimunit) ---- */

/* Enter a Python frame whose code object is `code` (an opaque identity),
 * described by qualified name, file and first line when not seen before;
 * the strings are read only on the first sighting of `code`. */
RS_HIDDEN void rs_pystack_push(uint64_t code, const char *name, size_t name_len,
                               const char *file, size_t file_len, uint32_t line);
/* Leave the frame of `code`. A code that is not on this thread's stack is
 * a frame entered before the install and is ignored; one found below the
 * top pops the levels above it (events the shim missed). */
RS_HIDDEN void rs_pystack_pop(uint64_t code);
/* The interned frame id of `code`, 0 when not seen. Lock-free. */
RS_HIDDEN uint32_t rs_pystack_frame_of(uint64_t code);
/* Intern `code` from its description; its PYFRAME id, 0 when full. */
RS_HIDDEN uint32_t rs_pystack_frame_add(uint64_t code, const char *name, size_t name_len,
                                        const char *file, size_t file_len, uint32_t line);
/* Push a level whose frame id is already known (0: unknown frame). */
RS_HIDDEN void rs_pystack_push_id(uint64_t code, uint32_t frame);

#endif
