#!/usr/bin/env python3
"""megasim's rank process, named like Megatron-LM's entry point so that the
recorded command line (/proc/self/cmdline) reads like a real job's:
    python3 .../pretrain_gpt.py --num-layers 32 --hidden-size 4096 ...
Launch it through `python3 -m megasim` (the torchrun stand-in)."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from megasim.training import main  # noqa: E402


def exit_barrier():
    """MEGASIM_EXIT_BARRIER=DIR:N (set by the launcher): wait, at most 60 s,
    until the N launched ranks have all finished their work, as a real job's
    ranks do in NCCL's last collective / destroy_process_group. So the ranks of
    one job are alive at the same time even on a loaded machine, and their
    traces' wall-clock spans overlap (recomp-analyze joins ranks from several
    directories only when they do)."""
    spec = os.environ.get("MEGASIM_EXIT_BARRIER")
    if not spec:
        return
    d, n = spec.rsplit(":", 1)
    try:
        open(os.path.join(d, os.environ.get("RANK", "0")), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(d)) < int(n) and time.monotonic() < deadline:
            time.sleep(0.005)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    try:
        rc = main(sys.argv[1:])
    finally:
        exit_barrier()
    sys.exit(rc)
