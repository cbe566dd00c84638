#!/usr/bin/env python3
"""Python frames with the real PyTorch on the fake GPU (issue 20), TAP.

Run by run-torch.sh (the wheel on PYTHONPATH, the fake GPU first on
LD_LIBRARY_PATH): runs pystack_checkpoint.py under the shim — a block under
torch.utils.checkpoint (reentrant), so PyTorch's autograd worker threads
replay its forward in backward — and asserts the Python stacks recorded
with PyTorch's own allocator reports (TENSOR) and cudaMalloc (ALLOC): the
forward on the main thread, the replay on a pt_autograd_* thread (which
enters Python through PyGILState_Ensure; before Python 3.12 through the
shim's rescan), and no main-thread frame ever on a worker's stack.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import preload  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
_n = [0, 0]


def tap(ok, desc):
    _n[0] += 1
    _n[1] += 0 if ok else 1
    print(f"{'ok' if ok else 'not ok'} {_n[0]} - {desc}", flush=True)


def parse(dump):
    """[(tid, kind, [frames innermost first])] of ALLOC/TENSOR records, and
    {tid: thread name}."""
    recs, names, cur = [], {}, None
    for line in dump.splitlines():
        m = re.match(r"THREAD .* thread_tid=(\d+) .* name=\"([^\"]*)\"", line)
        if m:
            names[m.group(1)] = m.group(2)
        if line.startswith(("ALLOC ", "TENSOR ")):
            if line.startswith("TENSOR ") and " size=-" in line:
                cur = None
                continue
            cur = (re.search(r" tid=(\d+)", line).group(1), line.split()[0], [])
            recs.append(cur)
        elif line.startswith("  py #") and cur:
            cur[2].append(re.match(r"  py #\d+ (.*) \(.*:\d+\)$", line).group(1))
        else:
            cur = None
    return recs, names


def in_order(stack, names):
    """names appear in stack in this order (innermost first), not adjacent."""
    i = 0
    for f in stack:
        if i < len(names) and f == names[i]:
            i += 1
    return i == len(names)


def main():
    shim, dump_exe = os.environ["RECOMP_SHIM"], os.environ["RECOMP_DUMP"]
    analyze = os.environ["RECOMP_ANALYZE"]
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        env = dict(os.environ, RECOMPSHIM_OUT=tmp, LD_PRELOAD=preload(shim))
        env.pop("RECOMPSHIM_RUN_ID", None)
        p = subprocess.run([sys.executable, os.path.join(HERE, "pystack_checkpoint.py"), "4"],
                           env=env, capture_output=True, text=True, timeout=600)
        traces = glob.glob(os.path.join(tmp, "*", "*.rstrace"))
        tap(p.returncode == 0 and len(traces) == 1,
            f"checkpointed training under the shim: rc={p.returncode}, {len(traces)} trace(s) "
            f"{p.stderr[-400:]}")
        if len(traces) != 1:
            return 1
        d = subprocess.run([dump_exe, traces[0]], capture_output=True, text=True, timeout=300)
        recs, names = parse(d.stdout)
        a = subprocess.run([analyze, "--json", tmp], capture_output=True, text=True, timeout=300)
        t = subprocess.run([analyze, tmp], capture_output=True, text=True, timeout=300)
    try:
        import json
        peak = json.loads(a.stdout)["ranks"][0]["peak"]
        py = peak["set_by"]["python"] or ""
    except (ValueError, KeyError, IndexError):
        py = ""
    tap("CheckpointFunction." in py and f"in Python: {py}" in t.stdout,
        f"the report names the Python frames of the allocation that set the peak: {py!r}")
    funcs = {c.get("function") for c in (peak.get("contributors", []) if py else [])}
    tap(any(f and f.endswith(":Block.forward") for f in funcs),
        f"a job that is not Megatron: contributors grouped by allocating function "
        f"(Block.forward among {sorted(f for f in funcs if f)[:4]})")
    main_tid = recs[0][0] if recs else None
    fwd = [s for t, k, s in recs if t == main_tid and s[:1] == ["Linear.forward"]]
    want_fwd = ["Linear.forward", "Block.forward", "CheckpointFunction.forward", "checkpoint",
                "train_step", "main", "<module>"]
    tap(any(in_order(s, want_fwd) and s[-1] == "<module>" for s in fwd),
        f"the checkpointed forward on the main thread: {fwd[:1]}")
    workers = {t for t, n in names.items() if n.startswith("pt_autograd_")}
    wstacks = [s for t, k, s in recs if t in workers and s]
    replay = ["Linear.forward", "Block.forward", "CheckpointFunction.backward"]
    tap(any(in_order(s, replay) and s[-1] == "BackwardCFunction.apply" for s in wstacks),
        f"the replay on an autograd worker, entered from C++: "
        f"{[s for s in wstacks if s[:1] == ['Linear.forward']][:1]}")
    tap(wstacks and not any({"main", "<module>", "train_step"} & set(s) for s in wstacks),
        f"no main-thread frame on a worker's stack ({len(wstacks)} worker stacks)")
    print(f"1..{_n[0]}")
    return 1 if _n[1] else 0


if __name__ == "__main__":
    sys.exit(main())
