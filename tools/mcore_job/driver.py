#!/usr/bin/env python3
"""A small training job on the real Megatron-Core: recompshim's ground truth.

Our own driver (not a copy of Megatron-LM's pretrain_gpt.py): it takes
Megatron's own flag spellings, builds a GPTModel from a TransformerConfig
(local layer spec: Megatron-Core modules only; or Transformer Engine's spec
with --transformer-impl transformer_engine, TE installed by run.sh),
initialises parallel_state, wraps the model in Megatron's
DistributedDataParallel, builds Megatron's optimizer (the DistributedOptimizer
with --use-distributed-optimizer) and runs get_forward_backward_func()
schedules over mock data for --train-iters iterations. NVTX ranges are
switched on the way Megatron-LM's training loop does for `--profile
--nvtx-ranges`: megatron.core.utils.configure_nvtx_profiling(True) at
--profile-step-start, False after --profile-step-end.

Run by tools/mcore_job/run.sh under torchrun on the fake GPU (values are not
computed: the loss is 0, the memory is real). Each rank writes
MCORE_OUT/counters-rank<R>.json with PyTorch's own counters:
max_memory_allocated / max_memory_reserved (bytes) of the training loop and of
each iteration, the OutOfMemoryError's request size (bytes, from PyTorch's OOM
observer) and the job's exit status (0 done, 3 OOM, 2 refused flags).

Flags it does not know are refused by name (exit 2), never ignored.
"""
import argparse
import json
import os
import sys
import time

EXIT_OK, EXIT_USAGE, EXIT_OOM = 0, 2, 3


def flag_parser():
    """Megatron-LM's flag spellings (megatron/training/arguments.py) for the
    settings this driver supports; defaults are Megatron's where it has one."""
    p = argparse.ArgumentParser(prog="mcore_job", allow_abbrev=False)
    a = p.add_argument
    # model shape
    a("--num-layers", type=int, required=True)
    a("--hidden-size", type=int, required=True)
    a("--ffn-hidden-size", type=int)
    a("--num-attention-heads", type=int, required=True)
    a("--group-query-attention", action="store_true")
    a("--num-query-groups", type=int)
    a("--kv-channels", type=int)
    a("--seq-length", type=int, required=True)
    a("--max-position-embeddings", type=int)
    a("--vocab-size", type=int, default=32000)
    a("--make-vocab-size-divisible-by", type=int, default=128)
    a("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    a("--swiglu", action="store_true")
    a("--disable-bias-linear", action="store_true")
    a("--position-embedding-type", choices=["learned_absolute", "rope", "none"],
      default="learned_absolute")
    a("--rotary-base", type=int, default=10000)
    a("--untie-embeddings-and-output-weights", action="store_true")
    a("--attention-dropout", type=float, default=0.1)
    a("--hidden-dropout", type=float, default=0.1)
    a("--qk-layernorm", action="store_true")
    # Megatron-LM's default is transformer_engine; run.sh records
    # --transformer-impl local on the command line when it is not given, and
    # installs Transformer Engine (install-te.sh) when it is transformer_engine.
    a("--transformer-impl", choices=["local", "transformer_engine"], default="transformer_engine")
    # TransformerConfig.attention_backend (Megatron sets TE's NVTE_*_ATTN from
    # it); run.sh records --attention-backend unfused with the TE spec when it
    # is not given: the fake GPU has no flash-attn and cuDNN is a stub.
    a("--attention-backend", choices=["flash", "fused", "unfused", "local", "auto"],
      default="auto")
    # MoE (local SequentialMLP experts; capacity factor + padding, see docs)
    a("--num-experts", type=int)
    a("--moe-ffn-hidden-size", type=int)
    a("--moe-router-topk", type=int, default=2)
    a("--moe-expert-capacity-factor", type=float)
    a("--moe-pad-expert-input-to-capacity", action="store_true")
    a("--moe-token-dispatcher-type", choices=["allgather", "alltoall"], default="allgather")
    a("--moe-router-load-balancing-type", default="aux_loss")
    a("--moe-aux-loss-coeff", type=float, default=0.0)
    a("--moe-grouped-gemm", action="store_true")
    # Multi-Latent Attention (MLATransformerConfig; Transformer Engine spec only,
    # see parse_flags); defaults are Megatron-LM's
    a("--multi-latent-attention", action="store_true")
    a("--q-lora-rank", type=int)
    a("--kv-lora-rank", type=int, default=32)
    a("--qk-head-dim", type=int, default=128)
    a("--qk-pos-emb-head-dim", type=int, default=64)
    a("--v-head-dim", type=int, default=128)
    a("--rope-type", choices=["rope", "yarn"])
    # parallelism
    a("--tensor-model-parallel-size", type=int, default=1)
    a("--pipeline-model-parallel-size", type=int, default=1)
    a("--num-layers-per-virtual-pipeline-stage", type=int)
    a("--expert-model-parallel-size", type=int, default=1)
    a("--sequence-parallel", action="store_true")
    a("--use-distributed-optimizer", action="store_true")
    a("--overlap-grad-reduce", action="store_true")
    a("--overlap-param-gather", action="store_true")
    # recompute (TransformerConfig fields of the same names)
    a("--recompute-granularity", choices=["full", "selective"])
    a("--recompute-method", choices=["uniform", "block"])
    a("--recompute-num-layers", type=int)
    a("--recompute-modules", nargs="*")
    # training
    a("--micro-batch-size", type=int, required=True)
    a("--global-batch-size", type=int)
    a("--train-iters", type=int, default=3)
    a("--bf16", action="store_true")
    # FP8 (Transformer Engine spec only; TransformerConfig.fp8, fp8_recipe,
    # fp8_amax_history_len). mxfp8 is refused by name in parse_flags: TE
    # 2.12 asserts compute capability 10.0 for it and the fake GPU is an
    # H100 (9.0); custom needs a quantizer factory this driver does not take.
    a("--fp8-format", choices=["e4m3", "hybrid"])
    a("--fp8-recipe", default="delayed")
    a("--fp8-amax-history-len", type=int, default=1)
    a("--lr", type=float, default=1e-4)
    a("--seed", type=int, default=1234)
    a("--clip-grad", type=float, default=1.0)
    # profiling (Megatron-LM's --profile --nvtx-ranges path, nsys flavour)
    a("--profile", action="store_true")
    a("--nvtx-ranges", action="store_true")
    a("--profile-step-start", type=int, default=10)
    a("--profile-step-end", type=int, default=12)
    a("--profile-ranks", type=int, nargs="*", default=[])
    # this driver's own
    a("--mcore-out", default=os.environ.get("MCORE_OUT", "."),
      help="directory for counters-rank<R>.json")
    a("--mcore-check-flags", action="store_true",
      help="parse the flags, then exit (run.sh refuses bad flags before torchrun)")
    return p


def parse_flags(argv):
    """Parse Megatron flags; unknown ones are refused by name (exit 2)."""
    p = flag_parser()
    args, unknown = p.parse_known_args(argv)
    bad = [u for u in unknown if u.startswith("--")]
    if unknown:
        p.error("unsupported flag(s): %s (tools/mcore_job/driver.py supports only the flags "
                "in its --help; nothing is ignored)" % " ".join(bad or unknown))
    if args.transformer_impl == "transformer_engine" and os.environ.get("MCORE_TE") != "1":
        p.error("--transformer-impl transformer_engine: Transformer Engine is not installed "
                "(tools/mcore_job/run.sh installs it for this flag: tools/mcore_job/install-te.sh)")
    if args.multi_latent_attention and args.transformer_impl != "transformer_engine":
        p.error("--multi-latent-attention needs --transformer-impl transformer_engine: "
                "megatron-core 0.19.2's MLASelfAttention (transformer/multi_latent_attention.py) "
                "builds its core attention with k_channels/v_channels, which the local spec's "
                "DotProductAttention does not take (TypeError: DotProductAttention.__init__() "
                "got an unexpected keyword argument 'k_channels' when instantiating "
                "MLASelfAttention); only TE's TEDotProductAttention takes them")
    if args.transformer_impl == "transformer_engine" and args.attention_backend in (
            "flash", "fused", "auto"):
        p.error("--attention-backend %s: on the fake GPU Transformer Engine has no flash-attn "
                "package and cuDNN (its fused attention) is a load-only stub; use "
                "--attention-backend unfused (TE's UnfusedDotProductAttention) or local"
                % args.attention_backend)
    if args.moe_grouped_gemm and args.transformer_impl != "transformer_engine":
        p.error("--moe-grouped-gemm needs --transformer-impl transformer_engine: megatron-core "
                "0.19.2's local spec builds SequentialMLP experts whatever the flag says "
                "(models/backends.py LocalSpecProvider.grouped_mlp_modules); grouped GEMM is "
                "TE's GroupedLinear (TEGroupedMLP)")
    if args.fp8_recipe not in ("delayed", "tensorwise", "blockwise"):
        p.error("--fp8-recipe %s: not supported here (delayed, tensorwise and blockwise are; "
                "mxfp8 needs compute capability 10.0 in Transformer Engine 2.12 "
                "(check_mxfp8_support) and the fake GPU is an H100, 9.0; custom needs "
                "--fp8-quantizer-factory)" % args.fp8_recipe)
    if args.fp8_format and args.transformer_impl != "transformer_engine":
        p.error("--fp8-format needs --transformer-impl transformer_engine: FP8 GEMMs are "
                "Transformer Engine's (the local spec's linears stay in bf16)")
    if args.num_query_groups and not args.group_query_attention:
        p.error("--num-query-groups needs --group-query-attention (as in Megatron)")
    if args.recompute_method and args.recompute_granularity != "full":
        p.error("--recompute-method needs --recompute-granularity full")
    return args


def vpp_size(args):
    """Model chunks per pipeline stage from --num-layers-per-virtual-pipeline-stage
    (Megatron-LM's arithmetic), None without it."""
    if not args.num_layers_per_virtual_pipeline_stage:
        return None
    per_stage = args.num_layers // args.pipeline_model_parallel_size
    return per_stage // args.num_layers_per_virtual_pipeline_stage


def transformer_config(args, world):
    """TransformerConfig from the flags (recompute fields passed as they are)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.enums import AttnBackend
    kw = dict(
        num_layers=args.num_layers, hidden_size=args.hidden_size,
        ffn_hidden_size=args.ffn_hidden_size, num_attention_heads=args.num_attention_heads,
        num_query_groups=args.num_query_groups if args.group_query_attention else None,
        kv_channels=args.kv_channels, normalization=args.normalization,
        gated_linear_unit=args.swiglu, activation_func=F.silu if args.swiglu else F.gelu,
        add_bias_linear=not args.disable_bias_linear,
        attention_dropout=args.attention_dropout, hidden_dropout=args.hidden_dropout,
        qk_layernorm=args.qk_layernorm,
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        expert_model_parallel_size=args.expert_model_parallel_size,
        sequence_parallel=args.sequence_parallel,
        recompute_granularity=args.recompute_granularity,
        recompute_method=args.recompute_method,
        recompute_num_layers=args.recompute_num_layers,
        attention_backend=AttnBackend[args.attention_backend],
        bf16=args.bf16, params_dtype=torch.bfloat16 if args.bf16 else torch.float32,
        pipeline_dtype=torch.bfloat16 if args.bf16 else torch.float32,
        # no fused kernels: they are torch.compile'd (Triton) or Apex/TE ones
        bias_activation_fusion=False, masked_softmax_fusion=False,
        bias_dropout_fusion=False, apply_rope_fusion=False, persist_layer_norm=False,
        gradient_accumulation_fusion=False, cross_entropy_loss_fusion=False,
    )
    if args.fp8_format:
        kw.update(fp8=args.fp8_format, fp8_recipe=args.fp8_recipe,
                  fp8_amax_history_len=args.fp8_amax_history_len)
    if vpp_size(args):
        kw["virtual_pipeline_model_parallel_size"] = vpp_size(args)
    if args.recompute_modules is not None:
        kw["recompute_modules"] = args.recompute_modules
    if args.num_experts:
        kw.update(num_moe_experts=args.num_experts, moe_ffn_hidden_size=args.moe_ffn_hidden_size,
                  moe_router_topk=args.moe_router_topk,
                  moe_expert_capacity_factor=args.moe_expert_capacity_factor,
                  moe_pad_expert_input_to_capacity=args.moe_pad_expert_input_to_capacity,
                  moe_token_dispatcher_type=args.moe_token_dispatcher_type,
                  moe_router_load_balancing_type=args.moe_router_load_balancing_type,
                  moe_aux_loss_coeff=args.moe_aux_loss_coeff)
    if args.moe_grouped_gemm:
        kw["moe_grouped_gemm"] = True
    cls = TransformerConfig
    if args.multi_latent_attention:
        from megatron.core.transformer.transformer_config import MLATransformerConfig
        cls = MLATransformerConfig
        # q_lora_rank None (no query compression, Moonlight) is passed as None
        kw.update(q_lora_rank=args.q_lora_rank, kv_lora_rank=args.kv_lora_rank,
                  qk_head_dim=args.qk_head_dim, qk_pos_emb_head_dim=args.qk_pos_emb_head_dim,
                  v_head_dim=args.v_head_dim, rotary_base=args.rotary_base)
        if args.rope_type:
            kw["rope_type"] = args.rope_type
        return cls(**{k: v for k, v in kw.items() if v is not None or k == "q_lora_rank"})
    return cls(**{k: v for k, v in kw.items() if v is not None})


def layer_spec(args):
    """The layer spec of --transformer-impl: Megatron-Core's local spec, or its
    Transformer Engine spec (TE's modules: fused norm + linear, TE's attention,
    which on the fake GPU is TE's unfused backend: run.sh records
    --attention-backend unfused, since flash-attn is not installed and cuDNN
    is a stub), with TE's GroupedLinear experts for --moe-grouped-gemm and
    MLASelfAttention for --multi-latent-attention."""
    from megatron.core.models.gpt import gpt_layer_specs as specs
    if args.transformer_impl == "transformer_engine":
        return specs.get_gpt_layer_with_transformer_engine_spec(
            num_experts=args.num_experts, qk_layernorm=args.qk_layernorm,
            moe_grouped_gemm=args.moe_grouped_gemm,
            multi_latent_attention=args.multi_latent_attention)
    return specs.get_gpt_layer_local_spec(num_experts=args.num_experts,
                                          qk_layernorm=args.qk_layernorm,
                                          normalization=args.normalization)


def build_model(args, config):
    """The GPTModel chunks of this rank (one per virtual stage), on the GPU."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    spec = layer_spec(args)
    vocab = -(-args.vocab_size // (args.make_vocab_size_divisible_by *
                                   args.tensor_model_parallel_size)) * \
        args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    vpp = config.virtual_pipeline_model_parallel_size or 1
    chunks = []
    for v in range(vpp):
        vp_stage = v if vpp > 1 else None
        m = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=vocab,
                     max_sequence_length=args.max_position_embeddings or args.seq_length,
                     pre_process=ps.is_pipeline_first_stage(ignore_virtual=False,
                                                            vp_stage=vp_stage),
                     post_process=ps.is_pipeline_last_stage(ignore_virtual=False,
                                                            vp_stage=vp_stage),
                     share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
                     position_embedding_type=args.position_embedding_type,
                     rotary_base=args.rotary_base, vp_stage=vp_stage)
        if args.bf16:
            m = m.bfloat16()
        chunks.append(m.cuda(torch.cuda.current_device()))
    return chunks, vocab


def wrap_ddp(args, config, chunks):
    """Megatron's DistributedDataParallel around each chunk (the grad buffers)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=args.overlap_grad_reduce,
        overlap_param_gather=args.overlap_param_gather,
        use_distributed_optimizer=args.use_distributed_optimizer,
        check_for_nan_in_grad=False)
    wrapped = [DistributedDataParallel(config=config, ddp_config=ddp_config, module=m,
                                       disable_bucketing=(i > 0))
               for i, m in enumerate(chunks)]
    for m in wrapped:
        m.broadcast_params()
    return wrapped


def build_optimizer(args, model):
    """Megatron's optimizer over the chunks (DistributedOptimizer when asked)."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    oc = OptimizerConfig(optimizer="adam", lr=args.lr, bf16=args.bf16,
                         use_distributed_optimizer=args.use_distributed_optimizer,
                         clip_grad=args.clip_grad, params_dtype=model[0].config.params_dtype)
    return get_megatron_optimizer(oc, model)


def schedule_hooks(args, config, model):
    """The config hooks Megatron-LM's training.setup_model_and_optimizer sets:
    grad sync/finalize through DDP (overlap hooks only when asked)."""
    from megatron.core.distributed import finalize_model_grads
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = [m.no_sync for m in model]
    if len(model) == 1:
        config.no_sync_func = config.no_sync_func[0]
    if args.overlap_grad_reduce:
        config.grad_sync_func = [m.start_grad_sync for m in model]
        if len(model) == 1:
            config.grad_sync_func = config.grad_sync_func[0]
    if args.overlap_param_gather and args.use_distributed_optimizer:
        config.param_sync_func = [m.start_param_sync for m in model]
        if len(model) == 1:
            config.param_sync_func = config.param_sync_func[0]


def mock_batches(args, vocab):
    """An endless iterator of GPT micro-batches on the GPU (mock data: the
    token values do not matter here, only the shapes)."""
    import torch
    dev = torch.cuda.current_device()
    while True:
        tokens = torch.randint(0, vocab, (args.micro_batch_size, args.seq_length), device=dev)
        yield {"tokens": tokens, "labels": torch.roll(tokens, -1, 1),
               "loss_mask": torch.ones(tokens.shape, dtype=torch.float, device=dev),
               "position_ids": torch.arange(args.seq_length, device=dev).unsqueeze(0)
               .expand_as(tokens)}


def forward_step(data_iterator, model):
    """Megatron's forward_step_func contract: (output, loss_func)."""
    import torch
    from functools import partial
    b = next(data_iterator)
    out = model(b["tokens"], b["position_ids"], None, labels=b["labels"])

    def loss_func(loss_mask, output_tensor):
        losses = output_tensor.float()
        mask = loss_mask.view(-1).float()
        loss = torch.sum(losses.view(-1) * mask)
        ntok = mask.sum().to(torch.int)
        return loss, ntok, {"lm loss": torch.cat([loss.view(1).detach(), ntok.view(1)])}
    return out, partial(loss_func, b["loss_mask"])


def train(args, model, optimizer, config, vocab, counters):
    """Megatron-LM's train loop, reduced: per iteration zero the grad buffers,
    run the schedule, step the optimizer. NVTX ranges on for iterations
    [--profile-step-start, --profile-step-end) on --profile-ranks (all when
    empty), as training.py does. Per-iteration peaks go into counters."""
    import torch
    import torch.distributed as dist
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.utils import configure_nvtx_profiling
    from megatron.core import parallel_state as ps
    dp = ps.get_data_parallel_world_size()
    gbs = args.global_batch_size or args.micro_batch_size * dp
    num_micro = gbs // (args.micro_batch_size * dp)
    if num_micro < 1 or gbs % (args.micro_batch_size * dp):
        raise SystemExit("global batch size %d is not divisible by micro batch size %d times "
                         "data parallel size %d" % (gbs, args.micro_batch_size, dp))
    counters["num_microbatches"] = num_micro
    profile_here = args.profile and (not args.profile_ranks or
                                     dist.get_rank() in args.profile_ranks)
    fwd_bwd = get_forward_backward_func()
    data = [mock_batches(args, vocab) for _ in model]
    peaks = counters["iteration_max_memory_allocated"]
    for it in range(args.train_iters):
        if profile_here and it == args.profile_step_start and args.nvtx_ranges:
            configure_nvtx_profiling(True)
            torch.cuda.cudart().cudaProfilerStart()
        torch.cuda.reset_peak_memory_stats()
        for m in model:
            m.zero_grad_buffer()
        optimizer.zero_grad()
        fwd_bwd(forward_step_func=forward_step,
                data_iterator=data if len(data) > 1 else data[0],
                model=model if len(model) > 1 else model[0],
                num_microbatches=num_micro, seq_length=args.seq_length,
                micro_batch_size=args.micro_batch_size, forward_only=False)
        optimizer.step()
        peaks.append(torch.cuda.max_memory_allocated())
        counters["iterations_done"] = it + 1
        if profile_here and it + 1 == args.profile_step_end and args.nvtx_ranges:
            configure_nvtx_profiling(False)
            torch.cuda.cudart().cudaProfilerStop()


def _storage_bytes(tensors, seen):
    """Bytes of the distinct device storages behind TENSORS (each storage once,
    by its data pointer; SEEN carries the pointers across calls)."""
    import torch
    n = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            continue
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            n += st.nbytes()
    return n


def _quantized_parts(q):
    """The device tensors of one Transformer Engine quantized tensor
    (Float8Tensor: _data, _transpose, _scale_inv; MXFP8 and blockwise:
    row-wise/column-wise data and scales)."""
    names = ("_data", "_transpose", "_scale_inv", "_rowwise_data", "_columnwise_data",
             "_rowwise_scale_inv", "_columnwise_scale_inv")
    return [getattr(q, a, None) for a in names]


def buffer_bytes(model, optimizer):
    """Per-buffer device bytes of this rank, read from the live objects after
    training (each storage counted once, in the first class that names it):
    params (the model's parameters: the DDP param buffer under the
    distributed optimizer), grad_buffers (DDP's grad buffers: grad_data),
    fp8_weight_workspaces (Transformer Engine's cached quantized weights,
    module._fp8_workspaces, every usage and scale), fp8_meta (TE's FP8
    scaling state: fp8_meta's scale/amax_history tensors and the
    quantizers' scale/amax), optimizer_state (the optimizer's state dict:
    Adam's moments) and main_params (the fp32 copies of bf16 parameters:
    the DistributedOptimizer's shard_fp32_from_float16_groups, the
    Float16 optimizer's fp32_from_float16_groups)."""
    import torch
    seen, out = set(), {}
    out["params"] = _storage_bytes([p for m in model for p in m.parameters()], seen)
    out["grad_buffers"] = _storage_bytes(
        [b.grad_data for m in model for b in m.buffers + m.expert_parallel_buffers], seen)
    ws, meta = [], []
    for m in model:
        for mod in m.modules():
            for q in getattr(mod, "_fp8_workspaces", {}).values():
                ws += _quantized_parts(q)
            fm = getattr(mod, "fp8_meta", None) or {}
            for key in ("scaling_fwd", "scaling_bwd"):
                st = fm.get(key)
                meta += [getattr(st, a, None) for a in ("scale", "amax_history")]
            for qs in (getattr(mod, "quantizers", None) or {}).values():
                for qz in qs or []:
                    meta += [getattr(qz, a, None) for a in ("scale", "amax")]
    out["fp8_weight_workspaces"] = _storage_bytes(ws, seen)
    out["fp8_meta"] = _storage_bytes(meta, seen)
    opts = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    state, main = [], []
    for o in opts:
        inner = getattr(o, "optimizer", None)
        for st in (getattr(inner, "state", None) or {}).values():
            state += [v for v in st.values() if isinstance(v, torch.Tensor)]
        for attr in ("shard_fp32_from_float16_groups", "fp32_from_float16_groups"):
            for g in getattr(o, attr, None) or []:
                main += list(g)
    out["main_params"] = _storage_bytes(main, seen)
    out["optimizer_state"] = _storage_bytes(state, seen)
    return out


def layer_forward_bytes(chunks, counters):
    """Record, for each TransformerLayer forward call, the change of
    torch.cuda.memory_allocated() across it (bytes: what the layer leaves
    live, its saved tensors and output, plus anything it makes to keep, such
    as TE's FP8 weight copies at its first forward) as counters
    ["layer_forward_bytes"]: [iteration, layer_number, bytes] rows, iteration
    from counters["iterations_done"]. Calls made by recompute in the backward
    are rows too (the schedule's order tells them apart)."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer
    rows = counters.setdefault("layer_forward_bytes", [])
    before = {}

    def pre(mod, args, kwargs=None):
        before[id(mod)] = torch.cuda.memory_allocated()

    def post(mod, args, out):
        rows.append([counters["iterations_done"], mod.layer_number,
                     torch.cuda.memory_allocated() - before.pop(id(mod), 0)])
    for c in chunks:
        for m in c.modules():
            if isinstance(m, TransformerLayer):
                m.register_forward_pre_hook(pre)
                m.register_forward_hook(post)


def oom_observer(counters):
    """Record the bytes of each failed device allocation (PyTorch's OOM
    observer: the size the caching allocator asked the device for)."""
    import torch
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach:
        def seen(device, alloc, device_allocated, device_free):
            counters.setdefault("oom_observer_bytes", int(alloc))
        attach(seen)


def write_counters(args, counters, rank):
    """OUT/counters-rank<R>.json with PyTorch's own counters (bytes)."""
    import torch
    counters["max_memory_allocated"] = max(counters["iteration_max_memory_allocated"] +
                                           [torch.cuda.max_memory_allocated()])
    counters["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    counters["memory_stats"] = {k: v for k, v in torch.cuda.memory_stats().items()
                                if isinstance(v, (int, float))}
    path = os.path.join(args.mcore_out, "counters-rank%d.json" % rank)
    with open(path + ".tmp", "w") as f:
        json.dump(counters, f, indent=1)
    os.replace(path + ".tmp", path)


def main(argv):
    """Parse, initialise torch.distributed (NCCL) and parallel_state, build,
    train; exit 0, 3 on OutOfMemoryError (counters written either way)."""
    args = parse_flags(argv)
    if args.mcore_check_flags:
        return EXIT_OK
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from importlib.metadata import version
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    torch.backends.cudnn.enabled = False
    # Object collectives (all_gather_object: Megatron's optimizer compares
    # parameter keys across ranks) pickle through a tensor; over the mock NCCL
    # nothing moves, so they go over Gloo: CPU tensors, real values. Every
    # CUDA tensor collective stays on NCCL.
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    os.makedirs(args.mcore_out, exist_ok=True)
    counters = {"rank": rank, "world_size": dist.get_world_size(), "torch": torch.__version__,
                "megatron_core": version("megatron-core"), "argv": argv,
                "iteration_max_memory_allocated": [], "iterations_done": 0,
                "exit_status": None}
    oom_observer(counters)
    t0 = time.time()
    try:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=args.tensor_model_parallel_size,
            pipeline_model_parallel_size=args.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=vpp_size(args),
            expert_model_parallel_size=args.expert_model_parallel_size)
        model_parallel_cuda_manual_seed(args.seed)
        config = transformer_config(args, dist.get_world_size())
        chunks, vocab = build_model(args, config)
        if os.environ.get("MCORE_LAYER_BYTES") == "1":
            layer_forward_bytes(chunks, counters)
        # which implementation was built (TE's modules or the local ones)
        counters["module_classes"] = sorted({type(m).__name__ for c in chunks
                                             for m in c.modules()})
        if args.transformer_impl == "transformer_engine":
            counters["transformer_engine"] = version("transformer-engine")
        model = wrap_ddp(args, config, chunks)
        optimizer = build_optimizer(args, model)
        schedule_hooks(args, config, model)
        train(args, model, optimizer, config, vocab, counters)
        torch.cuda.synchronize()
        counters["buffer_bytes"] = buffer_bytes(model, optimizer)
        counters["exit_status"] = EXIT_OK
    except torch.OutOfMemoryError as e:
        counters["oom_message"] = str(e).splitlines()[0]
        counters["exit_status"] = EXIT_OOM
        print("mcore_job: rank %d: OutOfMemoryError: %s" % (rank, counters["oom_message"]),
              file=sys.stderr)
    counters["wall_s"] = round(time.time() - t0, 3)
    write_counters(args, counters, rank)
    if counters["exit_status"] == EXIT_OK:
        dist.destroy_process_group()
    return counters["exit_status"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
