#!/usr/bin/env python3
"""FP8 on Megatron-Core's Transformer Engine spec against megasim (issue 16;
docs/validation/megatron-core.md, "FP8 on the Transformer Engine spec").

Llama-3 70B layer shapes (hidden 8192, FFN 28672 SwiGLU, 64 heads, 8 query
groups, vocab 128256 untied, seq 4096, micro-batch 1) in 2 layers, bf16 with
FP8 hybrid tensorwise ("current") scaling, 2 ranks (DP=2, distributed
optimizer), 2 iterations, under the shim (tools/mcore_job/run.sh
--transformer-impl transformer_engine: TE 2.12.0's FP8 linears on the fake
H100, compute capability 9.0). Checks:

  1. both ranks finish (exit 0) with TE's modules;
  2. each rank's persistent buffers (driver.py buffer_bytes: parameters,
     DDP grad buffers, TE's cached FP8 weight copies, FP8 scaling state,
     fp32 main params, Adam state) equal megasim's for the same flags
     (megasim.buffers), byte for byte;
  3. the FP8 weight copies are 2 bytes per linear weight element (row-wise
     data and its transpose) plus a 4-byte scale_inv per linear, and the
     scaling state 40 bytes per linear and 120 per core attention;
  4. they are made at each layer's first forward and kept: a layer's first
     forward in iteration 0 leaves its copies and state live on top of what
     the same forward leaves in iteration 1 (driver.py layer_forward_bytes),
     each small tensor a 512-byte block of PyTorch's allocator;
  5. the analyzer's tensor-level peak equals max_memory_allocated.

SKIPs (exit 77) as `mcore te iteration`: without PyPI or CPython 3.12, and
unless TE's extension is already built (RECOMPSHIM_TE_BUILD=1 builds it).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_mcore as tm  # noqa: E402  (run_job, analyze, check)
import test_te_iter as ti  # noqa: E402  (skip_without_te)

HIDDEN, FFN, HEADS, GROUPS, SEQ, LAYERS = 8192, 28672, 64, 8, 4096, 2
SHAPE = ("--num-layers %d --hidden-size %d --ffn-hidden-size %d --num-attention-heads %d "
         "--seq-length %d --max-position-embeddings 8192 --micro-batch-size 1 "
         "--global-batch-size 2 --train-iters 2 --use-distributed-optimizer "
         "--fp8-format hybrid --fp8-recipe tensorwise"
         % (LAYERS, HIDDEN, FFN, HEADS, SEQ)).split()
MODEL = SHAPE + ("--group-query-attention --num-query-groups %d --vocab-size 128256 "
                 "--normalization RMSNorm --swiglu --disable-bias-linear "
                 "--position-embedding-type rope --untie-embeddings-and-output-weights "
                 "--transformer-impl transformer_engine --bf16 --attention-dropout 0 "
                 "--hidden-dropout 0 --profile --nvtx-ranges --profile-step-start 0 "
                 "--profile-step-end 2" % GROUPS).split()
MEGASIM = (["--sim-preset", "llama3-8b", "--num-query-groups", str(GROUPS),
            "--attention-backend", "unfused", "--sim-world-size", "2"] + SHAPE)
CLASSES = ("params", "grad_buffers", "fp8_weight_workspaces", "fp8_meta", "main_params",
           "optimizer_state")
BLOCK = 512            # PyTorch's caching allocator: the smallest block


def layer_linears():
    """(out_features, in_features) of one layer's four TE linears (TP=1)."""
    head = HIDDEN // HEADS
    return [(HIDDEN + 2 * GROUPS * head, HIDDEN), (HIDDEN, HIDDEN), (2 * FFN, HIDDEN),
            (HIDDEN, FFN)]


def megasim_buffers(build, rank):
    """megasim.buffers for rank RANK of the same job (a subprocess)."""
    env = dict(os.environ, MEGASIM_LIB_DIR=os.path.join(build, "tests", "megasim"),
               PYTHONPATH=os.path.join(tm.ROOT, "tools", "megasim"))
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([sys.executable, "-m", "megasim.buffers", str(rank), "2"] + MEGASIM,
                       capture_output=True, text=True, env=env)
    if p.returncode:
        print("# megasim.buffers exit %d: %s" % (p.returncode, p.stderr[-2000:]))
        return None
    return json.loads(p.stdout)


def first_forward_extra(c, layer):
    """Bytes LAYER's first forward of iteration 0 leaves live beyond its
    first forward of iteration 1 (driver.py layer_forward_bytes rows)."""
    rows = c.get("layer_forward_bytes", [])
    first = {}
    for it, num, b in rows:
        if num == layer and it not in first:
            first[it] = b
    return first[0] - first[1] if 0 in first and 1 in first else None


def main():
    build = os.environ.get("RS_BUILD_DIR") or os.path.join(tm.ROOT, "build")
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(build, "tests", "mcore", "out-te-fp8")
    if ti.skip_without_te(build):
        return 77
    t0 = time.time()
    os.environ["MCORE_LAYER_BYTES"] = "1"
    rc, counters = tm.run_job(out, MODEL)
    tm.check(rc == 0 and sorted(counters) == [0, 1] and
             all(c["exit_status"] == 0 for c in counters.values()),
             "TE spec with FP8: exit 0 on both ranks (see %s/job.log)" % out)
    weights = sum(n * k for n, k in layer_linears()) * LAYERS
    copies = 2 * weights + 4 * 4 * LAYERS
    state = (4 * 40 + 120) * LAYERS
    per_layer = 2 * sum(n * k for n, k in layer_linears()) + 4 * BLOCK + (4 * 10 + 30) * BLOCK
    for r, c in sorted(counters.items()):
        got = c.get("buffer_bytes", {})
        ms = megasim_buffers(build, r)
        tm.check(ms is not None and all(got.get(k) == ms[k] for k in CLASSES),
                 "rank %d: persistent buffers equal megasim's: real %s, megasim %s"
                 % (r, [got.get(k) for k in CLASSES], ms and [ms[k] for k in CLASSES]))
        tm.check(got.get("fp8_weight_workspaces") == copies and got.get("fp8_meta") == state,
                 "rank %d: FP8 weight copies %s == 2 x %d weight elements + 4 B per linear "
                 "(%d); scaling state %s == %d" % (r, got.get("fp8_weight_workspaces"), weights,
                                                   copies, got.get("fp8_meta"), state))
        extra = first_forward_extra(c, LAYERS)
        tm.check(extra == per_layer,
                 "rank %d: layer %d's first forward keeps %s bytes more in iteration 0 than "
                 "in iteration 1: its FP8 weight copies and scaling state, %d"
                 % (r, LAYERS, extra, per_layer))
    a = tm.analyze(build, out)
    if tm.check(a is not None, "recomp-analyze reads the run"):
        for r, c in sorted(counters.items()):
            rank = next((x for x in a["ranks"] if x["rank"] == r), None)
            tm.check(rank is not None and rank["peak"]["bytes"] == c["max_memory_allocated"],
                     "rank %d: tensor-level peak %s == max_memory_allocated %d"
                     % (r, rank and rank["peak"]["bytes"], c["max_memory_allocated"]))
    print("# %d failed; %.0f s" % (len(tm.failures), time.time() - t0))
    return 1 if tm.failures else 0


if __name__ == "__main__":
    sys.exit(main())
