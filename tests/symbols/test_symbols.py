#!/usr/bin/env python3
"""OOM stacks named at analysis time (analyzer/symbolize.c, libdw), on a
program with known frames (TAP): tests/integration/progs/p_oom.c fails a
cudaMalloc through oom_level1 -> oom_level2 -> oom_level3 under the real shim;
recomp-analyze must name those frames with the source lines of their calls:

- as built (DWARF in the file);
- stripped, with a separate debug file found through .gnu_debuglink;
- stripped without a debug file: module+offset and that reason;
- recomp-dump --symbols names the same frames;
- the file replaced after the run (another build id): module+offset and that
  reason, never the new file's names.

Environment (tests/symbols/meson.build): RECOMP_SHIM, RECOMP_ANALYZE, RECOMP_DUMP, ITP_OOM,
P_OOM_SOURCE, DOUBLES_DIR, HAVE_LIBDW.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Tap, preload  # noqa: E402  (tests/harness.py)

E = os.environ

TAP = Tap(30)
ok = TAP.ok


def run(argv, env=None):
    return subprocess.run(argv, capture_output=True, text=True, env=env)


def call_lines():
    """The source line of each known frame's call, from p_oom.c itself."""
    src = open(E["P_OOM_SOURCE"], encoding="utf-8").read().splitlines()

    def line_of(func, needle):
        start = next(i for i, l in enumerate(src) if re.match(r"^%s\(" % func, l))
        return next(i + 1 for i in range(start, len(src)) if needle in src[i])
    return [("oom_level3", line_of("oom_level3", "cudaMalloc(&p, bytes)")),
            ("oom_level2", line_of("oom_level2", "oom_level3(bytes)")),
            ("oom_level1", line_of("oom_level1", "oom_level2(bytes)")),
            ("main", line_of("main", "oom_level1(fail)"))]


def record(prog, tmp, tag):
    """Run prog under the shim into its own run directory; the OOM's stack as
    recomp-analyze --json names it (innermost first), or None."""
    out = os.path.join(tmp, "traces-" + tag)
    os.mkdir(out, 0o700)
    env = dict(E, LD_PRELOAD=preload(E["RECOMP_SHIM"]), RECOMPSHIM_OUT=out,
               LD_LIBRARY_PATH=E["DOUBLES_DIR"])
    env.pop("RECOMPSHIM_RUN_ID", None)
    # "fatal": the program exits at the OOM (one it ran on from is a caught
    # OOM, which keeps no stack: docs/analysis.md, OOM)
    r = run([prog, "malloc", "1073741824", "107374182400", "fatal"], env=env)
    if "oom_rc=2" not in r.stdout:
        ok(False, "%s: the program runs and fails its allocation" % tag, r.stdout + r.stderr)
        return None, None
    return out, stack_of(out)


def stack_of(out):
    a = run([E["RECOMP_ANALYZE"], "--json", "--no-advice", out])
    try:
        doc = json.loads(a.stdout)
        return doc["ranks"][0]["oom"]["stack"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ["recomp-analyze: rc %d %s" % (a.returncode, a.stderr[-500:])]


def named(stack, module, want):
    """The first len(want) frames are module's, named with function and line."""
    got = stack[:len(want)]
    exp = ["%s+0x" % module, ] * len(want)
    good = len(got) == len(want) and all(
        g.startswith(e) and re.search(r" in %s\+0x[0-9a-f]+ at p_oom\.c:%d$" % (f, ln), g)
        for g, e, (f, ln) in zip(got, exp, want))
    return good


def main():
    if E.get("HAVE_LIBDW") != "1":
        print("# SKIP recomp-analyze built without libdw (install libdw-dev): symbol tests skipped")
        print("1..0")
        return 0
    want = call_lines()
    tmp = tempfile.mkdtemp(prefix="recomp-sym.")
    try:
        _, stack = record(E["ITP_OOM"], tmp, "built")
        ok(stack and named(stack, "itp_oom", want),
           "as built: oom_level3, oom_level2, oom_level1, main at their call lines %s"
           % [ln for _, ln in want], stack)
        runs = [os.path.join(tmp, "traces-built", x) for x in os.listdir(os.path.join(tmp, "traces-built"))]
        dump = run([E["RECOMP_DUMP"], "--symbols", "--kind", "OOM"] + runs)
        frames = re.findall(r"^  frame #\d+ 0x[0-9a-f]+ \[(.*)\]$", dump.stdout, re.M)
        plain = run([E["RECOMP_DUMP"], "--kind", "OOM"] + runs)
        mine = [f for f in frames if f.startswith("itp_oom")]
        ok(dump.returncode == 0 and len(mine) >= 4 and mine[:4] == stack[:4] and
           " in " not in plain.stdout,
           "recomp-dump --symbols names the same frames; without it, module+offset only",
           dump.stdout[-1500:])

        d = os.path.join(tmp, "bin")
        os.mkdir(d)
        prog, dbg = os.path.join(d, "itp_oom"), os.path.join(d, "itp_oom.debug")
        shutil.copy(E["ITP_OOM"], prog)
        steps = [["objcopy", "--only-keep-debug", prog, dbg], ["strip", "--strip-all", prog],
                 ["objcopy", "--add-gnu-debuglink=" + dbg, prog]]
        res = [run(s) for s in steps]
        nm = run(["nm", prog])
        ok(all(r.returncode == 0 for r in res) and "oom_level3" not in nm.stdout,
           "a stripped copy (no oom_level3 symbol) and its separate debug file",
           [r.stderr for r in res])
        out, stack = record(prog, tmp, "debuglink")
        ok(stack and named(stack, "itp_oom", want),
           "stripped + .gnu_debuglink debug file: the same names and lines", stack)

        os.unlink(dbg)
        stack = stack_of(out)
        reason = "(no symbol: the file is stripped and no separate debug file was found)"
        ok(stack and all(re.fullmatch(r"itp_oom\+0x[0-9a-f]+ " + re.escape(reason), f)
                         for f in stack[:4]),
           "stripped, debug file gone: module+offset and the reason", stack)

        shutil.copy(E["ITP_OOM"], dbg)           # put the debug info back ...
        shutil.copy(os.path.join(E["DOUBLES_DIR"], "libcuda.so.1"), prog)  # ... but replace the file
        stack = stack_of(out)
        ok(stack and all(re.fullmatch(r"itp_oom\+0x[0-9a-f]+ \(no symbol: the build id of .*itp_oom "
                                      r"differs from the recorded one \(changed since the run\)\)", f)
                         for f in stack[:4]),
           "the file replaced after the run: module+offset and the reason, no wrong names", stack)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
