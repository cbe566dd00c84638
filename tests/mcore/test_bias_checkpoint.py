#!/usr/bin/env python3
"""Selective `mlp` recompute with biased linears never finishes backward, in
the real Megatron-Core (docs/validation/megatron-core.md, the gpt3-like row).

Megatron-Core 0.19.2's TransformerLayer runs its dense MLP under
tensor_parallel.checkpoint (CheckpointFunction, a reentrant checkpoint) when
"mlp" is in recompute_modules. With add_bias_linear (Megatron's default; off
with --disable-bias-linear) the MLP's linear_fc2 has skip_bias_add and returns
its bias Parameter as the second output. A custom autograd Function that
returns a tensor it did not create as an output gives that tensor its own
grad_fn: the bias Parameter stops being a leaf and points at the checkpoint.
In backward the checkpoint replays the MLP, which returns the same Parameter,
and torch.autograd.backward() over it enters the checkpoint's backward
again: the replay never ends (on the fake GPU: 80 GiB of replays, then OOM).

Checked here with Megatron-Core's own CheckpointFunction (pinned wheel, the
fake GPU only for torch.cuda's RNG state; the tensors are on the CPU):
  1. a function returning (x @ W, bias) like MLP with skip_bias_add: after
     the checkpointed forward the bias is no longer a leaf, and its backward
     replays the function again and again (stopped after 50 replays);
  2. the same function returning (x @ W, None) (--disable-bias-linear):
     backward replays it exactly once and the bias stays a leaf.
A later pin that no longer runs away fails check 1: the advisor's handling
of the mlp candidate and this page must then be revisited.

Exit 77 (SKIP) when the pinned wheels cannot be installed (no PyPI, no
CPython 3.12) unless RECOMPSHIM_REQUIRE_TORCH=1.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r'''
import sys, torch
from megatron.core.tensor_parallel.random import CheckpointFunction

LIMIT = 50

def probe(with_bias):
    """(replays of the function in one backward, bias a leaf after forward,
    the backward's error or None)"""
    w = torch.nn.Parameter(torch.ones(8, 8))
    bias = torch.nn.Parameter(torch.zeros(8))
    calls = [0]

    def mlp(x):
        calls[0] += 1
        if calls[0] > LIMIT + 1:
            raise RuntimeError("replayed %d times" % (calls[0] - 1))
        return x @ w, (bias if with_bias else None)

    x = torch.ones(4, 8, requires_grad=True)
    out, b = CheckpointFunction.apply(mlp, False, x)
    leaf = bias.is_leaf
    y = out + b if with_bias else out
    err = None
    try:
        y.sum().backward()
    except RuntimeError as e:
        err = str(e).splitlines()[0]
    return calls[0] - 1, leaf, err

ok = True
n, leaf, err = probe(True)
good = not leaf and n > LIMIT
print("%s - with the fc2 bias returned: bias a leaf after forward: %s; backward replays: %d "
      "(%s)" % ("ok" if good else "not ok", leaf, n, err))
ok &= good
n, leaf, err = probe(False)
good = leaf and n == 1 and err is None
print("%s - without a bias: bias a leaf: %s; backward replays: %d (%s)"
      % ("ok" if good else "not ok", leaf, n, err))
ok &= good
sys.exit(0 if ok else 1)
'''


def main():
    build = os.environ.get("RS_BUILD_DIR") or os.path.join(ROOT, "build")
    cache = os.environ.get("RECOMPSHIM_MCORE_CACHE") or os.path.join(build, "mcore-cache")
    p = subprocess.run([os.path.join(ROOT, "tools", "fake_gpu", "install-torch.sh"), cache,
                        os.path.join(ROOT, "tools", "mcore_job", "requirements.txt")],
                       stdout=subprocess.PIPE, text=True)
    if p.returncode:
        return p.returncode
    site = p.stdout.strip().splitlines()[-1]
    py = os.environ.get("RECOMPSHIM_TORCH_PYTHON") or subprocess.run(
        [os.path.join(ROOT, "tools", "fake_gpu", "find-python.sh"), "3.12"],
        stdout=subprocess.PIPE, text=True).stdout.strip()
    fake = os.path.join(build, "tests", "doubles", "fake_gpu")
    env = dict(os.environ, PYTHONPATH=site, PYTHONWARNINGS="ignore",
               LD_LIBRARY_PATH=fake + (":" + os.environ["LD_LIBRARY_PATH"]
                                       if os.environ.get("LD_LIBRARY_PATH") else ""))
    return subprocess.call([py, "-c", CHILD], env=env, timeout=600)


if __name__ == "__main__":
    sys.exit(main())
