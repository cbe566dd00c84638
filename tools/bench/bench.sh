#!/bin/sh
# bench.sh [BUILD_DIR] [EVENTS]: events/second and peak RSS of recomp-analyze
# on a generated trace (gen_trace). No timing assertions: numbers for
# docs/performance.md (## recomp-analyze).
set -eu
BUILD=${1:-build}
EVENTS=${2:-10000000}
GEN="$BUILD/tools/bench/gen_trace"
ANA="$BUILD/analyzer/recomp-analyze"
TMP=$(mktemp -d /tmp/rs-bench-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
"$GEN" "$TMP/bench.rstrace" "$EVENTS"
ls -l "$TMP/bench.rstrace" | awk '{printf "trace: %.1f MiB\n", $5/1048576}'
python3 - "$ANA" "$TMP/bench.rstrace" "$EVENTS" <<'PY'
import resource, subprocess, sys, time, json
ana, trace, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
def run(cmd):
    """Run cmd; return (seconds, stdout, peak anonymous RSS in KiB sampled
    every 5 ms from /proc: the file mapping is page cache, not counted)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    anon = 0
    import threading
    out = []
    th = threading.Thread(target=lambda: out.append(p.communicate()))
    th.start()
    while th.is_alive():
        try:
            for line in open(f"/proc/{p.pid}/status"):
                if line.startswith("RssAnon:"):
                    anon = max(anon, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.005)
    th.join()
    dt = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("recomp-analyze failed: " + out[0][1].decode())
    return dt, out[0][0], anon

for args, label in (([], "text"), (["--json"], "json")):
    dt, stdout, anon = run([ana] + args + [trace])
    r = type("R", (), {"stdout": stdout})
    if label == "json":
        n = json.loads(r.stdout)["ranks"][0]["events"]
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"{label}: {dt:.2f} s, {events/dt/1e6:.2f} M records/s, peak anonymous RSS "
          f"{anon/1024:.1f} MiB, max RSS incl. the file mapping {rss/1024:.1f} MiB")
print(f"events analysed (model events, both passes count once): {n}")
PY
