"""A PyTorch allocation stream that exercises the caching allocator's rules
(docs/advisor.md "The allocator model"), run on the fake GPU under the shim by
test_cache_model_torch.py. argv[1]: the JSON file for PyTorch's own counters.

Deterministic (seeded): requests of every size class -- under 512 B, the
small pool (<= 1 MiB, 2 MiB segments), 1-10 MiB (20 MiB segments, split
into smaller blocks), large (rounded to 2 MiB, remainders > 1 MiB split,
<= 1 MiB not), tensors freed in shuffled order so free blocks merge and are
reused best-fit -- then a small MLP trained with and without
torch.utils.checkpoint (a recompute replay executed by PyTorch's autograd
thread)."""
import json
import random
import sys

import torch
from torch.utils.checkpoint import checkpoint

KIB, MIB = 1 << 10, 1 << 20


def sizes(rng, n):
    out = []
    for _ in range(n):
        c = rng.randrange(5)
        if c == 0:
            out.append(rng.randrange(1, 512))
        elif c == 1:
            out.append(rng.randrange(512, MIB + 1))
        elif c == 2:
            out.append(rng.randrange(MIB + 1, 10 * MIB))
        elif c == 3:
            out.append(rng.randrange(10 * MIB, 96 * MIB))
        else:  # exactly 1 MiB, 10 MiB and just under a 2 MiB multiple
            out.append(rng.choice([MIB, 10 * MIB, 22 * MIB - 700 * KIB, 40 * MIB]))
    return out


def churn(rng, rounds):
    live = []
    for _ in range(rounds):
        for s in sizes(rng, rng.randrange(4, 24)):
            live.append(torch.empty(s, dtype=torch.uint8, device="cuda"))
        rng.shuffle(live)
        del live[: rng.randrange(len(live) // 2, len(live) + 1)]
    del live


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(1024, 3072)
        self.fc2 = torch.nn.Linear(3072, 1024)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def train(ckpt):
    blocks = torch.nn.ModuleList(Block() for _ in range(3)).cuda()
    opt = torch.optim.AdamW(blocks.parameters())
    for _ in range(2):
        x = torch.randn(1536, 1024, device="cuda", requires_grad=True)
        for b in blocks:
            x = checkpoint(b, x, use_reentrant=True) if ckpt else b(x)
        x.float().pow(2).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    del blocks, opt


def main():
    rng = random.Random(14)
    churn(rng, 40)
    train(False)
    train(True)
    churn(rng, 20)
    torch.cuda.synchronize()
    with open(sys.argv[1], "w") as f:
        json.dump({"max_memory_reserved": torch.cuda.max_memory_reserved(),
                   "max_memory_allocated": torch.cuda.max_memory_allocated(),
                   "num_alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries", 0)}, f)


if __name__ == "__main__":
    main()
