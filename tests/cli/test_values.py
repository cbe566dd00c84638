#!/usr/bin/env python3
"""Bad values and outputs (issue 14, invariants 2 and 12; the new-user
report's findings 4-6, 13-15, each with the tester's own input) (TAP).

- one size parser for every size flag and setting: --budget/--headroom
  refuse nan, inf, signs, exponents, overflow and garbage (exit 1, the flag,
  the value and why on stderr, nothing on stdout); --budget 0 is refused;
  a --budget above the device the trace recorded is accepted with the
  BUDGET:ABOVE_DEVICE finding, and what happened on the traced device (its
  OOM) is never turned into X:FRAGMENTATION by the larger budget;
- RECOMPSHIM_WINDOW bounds that overflow are refused with one stderr line
  and the whole run is recorded; a window covering the whole run is
  complete; time windows print in seconds;
- RECOMPSHIM_MAX_BYTES below the smallest trace is raised to it with one
  stderr line, and the file stays within the stated size;
- every JSON output (--json, --perfetto) is valid JSON for NVTX names with
  non-UTF-8 bytes, control characters and 4 KiB, as python's json reads it;
- a flag given twice: the last value wins (argparse), said on stderr for
  output files.

Environment (tests/cli/meson.build): RECOMP_SHIM, RECOMP_ANALYZE, P_VALUES,
MEGASIM_LIB_DIR, MEGASIM_PYDIR, SOURCE_ROOT.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Tap, preload  # noqa: E402  (tests/harness.py)

E = os.environ
SHIM, ANALYZE, PROG = E["RECOMP_SHIM"], E["RECOMP_ANALYZE"], E["P_VALUES"]

TAP = Tap(30)
ok = TAP.ok


def run(argv, env=None, **kw):
    return subprocess.run(argv, capture_output=True, env=env, **kw)


def shim_env(out, **extra):
    env = dict(E, LD_PRELOAD=preload(SHIM), RECOMPSHIM_OUT=out)
    for k in list(env):
        if k.startswith("RECOMPSHIM_") and k != "RECOMPSHIM_OUT":
            env.pop(k)
    for k in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        env.pop(k, None)
    env.update(extra)
    return env


def traces(out):
    return sorted(glob.glob(os.path.join(out, "*", "*.rstrace")))


def prog(tmp, name, *argv, **env):
    out = os.path.join(tmp, name)
    os.mkdir(out, 0o700)
    r = run([PROG] + list(argv), env=shim_env(out, **env))
    return r, traces(out)


def oom_job(tmp):
    """Rank 0 of the README's main job (llama3-8b, PP=2, 2 iterations): its
    OOM in iteration 1's forward on an 80 GiB device."""
    out = os.path.join(tmp, "oom")
    os.mkdir(out, 0o700)
    env = shim_env(out, MEGASIM_LIB_DIR=E["MEGASIM_LIB_DIR"], PYTHONPATH=E["MEGASIM_PYDIR"])
    run([sys.executable, "-m", "megasim", "--sim-preset", "llama3-8b",
         "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
         "--use-distributed-optimizer", "--global-batch-size", "8", "--train-iters", "2",
         "--profile", "--nvtx-ranges", "--profile-step-start", "0", "--sim-only-ranks", "0",
         "--sim-quiet"], env=env)
    return traces(out)


def analyze_json(*argv):
    r = run([ANALYZE, "--json"] + list(argv))
    try:
        return r, json.loads(r.stdout)
    except ValueError:
        return r, None


def check_sizes(trace):
    bad = ["nan", "inf", "-inf", "NaN", "99999999999TiB", "18446744073709551616", "-5GiB", "abc",
           "1e3GiB", "0x10", "", "5 G", "12Q"]
    for flag in ("--budget", "--headroom"):
        for v in bad + (["0", "0GiB"] if flag == "--budget" else []):
            r = run([ANALYZE, flag, v, trace])
            err = r.stderr.decode(errors="replace")
            ok(r.returncode == 1 and r.stdout == b"" and ("%s '%s'" % (flag, v)) in err and
               "is not a size: " in err,
               "%s %r refused: exit 1, the flag, the value and why on stderr" % (flag, v), err)
    r = run([ANALYZE, "--headroom", "0", "--no-advice", trace])
    ok(r.returncode == 0, "--headroom 0 is meaningful (keep nothing free): accepted", r.stderr)
    # --budget 79.5G: a fraction of a unit, exactly (the JSON's budget_bytes)
    _, j = analyze_json("--budget", "79.5G", "--headroom", "0", trace)
    caps = [x.get("capacity_bytes") for x in (j or {}).get("verdict", {}).get("ranks", [])]
    ok(j is not None and caps and all(c == 79 * 2**30 + 2**29 for c in caps),
       "--budget 79.5G is 85362475008 bytes, exactly", caps)


def check_options_not_ignored(trace, tmp):
    """hnew2 findings 6-8: a budget without a unit below 1 MiB (`--budget 80`
    meant GB and was read as 80 bytes: R:INSUFFICIENT against 0 B), --out
    without summarize (exit 0, nothing written), compare with options that
    shape one run's report (ignored) are refused, exit 1, saying why; a
    summary given twice, or a copy of it, is merged once with a note (it was
    refused as two processes of one rank)"""
    for v in ("80", "512K"):
        r = run([ANALYZE, "--budget", v, trace])
        err = r.stderr.decode(errors="replace")
        ok(r.returncode == 1 and "below 1 MiB" in err,
           "--budget %s (below 1 MiB) refused: a number without a unit is bytes" % v, err)
    z = os.path.join(tmp, "forgot-summarize.rssum")
    r = run([ANALYZE, "--out", z, trace])
    ok(r.returncode == 1 and not os.path.exists(z) and b"summarize" in r.stderr,
       "--out without summarize: refused (exit 1), not silently ignored", r.stderr)
    for extra in (["--iteration", "0"], ["--top", "3"], ["--ranks", "all"]):
        r = run([ANALYZE, "compare"] + extra + [trace, trace])
        ok(r.returncode == 1 and extra[0].encode() in r.stderr and r.stdout == b"",
           "compare %s: refused, naming the flag" % " ".join(extra), r.stderr)
    summ = os.path.join(tmp, "node0.rssum")
    r = run([ANALYZE, "summarize", trace, "--out", summ])
    if not ok(r.returncode == 0 and os.path.exists(summ), "summarize the main job's rank 0",
              r.stderr):
        return
    def merge_json(*argv):
        r = run([ANALYZE, "merge", "--json"] + list(argv))
        try:
            return r, json.loads(r.stdout)
        except ValueError:
            return r, None
    _, one = merge_json(summ)
    r2, two = merge_json(summ, summ)
    ok(one is not None and two == one and b"the same summary again" in r2.stderr,
       "merge of one summary given twice: merged once, with a note", r2.stderr)
    d = os.path.join(tmp, "sums")
    os.mkdir(d)
    shutil.copy(summ, os.path.join(d, "a.rssum"))
    shutil.copy(summ, os.path.join(d, "b.rssum"))
    r3, cp = merge_json(d)
    ok(cp is not None and cp == one and b"a copy of" in r3.stderr,
       "merge of a directory holding a summary and its copy: merged once, naming the copy",
       r3.stderr)


def check_two_launches(tmp):
    """hnew2 finding 4: two jobs started at once with one rendezvous id
    (TORCHELASTIC_RUN_ID) write their rank 0 into one run directory; the
    refusal ("two traces of rank 0") now lists each launch's files (the
    RECOMPSHIM_RUN_ID each trace recorded), so each job can be analysed"""
    out = os.path.join(tmp, "twolaunch")
    os.mkdir(out, 0o700)
    env = shim_env(out, TORCHELASTIC_RUN_ID="samejob", RANK="0", WORLD_SIZE="1")
    procs = [subprocess.Popen([PROG, "hold", "1500"], env=env) for _ in range(2)]
    rcs = [p.wait() for p in procs]
    ts = traces(out)
    if not ok(rcs == [0, 0] and len(ts) == 2, "two launches of one rendezvous id: two traces of "
              "rank 0 in one directory", (rcs, ts)):
        return
    r = run([ANALYZE, os.path.dirname(ts[0])])
    err = r.stderr.decode(errors="replace")
    launches = [l for l in err.splitlines() if l.startswith("  launch ")]
    ok(r.returncode == 2 and "two traces of rank 0" in err and len(launches) == 2 and
       all(sum(os.path.basename(t) in l for t in ts) == 1 for l in launches),
       "refused, and each launch's files listed on a line of their own", err)


def check_budget_above_device(trace):
    r0, base = analyze_json(trace)
    r1, same = analyze_json("--budget", "80GiB", trace)
    ok(base and same and base["verdict"]["code"] == same["verdict"]["code"],
       "--budget equal to the recorded 80 GiB gives the verdict of no --budget",
       (base or {}).get("verdict", {}).get("code"))
    base_codes = {f["code"] for f in base["verdict"]["findings"]} if base else set()
    for b in ("81GiB", "1000GiB", "8388608TiB"):
        r, j = analyze_json("--budget", b, trace)
        v = (j or {}).get("verdict", {})
        codes = {f["code"] for f in v.get("findings", [])}
        ok(r.returncode == 0 and "BUDGET:ABOVE_DEVICE" in codes,
           "--budget %s above the recorded 80 GiB: accepted with BUDGET:ABOVE_DEVICE" % b,
           r.stderr.decode() + str(codes))
        ok(not v.get("code", "").startswith("X:FRAGMENTATION") and
           ("X:FRAGMENTATION" in codes) == ("X:FRAGMENTATION" in base_codes),
           "--budget %s: the traced OOM is judged on the device it ran on, not made "
           "X:FRAGMENTATION by the larger budget" % b, "%s %s" % (v.get("code"), codes))
        ok(v.get("code") != "OK:FITS", "--budget %s: a job that died of an OOM is not OK:FITS" % b,
           v.get("code"))
    t = run([ANALYZE, "--budget", "1000GiB", trace]).stdout.decode()
    ok("finding BUDGET:ABOVE_DEVICE" in t and "above the 80.00 GiB" in t,
       "the text report states that --budget exceeds the recorded device", t[:3000])


def check_window(tmp):
    for name, w in (("wt", "time:0-20000000000"), ("we", "events:0-99999999999999999999"),
                    ("wn", "time:nan-1"), ("wf", "events:1.5-9")):
        r, ts = prog(tmp, name, "many", "5", RECOMPSHIM_WINDOW=w)
        err = [l for l in r.stderr.decode().splitlines() if l.startswith("recompshim")]
        ok(r.returncode == 0 and len(err) == 1 and w in err[0] and
           "whole run is recorded" in err[0],
           "RECOMPSHIM_WINDOW=%s: one stderr line, the job unharmed" % w, "\n".join(err))
        _, j = analyze_json("--no-advice", *ts)
        cov = j["ranks"][0]["coverage"] if j else {}
        ok(cov.get("status") == "complete" and cov.get("window") is None,
           "RECOMPSHIM_WINDOW=%s: the whole run recorded, no 0..0 window" % w, cov)
        ok(('RECOMPSHIM_WINDOW="%s" was set but not valid' % w) in cov.get("meaning", ""),
           "RECOMPSHIM_WINDOW=%s: the trace records the refusal, the analysis says it" % w, cov)
    # a window that covers the whole run (hnew finding 14)
    for name, w in (("wall", "time:0-1000000"), ("wev", "events:0-")):
        r, ts = prog(tmp, name, "many", "5", RECOMPSHIM_WINDOW=w)
        _, j = analyze_json("--no-advice", *ts)
        cov = j["ranks"][0]["coverage"] if j else {}
        ok(r.returncode == 0 and cov.get("complete") is True,
           "RECOMPSHIM_WINDOW=%s covers the whole run: complete" % w, cov)
        t = run([ANALYZE, "--no-advice"] + ts).stdout.decode()
        ok("COVERAGE: INCOMPLETE," not in t, "RECOMPSHIM_WINDOW=%s: not COVERAGE: INCOMPLETE" % w,
           t[:1500])
    r, ts = prog(tmp, "wlate", "many", "40", RECOMPSHIM_WINDOW="events:1000-")
    t = run([ANALYZE, "--no-advice"] + ts).stdout.decode()
    ok("COVERAGE: INCOMPLETE, windowed: events 1000.." in t,
       "a window that opens after the start stays incomplete", t[:1500])
    r, ts = prog(tmp, "wsec", "many", "5", RECOMPSHIM_WINDOW="time:0.5-1000000")
    _, j = analyze_json("--no-advice", *ts)
    cov = j["ranks"][0]["coverage"] if j else {}
    ok(cov.get("summary", "").startswith("windowed: time 0.500 s..1000000.000 s") and
       "500000000" not in cov.get("summary", "") + cov.get("meaning", ""),
       "a time window prints in seconds, with its unit", cov)


def check_max_bytes(tmp):
    for v in ("1", "100", "4K"):
        r, ts = prog(tmp, "mb" + v, "many", "200", RECOMPSHIM_MAX_BYTES=v)
        err = [l for l in r.stderr.decode().splitlines() if l.startswith("recompshim")]
        size = os.path.getsize(ts[0]) if ts else -1
        ok(r.returncode == 0 and len(err) == 1 and "516KiB" in err[0] and
           "RECOMPSHIM_MAX_BYTES=\"%s\"" % v in err[0],
           "RECOMPSHIM_MAX_BYTES=%s: raised to the smallest trace, said once" % v, "\n".join(err))
        ok(0 < size <= 528384, "RECOMPSHIM_MAX_BYTES=%s: the file stays within 516 KiB" % v, size)
    for v in ("nan", "99999999999TiB", "-1"):
        r, ts = prog(tmp, "mbx" + v.replace("-", "m"), "many", "2", RECOMPSHIM_MAX_BYTES=v)
        err = [l for l in r.stderr.decode().splitlines() if l.startswith("recompshim")]
        ok(r.returncode == 0 and len(err) == 1 and "not valid" in err[0],
           "RECOMPSHIM_MAX_BYTES=%s refused with one line (no limit)" % v, "\n".join(err))


def check_json_names(tmp):
    r, ts = prog(tmp, "names", "names")
    ok(r.returncode == 0 and ts, "p_values names runs under the shim", r.stderr)
    pf = os.path.join(tmp, "p.json")
    out = {}
    a = run([ANALYZE, "--json", "--perfetto", pf] + ts)
    ok(a.returncode == 0, "--json --perfetto on odd NVTX names: exit 0", a.stderr)
    for what, raw in (("--json", a.stdout), ("--perfetto", open(pf, "rb").read())):
        try:
            out[what] = json.loads(raw.decode("utf-8"))  # strict: no invalid UTF-8
            good = True
        except ValueError as e:
            good = e
        ok(good is True, "%s: valid UTF-8 JSON that python's json module reads" % what, good)
    names = {e.get("name") for e in out.get("--perfetto", {}).get("traceEvents", [])
             if e.get("cat") == "nvtx"}
    want = ["\ufffd\ufffd\ufffd( bad utf8 \ufffd",
            "tab\tnewline\nbell\a quote\" backslash\\ esc\x1b",
            "\ufffd\ufffd\ufffd surrogate, \ufffd\ufffd overlong, \ufffd\ufffd\ufffd\ufffd too high",
            "caf\u00e9 \u65e5\u672c \U0001F600", "A" * 4096]
    for w in want:
        ok(w in names, "--perfetto keeps the range %r (invalid bytes as U+FFFD)" % w[:40],
           sorted(x[:60] for x in names if x))
    blob = json.dumps(out.get("--json", {}))
    ok("\\ufffd\\ufffd\\ufffd( bad utf8 \\ufffd" in blob,
       "--json: invalid bytes as U+FFFD, as --perfetto writes them (one writer)", blob[:400])


def check_device_gate(trace):
    """hnew finding 12: the gate on the device-level peak is device=; reserved=
    stays as its older name, with the same decision."""
    said = {}
    for g in ("device", "reserved"):
        lo = run([ANALYZE, "--no-advice", "--fail-on", g + "=1GiB", trace])
        hi = run([ANALYZE, "--no-advice", "--fail-on", g + "=1000GiB", trace])
        said[g] = (lo.stderr.decode() + hi.stderr.decode()).replace(g + "=", "G=")
        ok(lo.returncode == 3 and (g + "=1GiB FAIL") in lo.stderr.decode() and
           "device-level peak 79.13 GiB > 1.00 GiB" in lo.stderr.decode() and
           hi.returncode == 3 and "but the run stopped at an OOM" in hi.stderr.decode(),
           "--fail-on %s=: the device-level peak (79.13 GiB) against 1 GiB fails; 1000 GiB "
           "cannot pass a run that stopped at an OOM" % g, said[g])
    ok(said["device"] == said["reserved"], "device= and reserved= decide alike",
       "\n".join(said.values()))


def check_repeated_flags(trace, tmp):
    a, b = os.path.join(tmp, "a.html"), os.path.join(tmp, "b.html")
    r = run([ANALYZE, "--no-advice", "--html", a, "--html", b, trace])
    err = r.stderr.decode()
    ok(r.returncode == 0 and not os.path.exists(a) and os.path.exists(b) and
       "--html given more than once" in err and b in err,
       "--html twice: the last wins (argparse), said on stderr", err)
    _, j1 = analyze_json("--budget", "70GiB", "--budget", "90GiB", trace)
    _, j2 = analyze_json("--budget", "90GiB", trace)
    ok(j1 and j2 and j1["verdict"] == j2["verdict"], "--budget twice: the last value wins")


def check_frames_replays(tmp):
    """hnew finding 11: megasim with full recompute and no --nvtx-ranges on this
    interpreter. Before the fix 0 of 240 replay units matched on 3.11 (megasim's
    autograd worker made a new thread state per backward, which PyTorch's does
    not: the shim's profile function was lost each time); now only the first
    backward's (before 3.12) go unmatched, and the note says why and what to
    record."""
    out = os.path.join(tmp, "frames")
    os.mkdir(out, 0o700)
    env = shim_env(out, MEGASIM_LIB_DIR=E["MEGASIM_LIB_DIR"], PYTHONPATH=E["MEGASIM_PYDIR"])
    iters = 3
    r = run([sys.executable, "-m", "megasim", "--sim-preset", "llama3-8b",
             "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
             "--use-distributed-optimizer", "--global-batch-size", "8", "--train-iters",
             str(iters), "--recompute-granularity", "full", "--recompute-method", "block",
             "--recompute-num-layers", "3", "--sim-quiet"], env=env)
    _, j = analyze_json(*traces(out))
    v = (j or {}).get("verdict", {})
    note = v.get("note") or ""
    import re
    m = re.search(r"only (\d+) of the (\d+) replay units", note)
    first_only = sys.version_info < (3, 12)
    if m:
        got, units = int(m.group(1)), int(m.group(2))
        # 4 microbatches per iteration: the first backward is 1 of iters * 4
        ok(first_only and units - got <= units // (iters * 4),
           "frames only, Python %d.%d: only the first backward's replays unmatched (%d of %d)"
           % (sys.version_info[:2] + (got, units)), note)
        ok("--profile --nvtx-ranges" in note and "3.12" in note,
           "the note says why the replays were not matched and what to record", note)
    else:
        ok(r.returncode == 0 and "were matched to the forward regions" in note,
           "frames only, Python %d.%d: every replay unit matched" % sys.version_info[:2],
           r.stderr.decode()[-1500:] + note)


def check_run_main_oom_line(tmp):
    """Docs list: tools/run-main.sh printed the job's OOM line cut at 200
    characters, mid-sentence; now whole (PyTorch's message ends with its
    documentation link)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(ANALYZE)))
    env = dict(E, BUILDDIR=root, TMPDIR=tmp)
    for k in ("LD_PRELOAD", "RECOMPSHIM_RUN_ID", "RECOMPSHIM_OUT"):
        env.pop(k, None)
    r = run([os.path.join(E["SOURCE_ROOT"], "tools", "run-main.sh"), "--sim-only-ranks", "0",
             "--train-iters", "2"], env=env)
    lines = [l for l in r.stdout.decode().splitlines() if "torch.OutOfMemoryError" in l]
    ok(lines and len(lines[0]) > 200 and
       lines[0].rstrip().endswith("#environment-variables)"),
       "run-main.sh prints the job's OOM line whole", "\n".join(lines) or r.stdout[-800:])


def main():
    with tempfile.TemporaryDirectory(prefix="values-", dir=E.get("TMPDIR")) as tmp:
        os.chmod(tmp, 0o700)
        ts = oom_job(tmp)
        ok(len(ts) == 1, "megasim main job, rank 0 only: one trace", ts)
        if ts:
            check_sizes(ts[0])
            check_budget_above_device(ts[0])
            check_options_not_ignored(ts[0], tmp)
            check_repeated_flags(ts[0], tmp)
            check_device_gate(ts[0])
        check_window(tmp)
        check_two_launches(tmp)
        check_max_bytes(tmp)
        check_json_names(tmp)
        check_frames_replays(tmp)
        check_run_main_oom_line(tmp)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
