"""megasim's device layer: the C helper (libmegasim_cuda.so) through ctypes.

Only helper functions are called from Python; the helper reaches libcudart
through its own PLT (never look up cudaMalloc from Python: that would bypass
LD_PRELOAD). Tensors are Python objects whose storage is a block of the
helper's caching-allocator model; CPython's reference counting frees them
exactly when the last reference goes, as PyTorch's storages are.
"""
import ctypes
import os
import sys
import threading

MIB = 1 << 20
GIB = 1 << 30


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "allocated", "reserved", "max_allocated", "max_reserved", "active_blocks",
        "segments", "inactive_split", "inactive_split_blocks", "largest_free",
        "num_alloc_retries", "num_ooms", "num_cuda_mallocs", "num_cuda_frees",
        "oom_request", "oom_free", "oom_total")] + [("mode", ctypes.c_int32),
                                                   ("device", ctypes.c_int32)]


TASK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64)
MODES = {0: "native", 1: "cudaMallocAsync", 2: "nocache", 3: "expandable_segments"}
CAP_C10, CAP_NCCL, CAP_VMM = 1, 2, 4


def _find_lib_dir():
    d = os.environ.get("MEGASIM_LIB_DIR")
    if d:
        return d
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.normpath(os.path.join(here, "..", "..", ".."))
    for b in ("build", "build-megasim"):
        cand = os.path.join(repo, b, "tests", "megasim")
        if os.path.exists(os.path.join(cand, "libmegasim_cuda.so")):
            return cand
    raise SystemExit("megasim: libmegasim_cuda.so not found; build with meson (tests/megasim) "
                     "and/or set MEGASIM_LIB_DIR")


class OutOfMemoryError(RuntimeError):
    """PyTorch's torch.OutOfMemoryError (printed as such in tracebacks)."""


OutOfMemoryError.__module__ = "torch"
OutOfMemoryError.__qualname__ = "OutOfMemoryError"


class DistBackendError(RuntimeError):
    """torch.distributed.DistBackendError: what ProcessGroupNCCL raises when an
    NCCL call returns an error (here ncclUnhandledCudaError)."""


DistBackendError.__module__ = "torch.distributed"
DistBackendError.__qualname__ = "DistBackendError"

# What real NCCL prints when a CUDA call inside it fails (NCCL's CUDACHECK/CUCHECK:
# a "NCCL WARN Cuda failure" line, then ncclUnhandledCudaError up to the caller),
# and what PyTorch's ProcessGroupNCCL raises from it (NCCLUtils.hpp's C10D_NCCL_CHECK:
# "NCCL error in: <file>:<line>, unhandled cuda error (run with NCCL_DEBUG=INFO for
# details), NCCL version X" + ncclGetLastError()). Public reports of this failure
# (e.g. NVIDIA/nccl issue 1410) show the same lines.
NCCL_VERSION = "2.21.5"
CUDA_ERROR_NAMES = {2: "out of memory"}


def nccl_cuda_failure(rc):
    """(the NCCL WARN line, the DistBackendError message) for a CUDA error rc
    inside NCCL"""
    what = "Cuda failure %d '%s'" % (rc, CUDA_ERROR_NAMES.get(rc, "unknown error"))
    warn = "%s:%d:%d [%d] NCCL WARN %s" % (os.uname().nodename, os.getpid(),
                                         threading.get_native_id(), getattr(DEV, "index", 0),
                                         what)
    msg = ("NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda "
           "error (run with NCCL_DEBUG=INFO for details), NCCL version %s\n"
           "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n%s"
           % (NCCL_VERSION, what))
    return warn, msg


def format_size(n):
    # c10::CachingAllocator::format_size
    if n <= 1024:
        return "%d bytes" % n
    if n <= 1048576:
        return "%.2f KiB" % (n / 1024.0)
    if n <= 1073741824:
        return "%.2f MiB" % (n / 1048576.0)
    return "%.2f GiB" % (n / 1073741824.0)


class Device:
    def __init__(self):
        d = _find_lib_dir()
        lib = ctypes.CDLL(os.path.join(d, "libmegasim_cuda.so"))
        self.nccl = ctypes.CDLL(os.path.join(d, "libmegasim_nccl.so"))
        u64p = ctypes.POINTER(ctypes.c_uint64)
        for name, res, args in (
                ("ms_caps", ctypes.c_uint32, []),
                ("ms_last_message", ctypes.c_char_p, []),
                ("ms_set_device", ctypes.c_int, [ctypes.c_int]),
                ("ms_mem_get_info", ctypes.c_int, [u64p, u64p]),
                ("ms_malloc", ctypes.c_int, [ctypes.c_uint64, u64p]),
                ("ms_free", ctypes.c_int, [ctypes.c_uint64]),
                ("ms_alloc_init", ctypes.c_int, [ctypes.c_int]),
                ("ms_alloc", ctypes.c_int, [ctypes.c_uint64, u64p]),
                ("ms_alloc_free", ctypes.c_int, [ctypes.c_uint64]),
                ("ms_alloc_empty_cache", ctypes.c_int, []),
                ("ms_alloc_stats", None, [ctypes.POINTER(_Stats)]),
                ("ms_alloc_pool_begin", ctypes.c_int, []),
                ("ms_alloc_pool_end", ctypes.c_int, []),
                ("ms_alloc_pool_use", ctypes.c_int, [ctypes.c_int]),
                ("ms_graph_capture_begin", ctypes.c_int, []),
                ("ms_graph_capture_end", ctypes.c_uint64, []),
                ("ms_graph_launch", ctypes.c_int, [ctypes.c_uint64]),
                ("ms_alloc_pool_reserved", ctypes.c_uint64, []),
                ("ms_nvtx_push", None, [ctypes.c_char_p]),
                ("ms_nvtx_pop", None, []),
                ("ms_nvtx_mark", None, [ctypes.c_char_p]),
                ("ms_thread_name", ctypes.c_int, [ctypes.c_char_p]),
                ("ms_autograd_start", ctypes.c_int, [ctypes.c_int]),
                ("ms_autograd_run", ctypes.c_int, [TASK_FN, ctypes.c_int64]),
                ("ms_autograd_stop", ctypes.c_int, []),
                ("ms_autograd_tid", ctypes.c_int, [])):
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        for name in ("ms_nccl_buffer_alloc",):
            f = getattr(self.nccl, name)
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_uint64, u64p]
        self.nccl.ms_nccl_collective.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int,
                                                 ctypes.c_int, ctypes.c_int]
        self.nccl.ms_nccl_collective.restype = ctypes.c_int
        self.nccl.ms_nccl_all_to_all_v.argtypes = [u64p, u64p, ctypes.c_int, ctypes.c_int,
                                                   ctypes.c_int]
        self.nccl.ms_nccl_all_to_all_v.restype = ctypes.c_int
        self.nccl.ms_nccl_comm_init.argtypes = [ctypes.c_int, ctypes.c_int]
        self.nccl.ms_nccl_comm_init.restype = ctypes.c_int
        self.comms = {}
        self.comm_used = set()
        self.on_first_use = None
        self.lib = lib
        self.caps = lib.ms_caps()
        self.index = 0
        self.mode = None
        self._tmp = ctypes.c_uint64()
        self._alloc = lib.ms_alloc
        self._free = lib.ms_alloc_free
        self._push = lib.ms_nvtx_push
        self._pop = lib.ms_nvtx_pop

    # -- device --
    def set_device(self, idx):
        self.index = idx
        rc = self.lib.ms_set_device(idx)
        if rc:
            raise RuntimeError("CUDA error: invalid device ordinal (cudaSetDevice(%d) = %d)" % (idx, rc))

    def init_allocator(self):
        m = self.lib.ms_alloc_init(self.index)
        if m < 0:
            raise RuntimeError("megasim: allocator setting refused: %s"
                               % self.lib.ms_last_message().decode())
        self.mode = MODES[m]
        return self.mode

    def mem_get_info(self):
        f, t = ctypes.c_uint64(), ctypes.c_uint64()
        self.lib.ms_mem_get_info(ctypes.byref(f), ctypes.byref(t))
        return f.value, t.value

    def stats(self):
        s = _Stats()
        self.lib.ms_alloc_stats(ctypes.byref(s))
        return s

    # -- allocation --
    def alloc(self, nbytes):
        rc = self._alloc(nbytes, ctypes.byref(self._tmp))
        if rc == 0:
            return self._tmp.value
        if rc == 2:
            raise OutOfMemoryError(self.oom_message())
        raise RuntimeError("megasim allocator error %d" % rc)

    def free(self, ptr):
        self._free(ptr)

    def oom_message(self):
        s = self.stats()
        total, free = s.oom_total, s.oom_free
        priv = self.lib.ms_alloc_pool_reserved()
        if self.mode == "nocache":
            return "CUDA error: out of memory"
        msg = ("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of "
               "which %s is free. Including non-PyTorch memory, this process has %s memory in "
               "use. Of the allocated memory %s is allocated by PyTorch, "
               % (format_size(s.oom_request), self.index, format_size(total), format_size(free),
                  format_size(total - free), format_size(s.allocated)))
        if priv:
            msg += "with %s allocated in private pools (e.g., CUDA Graphs), " % format_size(priv)
        msg += ("and %s is reserved by PyTorch but unallocated. If reserved but unallocated "
                "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
                "avoid fragmentation.  See documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                % format_size(s.reserved - s.allocated))
        return msg

    def empty_cache(self):
        self.lib.ms_alloc_empty_cache()

    # -- nvtx --
    def push(self, name):
        self._push(name.encode())

    def pop(self):
        self._pop()

    def mark(self, name):
        self.lib.ms_nvtx_mark(name.encode())

    # -- NCCL (libmegasim_nccl.so: the mock libnccl through its PLT) --
    DTYPES = {"u8": 0, "f32": 1, "bf16": 2}

    def comm_init(self, name, nranks, rank):
        self.comms[name] = (self.nccl.ms_nccl_comm_init(nranks, rank), nranks, rank)

    def collective(self, fn, nbytes, comm="world", dtype="bf16", peer=-1):
        idx, nranks, rank = self.comms.get(comm, (-1, 1, 0))
        if comm not in self.comm_used:
            self.comm_used.add(comm)
            if self.on_first_use:
                self.on_first_use(comm)
        if peer >= 0:
            peer = peer % max(nranks, 1)
        self.nccl.ms_nccl_collective(fn.encode(), int(nbytes), idx, self.DTYPES[dtype], peer)

    def all_to_all_v(self, send, recv, comm="ep", dtype="bf16"):
        """all_to_all_single with output/input split sizes: send[p] and recv[p]
        are the bytes for peer p of `comm` (one entry per rank of it)"""
        idx, nranks, rank = self.comms.get(comm, (-1, 1, 0))
        if comm not in self.comm_used:
            self.comm_used.add(comm)
            if self.on_first_use:
                self.on_first_use(comm)
        n = len(send)
        arr = ctypes.c_uint64 * n
        self.nccl.ms_nccl_all_to_all_v(arr(*[int(x) for x in send]), arr(*[int(x) for x in recv]),
                                       n, idx, self.DTYPES[dtype])

    def colocated_pool(self, dev, nbytes):
        """a colocated engine's pool (libmegasim_cumem_allocator.so: direct
        driver calls the shim does not see); returns its address"""
        lib = ctypes.CDLL(os.path.join(_find_lib_dir(), "libmegasim_cumem_allocator.so"))
        lib.ms_cumem_alloc.argtypes = [ctypes.c_int, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.c_uint64)]
        p = ctypes.c_uint64()
        rc = lib.ms_cumem_alloc(dev, nbytes, ctypes.byref(p))
        if rc:
            raise RuntimeError("CUDA Error: out of memory at cumem_allocator.cpp (cuMemCreate = %d)"
                               % rc)
        return p.value

    def nccl_buffer(self, nbytes):
        p = ctypes.c_uint64()
        rc = self.nccl.ms_nccl_buffer_alloc(nbytes, ctypes.byref(p))
        if rc:
            warn, msg = nccl_cuda_failure(rc)
            print(warn, file=sys.stderr, flush=True)
            raise DistBackendError(msg)
        return p.value


DEV = None
DEV_REF = [None]


def device():
    global DEV
    if DEV is None:
        DEV = Device()
        DEV_REF[0] = DEV
    return DEV


class Tensor:
    """A device tensor: nbytes of one allocator block. `name` is for megasim's
    own accounting (never recorded)."""
    __slots__ = ("nbytes", "ptr", "name", "kind", "__weakref__")

    def __init__(self, nbytes, name="", kind="act"):
        self.ptr = 0
        self.nbytes = int(nbytes)
        self.name = name
        self.kind = kind
        if self.nbytes:
            self.ptr = DEV.alloc(self.nbytes)
            LIVE[0] += self.nbytes
            if LIVE[0] > HIGH[0]:
                HIGH[0] = LIVE[0]
        if _ACCOUNT is not None:
            _ACCOUNT.append((name, self.nbytes, kind))

    def __del__(self):
        p = self.ptr
        if p:
            self.ptr = 0
            LIVE[0] -= self.nbytes
            DEV._free(p)

    def discard(self):
        """untyped_storage().resize_(0): frees the storage now."""
        p = self.ptr
        if p:
            self.ptr = 0
            LIVE[0] -= self.nbytes
            DEV._free(p)

    def resize(self, nbytes):
        """new storage of nbytes in place of the old (safely_set_viewless_tensor_data)"""
        new = Tensor(nbytes, self.name, self.kind)
        self.take_storage(new)

    def take_storage(self, other):
        """share the storage of `other` (recomputed data, zero copy)."""
        if self.ptr:
            LIVE[0] -= self.nbytes
            DEV._free(self.ptr)
        self.ptr, other.ptr = other.ptr, 0
        self.nbytes = other.nbytes

    def __repr__(self):
        return "Tensor(%s, %d)" % (self.name, self.nbytes)


_ACCOUNT = None
LIVE = [0]     # bytes of live tensors (requested sizes, what the size model counts)
HIGH = [0]     # LIVE's high-water mark (tests reset it)


class account:
    """Collects every tensor allocated inside the block (size-model checks)."""

    def __enter__(self):
        global _ACCOUNT
        self.prev = _ACCOUNT
        self.items = []
        _ACCOUNT = self.items
        return self.items

    def __exit__(self, *a):
        global _ACCOUNT
        _ACCOUNT = self.prev
        return False


def empty(nbytes, name="", kind="act"):
    return Tensor(nbytes, name, kind)
