#!/usr/bin/env python3
"""--sim-moe-imbalance under the real shim: the token counts of each MoE
layer's dispatch are in the trace (TAP).

The small Moonlight-like job of tests/scenarios.py (8 experts, top-6, EP=2,
ETP=1, TP=2 with SP, s 2048: n = 1024 tokens per rank, n*k = 6144 routed
copies) with --sim-moe-imbalance 0.625 runs ranks 0 and 1 (EP ranks 0 and 1)
under librecompshim.so. Every source sends round(0.625*6144) = 3840 copies to
EP rank 0 and 2304 to EP rank 1 (docs/megasim.md "MoE routing imbalance").
In the trace (recomp-dump --jsonl) each all-to-all is one NCCL group of a
ncclSend and a ncclRecv per peer, whose bytes are the copies x h x 2 (bf16,
h 2048): the received tokens per peer are recv bytes / 4096. Per MoE layer and
microbatch: the forward dispatch and the backward of the combine receive
EP x what each source sends this rank (7680 on rank 0, 4608 on rank 1), the
forward combine and the dispatch's backward receive this rank's own 6144.

recomp-analyze reads the same counts from the trace (analyzer/attribute/
moe_dispatch.c): each rank's report carries the note "MoE dispatch: routing is
uneven" with the most tokens received in one layer, the ratio to what the rank
sent and the fewest; the same job without the switch gets no such note.

Environment (tests/megasim/meson.build): RECOMP_SHIM, RECOMP_DUMP,
RECOMP_ANALYZE, MEGASIM_LIB_DIR, MEGASIM_PYDIR.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import scenarios  # noqa: E402
from harness import preload  # noqa: E402

ROW = 2048 * 2           # one token of h = 2048 in bf16
LAYERS, M, ITERS = 3, 2, 2    # MoE layers, microbatches per rank (gbs 4 / DP 2), iterations
results = []


def check(name, got, want):
    results.append((got == want, name, "" if got == want else "got %r want %r" % (got, want)))


def groups(trace):
    """the NCCL groups of ncclSend/ncclRecv in a trace, in order: each a
    (send bytes per peer, recv bytes per peer) pair of dicts"""
    p = subprocess.run([os.environ["RECOMP_DUMP"], "--jsonl", trace], capture_output=True,
                       text=True, check=True)
    out, cur = [], None
    for line in p.stdout.splitlines():
        r = json.loads(line)
        if r.get("kind") != "COLLECTIVE":
            continue
        op = r.get("op")
        if op == "group_start":
            cur = ({}, {})
        elif op == "group_end" and cur is not None:
            out.append(cur)
            cur = None
        elif op in ("send", "recv") and cur is not None:
            d = cur[0] if op == "send" else cur[1]
            d[r["peer"]] = d.get(r["peer"], 0) + r["bytes"]
    return out


def run(extra, iters):
    """the small Moonlight job, ranks 0 and 1, under the shim; its run directory"""
    tmp = tempfile.mkdtemp(prefix="moetrace.", dir=os.environ.get("TMPDIR"))
    env = dict(os.environ, MEGASIM_LIB_DIR=os.environ["MEGASIM_LIB_DIR"],
               PYTHONPATH=os.environ["MEGASIM_PYDIR"],
               LD_PRELOAD=preload(os.environ["RECOMP_SHIM"]), RECOMPSHIM_OUT=tmp)
    flags = [f for f in scenarios.SMALL["moonlight-16b"]] + scenarios.PROFILE
    flags[flags.index("--train-iters") + 1] = str(iters)
    p = subprocess.run([sys.executable, "-m", "megasim"] + flags + extra +
                       ["--sim-only-ranks", "0,1", "--sim-quiet"],
                       env=env, capture_output=True, text=True)
    check("megasim %s exits 0" % " ".join(extra), p.returncode, 0)
    runs = [os.path.join(tmp, d) for d in os.listdir(tmp)]
    return runs[0] if runs else None


def notes(rundir):
    """each rank's MoE dispatch notes in recomp-analyze --json"""
    p = subprocess.run([os.environ["RECOMP_ANALYZE"], "--json", rundir], capture_output=True,
                       text=True)
    doc = json.loads(p.stdout or "{}")
    return {r["rank"]: [n for n in r.get("notes", []) if n.startswith("MoE dispatch")]
            for r in doc.get("ranks", [])}


def main():
    rundir = run(["--sim-moe-imbalance", "0.625"], ITERS)
    runs = [rundir] if rundir else []
    traces = sorted(os.path.join(runs[0], f) for f in os.listdir(runs[0])) if runs else []
    check("two traces", len(traces), 2)
    send = {0: 3840 * ROW, 1: 2304 * ROW}
    for rank, trace in enumerate(traces):
        g = [x for x in groups(trace) if len(x[1]) == 2]       # the EP all-to-alls
        hot = {0: 3840, 1: 2304}[rank]
        recv_in = {0: hot * ROW, 1: hot * ROW}
        n = LAYERS * M * ITERS
        check("rank %d: first dispatch sends per peer" % rank, g[0][0] if g else None, send)
        check("rank %d: first dispatch receives per peer (tokens x h x 2)" % rank,
              g[0][1] if g else None, recv_in)
        check("rank %d: received tokens of the first dispatch" % rank,
              sum(g[0][1].values()) // ROW if g else None, 2 * hot)
        check("rank %d: groups receiving %d tokens (dispatch, combine backward)" % (rank, 2 * hot),
              sum(1 for x in g if x[1] == recv_in), 2 * n)
        check("rank %d: groups receiving the 6144 sent (combine, dispatch backward)" % rank,
              sum(1 for x in g if x[1] == send and x[0] == recv_in), 2 * n)
    got = notes(runs[0]) if runs else {}
    n = LAYERS * M * ITERS
    for rank, most, ratio, least in ((0, 7680, "1.25", 7680), (1, 4608, "0.75", 4608)):
        want = ("MoE dispatch: routing is uneven: this rank's experts received up to %d tokens "
                "in one MoE layer's all-to-all (layer 2, iteration 0), %sx the 6144 it sent "
                "(dropless and balanced: equal), at least %d; %d dispatches"
                % (most, ratio, least, n))
        check("recomp-analyze rank %d: the MoE dispatch note" % rank, got.get(rank), [want])
    control = run([], 1)
    check("balanced control: no MoE dispatch note",
          notes(control) if control else None, {0: [], 1: []})
    print("TAP version 13")
    print("1..%d" % len(results))
    for i, (ok, name, why) in enumerate(results, 1):
        print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name, (" # " + why) if why else ""))
    return 0 if all(ok for ok, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
