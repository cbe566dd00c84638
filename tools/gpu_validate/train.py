#!/usr/bin/env python3
"""A small GPT-style PyTorch training loop: recompshim's real-GPU workload.

Run by tools/gpu-validate.sh under LD_PRELOAD=librecompshim.so with torchrun
(world size 1, NCCL process group), once per allocator mode. It writes
PyTorch's own view of memory -- the oracles the shim's trace is checked
against (docs/validation/README.md) -- to OUT/counters-MODE.json:

  native, expandable  max_memory_allocated (of the loop and of each
                      iteration) / max_memory_reserved, the allocator's
                      stats, and a memory-history snapshot of the loop
                      (OUT/snapshot-MODE.pickle, for our importer)
  async               memory_stats() (pool attributes) and
                      max_memory_allocated where the backend supports it
  nocache             the peak of live tensor bytes, counted here by a
                      dispatch mode (the allocator's stats stay empty)
  oom                 the size PyTorch failed to allocate, then exit 3

NVTX ranges use Megatron-Core's names ([M] in docs/sources.md) so attribution by
suffix is exercised; two of the four layers are checkpointed
(torch.utils.checkpoint, non-reentrant), so their forward names appear
again on the autograd thread as recompute replays.
"""
import argparse
import json
import os
import pickle
import sys
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

TL = "megatron.core.transformer.transformer_layer.TransformerLayer"
ATTN = "megatron.core.transformer.attention.forward"
MLP = "megatron.core.transformer.mlp.forward"
nvtx = torch.cuda.nvtx


class Layer(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, ffn)
        self.fc2 = nn.Linear(ffn, h)

    def attention(self, x):
        nvtx.range_push(f"{TL}._forward_attention.self_attention")
        b, s, h = x.shape
        nvtx.range_push(f"{ATTN}.qkv")
        qkv = self.qkv(self.ln1(x))
        nvtx.range_pop()
        q, k, v = qkv.view(b, s, 3, self.heads, h // self.heads).unbind(2)
        nvtx.range_push(f"{ATTN}.core_attention")
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        nvtx.range_pop()
        nvtx.range_push(f"{ATTN}.linear_proj")
        o = self.proj(o.transpose(1, 2).reshape(b, s, h))
        nvtx.range_pop()
        nvtx.range_pop()
        return x + o

    def mlp(self, x):
        nvtx.range_push(f"{TL}._run_mlp.mlp")
        nvtx.range_push(f"{MLP}.linear_fc1")
        y = self.fc1(self.ln2(x))
        nvtx.range_pop()
        nvtx.range_push(f"{MLP}.activation")
        y = F.gelu(y)
        nvtx.range_pop()
        nvtx.range_push(f"{MLP}.linear_fc2")
        y = self.fc2(y)
        nvtx.range_pop()
        nvtx.range_pop()
        return x + y

    def forward(self, x):
        return self.mlp(self.attention(x))


class GPT(nn.Module):
    def __init__(self, vocab, h, heads, ffn, layers, recompute):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(Layer(h, heads, ffn) for _ in range(layers))
        self.out = nn.Linear(h, vocab, bias=False)
        self.recompute = set(recompute)

    def forward(self, tokens):
        nvtx.range_push("megatron.core.models.common.embeddings.language_model_embedding.forward")
        x = self.emb(tokens)
        nvtx.range_pop()
        for i, layer in enumerate(self.layers):
            if i in self.recompute:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return self.out(x)


class LiveTensorBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the bytes of live CUDA storages created under it (nocache's
    oracle: the caching allocator keeps no statistics there)."""

    def __init__(self):
        super().__init__()
        self.live = {}
        self.current = 0
        self.peak = 0

    def track(self, t):
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            return
        st = t.untyped_storage()
        key = st.data_ptr()
        if key in self.live or st.nbytes() == 0:
            return
        n = st.nbytes()
        self.live[key] = n
        self.current += n
        self.peak = max(self.peak, self.current)
        weakref.finalize(st, self.release, key)

    def release(self, key):
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            self.track(t)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True,
                    choices=["native", "expandable", "async", "nocache", "oom"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-cudnn", action="store_true",
                    help="switch cuDNN off (torch.backends.cudnn and cuDNN attention): "
                         "the fake GPU has only load-only cuDNN stubs")
    a = ap.parse_args()
    if a.no_cudnn:
        torch.backends.cudnn.enabled = False
        torch.backends.cuda.enable_cudnn_sdp(False)

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    dev = torch.device("cuda", local)
    counters = {"mode": a.mode, "torch": torch.__version__,
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                "alloc_backend": torch.cuda.get_allocator_backend(),
                "cudnn_enabled": bool(torch.backends.cudnn.enabled)}

    if a.mode == "oom":
        free, total = torch.cuda.mem_get_info()
        request = total * 2
        counters["oom_request_bytes"] = request
        # PyTorch's own record of the failed allocation: the OOM observer gets
        # the bytes the caching allocator asked the device for.
        seen = []
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach:
            attach(lambda device, alloc, device_allocated, device_free: seen.append(int(alloc)))
        try:
            torch.empty(request, dtype=torch.uint8, device=dev)
        except torch.OutOfMemoryError as e:
            counters["oom_message"] = str(e).splitlines()[0]
            if seen:
                counters["oom_observer_bytes"] = seen[0]
            json.dump(counters, open(os.path.join(a.out, f"counters-{a.mode}.json"), "w"),
                      indent=1)
            print(f"train.py: OOM as intended: {counters['oom_message']}", file=sys.stderr)
            sys.exit(3)
        sys.exit("train.py: expected an OOM")

    live = LiveTensorBytes() if a.mode == "nocache" else None
    history = a.mode in ("native", "expandable")
    torch.manual_seed(0)
    model = GPT(32000, a.hidden, 16, 4 * a.hidden, a.layers, recompute=[1, 3]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if history:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    torch.cuda.reset_peak_memory_stats()
    if live:
        for p in model.parameters():
            live.track(p)
        live.__enter__()
    iter_peaks = []
    for it in range(a.iterations):
        # Each iteration's own peak (the analyzer's per-iteration peaks are
        # checked against it): the counter restarts at the iteration's start.
        torch.cuda.reset_peak_memory_stats()
        nvtx.range_push(f"ProfilerStep#{it}")
        tokens = torch.randint(0, 32000, (a.batch, a.seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), tokens.view(-1))
        loss.backward()
        dist.all_reduce(loss.detach())
        nvtx.range_push(f"Optimizer.step#Adam.step")
        opt.step()
        nvtx.range_pop()
        opt.zero_grad(set_to_none=True)
        nvtx.range_pop()
        iter_peaks.append(torch.cuda.max_memory_allocated())
    torch.cuda.synchronize()
    if live:
        live.__exit__(None, None, None)
        counters["live_tensor_peak_bytes"] = live.peak
    # The loop's peak: the largest iteration peak (the counter was restarted
    # at each iteration's start, and nothing allocates between iterations).
    counters["max_memory_allocated"] = max(iter_peaks + [torch.cuda.max_memory_allocated()])
    counters["iteration_max_memory_allocated"] = iter_peaks
    counters["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    counters["memory_stats"] = {k: v for k, v in torch.cuda.memory_stats().items()
                                if isinstance(v, (int, float))}
    counters["iterations"] = a.iterations
    if history:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(os.path.join(a.out, f"snapshot-{a.mode}.pickle"), "wb") as f:
            pickle.dump(snap, f)
    with open(os.path.join(a.out, f"counters-{a.mode}.json"), "w") as f:
        json.dump(counters, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
