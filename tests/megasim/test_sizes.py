#!/usr/bin/env python3
"""megasim's size model and recompute mechanisms against the worked examples
derived from [P] (docs/sources.md; copied here as numbers).

Two levels:
  1. the size model (megasim.sizes.saved_table): every row of §4 (b) and of
     §4 (c) not marked approximate, and the totals;
  2. the simulation: one microbatch's forward runs in-process (helper library
     + mock CUDA runtime, no shim) and the live-tensor bytes each layer adds
     are compared with the same totals; each recompute label's savings are
     measured by running the mechanism, not looked up.
Output: TAP (meson test protocol 'tap').
Usage: test_sizes.py  (MEGASIM_LIB_DIR and PYTHONPATH set by meson)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "megasim"))

from megasim import autograd as ag  # noqa: E402
from megasim import cuda  # noqa: E402
from megasim import te  # noqa: E402
from megasim.config import PRESETS, build_parser, finalize  # noqa: E402
from megasim.sizes import saved_table  # noqa: E402

results = []


def check(name, got, want):
    ok = got == want
    results.append((ok, name, "" if ok else "got %r want %r" % (got, want)))


def args_for(preset, extra=()):
    return finalize(build_parser().parse_args(PRESETS[preset] + list(extra)))


# ---------------------------------------------------------- (b) Llama-3 8B
B_ROWS = {
    "attention LN input x": 67108864, "attention LN output (QKV input)": 67108864,
    "Q": 67108864, "K": 16777216, "V": 16777216, "O": 67108864, "LSE": 1048576,
    "MLP LN input x2": 67108864, "MLP LN output (fc1 input)": 67108864,
    "SwiGLU input": 469762048, "fc2 input": 234881024,
}
B_TOTAL = 1141899264
# ------------------------------------------- (c) Moonlight / DSV2-Lite, ETP=1
C_ROWS = {
    "input LN input": 8388608, "input LN output": 8388608,
    "q_proj LN output (inside linear_q_proj)": 8388608,
    "kv-LN input (contiguous copy of kv_compressed)": 2097152,
    "kv-LN output (inside linear_kv_up_proj)": 2097152,
    "Q": 12582912, "K": 12582912, "V": 8388608, "O": 8388608, "LSE": 131072,
    "pre-MLP LN input": 8388608, "pre-MLP LN output (MoE input)": 8388608,
    "expert fc1 input": 50331648, "expert SwiGLU input": 69206016, "expert fc2 input": 34603008,
    "expert probs (fp32)": 49152, "shared SwiGLU input": 23068672, "shared fc2 input": 11534336,
}
C_APPROX = {"router (approx.)": 1179648}
# megatron-core 0.19.2 + TE 2.12.0, checked on the real library (the mla row of
# docs/validation/megatron-core.md): with qk_layernorm and no q_lora_rank the q
# norm is fused into linear_q_proj (its output saved, s*b*h/t); the kv norm
# saves TE's contiguous copy of kv_compressed (a slice of kv_down's output),
# not kv_down's output, which is freed when the attention returns. Against
# [P]'s worked example: +8388608 - 2359296 + 2097152.
C_TOTAL = 278183936
# ------------------------------------------- (a) GPT-3 175B, TP=8 SP, fp16
A_UNFUSED = 358612992        # no recompute, (sbh/t)(34+80), unfused attention
A_FUSED = 107053056          # TE fused: 34sbh/t + LSE


def table_checks():
    a = args_for("llama3-8b")
    rows = {n: b for n, b, approx in saved_table(a, "dense")}
    for n, b in B_ROWS.items():
        check("(b) row %s" % n, rows.get(n), b)
    check("(b) no other rows", sorted(rows), sorted(B_ROWS))
    check("(b) total", sum(rows.values()), B_TOTAL)
    for preset in ("moonlight-16b", "deepseek-v2-lite"):
        a = args_for(preset)
        rows = {n: (b, ap) for n, b, ap in saved_table(a, "moe")}
        # DeepSeek-V2-Lite's preset runs RoPE unfused: cos and sin of q's and
        # k's rotation saved, 4 x s*dr*beta (s 4096, dr 64)
        rope = 0 if a.apply_rope_fusion else 4 * 4096 * 64 * 2
        check("(c) %s row RoPE cos/sin" % preset, rows.pop("RoPE cos/sin (unfused, 4)", (0, False)),
              (rope, False) if rope else (0, False))
        for n, b in C_ROWS.items():
            check("(c) %s row %s" % (preset, n), rows.get(n), (b, False))
        for n, b in C_APPROX.items():
            check("(c) %s approximate row %s" % (preset, n), rows.get(n), (b, True))
        check("(c) %s total" % preset, sum(b for b, _ in rows.values()) + rope, C_TOTAL + rope)
    a = args_for("gpt3-175b", ["--attention-backend", "unfused"])
    check("(a) GPT-3 unfused no recompute", sum(b for _, b, _ in saved_table(a, "dense")), A_UNFUSED)
    a = args_for("gpt3-175b")
    check("(a) GPT-3 TE fused no recompute", sum(b for _, b, _ in saved_table(a, "dense")), A_FUSED)


# ------------------------------------------------------- simulated layers
def simulate(preset, extra, world, layers=4, whole=False, rank=0):
    """forward of microbatch 0 on rank `rank`, in-process; returns the live bytes
    each layer added (megasim's own tensor counter), or with whole=True what
    the decoder as a whole added (full recompute checkpoints whole chunks)"""
    import gc
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = "0"
    os.environ["WORLD_SIZE"] = str(world)
    from megasim import training
    more = ["--moe-layer-freq", "([0]+[1]*%d)" % (layers - 1)] if "moe" in preset or \
        "moonlight" in preset or "deepseek" in preset else []
    a = args_for(preset, ["--num-layers", str(layers), "--train-iters", "1"] + more + list(extra))
    r = training.Rank(a)
    r.setup()
    te.cublas_workspace()      # TE's one-per-device workspace, made at the first GEMM
    m = r.models[0]
    tape = []
    with ag.tape_scope(tape):
        tokens, pos, labels = r.get_batch(m)
        h = m.embedding.forward(tokens, pos)
        out = []
        if whole:
            before = cuda.LIVE[0]
            h = m.decoder.forward(h)
            out.append(cuda.LIVE[0] - before)
        else:
            for layer in m.decoder.layers:
                before = cuda.LIVE[0]
                h = layer.forward(h)
                out.append(cuda.LIVE[0] - before)
    del h, tape, tokens, pos, labels
    r.engine.stop()
    del r, m
    gc.collect()
    return out


def sim_checks():
    # layer 0 also creates the cuBLAS workspace (TE's get_workspace, once): use layers 1..
    base = simulate("llama3-8b", [], 1)
    check("(b) simulated layers 0-3", base, [B_TOTAL] * 4)
    frees = {
        # LSE (TE fused), less the fused QKV buffer (96 MiB) that the checkpoint's
        # value view pins where the run without it keeps a contiguous V (16 MiB):
        # megatron-core 0.19.2's CheckpointFunction, checked on the fake GPU
        # (docs/megasim.md "Checked against the real Megatron-Core")
        "core_attn": 1048576 - (100663296 - 16777216),
        "mlp": 771751936,          # LN output 64 + SwiGLU input 448 + fc2 input 224 MiB
        "layernorm": 0,            # both norms fused (IdentityOp)
    }
    for label, want in frees.items():
        got = simulate("llama3-8b", ["--recompute-granularity", "selective",
                                     "--recompute-modules", label], 1)
        check("(b) %s frees" % label, B_TOTAL - got[2], want)
    # full: each checkpointed chunk keeps only its input (2sbh); the decoder adds
    # the chunk inputs it creates plus its output (4 layers)
    X = 67108864
    for method, n, want in (("uniform", 1, 4 * X), ("uniform", 2, 2 * X),
                            ("block", 2, 2 * X + 2 * B_TOTAL)):
        got = simulate("llama3-8b", ["--recompute-granularity", "full", "--recompute-method",
                                     method, "--recompute-num-layers", str(n)], 1, whole=True)
        check("(b) full %s %d: decoder keeps" % (method, n), got, [want])

    # (a) GPT-3 175B layer, TP=8 + SP, fp16, dropout 0.1 (one pipeline stage here)
    g3 = ["--pipeline-model-parallel-size", "1"]
    got = simulate("gpt3-175b", g3, 8)
    check("(a) simulated TE fused layers 1-3", got[1:], [A_FUSED] * 3)
    got = simulate("gpt3-175b", g3 + ["--attention-backend", "unfused"], 8)
    check("(a) simulated unfused layers 1-3", got[1:], [A_UNFUSED] * 3)
    got = simulate("gpt3-175b", g3 + ["--attention-backend", "unfused", "--recompute-granularity",
                                      "selective", "--recompute-modules", "core_attn"], 8)
    check("(a) unfused core_attn frees 5as^2b/t", A_UNFUSED - got[2], 251658240)
    for label, want in (("core_attn", 98304), ("mlp", 56623104), ("layernorm", 0)):
        got = simulate("gpt3-175b", g3 + ["--recompute-granularity", "selective",
                                          "--recompute-modules", label], 8)
        check("(a) TE fused %s frees" % label, A_FUSED - got[2], want)

    base = simulate("moonlight-16b", [], 8)
    check("(c) simulated MoE layers 1-3", base[1:], [C_TOTAL] * 3)
    frees = {
        "moe_act": 34603008,
        # Q+K+V + both norms' outputs + the kv-LN input copy, less the inputs the
        # checkpoint keeps: gathered k_pos_emb and kv_down's output
        "mla_up_proj": 33554432 + 8388608 + 2097152 + 2097152 - 2 * 4096 * 64 - 2359296,
        "layernorm": 16777216,
        "shared_experts": 34603008,
        "moe": 50331648 + 69206016 + 34603008 + 49152 + 34603008 + 1179648,
        "core_attn": 131072,
    }
    for label, want in frees.items():
        got = simulate("moonlight-16b", ["--recompute-granularity", "selective",
                                         "--recompute-modules", label], 8)
        check("(c) %s frees" % label, C_TOTAL - got[2], want)


def moe_imbalance_checks():
    """--sim-moe-imbalance (docs/megasim.md "MoE routing imbalance"): on the
    Moonlight layer (c) (n = 2048 tokens, top-6, EP=8, ETP=1) with F = 0.25,
    every source sends round(F*n*k) = 3072 copies to EP rank 0 and splits the
    other 9216 over EP ranks 1-7 (1317 to ranks 1-4, 1316 to 5-7). A rank's
    received copies N_r = EP x what each source sends it; each expert-side
    saved tensor scales with N_r: per copy beta*h (fc1 input) + beta*2*f_e
    (SwiGLU input) + beta*f_e (fc2 input) + 4 (fp32 probs) = 12548 bytes."""
    from megasim.config import ConfigError
    per_copy = 2 * 2048 + 2 * 2 * 1408 + 2 * 1408 + 4
    balanced = 2048 * 6
    calls = []
    orig = cuda.Device.all_to_all_v

    def spy(self, send, recv, comm="ep", dtype="bf16"):
        calls.append((list(send), list(recv), comm))
        return orig(self, send, recv, comm, dtype)
    cuda.Device.all_to_all_v = spy
    try:
        for rank, recv in ((0, 8 * 3072), (1, 8 * 1317), (5, 8 * 1316)):
            del calls[:]
            got = simulate("moonlight-16b", ["--sim-moe-imbalance", "0.25"], 8, rank=rank)
            check("moe imbalance 0.25: EP rank %d layers 1-3 keep" % rank, got[1:],
                  [C_TOTAL + (recv - balanced) * per_copy] * 3)
            send = [3072 * 4096] + [1317 * 4096] * 4 + [1316 * 4096] * 3
            check("moe imbalance 0.25: EP rank %d dispatch splits (bytes per peer)" % rank,
                  calls[0] if calls else None, (send, [recv // 8 * 4096] * 8, "ep"))
            check("moe imbalance 0.25: EP rank %d combine splits" % rank,
                  calls[1] if len(calls) > 1 else None, ([recv // 8 * 4096] * 8, send, "ep"))
        del calls[:]
        got = simulate("moonlight-16b", ["--sim-moe-imbalance", "0.125"], 8, rank=3)
        check("moe imbalance 1/EP is balanced: layers 1-3 keep (c)", got[1:], [C_TOTAL] * 3)
        check("moe imbalance 1/EP: even splits", calls[0][0], [1536 * 4096] * 8)
    finally:
        cuda.Device.all_to_all_v = orig
    for extra, why in ((["--sim-moe-imbalance", "0.1"], "below 1/EP"),
                       (["--sim-moe-imbalance", "1.01"], "above min(k,E/EP)/k"),
                       (["--sim-moe-imbalance", "0.5", "--expert-model-parallel-size", "1",
                         "--sim-world-size", "2"], "EP 1"),
                       (["--sim-moe-imbalance", "0.5", "--moe-expert-capacity-factor", "1.0"],
                        "capacity factor (not dropless)")):
        try:
            args_for("moonlight-16b", extra)
            check("moe imbalance rejected: %s" % why, "accepted", "ConfigError")
        except ConfigError:
            check("moe imbalance rejected: %s" % why, "ConfigError", "ConfigError")


def cp_checks():
    """context parallelism's own tensors (docs/megasim.md "Context parallelism",
    TE 2.9 context_parallel.py). Llama-3 8B, s 8192, CP=2: every (b) row is
    linear in s, so a layer saves B_TOTAL/2 with p2p (the last received KV chunk
    replaces K, V); a2a and all_gather also save the attention output before
    the communication (out_part / out_per_step) beside the output they return:
    one O/2 more. The p2p forward's own bytes at its high point, by hand
    (kv = 2*4096*8*128 = 8 MiB, o = 2*4096*32*128 = 32 MiB, lse = 4*4096*32 =
    512 KiB): both KV chunks 2*2kv = 32 MiB, the steps' outputs and LSEs (rank 0:
    step 1 attends with half its queries, 32+16 MiB + 768 KiB; rank 1: 64 MiB +
    1 MiB), the LSE clone and the corrected output (32.5 MiB)."""
    from megasim import model
    orig = model.TEDotProductAttention._cp_forward
    highs = []

    def measured(self, q, k, v):
        start = cuda.LIVE[0]
        cuda.HIGH[0] = start
        out = orig(self, q, k, v)
        highs.append(cuda.HIGH[0] - start)
        return out

    model.TEDotProductAttention._cp_forward = measured
    try:
        cp = ["--context-parallel-size", "2"]
        for kind, extra in (("p2p", 0), ("a2a", 67108864 // 2), ("all_gather", 67108864 // 2)):
            got = simulate("llama3-8b", cp + ["--cp-comm-type", kind], 2)
            check("CP=2 %s: each layer saves B_TOTAL/2 + %d" % (kind, extra), got,
                  [B_TOTAL // 2 + extra] * 4)
        MIB = 1 << 20
        for rank, want in ((0, 32 * MIB + 48 * MIB + 768 * 1024 + 32 * MIB + 512 * 1024),
                           (1, 32 * MIB + 64 * MIB + 1024 * 1024 + 32 * MIB + 512 * 1024)):
            del highs[:]
            simulate("llama3-8b", cp + ["--cp-comm-type", "p2p"], 2, rank=rank)
            check("CP=2 p2p rank %d: the ring's forward bytes at their high point" % rank,
                  highs, [want] * 4)
        # one type per layer (--cp-comm-type with num_layers entries)
        got = simulate("llama3-8b", cp + ["--cp-comm-type", "p2p", "a2a", "all_gather", "p2p"], 2)
        check("CP=2 per-layer types p2p a2a all_gather p2p", got,
              [B_TOTAL // 2, B_TOTAL // 2 + 67108864 // 2, B_TOTAL // 2 + 67108864 // 2,
               B_TOTAL // 2])
    finally:
        model.TEDotProductAttention._cp_forward = orig


# Llama-3 8B with 4 layers on one rank: parameters counted by hand (docs/megasim.md):
# layer = h(a+2g)d + a*d*h + 2h (norms) + 3*h*f (SwiGLU fc1 2hf, fc2 fh)
#       = 4096*48*128 + 4096*4096 + 8192 + 3*4096*14336 = 218,112,000
# embedding and untied output layer: V*h each (+ h final norm)
P_LLAMA4 = 4 * 218112000 + 2 * 128256 * 4096 + 4096


def optimizer_bytes(extra):
    """(main params, grad buffer, Adam state) bytes of rank 0, measured by
    megasim's own tensor counter around each step"""
    import gc
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    from megasim import training
    a = args_for("llama3-8b", ["--num-layers", "4", "--train-iters", "1"] + list(extra))
    r = training.Rank(a)
    r.setup()
    main = sum(t.nbytes for t in r.main_params)
    grads = sum(t.nbytes for t in r.grad_buffers)
    before = cuda.LIVE[0]
    r.init_optimizer_state()
    state = cuda.LIVE[0] - before
    r.engine.stop()
    del r
    gc.collect()
    return main, grads, state


def optimizer_checks():
    """--use-precision-aware-optimizer and the dtype flags: bytes per parameter"""
    P = P_LLAMA4
    pa = ["--use-precision-aware-optimizer"]
    for extra, want in (
            ([], (4 * P, 4 * P, 8 * P)),
            (pa + ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"], (4 * P, 4 * P, 4 * P)),
            (pa + ["--exp-avg-dtype", "fp8", "--exp-avg-sq-dtype", "fp16"], (4 * P, 4 * P, 3 * P)),
            (pa + ["--main-params-dtype", "fp16", "--main-grads-dtype", "bf16"],
             (2 * P, 2 * P, 8 * P))):
        check("optimizer bytes (main params, grads, Adam state) with %s" % (" ".join(extra) or
                                                                            "defaults"),
              optimizer_bytes(extra), want)
    try:
        args_for("llama3-8b", ["--exp-avg-dtype", "bf16"])
        check("--exp-avg-dtype bf16 without --use-precision-aware-optimizer is rejected", 0, 1)
    except Exception as e:  # noqa: BLE001 - megasim's ConfigError
        check("--exp-avg-dtype bf16 without --use-precision-aware-optimizer is rejected",
              "need --use-precision-aware-optimizer" in str(e), True)


def offload_checks():
    """--optimizer-cpu-offload (HybridDeviceOptimizer, docs/megasim.md): the
    params in order go to the host while the offloaded count is below
    fraction x all; the rest keep an fp32 copy and fp32 Adam moments on the
    device whatever --exp-avg-dtype says (12 bytes per kept parameter); the
    grad buffer stays. Llama-3 8B, 4 layers, one rank: the embedding, 4
    layers and the output layer (with the final norm), hand-counted."""
    P = P_LLAMA4
    order = [128256 * 4096] + [218112000] * 4 + [128256 * 4096 + 4096]
    pa = ["--use-precision-aware-optimizer", "--use-distributed-optimizer",
          "--optimizer-cpu-offload"]
    for frac in (1.0, 0.5, 0.25, 0.0):
        off, kept = 0, 0
        for n in order:
            if off < frac * P:
                off += n
            else:
                kept += n
        check("offload %.2f: device main params, grads, Adam state = 4, 4, 8 bytes x the %d "
              "params kept" % (frac, kept),
              optimizer_bytes(pa + ["--optimizer-offload-fraction", str(frac)]),
              (4 * kept, 4 * P, 8 * kept))
    # 0.5 of 1,923,125,248: the embedding and layers 0-2 (1,179,672,576) go, layer 3 and the
    # output layer (743,452,672) stay: layer 2 starts 2,048 elements below the threshold
    check("offload 0.5 keeps layer 3 and the output layer",
          optimizer_bytes(pa + ["--optimizer-offload-fraction", "0.5"])[0], 4 * 743452672)
    check("offload 0: bf16 moments asked for, fp32 moments made (the hybrid optimizer's Adam)",
          optimizer_bytes(pa + ["--optimizer-offload-fraction", "0", "--exp-avg-dtype", "bf16",
                                "--exp-avg-sq-dtype", "bf16"])[2], 8 * P)
    for extra, msg in ((["--optimizer-cpu-offload", "--use-distributed-optimizer"],
                        "must be used in conjunction with `--use-precision-aware-optimizer`"),
                       (["--optimizer-cpu-offload", "--use-precision-aware-optimizer"],
                        "only supported with distributed optimizer")):
        try:
            args_for("llama3-8b", extra)
            got = "accepted"
        except Exception as e:  # noqa: BLE001 - Megatron's AssertionError / ValueError
            got = str(e)
        check("%s is rejected (%s)" % (" ".join(extra), msg), msg in got, True)


def step_bytes(extra, M=3):
    """one training step of M microbatches of a 1-layer Llama-like model (h 1024,
    s 1024, V 128256) on one rank: (bytes the step's forward_data_store holds at
    the optimizer step, bytes the leak hook holds after the step, live bytes
    after the step beyond those before it and the Adam state it created)"""
    import gc
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    from megasim import training
    a = args_for("llama3-8b", ["--num-layers", "1", "--hidden-size", "1024",
                               "--ffn-hidden-size", "3584", "--num-attention-heads", "8",
                               "--seq-length", "1024", "--train-iters", "1",
                               "--global-batch-size", str(M), "--sim-quiet"] + list(extra))
    r = training.Rank(a)
    r.setup()
    store = []
    step = r.optimizer_step

    def spy():
        store.append(sum(t.nbytes for t in (r.models[0].output.kept or [])))
        step()
    r.optimizer_step = spy
    before = cuda.LIVE[0]
    r.train_step(0, M)
    leaked = sum(t.nbytes for t in r.leaked)
    rest = cuda.LIVE[0] - before - sum(t.nbytes for t in r.optimizer_state) - leaked
    r.engine.stop()
    del r
    gc.collect()
    return store[0], leaked, rest


def retention_checks():
    """--sim-keep-outputs: the last stage's forward_data_store holds every
    microbatch's bf16 logits (2 s b V/t) at the optimizer step and nothing once
    the step returns; --sim-leak-mib with --sim-leak-every: X MiB kept per
    microbatch or once per iteration, for good"""
    logits = 2 * 1024 * 128256
    check("keep outputs: 3 microbatches' logits held at the optimizer step, none after",
          step_bytes(["--sim-keep-outputs"]), (3 * logits, 0, 0))
    check("leak 64 MiB every microbatch: 3 x 64 MiB after a step of 3",
          step_bytes(["--sim-leak-mib", "64", "--sim-leak-every", "microbatch"]),
          (0, 3 * 64 << 20, 0))
    check("leak 64 MiB every iteration: 64 MiB after a step of 3",
          step_bytes(["--sim-leak-mib", "64"]), (0, 64 << 20, 0))


def microbatch_bytes(extra, M=3):
    """live bytes each microbatch's forward leaves for its backward (measured
    at the backward's start) in one training step of a 2-layer Llama-like model
    (h 1024, V 128256) on one rank"""
    import gc
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    from megasim import training
    a = args_for("llama3-8b", ["--num-layers", "2", "--hidden-size", "1024",
                               "--ffn-hidden-size", "3584", "--num-attention-heads", "8",
                               "--max-position-embeddings", "4096", "--train-iters", "1",
                               "--global-batch-size", str(M), "--sim-quiet"] + list(extra))
    r = training.Rank(a)
    r.setup()
    got, at = [], [0]
    fwd, bwd = r.forward_step, r.backward_step

    def f(*x, **k):
        at[0] = cuda.LIVE[0]
        return fwd(*x, **k)

    def b(*x, **k):
        got.append(cuda.LIVE[0] - at[0])
        return bwd(*x, **k)
    r.forward_step, r.backward_step = f, b
    r.train_step(0, M)
    r.engine.stop()
    del r
    gc.collect()
    return got


def seq_length_checks():
    """--sim-seq-lengths: each microbatch keeps exactly what a job with that fixed
    --seq-length keeps after a microbatch of the same length (the measure nets
    out what the previous microbatch's leftovers free during this forward, so
    the second microbatch, after a shorter one, is not compared)"""
    var = microbatch_bytes(["--seq-length", "1024", "--sim-seq-lengths", "1024,4096*2"])
    short = microbatch_bytes(["--seq-length", "1024"])
    long = microbatch_bytes(["--seq-length", "4096"])
    check("seq lengths 1024,4096,4096: the first and third microbatch as fixed 1024 / 4096 jobs",
          (var[0], var[2]), (short[0], long[2]))
    check("a 4096-token microbatch keeps more than three times a 1024-token one",
          long[1] > 3 * short[1], True)
    for bad, msg in ((["--sim-seq-lengths", "8192"], "above --max-position-embeddings"),
                     (["--sim-seq-lengths", "1024", "--pipeline-model-parallel-size", "2"],
                      "needs --variable-seq-lengths")):
        try:
            args_for("llama3-8b", ["--max-position-embeddings", "4096"] + bad)
            got = "accepted"
        except Exception as e:  # noqa: BLE001 - megasim's ConfigError
            got = str(e)
        check("--sim-seq-lengths rejected: %s" % msg, msg in got, True)


def save_gather_bytes(extra):
    """live bytes above the state at each NCCL all-gather of a checkpoint save
    (rank 0 of DP=2, 4-layer Llama-3 8B, distributed optimizer)"""
    import gc
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2")
    from megasim import training
    a = args_for("llama3-8b", ["--num-layers", "4", "--train-iters", "1",
                               "--use-distributed-optimizer", "--save", "/nonexistent",
                               "--save-interval", "1", "--dist-ckpt-optim-fully-reshardable",
                               "--sim-quiet"] + list(extra))
    r = training.Rank(a)
    r.setup()
    seen = []
    coll = r.dev.collective
    base = cuda.LIVE[0]

    def spy(fn, nbytes, group, *rest):
        seen.append((fn, group, cuda.LIVE[0] - base))
        return coll(fn, nbytes, group, *rest)
    r.dev.collective = spy
    r.save_checkpoint(1)
    after = cuda.LIVE[0] - base
    r.dev.collective = coll
    r.engine.stop()
    del r
    gc.collect()
    return seen, after


def save_checks():
    """--dist-ckpt-optim-fully-reshardable: per bucket and key (param, exp_avg,
    exp_avg_sq) DP receive buffers + the sent shard, fp32, live at the
    all-gather; one bucket without --overlap-grad-reduce, buckets of
    max(4e7, 1e6 x DP) elements with it; nothing with the Gloo gather"""
    local = P_LLAMA4 // 2
    seen, after = save_gather_bytes([])
    check("save, NCCL gather: 3 all-gathers of (2 + 1) x P/2 x 4 bytes, none left",
          (seen, after), ([("ncclAllGather", "dp", 3 * local * 4)] * 3, 0))
    seen, after = save_gather_bytes(["--overlap-grad-reduce"])
    check("save with --overlap-grad-reduce: 49 buckets of 4e7 elements (the last %d), "
          "3 keys each" % (P_LLAMA4 - 48 * 40000000),
          (len(seen), max(s[2] for s in seen), seen[-1][2]),
          (49 * 3, 3 * 20000000 * 4, 3 * ((P_LLAMA4 - 48 * 40000000) // 2) * 4))
    check("save with --distrib-optim-fully-reshardable-mem-efficient: no device gather",
          save_gather_bytes(["--distrib-optim-fully-reshardable-mem-efficient"]), ([], 0))
    from megasim.training import ddp_buckets
    check("ddp_buckets pads each bucket to a multiple of DP", ddp_buckets(10, 4, False), [12])


def loss_bytes(extra):
    """(live bytes the output layer + loss keep for the backward, the forward's
    peak above its input) of one microbatch of Llama-3 8B (s 8192, V 128256) on
    one rank, measured with megasim's tensor counter"""
    import gc
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    from megasim import training
    a = args_for("llama3-8b", ["--num-layers", "1", "--train-iters", "1"] + list(extra))
    r = training.Rank(a)
    r.setup()
    te.cublas_workspace()
    m = r.models[0]
    x = cuda.Tensor(67108864, "hidden")
    tokens, pos, labels = r.get_batch(m)
    tape = []
    before = cuda.LIVE[0]
    with ag.tape_scope(tape):
        loss = m.output.forward(x, labels)
    kept = cuda.LIVE[0] - before
    del loss, tape, x, tokens, pos, labels
    r.engine.stop()
    del r, m
    gc.collect()
    return kept


def loss_checks():
    """--cross-entropy-loss-fusion --cross-entropy-fusion-impl te (TE's loss):
    the loss keeps the bf16 logits (2sbV) instead of their fp32 copy (4sbV);
    the native fused loss (Megatron-Core's default impl) keeps the fp32 copy
    as the unfused one does (megatron-core 0.19.2 fused_cross_entropy.py:
    calculate_logits_max's .float(), the fp32 softmax saved); all keep the
    final norm's output (2sbh) for the output GEMM's backward and the fp32
    loss (4sb)"""
    s, V, h = 8192, 128256, 4096
    check("loss keeps fp32 logits + norm output + loss (unfused)", loss_bytes([]),
          4 * s * V + 2 * s * h + 4 * s)
    check("loss keeps bf16 logits + norm output + loss (--cross-entropy-fusion-impl te)",
          loss_bytes(["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te"]),
          2 * s * V + 2 * s * h + 4 * s)
    check("loss keeps fp32 logits + norm output + loss (native fused, as unfused)",
          loss_bytes(["--cross-entropy-loss-fusion"]), 4 * s * V + 2 * s * h + 4 * s)


def resident_bytes(rank):
    """bytes of the loaded state dict still referenced after setup on pipeline
    rank `rank` of Llama-3 8B, 4 layers, PP=2, --sim-resume-resident-stages 0"""
    import gc
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    from megasim import training
    a = args_for("llama3-8b", ["--num-layers", "4", "--train-iters", "1",
                               "--pipeline-model-parallel-size", "2", "--sim-resume-optimizer",
                               "--sim-resume-resident-stages", "0"])
    r = training.Rank(a)
    r.setup()
    got = sum(t.nbytes for t in r.loaded_resident) if r.loaded_resident else 0
    r.engine.stop()
    del r
    gc.collect()
    return got


def resume_checks():
    """the resident loaded state: 2 x the fp32 main params of the stage (8 bytes
    per parameter): stage 0 holds the embedding and 2 layers"""
    p0 = 2 * 218112000 + 128256 * 4096
    check("resident loaded state on stage 0 = 8 bytes x its %d params" % p0, resident_bytes(0),
          8 * p0)
    check("no resident loaded state on stage 1", resident_bytes(1), 0)


DPA_STATE = 120      # TE DotProductAttention's FP8 state per layer (3 GEMMs, L = 1)


def fp8_checks():
    """FP8 (docs/megasim.md "FP8 (derivation)", TE v2.9), Llama-3 8B, s 8192, TP=1,
    counted by hand. Saved per layer against (b): the two norm outputs are saved
    column-wise in FP8 (64 -> 32 MiB each), fc2's input too (224 -> 112 MiB), and
    under delayed scaling linear_proj saves an FP8 copy of O (+32 MiB) beside the
    bf16 O that attention keeps; each FP8 tensor has a 4-byte scale_inv: -144 MiB
    + 16 B. Kept across microbatches, made at the first forward: each linear's
    quantized weight, row-wise + transposed (2 B per element, + 4 B):
    2*(6144*4096 + 4096*4096 + 28672*4096 + 4096*14336) + 16 = 436,207,632; and
    the delayed-scaling state per module, scale + amax history for 3 forward and
    2 backward tensors: 4*(3 + 3L + 2 + 2L) bytes (L = --fp8-amax-history-len,
    Megatron's default 1: 40 B), and TE's DotProductAttention's for its 3 GEMMs
    (9 forward and 6 backward tensors, 4*(15 + 15L) B: 120 B; tensorwise: 30
    scalars, 120 B), made under FP8 even without FP8 attention (measured on
    megatron-core 0.19.2 + TE 2.12.0: docs/validation/megatron-core.md). With MXFP8, linear_proj saves the original O
    (set_save_original_input) and every column-wise copy has uint8 scales of
    ru(s/32,4)*ru(K,128) bytes; the weight copies add row- and column-wise scales."""
    from megasim import fp8
    check("fp8 attention state: 3 GEMMs, delayed L=1 and tensorwise",
          (sum(fp8.state_bytes("delayed", 1, 3)), sum(fp8.state_bytes("tensorwise", 1, 3))),
          (DPA_STATE, DPA_STATE))
    saved = B_TOTAL - 144 * 1048576 + 16
    weights = 2 * (6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336) + 16
    check("fp8 weight workspaces by the formula",
          sum(fp8.weight_workspace_bytes("delayed", n, k)
              for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))), weights)
    got = simulate("llama3-8b", ["--fp8-format", "hybrid"], 1)
    check("fp8 delayed: each layer's first forward adds saved + weights + state",
          got[1:], [saved + weights + 4 * 40 + DPA_STATE] * 3)
    got = simulate("llama3-8b", ["--fp8-format", "e4m3", "--fp8-amax-history-len", "1024"], 1)
    check("fp8 delayed, amax history 1024: the state per module",
          got[1:], [saved + weights + 4 * 4 * (5 + 5 * 1024) + 4 * (15 + 15 * 1024)] * 3)
    got = simulate("llama3-8b", ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"], 1)
    check("fp8 tensorwise: no FP8 copy of O, 10 scalars per linear, 30 for attention",
          got[1:], [saved - 32 * 1048576 - 4 + weights + 4 * 40 + DPA_STATE] * 3)
    mx_saved = B_TOTAL - 64 * 1048576 - 112 * 1048576 \
        + 2 * 256 * 4096 + 256 * 14336            # col scales: ln1, ln2 (K 4096), fc2 (K 14336)

    def mx_w(n, k):
        return 2 * n * k + n * (k // 32) + (n // 32) * k   # n, k multiples of 128
    mx_weights = sum(mx_w(n, k) for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)))
    got = simulate("llama3-8b", ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"], 1)
    check("fp8 mxfp8: saved + weights with their e8m0 scales", got[1:], [mx_saved + mx_weights] * 3)
    # blockwise: fp32 scales, 1x128 blocks for the saved inputs (ceil(s/128)*ru(K,4)*4 column-
    # wise: 64*4096*4 for the norm outputs, 64*14336*4 for fc2's input) and 128x128 blocks for
    # the weights (ceil(N/128)*ru(ceil(K/128),4)*4 row-wise plus ceil(K/128)*ru(ceil(N/128),4)*4
    # column-wise: 2*48*32*4, 2*32*32*4, 2*224*32*4, 2*32*112*4); no scaling state
    bw_saved = B_TOTAL - 176 * 1048576 + 2 * 64 * 4096 * 4 + 64 * 14336 * 4
    bw_weights = 2 * (6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336) \
        + 4 * 2 * (48 * 32 + 32 * 32 + 224 * 32 + 32 * 112)
    got = simulate("llama3-8b", ["--fp8-format", "e4m3", "--fp8-recipe", "blockwise"], 1)
    check("fp8 blockwise: saved + weights with their fp32 block scales", got[1:],
          [bw_saved + bw_weights] * 3)
    # (a) GPT-3 175B layer, TP=8 + SP, fp16 (s 2048, h 12288, sbh/t = 3 MiB), delayed: the
    # column-parallel linears save their local input row-wise (Float8 data is gathered
    # row-wise), 6 -> 3 MiB for each norm output; linear_proj adds an FP8 copy of O (3 MiB),
    # fc2's input 24 -> 12 MiB: -15 MiB + 16 B. Weights per rank: QKV 4608x12288, proj
    # 12288x1536, fc1 6144x12288, fc2 12288x6144, 2 B per element + 4 B each; state 4 x 40 B
    g3_weights = 2 * (4608 * 12288 + 12288 * 1536 + 6144 * 12288 + 12288 * 6144) + 16
    got = simulate("gpt3-175b", ["--pipeline-model-parallel-size", "1", "--fp8-format", "hybrid"], 8)
    check("fp8 delayed, TP=8 + SP: GPT-3 layers 1-3", got[1:],
          [A_FUSED - 15 * 1048576 + 16 + g3_weights + 160 + DPA_STATE] * 3)
    got = simulate("llama3-8b", ["--fp8-format", "hybrid", "--recompute-granularity", "selective",
                                 "--recompute-modules", "mlp"], 1)
    check("fp8 delayed mlp recompute frees the FP8 LN output and fc2 input and the SwiGLU input",
          saved + weights + 160 + DPA_STATE - got[2], 32 * 1048576 + 4 + 448 * 1048576 + 112 * 1048576 + 4)


# Per-buffer bytes measured on the real library (megatron-core 0.19.2 + TE 2.12.0
# on the fake GPU, tools/mcore_job/run.sh, counters-rank<R>.json "buffer_bytes",
# 2026-12-02; docs/validation/megatron-core.md "FP8 on the Transformer Engine
# spec"): Llama-3 70B layer shapes (hidden 8192, FFN 28672 SwiGLU, 64 heads, 8
# query groups, vocab 128256 untied), seq 4096, micro-batch 1, bf16, FP8 hybrid
# with tensorwise (current) scaling, 2 iterations. (flags, world, {rank: bytes of
# params, grad buffers, FP8 weight workspaces, FP8 meta, main params, Adam state})
L70_SHAPES = ["--hidden-size", "8192", "--ffn-hidden-size", "28672",
              "--num-attention-heads", "64", "--num-query-groups", "8", "--seq-length", "4096",
              "--max-position-embeddings", "8192", "--micro-batch-size", "1",
              "--train-iters", "2", "--attention-backend", "unfused",
              "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]
MCORE_FP8_BUFFERS = [
    ("TP1, DP1, 2 layers, no distributed optimizer", ["--num-layers", "2"], 1,
     {0: (7625326592, 15250653184, 3422552096, 560, 15250653184, 30501306368)}),
    ("TP1, DP2, 2 layers, distributed optimizer",
     ["--num-layers", "2", "--use-distributed-optimizer", "--global-batch-size", "2"], 2,
     {r: (7625326592, 15250653184, 3422552096, 560, 7625326592, 15250653184) for r in (0, 1)}),
    ("TP2 + SP, 2 layers, distributed optimizer",
     ["--num-layers", "2", "--use-distributed-optimizer", "--tensor-model-parallel-size", "2",
      "--sequence-parallel", "--global-batch-size", "1"], 2,
     {r: (3812704256, 7625408512, 1711276064, 560, 7625408512, 15250817024) for r in (0, 1)}),
    ("PP2, interleaved (1 layer per virtual stage), 4 layers, distributed optimizer",
     ["--num-layers", "4", "--use-distributed-optimizer", "--pipeline-model-parallel-size", "2",
      "--num-layers-per-virtual-pipeline-stage", "1", "--global-batch-size", "4"], 2,
     {0: (5523963904, 11047927808, 3422552096, 560, 11047927808, 22095855616),
      1: (5523980288, 11047960576, 3422552096, 560, 11047960576, 22095921152)}),
]


def mcore_fp8_buffer_checks():
    """megasim's persistent buffers under FP8 (megasim.buffers) equal, byte for
    byte, what the real Megatron-Core + Transformer Engine held on the same
    flags (MCORE_FP8_BUFFERS): parameters, DDP grad buffers, the FP8 weight
    copies (row-wise + transposed, 2 B per linear weight element + a 4-byte
    scale_inv each), the FP8 scaling state (4 linears x 40 B + core
    attention's 120 B per layer), the distributed optimizer's fp32 main
    params and Adam state (sharded over DP)."""
    from megasim import buffers
    for name, extra, world, want in MCORE_FP8_BUFFERS:
        for rank, w in sorted(want.items()):
            got = buffers.buffer_bytes(rank, world, ["--sim-preset", "llama3-8b"] + L70_SHAPES
                                       + extra + ["--sim-world-size", str(world)])
            check("fp8 buffers as megatron-core + TE hold them: %s, rank %d" % (name, rank),
                  tuple(got[c] for c in buffers.CLASSES), w)


def hybrid_checks():
    """Hybrid Mamba/attention layers (docs/megasim.md "Hybrid Mamba layers
    (derivation)"), the Nemotron-H 8B-like preset (h 4096, s 8192, b 1; Mamba-2
    with 128 heads of 64, state 128, 8 groups: d_inner 8192; squared-ReLU MLP f
    21504; GQA 32/8 x 128), counted by hand. A Mamba layer keeps its in_proj norm's
    input and output (2 x 2sbh), the b-l-d copy of in_proj's output zxbcdt
    (2sb(2*d_inner + 2GN + H) = 2*8192*18560), the scan's out_x, the gated norm's
    input and out_proj's input (3 x 2sb*d_inner) and the norm's fp32 rstd per
    token and group (4sbG); an attention-only layer keeps (b)'s attention half
    (x, LN output, Q, K, V, O, LSE), an MLP-only layer (b)'s MLP half with f 21504
    (x, LN output, fc1 output, activation output)."""
    from megasim.config import ConfigError
    x = 2 * 8192 * 4096
    mamba = 2 * x + 2 * 8192 * 18560 + 3 * 2 * 8192 * 8192 + 4 * 8192 * 8
    att = 2 * x + x + x // 4 + x // 4 + x + 4 * 8192 * 32
    mlp = 2 * x + 2 * 2 * 8192 * 21504
    check("hybrid: the Mamba layer's bytes by hand", mamba, 841220096)
    pat = ["--hybrid-layer-pattern", "M*-M"]
    got = simulate("nemotron-h-8b", pat, 1)
    check("hybrid M*-M: simulated layers keep Mamba, attention, MLP, Mamba", got,
          [mamba, att, mlp, mamba])
    # TP=2 + SP: x halves (sequence-parallel), the mixer's channels halve (d_inner 4096,
    # 4 groups, 64 heads per rank: zxbcdt 2*8192*9280), the sequence inside the mixer is whole
    got = simulate("nemotron-h-8b", pat + ["--tensor-model-parallel-size", "2",
                                           "--sequence-parallel"], 2)
    check("hybrid TP=2 + SP: the Mamba layers' bytes", [got[0], got[3]],
          [x + 2 * 8192 * 9280 + 3 * 2 * 8192 * 4096 + 4 * 8192 * 4] * 2)
    # recompute: no label reaches a Mamba layer; mlp frees the MLP-only layer's all but
    # its output; core_attn frees the LSE (TE fused); layernorm is a no-op (norms fused)
    for label, want in (("mlp", [mamba, att, x, mamba]),
                        ("core_attn", [mamba, att - 4 * 8192 * 32, mlp, mamba]),
                        ("layernorm", [mamba, att, mlp, mamba])):
        got = simulate("nemotron-h-8b", pat + ["--recompute-granularity", "selective",
                                               "--recompute-modules", label], 1)
        check("hybrid selective %s: per layer" % label, got, want)
    got = simulate("nemotron-h-8b", pat + ["--recompute-granularity", "full", "--recompute-method",
                                           "uniform", "--recompute-num-layers", "1"], 1, whole=True)
    check("hybrid full uniform 1: the stack keeps its chunk inputs and output", got, [4 * x])
    got = simulate("nemotron-h-8b", pat + ["--recompute-granularity", "full", "--recompute-method",
                                           "block", "--recompute-num-layers", "2"], 1, whole=True)
    check("hybrid full block 2: layers 2 and 3 keep their own", got, [2 * x + mlp + mamba])
    # parameters: 24 Mamba layers (in_proj 4096 x 18560 + its norm, conv1d 10240 x (4 + 1),
    # dt_bias, A_log, D per head, the gated norm 8192, out_proj 8192 x 4096), 4 attention
    # layers (QKV 6144 x 4096, proj, norm), 24 MLP layers (2 x 4096 x 21504 + norm),
    # untied embedding and output layer (131072 x 4096 each) and the final norm: 8.10e9
    from megasim import training
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    r = training.Rank(args_for("nemotron-h-8b", ["--train-iters", "1"]))
    per = {"mamba": 4096 * 18560 + 4096 + 10240 * 5 + 3 * 128 + 8192 + 8192 * 4096,
           "attention": 6144 * 4096 + 4096 * 4096 + 4096, "mlp": 2 * 4096 * 21504 + 4096}
    want = 24 * per["mamba"] + 4 * per["attention"] + 24 * per["mlp"] + 2 * 131072 * 4096 + 4096
    check("hybrid: Nemotron-H 8B-like parameters by hand (%d)" % want,
          sum(training.param_counts(r.args, r.S, l)[0] for l in range(52)) + 2 * 131072 * 4096
          + 4096, want)
    del r
    for extra, msg in ((["--recompute-granularity", "selective", "--recompute-modules", "mamba"],
                        "Invalid choices for recompute_modules: {'mamba'}"),
                       (["--hybrid-layer-pattern", "M*-G"], "'G' is not modelled"),
                       (["--hybrid-layer-pattern", "M*|M-"], "'|' is not modelled"),
                       (["--hybrid-layer-pattern", "M*-x"], "'x' is not a valid layer symbol"),
                       (["--mamba-num-groups", "3"], "nheads must be evenly divisible by ngroups"),
                       (["--tensor-model-parallel-size", "3"],
                        "nheads must be evenly divisble by tp_size"),
                       (["--hybrid-layer-pattern", "M*E"], "'E' needs --num-experts"),
                       (["--fp8-format", "hybrid"], "not modelled with --hybrid-layer-pattern")):
        try:
            args_for("nemotron-h-8b", extra)
            got = "accepted"
        except (ConfigError, AssertionError, ValueError) as e:
            got = str(e)
        check("hybrid: %s is rejected (%s)" % (" ".join(extra), msg), msg in got, True)


def bias_checks():
    """add_bias_linear (Megatron's default; megatron-core 0.19.2's shapes): each
    layer adds linear_qkv's bias ((a + 2g) * d_h / t, column-parallel),
    linear_proj's (h, row-parallel: whole on every TP rank), linear_fc1's
    (gamma * f / t) and linear_fc2's (h); presets of bias-free models pass
    --disable-bias-linear"""
    from megasim.sizes import Shapes
    from megasim.training import bias_counts, param_counts
    g3 = args_for("gpt3-175b")
    check("gpt3-175b: biased linears (Megatron's default)", g3.add_bias_linear, True)
    h, t = 12288, 8
    want = (96 + 2 * 96) * 128 // t + h + 49152 // t + h
    check("gpt3-175b: a layer's bias elements on a TP=8 rank", bias_counts(g3, Shapes(g3), 1),
          (want, 0))
    off = args_for("gpt3-175b", ["--disable-bias-linear"])
    check("gpt3-175b: --disable-bias-linear removes exactly the biases from the parameters",
          param_counts(g3, Shapes(g3), 1)[0] - param_counts(off, Shapes(off), 1)[0], want)
    for p in ("llama3-8b", "moonlight-16b", "deepseek-v2-lite"):
        a = args_for(p)
        check("%s: the preset passes --disable-bias-linear (no biases)" % p,
              (a.add_bias_linear, bias_counts(a, Shapes(a), 1)), (False, (0, 0)))
    a = args_for("llama3-8b", ["--add-bias-linear"])
    check("llama3-8b --add-bias-linear: SwiGLU's fc1 bias is 2 x f", bias_counts(a, Shapes(a), 1),
          ((32 + 2 * 8) * 128 + 4096 + 2 * 14336 + 4096, 0))
    from megasim.launch import expand
    flags = expand(["--sim-preset", "llama3-8b", "--add-bias-linear"])
    check("--add-bias-linear replaces the preset's --disable-bias-linear on the recorded "
          "command line", ("--disable-bias-linear" in flags, "--add-bias-linear" in flags),
          (False, True))
    try:
        args_for("moonlight-16b", ["--add-bias-linear"])
        check("shared experts with biased linears are refused", 0, 1)
    except Exception as e:  # noqa: BLE001 - megasim's ConfigError / AssertionError
        check("shared experts with biased linears are refused (Megatron's message)",
              "bias is not supported in the shared experts" in str(e), True)


def main():
    cuda.device()
    hybrid_checks()
    bias_checks()
    fp8_checks()
    mcore_fp8_buffer_checks()
    table_checks()
    sim_checks()
    optimizer_checks()
    offload_checks()
    retention_checks()
    save_checks()
    seq_length_checks()
    loss_checks()
    resume_checks()
    cp_checks()
    moe_imbalance_checks()
    print("TAP version 13")
    print("1..%d" % len(results))
    for i, (ok, name, why) in enumerate(results, 1):
        print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name, (" # " + why) if why else ""))
    failed = sum(1 for ok, _, _ in results if not ok)
    print("# %d passed, %d failed" % (len(results) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
