#!/usr/bin/env python3
"""The cost of Python frames in the shim (issue 20; docs/performance.md
"Python frames"): added CPU time per Python call and per allocation with
RECOMPSHIM_PYSTACK=1 against =0 and against no shim, beside memray (PyPI)
tracking the same workload, on each Python given.

  tools/bench/bench_pystack.py BUILD_DIR PYTHON [PYTHON...] [--rounds N]
        [--calls N] [--allocs N] [--memray-python PYTHON]...

--memray-python (repeatable): an interpreter with memray, used for the
PYTHON of its own version; tools/bench/install-memray.sh VENV PYTHON makes
one (memray and its imports pinned by hash, tools/bench/memray-requirements.txt).

Variants run interleaved round by round (median of N rounds), each a fresh
process; the time is the child's CPU time (user + system, wait4), as in
run_all.py. The workload (this file run with --workload) makes --calls
Python calls (3 functions deep) and --allocs cudaMalloc/cudaFree pairs
through the libcudart double from a 4-deep Python stack.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile


def workload(cudart_path, calls, allocs, use_memray, out):
    import ctypes
    ctypes.CDLL(cudart_path, mode=ctypes.RTLD_GLOBAL)
    rt = ctypes.CDLL(None)
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    p = ctypes.c_void_p()

    def leaf(x):
        return x + 1

    def mid(x):
        return leaf(x) + leaf(x)

    def calls_loop(n):
        s = 0
        for i in range(n):
            s += mid(i)
        return s

    def alloc_once():
        rt.cudaMalloc(ctypes.byref(p), 4096)
        rt.cudaFree(p)

    def alloc_loop(n):
        for _ in range(n):
            alloc_once()

    def run():
        rt.cudaMalloc(ctypes.byref(p), 512)       # opens the trace, schedules the install
        for _ in range(3):
            pass
        if calls:
            calls_loop(calls // 3)
        if allocs:
            alloc_loop(allocs)

    if use_memray:
        import memray
        with memray.Tracker(out):
            run()
    else:
        run()


def child_cpu(argv, env):
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execve(argv[0], argv, env)
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench: {argv} failed")
    return ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("pythons", nargs="*")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3_000_000)
    ap.add_argument("--allocs", type=int, default=100_000)
    ap.add_argument("--memray-python", action="append", default=[])
    ap.add_argument("--workload", nargs=5)
    a = ap.parse_args()
    if a.workload:
        cudart, calls, allocs, use_memray, out = a.workload
        workload(cudart, int(calls), int(allocs), use_memray == "1", out)
        return 0
    shim = os.path.join(a.build, "shim", "librecompshim.so")
    cudart = os.path.join(a.build, "tests", "doubles", "libcudart.so.13")
    me = os.path.abspath(__file__)
    print(f"# {a.calls} Python calls, {a.allocs} cudaMalloc/cudaFree pairs, "
          f"median CPU of {a.rounds} interleaved rounds")
    print("| python | variant | CPU s (calls / allocs) | added ns per Python call | added ns per alloc+free "
          "| of which frames, per call / per alloc+free |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        for py in a.pythons:
            ver = subprocess.run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
            variants = {"no shim": ({}, False, py),
                        "shim, PYSTACK=0": ({"LD_PRELOAD": shim, "RECOMPSHIM_PYSTACK": "0"}, False, py),
                        "shim, PYSTACK=1": ({"LD_PRELOAD": shim, "RECOMPSHIM_PYSTACK": "1"}, False, py)}
            for mpy in a.memray_python:
                mver = subprocess.run([mpy, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                      capture_output=True, text=True).stdout.strip()
                if mver == ver:
                    variants["memray (no shim)"] = ({}, True, mpy)
            med = {}
            for phase, calls, allocs in (("calls", a.calls, 0), ("allocs", 0, a.allocs)):
                res = {k: [] for k in variants}
                for r in range(a.rounds):
                    for name, (extra, mem, exe) in variants.items():
                        env = dict(os.environ, RECOMPSHIM_OUT=os.path.join(tmp, "out"), **extra)
                        env.pop("RECOMPSHIM_RUN_ID", None)
                        if "LD_PRELOAD" not in extra:
                            env.pop("LD_PRELOAD", None)
                        out = os.path.join(tmp, f"memray-{r}.bin")
                        argv = [exe, me, a.build, "--workload", cudart, str(calls), str(allocs),
                                "1" if mem else "0", out]
                        res[name].append(child_cpu(argv, env))
                        if os.path.exists(out):
                            os.unlink(out)
                med[phase] = {k: statistics.median(v) for k, v in res.items()}
            def added(name, ref, phase, n):
                return f"{(med[phase][name] - med[phase][ref]) / n * 1e9:.1f}"
            for name in variants:
                cells = ["", ""] if name == "no shim" else \
                    [added(name, "no shim", "calls", a.calls), added(name, "no shim", "allocs", a.allocs)]
                frames = "" if name != "shim, PYSTACK=1" else \
                    added(name, "shim, PYSTACK=0", "calls", a.calls) + " / " + \
                    added(name, "shim, PYSTACK=0", "allocs", a.allocs)
                print(f"| {ver} | {name} | {med['calls'][name]:.3f} / {med['allocs'][name]:.3f} | "
                      f"{cells[0]} | {cells[1]} | {frames} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
