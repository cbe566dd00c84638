#!/usr/bin/env python3
"""An OOM the job caught and ran on from is not the job's fatal OOM (issue 14,
invariants 1 and 2; the new-user report hnew2 finding 2), TAP.

tests/integration/progs/p_oom.c on the mock cudart under the shim: a 1 GiB
cudaMalloc, then one of 100 GiB that fails on the 80 GiB device, then

- caught: a 4 KiB cudaMalloc succeeds and the program exits 0: the OOM is
  listed as caught (text `OOM caught:`, JSON `caught_ooms[]`), not as the
  rank's OOM; its request is in no baseline; `--fail-on oom` passes; a
  summary of the run reads back the same list;
- fatal: the program exits 1 at the OOM: the OOM is the rank's, the gate
  fails (exit 3), the verdict explains it and is never OK:FITS;
- kill: the 4 KiB allocation succeeds, then SIGKILL: the trace is never
  closed, nothing shows the process survived, the OOM stays fatal.

Environment (tests/oomcaught/meson.build): RECOMP_SHIM, RECOMP_ANALYZE,
ITP_OOM, DOUBLES_DIR.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import preload  # noqa: E402  (tests/harness.py)

E = os.environ
GIB = 1 << 30
REQ = 100 * GIB
n = 0
failed = 0


def ok(cond, name, detail=""):
    global n, failed
    n += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n, name))
    if not cond:
        failed += 1
        for line in str(detail).splitlines()[:30]:
            print("#   " + line)
    sys.stdout.flush()
    return cond


def run(argv, env=None):
    return subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)


def record(tmp, mode):
    """p_oom under the shim into its own directory; (directory, program rc)"""
    out = os.path.join(tmp, mode)
    os.mkdir(out, 0o700)
    env = dict(E, LD_PRELOAD=preload(E["RECOMP_SHIM"]), RECOMPSHIM_OUT=out,
               LD_LIBRARY_PATH=E["DOUBLES_DIR"])
    env.pop("RECOMPSHIM_RUN_ID", None)
    argv = [E["ITP_OOM"], "malloc", str(GIB), str(REQ)] + ([mode] if mode != "caught" else [])
    r = run(argv, env=env)
    ok("oom_rc=2" in r.stdout, "%s: the program's 100 GiB cudaMalloc fails" % mode,
       r.stdout + r.stderr)
    return out, r.returncode


def analyze(*args):
    a = run([E["RECOMP_ANALYZE"]] + list(args))
    return a


def doc_of(path):
    a = analyze("--json", path)
    try:
        return json.loads(a.stdout), a
    except ValueError:
        return {}, a


def caught(tmp):
    out, rc = record(tmp, "caught")
    ok(rc == 0, "caught: the program ran on after the OOM and exited 0", rc)
    doc, a = doc_of(out)
    r = (doc.get("ranks") or [{}])[0]
    ok(r.get("oom") is None and r.get("oom_count") == 0,
       "caught: the rank has no fatal OOM (oom null, oom_count 0)", a.stdout[-1500:] + a.stderr)
    c = r.get("caught_ooms") or []
    ok(len(c) == 1 and c[0]["requested_bytes"] == REQ and c[0]["iteration"] is None
       and c[0]["phase"], "caught: caught_ooms lists the 100 GiB request, before iteration 0",
       c)
    v = doc.get("verdict") or {}
    why = v.get("why", "")
    ok("out of memory" not in why and "OOM cut" not in why,
       "caught: the verdict does not say the job ran out of memory", why)
    for vr in v.get("ranks") or []:
        ok((vr.get("baseline_peak_bytes") or 0) < REQ,
           "caught: the failed request is not in rank %d's baseline peak" % vr["rank"], vr)
    for b in v.get("binds") or []:
        ok(b.get("oom") is None, "caught: BINDS names no OOM", b)
    g = analyze("--fail-on", "oom", out)
    ok(g.returncode == 0, "caught: --fail-on oom passes (a caught OOM is not fatal)",
       g.stderr[-800:])
    t = analyze(out)
    ok("OOM caught: 100.00 GiB" in t.stdout and "the job caught it and ran on" in t.stdout
       and "\n  OOM: " not in t.stdout,
       "caught: the text report lists it as caught, not as the OOM", t.stdout[-2000:])
    s = os.path.join(tmp, "caught.rssum")
    w = analyze("summarize", "--out", s, out)
    m = analyze("merge", "--json", s)
    try:
        sd = json.loads(m.stdout)
    except ValueError:
        sd = {}
    sa = m
    sr = (sd.get("ranks") or [{}])[0]
    ok(w.returncode == 0 and sr.get("caught_ooms") == c and sr.get("oom") is None,
       "caught: a summary of the run reads back the same caught_ooms (format 6.1)",
       w.stderr[-500:] + sa.stderr[-500:] + str(sr.get("caught_ooms")))


def fatal(tmp, mode):
    out, rc = record(tmp, mode)
    ok(rc != 0, "%s: the program did not exit 0" % mode, rc)
    doc, a = doc_of(out)
    r = (doc.get("ranks") or [{}])[0]
    o = r.get("oom") or {}
    ok(o.get("requested_bytes") == REQ and r.get("oom_count", 0) >= 1,
       "%s: the 100 GiB request is the rank's fatal OOM" % mode, a.stdout[-1500:] + a.stderr)
    ok(not r.get("caught_ooms"), "%s: nothing listed as caught" % mode, r.get("caught_ooms"))
    v = doc.get("verdict") or {}
    ok(v.get("code") != "OK:FITS" and "out of memory" in v.get("why", ""),
       "%s: the verdict explains the OOM and is not OK:FITS" % mode,
       "%s: %s" % (v.get("code"), v.get("why", "")[:600]))
    g = analyze("--fail-on", "oom", out)
    ok(g.returncode == 3, "%s: --fail-on oom fails (exit 3)" % mode, g.returncode)
    t = analyze(out)
    ok("OOM caught" not in t.stdout and "before iteration 0" in t.stdout
       and "iteration -1" not in t.stdout,
       "%s: the text report names the OOM before iteration 0 (never 'iteration -1')" % mode,
       t.stdout[-2000:])


def main():
    tmp = tempfile.mkdtemp(prefix="recomp-oomc.", dir=E.get("TMPDIR"))
    try:
        caught(tmp)
        fatal(tmp, "fatal")
        fatal(tmp, "kill")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
