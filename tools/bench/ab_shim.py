#!/usr/bin/env python3
"""ab_shim.py ROUNDS PAIRS THREADS WORKLOAD NAME=LIB[@VAR=VAL,...] ...: a quick
side-by-side of shim libraries on a loaded machine (docs/performance.md,
"Fifth round").

Each round runs bench_shim_overhead (run-all.sh builds it in build-bench/)
once without a shim and once with each LIB, in the same order; prints the
median added in-process CPU per event (ns) of each, and for every LIB after
the first the per-round difference from the first (median, quartiles, in how
many rounds it was lower): a load change during the run shifts both sides
of a round alike, so the paired difference is steadier than the medians.
@VAR=VAL sets environment variables for that variant (DIR=PATH: where its
trace goes, e.g. DIR=/dev/shm). Every run, the one without a shim too, is
against the mock runtime's per-thread arenas (MOCK_CUDA_THREAD_ARENAS=1, as
run-all.sh since the seventh round) unless the environment sets
MOCK_CUDA_THREAD_ARENAS (0: the mock's one lock). Nothing here asserts a time.

  tools/bench/ab_shim.py 21 200000 1 cudaMalloc+cudaFree \\
      main=build-bench-baseline/b/shim/librecompshim.so new=build-bench/shim/librecompshim.so
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.environ.get("BENCH_BIN", os.path.join(ROOT, "build-bench", "bench_shim_overhead"))


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    rounds, pairs, threads, workload = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    variants = []
    for arg in sys.argv[5:]:
        name, lib = arg.split("=", 1)
        extra = {}
        if "@" in lib:
            lib, kv = lib.split("@", 1)
            extra = dict(x.split("=", 1) for x in kv.split(","))
        variants.append((name, os.path.abspath(lib), extra))
    cpu = {"none": []}
    cpu.update({name: [] for name, _, _ in variants})
    loads = []
    for _ in range(rounds):
        loads.append(float(open("/proc/loadavg").read().split()[0]))
        for name, lib, extra in [("none", "", {})] + variants:
            extra = dict(extra)
            d = tempfile.mkdtemp(prefix="rs-ab.", dir=extra.pop("DIR", None))
            env = dict(os.environ, RECOMPSHIM_OUT=d, **extra)
            env.setdefault("MOCK_CUDA_THREAD_ARENAS", "1")
            if lib:
                env["LD_PRELOAD"] = lib
            out = subprocess.run([BENCH, pairs, threads, workload], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            shutil.rmtree(d)
            cpu[name].append(float(out[1]))
    base = statistics.median(cpu["none"])
    print("%s, %s threads x %s pairs, %d rounds, load %.0f-%.0f: without %.1f ns; added %s"
          % (workload, threads, pairs, rounds, min(loads), max(loads), base,
             ", ".join("%s %.1f" % (n, statistics.median(cpu[n]) - base) for n, _, _ in variants)))
    ref = variants[0][0]
    for name, _, _ in variants[1:]:
        d = sorted(x - y for x, y in zip(cpu[name], cpu[ref]))
        print("  %s - %s per round: median %+.1f, quartiles %+.1f / %+.1f, lower in %d of %d"
              % (name, ref, statistics.median(d), d[len(d) // 4], d[(3 * len(d)) // 4],
                 sum(1 for x in d if x < 0), len(d)))


if __name__ == "__main__":
    main()
