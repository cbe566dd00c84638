#!/usr/bin/env python3
"""check_compact_same.py GEN_TRACE RECOMP_ANALYZE RECOMP_DUMP: format 1.4's
compact ALLOC/FREE records change the file, never the analysis. gen_trace
writes the same events as full 1.3 records and as SITE + ALLOC_C/FREE_C
(GEN_TRACE_COMPACT=1); recomp-analyze's text and --json reports and
recomp-dump's ALLOC/FREE lines must be byte for byte the same, and the
compact file must be smaller. TAP output."""
import os
import subprocess
import sys
import tempfile

gen, ana, dump = (os.path.abspath(a) for a in sys.argv[1:4])
cases = [(3000, 2, 10), (200000, 8, 500)]
print("1..%d" % (4 * len(cases)))
n, failed = 0, 0


def check(ok, what):
    global n, failed
    n += 1
    failed += not ok
    print("%s %d - %s" % ("ok" if ok else "not ok", n, what))


with tempfile.TemporaryDirectory() as tmp:
    for events, layers, params in cases:
        outs, sizes = {}, {}
        for layout in ("full", "compact"):
            d = os.path.join(tmp, layout)
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, "g.rstrace")
            env = dict(os.environ, GEN_TRACE_COMPACT="1" if layout == "compact" else "0")
            subprocess.run([gen, path, str(events), str(layers), str(params)], env=env,
                           check=True, capture_output=True)
            sizes[layout] = os.path.getsize(path)
            text = subprocess.run([ana, "g.rstrace"], cwd=d, capture_output=True, text=True)
            js = subprocess.run([ana, "--json", "g.rstrace"], cwd=d, capture_output=True, text=True)
            dp = subprocess.run([dump, "g.rstrace"], cwd=d, capture_output=True, text=True)
            lines = [l for l in dp.stdout.splitlines() if l.startswith(("ALLOC ", "FREE "))]
            outs[layout] = (text.returncode, text.stdout, js.returncode, js.stdout, lines)
        f, c = outs["full"], outs["compact"]
        check(f[0] == 0 and f[:2] == c[:2], "%d events: text report the same" % events)
        check(f[2] == 0 and f[2:4] == c[2:4], "%d events: --json report the same" % events)
        check(len(f[4]) >= events // 3 and f[4] == c[4],
              "%d events: recomp-dump's %d ALLOC/FREE lines the same" % (events, len(f[4])))
        check(sizes["compact"] <= sizes["full"] and (sizes["compact"] < sizes["full"] or events < 10000),
              "%d events: compact file %d bytes, full %d" % (events, sizes["compact"], sizes["full"]))
sys.exit(1 if failed else 0)
