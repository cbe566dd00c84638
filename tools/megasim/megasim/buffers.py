"""megasim's persistent buffers of one rank, by class, after training in-process.

The classes are those tools/mcore_job/driver.py reads from the real
Megatron-Core + Transformer Engine objects (counters-rank<R>.json
"buffer_bytes"), so that the two can be compared byte for byte
(docs/validation/megatron-core.md, "FP8 on the Transformer Engine spec"):

  params                 the model's parameters (the DDP param buffer under the
                         distributed optimizer)
  grad_buffers           DDP's grad buffers
  fp8_weight_workspaces  TE's cached quantized weights (every usage and its
                         scale_inv)
  fp8_meta               TE's FP8 scaling state (linears and core attention)
  main_params            the optimizer's fp32 copies of the parameters
  optimizer_state        Adam's moments

All values are bytes as requested (megasim's Tensor.nbytes, before the
caching allocator's 512-byte rounding), as the driver counts storages.

Usage: python3 -m megasim.buffers RANK WORLD [MEGASIM FLAGS...] prints them
as one JSON object (MEGASIM_LIB_DIR set, as for megasim itself).
"""
import gc
import json
import os
import sys

CLASSES = ("params", "grad_buffers", "fp8_weight_workspaces", "fp8_meta", "main_params",
           "optimizer_state")
_KIND = {"param": "params", "grad_buffer": "grad_buffers", "main_param": "main_params",
         "optim": "optimizer_state"}


def classify(tensor):
    """The class of one live megasim Tensor (CLASSES), or None for the
    others (activations, workspaces, inputs)."""
    n = tensor.name
    if n.endswith((".weight.fp8", ".weight.fp8_t", ".weight.scale_inv")):
        return "fp8_weight_workspaces"
    if n.endswith(".fp8_meta"):
        return "fp8_meta"
    return _KIND.get(tensor.kind)


def buffer_bytes(rank, world, argv):
    """Run megasim's rank RANK of WORLD with ARGV (megasim/Megatron flags, a
    --sim-preset expanded as the launcher does) for its --train-iters in this
    process, then sum the live tensors by class (bytes). Raises megasim's
    ConfigError on flags it refuses."""
    os.environ.update(RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(world))
    from . import cuda, training
    from .config import build_parser, finalize
    from .launch import expand
    args = finalize(build_parser().parse_args(expand(argv)))
    r = training.Rank(args)
    r.quiet = True
    r.setup()
    r.train()
    out = dict.fromkeys(CLASSES, 0)
    for o in gc.get_objects():
        if isinstance(o, cuda.Tensor) and o.ptr:
            c = classify(o)
            if c:
                out[c] += o.nbytes
    r.engine.stop()
    return out


if __name__ == "__main__":
    print(json.dumps(buffer_bytes(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])))
