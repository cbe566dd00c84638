#!/usr/bin/env python3
"""Python frames in the shim (issue 20, docs/python-frames.md), TAP.

tests/pystack/frames_prog.py allocates through the libcudart double from
known frames; every allocation's size names the frame it came from, and
this test asserts its exact Python stack in recomp-dump's output, on every
Python the machine has (pyenv: 3.12 and 3.13 take the sys.monitoring path,
3.10 and 3.11 PyEval_SetProfile; a missing version is a visible SKIP):
nested calls, exceptions, generators, coroutines, a threading thread, a
native pthread that allocates without the GIL and then enters Python
through PyGILState_Ensure; other profilers (sys.setprofile before and
after the install, cProfile, both free sys.monitoring tool ids taken);
RECOMPSHIM_PYSTACK=0; and a process without Python, untouched.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import preload  # noqa: E402

SHIM = os.environ["RECOMP_SHIM"]
DUMP = os.environ["RECOMP_DUMP"]
CUDART = os.environ["RS_MOCK_CUDART"]
HELPER = os.environ["RS_NATIVE_HELPER"]
CPROG = os.environ["RS_C_PROG"]
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frames_prog.py")
TMP = os.environ.get("TMPDIR") or None

_n = 0
_failed = 0


def tap(ok, desc, skip=None):
    global _n, _failed
    _n += 1
    if skip:
        print(f"ok {_n} - {desc} # SKIP {skip}", flush=True)
        return
    if not ok:
        _failed += 1
    print(f"{'ok' if ok else 'not ok'} {_n} - {desc}", flush=True)


def pythons():
    """(label, interpreter or None) for 3.10..3.13: pyenv's newest patch
    release of each, else this interpreter when it is that version."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    out = []
    for minor in (10, 11, 12, 13):
        found = sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin", "python3")),
                       key=lambda p: [int(x) for x in re.findall(r"\d+", p.split("/versions/")[1].split("/")[0])])
        exe = found[-1] if found else None
        if exe is None and sys.version_info[:2] == (3, minor):
            exe = sys.executable
        out.append((f"3.{minor}", minor, exe))
    return out


def run(argv, env_extra, tmp):
    env = dict(os.environ)
    env.update({"RECOMPSHIM_OUT": tmp, "LD_PRELOAD": preload(SHIM), "RS_NATIVE_HELPER": HELPER})
    env.pop("RECOMPSHIM_RUN_ID", None)
    env.pop("PYTHONPATH", None)
    env.update(env_extra)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=tmp)
    traces = glob.glob(os.path.join(tmp, "*", "*.rstrace"))
    dump = ""
    if len(traces) == 1:
        d = subprocess.run([DUMP, traces[0]], capture_output=True, text=True, timeout=120)
        dump = d.stdout if d.returncode == 0 else ""
    return p, dump, traces


def stacks(dump):
    """{size: [frame names, innermost first]} of every ALLOC; [] when it has
    no Python stack. Sizes in the test are unique."""
    out = {}
    cur = None
    for line in dump.splitlines():
        if line.startswith("ALLOC "):
            m = re.search(r" size=(\d+) ", line)
            cur = int(m.group(1))
            out[cur] = []
        elif cur is not None and line.startswith("  py #"):
            out[cur].append(re.match(r"  py #\d+ (.*) \(.*:\d+\)$", line).group(1))
        else:
            cur = None
    return out


def names(minor, qual):
    """Expected names: qualified names from 3.11 (co_qualname), else co_name."""
    return qual if minor >= 11 else [q.split(".")[-1] for q in qual]


MAIN = ["main", "<module>"]


def check_main_run(label, minor, exe):
    with tempfile.TemporaryDirectory(dir=TMP) as tmp:
        p, dump, traces = run([exe, PROG, CUDART, "native"], {}, tmp)
        ok = p.returncode == 0 and len(traces) == 1 and dump
        tap(ok, f"{label}: the job runs under the shim and its trace dumps "
                f"(rc={p.returncode}, {len(traces)} trace(s)) {p.stderr.strip()[-300:]}")
        if not ok:
            return
        st = stacks(dump)
        monitoring = minor >= 12
        how = "sys.monitoring tool 4" if monitoring else "PyEval_SetProfile (threads started by threading included)"
        tap(f'key=pystack value="{how}"' in dump, f"{label}: META pystack says how ({how})")
        want = {
            1000: [],
            1001: names(minor, ["alloc", "Attention.forward", "Layer.forward"]) + MAIN,
            1002: names(minor, ["alloc", "Layer.forward"]) + MAIN,
            1003: ["alloc", "raiser", "after_exception"] + MAIN,
            1004: ["alloc", "after_exception"] + MAIN,
            1005: ["alloc", "gen", "generators"] + MAIN,
            1006: ["alloc", "gen", "generators"] + MAIN,
            1007: ["alloc", "generators"] + MAIN,
            1009: names(minor, ["alloc", "worker", "Thread.run", "Thread._bootstrap_inner",
                                "Thread._bootstrap"]),
            1011: ["alloc", "native_entered"],
            1012: [],
            1014: ["alloc", "native_entered"],
            1013: ["alloc"] + MAIN,
        }
        why = {1000: "the first CUDA call, before the install: no stack",
               1003: "inside a frame that then raises",
               1004: "after the exception unwound raiser",
               1006: "in a resumed generator",
               1007: "with the generator suspended",
               1009: "in a thread started by threading",
               1011: "in a native thread entered through PyGILState_Ensure"
                     + ("" if monitoring else " (after the rescan its first allocation asked for)"),
               1014: "the same native thread, again",
               1012: "in a native thread without the GIL: no stack",
               1013: "after all scenarios: balanced"}
        for size, w in want.items():
            tap(st.get(size) == w, f"{label}: alloc {size} {why.get(size, 'nested calls')}: "
                                   f"{st.get(size)} == {w}")
        coro = st.get(1008, [])
        tap(coro[:3] == ["alloc", "coro_inner", "coro_outer"] and coro[-3:] == ["coroutines"] + MAIN,
            f"{label}: alloc 1008 in a coroutine awaited through asyncio: {coro}")


def check_profilers(label, minor, exe):
    monitoring = minor >= 12
    with tempfile.TemporaryDirectory(dir=TMP) as tmp:
        p, dump, _ = run([exe, PROG, CUDART, "with_setprofile"], {}, tmp)
        st = stacks(dump)
        tap("setprofile-events True" in p.stdout,
            f"{label}: a profiler set after the install gets its events")
        want = ["alloc", "with_setprofile"] + MAIN if monitoring else []
        tap(st.get(1010) == want, f"{label}: alloc under a later sys.setprofile: {st.get(1010)} == {want}"
            + ("" if monitoring else " (replaced: unknown, never stale)"))
        want = ["alloc"] + MAIN if monitoring else []
        tap(st.get(1013) == want, f"{label}: after it: {st.get(1013)} == {want}")
    with tempfile.TemporaryDirectory(dir=TMP) as tmp:
        p, dump, _ = run([exe, PROG, CUDART], {"RS_PYSTACK_PRE": "early_profiler"}, tmp)
        st = stacks(dump)
        tap("early-profiler-events True" in p.stdout,
            f"{label}: a profiler set before the install keeps working")
        if monitoring:
            tap(st.get(1002) == ["alloc", "Layer.forward"] + MAIN,
                f"{label}: sys.monitoring coexists with it: {st.get(1002)}")
        else:
            lines = [l for l in p.stderr.splitlines() if "no Python frames" in l]
            tap(len(lines) == 1 and "stands down" in lines[0] and st.get(1002) == [],
                f"{label}: before 3.12 the shim stands down in one stderr line: {lines}")
            tap('key=pystack value="off: another profiler' in dump,
                f"{label}: and says so in the trace (META pystack)")
    with tempfile.TemporaryDirectory(dir=TMP) as tmp:
        prof = os.path.join(tmp, "cprofile.out")
        p, dump, _ = run([exe, "-m", "cProfile", "-o", prof, PROG, CUDART], {}, tmp)
        st = stacks(dump)
        tap(p.returncode == 0 and os.path.getsize(prof) > 0,
            f"{label}: cProfile runs and writes its profile under the shim")
        if monitoring:
            got = st.get(1001, [])
            tap(got[:4] == ["alloc", "Attention.forward", "Layer.forward", "main"],
                f"{label}: frames beside cProfile's tool id: {got}")
        else:
            tap(st.get(1001) == [] and p.stderr.count("no Python frames") == 1,
                f"{label}: beside cProfile before 3.12: stands down, one line")
    if monitoring:
        with tempfile.TemporaryDirectory(dir=TMP) as tmp:
            p, dump, _ = run([exe, PROG, CUDART], {"RS_PYSTACK_PRE": "take_tool_ids"}, tmp)
            st = stacks(dump)
            lines = [l for l in p.stderr.splitlines() if "no Python frames" in l]
            tap(p.returncode == 0 and len(lines) == 1 and "tool ids 3 and 4" in lines[0]
                and st.get(1001) == [] and 'value="off: sys.monitoring tool ids' in dump,
                f"{label}: both free tool ids taken: stands down, one line, META says why: {lines}")


# shim/pystack_py.c profilefunc_offset(): where the rescan reads a thread
# state's profile function, per version
PROFILEFUNC_OFFSET = {10: 56, 11: 64}


def check_offset(label, minor, exe):
    """The offset the shim uses is the headers' offsetof(PyThreadState,
    c_profilefunc) (compiled against this Python's own headers)."""
    if minor not in PROFILEFUNC_OFFSET:
        return
    inc = subprocess.run([exe, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                         capture_output=True, text=True).stdout.strip()
    if not os.path.exists(os.path.join(inc, "Python.h")):
        tap(True, f"{label}: PyThreadState layout", skip=f"no Python.h under {inc}")
        return
    with tempfile.TemporaryDirectory(dir=TMP) as tmp:
        src = os.path.join(tmp, "off.c")
        with open(src, "w") as f:
            f.write("#include <Python.h>\n#include <stdio.h>\n#include <stddef.h>\n"
                    "int main(void) { printf(\"%zu\", offsetof(PyThreadState, c_profilefunc)); return 0; }\n")
        # the compiler and the probe are no subject of the test: not under a
        # sanitizer runtime the sanitizer tier preloads into every test
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        c = subprocess.run(["cc", "-I", inc, src, "-o", os.path.join(tmp, "off")],
                           capture_output=True, text=True, env=env)
        got = subprocess.run([os.path.join(tmp, "off")], capture_output=True, text=True,
                             env=env).stdout if c.returncode == 0 else c.stderr
        tap(got == str(PROFILEFUNC_OFFSET[minor]),
            f"{label}: offsetof(PyThreadState, c_profilefunc) is {got}, the shim reads "
            f"{PROFILEFUNC_OFFSET[minor]}")


def check_off(label, exe):
    with tempfile.TemporaryDirectory(dir=TMP) as tmp:
        p, dump, _ = run([exe, PROG, CUDART], {"RECOMPSHIM_PYSTACK": "0"}, tmp)
        st = stacks(dump)
        tap(p.returncode == 0 and st and all(v == [] for v in st.values())
            and "PYFRAME" not in dump and "key=pystack" not in dump,
            f"{label}: RECOMPSHIM_PYSTACK=0 records no frames")


def check_no_python():
    with tempfile.TemporaryDirectory(dir=TMP) as tmp:
        env = {"LD_LIBRARY_PATH": os.path.dirname(CUDART)}
        p, dump, traces = run([CPROG], env, tmp)
        tap(p.returncode == 0 and len(traces) == 1 and "ALLOC " in dump
            and not re.search(r"PYFRAME|PYSTACK|pystack", dump) and "Python" not in p.stderr,
            "a process without Python: traced, no Python records, no message")


def main():
    for label, minor, exe in pythons():
        if not exe:
            tap(True, f"python{label}", skip=f"python{label} is not installed (pyenv install {label})")
            continue
        check_main_run(label, minor, exe)
        check_profilers(label, minor, exe)
        check_offset(label, minor, exe)
        check_off(label, exe)
    check_no_python()
    print(f"1..{_n}")
    return 1 if _failed else 0


if __name__ == "__main__":
    sys.exit(main())
