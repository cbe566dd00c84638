#!/usr/bin/env python3
"""The advisor against the real Megatron-Core: the accuracy matrix.

  tools/mcore_job/accuracy.py OUTDIR [--rows NAME,...] [--markdown FILE]

For each row (a model and layout, below): the baseline runs under the shim on
the fake GPU (tools/mcore_job/run.sh), recomp-analyze ranks its candidates,
then every candidate runs for real with the same flags plus its recompute
setting. Writes a markdown table of predicted vs measured peaks per rank
(allocated: torch.cuda.max_memory_allocated; reserved: max_memory_reserved)
to --markdown (default OUTDIR/megatron-core-matrix.md) and exits 1 when an
executed candidate misses the 2% bound on a rank, 77 when run.sh skips.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMON = ("--train-iters 3 --bf16 --use-distributed-optimizer --attention-dropout 0 "
          "--hidden-dropout 0 --profile --nvtx-ranges --profile-step-start 0 "
          "--profile-step-end 3").split()
ROWS = {
    "llama-dense": "--num-layers 4 --hidden-size 1024 --ffn-hidden-size 2816 "
                   "--num-attention-heads 16 --group-query-attention --num-query-groups 4 "
                   "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 "
                   "--global-batch-size 4 --normalization RMSNorm --swiglu "
                   "--disable-bias-linear --position-embedding-type rope "
                   "--untie-embeddings-and-output-weights",
    "gpt3-like": "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                 "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 "
                 "--global-batch-size 4 --normalization LayerNorm "
                 "--position-embedding-type learned_absolute",
    "llama-pp2": "--num-layers 4 --hidden-size 1024 --ffn-hidden-size 2816 "
                 "--num-attention-heads 16 --group-query-attention --num-query-groups 4 "
                 "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
                 "--global-batch-size 4 --normalization RMSNorm --swiglu "
                 "--disable-bias-linear --position-embedding-type rope "
                 "--untie-embeddings-and-output-weights --pipeline-model-parallel-size 2",
    "moe-sequential": "--num-layers 2 --hidden-size 1024 --ffn-hidden-size 2816 "
                      "--num-attention-heads 16 --seq-length 2048 "
                      "--max-position-embeddings 2048 --micro-batch-size 1 "
                      "--global-batch-size 2 --normalization RMSNorm --swiglu "
                      "--disable-bias-linear --position-embedding-type rope "
                      "--untie-embeddings-and-output-weights --num-experts 4 "
                      "--moe-ffn-hidden-size 1408 --moe-router-topk 2 "
                      "--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity "
                      "--moe-token-dispatcher-type alltoall",
}
TOLERANCE = 0.02


def run(out, flags, env):
    """run.sh OUT FLAGS: (exit status, {rank: counters})."""
    t0 = time.time()
    rc = subprocess.call([os.path.join(ROOT, "tools", "mcore_job", "run.sh"), out] + flags,
                         env=env)
    print("accuracy: %s exit %d (%.0f s)" % (out, rc, time.time() - t0), file=sys.stderr)
    counters = {}
    for p in glob.glob(os.path.join(out, "counters-rank*.json")):
        with open(p) as f:
            c = json.load(f)
        counters[c["rank"]] = c
    return rc, counters


def analyze(build, out):
    """recomp-analyze --json of OUT's run directory, or None."""
    runs = glob.glob(os.path.join(out, "traces", "*"))
    if len(runs) != 1:
        return None
    p = subprocess.run([os.path.join(build, "analyzer", "recomp-analyze"), "--json", runs[0]],
                       capture_output=True, text=True)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return None


def setting_flags(c):
    """Megatron flags of an advisor candidate (JSON: labels, method, num_layers)."""
    if c["labels"] == ["full"]:
        return ["--recompute-granularity", "full", "--recompute-method", c["method"],
                "--recompute-num-layers", str(c["num_layers"])]
    return ["--recompute-granularity", "selective", "--recompute-modules"] + c["labels"]


def pct(pred, meas):
    return 100.0 * (pred - meas) / meas if meas else float("nan")


def do_row(name, flags, outdir, build, env, lines):
    """Baseline, candidates, each candidate executed; table lines appended.
    Returns the number of misses (a rank outside the bound)."""
    base_out = os.path.join(outdir, name, "baseline")
    rc, base_counters = run(base_out, flags, env)
    if rc == 77:
        sys.exit(77)
    a = analyze(build, base_out)
    if rc != 0 or a is None:
        lines.append("| %s | baseline | run failed (exit %d) | | | | |" % (name, rc))
        return 1
    misses = 0
    verdict = a["verdict"]
    for r in sorted(base_counters):
        m = base_counters[r]
        p = next(x for x in verdict["ranks"] if x["rank"] == r)
        lines.append("| %s | none (baseline) | %d | %d | %d | %.2f%% | %d / %d |" % (
            name, r, p["predicted_peak_bytes"], m["max_memory_allocated"],
            pct(p["predicted_peak_bytes"], m["max_memory_allocated"]),
            p["predicted_reserved_bytes"], m["max_memory_reserved"]))
    for c in verdict["candidates"]:
        out = os.path.join(outdir, name, c["setting"].replace("[", "_").replace("]", "")
                           .replace(",", "_"))
        rc, counters = run(out, flags + setting_flags(c), env)
        if not c["valid"]:
            # the advisor calls it invalid: the real library must refuse it too
            agree = rc != 0
            misses += not agree
            lines.append("| %s | %s | invalid: %s | real Megatron-Core: %s | | | |" % (
                name, c["setting"], c["reason"],
                "refused too (exit %d)" % rc if agree else "RAN (exit 0) MISS"))
            continue
        if rc != 0 or sorted(counters) != sorted(base_counters):
            lines.append("| %s | %s | run failed (exit %d) | | | | |" % (name, c["setting"], rc))
            misses += 1
            continue
        for r in sorted(counters):
            pred = c["predicted_peak_bytes"][str(r)]
            meas = counters[r]["max_memory_allocated"]
            miss = abs(pct(pred, meas)) > 100 * TOLERANCE
            misses += miss
            lines.append("| %s | %s | %d | %d | %d | %.2f%%%s | %d / %d |" % (
                name, c["setting"], r, pred, meas, pct(pred, meas), " MISS" if miss else "",
                c["predicted_reserved_bytes"][str(r)], counters[r]["max_memory_reserved"]))
    lines.append("| %s | verdict | %s | | | | |" % (name, verdict["code"]))
    return misses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--markdown")
    a = ap.parse_args()
    build = os.environ.get("RS_BUILD_DIR") or os.path.join(ROOT, "build")
    env = dict(os.environ)
    lines = ["| row | setting | rank | predicted allocated | measured allocated | error | "
             "reserved predicted / measured |", "|---|---|---|---|---|---|---|"]
    misses = 0
    for name in a.rows.split(","):
        misses += do_row(name, ROWS[name].split() + COMMON, a.outdir, build, env, lines)
    md = a.markdown or os.path.join(a.outdir, "megatron-core-matrix.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
