#!/usr/bin/env python3
"""megasim's MLA emits the ranges real Megatron-Core's does, and nothing
else (issue 16; docs/megasim.md "Checked since"), TAP.

megatron-core 0.19.2's MLASelfAttention.forward pushes no Megatron range
inside `self_attention`: an MLA layer on Transformer Engine's spec (TE 2.12.0,
its unfused attention, unfused RoPE, `--qk-layernorm`, no q-LoRA) shows only
TE's always-on C API ranges there, in the order MLA_FORWARD below (read from
the real `mla` row's trace, tools/mcore_job/accuracy.py, and checked on the
real library by tests/mcore/test_mla_te.py): the down-projection's GEMM, the
norm fused into linear_q_proj (a workspace query and a launch) and its GEMM,
the norm fused into linear_kv_up_proj and its GEMM, the unfused attention's
softmax, linear_proj's GEMM. In backward, one softmax backward per layer
(nvte_scaled_softmax_backward on the autograd thread). No nvte_fused_rope_*:
MLA's RoPE is never TE's.

megasim runs the same model (the real row's shape, smaller sequence) under
the shim; per layer forward the names pushed inside `self_attention` on the
main thread must equal MLA_FORWARD, and the backward thread must push
MLA_BACKWARD once per layer and microbatch.

Environment (tests/megasim/meson.build): RECOMP_SHIM, RECOMP_DUMP,
MEGASIM_LIB_DIR, MEGASIM_PYDIR.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# the range names inside one MLA layer's `self_attention` (forward), in order
MLA_FORWARD = ["nvte_cublas_gemm_v2",
               "nvte_rmsnorm_fwd", "nvte_rmsnorm_fwd", "nvte_cublas_gemm_v2",
               "nvte_rmsnorm_fwd", "nvte_rmsnorm_fwd", "nvte_cublas_gemm_v2",
               "nvte_scaled_masked_softmax_forward", "nvte_cublas_gemm_v2"]
MLA_BACKWARD = "nvte_scaled_softmax_backward"
SELF_ATTENTION = "._forward_attention.self_attention"
# the real `mla` row's model (tools/mcore_job/accuracy.py), sequence 1024
MODEL = ("--num-layers 2 --hidden-size 2048 --ffn-hidden-size 11264 --num-attention-heads 16 "
         "--multi-latent-attention --kv-lora-rank 512 --qk-head-dim 128 "
         "--qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm --seq-length 1024 "
         "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 2 "
         "--normalization RMSNorm --swiglu --disable-bias-linear "
         "--position-embedding-type rope --untie-embeddings-and-output-weights "
         "--transformer-impl transformer_engine --attention-backend unfused "
         "--train-iters 2 --bf16 --use-distributed-optimizer --attention-dropout 0 "
         "--hidden-dropout 0 --profile --nvtx-ranges --profile-step-start 0 "
         "--profile-step-end 2").split()
LAYERS, ITERS = 2, 2
results = []


def check(name, got, want):
    results.append((got == want, name, "" if got == want else "got %r want %r" % (got, want)))


def layer_ranges(dump, trace):
    """(per forward `self_attention` on the main thread: the names pushed
    inside it, in order; {tid: names pushed} of the other threads), from
    recomp-dump --jsonl of one trace"""
    p = subprocess.run([dump, "--jsonl", "--kind", "NVTX_PUSH,NVTX_POP", trace],
                       capture_output=True, text=True, check=True)
    main, stacks, layers, others = None, {}, [], {}
    for line in p.stdout.splitlines()[1:]:
        r = json.loads(line)
        tid = r["tid"]
        main = tid if main is None else main
        st = stacks.setdefault(tid, [])
        if r["kind"] == "NVTX_POP":
            if st:
                st.pop()
            continue
        name = r["name"]
        if tid != main:
            others.setdefault(tid, []).append(name)
        elif any(x.endswith(SELF_ATTENTION) for x in st):
            layers[-1].append(name)
        if tid == main and name.endswith(SELF_ATTENTION):
            layers.append([])
        st.append(name)
    return layers, others


def run_megasim(flags):
    """megasim under the shim, rank 0 only; its trace, or None"""
    from harness import preload
    tmp = tempfile.mkdtemp(prefix="mlaranges.", dir=os.environ.get("TMPDIR"))
    env = dict(os.environ, PYTHONPATH=os.environ["MEGASIM_PYDIR"],
               LD_PRELOAD=preload(os.environ["RECOMP_SHIM"]), RECOMPSHIM_OUT=tmp)
    p = subprocess.run([sys.executable, "-m", "megasim"] + flags +
                       ["--sim-world-size", "2", "--sim-only-ranks", "0", "--sim-quiet"],
                       env=env, capture_output=True, text=True)
    check("megasim exits 0", p.returncode, 0)
    if p.returncode:
        print("# " + p.stderr[-600:].replace("\n", "\n# "))
    traces = [os.path.join(root, f) for root, _, fs in os.walk(tmp) for f in fs
              if f.endswith(".rstrace")]
    return traces[0] if traces else None


def main():
    trace = run_megasim(MODEL)
    layers, others = layer_ranges(os.environ["RECOMP_DUMP"], trace) if trace else ([], {})
    n = LAYERS * ITERS
    check("forward self_attention ranges", len(layers), n)
    for i, names in enumerate(layers):
        check("layer forward %d: the ranges inside self_attention are the real library's" % i,
              names, MLA_FORWARD)
    bwd = sum(names.count(MLA_BACKWARD) for names in others.values())
    check("%s once per layer backward" % MLA_BACKWARD, bwd, n)
    fused_rope = sum(1 for names in others.values() for x in names if "fused_rope" in x) + \
        sum(1 for names in layers for x in names if "fused_rope" in x)
    check("no nvte_fused_rope_* (MLA's RoPE is never TE's)", fused_rope, 0)
    print("TAP version 13")
    print("1..%d" % len(results))
    for i, (ok, name, why) in enumerate(results, 1):
        print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name, (" # " + why) if why else ""))
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
