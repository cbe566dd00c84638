#!/usr/bin/env python3
"""The advisor's model of PyTorch's caching allocator (advisor_cache.c)
against the real allocator, TAP (issue 14; docs/advisor.md "The allocator
model").

Run by run-torch.sh (the real PyTorch wheel on the fake GPU): cache_stream.py
allocates and frees tensors of every size class in shuffled order and trains a
small MLP with and without torch.utils.checkpoint, under the shim, and writes
PyTorch's own counters. recomp-analyze replays the recorded (un-rewritten)
tensor stream through the model; its reserved peak (the verdict's
predicted_reserved_bytes of the recorded setting) must equal
torch.cuda.max_memory_reserved() to the byte:
  1. on the default 80 GiB device (segments never released);
  2. on a device too small for the cache (capacity = the context + the first
     run's reserved peak - 24 MiB), where PyTorch's cudaMalloc fails and it
     releases its wholly free cached segments and retries
     (num_alloc_retries > 0), and the model must release the same segments.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import preload  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
_n = [0, 0]


def tap(ok, desc, detail=""):
    _n[0] += 1
    _n[1] += 0 if ok else 1
    print(f"{'ok' if ok else 'not ok'} {_n[0]} - {desc}", flush=True)
    if not ok and detail:
        for line in str(detail).splitlines()[-20:]:
            print("#   " + line, flush=True)
    return ok


def run(tmp, capacity=None):
    """cache_stream.py under the shim: (PyTorch's counters, the verdict) or
    (None, None) after a failed step (reported)"""
    env = dict(os.environ, RECOMPSHIM_OUT=tmp, LD_PRELOAD=preload(os.environ["RECOMP_SHIM"]))
    env.pop("RECOMPSHIM_RUN_ID", None)
    if capacity:
        env["MOCK_CUDA_CAPACITY"] = str(capacity)
    counters = os.path.join(tmp, "counters.json")
    p = subprocess.run([sys.executable, os.path.join(HERE, "cache_stream.py"), counters],
                       env=env, capture_output=True, text=True, timeout=600)
    runs = glob.glob(os.path.join(tmp, "*", ""))
    if not tap(p.returncode == 0 and len(runs) == 1 and os.path.exists(counters),
               f"the allocation stream runs under the shim (capacity {capacity or 'default'})",
               p.stderr):
        return None, None
    a = subprocess.run([os.environ["RECOMP_ANALYZE"], "--json", runs[0]], capture_output=True,
                       text=True, timeout=600)
    if not tap(a.returncode == 0, "recomp-analyze reads it", a.stderr):
        return None, None
    with open(counters) as f:
        return json.load(f), json.loads(a.stdout)["verdict"]


def model_reserved(verdict):
    ranks = verdict.get("ranks") or []
    return ranks[0].get("predicted_reserved_bytes") if len(ranks) == 1 else None


def main():
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        pt, v = run(tmp)
        if pt is None:
            print(f"1..{_n[0]}")
            return 1
        got = model_reserved(v)
        tap(got == pt["max_memory_reserved"],
            f"default device: the model's reserved peak {got} == max_memory_reserved "
            f"{pt['max_memory_reserved']} (allocated {pt['max_memory_allocated']})")
        ctx = v["ranks"][0].get("outside_pytorch_bytes") or 0
        cap = ctx + pt["max_memory_reserved"] - 24 * MIB
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        pt, v = run(tmp, cap)
        if pt is not None:
            tap(pt["num_alloc_retries"] > 0,
                f"capacity {cap}: PyTorch released its cache and retried "
                f"({pt['num_alloc_retries']} retries)")
            got = model_reserved(v)
            tap(got == pt["max_memory_reserved"],
                f"capacity {cap}: the model's reserved peak {got} == max_memory_reserved "
                f"{pt['max_memory_reserved']} (the model releases the same cached segments)")
    print(f"1..{_n[0]}")
    return 1 if _n[1] else 0


if __name__ == "__main__":
    sys.exit(main())
