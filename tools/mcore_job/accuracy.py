#!/usr/bin/env python3
"""The advisor against the real Megatron-Core: the accuracy matrix.

  tools/mcore_job/accuracy.py OUTDIR [--rows NAME,...] [--markdown FILE] [--no-oom] [--reuse]

For each row (a model and layout, below): the baseline runs under the shim on
the fake GPU (tools/mcore_job/run.sh), recomp-analyze ranks its candidates,
then every candidate runs for real with the same flags plus its recompute
setting. Writes a markdown table of predicted vs measured peaks per rank
(allocated: torch.cuda.max_memory_allocated; reserved: max_memory_reserved)
to --markdown (default OUTDIR/megatron-core-matrix.md) and exits 1 when an
executed candidate misses the 2% bound on a rank, 77 when run.sh skips.

Then each row's OOM row (unless --no-oom): a device size (MOCK_CUDA_CAPACITY)
chosen from the 80 GiB runs so that the baseline does not fit and a cheaper
setting does not either (choose_capacity), the advisor's verdict for that
budget, and the baseline, the recommended setting and every cheaper valid
setting the advisor ranks (measured at 80 GiB or not) executed at that size
(oom_runs). Targets: the baseline and every cheaper setting run out of memory,
the recommendation fits (a miss counts like the above).
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
    "llama-vpp": "--num-layers 4 --hidden-size 1024 --ffn-hidden-size 2816 "
                 "--num-attention-heads 16 --group-query-attention --num-query-groups 4 "
                 "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
                 "--global-batch-size 4 --normalization RMSNorm --swiglu "
                 "--disable-bias-linear --position-embedding-type rope "
                 "--untie-embeddings-and-output-weights --pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 1",
    "moe-sequential": "--num-layers 2 --hidden-size 1024 --ffn-hidden-size 2816 "
                      "--num-attention-heads 16 --seq-length 2048 "
                      "--max-position-embeddings 2048 --micro-batch-size 1 "
                      "--global-batch-size 2 --normalization RMSNorm --swiglu "
                      "--disable-bias-linear --position-embedding-type rope "
                      "--untie-embeddings-and-output-weights --num-experts 4 "
                      "--moe-ffn-hidden-size 1408 --moe-router-topk 2 "
                      "--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity "
                      "--moe-token-dispatcher-type alltoall",
    # Transformer Engine's spec (issue 16): TE 2.12.0's modules (fused norm +
    # linear, TE's unfused attention on the fake GPU: run.sh), the llama-dense
    # model otherwise.
    "llama-te": "--num-layers 4 --hidden-size 1024 --ffn-hidden-size 2816 "
                "--num-attention-heads 16 --group-query-attention --num-query-groups 4 "
                "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 "
                "--global-batch-size 4 --normalization RMSNorm --swiglu "
                "--disable-bias-linear --position-embedding-type rope "
                "--untie-embeddings-and-output-weights --transformer-impl transformer_engine",
    # MoE with grouped GEMM (TE's GroupedLinear, TEGroupedMLP): moe-sequential's
    # model, capacity factor 1 with padding to capacity (dropless routing
    # would count the zeros the fake GPU reads back).
    "moe-grouped": "--num-layers 2 --hidden-size 1024 --ffn-hidden-size 2816 "
                   "--num-attention-heads 16 --seq-length 2048 "
                   "--max-position-embeddings 2048 --micro-batch-size 1 "
                   "--global-batch-size 2 --normalization RMSNorm --swiglu "
                   "--disable-bias-linear --position-embedding-type rope "
                   "--untie-embeddings-and-output-weights --num-experts 4 "
                   "--moe-ffn-hidden-size 1408 --moe-router-topk 2 "
                   "--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity "
                   "--moe-token-dispatcher-type alltoall --moe-grouped-gemm "
                   "--transformer-impl transformer_engine",
    # Multi-Latent Attention, Moonlight-16B-A3B's attention (hidden 2048, 16
    # heads, no query compression, kv_lora_rank 512, qk_head_dim 128,
    # qk_pos_emb_head_dim 64, v_head_dim 128, RoPE base 50000 without YaRN,
    # latent norms) with a dense SwiGLU MLP; MLA needs TE's attention.
    "mla": "--num-layers 2 --hidden-size 2048 --ffn-hidden-size 11264 "
           "--num-attention-heads 16 --multi-latent-attention --kv-lora-rank 512 "
           "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm "
           "--rope-type rope --rotary-base 50000 --seq-length 2048 "
           "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 2 "
           "--normalization RMSNorm --swiglu --disable-bias-linear "
           "--position-embedding-type rope --untie-embeddings-and-output-weights "
           "--transformer-impl transformer_engine",
}
TOLERANCE = 0.02


REUSE = False  # --reuse: keep a run whose stamp says the same flags and capacity


def run(out, flags, env):
    """run.sh OUT FLAGS: (exit status, {rank: counters}). With --reuse, a run
    already in OUT with the same flags and MOCK_CUDA_CAPACITY (its stamp,
    OUT/accuracy-run.json, written after each run) is read instead of run
    again: the real library's measurements do not depend on the advisor, so
    a changed advisor is judged again on the same runs."""
    stamp_path = os.path.join(out, "accuracy-run.json")
    stamp = {"flags": flags, "capacity": env.get("MOCK_CUDA_CAPACITY")}
    rc = None
    if REUSE and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            old = json.load(f)
        if {k: old.get(k) for k in stamp} == stamp:
            rc = old["exit"]
            print("accuracy: %s reused (exit %d)" % (out, rc), file=sys.stderr)
    if rc is None:
        t0 = time.time()
        rc = subprocess.call([os.path.join(ROOT, "tools", "mcore_job", "run.sh"), out] + flags,
                             env=env)
        print("accuracy: %s exit %d (%.0f s)" % (out, rc, time.time() - t0), file=sys.stderr)
        if rc != 77 and os.path.isdir(out):
            with open(stamp_path, "w") as f:
                json.dump(dict(stamp, exit=rc), f)
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


def do_row(name, flags, outdir, build, env, lines, measured):
    """Baseline, candidates, each candidate executed; table lines appended;
    measured[setting] = {rank: counters} of every run that finished ("none"
    is the baseline). Returns (the number of misses (a rank outside the
    bound), the baseline's analysis or None)."""
    base_out = os.path.join(outdir, name, "baseline")
    rc, base_counters = run(base_out, flags, env)
    if rc == 77:
        sys.exit(77)
    a = analyze(build, base_out)
    if rc != 0 or a is None:
        lines.append("| %s | baseline | run failed (exit %d) | | | | |" % (name, rc))
        return 1, None
    measured["none"] = base_counters
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
        measured[c["setting"]] = counters
        for r in sorted(counters):
            pred = c["predicted_peak_bytes"][str(r)]
            meas = counters[r]["max_memory_allocated"]
            miss = abs(pct(pred, meas)) > 100 * TOLERANCE
            misses += miss
            lines.append("| %s | %s | %d | %d | %d | %.2f%%%s | %d / %d |" % (
                name, c["setting"], r, pred, meas, pct(pred, meas), " MISS" if miss else "",
                c["predicted_reserved_bytes"][str(r)], counters[r]["max_memory_reserved"]))
    lines.append("| %s | verdict | %s | | | | |" % (name, verdict["code"]))
    return misses, a


# ---- OOM rows: a capacity the baseline does not fit, where the choice matters ----

def verdict_at(build, out, capacity, headroom):
    """recomp-analyze --json --budget CAPACITY --headroom HEADROOM of OUT's run
    (bytes): the verdict, or None."""
    runs = glob.glob(os.path.join(out, "traces", "*"))
    if len(runs) != 1:
        return None
    p = subprocess.run([os.path.join(build, "analyzer", "recomp-analyze"), "--json",
                        "--budget", str(capacity), "--headroom", str(headroom), runs[0]],
                       capture_output=True, text=True)
    try:
        return json.loads(p.stdout)["verdict"]
    except (ValueError, KeyError):
        return None


def cost_order(verdict, measured):
    """The baseline ("none") then every valid candidate that ran to the end at
    80 GiB, cheapest replay first (the advisor's replay_cost_fraction)."""
    cost = {c["setting"]: c["replay_cost_fraction"] for c in verdict["candidates"] if c["valid"]}
    cost["none"] = 0.0
    return sorted((s for s in measured if s in cost), key=lambda s: (cost[s], s))


def choose_capacity(verdict, measured):
    """(setting K, capacity in bytes, basis) from the 80 GiB runs: a device
    size at which K fits and every cheaper setting (the baseline included)
    surely does not, K chosen for the widest such window relative to its
    size; the capacity is the middle of the window, rounded down to MiB.

    Surely does not fit: a cheaper setting's max_memory_allocated plus what
    lies outside PyTorch (the fake GPU's context) is above the capacity (the
    caching allocator frees its cache and retries before it raises, so
    reserved bytes above the capacity alone do not mean an OOM).
    K fits, by basis "reserved": K's largest max_memory_reserved over the
    ranks plus the same is below the capacity (surely fits). Where no setting
    has such a window (the moe-grouped row: settings that differ in allocated
    bytes reserve the same 2,359,296,000 at a peak recompute does not touch,
    so every reserved peak lies above the next cheaper setting's allocated
    one), basis "allocated": K's max_memory_allocated plus the same is below
    the capacity, so K fits only if the allocator, freeing its cache, finds
    room (fragmentation decides; the run says). (None, None, None) when no
    setting has even that window."""
    outside = max(r["outside_pytorch_bytes"] for r in verdict["ranks"])
    order = cost_order(verdict, measured)
    res = {s: max(c["max_memory_reserved"] for c in measured[s].values()) + outside for s in order}
    alloc = {s: max(c["max_memory_allocated"] for c in measured[s].values()) + outside
             for s in order}
    for basis, need in (("reserved", res), ("allocated", alloc)):
        best = (0.0, None, None)
        for k in range(1, len(order)):
            low, high = need[order[k]], min(alloc[s] for s in order[:k])
            if high > low and (high - low) / high > best[0]:
                best = ((high - low) / high, order[k], (low + high) // 2 >> 20 << 20)
        if best[1] is not None:
            return best[1], best[2], basis
    return None, None, None


def outcome(rc, counters):
    """'fits', 'OOM (rank R: N bytes)' or 'failed (exit N)' of a run."""
    ooms = [(r, c) for r, c in sorted(counters.items()) if c.get("exit_status") == 3]
    if ooms:
        return "OOM (rank %s)" % ", ".join("%d: %s bytes" % (r, c.get("oom_observer_bytes", "?"))
                                            for r, c in ooms)
    if rc == 0 and counters and all(c.get("exit_status") == 0 for c in counters.values()):
        return "fits (max reserved %d)" % max(c["max_memory_reserved"] for c in counters.values())
    return "failed (exit %d)" % rc


def oom_runs(v, order, measured, k, cap, outside):
    """(setting, role, wanted outcome) to execute at capacity cap: the
    baseline (OOM), the advisor's recommendation (fits) and every valid
    candidate the advisor ranks cheaper than it (OOM), measured at 80 GiB or
    not; with no recommendation (R:INSUFFICIENT) every setting that ran at 80
    GiB within cap on allocated bytes, K among them (OOM: nothing fits, the
    advisor says)."""
    runs = [("none", "baseline", "OOM")]
    chosen = next((c for c in v["candidates"] if c.get("chosen")), None) if v else None
    if chosen:
        runs.append((chosen["setting"], "recommended", "fits"))
        cheaper = sorted((c for c in v["candidates"] if c["valid"] and c is not chosen and
                          c["replay_cost_fraction"] < chosen["replay_cost_fraction"]),
                         key=lambda c: (c["replay_cost_fraction"], c["setting"]))
        runs += [(c["setting"], "cheaper", "OOM") for c in cheaper]
    else:
        runs += [(s, "cheapest that fits at 80 GiB" if s == k else "may fit", "OOM")
                 for s in order[1:]
                 if max(c["max_memory_allocated"] for c in measured[s].values()) + outside < cap]
    return runs


def do_oom_row(name, flags, outdir, build, env, a, measured, lines):
    """The row at a capacity its baseline does not fit (MOCK_CUDA_CAPACITY):
    the advisor's verdict for that budget from the 80 GiB baseline trace
    (headroom 0: the window is narrow and the fake GPU has no fragmentation
    of its own), then the runs of oom_runs executed at that capacity.
    Targets: the baseline and every cheaper setting run out of memory, the
    recommendation fits. Returns the number of targets missed."""
    verdict = a["verdict"]
    k, cap, basis = choose_capacity(verdict, measured)
    if k is None:
        lines.append("| %s | - | no capacity separates a setting from every cheaper one | "
                     "| | | |" % name)
        return 1
    v = verdict_at(build, os.path.join(outdir, name, "baseline"), cap, 0)
    v2 = verdict_at(build, os.path.join(outdir, name, "baseline"), cap, 2 << 30)
    outside = max(r["outside_pytorch_bytes"] for r in verdict["ranks"])
    runs = oom_runs(v, cost_order(verdict, measured), measured, k, cap, outside)
    env = dict(env, MOCK_CUDA_CAPACITY=str(cap))
    missed = 0
    lines.append("| %s | %d | verdict (headroom 0) %s; with the default 2 GiB headroom %s; "
                 "cheapest that fits at 80 GiB's measurements: %s (by %s bytes) | | | |"
                 % (name, cap, v["code"] if v else "none", v2["code"] if v2 else "none", k,
                    basis))
    for setting, role, want in runs:
        out = os.path.join(outdir, name, "oom-" + setting.replace("[", "_").replace("]", "")
                           .replace(",", "_"))
        c = next((c for c in (v or verdict)["candidates"] if c["setting"] == setting), None)
        rc, counters = run(out, flags + (setting_flags(c) if c else []), env)
        got = outcome(rc, counters)
        ok = got.startswith(want)
        missed += not ok
        pred = ("%d" % max(c["predicted_reserved_bytes"].values()) if c else
                "%d measured at 80 GiB" % max(x["max_memory_reserved"]
                                              for x in measured["none"].values()))
        if setting in measured and setting != "none":
            pred += " (80 GiB: %d allocated, %d reserved)" % (
                max(x["max_memory_allocated"] for x in measured[setting].values()),
                max(x["max_memory_reserved"] for x in measured[setting].values()))
        lines.append("| %s | %d | %s | %s | %s | %s | %s |" % (
            name, cap, setting, role, pred, got, "ok" if ok else "MISS (want %s)" % want))
    return missed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--markdown")
    ap.add_argument("--no-oom", action="store_true",
                    help="skip the OOM rows (MOCK_CUDA_CAPACITY below the baseline's need)")
    ap.add_argument("--reuse", action="store_true",
                    help="read a run already in OUTDIR with the same flags and capacity "
                         "instead of running it again (the advisor judged anew)")
    a = ap.parse_args()
    global REUSE
    REUSE = a.reuse
    build = os.environ.get("RS_BUILD_DIR") or os.path.join(ROOT, "build")
    env = dict(os.environ)
    lines = ["| row | setting | rank | predicted allocated | measured allocated | error | "
             "reserved predicted / measured |", "|---|---|---|---|---|---|---|"]
    oom = ["", "| row | capacity | setting | role | predicted reserved (max rank) | executed at "
           "that capacity | target |", "|---|---|---|---|---|---|---|"]
    misses = 0
    for name in a.rows.split(","):
        measured = {}
        m, base = do_row(name, ROWS[name].split() + COMMON, a.outdir, build, env, lines,
                         measured)
        misses += m
        if base is not None and not a.no_oom:
            misses += do_oom_row(name, ROWS[name].split() + COMMON, a.outdir, build, env, base,
                                 measured, oom)
    if not a.no_oom:
        lines += oom
    md = a.markdown or os.path.join(a.outdir, "megatron-core-matrix.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
