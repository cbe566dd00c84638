"""Command line with Megatron-LM's exact flag spellings ([M] in docs/sources.md), the
validation errors of Megatron ([M] in docs/sources.md), presets, and megasim's own --sim-* flags.

allow_abbrev=False as in Megatron: prefixes are not accepted.
"""
import argparse
import re
import sys

PRESETS = {
    # examples/llama/train_llama3_8b_h100_fp8.sh shapes ([P] in docs/sources.md)
    "llama3-8b": [
        "--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336",
        "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8",
        "--kv-channels", "128", "--seq-length", "8192", "--max-position-embeddings", "8192",
        "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
        "--untie-embeddings-and-output-weights", "--vocab-size", "128256",
        "--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--bf16",
        "--transformer-impl", "transformer_engine", "--micro-batch-size", "1",
        "--disable-bias-linear"],
    # GPT-3 175B ([P] in docs/sources.md, Korthikanti et al. Table 3)
    "gpt3-175b": [
        "--num-layers", "96", "--hidden-size", "12288", "--ffn-hidden-size", "49152",
        "--num-attention-heads", "96", "--seq-length", "2048", "--max-position-embeddings", "2048",
        "--normalization", "LayerNorm", "--position-embedding-type", "learned_absolute",
        "--vocab-size", "51200", "--attention-dropout", "0.1", "--hidden-dropout", "0.1",
        "--fp16", "--transformer-impl", "transformer_engine", "--micro-batch-size", "1",
        "--tensor-model-parallel-size", "8", "--sequence-parallel",
        "--pipeline-model-parallel-size", "8"],
    # Moonlight-16B-A3B-like: 1 dense + 26 MLA+MoE layers ([P] in docs/sources.md)
    "moonlight-16b": [
        "--num-layers", "27", "--hidden-size", "2048", "--ffn-hidden-size", "11264",
        "--num-attention-heads", "16", "--multi-latent-attention", "--kv-lora-rank", "512",
        "--qk-head-dim", "128", "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128",
        "--qk-layernorm", "--num-experts", "64", "--moe-router-topk", "6",
        "--moe-ffn-hidden-size", "1408", "--moe-shared-expert-intermediate-size", "2816",
        "--moe-grouped-gemm", "--moe-token-dispatcher-type", "alltoall",
        "--moe-layer-freq", "([0]+[1]*26)", "--swiglu", "--normalization", "RMSNorm",
        "--position-embedding-type", "rope", "--seq-length", "4096",
        "--max-position-embeddings", "4096", "--vocab-size", "163840",
        "--untie-embeddings-and-output-weights", "--attention-dropout", "0.0",
        "--hidden-dropout", "0.0", "--bf16", "--transformer-impl", "transformer_engine",
        "--micro-batch-size", "1", "--tensor-model-parallel-size", "2", "--sequence-parallel",
        "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1",
        "--disable-bias-linear"],
    # DeepSeek-V2-Lite-like (Megatron DeepSeek-V2-Lite.sh)
    "deepseek-v2-lite": [
        "--num-layers", "27", "--hidden-size", "2048", "--ffn-hidden-size", "10944",
        "--num-attention-heads", "16", "--multi-latent-attention", "--kv-lora-rank", "512",
        "--qk-head-dim", "128", "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128",
        "--qk-layernorm", "--no-rope-fusion", "--num-experts", "64", "--moe-router-topk", "6",
        "--moe-ffn-hidden-size", "1408", "--moe-shared-expert-intermediate-size", "2816",
        "--moe-grouped-gemm", "--moe-token-dispatcher-type", "alltoall",
        "--moe-layer-freq", "([0]+[1]*26)", "--swiglu", "--normalization", "RMSNorm",
        "--position-embedding-type", "rope", "--seq-length", "4096",
        "--max-position-embeddings", "4096", "--vocab-size", "102400",
        "--untie-embeddings-and-output-weights", "--attention-dropout", "0.0",
        "--hidden-dropout", "0.0", "--bf16", "--transformer-impl", "transformer_engine",
        "--micro-batch-size", "1", "--tensor-model-parallel-size", "2", "--sequence-parallel",
        "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1",
        "--disable-bias-linear"],
    # Nemotron-H 8B-like hybrid (52 layers: 24 Mamba-2, 4 attention, 24 MLP): the defaults of
    # Hugging Face transformers' NemotronHConfig (models/nemotron_h/configuration_nemotron_h.py);
    # squared-ReLU MLP, no position embedding (docs/megasim.md "Hybrid Mamba layers")
    "nemotron-h-8b": [
        "--hybrid-layer-pattern", "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "--hidden-size", "4096", "--ffn-hidden-size", "21504", "--squared-relu",
        "--num-attention-heads", "32", "--group-query-attention", "--num-query-groups", "8",
        "--kv-channels", "128", "--mamba-num-heads", "128", "--mamba-head-dim", "64",
        "--mamba-state-dim", "128", "--mamba-num-groups", "8",
        "--seq-length", "8192", "--max-position-embeddings", "8192",
        "--normalization", "RMSNorm", "--position-embedding-type", "none",
        "--untie-embeddings-and-output-weights", "--vocab-size", "131072",
        "--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--bf16",
        "--transformer-impl", "transformer_engine", "--micro-batch-size", "1",
        "--disable-bias-linear"],
}

VALID_RECOMPUTE = ["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                   "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"]


def build_parser():
    p = argparse.ArgumentParser(prog="pretrain_gpt.py", allow_abbrev=False,
                                description="megasim: a simulated Megatron-LM GPT job")
    a = p.add_argument
    # network size
    a("--num-layers", type=int, default=None)
    a("--hidden-size", type=int, default=None)
    a("--ffn-hidden-size", type=int, default=None)
    a("--num-attention-heads", type=int, default=None)
    a("--group-query-attention", action="store_true")
    a("--num-query-groups", type=int, default=1)
    a("--kv-channels", type=int, default=None)
    a("--seq-length", type=int, default=None)
    a("--max-position-embeddings", type=int, default=None)
    a("--vocab-size", type=int, default=None)
    a("--make-vocab-size-divisible-by", type=int, default=128)
    a("--swiglu", action="store_true")
    # Megatron-LM's flag: bias_activation_fusion off. megasim models it for the
    # routed experts' activation (TEGroupedMLP's unfused GLU, model.py); the
    # dense MLP keeps the fused SwiGLU's tensors (docs/megasim.md)
    a("--no-bias-swiglu-fusion", action="store_false", dest="bias_swiglu_fusion")
    a("--normalization", default="LayerNorm", choices=["LayerNorm", "RMSNorm"])
    a("--position-embedding-type", default="learned_absolute",
      choices=["learned_absolute", "rope", "relative", "none"])
    a("--untie-embeddings-and-output-weights", action="store_true")
    a("--attention-dropout", type=float, default=0.1)
    a("--hidden-dropout", type=float, default=0.1)
    a("--no-rope-fusion", action="store_false", dest="apply_rope_fusion")
    # Megatron-LM: --disable-bias-linear (store_false into add_bias_linear, default on);
    # --add-bias-linear states the default explicitly (the last one given wins)
    a("--disable-bias-linear", action="store_false", dest="add_bias_linear", default=True)
    a("--add-bias-linear", action="store_true", dest="add_bias_linear")
    a("--qk-layernorm", action="store_true")
    a("--transformer-impl", default="transformer_engine",
      choices=["local", "transformer_engine", "inference_optimized"])
    a("--attention-backend", default="auto", choices=["flash", "fused", "unfused", "local", "auto"])
    a("--bf16", action="store_true")
    a("--fp16", action="store_true")
    a("--fp8-format", dest="fp8", default=None, choices=["e4m3", "hybrid"])
    a("--fp8-recipe", default="delayed",
      choices=["tensorwise", "delayed", "mxfp8", "blockwise", "custom"])
    # Megatron: TransformerConfig.fp8_amax_history_len = 1 (TE's own DelayedScaling default is 1024)
    a("--fp8-amax-history-len", type=int, default=1)
    # MLA
    a("--multi-latent-attention", action="store_true")
    a("--q-lora-rank", type=int, default=None)
    a("--kv-lora-rank", type=int, default=32)
    a("--qk-head-dim", type=int, default=128)
    a("--qk-pos-emb-head-dim", type=int, default=64)
    a("--v-head-dim", type=int, default=128)
    # MoE
    a("--num-experts", type=int, default=None)
    a("--moe-router-topk", type=int, default=2)
    a("--moe-ffn-hidden-size", type=int, default=None)
    a("--moe-shared-expert-intermediate-size", type=int, default=None)
    a("--moe-grouped-gemm", action="store_true")
    a("--moe-token-dispatcher-type", default="allgather", choices=["allgather", "alltoall", "flex"])
    a("--moe-layer-freq", default="1")
    a("--moe-shared-expert-overlap", action="store_true")
    a("--moe-expert-capacity-factor", type=float, default=None)
    a("--moe-pad-expert-input-to-capacity", action="store_true")
    a("--overlap-moe-expert-parallel-comm", action="store_true")
    a("--moe-layer-recompute", action="store_true")
    # hybrid Mamba/attention models (megatron-core 0.19.2: arguments.py, TransformerConfig)
    a("--hybrid-layer-pattern", default=None)
    a("--hybrid-override-pattern", default=None)
    a("--mamba-state-dim", type=int, default=128)
    a("--mamba-head-dim", type=int, default=64)
    a("--mamba-num-groups", type=int, default=8)
    a("--mamba-num-heads", type=int, default=None)
    a("--squared-relu", action="store_true")
    # parallelism
    a("--tensor-model-parallel-size", type=int, default=1)
    a("--pipeline-model-parallel-size", type=int, default=1)
    a("--num-layers-per-virtual-pipeline-stage", type=int, default=None)
    a("--num-virtual-stages-per-pipeline-rank", type=int, default=None)
    a("--decoder-first-pipeline-num-layers", type=int, default=None)
    a("--decoder-last-pipeline-num-layers", type=int, default=None)
    a("--expert-model-parallel-size", type=int, default=1)
    a("--expert-tensor-parallel-size", type=int, default=None)
    a("--context-parallel-size", type=int, default=1)
    a("--cp-comm-type", nargs="+", default=["p2p"])
    a("--sequence-parallel", action="store_true")
    a("--use-distributed-optimizer", action="store_true")
    a("--overlap-grad-reduce", action="store_true")
    a("--overlap-param-gather", action="store_true")
    # optimizer state precision (TE FusedAdam, --use-precision-aware-optimizer)
    a("--use-precision-aware-optimizer", action="store_true")
    a("--exp-avg-dtype", default="fp32", choices=["fp32", "fp16", "bf16", "fp8"])
    a("--exp-avg-sq-dtype", default="fp32", choices=["fp32", "fp16", "bf16", "fp8"])
    a("--main-params-dtype", default="fp32", choices=["fp32", "fp16"])
    a("--main-grads-dtype", default="fp32", choices=["fp32", "bf16"])
    # optimizer CPU offload (HybridDeviceOptimizer; arguments.py's defaults)
    a("--optimizer-cpu-offload", action="store_true")
    a("--optimizer-offload-fraction", type=float, default=1.0)
    a("--use-torch-optimizer-for-cpu-offload", action="store_true")
    a("--overlap-cpu-optimizer-d2h-h2d", action="store_true")
    # recompute
    a("--recompute-granularity", default=None)
    a("--recompute-method", default=None)
    a("--recompute-num-layers", type=int, default=None)
    a("--recompute-modules", nargs="+", default=None)
    a("--recompute-activations", action="store_true")
    a("--distribute-saved-activations", action="store_true")
    a("--cpu-offloading-num-layers", type=int, default=0)
    # CUDA graphs
    a("--cuda-graph-impl", default="none", choices=["none", "local", "transformer_engine",
                                                    "full_iteration"])
    a("--cuda-graph-modules", nargs="+", default=[])
    a("--cuda-graph-warmup-steps", type=int, default=3)
    a("--enable-cuda-graph", action="store_true")
    a("--external-cuda-graph", action="store_true")
    # training
    a("--micro-batch-size", type=int, default=None)
    a("--global-batch-size", type=int, default=None)
    a("--train-iters", type=int, default=None)
    a("--cross-entropy-loss-fusion", action="store_true")
    a("--cross-entropy-fusion-impl", default="native", choices=["native", "te"])
    a("--exit-interval", type=int, default=None)
    a("--log-interval", type=int, default=100)
    a("--empty-unused-memory-level", type=int, default=0, choices=[0, 1, 2])
    a("--variable-seq-lengths", action="store_true")
    # checkpointing (megasim writes nothing: the save's device bytes and collectives only)
    a("--save", default=None)
    a("--save-interval", "--persistent-save-interval", type=int, default=None)
    a("--async-save", action="store_true")
    a("--use-persistent-ckpt-worker", action="store_true")
    a("--ckpt-format", default="torch_dist", choices=["torch", "torch_dist", "torch_dcp",
                                                      "fsdp_dtensor"])
    a("--dist-ckpt-optim-fully-reshardable", action="store_true")
    a("--distrib-optim-fully-reshardable-mem-efficient", action="store_true")
    # profiling
    a("--profile", action="store_true")
    a("--profile-step-start", type=int, default=10)
    a("--profile-step-end", type=int, default=12)
    a("--profile-ranks", type=int, nargs="+", default=[])
    a("--nvtx-ranges", action="store_true")
    a("--record-memory-history", action="store_true")
    # megasim's own (a real job has none of these)
    g = p.add_argument_group("megasim")
    g.add_argument("--sim-preset", choices=sorted(PRESETS), default=None)
    g.add_argument("--sim-world-size", type=int, default=None,
                   help="ranks in the job (default TP*PP*CP, times DP from --sim-dp)")
    g.add_argument("--sim-dp", type=int, default=1, help="data-parallel size when world size is not given")
    g.add_argument("--sim-only-ranks", default=None,
                   help="launch only these ranks of the job (comma list), e.g. 0")
    g.add_argument("--sim-capacity-gib", type=float, default=None,
                   help="simulated device capacity (MOCK_CUDA_CAPACITY; default 80 GiB)")
    g.add_argument("--sim-foreign-gib", type=float, default=0.0,
                   help="fault: another process holds this much memory on each device")
    g.add_argument("--sim-colocated-pool-gib", type=float, default=0.0,
                   help="fault: a colocated inference engine's memory pool (vLLM sleep mode's "
                        "CuMemAllocator) maps this much in each rank with direct driver calls; "
                        "expandable_segments:True is refused as vLLM refuses it")
    g.add_argument("--sim-resume-optimizer", action="store_true",
                   help="fault: resume from a checkpoint: optimizer state allocated before the first "
                        "forward, with the transient duplicate made while loading")
    g.add_argument("--sim-resume-resident-stages", default=None,
                   help="fault, with --sim-resume-optimizer: on these pipeline stages (e.g. "
                        "'0' or '0,1') the loaded state dict stays referenced through the "
                        "first iteration's forward and backward (freed before its optimizer "
                        "step)")
    g.add_argument("--sim-retain-replay", action="store_true",
                   help="fault: tensors created by recompute replays stay alive into the next iteration")
    g.add_argument("--sim-grad-workspace-mib", type=float, default=0.0,
                   help="fault: each layer's attention makes and frees an X MiB workspace "
                        "only when grad mode is on (a kernel path that runs only when a "
                        "backward will follow), so a full-recompute replay allocates what "
                        "its no_grad forward did not")
    g.add_argument("--sim-leak-mib", type=float, default=0.0,
                   help="fault: every iteration a logging hook keeps X MiB of the first "
                        "microbatch's activations alive for good (retention that grows)")
    g.add_argument("--sim-seq-lengths", default=None,
                   help="sequence length of each microbatch in turn, cycling over the run's "
                        "microbatches: 'L1,L2,...', 'L*k' repeats L k times (e.g. '2048*3,8192': "
                        "every fourth microbatch is a long sample)")
    g.add_argument("--sim-leak-every", default="iteration", choices=["iteration", "microbatch"],
                   help="with --sim-leak-mib: keep X MiB once per iteration (its first "
                        "microbatch) or after every microbatch's forward")
    g.add_argument("--sim-keep-outputs", action="store_true",
                   help="fault: on the last pipeline stage the loss function hands back each "
                        "microbatch's logits undetached and the schedule's forward_data_store "
                        "keeps them until the training step returns")
    g.add_argument("--sim-drop-nvtx-range", action="append", default=[], metavar="SUFFIX",
                   help="fault: Megatron NVTX ranges whose name ends with SUFFIX are not emitted "
                        "(repeatable), as in layers whose code has no such range: "
                        "megatron-core 0.19.2's MLASelfAttention emits none inside "
                        "self_attention (e.g. SUFFIX core_attention)")
    g.add_argument("--sim-moe-imbalance", type=float, default=None,
                   help="fault: dropless MoE routing imbalance: the share F of the EP group's "
                        "routed token copies that the hottest expert-parallel rank (EP rank 0) "
                        "receives in every MoE layer (balanced: 1/EP; at most "
                        "min(topk, experts/EP)/topk); the others share the rest")
    g.add_argument("--sim-nccl-buffers-mib", type=float, default=0.0,
                   help="fault: NCCL buffers (outside PyTorch) per communicator, growing with each "
                        "communicator created")
    g.add_argument("--sim-nccl-communicators", type=int, default=0,
                   help="extra NCCL communicators (groups other code creates), each with buffers")
    g.add_argument("--sim-fragment", action="store_true",
                   help="fault: short-lived, variably sized cast/transpose buffers between saved "
                        "activations (fragments the caching allocator, R09)")
    g.add_argument("--sim-fragment-max-mib", type=float, default=900.0)
    g.add_argument("--sim-graph-pool-gib", type=float, default=None,
                   help="with --cuda-graph-impl: private-pool bytes per captured layer and scope")
    g.add_argument("--sim-aux-module-gib", type=float, default=0.0,
                   help="fault (R02): a user's extra embedding-like module (AuxEmbedding, no NVTX "
                        "range of its own) at the start of the first layer on the first stage; its "
                        "large-batch activations of this size are saved for its backward")
    g.add_argument("--sim-aux-module-transient-gib", type=float, default=0.0,
                   help="with --sim-aux-module-gib: the transient that module allocates and frees "
                        "again when a checkpoint replays it (full recompute), beyond its first pass")
    g.add_argument("--sim-print-layer-bytes", action="store_true",
                   help="print saved activation bytes per layer of microbatch 0 (size-model check)")
    g.add_argument("--sim-te-legacy", action="store_true",
                   help="older Transformer Engine range names (nvte_cublas_gemm, "
                        "nvte_multi_stream_cublas_gemm)")
    g.add_argument("--sim-quiet", action="store_true")
    g.add_argument("--sim-fork-worker", action="store_true",
                   help="each rank forks a data-loader-like worker after its setup; the worker "
                        "makes one 2 MiB cudaMalloc and its cudaFree and leaves through "
                        "os._exit(0), as multiprocessing's forked workers do")
    g.add_argument("--sim-counters-out", default=None,
                   help="write PyTorch-style memory counters of this rank as JSON to this file "
                        "(RANK is substituted for {rank}); the oracle of gpu-validate --dry-run")
    return p


def parse_layer_freq(s, n):
    s = str(s).strip()
    if re.fullmatch(r"\d+", s):
        k = int(s)
        return [1 if i % k == 0 else 0 for i in range(n)]
    if not re.fullmatch(r"[\[\]\(\)\d\s,+*]+", s):
        raise ValueError("Invalid --moe-layer-freq: %r" % s)
    pattern = eval(s, {"__builtins__": {}}, {})  # digits, lists, + and * only
    if len(pattern) != n:
        raise ValueError("Invalid length of moe_layer_pattern: %d, expected %d, current moe layer "
                         "pattern: %s" % (len(pattern), n, s))
    return list(pattern)


class ConfigError(Exception):
    pass


def parse_seq_lengths(args):
    """--sim-seq-lengths 'L1,L2*k,...' -> [L1, L2, L2, ...]; each length at most
    --max-position-embeddings (RoPE/learned positions) and divisible by CP (and
    by TP with sequence parallelism); pipelines need Megatron's
    --variable-seq-lengths (its p2p then sends shapes first); CUDA graphs and
    the interleaved schedule are not simulated with it"""
    out = []
    for tok in args.sim_seq_lengths.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\*\s*(\d+))?\s*", tok)
        if not m or int(m.group(1)) < 1:
            raise ConfigError("megasim: bad --sim-seq-lengths item %r (L or L*k)" % tok)
        out += [int(m.group(1))] * int(m.group(2) or 1)
    div = args.context_parallel_size * (args.tensor_model_parallel_size
                                        if args.sequence_parallel else 1)
    for s in out:
        if s > args.max_position_embeddings:
            raise ConfigError("megasim: --sim-seq-lengths %d is above --max-position-embeddings "
                              "%d" % (s, args.max_position_embeddings))
        if s % div:
            raise ConfigError("megasim: --sim-seq-lengths %d is not divisible by %d (CP x TP "
                              "with sequence parallelism)" % (s, div))
    if args.pipeline_model_parallel_size > 1 and not args.variable_seq_lengths:
        raise ConfigError("megasim: --sim-seq-lengths with pipeline parallelism needs "
                          "--variable-seq-lengths (Megatron's p2p assumes one shape otherwise)")
    if args.cuda_graph_impl != "none" or args.num_layers_per_virtual_pipeline_stage or \
            args.num_virtual_stages_per_pipeline_rank:
        raise ConfigError("megasim: --sim-seq-lengths is not simulated with CUDA graphs or the "
                          "interleaved schedule")
    return out


def check_moe_imbalance(args):
    """--sim-moe-imbalance F: dropless alltoall MoE with EP > 1 only, F between
    the balanced share 1/EP and the most one rank can receive, min(k, E/EP)/k
    (each token's k experts are distinct, E/EP of them local to a rank)"""
    E, ep, k = args.num_experts or 0, args.expert_model_parallel_size, args.moe_router_topk
    if not E or ep < 2:
        raise ConfigError("megasim: --sim-moe-imbalance needs an MoE model (--num-experts) with "
                          "--expert-model-parallel-size > 1")
    if args.moe_expert_capacity_factor is not None:
        raise ConfigError("megasim: --sim-moe-imbalance models dropless routing; with "
                          "--moe-expert-capacity-factor Megatron drops the tokens over capacity")
    if args.moe_token_dispatcher_type != "alltoall":
        raise ConfigError("megasim: --sim-moe-imbalance is simulated for the alltoall token "
                          "dispatcher only")
    top = min(k, E // ep) / k
    F = args.sim_moe_imbalance
    if not (1.0 / ep - 1e-9 <= F <= top + 1e-9):
        raise ConfigError("megasim: --sim-moe-imbalance %g is outside [1/EP, min(topk, "
                          "experts/EP)/topk] = [%g, %g]" % (F, 1.0 / ep, top))


def _check(cond, msg, exc=AssertionError):
    if not cond:
        raise exc(msg)


def finalize_hybrid(args):
    """--hybrid-layer-pattern: the layer count comes from the pattern (Megatron warns
    and ignores --num-layers), each layer's kind from its symbol (hybrid.parse_pattern);
    what megasim does not model with it is refused by name."""
    from .hybrid import parse_pattern
    if args.hybrid_override_pattern is not None and args.hybrid_layer_pattern is None:
        print("WARNING: --hybrid-override-pattern is deprecated. Use --hybrid-layer-pattern "
              "instead.", file=sys.stderr)
    kinds = parse_pattern(args)
    pattern = args.hybrid_layer_pattern or args.hybrid_override_pattern
    if args.num_layers is not None and args.num_layers != len(kinds):
        print("WARNING: --hybrid-layer-pattern is set; ignoring --num-layers (%d) and using the "
              "layer count derived from the pattern (%d)." % (args.num_layers, len(kinds)),
              file=sys.stderr)
    args.num_layers = len(kinds)
    args.hybrid_layer_pattern, args.hybrid_kinds = pattern, kinds
    _check(args.num_layers_per_virtual_pipeline_stage is None,
           "--num-layers-per-virtual-pipeline-stage should not be used with "
           "--hybrid-layer-pattern. To specify virtual pipelining, describe a number of "
           "pipeline segments in --hybrid-layer-pattern that is a multiple of "
           "--pipeline-model-parallel-size greater than 1")
    _check(args.num_virtual_stages_per_pipeline_rank is None,
           "--num-virtual-stages-per-pipeline-rank should not be used with "
           "--hybrid-layer-pattern. Virtual pipeline stages are derived from the "
           "number of | segments in the pattern.")
    if "moe" in kinds and not args.num_experts:
        raise ConfigError("megasim: hybrid layer symbol 'E' needs --num-experts")
    for flag, on in (("--fp8-format", args.fp8), ("--multi-latent-attention",
                     args.multi_latent_attention), ("--cuda-graph-impl",
                     args.cuda_graph_impl != "none" or args.enable_cuda_graph or
                     args.external_cuda_graph), ("--context-parallel-size",
                     args.context_parallel_size > 1)):
        if on:
            raise ConfigError("megasim: %s is not modelled with --hybrid-layer-pattern" % flag)


def finalize(args):
    """Defaults and validation in Megatron's order (arguments.py validate_args,
    TransformerConfig/ModelParallelConfig.__post_init__)."""
    if args.recompute_activations:
        args.recompute_granularity = "selective"
    if args.moe_layer_recompute:
        print("WARNING: --moe-layer-recompute is deprecated. Use --recompute-granularity selective "
              "--recompute-modules moe_layer instead.", file=sys.stderr)
        _check(args.recompute_granularity != "full",
               "Do not set --moe-layer-recompute with full recompute granularity. ")
        args.recompute_granularity = "selective"
        args.recompute_modules = list(args.recompute_modules or []) + ["moe"]
    if args.hybrid_layer_pattern is not None or args.hybrid_override_pattern is not None:
        finalize_hybrid(args)
    for f in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "micro_batch_size"):
        if getattr(args, f) is None:
            raise ConfigError("megasim: --%s is required (or use --sim-preset)" % f.replace("_", "-"))
    # --cp-comm-type (arguments.py, TransformerConfig.__post_init__ of core_v0.19.0):
    # one type for all layers or one per layer
    _check("a2a+p2p" not in args.cp_comm_type,
           "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm")
    if len(args.cp_comm_type) == 1:
        args.cp_comm_type = args.cp_comm_type[0]
    elif args.context_parallel_size > 1:
        _check(len(args.cp_comm_type) == args.num_layers,
               "Length of cp_comm_type (%d) should equal to the total number of transformer "
               "layers (%d)!" % (len(args.cp_comm_type), args.num_layers))
    if args.ffn_hidden_size is None:
        args.ffn_hidden_size = 4 * args.hidden_size if not args.swiglu else \
            int(4 * args.hidden_size * 2 / 3 / 64) * 64
    if args.kv_channels is None:
        args.kv_channels = args.hidden_size // args.num_attention_heads
    if not args.group_query_attention:
        args.num_query_groups = args.num_attention_heads
    if args.vocab_size is None:
        args.vocab_size = 50257
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    _check(not args.sim_resume_resident_stages or args.sim_resume_optimizer,
           "--sim-resume-resident-stages needs --sim-resume-optimizer")
    if not args.use_precision_aware_optimizer:
        _check(args.exp_avg_dtype == args.exp_avg_sq_dtype == args.main_params_dtype ==
               args.main_grads_dtype == "fp32",
               "--exp-avg-dtype, --exp-avg-sq-dtype, --main-params-dtype and --main-grads-dtype "
               "other than fp32 need --use-precision-aware-optimizer")
    if args.optimizer_cpu_offload:      # arguments.py validate_args (Megatron's message)
        _check(args.use_precision_aware_optimizer,
               "The optimizer cpu offload must be used in conjunction with "
               "`--use-precision-aware-optimizer`, as the hybrid device optimizer reuses the code "
               "path of this flag.")
        _check(args.use_distributed_optimizer,
               "--use-precision-aware-optimizer only supported with distributed optimizer",
               ValueError)
        _check(0.0 <= args.optimizer_offload_fraction <= 1.0,
               "megasim: --optimizer-offload-fraction must be between 0 and 1")
    args.sim_seq_list = parse_seq_lengths(args) if args.sim_seq_lengths else []
    if args.sim_moe_imbalance is not None:
        check_moe_imbalance(args)
    if args.ckpt_format != "torch" and args.async_save and not args.use_persistent_ckpt_worker:
        print("WARNING: --async-save is not supported without --use-persistent-ckpt-worker. "
              "Disabling --async-save.", file=sys.stderr)       # arguments.py validate_args
        args.async_save = False
    if args.enable_cuda_graph or args.external_cuda_graph:
        _check(args.cuda_graph_impl == "none",
               "Do not use enable_cuda_graph or external_cuda_graph with cuda_graph_impl.")
        _check(not (args.enable_cuda_graph and args.external_cuda_graph),
               "enable_cuda_graph and external_cuda_graph cannot be enabled at the same time.")
        args.cuda_graph_impl = "local" if args.enable_cuda_graph else "transformer_engine"
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    if args.sequence_parallel and tp == 1:
        print("WARNING: Disabling sequence parallelism because tensor model parallelism is disabled", file=sys.stderr)
        args.sequence_parallel = False
    if args.expert_tensor_parallel_size is None:
        args.expert_tensor_parallel_size = tp
    _check(not (args.bf16 and args.fp16), "cannot have both bf16 and fp16 enabled.")
    if args.overlap_param_gather:
        _check(args.use_distributed_optimizer,
               "--overlap-param-gather only supported with distributed optimizer, megatron fsdp, "
               "or dist_muon")
        _check(args.overlap_grad_reduce, "Must use --overlap-param-gather with --overlap-grad-reduce")
    if args.distribute_saved_activations:
        _check(tp > 1, "can distribute recomputed activations only across tensor model parallel groups")
        _check(args.recompute_granularity == "full",
               "distributed recompute activations is only application to full recompute granularity")
        _check(args.recompute_method is not None,
               "for distributed recompute activations to work you need to use a recompute method ")
    if args.recompute_granularity == "selective":
        _check(args.recompute_method is None,
               "recompute method is not yet supported for selective recomputing granularity")
    # ModelParallelConfig.__post_init__
    if args.sequence_parallel and tp <= 1:
        raise ValueError("Cannot use sequence parallelism without tensor parallelism")
    # TransformerConfig.__post_init__ (L1884+)
    cpu_off = args.cpu_offloading_num_layers > 0
    if cpu_off:
        _check(args.cpu_offloading_num_layers < args.num_layers,
               "CPU offloading can be done only for layers less than %d" % args.num_layers, ValueError)
        _check(pp == 1, "Currently there is no support for Pipeline parallelism with CPU offloading",
               ValueError)
        _check(args.recompute_granularity is None,
               "CPU offloading does not work when activation recomputation is enabled", ValueError)
    g = args.recompute_granularity
    if g is not None:
        if g not in ("full", "selective"):
            raise ValueError('When using recompute_granuarlity: %s must be "full"or "selective".' % g)
        if args.recompute_method is not None and args.recompute_method not in ("block", "uniform"):
            raise ValueError('recompute_method: %s must be "block" or "uniform".' % args.recompute_method)
        elif args.recompute_method is None and g != "selective":
            raise ValueError('Using recompute_granularity: %s so recompute_method must be "block" or '
                             '"uniform"' % g)
        if g != "selective" and args.recompute_num_layers is None:
            raise ValueError("When using recompute_granularity: %s recompute_num_layers must be between "
                             "1 and num_layers_per_pipeline_rank: %d" % (g, args.num_layers // pp))
        elif g == "selective" and args.recompute_num_layers is not None:
            raise ValueError("When using recompute_granularity: %s recompute_num_layers must be None." % g)
        if args.distribute_saved_activations and args.sequence_parallel:
            raise ValueError("distribute_saved_activations: %s must be false when sequence parallel "
                             "is enabled: %s" % (args.distribute_saved_activations, args.sequence_parallel))
    if args.moe_shared_expert_intermediate_size:
        # SharedExpertMLP.__init__ (megatron-core 0.19.2, transformer/moe/shared_experts.py)
        _check(not args.add_bias_linear, "bias is not supported in the shared experts, "
               "please set '--disable-bias-linear' instead.")
    if args.recompute_modules is None:
        args.recompute_modules = ["core_attn"]
    if g == "selective":
        invalid = set(args.recompute_modules) - set(VALID_RECOMPUTE)
        _check(not invalid, "Invalid choices for recompute_modules: %s. Allowed modules are: %s"
               % (invalid, set(VALID_RECOMPUTE)))
        mods = args.recompute_modules
        if "moe_act" in mods and not args.moe_grouped_gemm:
            raise ValueError("moe_act in recompute_modules is only supported with moe_grouped_gemm.")
        if "mla_up_proj" in mods and not args.multi_latent_attention:
            raise ValueError("mla_up_proj in recompute_modules is only supported with "
                             "multi_latent_attention.")
        if "gdn_norm_out" in mods:
            raise ValueError("gdn_norm_out in recompute_modules is only supported with "
                             "experimental_attention_variant='gdn' or 'gdn2'.")
        if "mhc" in mods:
            raise ValueError("'mhc' in recompute_modules requires enable_mhc_connections=True.")
        if "core_attn" in mods and args.transformer_impl == "transformer_engine":
            print("WARNING: If you are using transformer_engine as the transformer implementation, the "
                  "core_attn is from transformer_engine and may be the fused version. For fused "
                  "attention, you have no need to set 'core_attn' to recompute. Please check that "
                  "the core_attn recompute is really needed.", file=sys.stderr)
        if "shared_experts" in mods and args.moe_shared_expert_intermediate_size and \
                args.moe_shared_expert_overlap:
            raise ValueError("shared_experts recompute cannot work with --moe-shared-expert-overlap.")
        if args.fp8 and ("moe_act" in mods or "layernorm" in mods):
            if args.fp8_recipe == "delayed":
                raise ValueError("Delayed scaling does not support moe_act and layernorm recompute "
                                 "for fp8.")
    if args.fp8 and args.fp8_recipe == "custom":
        raise ValueError("megasim: --fp8-recipe custom (a user's quantizer factory) is not "
                         "modelled; use delayed, tensorwise, mxfp8 or blockwise")
    if args.moe_shared_expert_overlap and args.moe_token_dispatcher_type not in ("alltoall", "flex"):
        raise ValueError("moe_shared_expert_overlap only works with alltoall or flex token dispatcher.")
    if args.cuda_graph_impl != "none":
        if g == "full" and args.cuda_graph_impl != "full_iteration":
            raise ValueError("full recompute is only supported with full iteration CUDA graph.")
        if args.cuda_graph_impl == "full_iteration" and args.cuda_graph_modules:
            raise ValueError('cuda_graph_modules must be empty when cuda_graph_impl="full_iteration".')
        if cpu_off and args.cuda_graph_impl != "full_iteration":
            raise ValueError("CUDA graphs not supported with CPU offloading.")
        mods = args.cuda_graph_modules
        _check(not ("moe" in mods and "moe_router" in mods),
               "cuda_graph_modules must not contain both moe and moe_router.")
        if "moe" in mods and not args.num_experts:
            raise ValueError("moe cuda graph is only supported for MoE.")
    if args.overlap_moe_expert_parallel_comm:
        _check(args.expert_model_parallel_size > 1,
               "overlap_moe_expert_parallel_comm is only supported with expert model parallelism")
        _check(g != "full", "disable full recomputation when enabling overlap_moe_expert_parallel_comm")
        _check(args.recompute_method is None,
               "disable recomputation method when enabling overlap_moe_expert_parallel_comm")
        _check(args.recompute_num_layers is None,
               "recompute_num_layers must be None when enabling overlap_moe_expert_parallel_comm")
        _check(not (g == "selective" and "moe" in args.recompute_modules),
               "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm")
    # derived
    n = args.num_layers
    args.moe_pattern = parse_layer_freq(args.moe_layer_freq, n) if args.num_experts else [0] * n
    if args.num_experts and args.moe_ffn_hidden_size is None:
        args.moe_ffn_hidden_size = args.ffn_hidden_size
    if args.num_experts and tp > 1 and not args.sequence_parallel:
        raise ValueError("During training, performance may degrade if MoE and tensor parallelism "
                         "are enabled without also enabling sequence parallelism.")
    if getattr(args, "hybrid_kinds", None):
        from .hybrid import check_mamba
        check_mamba(args)
        args.moe_pattern = [1 if k == "moe" else 0 for k in args.hybrid_kinds]
    v, div = args.vocab_size, args.make_vocab_size_divisible_by * tp
    args.padded_vocab_size = (v + div - 1) // div * div
    return args
