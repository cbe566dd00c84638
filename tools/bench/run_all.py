#!/usr/bin/env python3
"""run_all.py BUILD BENCH_BIN [--quick]: every benchmark of docs/performance.md
in one run, printed as Markdown tables of ratios measured side by side.

Called by run-all.sh (which builds BUILD as a release build and BENCH_BIN from
bench_shim_overhead.c). Each comparison interleaves its variants round by
round and keeps the median, so a machine whose load changes during the run
shifts both sides alike. CPU times are user + system from getrusage/wait4:
of the process itself ("in-process") or of the whole process tree (a child's
rusage includes its waited-for descendants). Nothing here asserts a time.

Sections: the shim per recorded event at 1, 8 and 64 threads; heaptrack on
the same count of events (malloc/free, what it records); the analyzer
against heaptrack_print at 10^6 and 10^7 events (10^5 and 10^6 with
--quick); the Kineto and snapshot importers against Python and zcat;
megasim's main job with and without the shim. --only SECTION[,...] runs a
subset (shim, heaptrack, analyzer, importers, job). --old-shim LIB replaces
the shim section's "before" library; --baseline-lib LIB adds LIB (e.g. main's
library, tools/bench/build-baseline.sh) as one more variant of the same
interleaved rounds. The bench runs against the mock runtime's per-thread
arenas (MOCK_CUDA_THREAD_ARENAS=1, tests/doubles/mock_arena.c) in every
variant, with and without a tracer, so the threads do not queue on the mock's
one lock; --mock-lock runs them against that lock instead (the rounds before
the seventh in docs/performance.md).
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BUILD, BENCH = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
QUICK = "--quick" in sys.argv
# --only SECTION[,SECTION...]: run only these of shim, heaptrack, analyzer,
# importers, job (heaptrack needs shim's figures, so it implies shim)
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
# --old-shim LIB: the shim section's "before" column is that library (e.g. a
# release build of the commit before format 1.4); without it, this build's
# library with RECOMPSHIM_COMPACT=0 (format 1.4's writer, 1.3's record layout)
OLD_SHIM = (os.path.abspath(sys.argv[sys.argv.index("--old-shim") + 1])
            if "--old-shim" in sys.argv else None)
# --baseline-lib LIB: one more variant in the same interleaved rounds, e.g. a
# release build of main's library (tools/bench/build-baseline.sh main), so a
# change is measured against it side by side; "before" stays as above
BASELINE = (os.path.abspath(sys.argv[sys.argv.index("--baseline-lib") + 1])
            if "--baseline-lib" in sys.argv else None)

# The mock runtime's mode for every bench run (module docstring).
MOCK_LOCK = "--mock-lock" in sys.argv
MOCK_ENV = {} if MOCK_LOCK else {"MOCK_CUDA_THREAD_ARENAS": "1"}


def want(section):
    return ONLY is None or section in ONLY or (section == "shim" and "heaptrack" in ONLY)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.path.join(BUILD, "shim", "librecompshim.so")
ANALYZE = os.path.join(BUILD, "analyzer", "recomp-analyze")
GEN = os.path.join(BUILD, "tools", "bench", "gen_trace")
ROUNDS = 3 if QUICK else 5
WORK = tempfile.mkdtemp(prefix="rs-bench.")
WORKLOADS = ["cudaMalloc+cudaFree", "cudaMallocAsync+cudaFreeAsync", "nvtxRangePushA+nvtxRangePop"]


def run(cmd, env=None, sample_rss=False, ok_codes=(0,)):
    """Run cmd to completion; exit the benchmark when its status is not in
    ok_codes. Returns (wall s, tree CPU s, stdout, peak anonymous RSS KiB of
    the direct child sampled every 5 ms or 0)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = []
    reader = threading.Thread(target=lambda: out.append((p.stdout.read(), p.stderr.read())))
    reader.start()
    anon = 0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG if sample_rss else 0)
        if pid:
            break
        try:
            with open("/proc/%d/status" % p.pid) as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        anon = max(anon, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.005)
    p.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    wall = time.monotonic() - t0
    if p.returncode not in ok_codes:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), out[0][1].decode()[-2000:]))
    return wall, ru.ru_utime + ru.ru_stime, out[0][0].decode(), anon


def env_with(**kw):
    e = dict(os.environ)
    e.update(kw)
    return e


def bench_env(**kw):
    """The environment of a bench_shim_overhead run: the mock's mode
    (MOCK_ENV) and kw."""
    return env_with(**dict(MOCK_ENV, **kw))


def fresh_dir(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d, mode=0o700)
    return d


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def parse_bench(text):
    """{workload: (in-process CPU ns/event, wall ns/event, events)}"""
    res = {}
    for line in text.splitlines():
        name, cpu, wall, events = line.split()
        res[name] = (float(cpu), float(wall), float(events))
    return res


def shim_section():
    print("## The shim per recorded event (in-process CPU, ns)\n")
    before = ("before: %s" % OLD_SHIM if OLD_SHIM else
              "before: this library with RECOMPSHIM_COMPACT=0 (full 1.3-layout ALLOC/FREE records)")
    if BASELINE:
        before += "; baseline: %s" % BASELINE
    print("%d interleaved rounds (no shim, before, after%s), median; each thread does N pairs "
          "(2 events) of each workload against the mock runtime. %s; after: this library "
          "(format 1.5, packed ALLOC/FREE). The mock runtime: %s.\n"
          % (ROUNDS, ", baseline" if BASELINE else "", before,
             "one process-wide lock (--mock-lock)" if MOCK_LOCK else
             "per-thread arenas (MOCK_CUDA_THREAD_ARENAS=1), in every variant"))
    extra = " baseline | added baseline | after - baseline |" if BASELINE else ""
    print("| threads | N per thread | workload | without | before | after | added before "
          "| added after | budget 50 |" + extra)
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if BASELINE else ""))
    added1 = {}
    variants = (("old", OLD_SHIM or SHIM, {} if OLD_SHIM else {"RECOMPSHIM_COMPACT": "0"}),
                ("new", SHIM, {}))
    if BASELINE:
        variants += (("main", BASELINE, {}),)
    for threads in (1, 8, 64):
        n = (200000 if QUICK else 1000000) // threads
        cpu = {"base": {}, "old": {}, "new": {}, "main": {}}
        size, events = {}, 0
        for _ in range(ROUNDS):
            _, _, out, _ = run([BENCH, str(n), str(threads)], bench_env())
            for k, v in parse_bench(out).items():
                cpu["base"].setdefault(k, []).append(v[0])
            for name, lib, extra in variants:
                d = fresh_dir("shim-out")
                _, _, out, _ = run([BENCH, str(n), str(threads)],
                                   bench_env(LD_PRELOAD=lib, RECOMPSHIM_OUT=d, **extra))
                for k, v in parse_bench(out).items():
                    cpu[name].setdefault(k, []).append(v[0])
                size[name], events = dir_bytes(d), sum(v[2] for v in parse_bench(out).values())
        for k in WORKLOADS:
            b, o, s = (statistics.median(cpu[x][k]) for x in ("base", "old", "new"))
            if threads == 1:
                added1[k] = s - b
            row = ("| %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s |"
                   % (threads, n, k, b, o, s, o - b, s - b, "met" if s - b <= 50 else "MISSED"))
            if BASELINE:
                m = statistics.median(cpu["main"][k])
                row += " %.1f | %.1f | %+.1f |" % (m, m - b, s - m)
            print(row)
        print("| %d | | trace bytes per event (all workloads) | | %.1f | %.1f | | | |%s"
              % (threads, size["old"] / events, size["new"] / events,
                 " %.1f | | |" % (size["main"] / events) if BASELINE else ""))
    print()
    return added1


def heaptrack_section(shim_added):
    print("## Against heaptrack, same count of events (CPU ns per event)\n")
    ht = shutil.which("heaptrack")
    if not ht:
        print("heaptrack is not installed: skipped (run-all.sh installs it)\n")
        return
    n = 100000 if QUICK else 500000
    rows = {"plain": [], "heaptrack": [], "shim": [], "plain_tree": [], "ht_tree": [],
            "shim_tree": [], "cuda_plain": []}
    ht_bytes = 0
    for _ in range(ROUNDS):
        _, tree, out, _ = run([BENCH, str(n), "1", "malloc+free"], bench_env())
        rows["plain"].append(parse_bench(out)["malloc+free"][0])
        rows["plain_tree"].append(tree * 1e9 / (2 * n))
        htout = os.path.join(fresh_dir("ht"), "ht")
        _, tree, out, _ = run([ht, "-o", htout, BENCH, str(n), "1", "malloc+free"], bench_env())
        m = re.search(r"^malloc\+free (\S+)", out, re.M)
        rows["heaptrack"].append(float(m.group(1)))
        rows["ht_tree"].append(tree * 1e9 / (2 * n))
        ht_bytes = dir_bytes(os.path.dirname(htout))
        _, tree, out, _ = run([BENCH, str(n), "1", "cudaMalloc+cudaFree"], bench_env())
        rows["cuda_plain"].append(tree * 1e9 / (2 * n))
        d = fresh_dir("shim-out")
        _, tree, out, _ = run([BENCH, str(n), "1", "cudaMalloc+cudaFree"],
                              bench_env(LD_PRELOAD=SHIM, RECOMPSHIM_OUT=d))
        rows["shim"].append(parse_bench(out)["cudaMalloc+cudaFree"][0])
        rows["shim_tree"].append(tree * 1e9 / (2 * n))
    med = {k: statistics.median(v) for k, v in rows.items()}
    ht_in = med["heaptrack"] - med["plain"]
    ht_tree = med["ht_tree"] - med["plain_tree"]
    shim_tree = med["shim_tree"] - med["cuda_plain"]
    shim_in = shim_added.get("cudaMalloc+cudaFree", float("nan"))
    print("%d pairs (2 events each) on 1 thread, %d interleaved rounds, median. heaptrack "
          "records malloc/free (call stacks by libunwind); the shim records "
          "cudaMalloc/cudaFree (the mock's cost subtracted).\n" % (n, ROUNDS))
    print("| added CPU per event | heaptrack 1.4 | recompshim | heaptrack / recompshim | budget |")
    print("|---|---|---|---|---|")
    print("| inside the traced process | %.1f | %.1f | %.1f | >= 5 (%s) |"
          % (ht_in, shim_in, ht_in / shim_in, "met" if ht_in / shim_in >= 5 else "MISSED"))
    print("| whole process tree | %.1f | %.1f | %.1f | |" % (ht_tree, shim_tree, ht_tree / shim_tree))
    print("| trace bytes per event (heaptrack: zstd-compressed, stacks deduplicated) | %.2f | see above | | |\n" % (ht_bytes / (2 * n)))


def analyzer_section():
    print("## recomp-analyze against heaptrack_print (CPU per record, one core)\n")
    hp = shutil.which("heaptrack_print")
    ht = shutil.which("heaptrack")
    print("| records | tool | CPU s | M records/s | peak anon RSS MiB | CPU / heaptrack_print's |")
    print("|---|---|---|---|---|---|")
    sizes = []
    for events in ((100000, 1000000) if QUICK else (1000000, 10000000)):
        # the same events as full 1.3 records, as format 1.4's compact ones
        # and as 1.5's packed ones
        trace = os.path.join(WORK, "gen.rstrace")
        ctrace = os.path.join(WORK, "gen-compact.rstrace")
        ptrace = os.path.join(WORK, "gen-packed.rstrace")
        run([GEN, trace, str(events)], env_with(GEN_TRACE_COMPACT="0"))
        run([GEN, ctrace, str(events)], env_with(GEN_TRACE_COMPACT="1"))
        run([GEN, ptrace, str(events)], env_with(GEN_TRACE_COMPACT="2"))
        res = {}
        runs = (("recomp-analyze text, no advisor", ["--no-advice"], trace),
                ("recomp-analyze text, no advisor, 1.4 compact trace", ["--no-advice"], ctrace),
                ("recomp-analyze text, no advisor, 1.5 packed trace", ["--no-advice"], ptrace),
                ("recomp-analyze text", [], trace),
                ("recomp-analyze text, 1.4 compact trace", [], ctrace),
                ("recomp-analyze text, 1.5 packed trace", [], ptrace),
                ("recomp-analyze --json", ["--json"], trace))
        cpus = {label: [] for label, _, _ in runs}
        rss = {label: 0 for label, _, _ in runs}
        for _ in range(ROUNDS):  # interleaved: each round runs every variant once
            for label, args, path in runs:
                _, cpu, _, anon = run([ANALYZE] + args + [path], sample_rss=True)
                cpus[label].append(cpu)
                rss[label] = max(rss[label], anon)
        for label, _, _ in runs:
            res[label] = (statistics.median(cpus[label]), rss[label])
        sizes.append("%d events: trace %d bytes full, %d bytes compact (1.4), %d bytes packed "
                     "(1.5) (%.1f / %.1f / %.1f per record)"
                     % (events, os.path.getsize(trace), os.path.getsize(ctrace),
                        os.path.getsize(ptrace), os.path.getsize(trace) / events,
                        os.path.getsize(ctrace) / events, os.path.getsize(ptrace) / events))
        os.unlink(trace)
        os.unlink(ctrace)
        os.unlink(ptrace)
        hpt = None
        if hp and ht:
            htout = os.path.join(fresh_dir("htp"), "ht")
            run([ht, "-o", htout, BENCH, str(events // 2), "1", "malloc+free"])
            f = [os.path.join(os.path.dirname(htout), x) for x in os.listdir(os.path.dirname(htout))][0]
            cpus, rss = [], 0
            for _ in range(3):
                _, cpu, _, anon = run([hp, f], sample_rss=True)
                cpus.append(cpu)
                rss = max(rss, anon)
            hpt = statistics.median(cpus)
            res["heaptrack_print"] = (hpt, rss)
        for label, (cpu, rss) in res.items():
            print("| %d | %s | %.2f | %.1f | %.1f | %s |"
                  % (events, label, cpu, events / cpu / 1e6, rss / 1024,
                     "%.2f (%s)" % (cpu / hpt, "faster" if cpu < hpt else "slower")
                     if hpt and label != "heaptrack_print" else ""))
    print()
    for line in sizes:
        print("- " + line)
    print()


def job_section():
    print("## megasim's main job with and without the shim\n")
    args = [sys.executable, "-m", "megasim", "--sim-preset", "llama3-8b",
            "--pipeline-model-parallel-size", "2", "--sim-world-size", "4",
            "--use-distributed-optimizer", "--global-batch-size", "8", "--train-iters", "3",
            "--profile", "--nvtx-ranges", "--profile-step-start", "0", "--profile-step-end", "3",
            "--sim-quiet"]
    libdir = os.path.join(BUILD, "tests", "megasim")
    base = env_with(MEGASIM_LIB_DIR=libdir, PYTHONPATH=os.path.join(ROOT, "tools", "megasim"),
                    LD_LIBRARY_PATH=os.path.join(BUILD, "tests", "doubles") + ":" + libdir)
    empty = [sys.executable, "-c", "pass"]
    rows = {k: [] for k in ("job", "job_shim", "job_disabled", "job_noframes", "py", "py_shim")}
    events = 0
    # the breakdown: job_disabled loads the shim and runs its constructor but
    # records nothing (RECOMPSHIM_DISABLE=1); job_noframes records without
    # Python frames (RECOMPSHIM_PYSTACK=0)
    for _ in range(ROUNDS):
        for key, cmd, shim in (("job", args, None), ("job_shim", args, {}),
                               ("job_disabled", args, {"RECOMPSHIM_DISABLE": "1"}),
                               ("job_noframes", args, {"RECOMPSHIM_PYSTACK": "0"}),
                               ("py", empty, None), ("py_shim", empty, {})):
            env = dict(base)
            if shim is not None:
                d = fresh_dir("job-out")
                env.update(LD_PRELOAD=SHIM, RECOMPSHIM_OUT=d, **shim)
            # the main job runs out of memory in its second iteration by design
            wall, cpu, _, _ = run(cmd, env, ok_codes=(0, 1))
            rows[key].append((wall, cpu))
            if key == "job_shim":
                events = dir_bytes(d)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in rows.items()}
    print("%d interleaved rounds, median; CPU of the whole process tree (launcher and 4 "
          "ranks; the job ends with its designed out-of-memory, exit 1). `python3 -c pass` measures what loading the shim costs a process that "
          "never touches CUDA (the constructor and exit).\n" % ROUNDS)
    print("| run | wall s | tree CPU s | added wall | added CPU |")
    print("|---|---|---|---|---|")
    for k, label in (("job", "main job"), ("py", "python3 -c pass")):
        w, c = med[k]
        ws, cs = med[k + "_shim"]
        print("| %s | %.3f / %.3f | %.3f / %.3f | %+.3f | %+.3f |" % (label, w, ws, c, cs, ws - w, cs - c))
    print("\ntrace bytes written by the job: %d\n" % events)
    c0, cd, cn, cs = (med[k][1] for k in ("job", "job_disabled", "job_noframes", "job_shim"))
    print("Breakdown of the added tree CPU (medians of the same rounds):\n")
    print("| part | variant against variant | CPU s |")
    print("|---|---|---|")
    print("| loading the shim, its constructor, exit without a file | disabled - none | %+.3f |" % (cd - c0))
    print("| recording (file creation, records, chunk seals, exit) | frames off - disabled | %+.3f |" % (cn - cd))
    print("| Python frames (profile hook on every Python call) | default - frames off | %+.3f |" % (cs - cn))
    print("| total | default - none | %+.3f |\n" % (cs - c0))


def make_inputs(n):
    """A Kineto trace (gzip JSON) and a memory-snapshot pickle of about n
    memory events each, Megatron-like names; returns their paths."""
    import gzip
    import json
    import pickle
    ev, t = [], 1000
    for i in range(n // 2):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1,
                   "ts": t, "dur": 3, "args": {}})
        for sign in (1, -1):
            t += 1
            ev.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                       "tid": 1, "ts": t, "s": "t",
                       "args": {"Device Type": 1, "Device Id": 0, "Addr": 0x7f0000000000 + i * 512,
                                "Bytes": sign * (4096 + i % 7 * 512),
                                "Total Allocated": 4096 + (sign > 0) * 4096,
                                "Total Reserved": 1 << 30}})
        t += 2
    kin = os.path.join(WORK, "bench.pt.trace.json.gz")
    with gzip.open(kin, "wt", compresslevel=6) as f:
        json.dump({"traceEvents": ev}, f)
    traces = []
    for i in range(n // 2):
        fr = [{"filename": "megatron/core/transformer/mlp.py", "line": 100 + i % 50,
               "name": "forward"}]
        for action in ("alloc", "free_completed"):
            traces.append({"action": action, "addr": 0x7f0000000000 + i * 512,
                           "size": 4096 + i % 7 * 512, "stream": 0, "time_us": 1000 + i,
                           "frames": fr})
    snap = os.path.join(WORK, "snapshot_0.pickle")
    with open(snap, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [traces]}, f, protocol=4)
    return kin, snap


PY_KINETO = """import gzip, json, sys
n = 0
for e in json.load(gzip.open(sys.argv[1], "rt"))["traceEvents"]:
    if e.get("name") == "[memory]":
        n += e["args"]["Bytes"] > 0
"""
PY_PICKLE = """import pickle, sys
n = 0
for e in pickle.load(open(sys.argv[1], "rb"))["device_traces"][0]:
    n += e["action"] == "alloc"
"""


def importer_section():
    print("## Importers against Python and zcat (CPU s, tree)\n")
    n = 200000 if QUICK else 1000000
    kin, snap = make_inputs(n)
    rows = {k: [] for k in ("kin", "kin_py", "zcat", "snap", "snap_py")}
    for _ in range(ROUNDS):
        rows["kin"].append(run([ANALYZE, "--no-advice", kin])[1])
        rows["kin_py"].append(run([sys.executable, "-c", PY_KINETO, kin])[1])
        rows["zcat"].append(run(["sh", "-c", 'zcat "$0" >/dev/null', kin])[1])
        rows["snap"].append(run([ANALYZE, "--no-advice", snap])[1])
        rows["snap_py"].append(run([sys.executable, "-c", PY_PICKLE, snap])[1])
    med = {k: statistics.median(v) for k, v in rows.items()}
    print("%d memory events per file (Kineto %.1f MiB gzip JSON, snapshot %.1f MiB pickle); "
          "Python: json.load / pickle.load and one loop counting the allocations, nothing "
          "else; %d interleaved rounds, median.\n"
          % (n, os.path.getsize(kin) / 2**20, os.path.getsize(snap) / 2**20, ROUNDS))
    print("| input | recomp-analyze (full analysis) | Python (parse only) | zcat | "
          "Python / ours | ours / zcat (budget <= 2) |")
    print("|---|---|---|---|---|---|")
    print("| Kineto .json.gz | %.2f | %.2f | %.2f | %.1f | %.1f |"
          % (med["kin"], med["kin_py"], med["zcat"], med["kin_py"] / med["kin"],
             med["kin"] / med["zcat"]))
    print("| snapshot .pickle | %.2f | %.2f | | %.1f | |\n"
          % (med["snap"], med["snap_py"], med["snap_py"] / med["snap"]))


def main():
    print("# recompshim benchmarks\n")
    print("machine: %s, %d CPUs, kernel %s; load average at start %s\n"
          % (cpu_model(), os.cpu_count(), os.uname().release, open("/proc/loadavg").read().split()[0]))
    t0 = time.monotonic()
    try:
        if want("shim"):
            added = shim_section()
        if want("heaptrack"):
            heaptrack_section(added)
        if want("analyzer"):
            analyzer_section()
        if want("importers"):
            importer_section()
        if want("job"):
            job_section()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    print("all benchmarks: %.0f s wall" % (time.monotonic() - t0))


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    main()
