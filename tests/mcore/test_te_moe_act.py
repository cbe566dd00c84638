#!/usr/bin/env python3
"""moe_act recompute with grouped GEMM on the real Megatron-Core (issue 16;
docs/validation/megatron-core.md, "`moe_act` with grouped GEMM").

The accuracy matrix's `moe-grouped` row (tools/mcore_job/accuracy.py: 2
layers, 4 experts of FFN 1408 in TE's TEGroupedMLP/GroupedLinear, top-2,
capacity factor 1 with padding, 2 ranks, 3 iterations) runs twice under the
shim on the fake GPU: without recompute and with selective[moe_act]. The
driver runs Megatron with bias_activation_fusion off, so TEGroupedMLP's
activation is the unfused GLU, whose autograd keeps four [tokens, ffn]
tensors per layer (silu's output, the linear half plus the offset, their
product, the product with the probabilities) that moe_act frees. Checks:

  1. both runs exit 0 on both ranks with TEGroupedMLP built;
  2. from the baseline's trace the advisor predicts selective[moe_act]
     within 2% of the moe_act run's max_memory_allocated on every rank
     (it freed only silu's output before: +3.1%);
  3. from the moe_act run's trace (recompute on: its replays undone) the
     advisor predicts no recompute within 2% of the baseline's
     max_memory_allocated on every rank (-3.0% before).

SKIPs (77) as test_te_iter.py: no PyPI or CPython 3.12, or TE's PyTorch
extension not built in RECOMPSHIM_TE_CACHE (unless RECOMPSHIM_TE_BUILD=1).
Arguments: OUTDIR (default build/tests/mcore/out-te-moe-act).
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "mcore_job"))
import accuracy  # noqa: E402  (the matrix's rows: one definition of the job)
import test_mcore as tm  # noqa: E402  (run_job, analyze, check)
import test_te_iter as tti  # noqa: E402  (te_built)

FLAGS = accuracy.ROWS["moe-grouped"].split() + accuracy.COMMON
MOE_ACT = ["--recompute-granularity", "selective", "--recompute-modules", "moe_act"]


def within(pred, counters, what):
    """pred {str rank: bytes} within accuracy.TOLERANCE of each rank's
    max_memory_allocated"""
    for r, c in sorted(counters.items()):
        p, m = pred.get(str(r)), c["max_memory_allocated"]
        tm.check(p is not None and abs(p - m) <= accuracy.TOLERANCE * m,
                 "rank %d: %s predicted %s, measured %d (%s)"
                 % (r, what, p, m, "%+.2f%%" % (100.0 * (p - m) / m) if p else "none"))


def candidate(a, setting):
    return next((c for c in a["verdict"]["candidates"] if c["setting"] == setting), None)


def main():
    build = os.environ.get("RS_BUILD_DIR") or os.path.join(tm.ROOT, "build")
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(build, "tests", "mcore",
                                                             "out-te-moe-act")
    if tti.skip_without_te(build):
        return 77
    t0 = time.time()
    runs = {}
    for name, extra in (("none", []), ("moe_act", MOE_ACT)):
        rc, counters = tm.run_job(os.path.join(out, name), FLAGS + extra)
        ok = tm.check(rc == 0 and sorted(counters) == [0, 1] and
                      all(c["exit_status"] == 0 and "TEGroupedMLP" in c.get("module_classes", [])
                          for c in counters.values()),
                      "%s: exit 0 on both ranks, TEGroupedMLP built (see %s/job.log)"
                      % (name, os.path.join(out, name)))
        a = tm.analyze(build, os.path.join(out, name)) if ok else None
        if not tm.check(a is not None, "%s: recomp-analyze reads the run" % name):
            return 1
        runs[name] = (counters, a)
    c = candidate(runs["none"][1], "selective[moe_act]")
    if tm.check(c is not None and c["valid"], "selective[moe_act] is a valid candidate"):
        within(c["predicted_peak_bytes"], runs["moe_act"][0],
               "from the baseline, selective[moe_act]")
    c = candidate(runs["moe_act"][1], "none")
    if tm.check(c is not None, "from the moe_act run, no recompute is a candidate"):
        within(c["predicted_peak_bytes"], runs["none"][0], "from the moe_act run, none")
    print("# %d failed; %.0f s" % (len(tm.failures), time.time() - t0))
    return 1 if tm.failures else 0


if __name__ == "__main__":
    sys.exit(main())
