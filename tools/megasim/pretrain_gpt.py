#!/usr/bin/env python3
"""megasim's rank process, named like Megatron-LM's entry point so that the
recorded command line (/proc/self/cmdline) reads like a real job's:
    python3 .../pretrain_gpt.py --num-layers 32 --hidden-size 4096 ...
Launch it through `python3 -m megasim` (the torchrun stand-in)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from megasim.training import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
