#!/usr/bin/env python3
"""Sum a meson testlog.json into the plain line 'N passed, N failed'.

A test whose output carries criterion's synthesis line counts its individual
tests, a TAP test its "ok"/"not ok" lines ("# TODO" and "# SKIP" ones are not
counted); any other test counts as one. Exit 1 when anything failed.

Skips are made visible: a test's "SKIP reason" / "# SKIP reason" lines and
criterion's "[SKIP] test: reason" lines are printed once per distinct reason,
with the number of tests, above the summary line ("N skipped: reason").
"""
import json
import re
import sys

SYNTH = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)")
TAP = re.compile(r"^(not ok|ok)\b(.*)$", re.M)
SKIP = re.compile(r"^(?:# )?SKIP (.+)$|^\[SKIP\] [^:]+: (.+)$|^(?:not ok|ok)\b.*# SKIP\b ?(.*)$",
                  re.M)


def skips(out, found):
    """Count each distinct skip reason in one test's output into found."""
    for m in SKIP.finditer(out):
        reason = next(g for g in m.groups() if g is not None).strip() or "no reason given"
        found[reason] = found.get(reason, 0) + 1


def main(path):
    passed = failed = 0
    skipped = {}
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        print(f"test-summary: {path}: {e}", file=sys.stderr)
        print("0 passed, 1 failed")
        return 1
    for line in lines:
        if not line.strip():
            continue
        t = json.loads(line)
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        ok = t.get("result") in ("OK", "EXPECTEDFAIL", "SKIP")
        skips(out, skipped)
        if t.get("result") == "SKIP":
            skipped["meson test %s (exit 77)" % t.get("name")] = 1
        m = SYNTH.findall(out)
        tap = [(st, rest) for st, rest in TAP.findall(out)
               if "# TODO" not in rest.upper() and "# SKIP" not in rest.upper()]
        if not m and tap:
            p = sum(1 for st, _ in tap if st == "ok")
            f = len(tap) - p
            passed += p
            failed += f
            if not ok and f == 0:
                failed += 1
            continue
        if m:
            _, p, f, c = map(int, m[-1])
            passed += p
            failed += f + c
            if not ok and f + c == 0:
                failed += 1  # the binary itself failed (timeout, crash after synthesis)
        elif t.get("result") == "SKIP":
            why = [l for l in out.splitlines() if "SKIP" in l]
            print(f"SKIP {t.get('name')}: {why[-1] if why else 'no reason given'}")
            continue
        elif ok:
            passed += 1
        else:
            failed += 1
    for reason, k in sorted(skipped.items()):
        print(f"{k} skipped: {reason}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/meson-logs/testlog.json"))
