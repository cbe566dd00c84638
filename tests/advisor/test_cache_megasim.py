#!/usr/bin/env python3
"""The advisor's allocator model (advisor_cache.c) replays megasim's recorded
stream to megasim's reserved peak, TAP (issue 14; docs/advisor.md "The
allocator model").

megasim's allocator (tools/megasim/ms_alloc.c) follows PyTorch's rules the
model follows; both are held to real PyTorch on the fake GPU
(tests/fakegpu/test_cache_model_torch.py). The R09-like fragmenting job (cast
buffers of varying sizes) runs on a 200 GiB device, where it fits (OK:FITS:
the verdict's reserved prediction is the model's replay of the recorded
stream), under the defaults, expandable_segments:True and
max_split_size_mb:128; the model's reserved peak must equal megasim's to the
byte. Found with expandable segments: megasim's best fit took the free block
at a segment's mapped end like any other, PyTorch's takes it last (120 MiB
more reserved).

Environment (tests/advisor/meson.build): RECOMP_SHIM, RECOMP_ANALYZE,
MEGASIM_LIB_DIR, MEGASIM_PYDIR.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_advisor as ta  # noqa: E402  (megasim runner, analysis, TAP output)

R09 = ta.flagsets.R09_FLAGS + ta.PROFILE
CONFS = ["", "expandable_segments:True", "max_split_size_mb:128"]


def main():
    for conf in CONFS:
        name = conf or "defaults"
        old = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
        try:
            run, rc, tmp, err = ta.run_megasim(R09, 200)
        finally:
            if old is None:
                del os.environ["PYTORCH_CUDA_ALLOC_CONF"]
            else:
                os.environ["PYTORCH_CUDA_ALLOC_CONF"] = old
        try:
            if not ta.ok(rc == 0 and run, "%s: megasim runs the R09-like job" % name, err[-800:]):
                continue
            doc = ta.analyze(run)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        v = doc["verdict"]
        if not ta.ok(v["code"] == "OK:FITS", "%s: it fits 200 GiB (OK:FITS)" % name, v["why"]):
            continue
        model = {r["rank"]: r["predicted_reserved_bytes"] for r in v["ranks"]}
        sim = ta.reserved_peaks(doc)
        ta.ok(model == sim, "%s: the model's reserved peak equals megasim's on every rank "
              "(%s, megasim %s)" % (name, model, sim))
    print("1..%d" % ta.TAP.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
