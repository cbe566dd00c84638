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
torch.cuda.max_memory_reserved() to the byte, with the default settings,
max_split_size_mb:64 (oversize blocks) and expandable_segments:True:
  1. on the default 80 GiB device (segments never released);
  2. on a device too small for the cache (capacity = the context + the first
     run's reserved peak - 24 MiB), where PyTorch's cudaMalloc fails and it
     releases cached blocks (oversize ones first with max_split_size) and
     retries (its reserved peak stays below the first run's): the model must
     release the same ones.
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


def run(tmp, conf, capacity=None):
    """cache_stream.py under the shim with PYTORCH_CUDA_ALLOC_CONF=conf:
    (PyTorch's counters, the verdict) or (None, None) after a failed step
    (reported)"""
    env = dict(os.environ, RECOMPSHIM_OUT=tmp, LD_PRELOAD=preload(os.environ["RECOMP_SHIM"]))
    env.pop("RECOMPSHIM_RUN_ID", None)
    env.pop("PYTORCH_ALLOC_CONF", None)
    env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    if capacity:
        env["MOCK_CUDA_CAPACITY"] = str(capacity)
    counters = os.path.join(tmp, "counters.json")
    p = subprocess.run([sys.executable, os.path.join(HERE, "cache_stream.py"), counters],
                       env=env, capture_output=True, text=True, timeout=600)
    runs = glob.glob(os.path.join(tmp, "*", ""))
    what = f"'{conf or 'defaults'}', capacity {capacity or 'default'}"
    if not tap(p.returncode == 0 and len(runs) == 1 and os.path.exists(counters),
               f"{what}: the allocation stream runs under the shim", p.stderr):
        return None, None
    a = subprocess.run([os.environ["RECOMP_ANALYZE"], "--json", runs[0]], capture_output=True,
                       text=True, timeout=600)
    if not tap(a.returncode == 0, f"{what}: recomp-analyze reads it", a.stderr):
        return None, None
    with open(counters) as f:
        return json.load(f), json.loads(a.stdout)["verdict"]


def model_reserved(verdict):
    ranks = verdict.get("ranks") or []
    return ranks[0].get("predicted_reserved_bytes") if len(ranks) == 1 else None


# PYTORCH_CUDA_ALLOC_CONF settings, each also run on a device too small for
# its cache (True) or not (False: expandable segments unmap free pages inside
# blocks on release, which the model does not follow; docs/advisor.md)
CONFS = [("", True), ("max_split_size_mb:64", True), ("expandable_segments:True", False)]


def check(conf, limited):
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        pt, v = run(tmp, conf)
        if pt is None:
            return
        got = model_reserved(v)
        tap(got == pt["max_memory_reserved"],
            f"'{conf or 'defaults'}': the model's reserved peak {got} == max_memory_reserved "
            f"{pt['max_memory_reserved']} (allocated {pt['max_memory_allocated']})")
        ctx = v["ranks"][0].get("outside_pytorch_bytes") or 0
        full = pt["max_memory_reserved"]
        cap = ctx + full - 24 * MIB
    if not limited:
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        pt, v = run(tmp, conf, cap)
        if pt is None:
            return
        # release_available_cached_blocks (oversize blocks) counts no retry;
        # either release leaves PyTorch's reserved peak below the unlimited run's
        tap(pt["max_memory_reserved"] < full,
            f"'{conf or 'defaults'}', capacity {cap}: PyTorch released cached blocks "
            f"(reserved peak {pt['max_memory_reserved']} < {full} unlimited; "
            f"{pt['num_alloc_retries']} retries)")
        got = model_reserved(v)
        tap(got == pt["max_memory_reserved"],
            f"'{conf or 'defaults'}', capacity {cap}: the model's reserved peak {got} == "
            f"max_memory_reserved {pt['max_memory_reserved']} (the model releases the same "
            f"cached blocks)")


def main():
    for conf, limited in CONFS:
        check(conf, limited)
    print(f"1..{_n[0]}")
    return 1 if _n[1] else 0


if __name__ == "__main__":
    sys.exit(main())
