"""A minimal autograd: a tape of backward nodes per microbatch, run in reverse
on the backward worker thread `pt_autograd_<dev>` (a native pthread of the C
helper that enters Python through PyGILState_Ensure), plus Megatron's two
recompute mechanisms ([M] in docs/sources.md):

- CheckpointFunction (checkpoint-style: core_attn, mlp, moe, shared_experts,
  full): forward under no_grad keeping only the inputs; backward replays the
  function with grad enabled (forward NVTX names re-emitted on the worker) and
  runs the nested backward.
- CheckpointWithoutOutput (discard-style: layernorm, moe_act, mla_up_proj):
  forward under no_grad, the consumer saves the output, then the output storage
  is freed (resize_(0)); a hook at the hook tensor's position recomputes it in
  backward (the original storage takes the recomputed data, zero copy).

Tensors are freed by reference counting, as PyTorch storages are: a node's
saved tensors go when the node has run.
"""
import threading

from . import cuda


class _State(threading.local):
    def __init__(self):
        self.grad = True
        self.tape = None
        self.replay = 0        # inside a CheckpointFunction replay (--sim-aux-module-*)


ST = _State()
RETAINED = []          # fault --sim-retain-replay: replay tensors kept alive


class Node:
    __slots__ = ("name", "saved", "bwd")

    def __init__(self, name, saved, bwd):
        self.name = name
        self.saved = saved
        self.bwd = bwd


def record(name, saved, bwd):
    """Adds a backward node when grad mode is on (ops under no_grad save nothing)."""
    if ST.grad and ST.tape is not None:
        ST.tape.append(Node(name, saved, bwd))


class no_grad:
    def __enter__(self):
        self.prev = ST.grad
        ST.grad = False

    def __exit__(self, *a):
        ST.grad = self.prev
        return False


class enable_grad:
    def __enter__(self):
        self.prev = ST.grad
        ST.grad = True

    def __exit__(self, *a):
        ST.grad = self.prev
        return False


class tape_scope:
    def __init__(self, tape):
        self.tape = tape

    def __enter__(self):
        self.prev = ST.tape
        ST.tape = self.tape
        return self.tape

    def __exit__(self, *a):
        ST.tape = self.prev
        return False


def run_backward(tape, grad):
    """Executes a tape in reverse; each node takes the incoming grad and
    returns the grad of its input. The saved tensors die with the node."""
    while tape:
        node = tape.pop()
        grad = node.bwd(node, grad)
        node.saved = None
        del node
    return grad


class CheckpointFunction:
    """megatron/core/tensor_parallel/random.py CheckpointFunction (reentrant).
    With distribute_saved_activations the saved args[0] is replaced by its
    1/TP slice (a new buffer) after the forward, and all-gathered back at the
    start of the backward."""

    @staticmethod
    def forward(run_function, distribute, *args):
        with no_grad():
            outputs = run_function(*args)
        if distribute and distribute > 1 and args and isinstance(args[0], cuda.Tensor):
            full = args[0].nbytes
            args[0].resize(full // distribute)          # split_tensor_into_1d_equal_chunks
        else:
            full = 0
        record("CheckpointFunctionBackward", list(args),
               lambda node, g: CheckpointFunction.backward(node, g, run_function, full))
        return outputs

    @staticmethod
    def backward(node, grad, run_function, full=0):
        inputs = node.saved
        if full:
            inputs[0].resize(full)                      # gather_split_1d_tensor
        tape = []
        ST.replay += 1
        try:
            with enable_grad(), tape_scope(tape):
                outputs = run_function(*inputs)
        finally:
            ST.replay -= 1
        if RETAIN_REPLAY[0]:
            RETAINED.append(outputs)
        del outputs
        node.saved = None
        # the saved inputs (ctx.saved_tensors, detached_inputs) stay referenced
        # until backward() returns: through the replay's own backward
        # (random.py; checked against megatron-core 0.19.2, docs/megasim.md)
        grad = run_backward(tape, grad)
        del inputs
        return grad


def checkpoint(function, distribute_saved_activations, *args):
    """distribute_saved_activations: False, or the TP size to split args[0] over"""
    return CheckpointFunction.forward(function, distribute_saved_activations, *args)


class CheckpointWithoutOutput:
    """random.py CheckpointWithoutOutput: checkpoint() -> consumer ->
    discard_output_and_register_recompute(hook_tensor)."""

    def __init__(self):
        self.run_function = None
        self.inputs = None
        self.outputs = None
        self.tape = None

    def checkpoint(self, run_function, *args):
        self.run_function = run_function
        self.inputs = args
        with no_grad():
            outputs = run_function(*args)
        self.outputs = outputs
        me = self
        # CheckpointWithoutOutputFunction: backprop through the recomputed graph
        record("CheckpointWithoutOutputFunctionBackward", list(args),
               lambda node, g: me._backward(g))
        return outputs

    def discard_output_and_register_recompute(self, hook_tensor):
        outs = self.outputs if isinstance(self.outputs, (list, tuple)) else [self.outputs]
        for t in outs:
            t.discard()                       # untyped_storage().resize_(0)
        me = self
        record("hook(%s)" % getattr(hook_tensor, "name", "hook_tensor"), [],
               lambda node, g: me._recompute(g))

    def _recompute(self, grad):
        tape = []
        with enable_grad(), tape_scope(tape):
            new = self.run_function(*self.inputs)
        olds = self.outputs if isinstance(self.outputs, (list, tuple)) else [self.outputs]
        news = new if isinstance(new, (list, tuple)) else [new]
        for o, n in zip(olds, news):
            o.take_storage(n)                 # share_storage: zero copy
        if RETAIN_REPLAY[0]:
            RETAINED.append(olds)
        self.tape = tape
        self.outputs = None
        return grad

    def _backward(self, grad):
        tape, self.tape = self.tape or [], None
        self.inputs = None
        return run_backward(tape, grad)


RETAIN_REPLAY = [False]
GRAD_WORKSPACE = [0]   # fault --sim-grad-workspace-mib: bytes, made only under grad


class AutogradEngine:
    """pt_autograd_<dev>: backward() from the main thread posts the work and
    blocks (GIL released by ctypes) until the worker has run it."""

    def __init__(self, dev):
        self.dev = dev
        self.error = None
        self.job = None
        self._cb = cuda.TASK_FN(self._run)
        dev.lib.ms_autograd_start(dev.index)

    def _run(self, arg):
        try:
            tape, grad, done = self.job
            self.job = None
            done(run_backward(tape, grad))
            return 0
        except BaseException as e:  # propagate to the caller's thread, as the engine does
            self.error = e
            return 1

    def backward(self, tape, grad, done=lambda g: None):
        self.job = (tape, grad, done)
        del tape, grad
        rc = self.dev.lib.ms_autograd_run(self._cb, 0)
        if rc:
            e, self.error = self.error, None
            raise e

    def stop(self):
        self.dev.lib.ms_autograd_stop()
