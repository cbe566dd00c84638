#!/usr/bin/env python3
"""check_gen_trace.py GEN_TRACE RECOMP_ANALYZE: the benchmark trace's peak is
its last record (the input that showed the bug: 10^5 events, whose peak fell
in iteration 1, so the replay pass read 1% of the trace and the published
records/s were inflated). Runs gen_trace for a few sizes and checks the
analyzer's device peak (bytes, time) against what gen_trace says it wrote.
TAP output."""
import json
import os
import re
import subprocess
import sys
import tempfile

gen, ana = sys.argv[1], sys.argv[2]
cases = [(3000, 2, 10), (100000, 32, 10000), (250000, 8, 500)]
print("1..%d" % (2 * len(cases)))
n, failed = 0, 0
with tempfile.TemporaryDirectory() as tmp:
    for events, layers, params in cases:
        path = os.path.join(tmp, "g.rstrace")
        out = subprocess.run([gen, path, str(events), str(layers), str(params)],
                             capture_output=True, text=True)
        m = re.search(r"(\d+) records, (\d+) iterations.*peak (\d+) bytes at t=(\d+) ns", out.stdout)
        n += 1
        ok = out.returncode == 0 and m and int(m.group(1)) >= events
        print("%s %d - gen_trace %d events: exit 0 and says where its peak is (%s)"
              % ("ok" if ok else "not ok", n, events, out.stdout.strip() + out.stderr.strip()))
        failed += not ok
        n += 1
        if not ok:
            print("not ok %d - analyzer peak (skipped: no trace)" % n)
            failed += 1
            continue
        rep = subprocess.run([ana, "--json", "--no-advice", path], capture_output=True, text=True)
        peak = json.loads(rep.stdout)["ranks"][0]["peak"] if rep.returncode == 0 else {}
        want = (int(m.group(3)), int(m.group(4)), int(m.group(2)) - 1)
        got = (peak.get("bytes"), peak.get("time_ns"), peak.get("iteration"))
        ok = got == want
        print("%s %d - %d events: analyzer's peak (bytes, time_ns, iteration) %s == the last record %s"
              % ("ok" if ok else "not ok", n, events, got, want))
        failed += not ok
sys.exit(1 if failed else 0)
