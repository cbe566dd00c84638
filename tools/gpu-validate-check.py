#!/usr/bin/env python3
"""gpu-validate-check.py: compare the shim's traces with PyTorch's own counters.

  tools/gpu-validate-check.py [--build-dir build] [--markdown FILE] OUTDIR

OUTDIR is what tools/gpu-validate.sh left: traces/MODE/<run>/*.rstrace,
counters-MODE.json (PyTorch's view, written by the workload), rc-MODE,
snapshot-MODE.pickle (native and expandable on a real GPU), and the marker
dry-run (megasim) or fake-gpu (real PyTorch on the test doubles: exact
tensor-level oracles; NCCL's memory is a real-GPU-only check). Runs
recomp-analyze --json on each mode's traces and prints a PASS/FAIL/SKIP table
(Markdown). The oracles, per mode, are in docs/validation/README.md. Exit 0
when nothing failed, 1 otherwise, 2 when OUTDIR is unusable.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

MODES = ["native", "expandable", "async", "nocache", "oom"]
MIB = 1 << 20


def analyze(binary, path):
    """recomp-analyze --json --peak-blocks PATH -> (document or None, error text)."""
    p = subprocess.run([binary, "--json", "--peak-blocks", path], capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    try:
        return json.loads(p.stdout), ""
    except json.JSONDecodeError as e:
        return None, "bad JSON: %s" % e


def close(a, b, rel):
    return a is not None and b is not None and abs(a - b) <= rel * max(a, b, 1)


def fmt(n):
    return "n/a" if n is None else "%d (%.1f MiB)" % (n, n / MIB)


class Table:
    def __init__(self):
        self.rows = []

    def add(self, mode, check, verdict, ours, oracle, note=""):
        self.rows.append((mode, check, verdict, ours, oracle, note))

    def failed(self):
        return sum(1 for r in self.rows if r[2] == "FAIL")

    def markdown(self):
        out = ["| mode | check | result | recompshim | oracle | note |",
               "|---|---|---|---|---|---|"]
        for r in self.rows:
            out.append("| " + " | ".join(str(x) for x in r) + " |")
        n = {k: sum(1 for r in self.rows if r[2] == k) for k in ("PASS", "FAIL", "SKIP")}
        out.append("")
        out.append("%d passed, %d failed, %d skipped" % (n["PASS"], n["FAIL"], n["SKIP"]))
        return "\n".join(out)


def level_blocks(rank, level):
    """The live blocks {(address, bytes)} at the peak of one level, or None."""
    for key in ("peak", "device_peak"):
        p = rank.get(key)
        if p and p.get("level") == level and p.get("blocks") is not None:
            return {tuple(b) for b in p["blocks"]}
    return None


def level_peak(rank, level):
    """Peak bytes at 'tensor' or 'device' level from a rank's JSON."""
    for key in ("peak", "device_peak"):
        p = rank.get(key)
        if p and p.get("level") == level:
            return p.get("bytes")
    return None


def dump_lines(build_dir, run_dir):
    """recomp-dump's lines of every trace in run_dir (empty when it cannot run)."""
    dump = os.path.join(build_dir, "tools", "recomp-dump")
    lines = []
    for f in sorted(glob.glob(os.path.join(run_dir, "*.rstrace"))):
        p = subprocess.run([dump, f], capture_output=True, text=True)
        lines += p.stdout.splitlines()
    return lines


def field(line, key):
    """The value of key=value in a recomp-dump line, quotes removed, or None."""
    for tok in line.split():
        if tok.startswith(key + "="):
            return tok[len(key) + 1:].strip('"')
    return None


def check_real_paths(t, mode, lines):
    """Native/expandable: PyTorch's own report hook and autograd thread.

    The tensor events (TENSOR records) were reported from inside
    libc10_cuda.so's allocator through c10's reportMemoryUsageToProfiler, and
    the checkpointed layers' forward ranges were pushed again on a thread
    other than the main one (the autograd engine's: recompute replays).
    """
    pid = next((field(l, "pid") for l in lines if l.startswith("header host=")), None)
    tensors = [l for l in lines if l.startswith("TENSOR ")]
    from_c10 = [l for l in tensors if (field(l, "caller_lib") or "").startswith("libc10_cuda.so")]
    t.add(mode, "tensor events through PyTorch's report hook",
          "PASS" if tensors and len(from_c10) == len(tensors) else "FAIL",
          "%d of %d from libc10_cuda.so" % (len(from_c10), len(tensors)), "all, > 0")
    replays = {field(l, "tid") for l in lines
               if l.startswith("NVTX_PUSH ") and "TransformerLayer" in (field(l, "name") or "")
               and field(l, "tid") != pid}
    t.add(mode, "layer forwards replayed on another thread",
          "PASS" if replays else "FAIL", "tids " + ",".join(sorted(replays)) if replays else "none",
          "autograd thread (not pid %s)" % pid)


def check_mode(t, mode, out, binary, dry, fake=False):
    cpath = os.path.join(out, "counters-%s.json" % mode)
    rc_path = os.path.join(out, "rc-%s" % mode)
    rc = int(open(rc_path).read().strip()) if os.path.exists(rc_path) else None
    want_rc_zero = mode != "oom"
    if rc is None:
        t.add(mode, "workload ran", "FAIL", "no rc file", "-")
        return
    if not os.path.exists(cpath):
        # no counters: the workload never got to its measurements (a crash,
        # or no PyTorch): its exit status proves nothing
        t.add(mode, "workload exit", "FAIL", rc, "counters written",
              "missing %s: see run-%s.log" % (os.path.basename(cpath), mode))
        return
    t.add(mode, "workload exit", "PASS" if (rc == 0) == want_rc_zero else "FAIL", rc,
          "0" if want_rc_zero else "non-zero (OOM)")
    c = json.load(open(cpath))
    runs = sorted(glob.glob(os.path.join(out, "traces", mode, "*")))
    if not runs:
        t.add(mode, "trace written", "FAIL", "no run directory", "-")
        return
    doc, err = analyze(binary, runs[-1])
    if doc is None:
        t.add(mode, "recomp-analyze", "FAIL", err, "-")
        return
    ranks = doc.get("ranks") or []
    if not ranks:
        t.add(mode, "recomp-analyze", "FAIL", "no rank", "-")
        return
    r = ranks[0]
    t.add(mode, "trace closed", "PASS" if r.get("closed") or mode == "oom" else "FAIL",
          r.get("closed"), "closed at exit")
    if fake:
        # the fake GPU carries only load-only cuDNN stubs: train.py --no-cudnn
        t.add(mode, "cuDNN switched off (fake GPU)",
              "PASS" if c.get("cudnn_enabled") is False else "FAIL",
              c.get("cudnn_enabled"), False, "torch.backends.cudnn.enabled, cuDNN SDPA off")

    if mode == "oom":
        oom = r.get("oom")
        req = c.get("oom_request_bytes")
        got = oom.get("requested_bytes") if oom else None
        # At the CUDA API the caching allocator asks for the request rounded up
        # to 2 MiB (kRoundLarge, [PT] in docs/sources.md).
        rounded = None if req is None else -(-req // (2 * MIB)) * 2 * MIB
        ok = got is not None and got in (req, rounded)
        t.add(mode, "OOM recorded with its size", "PASS" if ok else "FAIL", fmt(got),
              fmt(rounded), c.get("oom_message", "")[:80])
        # Exact, when the workload had PyTorch's OOM observer: the bytes the
        # caching allocator asked for, not the rounded message.
        obs = c.get("oom_observer_bytes")
        if obs is None:
            t.add(mode, "OOM size = PyTorch's OOM observer", "SKIP", fmt(got), "-",
                  "no observer record")
        else:
            t.add(mode, "OOM size = PyTorch's OOM observer", "PASS" if got == obs else "FAIL",
                  fmt(got), fmt(obs), "torch._C._cuda_attach_out_of_memory_observer")
        return

    tensor = level_peak(r, "tensor")
    device = level_peak(r, "device")
    # On the fake GPU nothing but PyTorch's allocator touches memory (no
    # hardware, no real NCCL) and every event completes at once: the tensor
    # level must match exactly, not within the real GPU's 1%.
    tol = 0.0 if fake else 0.01
    if mode in ("native", "expandable"):
        mx = c.get("max_memory_allocated")
        t.add(mode, "tensor peak = max_memory_allocated",
              "PASS" if close(tensor, mx, tol) else "FAIL", fmt(tensor), fmt(mx),
              "PyTorch's allocator report hook (block sizes)" + (", exact (fake GPU)" if fake else ""))
        # Per iteration: the trace's tensor-level peak of ProfilerStep#K
        # against max_memory_allocated() restarted at that iteration's start.
        want = c.get("iteration_max_memory_allocated")
        if want is None:
            t.add(mode, "per-iteration peaks = the workload's", "SKIP", "-", "-",
                  "the workload recorded no per-iteration peaks")
        else:
            got = {it.get("iteration"): (it.get("peak_bytes") or {}).get("tensor")
                   for it in r.get("iterations", [])}
            bad = [k for k, v in enumerate(want) if not close(got.get(k), v, tol)]
            t.add(mode, "per-iteration peaks = the workload's", "FAIL" if bad else "PASS",
                  " ".join(fmt(got.get(k)).split()[0] for k in range(len(want))),
                  " ".join(str(v) for v in want),
                  "iterations %s differ" % bad if bad else "ProfilerStep# iterations")
        if not dry:
            check_real_paths(t, mode, dump_lines(os.path.dirname(os.path.dirname(binary)), runs[-1]))
        rs = c.get("max_memory_reserved")
        ok = device is not None and rs is not None and rs <= device <= rs + max(MIB << 10, rs // 20)
        t.add(mode, "device peak >= max_memory_reserved (+ memory outside PyTorch)",
              "PASS" if ok else "FAIL", fmt(device), fmt(rs))
        snap = os.path.join(out, "snapshot-%s.pickle" % mode)
        if os.path.exists(snap):
            sdoc, serr = analyze(binary, snap)
            srank = sdoc["ranks"][0] if sdoc and sdoc.get("ranks") else {}
            sp = level_peak(srank, "tensor") if srank else None
            t.add(mode, "tensor peak = memory-history snapshot's",
                  "PASS" if close(tensor, sp, tol) else "FAIL", fmt(tensor), fmt(sp),
                  serr or "snapshot imported by recomp-analyze")
            # The same run seen twice: the peak falls in the same iteration.
            ti = (r.get("peak") or {}).get("iteration")
            si = (srank.get("peak") or {}).get("iteration")
            t.add(mode, "peak iteration = memory-history snapshot's",
                  "PASS" if srank and ti == si else "FAIL", ti, si,
                  serr or "trace: ProfilerStep# markers; snapshot: forward/backward/optimizer cycle")
            # ... and the same live blocks (address, size) at that peak.
            tb = level_blocks(r, "tensor")
            sb = level_blocks(srank, "tensor") if srank else None
            same = tb is not None and tb == sb
            t.add(mode, "live blocks at the tensor peak = memory-history snapshot's",
                  "PASS" if same else "FAIL",
                  "%d blocks" % len(tb) if tb is not None else "-",
                  "%d blocks" % len(sb) if sb is not None else "-",
                  serr or ("(address, size) sets equal" if same else
                           "%d only in the trace, %d only in the snapshot" %
                           (len((tb or set()) - (sb or set())), len((sb or set()) - (tb or set())))))
        else:
            t.add(mode, "tensor peak = memory-history snapshot's", "SKIP", fmt(tensor), "-",
                  "no snapshot (dry run)" if dry else "snapshot missing")
    elif mode == "async":
        mx = c.get("max_memory_allocated")
        t.add(mode, "tensor peak (cudaMallocAsync sizes) = max_memory_allocated",
              "PASS" if close(tensor, mx, 0.02) else "FAIL", fmt(tensor), fmt(mx))
        t.add(mode, "async mode took effect", "PASS" if r.get("mode") == "async" else "FAIL",
              r.get("mode"), "async")
    elif mode == "nocache":
        lp = c.get("live_tensor_peak_bytes")
        t.add(mode, "tensor peak = live tensor bytes counted by the workload",
              "PASS" if close(tensor, lp, 0.02) else "FAIL", fmt(tensor), fmt(lp))
        t.add(mode, "nocache mode took effect", "PASS" if r.get("mode") == "nocache" else "FAIL",
              r.get("mode"), "nocache")

    peak = r.get("peak") or {}
    t.add(mode, "phase of the peak", "PASS" if peak.get("phase") not in (None, "unknown") else "FAIL",
          peak.get("phase"), "a training phase")
    phases = {p["phase"] for it in r.get("iterations", []) for p in it.get("phases", [])}
    t.add(mode, "recompute replay detected",
          "PASS" if "backward_replay" in phases else "FAIL",
          "backward_replay" if "backward_replay" in phases else "none", "checkpointed layers")
    dev = r.get("device") or {}
    ctx = dev.get("context_and_other_bytes")
    if dry:
        t.add(mode, "CUDA context seen (cudaMemGetInfo)", "PASS" if ctx else "FAIL", fmt(ctx),
              "> 0 (the mock's simulated context)")
    else:
        t.add(mode, "CUDA context seen (cudaMemGetInfo)", "PASS" if ctx else "FAIL", fmt(ctx), "> 0")
    by_lib = ((r.get("device_peak") or {}).get("by_library") or
              (r.get("peak") or {}).get("by_library") or {})
    nccl = by_lib.get("nccl")
    if fake:
        # the mock NCCL maps MOCK_NCCL_BUFFER_BYTES (64 MiB) per communicator
        # through cuGetProcAddress, like NCCL's cuMem path: exactly that much
        # is NCCL's at the device peak (one communicator, world size 1)
        want = 64 * MIB
        t.add(mode, "NCCL memory attributed", "PASS" if nccl == want else "FAIL", fmt(nccl),
              fmt(want), "the mock NCCL's cuMem buffers through the driver entry points")
    else:
        t.add(mode, "NCCL memory attributed", "PASS" if nccl else "FAIL", fmt(nccl), "> 0",
              "NCCL's cuMem buffers through the driver entry points")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--markdown", default=None, help="also write the table to this file")
    ap.add_argument("--dry", action="store_true", help="results of a --dry-run (megasim)")
    a = ap.parse_args()
    binary = os.path.join(a.build_dir, "analyzer", "recomp-analyze")
    if not os.path.isdir(a.outdir):
        print("gpu-validate-check: %s: not a directory" % a.outdir, file=sys.stderr)
        return 2
    if not os.access(binary, os.X_OK):
        print("gpu-validate-check: %s not built (meson setup %s && ninja -C %s)"
              % (binary, a.build_dir, a.build_dir), file=sys.stderr)
        return 2
    dry = a.dry or os.path.exists(os.path.join(a.outdir, "dry-run"))
    fake = os.path.exists(os.path.join(a.outdir, "fake-gpu"))
    t = Table()
    for m in MODES:
        check_mode(t, m, a.outdir, binary, dry, fake)
    md = t.markdown()
    print(md)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md + "\n")
    return 1 if t.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
