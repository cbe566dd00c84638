#!/usr/bin/env python3
"""check_compact_same.py GEN_TRACE RECOMP_ANALYZE RECOMP_DUMP: format 1.4's
compact and 1.5's packed ALLOC/FREE records change the file, never the
analysis. gen_trace writes the same events as full 1.3 records, as SITE +
ALLOC_C/FREE_C in a 1.4 file (GEN_TRACE_COMPACT=1) and as SITE +
ALLOC_P/FREE_P in a 1.5 file (GEN_TRACE_COMPACT=2, four-lane chunk
checksum); recomp-analyze's text and --json reports and recomp-dump's
ALLOC/FREE lines must be byte for byte the same, and each smaller layout's
file no larger than the one before. Then a directory of two ranks, one a 1.4
file and one a 1.5 file, must analyze as the same two ranks in full records.
TAP output."""
import os
import subprocess
import sys
import tempfile

gen, ana, dump = (os.path.abspath(a) for a in sys.argv[1:4])
cases = [(3000, 2, 10), (200000, 8, 500)]
layouts = (("full", "0"), ("compact", "1"), ("packed", "2"))
print("1..%d" % (8 * len(cases) + 2))
n, failed = 0, 0


def check(ok, what):
    global n, failed
    n += 1
    failed += not ok
    print("%s %d - %s" % ("ok" if ok else "not ok", n, what))


with tempfile.TemporaryDirectory() as tmp:
    for events, layers, params in cases:
        outs, sizes = {}, {}
        for layout, code in layouts:
            d = os.path.join(tmp, layout)
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, "g.rstrace")
            env = dict(os.environ, GEN_TRACE_COMPACT=code)
            subprocess.run([gen, path, str(events), str(layers), str(params)], env=env,
                           check=True, capture_output=True)
            sizes[layout] = os.path.getsize(path)
            text = subprocess.run([ana, "g.rstrace"], cwd=d, capture_output=True, text=True)
            js = subprocess.run([ana, "--json", "g.rstrace"], cwd=d, capture_output=True, text=True)
            dp = subprocess.run([dump, "g.rstrace"], cwd=d, capture_output=True, text=True)
            lines = [l for l in dp.stdout.splitlines() if l.startswith(("ALLOC ", "FREE "))]
            outs[layout] = (text.returncode, text.stdout, js.returncode, js.stdout, lines)
        f = outs["full"]
        for layout, big in (("compact", "full"), ("packed", "compact")):
            c = outs[layout]
            check(f[0] == 0 and f[:2] == c[:2], "%d events: %s: text report the same" % (events, layout))
            check(f[2] == 0 and f[2:4] == c[2:4], "%d events: %s: --json report the same" % (events, layout))
            check(len(f[4]) >= events // 3 and f[4] == c[4],
                  "%d events: %s: recomp-dump's %d ALLOC/FREE lines the same" % (events, layout, len(f[4])))
        check(sizes["compact"] <= sizes["full"] and (sizes["compact"] < sizes["full"] or events < 10000),
              "%d events: compact file %d bytes, full %d" % (events, sizes["compact"], sizes["full"]))
        check(sizes["packed"] <= sizes["compact"] and (sizes["packed"] < sizes["compact"] or events < 10000),
              "%d events: packed file %d bytes, compact %d" % (events, sizes["packed"], sizes["compact"]))
    # a mixed-version run directory: rank 0 written as 1.4, rank 1 as 1.5
    reports = {}
    for name, codes in (("mixed", ("1", "2")), ("allfull", ("0", "0"))):
        d = os.path.join(tmp, name)
        os.makedirs(d, exist_ok=True)
        for rank, code in enumerate(codes):
            subprocess.run([gen, os.path.join(d, "r%d.rstrace" % rank), "20000", "4", "50",
                            str(rank), "2"], env=dict(os.environ, GEN_TRACE_COMPACT=code),
                           check=True, capture_output=True)
        text = subprocess.run([ana, "."], cwd=d, capture_output=True, text=True)
        js = subprocess.run([ana, "--json", "."], cwd=d, capture_output=True, text=True)
        reports[name] = (text.returncode, text.stdout, js.returncode, js.stdout)
    m, a = reports["mixed"], reports["allfull"]
    check(a[0] == 0 and "2 rank(s)" in a[1] and m[:2] == a[:2],
          "1.4 and 1.5 files in one directory: text report the same as in full records")
    check(a[2] == 0 and m[2:] == a[2:],
          "1.4 and 1.5 files in one directory: --json report the same as in full records")
sys.exit(1 if failed else 0)
