#!/usr/bin/env python3
"""The recompute advisor against megasim, which executes the recompute
mechanisms (TAP).

Accuracy per preset: run megasim without recompute under the real shim, let
recomp-analyze predict every candidate's peak from that trace alone, run
megasim with each candidate: predicted and simulated tensor-level peaks agree
within 2% on every rank; the recommended candidate fits in its simulated run;
no candidate of lower modelled cost fits in simulation.

Scenarios (acceptance scenarios from public reports, docs/sources.md): megasim runs with the fault switches, asserting
the expected codes and the must-not list.

Environment (tests/advisor/meson.build): RECOMP_SHIM, RECOMP_ANALYZE,
MEGASIM_LIB_DIR, MEGASIM_PYDIR.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import scenarios as flagsets  # noqa: E402  (tests/scenarios.py: the flags, one place)
from harness import Tap  # noqa: E402  (tests/harness.py)

SHIM = os.environ["RECOMP_SHIM"]
ANALYZE = os.environ["RECOMP_ANALYZE"]
LIBDIR = os.environ["MEGASIM_LIB_DIR"]
PYDIR = os.environ["MEGASIM_PYDIR"]
GIB = 1 << 30


TAP = Tap()
ok = TAP.ok


def run_megasim(flags, capacity_gib=None):
    """megasim under the shim; returns (run dir, exit status, tmp root)"""
    out = tempfile.mkdtemp(prefix="advtest.")
    # the sanitizer tier (tools/sanitize.sh) preloads its runtime first
    preload = " ".join(p for p in (os.environ.get("RS_SANITIZER_RUNTIME"), SHIM) if p)
    env = dict(os.environ, MEGASIM_LIB_DIR=LIBDIR, PYTHONPATH=PYDIR, LD_PRELOAD=preload,
               RECOMPSHIM_OUT=out)
    if os.environ.get("RS_SANITIZER_RUNTIME"):
        # LeakSanitizer's tracer itself crashes (SIGSEGV in StopTheWorld) at
        # the exit of some multi-threaded megasim jobs; ASan and UBSan stay on,
        # the shim's leaks are checked by the integration tests
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    args = [sys.executable, "-m", "megasim"] + flags + ["--sim-quiet"]
    if capacity_gib:
        args += ["--sim-capacity-gib", str(capacity_gib)]
    p = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = [os.path.join(out, d) for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))]
    return (runs[0] if runs else None), p.returncode, out, p.stderr


def analyze(run, *extra):
    p = subprocess.run([ANALYZE, "--json"] + list(extra) + [run], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode:
        raise RuntimeError("recomp-analyze failed: %s" % p.stderr)
    return json.loads(p.stdout)


def tensor_peaks(doc):
    return {r["rank"]: r["peak"]["bytes"] for r in doc["ranks"] if r["peak"]}


def reserved_peaks(doc):
    """PyTorch's reserved peak per rank (the device-level peak's pytorch
    bytes, at least the reserved bytes at the tensor peak): what must fit the
    budget (issue 14 inv. 4)"""
    out = {}
    for r in doc["ranks"]:
        if not r["peak"]:
            continue
        dp = (r.get("device_peak") or {}).get("by_library", {}).get("pytorch", 0)
        out[r["rank"]] = max(dp, r["peak"].get("reserved_bytes") or 0)
    return out


def cand_flags(c):
    if c["setting"] == "none":
        return []
    if c.get("method"):
        return ["--recompute-granularity", "full", "--recompute-method", c["method"],
                "--recompute-num-layers", str(c["num_layers"])]
    return ["--recompute-granularity", "selective", "--recompute-modules"] + c["labels"]


SMALL = flagsets.SMALL
PROFILE = flagsets.PROFILE


def accuracy(preset):
    flags = SMALL[preset] + PROFILE
    run, rc, tmp, err = run_megasim(flags)
    if not ok(rc == 0 and run, "%s: baseline megasim run" % preset, err[-2000:]):
        return
    base = analyze(run)
    peaks = tensor_peaks(base)
    # a budget between the best candidate and the baseline, so a verdict is needed
    v0 = base["verdict"]
    cands = [c for c in v0["candidates"] if c["valid"]]
    ok(len(cands) >= 3, "%s: candidates evaluated (%d)" % (preset, len(cands)),
       json.dumps(v0, indent=1)[:3000])
    # issue 14 inv. 4: a prediction fits when its reserved peak (allocated +
    # the cache of its own timeline) is within capacity - outside - headroom
    lo = min(max(c["predicted_reserved_bytes"].values()) for c in cands)
    hi = max(r["predicted_reserved_bytes"] for r in v0["ranks"])
    headroom = 2 * GIB
    outside = max(r["outside_pytorch_bytes"] for r in v0["ranks"])
    lo = int(lo * 1.02)  # the prediction's error bound, charged before a fit
    helps = hi - lo > 64 << 20
    target = (lo + hi) // 2 if helps else hi - (64 << 20)
    budget = target + outside + headroom
    doc = analyze(run, "--budget", str(budget))
    v = doc["verdict"]
    sim = {}
    simr = {}
    worst = worst_r = 0.0
    for c in v["candidates"]:
        if not c["valid"]:
            continue
        r2, rc2, tmp2, err2 = run_megasim(flags + cand_flags(c))
        if not ok(rc2 == 0 and r2, "%s: megasim runs %s" % (preset, c["setting"]), err2[-1500:]):
            continue
        d2 = analyze(r2, "--no-advice")
        sp = tensor_peaks(d2)
        sim[c["setting"]] = sp
        simr[c["setting"]] = reserved_peaks(d2)
        errs = []
        for rk, pred in c["predicted_peak_bytes"].items():
            s = sp.get(int(rk))
            if s is None:
                continue
            rel = abs(pred - s) / s
            worst = max(worst, rel)
            if rel > 0.02:
                errs.append("rank %s predicted %d simulated %d (%.2f%%)" % (rk, pred, s, rel * 100))
        ok(not errs, "%s: %s predicted within 2%% on every rank" % (preset, c["setting"]),
           "\n".join(errs))
        errs = []
        for rk, pred in c["predicted_reserved_bytes"].items():
            s = simr[c["setting"]].get(int(rk))
            if s is None:
                continue
            rel = abs(pred - s) / s
            worst_r = max(worst_r, rel)
            if rel > 0.02:
                errs.append("rank %s predicted reserved %d simulated %d (%.2f%%)" %
                            (rk, pred, s, rel * 100))
        ok(not errs, "%s: %s reserved (allocator cache of its own timeline) predicted within "
           "2%% on every rank" % (preset, c["setting"]), "\n".join(errs))
        shutil.rmtree(tmp2, ignore_errors=True)
    print("# %s: worst prediction error %.3f%% (reserved %.3f%%)" % (preset, worst * 100,
                                                                     worst_r * 100))
    budgets = {r["rank"]: r["budget_bytes"] for r in v["ranks"]}

    def fits(setting, err=1.0):
        sp = simr.get(setting)
        return sp is not None and all(sp[rk] * err <= budgets[rk] for rk in sp)

    if not helps:
        # no setting lowers the reserved need (e.g. the last stage's output
        # layer and loss decide it): nothing fits, and megasim agrees
        # the verdict recommends no recompute setting: R:INSUFFICIENT, or a
        # triage code whose own lever fits (e.g. X:OPTIMIZER_STATE state_growth:
        # bf16 moments), never R:SELECTIVE/R:FULL or OK:FITS
        ok((v["code"] == "R:INSUFFICIENT" and "no recompute setting fits" in v["why"] or
            v["code"].startswith("X:")) and
           not [c["setting"] for c in v["candidates"] if c["valid"] and fits(c["setting"])],
           "%s: no setting lowers the reserved peak: none fits (verdict and megasim)" % preset,
           json.dumps({"code": v["code"], "why": v["why"], "sim": simr, "budgets": budgets}))
        shutil.rmtree(tmp, ignore_errors=True)
        return

    chosen = [c for c in v["candidates"] if c.get("chosen")]
    alt = lever_alternative(v)
    if alt:  # rule 45: the recompute setting named beside the lever is judged
        chosen = [alt]
    if v["code"].startswith("R:") or alt:
        ok(chosen and fits(chosen[0]["setting"]),
           "%s: recommended %s fits in simulation" % (preset, v["code"]),
           json.dumps({"sim": sim.get(chosen[0]["setting"]) if chosen else None,
                       "budgets": budgets}))
        # a prediction must fit with the 2% error bound charged: a cheaper
        # setting that megasim shows fitting only inside that band is not a miss
        cheaper = [c["setting"] for c in v["candidates"]
                   if c["valid"] and chosen and c["replay_cost_fraction"] <
                   chosen[0]["replay_cost_fraction"] and fits(c["setting"], 1.02 * 1.02)]
        ok(not cheaper, "%s: no cheaper candidate fits in simulation" % preset, cheaper)
    else:
        ok(False, "%s: a recompute verdict under a budget below the peak" % preset,
           json.dumps(v, indent=1)[:3000])
    shutil.rmtree(tmp, ignore_errors=True)


def codes(v):
    return [f["code"] for f in v["findings"]]


def lever_alternative(v):
    """when a lever that costs no replay ranks ahead of recompute
    (docs/advisor.md rule 45: zero_replay_lever is the change), the candidate
    the why names as the cheapest recompute setting that would also fit, else
    None"""
    zr = v.get("zero_replay_lever") or {}
    if not zr or v.get("change") != zr.get("change"):
        return None
    m = re.search(r"the cheapest recompute setting that would also fit is (\S+) \(", v["why"])
    return next((c for c in v["candidates"] if m and c["setting"] == m.group(1)), None)


def scenario(name, flags, capacity, expect_code=None, expect_findings=(), must_not=(),
             extra=(), profile=None):
    run, rc, tmp, err = run_megasim(flags + (profile or PROFILE), capacity)
    if not ok(run is not None, "%s: megasim ran (exit %d)" % (name, rc), err[-1500:]):
        return None
    doc = analyze(run, *extra)
    v = doc["verdict"]
    detail = json.dumps({k: v[k] for k in ("code", "why", "findings")}, indent=1)[:3000]
    if expect_code:
        alt = lever_alternative(v) if expect_code.startswith("R:") else None
        got = alt["code"] if alt else v["code"]
        ok(got.startswith(expect_code), "%s: verdict %s (got %s%s)" % (
            name, expect_code, v["code"], ", the recompute setting beside its zero-replay "
            "lever %s" % got if alt else ""), detail)
    for f in expect_findings:
        ok(any(c.startswith(f) for c in codes(v)), "%s: finding %s" % (name, f), detail)
    for m in must_not:
        ok(m not in v["code"], "%s: verdict is not %s" % (name, m), detail)
    shutil.rmtree(tmp, ignore_errors=True)
    return v


def scenarios():
    L = SMALL["llama3-8b"]
    # R01: core_attn with fused attention is ineffective; never the fix
    scenario("R01", ["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "4096",
                     "--max-position-embeddings", "4096", "--global-batch-size", "2",
                     "--train-iters", "3"],
             None, expect_findings=["R:INEFFECTIVE[core_attn]"], must_not=["core_attn"],
             extra=["--budget", "40GiB"])
    # R06: OOM at the first optimizer step: optimizer state, no recompute label
    scenario("R06", ["--sim-preset", "llama3-8b", "--num-layers", "16", "--seq-length", "1024",
                     "--max-position-embeddings", "1024", "--global-batch-size", "1",
                     "--train-iters", "2"],
             46, expect_code="X:OPTIMIZER_STATE", must_not=["R:SELECTIVE", "R:FULL"])
    # R09: fragmentation from variably sized cast buffers: expandable segments
    scenario("R09", ["--sim-preset", "llama3-8b", "--num-layers", "24",
                     "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
                     "--sim-only-ranks", "0", "--use-distributed-optimizer",
                     "--global-batch-size", "8", "--train-iters", "3", "--sim-fragment",
                     "--sim-fragment-max-mib", "300"], 64,
             expect_code="X:FRAGMENTATION", must_not=["layernorm", "core_attn"])
    # R12: OOM while capturing TE CUDA graphs: the private pools, no recompute fix
    scenario("R12", ["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "2048",
                     "--max-position-embeddings", "2048", "--global-batch-size", "2",
                     "--train-iters", "3", "--cuda-graph-impl", "transformer_engine",
                     "--cuda-graph-warmup-steps", "1", "--sim-graph-pool-gib", "4"], 60,
             expect_code="X:CUDA_GRAPH_POOL",
             must_not=["X:FRAGMENTATION", "R:SELECTIVE", "R:FULL"])
    # R14: pipeline stage imbalance: the hot stage is a finding
    scenario("R14", ["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "2048",
                     "--max-position-embeddings", "2048", "--pipeline-model-parallel-size", "4",
                     "--sim-world-size", "4", "--global-batch-size", "8", "--train-iters", "3"],
             None, expect_findings=["X:HOT_RANK[pp="], must_not=["uniform"])


def finding(v, code):
    return next((f for f in v["findings"] if f["code"] == code), None)


# a small dense job whose parameters, grads and Adam state dominate less
SMALLJOB = flagsets.SMALLJOB


def colocated_pool():
    """a colocated inference engine's memory pool in the training process
    (issue 21): vLLM sleep mode's allocator maps 8 GiB with direct driver calls
    the shim does not see; the job fragments (the R09 shape). The engine refuses
    expandable segments, so the advice must not rest on them alone: it names the
    unseen bytes and max_split_size_mb below the failed request, and that
    setting lets the same job run."""
    flags, cap = flagsets.COLOCATED_POOL, flagsets.COLOCATED_POOL_CAP
    saved = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    try:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        run, rc, tmp, err = run_megasim(flags + PROFILE, cap)
        ok(rc == 1 and "AssertionError: Expandable segments are not compatible with memory "
           "pool." in err, "colocated pool: expandable_segments:True is refused at start "
           "(vLLM's assertion)", err[-800:])
        shutil.rmtree(tmp, ignore_errors=True)
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128"
        run, rc, tmp, err = run_megasim(flags + PROFILE, cap)
        ok(rc == 0, "colocated pool: with max_split_size_mb:128 the job runs", err[-800:])
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if saved is None:
            os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        else:
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = saved
    run, rc, tmp, err = run_megasim(flags + PROFILE, cap)
    if not ok(run is not None and rc == 1, "colocated pool: megasim ran and ran out of memory",
              err[-800:]):
        return
    doc = analyze(run)
    shutil.rmtree(tmp, ignore_errors=True)
    v = doc["verdict"]
    # the bytes: the pool (8 GiB) and the context (512 MiB) only in cudaMemGetInfo
    r0 = v["ranks"][0]
    ok(r0["outside_pytorch_bytes"] == 8 * GIB + 512 * (1 << 20),
       "colocated pool: 8.5 GiB outside PyTorch (pool + context, from cudaMemGetInfo)", r0)
    f = finding(v, "X:FRAGMENTATION")
    ok(v["code"] == "X:FRAGMENTATION" and f is not None and
       f["subtype"] == "inactive_split_unseen",
       "colocated pool: verdict X:FRAGMENTATION, subtype inactive_split_unseen",
       json.dumps({"code": v["code"], "findings": v["findings"]})[:2000])
    ok(f is not None and "did not see 8.50 GiB" in f["evidence"] and
       "max_split_size_mb:128" in f["evidence"],
       "colocated pool: evidence names the unseen 8.5 GiB and max_split_size_mb:128",
       f and f["evidence"])
    ok(v["change"] != "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" and
       "max_split_size_mb" in v["change"] and "R:" not in v["code"],
       "colocated pool: the change does not rest on expandable segments alone", v["change"])


def nccl_starved():
    """NCCL's late buffers starved by PyTorch's cached pool (issue 21): runtime
    and driver doubles share one device memory state, so NCCL's cuMemCreate at
    a communicator's first collective fails while PyTorch's cache holds the
    room; the failure is NCCL's (its WARN line, ncclUnhandledCudaError), and
    the advisor names the cache, not recompute or the optimizer state."""
    flags = flagsets.NCCL_STARVED + ["--sim-resume-optimizer"] + PROFILE
    run, rc, tmp, err = run_megasim(flags, flagsets.NCCL_STARVED_CAP)
    if not ok(run is not None and rc == 1, "NCCL starved: megasim ran and failed (exit %d)" % rc,
              err[-1500:]):
        return
    ok("NCCL WARN Cuda failure 2 'out of memory'" in err and
       "torch.distributed.DistBackendError: NCCL error in: " in err and
       "unhandled cuda error (run with NCCL_DEBUG=INFO for details)" in err and
       "ncclUnhandledCudaError: Call to CUDA function failed." in err and
       "torch.OutOfMemoryError" not in err,
       "NCCL starved: the failure is NCCL's (WARN line, DistBackendError, "
       "ncclUnhandledCudaError), not PyTorch's OOM", err[-1500:])
    doc = analyze(run)
    shutil.rmtree(tmp, ignore_errors=True)
    v = doc["verdict"]
    o = doc["ranks"][0]["oom"]
    # the bytes: NCCL's third connect asks 1 GiB (1 GiB x the first communicator to
    # connect) while PyTorch holds 18.26 GiB reserved, 12.64 GiB allocated; the
    # connect is the grad sync's first collective, inside finalize_model_grads
    # (its Python frame says so before the collective's own record would)
    ok(o["library"] == "nccl" and o["requested_bytes"] == GIB and o["phase"] == "grad_sync" and
       o["iteration"] == 0, "NCCL starved: the failed request is NCCL's 1 GiB in iteration 0's "
       "grad sync", o)
    ok(v["code"] == "X:NCCL_BUFFERS", "NCCL starved: verdict X:NCCL_BUFFERS (got %s)" % v["code"],
       v["why"])
    bad = [c for c in codes(v) if c.startswith("R:SELECTIVE") or c.startswith("R:FULL")]
    ok(not bad and "X:OPTIMIZER_STATE" not in codes(v) and "R:" not in v["change"],
       "NCCL starved: must not advise recompute or the optimizer state", codes(v))
    f = finding(v, "X:NCCL_BUFFERS")
    if ok(f is not None and f["subtype"] == "cache_starved", "NCCL starved: subtype cache_starved",
          f):
        ok("the failing 1.00 GiB allocation was made by nccl" in f["evidence"] and
           "PyTorch's cache held 5.61 GiB reserved but unallocated" in f["evidence"] and
           "PyTorch's allocated 12.64 GiB + memory outside PyTorch up to 4.50 GiB + the request "
           "is 18.14 GiB, within the 23.25 GiB device" in f["evidence"],
           "NCCL starved: evidence (1 GiB request, 5.61 GiB cache, 18.14 of 23.25 GiB)",
           f["evidence"])
        ok("empty_cache()" in v["change"] and "expandable" not in v["change"],
           "NCCL starved: the change releases the cache", v["change"])
    # without the one-off transient (no resume) the same job runs at the same capacity
    run, rc, tmp, err = run_megasim(flagsets.NCCL_STARVED + PROFILE, flagsets.NCCL_STARVED_CAP)
    ok(run is not None and rc == 0 and "NCCL WARN" not in err,
       "NCCL starved control: without the resume's transient NCCL gets its buffers", err[-800:])
    if run:
        v = analyze(run)["verdict"]
        ok("X:NCCL_BUFFERS" not in codes(v), "NCCL starved control: no NCCL finding", codes(v))
    shutil.rmtree(tmp, ignore_errors=True)


def triage():
    """memory outside PyTorch failing or starved, and retention"""
    # NCCL's own buffers fail: 4 GiB per communicator, 8 communicators on a 30 GiB device
    v = scenario("NCCL failing", SMALLJOB + ["--global-batch-size", "2",
                                              "--sim-nccl-buffers-mib", "4096",
                                              "--sim-nccl-communicators", "4"], 30,
                 expect_code="X:NCCL_BUFFERS", must_not=["R:SELECTIVE", "R:FULL",
                                                         "X:FRAGMENTATION"])
    f = v and finding(v, "X:NCCL_BUFFERS")
    if ok(f is not None, "NCCL failing: finding"):
        ok(f["subtype"] == "nccl_failed" and f["rank"] == 0, "NCCL failing: subtype nccl_failed",
           f)
        ok("the failing 4.00 GiB allocation was made by nccl" in f["evidence"] and
           "outside PyTorch up to 28.50 GiB" in f["evidence"],
           "NCCL failing: evidence names the 4 GiB request and 28.5 GiB outside PyTorch "
           "(NCCL's 28 GiB and the 512 MiB context: one device memory state)",
           f["evidence"])
        ok("NCCL" in v["change"], "NCCL failing: the change leaves NCCL a margin", v["change"])
    nccl_starved()
    colocated_pool()
    # another process holds 10 GiB: PyTorch is starved; without it the job fits
    v = scenario("outside PyTorch starved", SMALLJOB + ["--global-batch-size", "2",
                                                         "--sim-foreign-gib", "10"], 24,
                 expect_code="X:NCCL_BUFFERS", must_not=["R:SELECTIVE", "R:FULL"])
    f = v and finding(v, "X:NCCL_BUFFERS")
    if ok(f is not None, "outside PyTorch starved: finding"):
        ok(f["subtype"] == "other_process", "starved: subtype other_process", f)
        ev = f["evidence"]
        ok("PyTorch's request of 56.00 MiB failed with 10.50 GiB of the 24.00 GiB device "
           "outside PyTorch" in ev and "context and other processes 10.50 GiB" in ev and
           "the job's own peak 16.71 GiB" in ev,
           "starved: evidence (56 MiB request, 10.5 GiB outside, peak 16.71 GiB)", ev)
        r0 = v["ranks"][0]
        ok(r0["outside_pytorch_bytes"] == 10 * GIB + 512 * (1 << 20),
           "starved: outside PyTorch 10.5 GiB in the budget", r0)
        ok(r0["baseline_peak_bytes"] + r0["allocator_cache_bytes"] + 2 * GIB <=
           r0["capacity_bytes"], "starved: the peak fits the device without the other process",
           r0)
    # the same job without the other process fits: no triage finding at all
    v = scenario("outside PyTorch control", SMALLJOB + ["--global-batch-size", "2"], 24,
                 expect_code="OK:FITS", must_not=["X:NCCL_BUFFERS"])
    ok(v is not None and not [c for c in codes(v) if c.startswith("X:")],
       "outside PyTorch control: no X: finding", v and codes(v))
    # retention: recompute replay outputs kept alive into the next iteration, 512 MiB
    # more each iteration; on a 24 GiB device the 3-iteration job ends long before
    # the margin is used up (the threshold is the margin, not a share of the budget)
    RETAIN = SMALLJOB + ["--global-batch-size", "8", "--sim-retain-replay",
                         "--recompute-granularity", "selective", "--recompute-modules", "mlp"]
    v = scenario("retention, margin left", RETAIN, 24, expect_code="OK:FITS",
                 must_not=["X:RETENTION"])
    ok(v is not None and finding(v, "X:RETENTION") is None,
       "retention, margin left: no finding", v and codes(v))
    # on a 20 GiB device the third iteration is over its budget
    v = scenario("retention", RETAIN, 20, expect_code="X:RETENTION",
                 must_not=["R:SELECTIVE", "R:FULL"])
    f = v and finding(v, "X:RETENTION")
    if ok(f is not None, "retention: finding"):
        ok(f["subtype"] == "growth", "retention: subtype growth", f)
        ok(f["evidence"].startswith("activation bytes of earlier iterations still live at the "
                                    "start of an iteration grow by 512.00 MiB per iteration "
                                    "(544.00 MiB at iteration 1, 1.03 GiB at iteration 2)"),
           "retention: 544 MiB of iteration 0 replay bytes alive in iteration 1, 512 MiB more "
           "each iteration", f["evidence"])
    # the control without the fault: no retention
    v = scenario("retention control", SMALLJOB + ["--global-batch-size", "8",
                                                   "--recompute-granularity", "selective",
                                                   "--recompute-modules", "mlp"], 24,
                 must_not=["X:RETENTION"])
    ok(v is not None and "X:RETENTION" not in codes(v), "retention control: no finding",
       v and codes(v))


def gib_of(text):
    """bytes of a report's '12.34 GiB' / '56.00 MiB'"""
    m = re.match(r"(-?[0-9.]+) (GiB|MiB|KiB|B)$", text.strip())
    return float(m.group(1)) * {"GiB": GIB, "MiB": 1 << 20, "KiB": 1024, "B": 1}[m.group(2)]


# the README main job (stage 0 only): OOM in iteration 1's forward after the first
# optimizer step made 14.96 GiB of Adam moments; full[block,2] fits
MAINJOB = ["--sim-preset", "llama3-8b", "--pipeline-model-parallel-size", "2",
           "--sim-world-size", "4", "--use-distributed-optimizer", "--global-batch-size", "8",
           "--train-iters", "3", "--sim-only-ranks", "0"]
PRECISION_AWARE = ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                   "--exp-avg-sq-dtype", "bf16"]
# scenarios as data (h14a's harness): name, megasim flags, capacity GiB, verdict code,
# findings that must be there, strings the verdict code must not hold
STATE_SCENARIOS = [
    ("state growth, recompute fits", MAINJOB, None, "R:FULL", ["X:OPTIMIZER_STATE"],
     ["X:OPTIMIZER_STATE", "R:SELECTIVE[layernorm]", "core_attn"]),
    ("state growth, recompute cannot help", SMALLJOB + ["--global-batch-size", "2"], 17,
     "X:OPTIMIZER_STATE", ["X:OPTIMIZER_STATE"], ["R:SELECTIVE", "R:FULL", "OK:FITS"]),
    ("state growth control: bf16 moments", MAINJOB + PRECISION_AWARE, None, "OK:FITS", [],
     ["X:OPTIMIZER_STATE"]),
]


def contributors(doc, rank=0):
    r = next(r for r in doc["ranks"] if r["rank"] == rank)
    return r, {(c["phase"], c["boundary"]): c["bytes"] for c in r["peak"]["contributors"]
               if c["layer"] is None}


def optimizer_state():
    """issue 14 item 7: optimizer state recognised by what it does"""
    for name, flags, cap, code, finds, must_not in STATE_SCENARIOS:
        v = scenario(name, flags, cap, expect_code=code, expect_findings=finds,
                     must_not=must_not)
        if v is None:
            continue
        f = finding(v, "X:OPTIMIZER_STATE")
        if finds:
            ok(f is not None and f["subtype"] == "state_growth", "%s: subtype state_growth" % name,
               f)
        else:
            ok(f is None, "%s: no optimizer-state finding" % name, f)
    # attribution: the Adam moments made inside the first optimizer step are
    # optimizer state (not grad_sync grads) and the step is said to create them
    run, rc, tmp, err = run_megasim(MAINJOB + PROFILE)
    doc = analyze(run)
    r, groups = contributors(doc)
    moments = groups.get(("optimizer_state_init", "optimizer_state"), 0)
    ok(rc != 0 and moments >= 14.9 * GIB and groups.get(("grad_sync", "grads"), 0) < GIB,
       "main job: 14.96 GiB of Adam moments live at the peak as optimizer_state_init, not "
       "grad_sync grads", groups)
    ok("allocates no state" not in r["steady_state"]["reason"] and
       r["steady_state"]["optimizer_state_init_iteration"] == 0,
       "main job: the first optimizer step (iteration 0) creates the state", r["steady_state"])
    f = finding(doc["verdict"], "X:OPTIMIZER_STATE")
    m = f and re.search(r"left (\S+ GiB) in .*halves fp32 Adam moments: up to -(\S+ GiB) "
                        r"\(peak (\S+ GiB)\)", f["evidence"])
    if ok(m is not None, "main job: the finding states the state bytes and the bf16 lever",
          f):
        ok(abs(gib_of(m.group(1)) - moments) < 0.01 * GIB,
           "main job: finding's state bytes = the optimizer_state_init bytes at the peak",
           (m.group(1), moments))
        # the lever's predicted peak against megasim running it
        run2, rc2, tmp2, err2 = run_megasim(MAINJOB + PRECISION_AWARE + PROFILE)
        doc2 = analyze(run2)
        r2, groups2 = contributors(doc2)
        sim = tensor_peaks(doc2)[0]
        ok(rc2 == 0 and abs(sim - gib_of(m.group(3))) <= 0.01 * GIB,
           "main job: bf16 moments predicted peak %s, megasim %.2f GiB" % (m.group(3), sim / GIB),
           err2[-800:])
        ok(abs(groups2.get(("optimizer_state_init", "optimizer_state"), 0) * 2 - moments) <
           0.01 * GIB, "main job: bf16 moments are half the fp32 ones", (groups2, moments))
        shutil.rmtree(tmp2, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


# the last of 2 pipeline stages of a 256k-vocabulary model: 7.81 GiB of fp32 logits
# per microbatch against 2.2 GiB of layer activations; 26 GiB device
LOGITS_JOB = ["--sim-preset", "llama3-8b", "--num-layers", "8", "--hidden-size", "2048",
              "--ffn-hidden-size", "7168", "--num-attention-heads", "16", "--seq-length", "8192",
              "--max-position-embeddings", "8192", "--vocab-size", "256000",
              "--pipeline-model-parallel-size", "2", "--sim-world-size", "2",
              "--sim-only-ranks", "1", "--global-batch-size", "2", "--train-iters", "3"]
# the fused loss without an fp32 copy of the logits: Transformer Engine's
# (analyzer/advise/advisor.h ADV_CE_LEVER)
TE_CE = ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]
LOGITS_SCENARIOS = [
    ("logits", LOGITS_JOB, 26, "X:LOGITS", ["X:LOGITS", "X:OPTIMIZER_STATE"],
     ["R:SELECTIVE", "R:FULL", "OK:FITS", "X:OPTIMIZER_STATE"]),
    ("logits control: fused loss", LOGITS_JOB + TE_CE, 26, "OK:FITS", [], ["X:LOGITS"]),
    # Megatron-Core's default fused loss (native) keeps the fp32 copy, as the
    # unfused one does (hplay8 B): the logits still decide the OOM
    ("logits: native fused loss", LOGITS_JOB + ["--cross-entropy-loss-fusion"], 26, "X:LOGITS",
     ["X:LOGITS"], ["R:SELECTIVE", "R:FULL", "OK:FITS"]),
]


def logits():
    """issue 14 item 10 (and 6: with optimizer state): X:LOGITS, its levers' bytes
    against megasim running the fused loss"""
    for name, flags, cap, code, finds, must_not in LOGITS_SCENARIOS:
        v = scenario(name, flags, cap, expect_code=code, expect_findings=finds,
                     must_not=must_not, profile=PROFILE_ALL)
        f = v and finding(v, "X:LOGITS")
        if not finds:
            ok(v is not None and f is None, "%s: no logits finding" % name, v and codes(v))
            continue
        if not ok(f is not None, "%s: finding" % name, v and codes(v)):
            continue
        ok(f["subtype"] == "oom_in_loss" and
           re.search(r"hold 11\.75 GiB at the OOM \(iteration \d+, forward; the loss 7\.81 GiB\)",
                     f["evidence"]) is not None,
           "%s: logits 3.94 GiB + the failed 7.81 GiB fp32 copy" % name, f["evidence"])
        want = " ".join(TE_CE[1:] if "--cross-entropy-loss-fusion" in flags else TE_CE)
        ok(v["change"] == want, "%s: change is TE's fused loss" % name, v["change"])
        m = re.search(r"drops the loss's fp32 copies of the logits \((\S+ GiB) at the OOM\): "
                      r"the peak without them (\S+ GiB)", f["evidence"])
        run, rc, tmp, err = run_megasim(LOGITS_JOB + TE_CE + PROFILE_ALL, cap)
        sim = tensor_peaks(analyze(run))[1]
        # the run replayed without the loss's copies, the rest of the iteration the
        # OOM cut estimated from the one before: within 0.5% (the model's bound is 2%)
        ok(m is not None and rc == 0 and abs(sim - gib_of(m.group(2))) <= 0.005 * sim,
           "%s: fused loss predicted peak %s, megasim %.2f GiB" %
           (name, m and m.group(2), sim / GIB), f["evidence"])
        shutil.rmtree(tmp, ignore_errors=True)


# a resumed job (PP=2) whose loaded state dict stays referenced on stage 0 through the
# first iteration; 16 GiB devices. Stage 1 is over its budget by its fp32 logits.
RESUME_JOB = ["--sim-preset", "llama3-8b", "--num-layers", "8", "--hidden-size", "2048",
              "--ffn-hidden-size", "7168", "--num-attention-heads", "16", "--seq-length", "4096",
              "--max-position-embeddings", "4096", "--pipeline-model-parallel-size", "2",
              "--sim-world-size", "2", "--global-batch-size", "4", "--train-iters", "3",
              "--sim-resume-optimizer"]
PARAM_SCENARIOS = [
    ("loaded state resident on stage 0", RESUME_JOB + ["--sim-resume-resident-stages", "0"], 16,
     "X:PARAM_STATE", ["X:PARAM_STATE", "X:LOGITS"], ["R:SELECTIVE", "R:FULL", "OK:FITS"]),
]
# issue 14 (public-report replays): an OOM while loading a checkpoint, or in the
# first forward with the loaded state still resident, was blamed on parameters
# (X:PARAM_STATE state_dominates, "shard the parameters"). Stage 0 of RESUME_JOB:
# at 12 GiB the load's optimizer-state initialisation (Megatron's init_state_fn)
# fails with the loaded copy (8 B/param) live; at 13.5 GiB the load fits and the
# first forward fails with the copy still referenced. Each: (name, flags, capacity,
# the cause's phrase in the evidence)
LOAD_OOM_SCENARIOS = [
    ("OOM inside the checkpoint load", RESUME_JOB + ["--sim-only-ranks", "0"], 12,
     "OOM came inside the load"),
    ("OOM in the first forward, loaded state resident",
     RESUME_JOB + ["--sim-only-ranks", "0", "--sim-resume-resident-stages", "0"], 13.5,
     "still live when the OOM cut the trace"),
]
# stage 0 of RESUME_JOB: embedding + 4 layers of h 2048; the loaded state holds
# 2 x its fp32 main params, 8 bytes per parameter
RESUME_P0 = 4 * (2048 * (16 + 16) * 128 + 16 * 128 * 2048 + 2 * 2048 + 3 * 2048 * 7168) + \
    128256 * 2048


def param_state():
    """issue 14 item 10: X:PARAM_STATE for a loaded state dict still resident in
    the first forward; its lever's peak against megasim without the fault"""
    for name, flags, cap, code, finds, must_not in PARAM_SCENARIOS:
        v = scenario(name, flags, cap, expect_code=code, expect_findings=finds,
                     must_not=must_not, profile=PROFILE_ALL)
        f = v and finding(v, "X:PARAM_STATE")
        if not ok(f is not None and f["subtype"] == "loaded_state" and f["rank"] == 0,
                  "%s: loaded_state on rank 0" % name, v and codes(v)):
            continue
        # stage 0: embedding + 4 layers of h 2048 (2 * main params of 4 bytes each)
        p0 = 4 * (2048 * (16 + 16) * 128 + 16 * 128 * 2048 + 2 * 2048 + 3 * 2048 * 7168) + \
            128256 * 2048
        m = re.match(r"the loaded state: (\S+ GiB) in (\d+) tensors", f["evidence"])
        ok(m is not None and abs(gib_of(m.group(1)) - 8 * p0) < 0.01 * GIB,
           "%s: the resident bytes are 8 bytes x %d stage-0 params" % (name, p0), f["evidence"])
        m = re.search(r"before the first step .*?: peak (\S+ GiB)", f["evidence"])
        run, rc, tmp, err = run_megasim(RESUME_JOB + PROFILE_ALL, cap)
        sim = tensor_peaks(analyze(run))[0]
        ok(m is not None and rc == 0 and abs(sim - gib_of(m.group(1))) <= 0.01 * GIB,
           "%s: predicted peak with the state dict dropped %s, megasim %.2f GiB" %
           (name, m and m.group(1), sim / GIB), f["evidence"])
        ok(v["change"].startswith("load the checkpoint to CPU"),
           "%s: the change names the loaded state's levers" % name, v["change"])
        shutil.rmtree(tmp, ignore_errors=True)
    load_oom()


def load_oom():
    """an OOM while loading a checkpoint, or in the first forward with the
    loaded copy resident: the verdict names the loaded state (8 bytes per
    stage-0 parameter) and its levers, never the parameters; a resume whose
    copy is freed after loading, and a job that loads nothing, get no
    loaded_state"""
    for name, flags, cap, phrase in LOAD_OOM_SCENARIOS:
        v = scenario(name, flags, cap, expect_code="X:PARAM_STATE",
                     expect_findings=["X:PARAM_STATE"],
                     must_not=["R:SELECTIVE", "R:FULL", "OK:FITS"], profile=PROFILE_ALL)
        if v is None:
            continue
        f = finding(v, "X:PARAM_STATE")
        ok(f is not None and f["subtype"] == "loaded_state" and phrase in f["evidence"] and
           v["why"].startswith("the loaded state: "),
           "%s: the primary is the loaded state (%s)" % (name, phrase), v["why"][:600])
        m = f and re.match(r"the loaded state: (\S+ GiB) in", f["evidence"])
        ok(m is not None and abs(gib_of(m.group(1)) - 8 * RESUME_P0) < 0.01 * GIB,
           "%s: its bytes are 8 bytes x %d stage-0 params" % (name, RESUME_P0),
           f and f["evidence"])
        ok(not any(x["subtype"] == "state_dominates" for x in v["findings"]) and
           "shard the parameters" not in v["change"] and
           "--ckpt-format torch_dist" not in v["change"] and
           "already loads a distributed checkpoint format" in v["change"] and
           "map_location='cpu'" in v["change"],
           "%s: not blamed on parameters; levers: CPU load, drop (the job is already on "
           "megasim's default distributed format, torch_dist: not offered it)" % name,
           json.dumps([v["change"]] + codes(v)))
    # on the legacy `torch` checkpoint format a distributed format is a lever
    # (invariant 29 of test_properties.py: never offered to a job already on one)
    name, flags, cap, _ = LOAD_OOM_SCENARIOS[0]
    v = scenario(name + ", legacy torch format", flags + ["--ckpt-format", "torch"], cap,
                 expect_code="X:PARAM_STATE", profile=PROFILE_ALL)
    if v is not None:
        ok("--ckpt-format torch_dist" in v["change"] and "map_location='cpu'" in v["change"],
           "%s, legacy torch format: levers CPU load, drop, a distributed format" % name,
           v["change"])
    # without Python frames the trace cannot tell the loaded copy from
    # parameters: the verdict says so instead of naming either with confidence
    os.environ["RECOMPSHIM_PYSTACK"] = "0"
    try:
        v = scenario(name + ", no Python frames", flags, cap, expect_code="X:PARAM_STATE",
                     profile=PROFILE_ALL)
    finally:
        del os.environ["RECOMPSHIM_PYSTACK"]
    ok(v is not None and "could not be told from parameters" in v["why"] and
       not any(x["subtype"] == "loaded_state" for x in v["findings"]),
       "%s, no Python frames: says the loaded state cannot be told from parameters" % name,
       v and v["why"][:600])
    # the controls: the same resume with its copy freed after loading fits 16 GiB;
    # a job that loads no checkpoint and whose parameters do not fit
    v = scenario("resume, copy freed after loading", RESUME_JOB + ["--sim-only-ranks", "0"], 16,
                 profile=PROFILE_ALL)
    ok(v is not None and not any(x["subtype"] == "loaded_state" for x in v["findings"]),
       "resume, copy freed after loading: no loaded_state", v and codes(v))
    v = scenario("no checkpoint, parameters do not fit",
                 [x for x in RESUME_JOB if x != "--sim-resume-optimizer"] +
                 ["--sim-only-ranks", "0"], 4.5, expect_code="X:PARAM_STATE",
                 profile=PROFILE_ALL)
    ok(v is not None and not any(x["subtype"] == "loaded_state" for x in v["findings"]),
       "no checkpoint, parameters do not fit: no loaded_state", v and codes(v))


# full_iteration CUDA graphs on a small job: capture in iteration 0 (the eager
# optimizer step then runs out of memory in the default pool: the graph pool holds
# the captured iteration) or in iteration 1 (the OOM inside the capture, with the
# default pool fragmented by --sim-fragment)
GRAPH_JOB = SMALLJOB[:-2] + ["--global-batch-size", "2", "--train-iters", "3",
                             "--cuda-graph-impl", "full_iteration", "--sim-fragment"]
GRAPH_SCENARIOS = [
    ("full_iteration: OOM after the capture, default pool",
     GRAPH_JOB + ["--cuda-graph-warmup-steps", "0"], 18, "X:CUDA_GRAPH_POOL",
     ["X:CUDA_GRAPH_POOL"], ["X:FRAGMENTATION", "R:SELECTIVE", "R:FULL", "OK:FITS"]),
    # the request fit the default pool's free bytes (the fragmentation finding),
    # but the rank's allocated peak alone (16.71 GiB with the first step's Adam
    # state) is over the device: run with expandable_segments:True it runs out
    # of memory again, so the allocator fix is a finding, not the verdict
    # (issue 14 class A, invariant 33); the state that decides it is
    ("full_iteration: OOM in the capture, fragmented default pool",
     GRAPH_JOB + ["--cuda-graph-warmup-steps", "1"], 17, "X:OPTIMIZER_STATE",
     ["X:FRAGMENTATION", "X:OPTIMIZER_STATE"], ["X:CUDA_GRAPH_POOL", "R:SELECTIVE", "R:FULL",
                                                 "OK:FITS"]),
]


def graph_oom():
    """issue 14 item 8: fragmentation or graph scope, from the allocator's own
    numbers, both stated; checked against megasim's allocator at the OOM"""
    for name, flags, cap, code, finds, must_not in GRAPH_SCENARIOS:
        v = scenario(name, flags, cap, expect_code=code, expect_findings=finds,
                     must_not=must_not, profile=PROFILE_ALL)
        code = finds[0]  # the graph finding, checked against megasim's allocator
        f = v and finding(v, code)
        run, rc, tmp, err = run_megasim(flags + PROFILE_ALL, cap)
        al = dict(re.findall(r"(\w+)=(\d+)", (re.findall(r"allocator at OOM: (.*)", err) or
                                                [""])[0]))
        shutil.rmtree(tmp, ignore_errors=True)
        if not ok(f is not None and al, "%s: finding and megasim's allocator line" % name,
                  err[-600:]):
            continue
        req = int(al["requested"])
        if code == "X:CUDA_GRAPH_POOL":
            m = re.search(r"private pools hold (\S+ \S+) .*non-graph pools had only (\S+ \S+) "
                          r"free", f["evidence"])
            ok(m is not None and f["subtype"] == "pool_grew" and
               abs(gib_of(m.group(1)) - int(al["private_pools"])) <= 0.01 * GIB and
               gib_of(m.group(2)) < req and
               abs(gib_of(m.group(2)) - int(al["inactive_split"])) <= 8 << 20,
               "%s: pools %s (megasim %d), non-graph free %s (megasim inactive split %d) < "
               "request %d" % (name, m and m.group(1), int(al["private_pools"]),
                               m and m.group(2), int(al["inactive_split"]), req), f["evidence"])
        else:
            m = re.search(r"non-graph pools held (\S+ \S+) free .*private pools hold (\S+ \S+),",
                          f["evidence"])
            ok(m is not None and f["subtype"] == "graph_default_pool" and
               req <= gib_of(m.group(1)) <= int(al["inactive_split"]) and
               abs(gib_of(m.group(2)) - int(al["private_pools"])) <= 0.01 * GIB,
               "%s: non-graph free %s >= request %d, within megasim's inactive split %d; pools "
               "%s (megasim %d)" % (name, m and m.group(1), req, int(al["inactive_split"]),
                                    m and m.group(2), int(al["private_pools"])), f["evidence"])


# every iteration profiled (Megatron's NVTX ranges give the iterations)
PROFILE_ALL = ["--profile", "--nvtx-ranges", "--profile-step-start", "0",
               "--profile-step-end", "100000"]
# a logging hook keeps 512 MiB of activations every iteration, 32 GiB device, a
# 60-iteration job; recorded for 4 iterations (--exit-interval 4), for its whole
# run (the OOM), or a 12-iteration job that ends before the memory runs out
LEAK = SMALLJOB[:-2] + ["--global-batch-size", "2", "--sim-leak-mib", "512"]
RETENTION_SCENARIOS = [
    ("leak, 4 of 60 iterations", LEAK + ["--train-iters", "60", "--exit-interval", "4"], 32,
     "X:RETENTION", ["X:RETENTION"], ["R:SELECTIVE", "R:FULL", "OK:FITS"]),
    ("leak, whole run to the OOM", LEAK + ["--train-iters", "60"], 32,
     "X:RETENTION", ["X:RETENTION", "X:FRAGMENTATION"], ["R:SELECTIVE", "R:FULL", "OK:FITS"]),
    ("leak, the job ends first", LEAK + ["--train-iters", "12", "--exit-interval", "4"], 32,
     "OK:FITS", [], ["X:RETENTION"]),
]


def retention_trend():
    """issue 14 item 9 (and 6: retention with fragmentation): growth per iteration
    and the projected OOM iteration against megasim running the whole job"""
    got = {}
    for name, flags, cap, code, finds, must_not in RETENTION_SCENARIOS:
        v = scenario(name, flags, cap, expect_code=code, expect_findings=finds,
                     must_not=must_not, profile=PROFILE_ALL)
        f = v and finding(v, "X:RETENTION")
        got[name] = (v, f)
        if finds:
            ok(f is not None and f["subtype"] == "growth" and
               f["evidence"].startswith("activation bytes of earlier iterations still live at "
                                        "the start of an iteration grow by 512.00 MiB per "
                                        "iteration"),
               "%s: growth of 512 MiB per iteration" % name, f)
        else:
            ok(v is not None and f is None, "%s: no retention finding" % name, f)
    # the projection from 4 iterations against the iteration megasim really dies in
    f4 = got["leak, 4 of 60 iterations"][1]
    run, rc, tmp, err = run_megasim(LEAK + ["--train-iters", "60"] + PROFILE_ALL, 32)
    doc = analyze(run)
    oom = doc["ranks"][0]["oom"]
    m = f4 and re.search(r"reaches the \S+ GiB device in iteration (\d+)", f4["evidence"])
    ok(m is not None and rc != 0 and oom is not None and
       abs(int(m.group(1)) - oom["iteration"]) <= 1,
       "leak: projected device OOM iteration %s, megasim's OOM in iteration %s" %
       (m and m.group(1), oom and oom["iteration"]), f4)
    shutil.rmtree(tmp, ignore_errors=True)


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared",
                        "fixtures", "real")


def not_megatron():
    """issue 5 + 7: imported jobs that are not Megatron get the triage and the
    Python functions holding the most activation bytes, never Megatron flags"""
    cs = os.path.join(FIXTURES, "cs336", "Wedsonlin", "medium_128_training_memory_snapshot.pickle")
    qw = os.path.join(FIXTURES, "tracelens", "mi300", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    if not os.path.exists(cs) or not os.path.exists(qw):
        print("# SKIP real fixtures absent (%s): not-Megatron checks skipped"
              % os.path.normpath(FIXTURES))
        return
    # issue 14 (2): a snapshot records no device capacity: the budget is
    # unknown, the verdict withheld (never OK:FITS, never judged against 0 B)
    doc = analyze(cs)
    v = doc["verdict"]
    ok(v["code"] == "n/a" and "unknown: pass --budget" in v["why"] and
       v["ranks"][0]["budget_bytes"] is None,
       "cs336 without --budget: budget unknown, verdict withheld",
       json.dumps({k: v[k] for k in ("code", "why", "ranks")})[:1500])
    ok("X:OPTIMIZER_STATE" in codes(v), "cs336 without --budget: the finding is still listed",
       codes(v))
    doc = analyze(cs, "--budget", "4GiB")
    v = doc["verdict"]
    ok(not v["configuration"]["megatron"], "cs336: not Megatron")
    ok(v["code"] == "X:OPTIMIZER_STATE", "cs336 on a 4 GiB budget: triage verdict "
       "X:OPTIMIZER_STATE", v["code"])
    flags = " ".join([v["change"]] + v["config_diff"] + [c.get("setting", "") for c in
                                                         v["candidates"]])
    ok("recompute" not in flags and not v["candidates"], "cs336: no Megatron recompute flags",
       flags)
    fns = [(f["function"], f["bytes"], f["count"], f["phase"]) for f in v["functions"]]
    ok(fns == [("cs336_basics/model.py:39:forward", 20480000, 1, "forward"),
               ("cs336_basics/nn_utils.py:18:cross_entropy", 512, 1, "forward")],
       "cs336: the functions holding activation bytes at the peak (model.py:39 forward "
       "20480000 B, nn_utils.py:18 cross_entropy 512 B)", fns)
    ok(not [f for f in v["functions"] if "optimizer.py" in f["function"]],
       "cs336: optimizer state is not listed as activations")
    contrib = doc["ranks"][0]["peak"]["contributors"]
    top = [(c["function"], c["phase"], c["bytes"]) for c in contrib if c["function"]][:3]
    ok(top == [("cs336_basics/optimizer.py:76:step", "optimizer_state_init", 1694699520),
               ("cs336_basics/optimizer.py:77:step", "optimizer_state_init", 1694699520),
               ("cs336_basics/optimizer.py:80:step", "optimizer_state_init", 125829120)],
       "cs336: contributors carry the allocating function; Adam moments in "
       "optimizer_state_init", top)
    doc = analyze(qw)
    v = doc["verdict"]
    fns = [(f["function"], f["bytes"]) for f in v["functions"]][:3]
    ok(fns == [("transformers/models/qwen2/modeling_qwen2.py:150:forward", 439615488),
               ("transformers/models/qwen2/modeling_qwen2.py:68:apply_rotary_pos_emb",
                439615488),
               ("transformers/models/qwen2/modeling_qwen2.py:56:forward", 180436992)],
       "Qwen Kineto trace: python_function frames name the activation holders", fns)
    ok("recompute" not in v["change"], "Qwen: no recompute flags", v["change"])
    # a native (Megatron) trace has no allocation sites: function is null
    run, rc, tmp, err = run_megasim(SMALLJOB + ["--global-batch-size", "1", "--train-iters", "2"])
    if ok(run is not None, "native trace ran"):
        d = analyze(run, "--no-advice")
        ok(all(c["function"] is None for c in d["ranks"][0]["peak"]["contributors"]),
           "native trace: contributors' function is null")
    shutil.rmtree(tmp, ignore_errors=True)


def sim_peak(flags, reserved=False):
    """megasim's tensor-level peaks per rank for a setting (None: it failed);
    reserved: (tensor-level, reserved) peaks"""
    r, rc, tmp, err = run_megasim(flags)
    if rc or not r:
        print("# megasim failed: " + err[-500:].replace("\n", "\n# "))
        return (None, None) if reserved else None
    d = analyze(r, "--no-advice")
    shutil.rmtree(tmp, ignore_errors=True)
    return (tensor_peaks(d), reserved_peaks(d)) if reserved else tensor_peaks(d)


def within(pred, sp, tol=0.02):
    return sp is not None and all(abs(p - sp[int(rk)]) / sp[int(rk)] <= tol
                                  for rk, p in pred.items())


def recompute_on():
    """issue 7: recompute already on. Candidates are complete settings on the
    trace with the active labels' replays undone: a useless active label is
    dropped, a cheaper fitting setting is recommended even when the current one
    fits, the current setting predicts its measured peak exactly, and the
    predictions for mlp alone and for no recompute agree with megasim running
    them."""
    base = SMALLJOB + ["--global-batch-size", "2"]
    cur = ["--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp"]
    run, rc, tmp, err = run_megasim(base + PROFILE + cur)
    if not ok(rc == 0 and run, "recompute on: megasim core_attn+mlp ran", err[-1500:]):
        return
    doc = analyze(run)
    measured = tensor_peaks(doc)
    v0 = doc["verdict"]
    cand = {c["setting"]: c for c in v0["candidates"]}
    ok("selective[core_attn,mlp]" in cand and "none" in cand and "selective[mlp]" in cand,
       "recompute on: candidates keep (core_attn,mlp), remove (mlp alone, none) and add",
       sorted(cand))
    curc = cand.get("selective[core_attn,mlp]")
    ok(curc and all(curc["predicted_peak_bytes"][str(rk)] == b for rk, b in measured.items()),
       "recompute on: the current setting (no-op) predicts the measured peak exactly",
       json.dumps({"cur": curc and curc["predicted_peak_bytes"], "measured": measured}))
    ok("matched to the forward regions" in v0["note"] and "(48 of 48 units" in v0["note"],
       "recompute on: every active unit's replay matched (48 of 48)", v0["note"])
    ok("R:INEFFECTIVE[core_attn]" in codes(v0), "recompute on: core_attn ineffective",
       codes(v0))
    # the current setting fits at 80 GiB, and so does no recompute: recommend dropping it
    ok(v0["code"] == "OK:FITS" and v0["change"].startswith("remove --recompute-granularity"),
       "recompute on, everything fits: drop recompute (OK:FITS, remove the flags)",
       json.dumps({k: v0[k] for k in ("code", "change", "why")}))
    # a budget that no recompute does not meet and mlp does with its 2% error
    # bound: halfway between the two. mlp fits clearly only when its reserved
    # step (one segment of the largest block served from the model's cache
    # after the undone stream departs from the recorded one: the logits) is
    # within that too; otherwise it is short only of that step (marginal,
    # 'unverified reserved') and is still recommended over the settings that
    # fit only without the 2% bound (rule 46)
    r0 = v0["ranks"][0]
    mlp_need = int(max(cand["selective[mlp]"]["predicted_reserved_bytes"].values()) * 1.02)
    mlp_step = max(cand["selective[mlp]"]["reserved_step_bytes"].values())
    target = (max(cand["none"]["predicted_reserved_bytes"].values()) + mlp_need) // 2
    mlp_clear = mlp_need + mlp_step <= target
    budget = target + r0["outside_pytorch_bytes"] + 2 * GIB
    v = analyze(run, "--budget", str(budget))["verdict"]
    detail = json.dumps({k: v[k] for k in ("code", "why", "change", "findings")},
                        indent=1)[:3000]
    if mlp_clear:
        ok(v["code"].startswith("R:") and "core_attn" not in v["code"] and
           "core_attn" not in v["change"],
           "recompute on: the recommendation drops core_attn (got %s)" % v["code"], detail)
    else:
        # every rewrite is marginal here, so the measured current setting is
        # the only clear fit: it is kept, and the why names the cheaper
        # setting judged marginal and core_attn's finding stands
        ok(v["code"] == "OK:FITS" and
           v["change"] == "none (keep selective[core_attn,mlp])" and
           "the cheapest clear fit. Cheaper, but judged marginal, not a clear fit: " in
           v["why"] and "R:INEFFECTIVE[core_attn]" in codes(v),
           "recompute on: every rewrite within one step of the budget: the current setting "
           "kept as the only clear fit, the cheaper marginal named", detail)
    cand = {c["setting"]: c for c in v["candidates"]}
    mlp_c = cand["selective[mlp]"]
    ok(cand["none"]["effect"] == "insufficient" and
       (mlp_c["effect"] == "fits" if mlp_clear else
        mlp_c["effect"] == "marginal" and mlp_c["reason"].startswith("unverified reserved")),
       "recompute on: none insufficient, mlp alone fits with its 2%% bound (%s)" %
       ("and its step" if mlp_clear else "short only of its reserved step"),
       json.dumps({k: (cand[k]["effect"], cand[k]["reason"][:120]) for k in cand}))
    budgets = {r["rank"]: r["budget_bytes"] for r in v["ranks"]}
    for setting, flags in (("selective[mlp]", ["--recompute-granularity", "selective",
                                                "--recompute-modules", "mlp"]),
                           ("none", [])):
        sp = sim_peak(base + PROFILE + flags)
        pred = cand[setting]["predicted_peak_bytes"]
        ok(within(pred, sp), "recompute on: %s predicted within 2%% of megasim" % setting,
           json.dumps({"pred": pred, "sim": sp}))
    chosen = [c for c in v["candidates"] if c["chosen"]]
    if not mlp_clear:
        # the run that confirms the marginal mlp: megasim executes it at the budget
        chosen = [mlp_c]
    if ok(len(chosen) == 1, "recompute on: one chosen candidate"):
        sp, sr = sim_peak(base + PROFILE + cand_flags(chosen[0]), reserved=True)
        ok(sp is not None and all(sr[rk] <= budgets[rk] for rk in sr) and
           within(chosen[0]["predicted_peak_bytes"], sp),
           "recompute on: the recommended %s fits in megasim, predicted within 2%%" %
           chosen[0]["setting"], json.dumps({"sim": sp, "budgets": budgets,
                                             "pred": chosen[0]["predicted_peak_bytes"]}))
    # nothing fits: the fallback never names an ineffective label
    v = analyze(run, "--budget", str(8 * GIB))["verdict"]
    ineff = [c[len("R:INEFFECTIVE["):-1] for c in codes(v) if c.startswith("R:INEFFECTIVE[")]
    ok(ineff and not [l for l in ineff if l in v["code"] or l in v["change"]],
       "nothing fits: the fallback %s names no ineffective label %s" % (v["code"], ineff),
       json.dumps({k: v[k] for k in ("code", "why", "change")}))
    shutil.rmtree(tmp, ignore_errors=True)
    # full recompute on: the cheaper selective and full-n alternatives are evaluated
    full = ["--recompute-granularity", "full", "--recompute-method", "uniform",
            "--recompute-num-layers", "1"]
    run, rc, tmp, err = run_megasim(base + PROFILE + full)
    if not ok(rc == 0 and run, "full on: megasim ran", err[-1500:]):
        return
    doc = analyze(run)
    v = doc["verdict"]
    cand = {c["setting"]: c for c in v["candidates"]}
    cur = cand.get("full[uniform,1]")
    ok(cur and all(cur["predicted_peak_bytes"][str(rk)] == b
                   for rk, b in tensor_peaks(doc).items()),
       "full on: the current setting predicts the measured peak exactly", cur)
    cheaper = [k for k, c in cand.items() if cur and c["replay_cost_fraction"] <
               cur["replay_cost_fraction"]]
    ok("selective[mlp]" in cheaper and "none" in cheaper and
       any(k.startswith("full[block") for k in cheaper),
       "full on: cheaper selective and full-block alternatives evaluated", sorted(cand))
    sp = sim_peak(base + PROFILE + ["--recompute-granularity", "selective",
                                    "--recompute-modules", "mlp"])
    ok(within(cand["selective[mlp]"]["predicted_peak_bytes"], sp),
       "full on: mlp alone predicted within 2% of megasim",
       json.dumps({"pred": cand["selective[mlp]"]["predicted_peak_bytes"], "sim": sp}))
    shutil.rmtree(tmp, ignore_errors=True)


def undo_moe_mla():
    """issue 14 item 11: recompute already on, MLA + MoE (Moonlight-like): every
    unit's replay is found although the caching allocator hands the replay
    blocks up to 1 MiB larger or smaller than the forward's (an unsplit cached
    block), and 'none' is predicted within 2% of megasim running it"""
    base = SMALL["moonlight-16b"] + PROFILE
    sp_none = sim_peak(base)
    full1 = ["--recompute-granularity", "full", "--recompute-method", "uniform",
             "--recompute-num-layers", "1"]
    sp_full1 = sim_peak(base + full1)
    for act, want in ((["--recompute-granularity", "selective", "--recompute-modules", "moe"],
                       (72, 72)),
                      (["--recompute-granularity", "selective", "--recompute-modules",
                        "shared_experts"], (72, 72)),
                      (["--recompute-granularity", "selective", "--recompute-modules",
                        "core_attn"], (96, 96)),
                      (["--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", "1"], (96, 96)),
                      (["--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", "2"], (48, 48))):
        run, rc, tmp, err = run_megasim(base + act)
        if not ok(rc == 0 and run, "undo %s: megasim ran" % " ".join(act), err[-800:]):
            continue
        v = analyze(run)["verdict"]
        m = re.search(r"\((\d+) of (\d+) units", v.get("note", ""))
        ok(m is not None and int(m.group(2)) == want[1] and int(m.group(1)) >= want[0],
           "undo %s: at least %d of %d units matched" % (" ".join(act), want[0], want[1]),
           v.get("note"))
        cand = {c["setting"]: c for c in v["candidates"]}
        ok("none" in cand and within(cand["none"]["predicted_peak_bytes"], sp_none),
           "undo %s: none predicted within 2%% of megasim" % " ".join(act),
           json.dumps({"pred": cand.get("none", {}).get("predicted_peak_bytes"),
                       "sim": sp_none}))
        # full recompute from a selective run is no longer predicted at the
        # no-recompute peak (the undone trace kept the groups' old start)
        if "selective" in act:
            ok("full[uniform,1]" in cand and
               within(cand["full[uniform,1]"]["predicted_peak_bytes"], sp_full1),
               "undo %s: full[uniform,1] predicted within 2%% of megasim" % " ".join(act),
               json.dumps({"pred": cand.get("full[uniform,1]", {}).get("predicted_peak_bytes"),
                           "sim": sp_full1}))
        shutil.rmtree(tmp, ignore_errors=True)


def noop():
    """issue 7 (4): a no-op candidate (layernorm on the dense TE spec, whose
    norms are fused into the linears) predicts the baseline peak exactly"""
    run, rc, tmp, err = run_megasim(SMALLJOB + ["--global-batch-size", "2"] + PROFILE)
    if not ok(rc == 0 and run, "no-op: megasim ran", err[-1500:]):
        return
    doc = analyze(run)
    v = doc["verdict"]
    ln = next((c for c in v["candidates"] if c["setting"] == "selective[layernorm]"), None)
    base = {str(r["rank"]): r["baseline_peak_bytes"] for r in v["ranks"]}
    meas = {str(rk): b for rk, b in tensor_peaks(doc).items()}
    ok(ln is not None and ln["predicted_peak_bytes"] == base == meas,
       "no-op: selective[layernorm] predicts the baseline (= measured) peak exactly",
       json.dumps({"layernorm": ln and ln["predicted_peak_bytes"], "baseline": base,
                   "measured": meas}))
    shutil.rmtree(tmp, ignore_errors=True)


R04 = flagsets.R04


def r04():
    """R04: MoE/MLA labels: moe_act insufficient, whole moe fits, core_attn does
    nothing; must-not core_attn, mlp (no dense MLP on the MoE layers), moe_act as
    a pass. megasim executes moe and moe_act to confirm."""
    run, rc, tmp, err = run_megasim(R04 + PROFILE)
    if not ok(rc == 0 and run, "R04: megasim ran", err[-1500:]):
        return
    base = analyze(run)
    v0 = base["verdict"]
    # issue 7 (4): the baseline is the measured tensor peak (11.77 GiB = 12.63e9 B: a
    # "12.63 vs 11.77" gap is GB against GiB), and layernorm (16 MiB per MoE/MLA
    # layer) is not 0.87 GiB below it
    meas = tensor_peaks(base)
    bl = {r["rank"]: r["baseline_peak_bytes"] for r in v0["ranks"]}
    ln = next((c for c in v0["candidates"] if c["setting"] == "selective[layernorm]"), None)
    ok(bl == meas and ln is not None and
       0 <= bl[0] - ln["predicted_peak_bytes"]["0"] < 128 * (1 << 20),
       "R04: baseline = measured peak; layernorm within 128 MiB below it",
       json.dumps({"baseline": bl, "measured": meas, "layernorm": ln and
                   ln["predicted_peak_bytes"]}))
    outside = max(r["outside_pytorch_bytes"] for r in v0["ranks"])
    # a budget that whole-moe clears with its 2% error bound and moe_act does
    # not clear at all (issue 14 inv. 4 and 22)
    c0 = {c["setting"]: c for c in v0["candidates"]}
    moe_r = max(c0["selective[moe]"]["predicted_reserved_bytes"].values())
    moe_s = max(c0["selective[moe]"]["reserved_step_bytes"].values())
    act_r = max(c0["selective[moe_act]"]["predicted_reserved_bytes"].values())
    # the budget halfway between what moe needs with the 2% bound and
    # moe_act's reserved peak, however megasim's layer sizes move (issue 16
    # grew its MLA layers to the real library's). moe's reserved step (one
    # segment of the largest block the model serves from its cache after the
    # rewrite departs: the 1.25 GiB logits) is larger than that gap, so no
    # budget has moe fit clearly and moe_act not at all: at this one moe is
    # short only of its step (marginal, 'unverified reserved', rule 46),
    # which it must say, and it still ranks before the settings that fit only
    # without the 2% bound
    need = int(moe_r * 1.02)
    ok(act_r > need + (16 << 20),
       "R04: moe_act reserves more than moe with its 2%% bound (%d > %d)" % (act_r, need))
    budget = (need + act_r) // 2 + outside + 2 * GIB
    moe_clear = need + moe_s <= (need + act_r) // 2
    v = analyze(run, "--budget", str(budget))["verdict"]
    detail = json.dumps({k: v[k] for k in ("code", "why", "findings")}, indent=1)[:3000]
    # rule 45: the fused loss also fits at no replay cost and ranks first; the
    # recompute setting named beside it is the one judged here
    alt = lever_alternative(v)
    ok((alt or {}).get("code", v["code"]) == "R:SELECTIVE[moe]",
       "R04: verdict R:SELECTIVE[moe] (got %s)" % v["code"], detail)
    ok("R:INEFFECTIVE[core_attn]" in codes(v), "R04: finding R:INEFFECTIVE[core_attn]", detail)
    for m in ("core_attn", "mlp", "moe_act"):
        ok(m not in v["code"] and m not in v["change"], "R04: verdict is not %s" % m, detail)
    cand = {c["setting"]: c for c in v["candidates"]}
    ok(cand.get("selective[moe_act]", {}).get("effect") == "insufficient",
       "R04: moe_act alone insufficient", cand.get("selective[moe_act]"))
    ok(cand.get("selective[core_attn]", {}).get("effect") == "ineffective",
       "R04: core_attn ineffective", cand.get("selective[core_attn]"))
    moe_c = cand.get("selective[moe]", {})
    ok((moe_c.get("effect") == "fits" if moe_clear else
        moe_c.get("effect") == "marginal" and
        moe_c.get("reason", "").startswith("unverified reserved")) and
       (moe_c.get("chosen") or alt == moe_c),
       "R04: whole moe fits with its 2%% bound (%s) and is chosen" %
       ("and its step" if moe_clear else "short only of its reserved step"), moe_c)
    ok(cand["selective[moe_act]"]["fails_at"] is not None and
       cand["selective[moe]"]["fails_at"] is None, "R04: fails_at set for moe_act only")
    ok(cand["selective[moe_act]"]["replay_cost_fraction"] <
       cand["selective[moe]"]["replay_cost_fraction"],
       "R04: moe_act is cheaper than moe (insufficient, not a pass)")
    budgets = {r["rank"]: r["budget_bytes"] for r in v["ranks"]}
    for setting, labels, fits in (("selective[moe]", ["moe"], True),
                                  ("selective[moe_act]", ["moe_act"], False)):
        r2, rc2, tmp2, err2 = run_megasim(R04 + PROFILE + ["--recompute-granularity", "selective",
                                                           "--recompute-modules"] + labels)
        if not ok(rc2 == 0 and r2, "R04: megasim runs %s" % setting, err2[-1500:]):
            continue
        d2 = analyze(r2, "--no-advice")
        sp, sr = tensor_peaks(d2), reserved_peaks(d2)
        pred = cand[setting]["predicted_peak_bytes"]
        errs = ["rank %s predicted %d simulated %d" % (rk, p, sp[int(rk)])
                for rk, p in pred.items() if abs(p - sp[int(rk)]) / sp[int(rk)] > 0.02]
        ok(not errs, "R04: %s predicted within 2%%" % setting, "\n".join(errs))
        ok(all(sr[rk] <= budgets[rk] for rk in sr) == fits,
           "R04: %s %s in simulation (reserved)" % (setting, "fits" if fits else "does not fit"),
           json.dumps({"sim reserved": sr, "budgets": budgets,
                       "predicted reserved": cand[setting]["predicted_reserved_bytes"]}))
        shutil.rmtree(tmp2, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


# R02 scaled down: PP=2 (4 layers per stage), 4 microbatches; a user's extra
# module (AuxEmbedding, 3 GiB of large-batch activations per microbatch) in the
# first layer of stage 0, whose checkpoint replay needs 7 GiB more; 18.5 GiB
# devices. Without recompute rank 0 peaks at 16.55 GiB (device ~17.5 of 18.5),
# rank 1 at 12.30.
R02 = flagsets.R02
R02_CAP = 18.5
FULL1 = ["--recompute-granularity", "full", "--recompute-method", "uniform",
         "--recompute-num-layers", "1"]


def r02():
    """R02: full recompute makes a PP job OOM in backward that fit without it.
    Run A (no recompute) fits; Run B (full uniform 1) OOMs in backward on rank 0,
    replaying the extra module inside the first layer group's checkpoint. The
    advisor on Run B: X:HOT_RANK[pp=0]; must-not: more recompute_num_layers,
    full recompute (which includes rank 1). The replay does more than its
    forward (the module's transient has no forward twin): undoing recompute
    takes those allocations out, so 'none' and 'selective[mlp]' match megasim,
    and every full candidate (which replays that group) makes them again: full
    is judged counter-productive and selective[mlp] is recommended."""
    ra, rca, tmpa, erra = run_megasim(R02 + PROFILE, R02_CAP)
    if not ok(rca == 0 and ra, "R02: run A (no recompute) fits", erra[-1500:]):
        return
    a_peaks = tensor_peaks(analyze(ra, "--no-advice"))
    # issue 14 item 11: from run A the module's replay was never seen: the full
    # candidates that fit are unverified, and the advice is not full recompute
    va = analyze(ra)["verdict"]
    fa = {c["setting"]: (c["effect"], c["reason"][:90]) for c in va["candidates"]
          if c["setting"].startswith("full[")}
    ok(fa and all(e != "fits" for e, _ in fa.values()) and
       any(e == "marginal" and r.startswith("unverified") for e, r in fa.values()) and
       not va["code"].startswith("R:FULL"),
       "R02: run A: full candidates unverified (the module's replay never recorded), "
       "the advice is not full recompute (got %s)" % va["code"], json.dumps(fa))
    shutil.rmtree(tmpa, ignore_errors=True)
    rb, rcb, tmpb, errb = run_megasim(R02 + PROFILE + FULL1, R02_CAP)
    if not ok(rcb != 0 and rb and "OutOfMemoryError" in errb,
              "R02: run B (full uniform 1) runs out of memory", errb[-1500:]):
        return
    doc = analyze(rb)
    r0 = next(r for r in doc["ranks"] if r["rank"] == 0)
    r1 = next(r for r in doc["ranks"] if r["rank"] == 1)
    ok(r0["oom"] is not None and r0["oom"].get("phase") == "backward" and r1["oom"] is None,
       "R02: run B OOMs in backward on rank 0 only",
       json.dumps({"r0": r0["oom"], "r1": r1["oom"]})[:1500])
    v = doc["verdict"]
    detail = json.dumps({k: v[k] for k in ("code", "why", "change", "findings")}, indent=1)[:3000]
    ok("X:HOT_RANK[pp=0]" in codes(v), "R02: finding X:HOT_RANK[pp=0]", detail)
    cand = {c["setting"]: c for c in v["candidates"]}
    ok("full[uniform,1]" in cand and "none" in cand and "selective[mlp]" in cand,
       "R02: current, none and selective[mlp] evaluated", sorted(cand))
    m = re.match(r"R:FULL\[(\w+),(\d+)\]", v["code"])
    ok(not (m and int(m.group(2)) > 1) and "recompute-num-layers 2" not in v["change"],
       "R02: must-not: no larger recompute_num_layers", detail)
    ok(not v["code"].startswith("R:FULL"),
         "R02: must-not: no full recompute (job-wide, so on rank 1 too)", detail)
    cur = cand.get("full[uniform,1]", {})
    alts = [cand[k]["max_predicted_peak_bytes"] for k in ("none", "selective[mlp]") if k in cand]
    ok(cur.get("effect") == "counter-productive" or
         (alts and min(alts) < cur.get("max_predicted_peak_bytes", 0)),
         "R02: full recompute judged net negative on rank 0",
         json.dumps({k: (c["max_predicted_peak_bytes"], c["effect"]) for k, c in cand.items()}))
    ok(v["code"] in ("R:SELECTIVE[mlp]", "OK:FITS"),
         "R02: recommends selective[mlp] or no recompute (got %s)" % v["code"], detail)
    none = cand.get("none", {}).get("predicted_peak_bytes", {})
    ok(none and within(none, a_peaks),
         "R02: none (recompute undone) predicted within 2% of run A",
         json.dumps({"pred": none, "run A": a_peaks}))
    budgets = {r["rank"]: r["budget_bytes"] for r in v["ranks"]}
    # every full-recompute candidate replays the module's group with its extra
    # work: none fits (megasim: full[uniform,2] runs out of memory below)
    fulls = {k: (c["max_predicted_peak_bytes"], c["effect"]) for k, c in cand.items()
             if k.startswith("full[")}
    ok(len(fulls) >= 2 and all(e == "counter-productive" for _, e in fulls.values()),
       "R02: every full candidate replays the extra work (counter-productive)",
       json.dumps(fulls))
    ok("without a forward twin" in v.get("note", ""),
       "R02: the report says the replays did more than their forward", v.get("note"))
    shutil.rmtree(tmpb, ignore_errors=True)
    # megasim executes the alternatives: mlp fits, more layers per group does not
    rm, rcm, tmpm, errm = run_megasim(R02 + PROFILE + ["--recompute-granularity", "selective",
                                                       "--recompute-modules", "mlp"], R02_CAP)
    if ok(rcm == 0 and rm, "R02: megasim selective[mlp] runs", errm[-1500:]):
        dm = analyze(rm, "--no-advice")
        sp, sr = tensor_peaks(dm), reserved_peaks(dm)
        ok(all(sr[rk] <= budgets[rk] for rk in sr), "R02: selective[mlp] fits in simulation "
           "(reserved)", json.dumps({"sim reserved": sr, "budgets": budgets}))
        pred = cand.get("selective[mlp]", {}).get("predicted_peak_bytes", {})
        ok(pred and within(pred, sp), "R02: selective[mlp] predicted within 2% of megasim",
             json.dumps({"pred": pred, "sim": sp}))
    shutil.rmtree(tmpm, ignore_errors=True)
    r2, rc2, tmp2, err2 = run_megasim(R02 + PROFILE + FULL1[:-1] + ["2"], R02_CAP)
    ok(rc2 != 0 and "OutOfMemoryError" in err2,
       "R02: megasim full[uniform,2] runs out of memory too (the must-not)", err2[-800:])
    shutil.rmtree(tmp2, ignore_errors=True)


def offload():
    """issue 21: optimizer CPU offload (Megatron-Core's HybridDeviceOptimizer). With
    the fraction at 0 the first Adam step's fp32 moments decide the OOM: the lever is a
    larger --optimizer-offload-fraction (never 16-bit moments: the hybrid optimizer's
    Adam takes no dtype flags); megasim running the recommended fraction fits, at or
    under the predicted peak (an upper bound: the parameter that crosses the threshold
    is offloaded too). Everything offloaded (the default fraction 1.0) fits."""
    flags, cap, _ = flagsets.SCENARIOS["offload-none"]
    v = scenario("offload none", flags[:-len(PROFILE)], cap, expect_code="X:OPTIMIZER_STATE",
                 expect_findings=["X:OPTIMIZER_STATE"],
                 must_not=["R:SELECTIVE", "R:FULL", "OK:FITS"])
    f = v and finding(v, "X:OPTIMIZER_STATE")
    if ok(f is not None, "offload none: state finding", v and codes(v)):
        ok("exp-avg-dtype bf16" not in v["change"] and "halves fp32 Adam moments" not in
           f["evidence"] and "do not apply" in f["evidence"],
           "offload none: no 16-bit-moments lever (the hybrid optimizer ignores the dtypes)",
           f["evidence"])
        m = re.match(r"--optimizer-offload-fraction ([0-9.]+)$", v["change"])
        pm = re.search(r"--optimizer-offload-fraction \S+ \(now 0.00\) .*?: -(\S+ GiB) "
                       r"\(peak (\S+ GiB)", f["evidence"])
        if ok(m is not None and pm is not None and 0 < float(m.group(1)) < 1,
              "offload none: the change is a fraction below 1 with its bytes",
              (v["change"], f["evidence"])):
            run, rc, tmp, err = run_megasim(OFFLOAD_BASE + ["--optimizer-offload-fraction",
                                                            m.group(1)] + PROFILE, cap)
            doc = analyze(run)
            sim = tensor_peaks(doc).get(0, 0)
            ok(rc == 0 and doc["verdict"]["code"] == "OK:FITS" and
               sim <= gib_of(pm.group(2)) + 0.01 * GIB,
               "offload none: megasim with --optimizer-offload-fraction %s fits, peak %.2f GiB "
               "<= predicted %s" % (m.group(1), sim / GIB, pm.group(2)),
               (rc, doc["verdict"]["code"], err[-600:]))
            shutil.rmtree(tmp, ignore_errors=True)
    flags, cap, _ = flagsets.SCENARIOS["offload-all"]
    v = scenario("offload all", flags[:-len(PROFILE)], cap, expect_code="OK:FITS",
                 must_not=["X:OPTIMIZER_STATE"])
    ok(v is not None and finding(v, "X:OPTIMIZER_STATE") is None,
       "offload all: no optimizer-state finding", v and codes(v))


OFFLOAD_BASE = flagsets.OFFLOAD


def seq_lengths():
    """issue 21: shapes that change. Every fourth microbatch is an 8192-token sample
    among 2048-token ones: X:SHAPE_OUTLIER names the 4x microbatches as a finding, the
    verdict is the recompute setting sized for them, and megasim running it with the
    same lengths peaks within 2% of the prediction and fits (selective[mlp]: full[block,2]
    fits only inside its 2% bound plus its reserved step, docs/advisor.md "Reserved
    uncertainty"). The same job with fixed 2048-token microbatches has no outlier."""
    flags, cap, _ = flagsets.SCENARIOS["seq-lengths"]
    # rule 45: the fused loss also fits at no replay cost and is the verdict
    # (X:LOGITS); the recompute setting named beside it is the one judged here
    v = scenario("seq lengths", flags[:-len(PROFILE)], cap, expect_code="R:",
                 expect_findings=["X:SHAPE_OUTLIER"], must_not=["OK:FITS"])
    f = v and finding(v, "X:SHAPE_OUTLIER")
    if ok(f is not None and "3 of the 12 recorded forward instances" in f["evidence"] and
          "(4.0x)" in f["evidence"] and "holds" in f["evidence"],
          "seq lengths: the three 8192-token microbatches, 4x the median, one live at the peak",
          f):
        c = lever_alternative(v) or next(c for c in v["candidates"] if c.get("chosen"))
        run, rc, tmp, err = run_megasim(flags + cand_flags(c), cap)
        doc = analyze(run)
        sim = tensor_peaks(doc).get(0, 0)
        pred = c["max_predicted_peak_bytes"]
        ok(rc == 0 and sim and abs(pred - sim) <= 0.02 * sim,
           "seq lengths: %s predicted %.2f GiB, megasim %.2f GiB (2%%)" %
           (c["setting"], pred / GIB, sim / GIB), err[-600:])
        shutil.rmtree(tmp, ignore_errors=True)
    run, rc, tmp, err = run_megasim(flagsets.SEQ_LENGTHS + PROFILE, cap)
    doc = analyze(run)
    ok(rc == 0 and finding(doc["verdict"], "X:SHAPE_OUTLIER") is None,
       "seq lengths control (fixed 2048 tokens): no outlier", codes(doc["verdict"]))
    shutil.rmtree(tmp, ignore_errors=True)


def checkpoint_save():
    """issue 21: a checkpoint save is its own phase (checkpoint_save) and its own
    cause. The fully reshardable optimizer state gathered with NCCL holds, per DP
    bucket and key, DP receive buffers and the sent shard on the device: (DP + 1) x
    P/DP x 4 bytes, P = 751,847,424 parameters (a hand count: embedding and output
    layer 128256 x 2048 each, the final norm, 4 layers of 56,627,200): 4.20 GiB on top
    of the state; X:CHECKPOINT_SAVE with the Gloo gather as the change, never a
    recompute setting. With the Gloo gather the save allocates nothing there."""
    P = 2 * 128256 * 2048 + 2048 + 4 * 56627200
    flags, cap, _ = flagsets.SCENARIOS["checkpoint-save"]
    v = scenario("checkpoint save", flags[:-len(PROFILE)], cap,
                 expect_code="X:CHECKPOINT_SAVE", expect_findings=["X:CHECKPOINT_SAVE"],
                 must_not=["R:SELECTIVE", "R:FULL", "OK:FITS", "X:FRAGMENTATION"])
    f = v and finding(v, "X:CHECKPOINT_SAVE")
    if ok(f is not None and f["subtype"] == "oom_in_save", "checkpoint save: OOM in the save",
          f):
        m = re.search(r"buffers hold (\S+ \S+) \(the failed request included\)", f["evidence"])
        ok(m is not None and abs(gib_of(m.group(1)) - 3 * ((P + 1) // 2) * 4) < 0.01 * GIB,
           "checkpoint save: the gather's buffers 3 x P/2 x 4 bytes (%d)" % (6 * P),
           f["evidence"])
        ok(v["change"].startswith("--distrib-optim-fully-reshardable-mem-efficient"),
           "checkpoint save: the change is the Gloo gather", v["change"])
        ok("phase checkpoint_save" in v["why"], "checkpoint save: the OOM's phase is named",
           v["why"])
    flags, cap, _ = flagsets.SCENARIOS["checkpoint-save-gloo"]
    run, rc, tmp, err = run_megasim(flags, cap)
    doc = analyze(run)
    ok(rc == 0 and doc["verdict"]["code"] != "X:CHECKPOINT_SAVE" and
       not any(c["phase"] == "checkpoint_save" for c in doc["ranks"][0]["peak"]["contributors"]),
       "checkpoint save, Gloo gather: the save fits and holds no device bytes at the peak",
       (rc, doc["verdict"]["code"], err[-600:]))
    shutil.rmtree(tmp, ignore_errors=True)


def fp8():
    """issue 21: FP8 runs out of memory where bf16 fits (NVIDIA/Megatron-LM issues
    1236/1237). The bf16 job fits (OK:FITS). With delayed scaling, TE's FP8 weight
    copies are made in the first microbatch's forward and kept for the run: forward
    state, not activations, so neither X:RETENTION nor X:SHAPE_OUTLIER (the first
    microbatch is not a longer sample), and no recompute setting is credited with
    removing them. The verdict is a recompute setting, never core_attn or layernorm;
    megasim running it fits, and every rank's peak is within 2% of the prediction
    (the counterfactual keeps the weight copies and replays the FP8 saved inputs)."""
    flags, cap, _ = flagsets.SCENARIOS["fp8-bf16-control"]
    run, rc, tmp, err = run_megasim(flags, cap)
    doc = analyze(run)
    ok(rc == 0 and doc["verdict"]["code"] == "OK:FITS", "fp8: the same job in bf16 fits",
       (rc, doc["verdict"]["code"], err[-600:]))
    shutil.rmtree(tmp, ignore_errors=True)
    flags, cap, _ = flagsets.SCENARIOS["fp8-delayed"]
    v = scenario("fp8 delayed", flags[:-len(PROFILE)], cap, expect_code="R:",
                 must_not=["OK:FITS", "R:SELECTIVE[core_attn]", "R:SELECTIVE[layernorm]",
                           "R:INSUFFICIENT"])
    if not v:
        return
    ok(finding(v, "X:RETENTION") is None and finding(v, "X:SHAPE_OUTLIER") is None,
       "fp8 delayed: the FP8 weight copies are neither retention nor a shape outlier",
       codes(v))
    c = next((c for c in v["candidates"] if c["code"] == v["code"]), None)
    if not ok(c is not None and v["change"].startswith("--recompute-granularity"),
              "fp8 delayed: the verdict is a candidate with its flags", v["change"]):
        return
    run, rc, tmp, err = run_megasim(flags + v["change"].split(), cap)
    doc = analyze(run)
    sp = tensor_peaks(doc)
    ok(rc == 0 and doc["verdict"]["code"] == "OK:FITS" and within(c["predicted_peak_bytes"], sp),
       "fp8 delayed: megasim with %s fits, peaks within 2%% of the prediction" % v["code"],
       json.dumps({"rc": rc, "code": doc["verdict"]["code"], "sim": sp,
                   "pred": c["predicted_peak_bytes"]}))
    shutil.rmtree(tmp, ignore_errors=True)


def retention_no_recompute():
    """issue 21: retention not tied to recompute. (a) A hook keeps 128 MiB after
    every microbatch's forward (4 per iteration): growth of exactly 512 MiB per
    iteration, and megasim's own OOM lands between the advisor's two projections
    (the budget's and the device's). (b) The last stage keeps each microbatch's bf16
    logits (2 s V bytes) until the step returns: X:RETENTION (step), never X:LOGITS
    or its fused-loss lever (the fused loss does not free kept logits); the peak
    predicted without them against megasim without the fault, within 2%."""
    flags, cap, _ = flagsets.SCENARIOS["leak-per-microbatch"]
    v = scenario("leak per microbatch", flags[:-len(flagsets.PROFILE_ALL)], cap,
                 expect_code="X:RETENTION", expect_findings=["X:RETENTION"],
                 must_not=["R:SELECTIVE", "R:FULL", "OK:FITS"], profile=flagsets.PROFILE_ALL)
    f = v and finding(v, "X:RETENTION")
    if ok(f is not None and f["subtype"] == "growth" and
          "grow by 512.00 MiB per iteration" in f["evidence"],
          "leak per microbatch: growth of 4 x 128 MiB per iteration", f):
        mb = re.search(r"passes the \S+ GiB left for allocations [^;]*? in iteration (\d+)",
                       f["evidence"])
        md = re.search(r"reaches the \S+ GiB device in iteration (\d+)", f["evidence"])
        run, rc, tmp, err = run_megasim(flagsets.LEAK_MICROBATCH + flagsets.PROFILE_ALL, cap)
        oom = analyze(run)["ranks"][0]["oom"]
        ok(mb and md and rc != 0 and oom and
           int(mb.group(1)) <= oom["iteration"] <= int(md.group(1)),
           "leak per microbatch: megasim's OOM (iteration %s) between the projected budget "
           "and device iterations (%s, %s)" % (oom and oom["iteration"], mb and mb.group(1),
                                               md and md.group(1)), f["evidence"])
        shutil.rmtree(tmp, ignore_errors=True)
    flags, cap, _ = flagsets.SCENARIOS["keep-outputs"]
    v = scenario("keep outputs", flags[:-len(PROFILE)], cap, expect_code="X:RETENTION",
                 expect_findings=["X:RETENTION"],
                 must_not=["X:LOGITS", "R:SELECTIVE", "R:FULL", "OK:FITS"])
    f = v and finding(v, "X:RETENTION")
    logits = 2 * 4096 * 128256
    if ok(f is not None and f["subtype"] == "step", "keep outputs: subtype step", f):
        m = re.match(r"(\S+ \S+) in (\d+) tensors made in iteration 0's forward \(the largest "
                     r"(\S+ \S+)\)", f["evidence"])
        ok(m is not None and abs(gib_of(m.group(1)) - 8 * logits) < 0.01 * GIB and
           m.group(2) == "8" and gib_of(m.group(3)) == logits,
           "keep outputs: 8 microbatches' bf16 logits kept (8 x %d bytes)" % logits,
           f["evidence"])
        ok("--cross-entropy-loss-fusion" not in v["change"] and "detach" in v["change"],
           "keep outputs: the change drops the references, not the fused loss", v["change"])
        p = re.search(r"would fit without them \((\S+ GiB)\)", f["evidence"])
        run, rc, tmp, err = run_megasim(flagsets.SMALLJOB + ["--global-batch-size", "8"] +
                                        PROFILE, cap)
        sim = tensor_peaks(analyze(run)).get(0, 0)
        ok(p is not None and rc == 0 and sim and abs(gib_of(p.group(1)) - sim) <= 0.02 * sim,
           "keep outputs: peak without the kept outputs %s, megasim without them %.2f GiB" %
           (p and p.group(1), sim / GIB), f["evidence"])
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    only = sys.argv[1:]
    for p in SMALL:
        if not only or p in only:
            accuracy(p)
    if not only or "scenarios" in only:
        scenarios()
    if not only or "R04" in only:
        r04()
    if not only or "R02" in only:
        r02()
    if not only or "triage" in only:
        triage()
    if not only or "graph-oom" in only:
        graph_oom()
    if not only or "param-state" in only:
        param_state()
    if not only or "logits" in only:
        logits()
    if not only or "retention-trend" in only:
        retention_trend()
    if not only or "optimizer-state" in only:
        optimizer_state()
    if not only or "offload" in only:
        offload()
    if not only or "retention-no-recompute" in only:
        retention_no_recompute()
    if not only or "checkpoint-save" in only:
        checkpoint_save()
    if not only or "seq-lengths" in only:
        seq_lengths()
    if not only or "fp8" in only:
        fp8()
    if not only or "recompute-on" in only:
        recompute_on()
    if not only or "undo-moe-mla" in only:
        undo_moe_mla()
    if not only or "noop" in only:
        noop()
    if not only or "not-megatron" in only:
        not_megatron()
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
