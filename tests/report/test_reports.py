#!/usr/bin/env python3
"""Nightly-run reports of recomp-analyze on megasim jobs under the real shim
(TAP): the matched comparison (`compare`), every --fail-on gate's exit code
(pass and fail, usage errors, bad input), the one-line CI summary, --markdown,
and the grouped terminal report of a 64-rank job (under 60 lines; --ranks all
lists every rank; a warning common to all ranks printed once).

Expected values are not hard-coded where the analyzer computes them: the
comparison's peaks and changes are checked against each run's own --json
analysis, and the relative gates' thresholds are placed just below and just
above the measured change.

Usage: test_reports.py (RECOMP_ANALYZE, RECOMPSHIM_LIB, MEGASIM_LIB_DIR,
MEGASIM_PYDIR set by meson).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import preload  # noqa: E402  (tests/harness.py)

ANALYZE = os.environ["RECOMP_ANALYZE"]
SHIM = os.environ["RECOMPSHIM_LIB"]
LIBDIR = os.environ["MEGASIM_LIB_DIR"]
PYDIR = os.environ["MEGASIM_PYDIR"]

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, "" if ok else detail))


# the README main job (docs/megasim.md): stage 0 OOMs in iteration 1's forward
MAIN = ["--sim-preset", "llama3-8b", "--pipeline-model-parallel-size", "2",
        "--sim-world-size", "4", "--use-distributed-optimizer", "--global-batch-size", "8",
        "--train-iters", "3", "--profile", "--nvtx-ranges", "--profile-step-start", "0",
        "--profile-step-end", "3"]
FULL2 = ["--recompute-granularity", "full", "--recompute-method", "block",
         "--recompute-num-layers", "2"]


def megasim(tmp, name, args):
    """Run megasim under the shim; return its run directory."""
    out = os.path.join(tmp, name)
    os.makedirs(out, mode=0o700)
    env = dict(os.environ, MEGASIM_LIB_DIR=LIBDIR, PYTHONPATH=PYDIR, LD_PRELOAD=preload(SHIM),
               RECOMPSHIM_OUT=out)
    with open(os.path.join(out, "job.stderr"), "w") as err:
        subprocess.run([sys.executable, "-m", "megasim"] + args + ["--sim-quiet"], env=env,
                       stdout=subprocess.DEVNULL, stderr=err, timeout=600)
    runs = [d for d in glob.glob(os.path.join(out, "*")) if os.path.isdir(d)]
    assert len(runs) == 1, "megasim %s: %r" % (name, runs)
    return runs[0]


def analyze(*args):
    p = subprocess.run([ANALYZE] + list(args), capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def max_peaks(run):
    """(tensor, device) max peak over ranks from the single-run JSON document."""
    rc, out, err = analyze("--json", "--no-advice", run)
    assert rc == 0, err
    doc = json.loads(out)
    t = max(r["peak"]["bytes"] for r in doc["ranks"] if r["level"] == "tensor")
    d = max((r["device_peak"] or r["peak"])["bytes"] for r in doc["ranks"])
    return t, d


def gate_lines(err):
    return [l for l in err.splitlines() if l.startswith("recomp-analyze: gates: ")]


def gate(name, args, want_rc, want_word):
    rc, out, err = analyze(*args)
    lines = gate_lines(err)
    check("%s: exit %d" % (name, want_rc), rc == want_rc, "got %d: %s" % (rc, err[-800:]))
    if want_word:
        check("%s: one summary line, %s" % (name, want_word),
              len(lines) == 1 and lines[0].startswith("recomp-analyze: gates: " + want_word),
              repr(lines))
    return rc, out, err


def comparison_tests(a, b, c, d, tmp):
    # a: no recompute (OOM), b: full[block,2] (fits), c: selective[mlp] with a
    # shorter sequence (unmatched), d: selective[core_attn] (OOMs: ineffective)
    rc, out, err = analyze("compare", a, b, c, d)
    check("compare: exit 0 without gates", rc == 0, err)
    check("compare: control's setting", "recompute: none; control" in out, out)
    check("compare: matched candidate", "recompute: full[block,2]; matched" in out, out)
    check("compare: unmatched candidate names the setting",
          "recompute: selective[mlp]; UNMATCHED: differs in seq_length 8192->4096" in out, out)
    check("compare: control outcome", "outcome: OOM in iteration 1, phase forward, rank 0" in out,
          out)
    check("compare: candidate that fits", "outcome: completed 3 iteration(s)\n" in out, out)
    check("compare: OOM-cut changes qualified", "[OOM-cut]" in out, out)
    rc, js, err = analyze("compare", "--json", a, b, c, d)
    doc = json.loads(js)["comparison"]
    check("compare --json: 4 runs", len(doc) == 4, js)
    for i, run in enumerate((a, b, c, d)):
        t, dv = max_peaks(run)
        check("compare --json run %d: tensor peak = its own analysis" % i,
              doc[i]["tensor_peak_bytes"] == t, "%r vs %r" % (doc[i]["tensor_peak_bytes"], t))
        check("compare --json run %d: device peak = its own analysis" % i,
              doc[i]["device_peak_bytes"] == dv, "%r vs %r" % (doc[i]["device_peak_bytes"], dv))
        # a candidate with an OOM never passes, whatever its peak
        check("compare --json run %d: passes iff no OOM" % i,
              doc[i]["passes"] == (not doc[i]["oom"]), repr(doc[i]))
    check("compare: core_attn candidate OOMs and is marked not passing",
          doc[3]["oom"] and out.count("NOT PASSING") == 1, out)
    check("compare --json: matched flags", [x["matched"] for x in doc[1:]] == [True, False, True],
          repr(doc))
    check("compare: steady step time where the run completed",
          doc[1]["step_s"] and doc[1]["step_s"] > 0 and doc[0]["step_s"] is None, repr(doc))
    md = os.path.join(tmp, "cmp.md")
    rc, out, err = analyze("compare", "--markdown", md, a, b, c)
    text = open(md).read() if os.path.exists(md) else ""
    check("compare --markdown: table with 3 runs",
          text.count("\n| ") >= 3 + 4 and "| run | recompute | matched |" in text, text)


def relative_gates(ctl, cand, cut):
    """Peak gates on runs that completed (their peaks are whole): thresholds
    just below and just above the measured change. cut: a run stopped at an
    OOM, whose peak is only a lower bound."""
    tb, db = max_peaks(ctl)
    ta, da = max_peaks(cand)
    for key, base, top in (("peak", tb, ta), ("reserved", db, da)):
        pct = 100.0 * (top - base) / base
        below, above = "%.2f" % (pct - 0.05), "%.2f" % (pct + 0.05)
        gate("%s=+%s%% (just below the change)" % (key, below),
             ["compare", "--no-advice", "--fail-on", "%s=+%s%%" % (key, below), ctl, cand], 3,
             "FAIL")
        gate("%s=+%s%% (just above the change)" % (key, above),
             ["compare", "--no-advice", "--fail-on", "%s=+%s%%" % (key, above), ctl, cand], 0,
             "PASS")
        diff = top - base
        gate("%s=+SIZE below the change" % key,
             ["compare", "--no-advice", "--fail-on", "%s=+%d" % (key, diff - 1), ctl, cand], 3,
             "FAIL")
        gate("%s=+SIZE at the change" % key,
             ["compare", "--no-advice", "--fail-on", "%s=+%d" % (key, diff), ctl, cand], 0, "PASS")
        gate("%s=SIZE below the peak" % key,
             ["--no-advice", "--fail-on", "%s=%d" % (key, top - 1), cand], 3, "FAIL")
        gate("%s=SIZE at the peak" % key,
             ["--no-advice", "--fail-on", "%s=%d" % (key, top), cand], 0, "PASS")
        # a candidate cut by an OOM: under the threshold is not known
        rc, out, err = gate("%s=+100%% on an OOM-cut candidate" % key,
                            ["compare", "--no-advice", "--fail-on", "%s=+100%%" % key, ctl, cut],
                            3, "FAIL")
        check("%s gate on an OOM-cut candidate says it cannot decide" % key,
              "cannot decide" in err, err)


def gate_tests(a, b, c, ok_run):
    # a: no recompute (OOM), b: full[block,2] (fits), c: selective[mlp] at 4096 tokens (fits)
    gate("oom on the OOM run", ["--no-advice", "--fail-on", "oom", a], 3, "FAIL")
    gate("oom on the run that fits", ["--no-advice", "--fail-on", "oom", b], 0, "PASS")
    gate("compare oom: candidate OOMs", ["compare", "--no-advice", "--fail-on", "oom", b, a], 3,
         "FAIL")
    gate("compare oom: candidate fits", ["compare", "--no-advice", "--fail-on", "oom", a, b], 0,
         "PASS")
    gate("verdict!=OK:FITS on the OOM run", ["--fail-on", "verdict!=OK:FITS", a], 3, "FAIL")
    gate("verdict!=OK:FITS on a run that fits", ["--fail-on", "verdict!=OK:FITS", ok_run], 0,
         "PASS")
    gate("verdict=R:* on the OOM run", ["--fail-on", "verdict=R:*", a], 3, "FAIL")
    gate("verdict=X:* on the OOM run", ["--fail-on", "verdict=X:*", a], 0, "PASS")
    # the run's own verdict code (a bracketed code with a comma) as the gate
    _, js, _ = analyze("--json", a)
    code = json.loads(js)["verdict"]["code"]
    check("the OOM run's verdict is a code with a comma", "," in code, code)
    gate("verdict code with a comma", ["--fail-on", "verdict!=%s,oom" % code, a], 3, "FAIL")
    rc, out, err = analyze("--fail-on", "verdict!=%s" % code, a)
    check("verdict=CODE[a,b] parsed as one gate", rc == 0 and "1 of" not in err
          and gate_lines(err) and "(0 of 1 failed)" in gate_lines(err)[0], err)
    gate("unmatched: matched pair", ["compare", "--no-advice", "--fail-on", "unmatched", a, b], 0,
         "PASS")
    gate("unmatched: other sequence length",
         ["compare", "--no-advice", "--fail-on", "unmatched", a, c], 3, "FAIL")
    gate("several gates, one fails",
         ["compare", "--fail-on", "peak=+3%,reserved=+5%,oom,unmatched", a, b, c], 3, "FAIL")
    relative_gates(c, b, a)
    # usage errors: exit 1, no gate line; bad input: exit 2
    gate("unknown gate", ["--fail-on", "peaks=3", a], 1, None)
    gate("relative gate without compare", ["--fail-on", "peak=+3%", a], 1, None)
    gate("percentage without a control", ["--fail-on", "peak=3%", a], 1, None)
    gate("verdict gate with --no-advice", ["--no-advice", "--fail-on", "verdict=X:*", a], 1, None)
    gate("compare needs a candidate", ["compare", a], 1, None)
    gate("compare: a run that does not exist", ["compare", a, a + "-missing"], 2, None)
    rc, out, err = analyze("--no-advice", a)
    check("no gates: exit 0 and no summary line", rc == 0 and not gate_lines(err), err)


def grouped_tests(big, tmp):
    rc, out, err = analyze(big)
    lines = out.splitlines()
    check("64 ranks: exit 0", rc == 0, err)
    check("64 ranks: grouped report under 60 lines", len(lines) < 60, "%d lines" % len(lines))
    check("64 ranks: verdict first", lines[1].startswith("verdict: "), out)
    stage_lines = [l for l in lines if l.startswith("  stage ")]
    want = ["  stage %d: ranks %d-%d, " % (s, 8 * s, 8 * s + 7) for s in range(8)]
    check("64 ranks: one line per stage, ranks grouped",
          [l[:len(w)] for l, w in zip(stage_lines, want)] == want and len(stage_lines) == 8,
          "\n".join(stage_lines))
    rc, js, err = analyze("--json", "--no-advice", big)
    doc = json.loads(js)
    hot = doc["job"]["hot_rank"]
    check("64 ranks: hot rank in detail", "hot rank %d (" % hot in out, out)
    check("64 ranks: legend", "legend: verdict R:" in out, out)
    rc, full, err = analyze("--ranks", "all", big)
    check("--ranks all: every rank listed",
          all(("rank %d  (" % r) in full for r in range(64)), full[:2000])
    # a note every rank carries (a partial job) is printed once
    files = sorted(glob.glob(os.path.join(big, "rank*.rstrace")))[:8]
    rc, out, err = analyze("--no-advice", *files)
    notes = [l for l in out.splitlines() if "partial job" in l]
    check("a note common to 8 ranks printed once", len(notes) == 1 and
          "(on every analysed rank)" in notes[0],
          "\n".join(notes))
    md = os.path.join(tmp, "big.md")
    rc, out, err = analyze("--markdown", md, big)
    text = open(md).read() if os.path.exists(md) else ""
    check("--markdown: verdict and one row per stage",
          "**verdict: `" in text and sum(1 for l in text.splitlines()
                                         if l.startswith("| ") and "GiB" in l) == 8, text)


def perfetto_tests(run, tmp, cap):
    """--perfetto: Chrome trace JSON; per rank, each level's counter reaches
    the analyzer's peak exactly, never more points than the cap allows; the
    OOM, phases, iterations and NVTX slices are there."""
    out = os.path.join(tmp, "trace.json")
    rc, _, err = analyze("--no-advice", "--perfetto", out, run)
    check("perfetto: exit 0", rc == 0, err)
    trace = json.load(open(out))
    ev = trace["traceEvents"]
    doc = json.loads(analyze("--json", "--no-advice", run)[1])
    for r in doc["ranks"]:
        pid = r["rank"]
        for level, peak in (("tensor", r["peak"]), ("device", r["device_peak"])):
            vals = [e["args"]["bytes"] for e in ev if e["ph"] == "C" and e["pid"] == pid
                    and e["name"].startswith(level)]
            check("perfetto rank %d: %s counter max = analyzer's peak" % (pid, level),
                  vals and max(vals) == peak["bytes"],
                  "%r vs %r" % (max(vals) if vals else None, peak["bytes"]))
            check("perfetto rank %d: %s counter within the cap" % (pid, level),
                  0 < len(vals) <= 2 * cap, "%d points" % len(vals))
        mine = [e for e in ev if e["pid"] == pid]
        check("perfetto rank %d: OOM instant iff the rank OOMed" % pid,
              sum(1 for e in mine if e["ph"] == "i" and e["name"] == "OOM") == (1 if r["oom"] else 0),
              repr(r["oom"]))
        names = {e["name"] for e in mine if e["ph"] == "X"}
        check("perfetto rank %d: iterations, phases and NVTX slices" % pid,
              "iteration 0" in names and "forward" in names
              and any(n.startswith("megatron.core") for n in names), sorted(names)[:20])
        for level in ("tensor", "device"):
            tss = [float(e["ts"]) for e in mine if e["ph"] == "C" and e["name"].startswith(level)]
            check("perfetto rank %d: %s counter samples in time order" % (pid, level),
                  all(x <= y for x, y in zip(tss, tss[1:])), "")


def progress_tests(run):
    """Progress on stderr only when it is a terminal."""
    import pty
    master, slave = pty.openpty()
    # per-rank progress when the ranks are analysed in turn (--jobs 1); on
    # worker threads one line for the set
    p = subprocess.run([ANALYZE, "--no-advice", "--jobs", "1", run], stdout=subprocess.DEVNULL,
                       stderr=slave, timeout=300)
    os.close(slave)
    got = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    check("progress on a terminal: each rank announced",
          p.returncode == 0 and all(b"rank %d/4 (" % i in got for i in range(1, 5)), repr(got[:300]))
    check("progress on a terminal: the line is cleared at the end", got.endswith(b"\r\x1b[K"),
          repr(got[-40:]))
    rc, out, err = analyze("--no-advice", run)
    check("no progress when stderr is not a terminal", rc == 0 and "\r" not in err
          and "rank 1/4" not in err, repr(err[:300]))


def iteration_tests(run):
    """--iteration K in the text report prints iteration K's own live set (the
    new-user report hnew2 finding 3: iteration 0's backward peak was listed
    with the overall peak's table, 14.96 GiB of optimizer state that did not
    exist yet): its rows are --json's iteration_peak contributors."""
    for k in (0, 1):
        rc, out, err = analyze("--iteration", str(k), run)
        rcj, js, _ = analyze("--json", "--iteration", str(k), run)
        try:
            ip = json.loads(js)["ranks"][0]["iteration_peak"]["tensor"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            check("--iteration %d: JSON iteration_peak" % k, False, repr(e))
            continue
        head = "  live at iteration %d's tensor-level peak:\n" % k
        if not check("--iteration %d: the text report has iteration %d's own live table" % (k, k),
                     head in out, out[-3000:]):
            continue
        rows = []
        for line in out.split(head, 1)[1].splitlines()[1:]:
            f = line.split()
            if not line.startswith("    ") or len(f) < 6 or f[1] not in ("B", "KiB", "MiB",
                                                                        "GiB", "TiB"):
                break
            rows.append((f[2], f[3], None if f[4] == "-" else int(f[4]), int(f[5])))
        want = [(c["phase"], c["boundary"], c["layer"], c["count"])
                for c in ip["contributors"]][:len(rows)]
        check("--iteration %d: its table's rows (phase, boundary, layer, count) are --json's "
              "iteration_peak contributors" % k, rows and rows == want,
              "text %r\njson %r" % (rows[:8], want[:8]))
        if ip.get("phase") in ("forward", "backward") and k == 0:
            check("--iteration 0: no optimizer state listed at a peak before the first "
                  "optimizer step", all(not r[0].startswith("optimizer") for r in rows), rows)


def main():
    tmp = tempfile.mkdtemp(prefix="reports.", dir=os.environ.get("TMPDIR"))
    try:
        a = megasim(tmp, "a", MAIN)
        b = megasim(tmp, "b", MAIN + FULL2)
        c = megasim(tmp, "c", MAIN + ["--recompute-granularity", "selective",
                                      "--recompute-modules", "mlp", "--seq-length", "4096"])
        d = megasim(tmp, "d", MAIN + ["--recompute-granularity", "selective",
                                      "--recompute-modules", "core_attn"])
        big = megasim(tmp, "big", ["--sim-preset", "gpt3-175b", "--sim-world-size", "64",
                                   "--global-batch-size", "8", "--train-iters", "2",
                                   "--profile", "--nvtx-ranges"])
        comparison_tests(a, b, c, d, tmp)
        perfetto_tests(a, tmp, 2048)
        progress_tests(a)
        iteration_tests(a)
        gate_tests(a, b, c, big)
        grouped_tests(big, tmp)
    except Exception as e:  # a crash is a failure, not a silent pass
        check("no exception", False, repr(e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % len(results))
    for i, (ok, name, detail) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
        if detail:
            for l in str(detail).splitlines()[:40]:
                print("# " + l)
    return 0 if all(r[0] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
