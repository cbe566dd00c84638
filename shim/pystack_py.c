/* pystack_py.c: the Python side of the shadow stacks (pystack.h).
 *
 * Nothing here runs in a process without Python: rs_pystack_schedule looks
 * up Py_IsInitialized with dlsym(RTLD_DEFAULT) and stops when it is absent
 * or false. In a Python process it schedules install() with
 * Py_AddPendingCall (callable from any thread without the GIL, [PYAPI]
 * "Py_AddPendingCall"); Python runs it in the main thread, between two
 * bytecodes, with the GIL held. install() then
 *   3.12+:  takes a free sys.monitoring tool id (4, else 3: the ids that
 *           PEP 669 leaves unnamed, so debuggers (0), coverage (1),
 *           profilers (2, cProfile) and optimizers (5) keep theirs) and
 *           registers two C functions for PY_START/PY_RESUME/PY_THROW
 *           (enter) and PY_RETURN/PY_YIELD/PY_UNWIND (leave). Events are
 *           interpreter-wide: threads created later and native threads that
 *           enter Python through PyGILState_Ensure are covered.
 *   <3.12:  stands down when a profile function is already set
 *           (sys.getprofile() or threading.getprofile()): PyEval_SetProfile
 *           would replace it. Otherwise sets a C profile function on the
 *           main thread (PyEval_SetProfile: CALL enters, RETURN leaves; a
 *           generator's resume and yield are CALL and RETURN) and, through
 *           threading.setprofile, on every thread the threading module
 *           starts later. A profiler set later on a thread replaces the
 *           shim's there; the shim learns it (the capsule it passed as the
 *           profile object is released) and records that thread's stacks
 *           as unknown from then on, never stale ones. Native threads
 *           that enter Python through PyGILState_Ensure (PyTorch's autograd
 *           worker) get it too: a hook on a thread the profile function
 *           never ran on asks (rate-limited, Py_AddPendingCall) for a
 *           rescan, which sets it on every thread state that has no
 *           profile function (read at the offset of c_profilefunc in
 *           PyThreadState, known per version: 3.10 and 3.11) through
 *           _PyEval_SetProfile, the per-thread-state setter Python itself
 *           uses; a thread state with another profiler's function is left
 *           alone. The thread's frames are seen from its next Python call
 *           after the rescan ran (the main thread runs it between two
 *           bytecodes; PyTorch's worker keeps its thread state, so a
 *           training job's later iterations are covered).
 * The installing thread's frames are entered at install time (the frames
 * already running), so its stacks are whole from the start.
 *
 * Every C-API function is looked up at run time; the shim is built without
 * Python headers. Objects are opaque (void *); only the stable ABI's
 * PyMethodDef layout and calling conventions are used.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "config.h"
#include "pystack.h"
#include "writer.h"

typedef void PyObject;
typedef ssize_t Py_ssize_t;

typedef struct {
    const char *ml_name;
    void *ml_meth;
    int ml_flags;
    const char *ml_doc;
} py_methoddef;                              /* PyMethodDef (stable ABI) */
#define PY_METH_FASTCALL 0x0080
#define PY_TRACE_CALL 0                      /* PyTrace_CALL */
#define PY_TRACE_RETURN 3                    /* PyTrace_RETURN */

typedef int (*py_tracefunc)(PyObject *, void *, int, PyObject *);

static struct {
    int (*IsInitialized)(void);
    const char *(*GetVersion)(void);
    int (*AddPendingCall)(int (*)(void *), void *);
    PyObject *(*ImportModule)(const char *);
    PyObject *(*GetModule)(PyObject *);
    PyObject *(*UnicodeFromString)(const char *);
    PyObject *(*GetAttrString)(PyObject *, const char *);
    PyObject *(*CallMethod)(PyObject *, const char *, const char *, ...);
    PyObject *(*CFunctionNew)(py_methoddef *, PyObject *, PyObject *);
    void (*IncRef)(PyObject *);
    void (*DecRef)(PyObject *);
    long (*LongAsLong)(PyObject *);
    const char *(*AsUTF8AndSize)(PyObject *, Py_ssize_t *);
    void (*ErrClear)(void);
    PyObject *None;
    void *(*EvalGetFrame)(void);
    PyObject *(*FrameGetCode)(void *);
    void *(*FrameGetBack)(void *);
    void (*SetProfile)(py_tracefunc, PyObject *);
    int (*SetProfileOf)(void *, py_tracefunc, PyObject *);   /* _PyEval_SetProfile */
    void *(*InterpHead)(void);
    void *(*ThreadHead)(void *);
    void *(*ThreadNext)(void *);
    int (*IsFinalizing)(void);                               /* _Py_IsFinalizing */
    PyObject *(*CapsuleNew)(void *, const char *, void (*)(PyObject *));
} py;

enum { PS_IDLE, PS_SCHEDULED, PS_DONE };
static atomic_int g_state;
static int g_major, g_minor;
int g_rs_py_rescan;                     /* pystack.h */
static atomic_int g_rescan_pending;
static size_t g_profilefunc_off;        /* offsetof(PyThreadState, c_profilefunc) */

/* The offset of c_profilefunc in PyThreadState for the versions whose
 * layout the shim knows (Include/cpython/pystate.h of 3.10 and 3.11, checked
 * against the headers by tests/pystack), 0 otherwise. */
static size_t
profilefunc_offset(void)
{
    if (g_major == 3 && g_minor == 10)
        return 56;
    if (g_major == 3 && g_minor == 11)
        return 64;
    return 0;
}

#define SYM(field, name) (*(void **)&py.field = dlsym(RTLD_DEFAULT, name))

/* Resolve the C API. 0 when every function this Python version needs is
 * there, -1 otherwise. */
static int
resolve_api(void)
{
    int ok = SYM(GetVersion, "Py_GetVersion") && SYM(ImportModule, "PyImport_ImportModule") &&
             SYM(GetModule, "PyImport_GetModule") &&
             SYM(UnicodeFromString, "PyUnicode_FromString") &&
             SYM(GetAttrString, "PyObject_GetAttrString") &&
             SYM(CallMethod, "PyObject_CallMethod") && SYM(IncRef, "Py_IncRef") &&
             SYM(DecRef, "Py_DecRef") && SYM(LongAsLong, "PyLong_AsLong") &&
             SYM(AsUTF8AndSize, "PyUnicode_AsUTF8AndSize") && SYM(ErrClear, "PyErr_Clear") &&
             SYM(None, "_Py_NoneStruct") && SYM(EvalGetFrame, "PyEval_GetFrame") &&
             SYM(FrameGetCode, "PyFrame_GetCode") && SYM(FrameGetBack, "PyFrame_GetBack") &&
             SYM(SetProfile, "PyEval_SetProfile") && SYM(CapsuleNew, "PyCapsule_New");
    if (!SYM(CFunctionNew, "PyCFunction_NewEx"))
        ok = ok && SYM(CFunctionNew, "PyCMethod_New");   /* its successor (3.9+) */
    return ok ? 0 : -1;
}

static void
decref(PyObject *o)
{
    if (o)
        py.DecRef(o);
}

static PyObject *
none(void)
{
    py.IncRef(py.None);
    return py.None;
}

/* The UTF-8 text of attribute `attr` of `o` into buf (cap bytes). */
static size_t
attr_text(PyObject *o, const char *attr, char *buf, size_t cap)
{
    PyObject *v = py.GetAttrString(o, attr);
    Py_ssize_t n = 0;
    const char *s = v ? py.AsUTF8AndSize(v, &n) : NULL;
    size_t len = 0;
    if (s && n > 0) {
        len = (size_t)n < cap ? (size_t)n : cap;
        memcpy(buf, s, len);
    } else {
        py.ErrClear();
    }
    decref(v);
    return len;
}

/* Intern a code object seen for the first time: qualified name (co_qualname,
 * 3.11+; co_name before), file, first line. Keeps one reference to it so its
 * address names it for the life of the process. Returns its PYFRAME id. */
static uint32_t
describe(PyObject *code)
{
    char name[512], file[512];
    size_t nl = attr_text(code, "co_qualname", name, sizeof name);
    if (!nl)
        nl = attr_text(code, "co_name", name, sizeof name);
    size_t fl = attr_text(code, "co_filename", file, sizeof file);
    PyObject *l = py.GetAttrString(code, "co_firstlineno");
    long line = l ? py.LongAsLong(l) : 0;
    decref(l);
    if (line < 0) {
        py.ErrClear();
        line = 0;
    }
    uint32_t id = rs_pystack_frame_add((uint64_t)(uintptr_t)code, name, nl, file, fl,
                                       (uint32_t)line);
    if (id)
        py.IncRef(code);
    return id;
}

static void
enter(PyObject *code)
{
    uint32_t f = rs_pystack_frame_of((uint64_t)(uintptr_t)code);
    if (!f)
        f = describe(code);
    rs_pystack_push_id((uint64_t)(uintptr_t)code, f);
}

/* sys.monitoring callbacks: args[0] is the code object. */
static PyObject *
mon_enter(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs >= 1)
        enter(args[0]);
    return none();
}

static PyObject *
mon_leave(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs >= 1)
        rs_pystack_pop((uint64_t)(uintptr_t)args[0]);
    return none();
}

/* The C profile function (before 3.12). */
static int
profile(PyObject *obj, void *frame, int what, PyObject *arg)
{
    (void)obj;
    (void)arg;
    if (__builtin_expect(!t_py.seen || t_py.lost, 0)) {
        /* set (again) on this thread: by install, a new thread's first
         * event or a rescan after the thread's state was replaced */
        t_py.seen = 1;
        t_py.lost = 0;
        t_py.depth = 0;
    }
    if (what != PY_TRACE_CALL && what != PY_TRACE_RETURN)
        return 0;
    PyObject *code = py.FrameGetCode(frame);
    if (!code)
        return 0;
    if (what == PY_TRACE_CALL)
        enter(code);
    else
        rs_pystack_pop((uint64_t)(uintptr_t)code);
    py.DecRef(code);
    return 0;
}

/* Enter the frames this thread is running (outermost first), from `frame`
 * outwards; only on a thread whose shadow stack is still empty. */
static void
enter_running(void *frame)
{
    if (t_py.depth || !frame)
        return;
    void *chain[RS_PY_DEPTH];
    uint32_t n = 0;
    void *f = frame;
    py.IncRef(f);
    while (f && n < RS_PY_DEPTH) {
        chain[n++] = f;
        f = py.FrameGetBack(f);
    }
    decref(f);
    while (n-- > 0) {
        PyObject *code = py.FrameGetCode(chain[n]);
        if (code) {
            enter(code);
            py.DecRef(code);
        }
        py.DecRef(chain[n]);
    }
}

/* The capsule passed as the profile object is released when a profiler
 * replaces the shim's on this thread (sys.setprofile runs on the thread it
 * sets): from then on this thread's stacks are unknown. */
static void
profile_replaced(PyObject *capsule)
{
    (void)capsule;
    t_py.lost = 1;
    t_py.depth = 0;
}

/* Set the C profile function on the calling thread. */
static void
set_profile_here(void)
{
    PyObject *cap = py.CapsuleNew((void *)&g_state, "recompshim.pystack", profile_replaced);
    if (!cap) {
        py.ErrClear();
        return;
    }
    py.SetProfile(profile, cap);
    py.DecRef(cap);
}

/* threading.setprofile hook: called through sys.setprofile's Python-level
 * trampoline once, at a new thread's first event, with (frame, event, arg);
 * replaces itself by the C profile function. */
static PyObject *
thread_first_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    set_profile_here();
    t_py.seen = 1;
    if (nargs >= 2) {
        enter_running(args[0]);
        Py_ssize_t n = 0;
        const char *ev = py.AsUTF8AndSize(args[1], &n);
        if (!ev)
            py.ErrClear();
        else if (!strcmp(ev, "return")) {
            PyObject *code = py.FrameGetCode(args[0]);
            if (code) {
                rs_pystack_pop((uint64_t)(uintptr_t)code);
                py.DecRef(code);
            }
        }
    }
    return none();
}

static py_methoddef g_defs[] = {
    {"recompshim_enter", (void *)mon_enter, PY_METH_FASTCALL, NULL},
    {"recompshim_leave", (void *)mon_leave, PY_METH_FASTCALL, NULL},
    {"recompshim_thread_start", (void *)thread_first_event, PY_METH_FASTCALL, NULL},
};

/* Call obj.method(format, ...) and drop the result; 0 ok, -1 failed
 * (exception cleared). */
#define CALL_OK(res) call_ok(res)
static int
call_ok(PyObject *res)
{
    if (!res) {
        py.ErrClear();
        return -1;
    }
    py.DecRef(res);
    return 0;
}

static void
say(const char *how, int stood_down)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s%s", stood_down ? "off: " : "", how);
    rs_record_meta(RS_META_PYSTACK, msg, strlen(msg));
    if (stood_down)
        rs_log(0, "no Python frames: %s", how);
    else
        rs_log(1, "Python frames: %s", how);
}

/* An event number of sys.monitoring.events by name, -1 when absent. */
static long
event_bit(PyObject *events, const char *name)
{
    PyObject *v = py.GetAttrString(events, name);
    long b = v ? py.LongAsLong(v) : -1;
    decref(v);
    if (b < 0)
        py.ErrClear();
    return b;
}

/* A free tool id among 4 and 3, -1 when both are taken. */
static int
free_tool_id(PyObject *mon)
{
    static const int ids[] = {4, 3};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        PyObject *t = py.CallMethod(mon, "get_tool", "i", ids[i]);
        if (!t) {
            py.ErrClear();
            continue;
        }
        int is_free = t == py.None;
        py.DecRef(t);
        if (is_free)
            return ids[i];
    }
    return -1;
}

/* Register enter/leave for the events that balance a frame (PEP 669). */
static int
register_events(PyObject *mon, int id, long *mask)
{
    static const char *enters[] = {"PY_START", "PY_RESUME", "PY_THROW"};
    static const char *leaves[] = {"PY_RETURN", "PY_YIELD", "PY_UNWIND"};
    PyObject *events = py.GetAttrString(mon, "events");
    PyObject *fe = py.CFunctionNew(&g_defs[0], NULL, NULL);
    PyObject *fl = py.CFunctionNew(&g_defs[1], NULL, NULL);
    int rc = events && fe && fl ? 0 : -1;
    *mask = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        long be = event_bit(events, enters[i]), bl = event_bit(events, leaves[i]);
        if (be < 0 || bl < 0 ||
            CALL_OK(py.CallMethod(mon, "register_callback", "ilO", id, be, fe)) ||
            CALL_OK(py.CallMethod(mon, "register_callback", "ilO", id, bl, fl)))
            rc = -1;
        *mask |= be | bl;
    }
    decref(events);
    decref(fe);
    decref(fl);
    if (rc)
        py.ErrClear();
    return rc;
}

static void
install_monitoring(void)
{
    PyObject *sys = py.ImportModule("sys");
    PyObject *mon = sys ? py.GetAttrString(sys, "monitoring") : NULL;
    char how[128];
    long mask = 0;
    int id = mon ? free_tool_id(mon) : -1;
    if (!mon) {
        py.ErrClear();
        say("sys.monitoring is missing", 1);
    } else if (id < 0) {
        say("sys.monitoring tool ids 3 and 4 are both taken by other tools", 1);
    } else if (CALL_OK(py.CallMethod(mon, "use_tool_id", "is", id, "recompshim")) ||
               register_events(mon, id, &mask)) {
        say("sys.monitoring refused the shim's callbacks", 1);
    } else {
        enter_running(py.EvalGetFrame());
        if (CALL_OK(py.CallMethod(mon, "set_events", "il", id, mask))) {
            t_py.depth = 0;
            say("sys.monitoring.set_events failed", 1);
        } else {
            snprintf(how, sizeof how, "sys.monitoring tool %d", id);
            say(how, 0);
        }
    }
    decref(mon);
    decref(sys);
}

/* A profile function another tool set: sys.getprofile() on this (the main)
 * thread, or threading.getprofile() for new threads. 1 when one is set. */
static int
foreign_profiler(PyObject *sys)
{
    PyObject *p = py.CallMethod(sys, "getprofile", NULL);
    int set = p && p != py.None;
    decref(p);
    PyObject *name = py.UnicodeFromString("threading");
    PyObject *th = name ? py.GetModule(name) : NULL;
    decref(name);
    if (th) {
        PyObject *tp = py.GetAttrString(th, "_profile_hook");
        set |= tp && tp != py.None;
        decref(tp);
        py.DecRef(th);
    }
    py.ErrClear();
    return set;
}

static void
install_profile(void)
{
    PyObject *sys = py.ImportModule("sys");
    if (!sys) {
        py.ErrClear();
        say("cannot import sys", 1);
        return;
    }
    if (foreign_profiler(sys)) {
        say("another profiler set a profile function (sys.setprofile); before Python 3.12 the "
            "shim's PyEval_SetProfile would replace it, so the shim stands down", 1);
        py.DecRef(sys);
        return;
    }
    PyObject *th = py.ImportModule("threading");
    PyObject *hook = py.CFunctionNew(&g_defs[2], NULL, NULL);
    if (!th || !hook || CALL_OK(py.CallMethod(th, "setprofile", "O", hook)))
        say("PyEval_SetProfile on the main thread only (threading.setprofile failed)", 0);
    else
        say("PyEval_SetProfile (threads started by threading included)", 0);
    py.ErrClear();
    decref(hook);
    decref(th);
    py.DecRef(sys);
    enter_running(py.EvalGetFrame());
    set_profile_here();
    t_py.seen = 1;
    g_profilefunc_off = profilefunc_offset();
    if (g_profilefunc_off && SYM(SetProfileOf, "_PyEval_SetProfile") &&
        SYM(InterpHead, "PyInterpreterState_Head") &&
        SYM(ThreadHead, "PyInterpreterState_ThreadHead") &&
        SYM(ThreadNext, "PyThreadState_Next") && SYM(IsFinalizing, "_Py_IsFinalizing"))
        g_rs_py_rescan = 1;
}

/* The rescan (a pending call, main thread, GIL held): the shim's profile
 * function on every thread state of the main interpreter that has none. */
static int
rescan(void *arg)
{
    (void)arg;
    atomic_store(&g_rescan_pending, 0);
    void *interp = py.InterpHead();
    for (void *ts = interp ? py.ThreadHead(interp) : NULL; ts; ts = py.ThreadNext(ts)) {
        void *fn;
        memcpy(&fn, (char *)ts + g_profilefunc_off, sizeof fn);
        if (fn)
            continue;                   /* ours already, or another profiler's */
        PyObject *cap = py.CapsuleNew((void *)&g_state, "recompshim.pystack", profile_replaced);
        if (!cap || py.SetProfileOf(ts, profile, cap) != 0)
            py.ErrClear();
        decref(cap);
    }
    return 0;
}

void
rs_pystack_rescan_request(void)
{
    if (t_py.rescans >= 16)
        return;
    uint64_t now = rs_now_ns();
    if (now < t_py.next_rescan_ns)
        return;
    /* backoff: 20 ms, 40 ms, ... about 11 minutes in all */
    t_py.next_rescan_ns = now + (10000000ull << ++t_py.rescans);
    /* never once Python is shutting down: Py_AddPendingCall would reach for
     * an interpreter that is being (or has been) deleted */
    if (!py.IsInitialized() || py.IsFinalizing()) {
        g_rs_py_rescan = 0;
        return;
    }
    if (atomic_exchange(&g_rescan_pending, 1))
        return;
    if (py.AddPendingCall(rescan, NULL) != 0)
        atomic_store(&g_rescan_pending, 0);
}

/* The pending call: runs once, in the main thread, with the GIL held. Never
 * raises (a pending call's error would surface in the job). */
static int
install(void *arg)
{
    (void)arg;
    t_rs.guard++;
    if (g_major > 3 || (g_major == 3 && g_minor >= 12))
        install_monitoring();
    else
        install_profile();
    py.ErrClear();
    atomic_store(&g_state, PS_DONE);
    t_rs.guard--;
    return 0;
}

void
rs_pystack_schedule(void)
{
    if (!g_rs_cfg.pystack || atomic_load(&g_state) != PS_IDLE)
        return;
    if (!SYM(IsInitialized, "Py_IsInitialized") || !SYM(AddPendingCall, "Py_AddPendingCall"))
        return;                                   /* no Python here: untouched */
    if (!py.IsInitialized())
        return;
    int expect = PS_IDLE;
    if (!atomic_compare_exchange_strong(&g_state, &expect, PS_SCHEDULED))
        return;
    if (resolve_api() != 0 || sscanf(py.GetVersion(), "%d.%d", &g_major, &g_minor) != 2 ||
        g_major < 3 || (g_major == 3 && g_minor < 9)) {
        say("this Python lacks the C API the shim uses (3.9 or newer needed)", 1);
        atomic_store(&g_state, PS_DONE);
        return;
    }
    if (py.AddPendingCall(install, NULL) != 0) {
        /* the queue is full now: try again at the next trace open is not
         * possible, so say so */
        say("Py_AddPendingCall refused the install", 1);
        atomic_store(&g_state, PS_DONE);
    }
}
