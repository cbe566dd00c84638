#!/usr/bin/env python3
"""Command-line conventions of the tools and the shim's one-warning-per-job
rule (TAP).

- every tool: --version names the project version and the trace-format
  version, --help goes to stdout with exit 0, usage errors go to stderr with
  exit 1, and every option of --help appears in the README;
- recomp-dump: several files or a run directory, --kind, --thread,
  --from/--to, --range and --jsonl, checked against the unfiltered text of a
  2-rank megasim run recorded under the real shim;
- the shim: a bad setting is reported once per job (the job's first process;
  under srun, where ranks share no parent, rank 0 only);
- the repository stands alone: README.md and docs/ point at no file outside
  it, and every relative link in them names a file in the repository;
- tests that read the real fixtures skip visibly when those are absent: the
  import test binary with RECOMP_FIXTURES_DIR pointing nowhere passes, and
  tools/test-summary.py prints "N skipped: reason" above its summary line;
- tools/run-main.sh: the banner describes the job that runs, a preset's own
  layout wins unless a flag is given, a job that fails before any iteration
  exits 1 with its error rank-prefixed, the trace directory is printed and
  removed unless --keep.

Environment (tests/cli/meson.build): RECOMP_SHIM, RECOMP_ANALYZE, RECOMP_DUMP,
MEGASIM_LIB_DIR, MEGASIM_PYDIR, PROJECT_VERSION, TRACE_VERSION, SOURCE_ROOT,
BUILD_ROOT, TEST_IMPORT.
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
SHIM, ANALYZE, DUMP = E["RECOMP_SHIM"], E["RECOMP_ANALYZE"], E["RECOMP_DUMP"]
README = open(os.path.join(E["SOURCE_ROOT"], "README.md"), encoding="utf-8").read()


TAP = Tap(30)
ok = TAP.ok


def run(argv, env=None, **kw):
    return subprocess.run(argv, capture_output=True, text=True, env=env, **kw)


def megasim(out, extra_env=None, world=2):
    env = dict(E, LD_PRELOAD=preload(SHIM), RECOMPSHIM_OUT=out, MEGASIM_LIB_DIR=E["MEGASIM_LIB_DIR"],
               PYTHONPATH=E["MEGASIM_PYDIR"])
    for k in ("RECOMPSHIM_RUN_ID", "RECOMPSHIM_TENSORS_REPORTED", "RANK", "SLURM_PROCID",
              "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        env.pop(k, None)
    env.update(extra_env or {})
    return run([sys.executable, "-m", "megasim", "--sim-preset", "llama3-8b", "--num-layers", "2",
                "--train-iters", "1", "--profile", "--nvtx-ranges", "--profile-step-start", "0",
                "--sim-world-size", str(world), "--sim-quiet"], env=env)


def help_options(text):
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text)))


def check_conventions(tool, path):
    v = run([path, "--version"])
    ok(v.returncode == 0 and v.stderr == "", "%s --version exits 0, nothing on stderr" % tool, v)
    ok(E["PROJECT_VERSION"] in v.stdout and "trace format " + E["TRACE_VERSION"] in v.stdout,
       "%s --version names %s and trace format %s" % (tool, E["PROJECT_VERSION"],
                                                      E["TRACE_VERSION"]), v.stdout)
    h = run([path, "--help"])
    ok(h.returncode == 0 and h.stdout.startswith("usage: " + tool) and h.stderr == "",
       "%s --help: usage on stdout, exit 0" % tool, h)
    for argv, what in (([], "no operand"), (["--no-such-option", "x"], "an unknown option")):
        u = run([path] + argv)
        ok(u.returncode == 1 and u.stdout == "" and "usage: " + tool in u.stderr,
           "%s with %s: usage on stderr, exit 1" % (tool, what), u)
    opts = help_options(h.stdout)
    missing = [o for o in opts if o not in README]
    ok(len(opts) >= 6 and not missing, "%s: every option of --help is in the README (%d)"
       % (tool, len(opts)), "missing: %s" % missing)
    return opts


def records(text):
    """Record lines of recomp-dump's text (not headers, not native or Python frame lines)."""
    return [l for l in text.splitlines()
            if l and not l.startswith(("recompshim trace ", "header ", "  frame ", "  py #"))]


def field(line, key):
    m = re.search(r"\b%s=(\S+)" % key, line)
    return m.group(1) if m else None


def check_dump(run_dir):
    files = sorted(os.path.join(run_dir, f) for f in os.listdir(run_dir) if f.endswith(".rstrace"))
    ok(len(files) == 2, "megasim wrote 2 traces", files)
    single = [run([DUMP, f]) for f in files]
    both = run([DUMP] + files)
    ok(both.returncode == 0 and both.stdout == "".join(s.stdout for s in single),
       "recomp-dump A B prints A then B, each as alone")
    d = run([DUMP, run_dir])
    ok(d.returncode == 0 and d.stdout == both.stdout, "recomp-dump RUNDIR = its *.rstrace by name")
    ok(d.stdout.count("recompshim trace v") == 2, "one header per file")
    allrec = records(d.stdout)
    kinds = {l.split()[0] for l in allrec}
    ok({"ALLOC", "TENSOR", "NVTX_PUSH", "NVTX_POP"} <= kinds, "the run has the kinds filtered below",
       kinds)

    missing = os.path.join(run_dir, "no-such.rstrace")
    m = run([DUMP, files[0], missing, files[1]])
    ok(m.returncode == 1 and m.stdout == both.stdout and missing in m.stderr,
       "a missing file among several: named on stderr, exit 1, the others still dumped", m.stderr)
    bad = os.path.join(os.path.dirname(run_dir), "damaged.rstrace")
    with open(files[1], "rb") as src, open(bad, "wb") as dst:
        dst.write(src.read()[:5000])
    b = run([DUMP, files[0], bad])
    ok(b.returncode == 2 and b.stdout.startswith(single[0].stdout) and bad in b.stderr,
       "a damaged file among several: exit 2 naming it, the good one dumped", b.stderr)
    os.unlink(bad)

    k = run([DUMP, "--kind", "alloc,NVTX_POP", run_dir])
    want = [l for l in allrec if l.split()[0] in ("ALLOC", "NVTX_POP")]
    ok(k.returncode == 0 and records(k.stdout) == want, "--kind alloc,NVTX_POP keeps exactly those",
       "%d vs %d" % (len(records(k.stdout)), len(want)))
    bad = run([DUMP, "--kind", "ALOC", run_dir])
    ok(bad.returncode == 1 and "ALOC" in bad.stderr and bad.stdout == "",
       "--kind with an unknown kind: usage error naming it", bad)

    f0 = files[0]
    rec0 = records(single[0].stdout)
    tids = sorted({field(l, "tid") for l in rec0})
    tid = max(tids, key=lambda t: sum(1 for l in rec0 if field(l, "tid") == t))
    t = run([DUMP, "--thread", tid, f0])
    want = [l for l in rec0 if field(l, "tid") == tid]
    ok(t.returncode == 0 and want and records(t.stdout) == want,
       "--thread %s keeps that thread's %d records" % (tid, len(want)))

    times = sorted(int(field(l, "t")) for l in rec0)
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    w = run([DUMP, "--from", str(lo), "--to", "%dus" % (hi // 1000), f0])
    want = [l for l in rec0 if lo <= int(field(l, "t")) <= hi // 1000 * 1000]
    ok(w.returncode == 0 and want and records(w.stdout) == want,
       "--from NS --to USus keeps exactly the records in the window (%d)" % len(want))
    bt = run([DUMP, "--from", "soon", f0])
    ok(bt.returncode == 1 and "soon" in bt.stderr, "--from with no time: usage error", bt)

    name = "mlp.forward.linear_fc1"
    r = run([DUMP, "--range", name, f0])
    got = records(r.stdout)
    expect, depth = [], {}
    for l in rec0:  # the reference: per-thread stack of matching pushes
        tid_ = field(l, "tid")
        st = depth.setdefault(tid_, [])
        if l.startswith("NVTX_PUSH"):
            st.append(name in l)
            if any(st):
                expect.append(l)
        elif l.startswith("NVTX_POP"):
            if any(st):
                expect.append(l)
            if st:
                st.pop()
        elif any(st):
            expect.append(l)
    ok(r.returncode == 0 and got == expect and any(l.startswith("TENSOR") for l in got),
       "--range %s keeps the records inside that range (%d)" % (name, len(got)),
       "%d vs %d" % (len(got), len(expect)))

    j = run([DUMP, "--jsonl", run_dir])
    objs = []
    try:
        objs = [json.loads(l) for l in j.stdout.splitlines()]
    except ValueError as e:
        ok(False, "--jsonl: every line is JSON", e)
    else:
        ok(j.returncode == 0, "--jsonl: every line is JSON (%d)" % len(objs))
    hdrs = [o for o in objs if o.get("kind") == "HEADER"]
    ok(all(h.get("closed") is True and h.get("slurm_job_id", 0) is None and
           isinstance(h.get("rank"), int) for h in hdrs),
       "--jsonl header: flags are booleans, empty fields null, numbers numbers", hdrs[:1])
    recs = [o for o in objs if o.get("kind") != "HEADER"]
    ok(len(hdrs) == 2 and len(recs) == len(allrec), "--jsonl: 2 headers, one object per record",
       "%d headers, %d vs %d" % (len(hdrs), len(recs), len(allrec)))
    same = len(recs) == len(allrec) and all(
        o["kind"] == l.split()[0] and str(o["t"]) == field(l, "t") and
        str(o.get("size", "")) == (field(l, "size") or "") and
        o.get("ptr", "") == (field(l, "ptr") or "") for o, l in zip(recs, allrec))
    ok(same, "--jsonl: kind, t, size and ptr equal the text's, record by record")
    jk = run([DUMP, "--jsonl", "--kind", "TENSOR", "--thread", tid, f0])
    ok(all(json.loads(l)["kind"] in ("HEADER", "TENSOR") for l in jk.stdout.splitlines()),
       "--jsonl combines with the filters")


def check_warn_once(tmp):
    out = os.path.join(tmp, "warn")
    os.mkdir(out, 0o700)
    r = megasim(out, {"RECOMPSHIM_TENSORS": "bogus", "RECOMPSHIM_LOG": "loud"})
    lines = [l for l in r.stderr.splitlines() if l.startswith("recompshim")]
    ok(r.returncode == 0, "megasim with bad settings runs", r.stderr[-2000:])
    ok(len(lines) == 2 and sum("RECOMPSHIM_TENSORS=bogus" in l for l in lines) == 1 and
       sum('RECOMPSHIM_LOG="loud"' in l for l in lines) == 1,
       "2-rank job with two bad settings: one line each", "\n".join(lines))
    for rank, want in (("0", 1), ("1", 0), ("3", 0)):
        env = dict(E, LD_PRELOAD=preload(SHIM), RECOMPSHIM_OUT=out, RECOMPSHIM_TENSORS="bogus",
                   SLURM_PROCID=rank)
        env.pop("RECOMPSHIM_RUN_ID", None)
        env.pop("RECOMPSHIM_TENSORS_REPORTED", None)
        s = run(["sh", "-c", "ls / >/dev/null; cat /dev/null; true"], env=env)
        got = sum(l.startswith("recompshim") for l in s.stderr.splitlines())
        ok(got == want, "srun rank %s (no common parent), with child processes: %d line(s)"
           % (rank, want), s.stderr)


def run_main(tmp, *argv):
    env = dict(E, BUILDDIR=E["BUILD_ROOT"], TMPDIR=tmp)
    for k in ("LD_PRELOAD", "RECOMPSHIM_RUN_ID", "RECOMPSHIM_OUT"):
        env.pop(k, None)
    r = run([os.path.join(E["SOURCE_ROOT"], "tools", "run-main.sh")] + list(argv), env=env)
    m = re.search(r"^== traces: (\S+)", r.stdout, re.M)
    return r, m.group(1) if m else None


def check_run_main(tmp):
    tmp = os.path.join(tmp, "rm")
    os.mkdir(tmp)
    r, d = run_main(tmp)
    ok(r.returncode == 0 and r.stdout.startswith(
        "== megasim under the shim: llama3-8b (32 layers, hidden 4096, seq 8192) on 4 ranks "
        "(TP=1 PP=2 CP=1 DP=2); global batch 8, micro-batch 1; 3 iteration(s); recompute: none, "
        "distributed optimizer\n") and "\nverdict: " in r.stdout,
       "run-main.sh: the default job, described as it runs, analysed", r.stdout[:600] + r.stderr)
    ok(d and d.startswith(tmp) and not os.path.exists(d),
       "run-main.sh: the trace directory is printed and removed", d)
    ok(re.search(r"^\[rank 0\]: torch.OutOfMemoryError", r.stdout, re.M),
       "run-main.sh: the job's OOM lines carry their rank", r.stdout[:800])

    r, d = run_main(tmp, "--sim-world-size", "32", "--num-layers", "2")
    ok(r.returncode == 1 and "on 32 ranks (TP=1 PP=2 CP=1 DP=16)" in r.stdout,
       "run-main.sh --sim-world-size 32: banner says 32 ranks, DP=16; exit 1", r)
    ok("[rank 0]: AssertionError: global batch size (8) is not divisible by micro batch size (1) "
       "times data parallel size (16) (also ranks 1-31)" in r.stderr and "verdict" not in r.stdout,
       "run-main.sh: a job that dies before its first iteration shows its own error, "
       "rank-prefixed, and no verdict", r.stderr)
    ok(d and not os.path.exists(d), "run-main.sh: removed after a failed job too", d)

    r, d = run_main(tmp, "--keep", "--sim-preset", "gpt3-175b", "--sim-only-ranks", "0,8,56",
                    "--num-layers", "16", "--train-iters", "1")
    ok(r.returncode == 0 and "on 64 ranks (TP=8 PP=8 CP=1 DP=1), only ranks 0,8,56 run" in r.stdout
       and "--pipeline-model-parallel-size" not in r.stdout.split("\n")[1]
       and "3 rank(s)" in r.stdout,
       "run-main.sh --sim-preset gpt3-175b: the preset's own layout (TP=8 PP=8) runs",
       r.stdout[:600] + r.stderr[-1500:])
    ok(d and os.path.isdir(d) and ("== kept: " + d) in r.stdout,
       "run-main.sh --keep: the trace directory is kept and named", d)

    r, d = run_main(tmp, "--sim-preset", "gpt3-175b", "--pipeline-model-parallel-size", "4",
                    "--sim-only-ranks", "0", "--num-layers", "8", "--train-iters", "1")
    ok(r.returncode == 0 and "on 32 ranks (TP=8 PP=4 CP=1 DP=1)" in r.stdout,
       "run-main.sh: an explicit flag overrides the preset's layout", r.stdout[:400] + r.stderr)

    h, _ = run_main(tmp, "--help")
    opts = help_options(h.stdout)
    ok(h.returncode == 0 and h.stdout.startswith("usage: tools/run-main.sh") and
       {"--keep", "--help"} <= set(opts) and all(o in README for o in opts),
       "run-main.sh --help: usage on stdout, exit 0, its options in the README", h)

    r, d = run_main(tmp, "--recompute-granularity", "full", "--recompute-method", "sideways")
    ok(r.returncode == 1 and "recompute_method: sideways" in r.stderr and d is None,
       "run-main.sh: flags megasim rejects: its message, exit 1, nothing run", r.stderr)


POINTER = re.compile(r"\.\./shared|DESIGN\.md|/work/|(?<![\w/-])(activation-model|megatron|"
                     r"oom-scenarios|interpose|style-anchors)(\.md| ?§)")


def check_stands_alone():
    root = E["SOURCE_ROOT"]
    docs = [os.path.join(root, "README.md")]
    for d, _, fs in os.walk(os.path.join(root, "docs")):
        docs += [os.path.join(d, f) for f in fs if f.endswith(".md")]
    outside, broken = [], []
    for p in docs:
        text = open(p, encoding="utf-8").read()
        rel = os.path.relpath(p, root)
        for m in POINTER.finditer(text):
            outside.append("%s: %s" % (rel, text[max(0, m.start() - 30):m.end() + 20]))
        for m in re.finditer(r"\]\(([^)#\s]+)(#[^)]*)?\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(p), target))
            # docs/architecture.md is written by the lead in this round's merge
            if not os.path.exists(path) and os.path.relpath(path, root) != "docs/architecture.md":
                broken.append("%s -> %s" % (rel, target))
    ok(not outside, "README and docs point at nothing outside the repository (%d files)"
       % len(docs), "\n".join(outside))
    code, nfiles = [], 0
    for d, dirs, fs in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith((".", "build")) and x != "__pycache__"
                   and not os.path.exists(os.path.join(d, x, "build.ninja"))]
        for f in fs:
            p = os.path.join(d, f)
            if f.endswith(".md") or f.startswith(".") or os.path.samefile(p, __file__):
                continue
            try:
                text = open(p, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            nfiles += 1
            for m in POINTER.finditer(text):
                code.append("%s: %s" % (os.path.relpath(p, root), text[max(0, m.start() - 30):m.end()]))
    ok(nfiles > 100 and not code, "sources point at nothing outside the repository (%d files)"
       % nfiles, "\n".join(code))
    ok(not broken, "every relative link in README and docs resolves", "\n".join(broken))


def check_visible_skips(tmp):
    env = dict(E, RECOMP_FIXTURES_DIR=os.path.join(tmp, "no-fixtures"))
    r = run([E["TEST_IMPORT"]], env=env)
    synth = re.search(r"Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+)", r.stdout + r.stderr)
    nskip = (r.stdout + r.stderr).count("SKIP real fixtures absent (%s)" % env["RECOMP_FIXTURES_DIR"])
    ok(r.returncode == 0 and synth and synth.group(3) == "0" and nskip >= 5,
       "import tests without the real fixtures: pass, %d SKIP lines" % nskip, r.stderr[-1500:])
    log = os.path.join(tmp, "testlog.json")
    with open(log, "w") as f:
        f.write(json.dumps({"name": "import", "result": "OK", "stdout": r.stdout,
                            "stderr": r.stderr}) + "\n")
        f.write(json.dumps({"name": "tap", "result": "OK",
                            "stdout": "ok 1 - a\n# SKIP real fixtures absent (/x): checks skipped\n"
                                      "ok 2 - b # SKIP no GPU\n1..2\n", "stderr": ""}) + "\n")
    s = run([sys.executable, os.path.join(E["SOURCE_ROOT"], "tools", "test-summary.py"), log])
    lines = s.stdout.splitlines()
    want_skip = "%d skipped: real fixtures absent (%s): fixture tests skipped" % (
        nskip, env["RECOMP_FIXTURES_DIR"])
    ok(s.returncode == 0 and want_skip in lines and
       "1 skipped: real fixtures absent (/x): checks skipped" in lines and
       "1 skipped: no GPU" in lines and
       lines[-1] == "%d passed, 0 failed" % (int(synth.group(2)) + 1 if synth else -1),
       "test-summary.py: one 'N skipped: reason' line per reason above 'N passed, N failed'",
       s.stdout)


def check_peak_blocks(run_dir):
    """--peak-blocks: the live blocks at each peak, by address, that sum to the
    peak less its untracked bytes; refused without --json."""
    r = run([ANALYZE, "--peak-blocks", run_dir])
    ok(r.returncode == 1 and "--peak-blocks" in r.stderr and "--json" in r.stderr,
       "--peak-blocks without --json: usage error naming both", r.stderr)
    r = run([ANALYZE, "--json", "--peak-blocks", "--no-advice", run_dir])
    try:
        doc = json.loads(r.stdout)
    except ValueError as e:
        ok(False, "--json --peak-blocks parses", e)
        return
    for rank in doc.get("ranks", []):
        for key in ("peak", "device_peak"):
            p = rank.get(key) or {}
            b = p.get("blocks")
            addrs = [a for a, _ in b or []]
            ok(b is not None and len(b) > 0 and addrs == sorted(set(addrs)) and
               sum(sz for _, sz in b) == p["bytes"] - p["untracked_bytes"],
               "rank %s %s: blocks sorted, distinct, sum = peak - untracked" % (rank.get("rank"), key),
               "%d blocks, sum %d, peak %s untracked %s" % (len(b or []), sum(sz for _, sz in b or []),
                                                            p.get("bytes"), p.get("untracked_bytes")))
    r = run([ANALYZE, "--json", "--no-advice", run_dir])
    ok(r.returncode == 0 and '"blocks"' not in r.stdout, "no blocks in the JSON without --peak-blocks")


def main():
    tmp = tempfile.mkdtemp(prefix="recomp-cli.")
    try:
        check_conventions("recomp-analyze", ANALYZE)
        check_conventions("recomp-dump", DUMP)
        out = os.path.join(tmp, "traces")
        os.mkdir(out, 0o700)
        r = megasim(out)
        runs = [os.path.join(out, d) for d in os.listdir(out)]
        ok(r.returncode == 0 and len(runs) == 1, "2-rank megasim run under the shim", r.stderr[-2000:])
        if len(runs) == 1:
            check_dump(runs[0])
            check_peak_blocks(runs[0])
        check_warn_once(tmp)
        check_run_main(tmp)
        check_visible_skips(tmp)
        check_stands_alone()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
