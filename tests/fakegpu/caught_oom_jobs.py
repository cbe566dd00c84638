#!/usr/bin/env python3
"""Plain PyTorch jobs that catch torch.cuda.OutOfMemoryError and run on, or
die of it (test_caught_oom_torch.py; the new-user report hnew2 finding 2).

  caught_oom_jobs.py probe    2 GiB made, half freed; two requests (100 GiB,
                              79 GiB) fail and are caught; 4 x 64 MiB more
  caught_oom_jobs.py backoff  "batch-size finder": ProfilerStep#k ranges;
                              a 128 GiB request fails in step 0 and is
                              caught, then steps 1-5 each hold 64 + 1 GiB
  caught_oom_jobs.py die      2 GiB, then a 100 GiB request that is not
                              caught: the job dies of it
Prints "caught N" (N: the OOMs caught) when it runs to its end.
"""
import sys

import torch

dev = torch.device("cuda:0")
nv = torch.cuda.nvtx
mode = sys.argv[1]
caught = 0
if mode in ("probe", "die"):
    nv.range_push("forward")
    xs = [torch.empty(256 << 20, dtype=torch.uint8, device=dev) for _ in range(8)]
    nv.range_pop()
    del xs[::2]
    for size in ((100 << 30, 79 << 30) if mode == "probe" else (100 << 30,)):
        try:
            nv.range_push("oom-try")
            big = torch.empty(size, dtype=torch.uint8, device=dev)
        except torch.cuda.OutOfMemoryError:
            if mode == "die":
                raise
            caught += 1
        finally:
            nv.range_pop()
    ys = [torch.zeros(64 << 20, dtype=torch.uint8, device=dev) for _ in range(4)]
elif mode == "backoff":
    bs = 128
    for step in range(6):
        nv.range_push("ProfilerStep#%d" % step)
        try:
            acts = [torch.empty(bs << 30, dtype=torch.uint8, device=dev)]
            acts.append(torch.empty(1 << 30, dtype=torch.uint8, device=dev))
            del acts
        except torch.cuda.OutOfMemoryError:
            caught += 1
            bs //= 2
        nv.range_pop()
torch.cuda.synchronize()
print("caught", caught, "max_allocated", torch.cuda.max_memory_allocated())
