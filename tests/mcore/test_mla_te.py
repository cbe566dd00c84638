#!/usr/bin/env python3
"""Real Megatron-Core's MLA on Transformer Engine's spec: its ranges are
megasim's, and the advisor finds MLA's core attention and up-projection
(issue 16; docs/validation/megatron-core.md, the `mla` row).

The `mla` row's model (Moonlight-16B-A3B's attention: no q-LoRA,
kv_lora_rank 512, qk 128 + 64, v 128, latent norms, unfused RoPE; a dense
SwiGLU MLP) at sequence 1024, 2 layers, 2 ranks (DP=2, distributed
optimizer), 2 iterations, under the shim (tools/mcore_job/run.sh: TE 2.12.0,
its unfused attention). Checks:

  1. both ranks finish and MLASelfAttention and TEDotProductAttention were
     built;
  2. inside each forward `self_attention` the real library pushes exactly
     the ranges megasim's MLA pushes (tests/megasim/test_mla_ranges.py
     MLA_FORWARD: TE's C API calls only, no Megatron range), and its
     backward one softmax backward per layer;
  3. the advisor finds both regions from the Python frames: neither label
     is of unknown effect; selective[core_attn] lowers the predicted peak by
     at least the saved probabilities (layers x b x n x s^2 bf16) and
     selective[mla_up_proj] by at least the discarded Q, K and V (layers x
     s x b x n x (2 x 192 + 128) bf16, less the kv latent the checkpoint
     keeps); before, core_attn was of unknown effect and mla_up_proj
     "ineffective, -0 B" where the real runs save 256 MiB and 85 MiB.

Exit 77 (SKIP) as test_te_iter.py: no PyPI or CPython 3.12, or TE's
PyTorch extension not built (RECOMPSHIM_TE_BUILD=1 asks for the 30-60 minute
build).
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "megasim"))
import test_mcore as tm  # noqa: E402  (run_job, analyze, check)
import test_te_iter as ti  # noqa: E402  (te_built)
from test_mla_ranges import MLA_BACKWARD, MLA_FORWARD, MODEL, layer_ranges  # noqa: E402

LAYERS, MBS, HEADS, SEQ, ITERS = 2, 1, 16, 1024, 2
FLAGS = [f for f in MODEL if f not in ("--attention-backend", "unfused")]


def main():
    build = os.environ.get("RS_BUILD_DIR") or os.path.join(tm.ROOT, "build")
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(build, "tests", "mcore", "out-mla-te")
    if ti.skip_without_te(build):
        return 77
    t0 = time.time()
    rc, counters = tm.run_job(out, FLAGS)
    tm.check(rc == 0 and sorted(counters) == [0, 1] and
             all(c["exit_status"] == 0 for c in counters.values()),
             "MLA on TE's spec: exit 0 on both ranks (see %s/job.log)" % out)
    for r, c in sorted(counters.items()):
        missing = [m for m in ("MLASelfAttention", "TEDotProductAttention")
                   if m not in c.get("module_classes", [])]
        tm.check(not missing, "rank %d: MLA's modules built (missing: %s)" % (r, missing))
    import glob
    traces = sorted(glob.glob(os.path.join(out, "traces", "*", "rank0-*.rstrace")))
    layers, others = (layer_ranges(os.path.join(build, "tools", "recomp-dump"), traces[0])
                      if traces else ([], {}))
    tm.check(len(layers) == LAYERS * ITERS and all(x == MLA_FORWARD for x in layers),
             "rank 0: inside each of %d forward self_attention ranges only megasim's MLA "
             "ranges %s (got %s)" % (LAYERS * ITERS, MLA_FORWARD,
                                     [x for x in layers if x != MLA_FORWARD][:1] or len(layers)))
    bwd = sum(n.count(MLA_BACKWARD) for n in others.values())
    tm.check(bwd == LAYERS * ITERS, "rank 0: %s once per layer backward (%d)"
             % (MLA_BACKWARD, bwd))
    a = tm.analyze(build, out)
    if not tm.check(a is not None, "recomp-analyze reads the run"):
        return 1
    v = a["verdict"]
    cands = {c["setting"]: c for c in v["candidates"]}
    peak = max(r["predicted_peak_bytes"] for r in v["ranks"])
    probs = LAYERS * MBS * HEADS * SEQ * SEQ * 2
    qkv = LAYERS * SEQ * MBS * HEADS * (2 * 192 + 128) * 2
    latent = LAYERS * SEQ * MBS * (512 + 64) * 2
    for lab, least in (("core_attn", probs), ("mla_up_proj", qkv - latent)):
        c = cands.get("selective[%s]" % lab)
        got = c and peak - max(c["predicted_peak_bytes"].values())
        tm.check(c is not None and not c.get("reason", "").startswith("unknown effect") and
                 "%s: no region recorded" % lab not in v.get("note", "") and
                 got is not None and got >= least,
                 "selective[%s] lowers the predicted peak by %s bytes, at least %d (%s)"
                 % (lab, got, least, c and c.get("reason", "")[:100]))
    print("# %d failed; %.0f s" % (len(tm.failures), time.time() - t0))
    return 1 if tm.failures else 0


if __name__ == "__main__":
    sys.exit(main())
