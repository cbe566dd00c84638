#!/usr/bin/env python3
"""A hybrid Mamba/attention model's OOM (issue 21, TAP): megasim's Nemotron-H-like
job cut to 14 layers (tests/scenarios.py HYBRID_JOB: pattern M-M*-M-M-M*-M-, h 2048,
Mamba-2 with 64 heads of 64, state 128, 8 groups, s 8192, one microbatch) on a
15.8 GiB device, under the real shim.

Bytes (docs/megasim.md "Hybrid Mamba layers (derivation)"): each Mamba layer's
forward keeps, besides its in_proj norm output (32 MiB, boundary layernorm: the
norm is TE's, fused into in_proj), the b-l-d copy of in_proj's output zxbcdt
(2 x 8192 x (2 x 4096 + 2 x 8 x 128 + 64) = 161 MiB, a 162 MiB block: PyTorch's
allocator does not split a 2 MiB-rounded segment's 1 MiB remainder), the scan's
out_x, the gated norm's input and out_proj's input (64 MiB each), the norm's fp32
rstd (256 KiB) and its output hidden state (32 MiB): boundary mamba. The attention
and MLP layers hold none of it.

Megatron-Core 0.19.2 has no recompute label for Mamba layers: core_attn reaches
the two attention layers (TE fused: the softmax statistics only), mlp the six MLP
layers, layernorm nothing (every norm is fused), and full recompute checkpoints
every layer. The advisor must diagnose the OOM: candidates only among those
settings, never layernorm, a Mamba label or core_attn as the verdict; mlp is not
enough; the verdict is a full recompute that megasim runs to completion within
2% of its predicted peak; megasim running mlp peaks within 2% of its prediction.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_advisor as ta  # noqa: E402  (megasim runs, recomp-analyze, TAP)

MIB = 1 << 20
X = 2 * 8192 * 2048                      # a hidden state, bf16
Y = 2 * 8192 * 4096                      # d_inner wide
MAMBA = 162 * MIB + 3 * Y + 4 * 8192 * 8 + X
PATTERN = "M-M*-M-M-M*-M-"


def boundary_by_layer(peak, boundary):
    out = {}
    for c in peak["contributors"]:
        if c["boundary"] == boundary and c["phase"] == "forward" and c["layer"]:
            out[c["layer"]] = out.get(c["layer"], 0) + c["bytes"]
    return out


def rerun(flags, cap, change):
    run, rc, tmp, err = ta.run_megasim(flags + change.split(), cap)
    doc = ta.analyze(run) if run else None
    shutil.rmtree(tmp, ignore_errors=True)
    return rc, doc


def main():
    flags = ta.flagsets.HYBRID_JOB + ta.PROFILE
    cap = ta.flagsets.HYBRID_JOB_CAP
    run, rc, tmp, err = ta.run_megasim(flags, cap)
    if not ta.ok(rc == 1 and run, "hybrid: megasim runs out of memory (exit 1)", err[-1500:]):
        print("1..%d" % ta.TAP.n)
        return 0
    doc = ta.analyze(run)
    shutil.rmtree(tmp, ignore_errors=True)
    r = doc["ranks"][0]
    mamba = boundary_by_layer(r["peak"], "mamba")
    # layers 1..14 in the pattern's order; the first GEMM of the run (layer 1's in_proj)
    # also makes TE's cuBLAS workspace
    want = {i + 1: MAMBA for i, s in enumerate(PATTERN) if s == "M" and i > 0}
    ta.ok({k: v for k, v in mamba.items() if k > 1} == want,
          "hybrid: each Mamba layer holds its derivation's bytes as boundary mamba, no other "
          "layer any", mamba)
    v = doc["verdict"]
    detail = "%s: %s" % (v["code"], v["why"][:700])
    ta.ok(v["code"].startswith("R:FULL["), "hybrid: the verdict is a full recompute (%s)"
          % v["code"], detail)
    for m in ("core_attn", "layernorm", "mamba", "R:INSUFFICIENT"):
        ta.ok(m not in v["code"], "hybrid: the verdict is not %s" % m, detail)
    settings = [c["setting"] for c in v["candidates"]]
    ta.ok(all(s in ("selective[core_attn]", "selective[mlp]") or s.startswith("full[")
              for s in settings),
          "hybrid: candidates only among core_attn, mlp and full recompute", settings)
    mlp = next((c for c in v["candidates"] if c["setting"] == "selective[mlp]"), None)
    ta.ok(mlp is not None and mlp["effect"] == "insufficient",
          "hybrid: selective[mlp] is insufficient (the Mamba layers keep theirs)", mlp)
    ta.ok(ta.finding(v, "R:INEFFECTIVE[core_attn]") is not None,
          "hybrid: core_attn is found ineffective (TE fused attention)", v["findings"])
    c = next((c for c in v["candidates"] if c["code"] == v["code"]), None)
    if ta.ok(c is not None and v["change"].startswith("--recompute-granularity"),
             "hybrid: the verdict is a candidate with its flags", v["change"]):
        rc2, d2 = rerun(flags, cap, v["change"])
        sp = ta.tensor_peaks(d2) if d2 else None
        ta.ok(rc2 == 0 and d2 and d2["verdict"]["code"] == "OK:FITS" and
              ta.within(c["predicted_peak_bytes"], sp),
              "hybrid: megasim with %s fits, peaks within 2%% of the prediction" % v["code"],
              {"rc": rc2, "sim": sp, "pred": c["predicted_peak_bytes"]})
    if mlp is not None:
        rc3, d3 = rerun(flags, cap, "--recompute-granularity selective --recompute-modules mlp")
        sp = ta.tensor_peaks(d3) if d3 else None
        ta.ok(d3 is not None and ta.within(mlp["predicted_peak_bytes"], sp),
              "hybrid: megasim with selective[mlp] peaks within 2% of the prediction",
              {"rc": rc3, "sim": sp, "pred": mlp["predicted_peak_bytes"]})
    print("1..%d" % ta.TAP.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
