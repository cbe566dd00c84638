#!/usr/bin/env python3
"""Caught OOMs with the real PyTorch on the fake GPU (issue 14, invariants 1,
2 and 5; the new-user report hnew2 finding 2), TAP.

Run by run-torch.sh: caught_oom_jobs.py under the shim, then recomp-analyze:

- probe (two OOMs caught, the job runs on): no fatal OOM, both requests in
  caught_ooms, the baseline under the device, no "ran out of memory", no
  X:PARAM_STATE from a request that failed, --fail-on oom passes;
- backoff (an OOM in step 0 caught, six steps complete, 65 GiB peak): the
  same, and the tensor peak is the 65 GiB of step 1;
- die (the OOM is not caught): the rank's fatal OOM, never OK:FITS, the gate
  fails.
For these plain PyTorch jobs no Megatron flag appears anywhere in the advice.
Environment: RECOMP_SHIM, RECOMP_ANALYZE.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from harness import preload  # noqa: E402

GIB = 1 << 30
_n = [0, 0]


def tap(ok, desc, detail=""):
    _n[0] += 1
    _n[1] += 0 if ok else 1
    print(f"{'ok' if ok else 'not ok'} {_n[0]} - {desc}", flush=True)
    if not ok:
        for line in str(detail).splitlines()[:30]:
            print("#   " + line)
    return ok


def job(tmp, mode):
    out = os.path.join(tmp, mode)
    os.mkdir(out)
    env = dict(os.environ, RECOMPSHIM_OUT=out, LD_PRELOAD=preload(os.environ["RECOMP_SHIM"]))
    env.pop("RECOMPSHIM_RUN_ID", None)
    p = subprocess.run([sys.executable, os.path.join(HERE, "caught_oom_jobs.py"), mode],
                       env=env, capture_output=True, text=True, timeout=600)
    runs = glob.glob(os.path.join(out, "*", "*.rstrace"))
    return p, runs


def analyze(*args):
    return subprocess.run([os.environ["RECOMP_ANALYZE"]] + list(args), capture_output=True,
                          text=True, timeout=300)


def megatron_flags(v):
    """--flags anywhere in the advice (recomp-analyze's own options aside)"""
    text = " ".join([v.get("change", ""), v.get("why", "")] +
                    [f.get("evidence", "") for f in v.get("findings", [])] +
                    [l.get("change", "") for f in v.get("findings", [])
                     for l in f.get("levers", []) or []])
    return sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text)) -
                  {"--budget", "--headroom", "--salvage", "--ranks", "--iteration"})


def survived(tmp, mode, ncaught, requests):
    p, runs = job(tmp, mode)
    if not tap(p.returncode == 0 and ("caught %d" % ncaught) in p.stdout and len(runs) == 1,
               f"{mode}: the job catches {ncaught} OOM(s), runs to its end, one trace",
               p.stdout + p.stderr[-1500:]):
        return
    a = analyze("--json", runs[0])
    doc = json.loads(a.stdout) if a.stdout.startswith("{") else {}
    r = (doc.get("ranks") or [{}])[0]
    tap(r.get("oom") is None and r.get("oom_count") == 0,
        f"{mode}: no fatal OOM on the rank", a.stdout[-1200:] + a.stderr[-600:])
    got = [c["requested_bytes"] for c in r.get("caught_ooms") or []]
    # the request reaches cudaMalloc rounded up to PyTorch's 2 MiB segments
    tap(len(got) == len(requests) and all(g >= q and g - q < (2 << 20)
                                          for g, q in zip(got, requests)),
        f"{mode}: caught_ooms lists the requests {[q >> 30 for q in requests]} GiB", got)
    v = doc.get("verdict") or {}
    tap("ran out of memory" not in v.get("why", "") and "OOM cut" not in v.get("why", ""),
        f"{mode}: the verdict does not say the job ran out of memory", v.get("why", "")[:800])
    tap(v.get("code") != "X:PARAM_STATE",
        f"{mode}: no X:PARAM_STATE from a request that failed", v.get("code"))
    for vr in v.get("ranks") or []:
        tap((vr.get("baseline_peak_bytes") or 0) <= 80 * GIB,
            f"{mode}: no failed request in the baseline peak", vr)
    tap(megatron_flags(v) == [], f"{mode}: no Megatron flag in the advice of a plain PyTorch job",
        megatron_flags(v))
    g = analyze("--fail-on", "oom", runs[0])
    tap(g.returncode == 0, f"{mode}: --fail-on oom passes", g.stderr[-600:])
    return r


def main():
    tmp = tempfile.mkdtemp(prefix="recomp-oomt.", dir=os.environ.get("TMPDIR"))
    try:
        run_all(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{_n[0]}")
    return 1 if _n[1] else 0


def run_all(tmp):
    survived(tmp, "probe", 2, [100 * GIB, 79 * GIB])
    r = survived(tmp, "backoff", 1, [128 * GIB])
    if r is not None:
        pk = r.get("peak") or {}
        tap(pk.get("level") == "tensor" and pk.get("bytes") == 65 * GIB and
            pk.get("iteration") == 1,
            "backoff: the tensor peak is step 1's 65 GiB", pk)
    p, runs = job(tmp, "die")
    if tap(p.returncode != 0 and "OutOfMemoryError" in p.stderr and len(runs) == 1,
           "die: the job dies of its OOM", p.stdout + p.stderr[-800:]):
        a = analyze("--json", runs[0])
        doc = json.loads(a.stdout) if a.stdout.startswith("{") else {}
        r = (doc.get("ranks") or [{}])[0]
        o = r.get("oom") or {}
        tap((o.get("requested_bytes") or 0) >= 100 * GIB and not r.get("caught_ooms"),
            "die: the 100 GiB request is the rank's fatal OOM", a.stdout[-1200:])
        v = doc.get("verdict") or {}
        tap(v.get("code") != "OK:FITS" and "out of memory" in v.get("why", ""),
            "die: the verdict explains the OOM, not OK:FITS", v.get("why", "")[:600])
        tap(megatron_flags(v) == [], "die: no Megatron flag in the advice", megatron_flags(v))
        tap(analyze("--fail-on", "oom", runs[0]).returncode == 3, "die: --fail-on oom fails")


if __name__ == "__main__":
    sys.exit(main())
