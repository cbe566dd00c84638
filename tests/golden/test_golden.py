#!/usr/bin/env python3
"""Golden outputs: recomp-analyze's text and JSON reports of every megasim
scenario in tests/scenarios.py and every real fixture, compared byte for byte
(after masking what differs between runs: paths, host, pids, thread ids, run
ids and wall-clock times of simulated jobs) with tests/golden/expected/ (TAP).

A change of output is made deliberately: rerun with RECOMP_GOLDEN_UPDATE=1
(tools/update-golden.sh) and commit the new files with the change that made
them. Environment (tests/golden/meson.build): RECOMP_SHIM, RECOMP_ANALYZE,
MEGASIM_LIB_DIR, MEGASIM_PYDIR, RECOMP_FIXTURES; RECOMP_GOLDEN_ONLY=a,b runs
only the named cases.
"""
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import scenarios  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Tap, preload  # noqa: E402  (tests/harness.py)

SHIM = os.environ["RECOMP_SHIM"]
ANALYZE = os.environ["RECOMP_ANALYZE"]
LIBDIR = os.environ["MEGASIM_LIB_DIR"]
PYDIR = os.environ["MEGASIM_PYDIR"]
FIXTURES = os.environ.get("RECOMP_FIXTURES", "")
EXPECTED = os.path.join(HERE, "expected")
UPDATE = os.environ.get("RECOMP_GOLDEN_UPDATE") == "1"
ONLY = [x for x in os.environ.get("RECOMP_GOLDEN_ONLY", "").split(",") if x]


TAP = Tap(60)
ok = TAP.ok


# what differs between two runs of the same simulated job, or between two
# checkouts of the repository
RUN_MASKS = [
    (re.compile(r"(?:/[^\s,()\"']*/)?[^\s/,()\"']*-a\d+(/+|(?=[\s,()\"':]|$))", re.M),
     lambda m: "<rundir>/" if m.group(1) else "<rundir>"),
    (re.compile(r"run_id=\S+"), "run_id=<run>"),
    (re.compile(r"rank(\d+)-[^\s/\"]+-\d+\.rstrace"), r"rank\1-<host>-<pid>.rstrace"),
    (re.compile(r"host [^\s,]+, pid \d+"), "host <host>, pid <pid>"),
    (re.compile(r"\bthread \d+"), "thread <tid>"),
    (re.compile(r"\bpid \d+"), "pid <pid>"),
    (re.compile(r"\b\d+(?:\.\d+)? (s|ms|us|ns)\b"), r"<t> \1"),
    # Python frames name megasim's source lines, which move with every edit
    # of megasim (the function names stay: they are what is checked)
    (re.compile(r"(megasim/[\w/]+\.py):\d+"), r"\1:<line>"),
]
# what differs between checkouts for a fixture
FIXTURE_MASKS = [(re.compile(re.escape(FIXTURES.rstrip("/")) + "/") if FIXTURES else None,
                  "<fixtures>/")]
# file offsets move with the length of the recorded command line and
# environment (LD_PRELOAD's path: where the checkout is)
# native stacks: code offsets move with the build, symbolised frames name
# the checkout's source paths
MASK_KEYS_RUN = {"pid", "thread", "tid", "host", "path", "file_offset", "stack"}


def mask_text(s, masks):
    for rx, rep in masks:
        if rx is not None:
            s = rx.sub(rep, s)
    return s


def mask_json(v, masks, run):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if run and ((k in MASK_KEYS_RUN and x is not None) or
                        ((k.endswith("_ns") or k.endswith("_s")) and
                         not isinstance(x, (dict, list)))):
                out[k] = "<masked>" if x is not None else None
            else:
                out[k] = mask_json(x, masks, run)
        return out
    if isinstance(v, list):
        return [mask_json(x, masks, run) for x in v]
    if isinstance(v, str):
        return mask_text(v, masks)
    return v


def analyze(target, extra, as_json):
    """recomp-analyze on one target, or `compare` on a list of run directories"""
    targets = ["compare"] + list(target) if isinstance(target, list) else [target]
    if isinstance(target, list):
        args = [ANALYZE] + targets[:1] + (["--json"] if as_json else []) + list(extra) + \
            targets[1:]
    else:
        args = [ANALYZE] + (["--json"] if as_json else []) + list(extra) + [target]
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def report(target, extra, masks, run):
    """the masked text and JSON reports of one target, with both exit codes"""
    rc_t, text, err_t = analyze(target, extra, False)
    rc_j, js, err_j = analyze(target, extra, True)
    text = "exit %d\n%s%s" % (rc_t, mask_text(text, masks),
                              "".join("stderr: " + mask_text(l, masks) + "\n"
                                      for l in err_t.splitlines()))
    try:
        doc = mask_json(json.loads(js), masks, run)
        js = json.dumps(doc, indent=1) + "\n"
    except ValueError:
        js = mask_text(js, masks)
    js = "exit %d\n%s" % (rc_j, js)
    return text, js


def findings_once(name, text):
    """the text report states each finding once: the data-parallel replicas
    of a stage carry the same finding word for word, printed once with their
    ranks (the main job printed its X:OPTIMIZER_STATE twice)"""
    lines = [l for l in text.splitlines() if l.startswith("  finding ")]
    dup = sorted(set(l for l in lines if lines.count(l) > 1))
    return ok(not dup, "%s txt: every finding line once" % name, "\n".join(dup)[:2000])


def compare(name, kind, got):
    if kind == "txt":
        findings_once(name, got)
    path = os.path.join(EXPECTED, "%s.%s" % (name, kind))
    if UPDATE:
        with open(path, "w") as f:
            f.write(got)
        return ok(True, "%s %s: written" % (name, kind))
    if not os.path.exists(path):
        return ok(False, "%s %s: no golden file %s (RECOMP_GOLDEN_UPDATE=1 writes it)"
                  % (name, kind, path))
    with open(path) as f:
        want = f.read()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                        "expected/%s.%s" % (name, kind), "got", n=1))
    return ok(got == want, "%s %s identical" % (name, kind), diff[:6000])


def run_scenario(name, flags, capacity, extra, keep):
    """megasim's job under the shim, its reports compared; the run directory
    is returned (and its folder kept for the caller to remove) when keep"""
    out = tempfile.mkdtemp(prefix="golden.")
    kept = None
    try:
        # cudaMemGetInfo samples are rate-limited by wall time: one an hour
        # leaves the capacity sample, megasim's own calls and the OOMs, the
        # same in every run
        env = dict(os.environ, MEGASIM_LIB_DIR=LIBDIR, PYTHONPATH=PYDIR, LD_PRELOAD=preload(SHIM),
                   RECOMPSHIM_OUT=out, RECOMPSHIM_MEMINFO_MS="3600000")
        args = [sys.executable, "-m", "megasim"] + flags + ["--sim-quiet"]
        if capacity:
            args += ["--sim-capacity-gib", str(capacity)]
        p = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        runs = [os.path.join(out, d) for d in os.listdir(out)
                if os.path.isdir(os.path.join(out, d))]
        if not ok(len(runs) == 1, "%s: megasim left one run directory (exit %d)"
                  % (name, p.returncode), p.stderr[-1500:]):
            return
        text, js = report(runs[0], extra, RUN_MASKS, True)
        compare(name, "txt", "job exit %d\n%s" % (p.returncode, text))
        compare(name, "json", js)
        if keep:
            kept = runs[0]
    finally:
        if not kept:
            shutil.rmtree(out, ignore_errors=True)
    return kept


def fixture_name(rel):
    return "fixture-" + re.sub(r"[^A-Za-z0-9._-]+", "_", rel)


def main():
    wanted = {r for c in scenarios.COMPARISONS.values() for r in c}
    runs = {}
    for name, (flags, capacity, extra) in scenarios.SCENARIOS.items():
        if not ONLY or name in ONLY or name in wanted:
            runs[name] = run_scenario(name, flags, capacity, extra, name in wanted)
    # matched comparisons of those runs (recomp-analyze compare CONTROL CANDIDATE...)
    for name, members in scenarios.COMPARISONS.items():
        if ONLY and name not in ONLY:
            continue
        dirs = [runs.get(m) for m in members]
        if ok(all(dirs), "%s: its runs exist" % name):
            text, js = report(dirs, [], RUN_MASKS, True)
            compare(name, "txt", text)
            compare(name, "json", js)
    for d in runs.values():
        if d:
            shutil.rmtree(os.path.dirname(d), ignore_errors=True)
    have = FIXTURES and os.path.isdir(FIXTURES)
    if not have:
        print("# SKIP real fixtures: %s not found (it sits beside the source tree in a "
              "development checkout and in CI)" % (FIXTURES or "RECOMP_FIXTURES"))
    for rel in scenarios.FIXTURES if have else []:
        name = fixture_name(rel)
        if ONLY and name not in ONLY:
            continue
        path = os.path.join(FIXTURES, rel)
        if not ok(os.path.exists(path), "%s: fixture present" % name):
            continue
        text, js = report(path, [], FIXTURE_MASKS, False)
        compare(name, "txt", text)
        compare(name, "json", js)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
