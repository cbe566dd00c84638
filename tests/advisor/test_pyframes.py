#!/usr/bin/env python3
"""Attribution from Python frames without Megatron's NVTX ranges (TAP).

megasim's functions carry Megatron-Core's qualified names
(TransformerLayer._forward_attention, Attention.forward, MLP.forward,
MoELayer.forward, ..., docs/megasim.md), so under the shim (RECOMPSHIM_PYSTACK
on, the default) every allocation names them. Each job runs twice: with
`--profile --nvtx-ranges` (every iteration profiled) and without. For every
rank the contributors at the tensor-level peak -- (phase of allocation,
boundary, layer, bytes) -- must be the same, and so must the advisor's verdict
and every candidate's predicted peaks. Non-vacuity: the run without ranges
really has none of Megatron's ranges, its contributors are per layer, and
the same run analysed without Python stacks (RECOMPSHIM_PYSTACK=0) reads
differently. For the README's main job (dense, TE spec) the frames also give
exactly what Megatron's ranges alone give.

megasim runs on Python 3.12 or newer (this interpreter, else pyenv's): there
sys.monitoring covers the autograd worker, a native thread, from its first
Python call; before 3.12 it is covered only from a later iteration
(docs/python-frames.md), so a recompute replay in the first backward would
have no frames. Without such a Python the test is a visible SKIP.

Environment (tests/advisor/meson.build): RECOMP_SHIM, RECOMP_ANALYZE,
MEGASIM_LIB_DIR, MEGASIM_PYDIR; RECOMP_DUMP (recomp-dump).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import scenarios as flagsets  # noqa: E402
from harness import Tap, preload  # noqa: E402

SHIM = os.environ["RECOMP_SHIM"]
ANALYZE = os.environ["RECOMP_ANALYZE"]
DUMP = os.environ["RECOMP_DUMP"]
LIBDIR = os.environ["MEGASIM_LIB_DIR"]
PYDIR = os.environ["MEGASIM_PYDIR"]


def python312():
    """an interpreter of 3.12 or newer: this one, else pyenv's newest"""
    if sys.version_info[:2] >= (3, 12):
        return sys.executable
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = [p for p in glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3"))
             if re.search(r"/versions/3\.(1[2-9])\.", p)]
    found.sort(key=lambda p: [int(x) for x in re.findall(r"\d+", p.split("/versions/")[1].split("/")[0])])
    return found[-1] if found else None


PYTHON = python312()


TAP = Tap(30)
ok = TAP.ok


def without_profile(flags):
    """flags with Megatron's --profile/--nvtx-ranges and their step window removed"""
    out, skip = [], 0
    for f in flags:
        if skip:
            skip -= 1
        elif f in ("--profile", "--nvtx-ranges"):
            pass
        elif f in ("--profile-step-start", "--profile-step-end", "--profile-ranks"):
            skip = 1
        else:
            out.append(f)
    return out


def run(flags, root, name, pystack="1"):
    out = os.path.join(root, name)
    env = dict(os.environ, MEGASIM_LIB_DIR=LIBDIR, PYTHONPATH=PYDIR, LD_PRELOAD=preload(SHIM),
               RECOMPSHIM_OUT=out, RECOMPSHIM_PYSTACK=pystack)
    if os.environ.get("RS_SANITIZER_RUNTIME"):
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    subprocess.run([PYTHON, "-m", "megasim", "--sim-quiet"] + flags, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = [os.path.join(out, d) for d in os.listdir(out)] if os.path.isdir(out) else []
    return runs[0] if runs else None


def analyze(rundir):
    p = subprocess.run([ANALYZE, "--json", "--ranks", "all", "--top", "0", rundir],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return json.loads(p.stdout) if p.stdout.strip() else None


def contributors(j):
    """rank -> sorted (phase, boundary, layer, bytes) at the tensor-level peak"""
    res = {}
    for r in j["ranks"]:
        cs = (r.get("peak") or {}).get("contributors") or []
        res[r["rank"]] = sorted(((c.get("phase"), c.get("boundary"), c.get("layer"), c["bytes"])
                                 for c in cs), key=str)
    return res


def verdict(j):
    v = j.get("verdict") or {}
    return (v.get("code"), v.get("predicted_peak_bytes"),
            sorted((c.get("setting"), json.dumps(c.get("predicted_peak_bytes"), sort_keys=True),
                    c.get("effect")) for c in v.get("candidates") or []))


def megatron_ranges(rundir):
    p = subprocess.run([DUMP, "--kind", "NVTX_PUSH", rundir], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return sum('name="megatron.core.transformer' in line for line in p.stdout.splitlines())


def diff(a, b):
    return "only with ranges: %s\nonly without: %s" % (sorted(set(a) - set(b), key=str)[:10],
                                                       sorted(set(b) - set(a), key=str)[:10])


# (name, flags with Megatron's ranges on, also compare with the ranges alone)
JOBS = [
    ("main job (llama3-8b, PP=2, OOM)", flagsets.MAIN, True),
    ("main job, selective mlp recompute", flagsets.MAIN + [
        "--recompute-granularity", "selective", "--recompute-modules", "mlp"], True),
    ("moonlight-16b (MLA + MoE, TP=2 SP, EP=2)",
     flagsets.SMALL["moonlight-16b"] + flagsets.PROFILE, False),
    ("gpt3-175b shapes (LayerNorm, dropout, TP=2 SP, PP=2), full uniform 1",
     flagsets.SMALL["gpt3-175b"] + flagsets.PROFILE + [
         "--recompute-granularity", "full", "--recompute-method", "uniform",
         "--recompute-num-layers", "1"], False),
]


def check(name, flags, vs_ranges, root):
    on = run(flags, root, "on")
    off = run(without_profile(flags), root, "off")
    if not ok(on and off, "%s: both runs wrote traces" % name):
        return
    ok(megatron_ranges(on) > 0 and megatron_ranges(off) == 0,
       "%s: Megatron's ranges in the profiled run only" % name,
       "%d / %d" % (megatron_ranges(on), megatron_ranges(off)))
    ja, jb = analyze(on), analyze(off)
    if not ok(ja and jb, "%s: both analysed" % name):
        return
    ca, cb = contributors(ja), contributors(jb)
    for r in sorted(ca):
        ok(ca[r] == cb.get(r), "%s: rank %d: each contributor at the peak has the same phase, "
           "boundary, layer and bytes without Megatron's ranges" % (name, r), diff(ca[r], cb.get(r, [])))
        layers = {c[2] for c in cb.get(r, []) if c[2] is not None}
        ok(len(layers) >= 2, "%s: rank %d: per-layer contributors from frames alone (%d layers)"
           % (name, r, len(layers)), cb.get(r))
    ok(verdict(ja) == verdict(jb), "%s: the same verdict and predictions (%s)"
       % (name, verdict(jb)[0]), "%s\n%s" % (verdict(ja), verdict(jb)))
    if vs_ranges:
        nv = analyze(run(flags, root, "ranges-only", "0"))
        cn = contributors(nv)
        ok(all(cn[r] == cb.get(r) for r in cn),
           "%s: frames alone give what Megatron's ranges alone give" % name,
           "\n".join(diff(cn[r], cb.get(r, [])) for r in cn if cn[r] != cb.get(r)))
        ok(verdict(nv) == verdict(jb), "%s: and the same verdict" % name)
    bare = analyze(run(without_profile(flags), root, "neither", "0"))
    cn = contributors(bare)
    ok(any(cn[r] != cb.get(r) for r in cn),
       "%s: without ranges, the run without frames reads differently" % name)


def main():
    if not PYTHON:
        print("1..0 # SKIP no Python 3.12 or newer (pyenv install 3.12)")
        return 0
    for name, flags, vs_ranges in JOBS:
        root = tempfile.mkdtemp(prefix="pyframes.")
        try:
            check(name, flags, vs_ranges, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
