"""A Python job allocating through the test double of libcudart from known
frames (tests/pystack/test_pystack.py runs it under the shim and asserts the
exact Python stack of every allocation).

argv: LIBCUDART [SCENARIO...]; each allocation's size names the scenario
that made it, so the checker can find it in the trace.
"""
import asyncio
import ctypes
import os
import sys
import threading
import time

# Loaded into the global scope and called through it, as a job linked
# against libcudart would: the preloaded shim's cudaMalloc comes first.
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
cudart = ctypes.CDLL(None)
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]
KEEP = []


def alloc(size):
    p = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(p), size) == 0
    KEEP.append(p.value)


def settle():
    """The first CUDA call schedules the install as a pending call; Python
    runs it at the next check of its eval breaker, within a few bytecodes
    (a sleep of 0 lets it run)."""
    import time
    for _ in range(3):
        time.sleep(0)


class Attention:
    def forward(self):
        alloc(1001)          # main thread: main > Layer.forward > Attention.forward


class Layer:
    def forward(self):
        Attention().forward()
        alloc(1002)          # back in Layer.forward after the callee returned


def raiser():
    alloc(1003)
    raise ValueError("x")


def after_exception():
    try:
        raiser()
    except ValueError:
        pass
    alloc(1004)              # the unwound frame is gone


def gen():
    alloc(1005)
    yield 1
    alloc(1006)
    yield 2


def generators():
    g = gen()
    next(g)
    alloc(1007)              # generator suspended: not on the stack
    next(g)


async def coro_inner():
    await asyncio.sleep(0)
    alloc(1008)


async def coro_outer():
    await coro_inner()


def coroutines():
    asyncio.run(coro_outer())


def worker():
    alloc(1009)              # a thread started by threading after the install


def threads():
    t = threading.Thread(target=worker, name="worker")
    t.start()
    t.join()


def with_setprofile():
    calls = []

    def prof(frame, event, arg):
        calls.append(event)
    sys.setprofile(prof)
    alloc(1010)
    sys.setprofile(None)
    # another profiler's events really arrived
    print("setprofile-events", len(calls) > 0, flush=True)


def native_entered(r):
    alloc(1011 + 3 * r)      # 1011, 1014: a native thread in Python through PyGILState_Ensure


def native():
    lib = ctypes.CDLL(os.environ["RS_NATIVE_HELPER"])
    cb_type = ctypes.CFUNCTYPE(None, ctypes.c_int)
    cb = cb_type(native_entered)
    lib.start_native_thread.argtypes = [ctypes.c_size_t, ctypes.c_int, cb_type]
    assert lib.start_native_thread(1012, 2, cb) == 0   # 1012: no GIL, no Python
    done = time.monotonic() + 0.4
    while time.monotonic() < done:                      # the main thread runs bytecode
        time.sleep(0.005)
    assert lib.join_native_thread() == 0


def take_tool_ids():
    """Another tool holds both tool ids the shim would take (3.12+)."""
    sys.monitoring.use_tool_id(3, "other-a")
    sys.monitoring.use_tool_id(4, "other-b")


EARLY_EVENTS = []


def early_profiler():
    """Another profiler set before the shim installs (sys.setprofile)."""
    sys.setprofile(lambda frame, event, arg: EARLY_EVENTS.append(event))


def main():
    for name in os.environ.get("RS_PYSTACK_PRE", "").split():
        globals()[name]()
    alloc(1000)              # the first CUDA call: installs (pending call)
    settle()
    Layer().forward()
    after_exception()
    generators()
    coroutines()
    threads()
    for name in sys.argv[2:]:
        globals()[name]()
    alloc(1013)              # back in main: the shadow stack is balanced
    for p in KEEP:
        cudart.cudaFree(p)
    if os.environ.get("RS_PYSTACK_PRE"):
        sys.setprofile(None)
        print("early-profiler-events", len(EARLY_EVENTS) > 0, flush=True)


if __name__ == "__main__":
    main()
