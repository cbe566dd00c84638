"""Every megasim job the test suite runs, by name: one place for the flags.

A scenario is (megasim flags, simulated device capacity in GiB or None for
megasim's default, extra recomp-analyze arguments). The golden-output test
(tests/golden) analyses each one; the advisor tests (tests/advisor) assert
their verdicts. Megatron flag spellings; `--sim-*` switches are megasim's
(docs/megasim.md).
"""

# the README's main job (tools/run-main.sh's default)
MAIN = ["--sim-preset", "llama3-8b", "--pipeline-model-parallel-size", "2",
        "--sim-world-size", "4", "--use-distributed-optimizer", "--global-batch-size", "8",
        "--train-iters", "3", "--profile", "--nvtx-ranges", "--profile-step-start", "0",
        "--profile-step-end", "3"]

# Megatron's NVTX ranges for every iteration of the small jobs
PROFILE = ["--profile", "--nvtx-ranges", "--profile-step-start", "0", "--profile-step-end", "9"]
# ... and for jobs of up to 100 iterations
PROFILE_ALL = ["--profile", "--nvtx-ranges", "--profile-step-start", "0",
               "--profile-step-end", "100"]

# accuracy presets: small layer counts, real layer shapes
SMALL = {
    # Llama-3 8B-like, PP=2, 8 layers, 2048 tokens
    "llama3-8b": ["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "2048",
                  "--max-position-embeddings", "2048", "--pipeline-model-parallel-size", "2",
                  "--sim-world-size", "4", "--use-distributed-optimizer",
                  "--global-batch-size", "8", "--train-iters", "3"],
    # GPT-3 175B-like shapes scaled down: LayerNorm, dropout, fp16, TP+SP, PP
    "gpt3-175b": ["--sim-preset", "gpt3-175b", "--num-layers", "4", "--hidden-size", "2048",
                  "--ffn-hidden-size", "8192", "--num-attention-heads", "16",
                  "--seq-length", "1024", "--max-position-embeddings", "1024",
                  "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
                  "--sim-world-size", "4", "--global-batch-size", "4", "--train-iters", "3"],
    # Moonlight-16B-like: MLA + MoE (1 dense layer), TP=2 SP, EP=2
    "moonlight-16b": ["--sim-preset", "moonlight-16b", "--num-layers", "4",
                      "--moe-layer-freq", "([0]+[1]*3)", "--num-experts", "8",
                      "--expert-model-parallel-size", "2", "--seq-length", "2048",
                      "--max-position-embeddings", "2048", "--sim-world-size", "4",
                      "--global-batch-size", "4", "--train-iters", "3"],
    # DeepSeek-V2-Lite-like: MLA (no RoPE fusion) + MoE
    "deepseek-v2-lite": ["--sim-preset", "deepseek-v2-lite", "--num-layers", "4",
                         "--moe-layer-freq", "([0]+[1]*3)", "--num-experts", "8",
                         "--expert-model-parallel-size", "2", "--seq-length", "2048",
                         "--max-position-embeddings", "2048", "--sim-world-size", "4",
                         "--global-batch-size", "4", "--train-iters", "3"],
    # context parallelism (issue 21): Llama-3 8B-like at 8192 tokens, CP=2, PP=2; one
    # --cp-comm-type per layer: ring attention (p2p) on stage 0, all_gather and a2a
    # on stage 1
    "cp": ["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "8192",
           "--max-position-embeddings", "8192", "--context-parallel-size", "2",
           "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
           "--use-distributed-optimizer", "--global-batch-size", "4", "--train-iters", "3",
           "--cp-comm-type", "p2p", "p2p", "p2p", "p2p", "all_gather", "all_gather", "a2a",
           "a2a"],
}

# a small dense job whose parameters, grads and Adam state dominate less
SMALLJOB = ["--sim-preset", "llama3-8b", "--num-layers", "4", "--hidden-size", "2048",
            "--ffn-hidden-size", "7168", "--num-attention-heads", "16", "--seq-length", "4096",
            "--max-position-embeddings", "4096", "--train-iters", "3"]

# R04: MoE/MLA under a budget moe_act cannot meet
R04 = ["--sim-preset", "moonlight-16b", "--num-layers", "4", "--moe-layer-freq", "([0]+[1]*3)",
       "--num-experts", "8", "--expert-model-parallel-size", "2", "--seq-length", "4096",
       "--max-position-embeddings", "4096", "--sim-world-size", "4", "--sim-only-ranks", "0",
       "--moe-grouped-gemm", "--global-batch-size", "2", "--train-iters", "3"]

# R02: a user's module outside Megatron's ranges, replayed with extra work
R02 = ["--sim-preset", "llama3-8b", "--num-layers", "8", "--hidden-size", "2048",
       "--ffn-hidden-size", "7168", "--num-attention-heads", "16", "--seq-length", "4096",
       "--max-position-embeddings", "4096", "--pipeline-model-parallel-size", "2",
       "--sim-world-size", "2", "--global-batch-size", "4", "--train-iters", "3",
       "--sim-aux-module-gib", "3", "--sim-aux-module-transient-gib", "7"]

# optimizer CPU offload (Megatron-Core's HybridDeviceOptimizer): SMALLJOB's two
# microbatches on a 17 GiB device, where the first Adam step's fp32 moments decide
# the OOM; --optimizer-offload-fraction is added per scenario
OFFLOAD = SMALLJOB + ["--global-batch-size", "2", "--use-distributed-optimizer",
                      "--use-precision-aware-optimizer", "--optimizer-cpu-offload"]

# retention not tied to recompute: SMALLJOB without recompute, (a) a logging hook
# that keeps 128 MiB after every one of 4 microbatches' forward (512 MiB more each
# iteration), 4 of 60 iterations recorded; (b) the last (only) pipeline stage keeps
# each of 8 microbatches' bf16 logits until the training step returns
LEAK_MICROBATCH = SMALLJOB[:-2] + ["--global-batch-size", "4", "--sim-leak-mib", "128",
                                   "--sim-leak-every", "microbatch", "--train-iters", "60"]
KEEP_OUTPUTS = SMALLJOB + ["--global-batch-size", "8", "--sim-keep-outputs"]

# a checkpoint save after every iteration: SMALLJOB's shapes at 1024 tokens, DP=2 (rank 0
# only), distributed optimizer; with --dist-ckpt-optim-fully-reshardable the optimizer
# state is all-gathered over DP with NCCL on the device and the save runs out of a 12 GiB
# device; with the mem-efficient (Gloo) gather it does not
SAVE = ["--sim-preset", "llama3-8b", "--num-layers", "4", "--hidden-size", "2048",
        "--ffn-hidden-size", "7168", "--num-attention-heads", "16", "--seq-length", "1024",
        "--max-position-embeddings", "1024", "--train-iters", "3", "--global-batch-size", "4",
        "--sim-world-size", "2", "--sim-only-ranks", "0", "--use-distributed-optimizer",
        "--save", "/nonexistent/megasim-ckpt", "--save-interval", "1",
        "--dist-ckpt-optim-fully-reshardable"]

# shapes that change: every fourth microbatch is an 8192-token sample among 2048-token
# ones (SMALLJOB's layers, a 32000-token vocabulary so the layers dominate), 12 GiB
SEQ_LENGTHS = ["--sim-preset", "llama3-8b", "--num-layers", "4", "--hidden-size", "2048",
               "--ffn-hidden-size", "7168", "--num-attention-heads", "16", "--seq-length", "2048",
               "--max-position-embeddings", "8192", "--vocab-size", "32000",
               "--train-iters", "3", "--global-batch-size", "4"]

# NCCL starved by PyTorch's cached pool (issue 21): SMALLJOB at 2048 tokens with
# 1 GiB NCCL buffers per communicator (4 at init, 1 and 2 GiB more at the first
# collectives), resumed from a checkpoint: the loaded state dict's transient
# (8 bytes per parameter) leaves PyTorch's cache at 18.26 GiB reserved, and the
# first communicator to connect (end of iteration 0's backward) finds no room on
# the one device memory state the runtime and driver doubles share, although
# PyTorch then allocates only 12.64 GiB. Without the resume the job runs.
NCCL_STARVED = ["--sim-preset", "llama3-8b", "--num-layers", "4", "--hidden-size", "2048",
                "--ffn-hidden-size", "7168", "--num-attention-heads", "16",
                "--seq-length", "2048", "--max-position-embeddings", "2048",
                "--train-iters", "3", "--global-batch-size", "2",
                "--sim-nccl-buffers-mib", "1024"]
NCCL_STARVED_CAP = 23.25

# a colocated inference engine's memory pool in the training process (issue 21):
# the R09-like fragmenting job with 8 GiB mapped by vLLM sleep mode's allocator
# (direct driver calls the shim does not see) on a 72 GiB device; the pool refuses
# expandable_segments:True, max_split_size_mb:128 lets the job run
R09_FLAGS = ["--sim-preset", "llama3-8b", "--num-layers", "24",
             "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
             "--sim-only-ranks", "0", "--use-distributed-optimizer",
             "--global-batch-size", "8", "--train-iters", "3", "--sim-fragment",
             "--sim-fragment-max-mib", "300"]
COLOCATED_POOL = R09_FLAGS + ["--sim-colocated-pool-gib", "8"]
COLOCATED_POOL_CAP = 72

# FP8 runs out of memory where bf16 fits (issue 21; NVIDIA/Megatron-LM issues 1236/1237):
# the README's Llama-3 8B layout at 4096 tokens on a 67 GiB device. bf16 fits (stage 0
# peaks at 62.2 GiB); with --fp8-format hybrid (delayed scaling) TE's cached FP8 weight
# copies and transposes add 0.41 GiB per layer for the whole run while the FP8 saved
# inputs save only 72 MiB per layer and microbatch in flight: stage 0 runs out of
# memory in iteration 1's forward at 66.3 GiB allocated
FP8_JOB = ["--sim-preset", "llama3-8b", "--pipeline-model-parallel-size", "2",
           "--sim-world-size", "4", "--use-distributed-optimizer", "--global-batch-size", "8",
           "--train-iters", "3", "--seq-length", "4096", "--max-position-embeddings", "4096"]
FP8_CAP = 67

# context parallelism's communication buffers apart from core attention (issue 21):
# SMALLJOB's layers at 16384 tokens over CP=2 (8192 per rank: q and O 32 MiB, K and V
# 16 MiB each), a 32000-token vocabulary, one microbatch; --cp-comm-type is added per
# test. At 11.5 GiB the job runs (10 GiB on the device) but is over the budget with
# its headroom; the fix is a recompute setting, never core_attn
CP_JOB = ["--sim-preset", "llama3-8b", "--num-layers", "4", "--hidden-size", "2048",
          "--ffn-hidden-size", "7168", "--num-attention-heads", "16", "--seq-length", "16384",
          "--max-position-embeddings", "16384", "--vocab-size", "32000",
          "--context-parallel-size", "2", "--sim-world-size", "2", "--global-batch-size", "1",
          "--train-iters", "3"]
CP_JOB_CAP = 11.5
# a hybrid Mamba/attention model (issue 21): the Nemotron-H-like preset cut to 14
# layers (6 Mamba-2, 2 attention, 6 MLP), h 2048, d_inner 4096, s 8192, one
# microbatch; on a 15.8 GiB device it runs out of memory in its second iteration
HYBRID_JOB = ["--sim-preset", "nemotron-h-8b", "--hybrid-layer-pattern", "M-M*-M-M-M*-M-",
              "--hidden-size", "2048", "--ffn-hidden-size", "8192", "--num-attention-heads", "16",
              "--mamba-num-heads", "64", "--vocab-size", "32000", "--global-batch-size", "1",
              "--train-iters", "3"]
HYBRID_JOB_CAP = 15.8

# name -> (flags, capacity GiB or None, extra recomp-analyze arguments)
SCENARIOS = {
    "main": (MAIN, None, []),
    "main-full-block-2": (MAIN + ["--recompute-granularity", "full", "--recompute-method",
                                  "block", "--recompute-num-layers", "2"], None, []),
    "main-full-block-3": (MAIN + ["--recompute-granularity", "full", "--recompute-method",
                                  "block", "--recompute-num-layers", "3"], None, []),
    "main-selective-mlp": (MAIN + ["--recompute-granularity", "selective",
                                   "--recompute-modules", "mlp"], None, []),
    "acc-llama3-8b": (SMALL["llama3-8b"] + PROFILE, None, []),
    "acc-gpt3-175b": (SMALL["gpt3-175b"] + PROFILE, None, []),
    "acc-moonlight-16b": (SMALL["moonlight-16b"] + PROFILE, None, []),
    "acc-deepseek-v2-lite": (SMALL["deepseek-v2-lite"] + PROFILE, None, []),
    "acc-cp": (SMALL["cp"] + PROFILE, None, []),
    "R01": (["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "4096",
             "--max-position-embeddings", "4096", "--global-batch-size", "2",
             "--train-iters", "3"] + PROFILE, None, ["--budget", "40GiB"]),
    "R02": (R02 + PROFILE, 18.5, []),
    "R02-full-uniform-1": (R02 + PROFILE + ["--recompute-granularity", "full",
                                            "--recompute-method", "uniform",
                                            "--recompute-num-layers", "1"], 18.5, []),
    "R04": (R04 + PROFILE, None, []),
    "R06": (["--sim-preset", "llama3-8b", "--num-layers", "16", "--seq-length", "1024",
             "--max-position-embeddings", "1024", "--global-batch-size", "1",
             "--train-iters", "2"] + PROFILE, 46, []),
    "R09": (["--sim-preset", "llama3-8b", "--num-layers", "24",
             "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
             "--sim-only-ranks", "0", "--use-distributed-optimizer",
             "--global-batch-size", "8", "--train-iters", "3", "--sim-fragment",
             "--sim-fragment-max-mib", "300"] + PROFILE, 64, []),
    "R12": (["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "2048",
             "--max-position-embeddings", "2048", "--global-batch-size", "2",
             "--train-iters", "3", "--cuda-graph-impl", "transformer_engine",
             "--cuda-graph-warmup-steps", "1", "--sim-graph-pool-gib", "4"] + PROFILE, 60, []),
    "R14": (["--sim-preset", "llama3-8b", "--num-layers", "8", "--seq-length", "2048",
             "--max-position-embeddings", "2048", "--pipeline-model-parallel-size", "4",
             "--sim-world-size", "4", "--global-batch-size", "8", "--train-iters", "3"] + PROFILE,
            None, []),
    "nccl-failing": (SMALLJOB + ["--global-batch-size", "2", "--sim-nccl-buffers-mib", "4096",
                                 "--sim-nccl-communicators", "4"] + PROFILE, 30, []),
    "outside-starved": (SMALLJOB + ["--global-batch-size", "2", "--sim-foreign-gib", "10"]
                        + PROFILE, 24, []),
    "outside-control": (SMALLJOB + ["--global-batch-size", "2"] + PROFILE, 24, []),
    "colocated-pool": (COLOCATED_POOL + PROFILE, COLOCATED_POOL_CAP, []),
    "nccl-starved": (NCCL_STARVED + ["--sim-resume-optimizer"] + PROFILE, NCCL_STARVED_CAP, []),
    "retention": (SMALLJOB + ["--global-batch-size", "8", "--sim-retain-replay",
                              "--recompute-granularity", "selective",
                              "--recompute-modules", "mlp"] + PROFILE, 24, []),
    "retention-control": (SMALLJOB + ["--global-batch-size", "8", "--recompute-granularity",
                                      "selective", "--recompute-modules", "mlp"] + PROFILE,
                          24, []),
    "offload-none": (OFFLOAD + ["--optimizer-offload-fraction", "0"] + PROFILE, 17, []),
    "offload-all": (OFFLOAD + PROFILE, 17, []),
    "leak-per-microbatch": (LEAK_MICROBATCH + ["--exit-interval", "4"] + PROFILE_ALL, 32, []),
    "keep-outputs": (KEEP_OUTPUTS + PROFILE, 24, []),
    "checkpoint-save": (SAVE + PROFILE, 12, []),
    "seq-lengths": (SEQ_LENGTHS + ["--sim-seq-lengths", "2048*3,8192"] + PROFILE, 12, []),
    "checkpoint-save-gloo": (SAVE + ["--distrib-optim-fully-reshardable-mem-efficient"] +
                             PROFILE, 12, []),
    "fp8-delayed": (FP8_JOB + ["--fp8-format", "hybrid"] + PROFILE, FP8_CAP, []),
    "fp8-bf16-control": (FP8_JOB + PROFILE, FP8_CAP, []),
}

# matched comparisons (recomp-analyze compare CONTROL CANDIDATE...) of the
# scenarios above: name -> [control, candidates...]
COMPARISONS = {
    "compare-main": ["main", "main-full-block-3", "main-full-block-2", "main-selective-mlp"],
}

# real traces recorded by others (RECOMP_FIXTURES: the fixtures folder beside
# the source tree in a development checkout and in CI)
FIXTURES = [
    "kineto/worker0.1623143089861.pt.trace.json.gz",
    "hta/df_index_resolver.json.gz",
    "hta/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "tracelens/resnet_act_checkpoint.json.gz",
    "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "cs336/Wedsonlin/medium_128_training_memory_snapshot.pickle",
    "cs336/Wedsonlin/medium_128_inference_memory_snapshot.pickle",
]

# issue 14 class A (public report replayed: NVIDIA-NeMo/Megatron-Bridge PR 3067,
# DeepSeek-V3 PP4 VPP4, `recompute_modules=[mlp]` OOMs): a mixed dense/MoE
# model (first layer dense, --moe-layer-freq) under virtual pipeline stages.
# The advisor numbered layers per model chunk and applied `mlp` to every
# chunk's local layer 0, MoE layers included: selective[mlp] predicted 9.11 GiB
# on rank 0, megasim ran it at 9.92 GiB (an OOM at 12.2 GiB), and the rerun's
# analysis expected twice the replay units it found (n/a). PP2 VPP2 EP2,
# ranks 0 (stage 0: layers 0-1, 4-5) and 2 (stage 1: 2-3, 6-7).
VPP_MIXED = ["--num-layers", "8", "--hidden-size", "1024", "--ffn-hidden-size", "16384",
             "--num-attention-heads", "16", "--num-experts", "16", "--moe-router-topk", "4",
             "--moe-ffn-hidden-size", "4096", "--moe-grouped-gemm",
             "--moe-token-dispatcher-type", "alltoall", "--moe-layer-freq", "([0]*1+[1]*7)",
             "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
             "--seq-length", "4096", "--max-position-embeddings", "4096", "--vocab-size", "32000",
             "--untie-embeddings-and-output-weights", "--attention-dropout", "0.0",
             "--hidden-dropout", "0.0", "--bf16", "--disable-bias-linear",
             "--use-distributed-optimizer", "--micro-batch-size", "1",
             "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
             "--expert-model-parallel-size", "2", "--sim-world-size", "4",
             "--global-batch-size", "8", "--train-iters", "3", "--sim-only-ranks", "0,2"]
VPP_MIXED_CAP = 12.2
# the same placement question with uneven first/last stages
# (--decoder-first/last-pipeline-num-layers) under VPP: 14 layers, PP4 VPP2, the
# first stage 2 layers (one per chunk), the last 4, dense layers 0, 7 and 8
# (each stage's chunks mix them differently); one rank per stage
_UNEVEN = {"--num-layers": "14", "--moe-layer-freq": "([0]*1+[1]*6+[0]*2+[1]*5)",
           "--pipeline-model-parallel-size": "4", "--sim-world-size": "8",
           "--sim-only-ranks": "0,2,4,6"}
VPP_UNEVEN = [_UNEVEN.get(VPP_MIXED[i - 1], f) if i else f for i, f in enumerate(VPP_MIXED)] + \
    ["--decoder-first-pipeline-num-layers", "2", "--decoder-last-pipeline-num-layers", "4"]
