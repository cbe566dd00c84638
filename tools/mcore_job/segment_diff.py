#!/usr/bin/env python3
"""Where two allocator-model streams lay their segments out differently.

  tools/mcore_job/segment_diff.py RUN_DUMP REWRITE_DUMP [--min-bytes N]

Both arguments are files written by recomp-analyze with
RECOMP_ADVISOR_DUMP_STREAM=DIR (docs/advisor.md "Debugging a rewrite"): one
line per event of the stream the caching allocator model saw, each
allocation with where the model placed it (seg= segment start, segsize=,
off=). RUN_DUMP is normally the executed candidate's own stream (its current
setting: the first sweep of `recomp-analyze --rank R --jobs 1` on the
executed run, labels-0.0.txt), which the model replays to the byte of the
run's max_memory_reserved; REWRITE_DUMP is the baseline's rewrite of the
same setting (labels-<mask>.<n>.txt of the baseline's analysis).

Prints the segment openings of both side by side (start, size, the request
that opened it, its iteration and phase) up to the first opening that
differs, then the allocations of at least --min-bytes (default 100 MiB) in
order with their placement, up to the first one placed differently: where
the two layouts part. Exit status 0 when both streams open the same segments
and place every such allocation alike, 1 when they differ, 2 on bad input
(file and line named)."""
import argparse
import sys


def parse(path):
    """The events of one dump: a list of dicts (sign, id, bytes, the key=value
    fields as ints where numeric). Raises ValueError naming file and line."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                if parts[0] not in "+-" or len(parts) < 4:
                    raise ValueError("not an event")
                ev = {"sign": parts[0], "id": int(parts[1]), "bytes": int(parts[2])}
                for kv in parts[3:]:
                    k, v = kv.split("=", 1)
                    ev[k] = int(v) if v.lstrip("-").isdigit() else v
                for k in ("res", "live", "it"):
                    if k not in ev:
                        raise ValueError("no %s=" % k)
            except ValueError as e:
                raise ValueError("%s:%d: %s: %r" % (path, n, e, line.rstrip()[:120]))
            out.append(ev)
    return out


def openings(evs):
    """(event index, segment bytes added, the event) for each event that grew
    the reserved bytes"""
    res, out = 0, []
    for i, e in enumerate(evs):
        if e["res"] > res:
            out.append((i, e["res"] - res, e))
        res = e["res"]
    return out


def place(e):
    return (e.get("seg"), e.get("segsize"), e.get("off"))


def where(e):
    return "it%s %s%s" % (e["it"], e.get("ph", "?"), " bwd" if e.get("bwd") else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dump")
    ap.add_argument("rewrite_dump")
    ap.add_argument("--min-bytes", type=int, default=100 << 20)
    a = ap.parse_args()
    try:
        run, rew = parse(a.run_dump), parse(a.rewrite_dump)
    except (OSError, ValueError) as e:
        print("segment_diff: %s" % e, file=sys.stderr)
        return 2
    differ = 0
    print("segment openings (run | rewrite): start, bytes added, request, where")
    ro, wo = openings(run), openings(rew)
    for k in range(max(len(ro), len(wo))):
        r = ro[k] if k < len(ro) else None
        w = wo[k] if k < len(wo) else None
        same = r and w and r[1] == w[1] and r[2]["bytes"] == w[2]["bytes"] and \
            r[2].get("seg") == w[2].get("seg")
        cell = lambda x: ("%6d +%-11d req %-11d %-22s" % (x[0] + 1, x[1], x[2]["bytes"], where(x[2]))
                          if x else " " * 56)
        print("%s %s | %s" % ("  " if same else "!!", cell(r), cell(w)))
        if not same:
            differ = 1
            print("first different opening: run event %s, rewrite event %s" %
                  (r[0] + 1 if r else "-", w[0] + 1 if w else "-"))
            break
    big = lambda evs: [(i, e) for i, e in enumerate(evs)
                       if e["sign"] == "+" and e["bytes"] >= a.min_bytes]
    rb, wb = big(run), big(rew)
    print("allocations of at least %d bytes (run | rewrite): event, bytes, segment start "
          "+ offset, where" % a.min_bytes)
    for k in range(max(len(rb), len(wb))):
        r = rb[k] if k < len(rb) else None
        w = wb[k] if k < len(wb) else None
        same = r and w and r[1]["bytes"] == w[1]["bytes"] and place(r[1]) == place(w[1])
        cell = lambda x: ("%6d %-11d %s+%s %-22s" % (x[0] + 1, x[1]["bytes"], x[1].get("seg"),
                                                     x[1].get("off"), where(x[1]))
                          if x else " " * 50)
        print("%s %s | %s" % ("  " if same else "!!", cell(r), cell(w)))
        if not same:
            differ = 1
            print("first allocation placed differently: run event %s, rewrite event %s" %
                  (r[0] + 1 if r else "-", w[0] + 1 if w else "-"))
            break
    print("max reserved: run %d, rewrite %d" % (max((e["res"] for e in run), default=0),
                                                max((e["res"] for e in rew), default=0)))
    return differ


if __name__ == "__main__":
    sys.exit(main())
