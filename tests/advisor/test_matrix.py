#!/usr/bin/env python3
"""Every recompute label, active and inactive, on dense, MoE and MLA layers
(issue 14 item 11; docs/advisor.md "Recompute already on"), TAP.

For each small megasim model below, megasim runs once with no recompute,
once with each recompute label Megatron allows on that model, and once with
full recompute (block and uniform). Every run is both ground truth and a
source: recomp-analyze reads it (recompute active: its replays are matched to
their forward regions and undone; inactive: the label is applied) and
predicts every candidate setting; each prediction whose setting megasim also
ran is held to 2% of megasim's measured tensor-level peak on every rank
(PyTorch's reserved peak too, one check per model). So each label is checked active (run with it
on, predict it off and every other setting) and inactive (run without it,
predict it on), and every active run must match all of its units' replays.

The runs are shared between the checks: megasim runs each setting once per
model (25 small runs, two at a time).

Environment (tests/advisor/meson.build): RECOMP_SHIM, RECOMP_ANALYZE,
MEGASIM_LIB_DIR, MEGASIM_PYDIR.
"""
import json
import os
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_advisor as ta  # noqa: E402  (megasim runner, analysis, TAP output)

PROFILE = ta.PROFILE
# dense: Llama-like (RMSNorm, SwiGLU, GQA, TE fused attention), PP=2, 4
# microbatches: the 1F1B schedule keeps two in flight on stage 0
DENSE = ["--sim-preset", "llama3-8b", "--num-layers", "4", "--hidden-size", "1024",
         "--ffn-hidden-size", "3584", "--num-attention-heads", "8", "--num-query-groups", "2",
         "--seq-length", "4096", "--max-position-embeddings", "4096", "--vocab-size", "32000",
         "--pipeline-model-parallel-size", "2", "--sim-world-size", "2",
         "--global-batch-size", "4", "--train-iters", "2"]
# MoE: the same with 3 of 4 layers MoE (grouped GEMM, shared experts)
MOE = DENSE + ["--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "1024",
               "--moe-shared-expert-intermediate-size", "1024", "--moe-grouped-gemm",
               "--moe-token-dispatcher-type", "alltoall", "--moe-layer-freq", "([0]+[1]*3)"]
# MLA (DeepSeek-V2-Lite-like: no RoPE fusion) with MoE layers, PP=2
MLA = ["--sim-preset", "deepseek-v2-lite", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "8", "--ffn-hidden-size", "3584", "--moe-ffn-hidden-size", "512",
       "--moe-shared-expert-intermediate-size", "1024", "--num-experts", "4",
       "--moe-layer-freq", "([0]+[1]*3)", "--tensor-model-parallel-size", "1",
       "--expert-model-parallel-size", "1", "--seq-length", "4096",
       "--max-position-embeddings", "4096", "--vocab-size", "32000",
       "--pipeline-model-parallel-size", "2", "--sim-world-size", "2",
       "--global-batch-size", "4", "--train-iters", "2"]
# the MLA model with a q latent, interleaved (one layer per virtual stage)
MLA_QLORA_VPP = MLA + ["--q-lora-rank", "1536", "--num-layers-per-virtual-pipeline-stage", "1",
                       "--train-iters", "3"]

# MLA on Transformer Engine's unfused attention, the shape of the real
# Megatron-Core `mla` row (docs/validation/megatron-core.md: Moonlight-16B-A3B's
# attention, no query compression, latent norms, unfused RoPE, a dense SwiGLU
# MLP, 2 layers, DP 2): megatron-core 0.19.2's MLASelfAttention pushes no range
# inside self_attention and TE's unfused attention makes no attention call, so
# core_attn and mla_up_proj are found from the Python frames (catalog.def) and
# the value/query shapes; core_attn was called unknown and mla_up_proj
# ineffective there, where the real runs saved 256 MiB and 85 MiB
MLA_TE_UNFUSED = ["--num-layers", "2", "--hidden-size", "2048", "--ffn-hidden-size", "11264",
                  "--num-attention-heads", "16", "--multi-latent-attention", "--kv-lora-rank",
                  "512", "--qk-head-dim", "128", "--qk-pos-emb-head-dim", "64", "--v-head-dim",
                  "128", "--qk-layernorm", "--no-rope-fusion", "--seq-length", "2048",
                  "--max-position-embeddings", "2048", "--micro-batch-size", "1",
                  "--global-batch-size", "2", "--normalization", "RMSNorm", "--swiglu",
                  "--disable-bias-linear", "--position-embedding-type", "rope",
                  "--untie-embeddings-and-output-weights", "--transformer-impl",
                  "transformer_engine", "--attention-backend", "unfused", "--bf16",
                  "--use-distributed-optimizer", "--attention-dropout", "0", "--hidden-dropout",
                  "0", "--sim-world-size", "2", "--train-iters", "2"]

# Megatron's defaults (megatron/training/arguments.py: --hidden-dropout and
# --attention-dropout 0.1), which the presets above turn off
DROPOUT = ["--hidden-dropout", "0.1", "--attention-dropout", "0.1"]

FULL = {"full[block,1]": ["--recompute-granularity", "full", "--recompute-method", "block",
                          "--recompute-num-layers", "1"],
        "full[uniform,1]": ["--recompute-granularity", "full", "--recompute-method", "uniform",
                            "--recompute-num-layers", "1"]}

# known gaps, reported as TAP TODO (meson flags an unexpected pass: then drop
# the entry): (model, run, predicted setting) -> why
KNOWN = {}
# reserved bytes (the allocator cache model along each candidate's own timeline,
# advisor_cache.c) per model
KNOWN_RESERVED = {
    # issue 16 gave megasim's MLA the real library's tensors (the q norm fused
    # into linear_q_proj, TE's contiguous copy of kv_compressed, unfused RoPE's
    # saved cos and sin). From the trace with mla_up_proj on, the undone
    # trace's allocator model reserves 2.46% more than megasim without
    # recompute on rank 0 (none: 2,275,409,920 predicted, 2,220,883,968
    # measured; allocated +0.87%). Cause (segment_diff.py, rank 0;
    # over-predicted, conservative): the checkpoint's saved input, the KV
    # down-projection's 4,718,592-byte output, stays live into the layer's
    # backward in the undone stream; the run without recompute frees it at
    # the up-projection's exit, because the region saves TE's contiguous copy
    # of its kv slice, not the input. The trace does not show which (a region
    # op saving its input, a view of it, leaves no allocation), so the undo
    # keeps the recorded free (docs/validation/megatron-core.md, "megasim's
    # KNOWN_RESERVED entries"). Issue 14's undo fixes closed the rest: from
    # full recompute (fc2's output kept to the backward: +2.46%) and the
    # moe-unfused-act model's entry (fc1's output kept past the GLU's input
    # gradient: -4.35% / +2.73%), now within 2%
    "mla": "reserved from the mla_up_proj run: none +2.46% on rank 0 (the up-projection's "
           "input kept to the backward)",
}

# model -> (flags, the labels Megatron allows on it)
MODELS = {
    "dense": (DENSE, ["core_attn", "layernorm", "mlp"]),
    "moe": (MOE, ["core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts"]),
    "mla": (MLA, ["core_attn", "mla_up_proj", "layernorm", "mlp", "moe", "moe_act",
                  "shared_experts"]),
    "mla-te-unfused": (MLA_TE_UNFUSED, ["core_attn", "mla_up_proj", "layernorm", "mlp"]),
    # the dense model with the interleaved schedule (one layer per virtual
    # stage, 3 iterations): each model chunk's replay must sit at its own
    # backward, not at the next chunk's p2p-received input (freed by that
    # chunk's earlier backward): full and mlp were over-predicted by 6-10%
    # here, full by 21% on real Megatron-Core (tests/mcore/test_mcore_vpp.py).
    # From a run with full recompute on, each model chunk's instance saves
    # nothing of its own (one layer per chunk), so its backward job is found
    # from its input's backward free: replays were taken in forward order
    # before (the first chunk's took the last chunk's replay, which the
    # schedule runs first), 46 of 48 units matched, the rest 5-7% high
    "dense-vpp": (DENSE + ["--num-layers-per-virtual-pipeline-stage", "1", "--train-iters", "3"],
                  ["core_attn", "layernorm", "mlp"]),
    # issue 14 WRONG 1: Megatron's default dropout (0.1 hidden and attention):
    # each bias-dropout-add saves a mask, and a full-recompute replay makes the
    # layer's output before that mask; with full recompute on, the undo matched
    # 0 of its units and every candidate was predicted at the measured peak
    "dense-dropout": (DENSE + DROPOUT, ["core_attn", "layernorm", "mlp"]),
    "moe-dropout": (MOE + DROPOUT, ["core_attn", "mlp", "moe", "moe_act", "shared_experts"]),
    # issue 16: the experts' activation unfused (--no-bias-swiglu-fusion, as
    # the real Megatron-Core job runs it): autograd keeps silu's output, the
    # linear half plus the offset, their product and fc2 the weighted product,
    # four [tokens, ffn] tensors that moe_act frees; the advisor took the first
    # for the activation's output and freed one (+3.1% on the real library's
    # moe-grouped row, docs/validation/megatron-core.md; +2.7%/+4.3% here).
    # The expert FFN differs from the hidden size, as on the real row: with
    # both 1024 every expert tensor has one size and the undo, which matches
    # a discarded region's replay by block sizes alone, took the incoming
    # gradient for the activation's first intermediate (-2.0% from the
    # moe_act run to full[block,1]; not fixed)
    "moe-unfused-act": (MOE + ["--no-bias-swiglu-fusion", "--moe-ffn-hidden-size", "1408"],
                        ["moe_act", "moe"]),
    # issue 14 (a public report replayed: DeepSeek-V3 PP4 VPP4): MLA with a q
    # latent (--q-lora-rank), whose q LayerNorm output in linear_q_up_proj has
    # the latent's size, under the interleaved schedule with a dense first
    # layer and MoE layers (one layer per virtual stage: stage 0 holds the
    # dense layer 0 and the MoE layer 2). mla_up_proj's region began after
    # that output, taken for an input by its size: predicted +11% from the run
    # without it, the undo -9.5% from the run with it
    "mla-qlora-vpp": (MLA_QLORA_VPP, ["mla_up_proj", "layernorm", "moe_act", "mlp"]),
}


def setting_flags(setting):
    if setting == "none":
        return []
    if setting in FULL:
        return FULL[setting]
    m = re.match(r"selective\[(.*)\]", setting)
    return ["--recompute-granularity", "selective", "--recompute-modules"] + m.group(1).split(",")


def run_one(flags):
    """megasim under the shim, analysed: (doc or None, error text)"""
    run, rc, tmp, err = ta.run_megasim(flags)
    try:
        if rc != 0 or not run:
            return None, "exit %d: %s" % (rc, err[-800:])
        return ta.analyze(run), ""
    except RuntimeError as e:
        return None, str(e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def within(pred, sim):
    """per rank (str keys in pred): the errors above 2%, as lines"""
    bad = []
    for rk, s in sim.items():
        p = pred.get(str(rk))
        if p is None:
            bad.append("rank %d: no prediction" % rk)
        elif abs(p - s) > 0.02 * s:
            bad.append("rank %d: predicted %d, megasim %d (%+.2f%%)" %
                       (rk, p, s, 100.0 * (p - s) / s))
    return bad


def model(name, flags, labels, pool):
    settings = ["none"] + ["selective[%s]" % l for l in labels] + list(FULL)
    futs = {s: pool.submit(run_one, flags + PROFILE + setting_flags(s)) for s in settings}
    docs = {}
    for s in settings:
        doc, err = futs[s].result()
        if ta.ok(doc is not None, "%s: megasim runs %s" % (name, s), err):
            docs[s] = doc
    sim = {s: ta.tensor_peaks(d) for s, d in docs.items()}
    simr = {s: ta.reserved_peaks(d) for s, d in docs.items()}
    worst = 0.0
    reserved_bad = []
    for src, doc in docs.items():
        v = doc["verdict"]
        if src != "none":
            m = re.search(r"\((\d+) of (\d+) units", v.get("note", ""))
            what = "%s: run with %s on: every unit's replay matched to its forward" % (name, src)
            ok = m is not None and m.group(1) == m.group(2)
            if KNOWN.get((name, src, "matched")):
                todo(ok, what, KNOWN[(name, src, "matched")], v.get("note"))
            else:
                ta.ok(ok, what, v.get("note"))
        cand = {c["setting"]: c for c in v.get("candidates", [])}
        for dst in settings:
            if dst == src or dst not in docs:
                continue
            # each label inactive (from the run without it) and active (its
            # own run predicts no recompute) must be predicted, not skipped
            must = src == "none" or dst == "none"
            c = cand.get(dst)
            if c is None:
                gap = KNOWN.get((name, src, "matched"))
                if must and gap:
                    # an incomplete undo predicts nothing that depends on it
                    # (invariant 20): the match gap is why it is missing
                    todo(False, "%s: from %s, %s is a candidate" % (name, src, dst), gap,
                         str(sorted(cand)))
                elif must:
                    ta.ok(False, "%s: from %s, %s is a candidate" % (name, src, dst),
                          sorted(cand))
                continue
            bad = within(c["predicted_peak_bytes"], sim[dst])
            reserved_bad += ["from %s, %s: %s" % (src, dst, b)
                             for b in within(c["predicted_reserved_bytes"], simr[dst])]
            for rk, s in sim[dst].items():
                p = c["predicted_peak_bytes"].get(str(rk))
                if p:
                    worst = max(worst, abs(p - s) / s)
            what = ("%s: from the run with %s, %s predicted within 2%% of megasim on every "
                    "rank" % (name, src, dst))
            gap = KNOWN.get((name, src, dst))
            if gap:
                todo(not bad, what, gap, "\n".join(bad))
            else:
                ta.ok(not bad, what, "\n".join(bad))
    what = "%s: reserved peaks predicted within 2%% of megasim, every run and rank" % name
    if name in KNOWN_RESERVED:
        todo(not reserved_bad, what, KNOWN_RESERVED[name], "\n".join(reserved_bad))
    else:
        ta.ok(not reserved_bad, what, "\n".join(reserved_bad))
    print("# %s: worst allocated-peak error %.3f%%" % (name, worst * 100))
    sys.stdout.flush()


def todo(cond, name, why, detail=""):
    """a known gap (TAP TODO: an expected failure)"""
    ta.TAP.n += 1
    print("%s %d - %s # TODO known gap: %s" % ("ok" if cond else "not ok", ta.TAP.n, name, why))
    if not cond and detail:
        for line in str(detail).splitlines()[:20]:
            print("#   " + line)
    sys.stdout.flush()


def main():
    only = sys.argv[1:]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for name, (flags, labels) in MODELS.items():
            if not only or name in only:
                model(name, flags, labels, pool)
    print("1..%d" % ta.TAP.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
