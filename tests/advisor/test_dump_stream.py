#!/usr/bin/env python3
"""The allocator model's debugging dump (RECOMP_ADVISOR_DUMP_STREAM, docs/advisor.md
"Debugging a rewrite") and tools/mcore_job/segment_diff.py, TAP.

Issue 16 (the real Megatron-Core job, llama-te, selective[core_attn,mlp]):
finding where the baseline's rewrite of a candidate and the executed
candidate lay their segments out differently needs each allocation's place
in the model. Checked on megasim's small dense model (tests/advisor/
test_matrix.py DENSE), without recompute and with selective[mlp]:

  - the dump of a run's own setting is the run: event for event the block
    sizes and reserved bytes of its TENSOR records (the model replays its
    own trace to the byte);
  - every allocation carries its place (seg=, segsize=, off=): inside its
    segment, overlapping no other live block, segments disjoint;
  - segment_diff.py finds no difference between a dump and itself (exit 0),
    reports the two streams' max reserved bytes as the measured peak and
    the advisor's prediction, and names file and line of a bad dump (exit 2).

Environment (tests/advisor/meson.build): RECOMP_SHIM, RECOMP_ANALYZE, RECOMP_DUMP,
MEGASIM_LIB_DIR, MEGASIM_PYDIR.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_advisor as ta  # noqa: E402  (megasim runner, analysis, TAP output)
import test_matrix as tm  # noqa: E402  (the small dense model)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DIFF = os.path.join(ROOT, "tools", "mcore_job", "segment_diff.py")
DUMP = os.environ.get("RECOMP_DUMP") or os.path.join(os.path.dirname(ta.ANALYZE), "..", "tools",
                                                   "recomp-dump")
MLP = ["--recompute-granularity", "selective", "--recompute-modules", "mlp"]
MLP_MASK = 0x10  # advisor.h ADV_LABELS: core_attn 1, moe_act 2, layernorm 4, mla_up_proj 8, mlp 16


def dump_dir(run, tmps):
    """recomp-analyze --rank 0 --jobs 1 with RECOMP_ADVISOR_DUMP_STREAM: (dir, JSON)"""
    d = tempfile.mkdtemp(prefix="advdump.")
    tmps.append(d)
    env = dict(os.environ, RECOMP_ADVISOR_DUMP_STREAM=d)
    p = subprocess.run([ta.ANALYZE, "--json", "--rank", "0", "--jobs", "1", run], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        raise RuntimeError("recomp-analyze failed: %s" % p.stderr[-800:])
    return d, json.loads(p.stdout)


def events(path):
    """(sign, bytes, res, fields) of each dump line"""
    out = []
    with open(path) as f:
        for line in f:
            p = line.split()
            kv = dict(x.split("=", 1) for x in p[3:])
            out.append((p[0], int(p[2]), int(kv["res"]), kv, int(p[1])))
    return out


def tensor_records(run):
    """(sign, bytes, reserved) of rank 0's TENSOR records, in order"""
    f = [x for x in glob.glob(os.path.join(run, "*.rstrace")) if "rank0" in os.path.basename(x)]
    p = subprocess.run([DUMP, "--jsonl", "--kind", "TENSOR", f[0]], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    recs = [json.loads(x) for x in p.stdout.splitlines()[1:]]
    return [("+" if r["size"] > 0 else "-", abs(r["size"]), r["reserved"]) for r in recs]


def placement_errors(evs):
    """allocations without a place, outside their segment, overlapping a live
    block of it; segments that overlap"""
    bad, live, segs = [], {}, {}
    for k, (sign, size, _, kv, i) in enumerate(evs):
        if sign == "-":
            live.pop(i, None)
            continue
        if not all(x in kv for x in ("seg", "segsize", "off")):
            bad.append("event %d: no place" % (k + 1))
            continue
        seg, ss, off = int(kv["seg"]), int(kv["segsize"]), int(kv["off"])
        if segs.setdefault(seg, ss) != ss and ss < segs[seg]:
            bad.append("event %d: segment %d shrank %d -> %d" % (k + 1, seg, segs[seg], ss))
        segs[seg] = max(segs[seg], ss)
        if off + size > ss:
            bad.append("event %d: %d bytes at %d past segment size %d" % (k + 1, size, off, ss))
        for j, (s2, o2, z2) in live.items():
            if s2 == seg and off < o2 + z2 and o2 < off + size:
                bad.append("event %d: overlaps live allocation %d" % (k + 1, j))
        live[i] = (seg, off, size)
    starts = sorted(segs.items())
    for (a, sa), (b, _) in zip(starts, starts[1:]):
        if a + sa > b:
            bad.append("segments at %d (%d bytes) and %d overlap" % (a, sa, b))
    return bad


def run_diff(*args):
    p = subprocess.run([sys.executable, DIFF] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    tmps = []
    try:
        base, rc, tmp, err = ta.run_megasim(tm.DENSE + ta.PROFILE)
        tmps.append(tmp)
        on, rc2, tmp2, err2 = ta.run_megasim(tm.DENSE + ta.PROFILE + MLP)
        tmps.append(tmp2)
        if not ta.ok(rc == 0 and base and rc2 == 0 and on, "megasim ran without and with mlp",
                     (err + err2)[-1500:]):
            return 0
        bdir, bdoc = dump_dir(base, tmps)
        odir, _ = dump_dir(on, tmps)
        own = os.path.join(odir, "labels-0.0.txt")
        evs = events(own)
        recs = tensor_records(on)
        got = [(s, b, r) for s, b, r, _, _ in evs]
        first = next((k for k in range(min(len(got), len(recs))) if got[k] != recs[k]), None)
        ta.ok(len(got) == len(recs) and first is None,
              "the dump of the run's own setting is its TENSOR records: sizes and reserved "
              "bytes, event for event (%d events)" % len(recs),
              "dump %d events, trace %d; first difference at %s: %s / %s" % (
                  len(got), len(recs), first, first is not None and got[first],
                  first is not None and recs[first]))
        bad = placement_errors(evs)
        rewrite = sorted(glob.glob(os.path.join(bdir, "labels-%x.*.txt" % MLP_MASK)))
        if rewrite:
            bad += ["rewrite: " + b for b in placement_errors(events(rewrite[0]))]
        ta.ok(rewrite and not bad, "every allocation placed inside its segment, no overlaps "
              "(the run's own stream and the baseline's rewrite of mlp)", "\n".join(bad[:20]))
        rc, out, _ = run_diff(own, own)
        ta.ok(rc == 0 and "!!" not in out, "segment_diff: a dump against itself differs nowhere",
              out[-1500:])
        if rewrite:
            rc, out, _ = run_diff(own, rewrite[0])
            meas = max(r for _, _, r in recs)  # PyTorch's own reserved bytes, rank 0
            cand = next(c for c in bdoc["verdict"]["candidates"]
                        if c["setting"] == "selective[mlp]")
            pred = cand["predicted_reserved_bytes"]["0"]
            want = "max reserved: run %d, rewrite %d" % (meas, pred)
            ta.ok(rc in (0, 1) and want in out,
                  "segment_diff: the run's max reserved is the measured peak, the rewrite's "
                  "the advisor's prediction (%s)" % want, out[-1500:])
        badf = os.path.join(tmps[-1], "bad.txt")
        with open(own) as f, open(badf, "w") as g:
            lines = f.readlines()
            g.writelines(lines[:5] + ["+ 9 twelve p=1\n"] + lines[5:])
        rc, out, err = run_diff(own, badf)
        ta.ok(rc == 2 and "bad.txt:6:" in err, "segment_diff: a bad dump is refused, file and "
              "line named (exit 2)", "exit %d: %s" % (rc, err[-500:]))
    finally:
        for t in tmps:
            shutil.rmtree(t, ignore_errors=True)
    print("1..%d" % ta.TAP.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
