#!/usr/bin/env python3
"""perf_threads.py BENCH SHIM [PAIRS] [WORKLOAD] [ROUNDS] [THREADS,...]: where a
multi-threaded bench_shim_overhead row's time goes, from the kernel's
software counters (docs/performance.md, "Seventh round").

Runs BENCH (run-all.sh builds it in build-bench/) at each thread count
(default 1,8), with and without LD_PRELOAD=SHIM, against the mock runtime's
one lock and against its per-thread arenas (MOCK_CUDA_THREAD_ARENAS=1),
the eight variants interleaved ROUNDS times (default 5), each under `perf
stat`. Prints one Markdown row per variant, medians over the rounds, per
event (a pair is two events): the bench's own in-process CPU (getrusage,
what run-all.sh reports), user and system CPU of the process tree (wait4),
context switches (all; involuntary ones from the bench's rusage), futex
calls and page faults. PAIRS is the total over all threads (default
1000000); WORKLOAD one of the bench's (default cudaMalloc+cudaFree).

Software events only: this needs no hardware counters (a KVM guest often
has none). Futex calls need the syscalls tracepoints (root, or
perf_event_paranoid -1); without them that column reads "-". Nothing here
asserts a time.
"""
import os
import statistics
import subprocess
import sys
import tempfile


def perf_events():
    ev = "task-clock,context-switches,page-faults"
    probe = subprocess.run(["perf", "stat", "-e", "syscalls:sys_enter_futex", "true"],
                           capture_output=True)
    return ev + (",syscalls:sys_enter_futex" if probe.returncode == 0 else "")


def one(bench, shim, n, threads, arenas, work, events, tmp):
    """One perf-stat'ed run: {column: value} for the whole run."""
    env = dict(os.environ, MOCK_CUDA_THREAD_ARENAS="1" if arenas else "0",
               RECOMPSHIM_OUT=os.path.join(tmp, "trace"))
    if shim:
        env["LD_PRELOAD"] = shim
    out = os.path.join(tmp, "perf.csv")
    p = subprocess.Popen(["perf", "stat", "-x,", "-e", events, "-o", out, bench, str(n),
                          str(threads), work], env=env, stdout=subprocess.PIPE)
    text = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("perf_threads: %s failed" % bench)
    r = {"bench_cpu": float(text.split()[1]), "user": ru.ru_utime, "sys": ru.ru_stime,
         "nvcs": float(ru.ru_nivcsw), "futex": -1.0}
    names = {"context-switches": "cs", "page-faults": "faults",
             "syscalls:sys_enter_futex": "futex"}
    for line in open(out):
        f = line.strip().split(",")
        if len(f) > 2 and f[2] in names and f[0].replace(".", "").isdigit():
            r[names[f[2]]] = float(f[0])
    return r


def main():
    a = sys.argv[1:]
    if len(a) < 2:
        sys.exit(__doc__)
    bench, shim = os.path.abspath(a[0]), os.path.abspath(a[1])
    pairs = int(a[2]) if len(a) > 2 else 1000000
    work = a[3] if len(a) > 3 else "cudaMalloc+cudaFree"
    rounds = int(a[4]) if len(a) > 4 else 5
    tlist = [int(t) for t in a[5].split(",")] if len(a) > 5 else [1, 8]
    events = perf_events()
    variants = [(t, ar, sh) for t in tlist for ar in (0, 1) for sh in (None, shim)]
    res = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "trace"))
        for _ in range(rounds):
            for v in variants:
                res[v].append(one(bench, v[2], pairs // v[0], v[0], v[1], work, events, tmp))
    print("%s, %d pairs over all threads, %d interleaved rounds, medians per event "
          "(per 1,000 events for counts)\n" % (work, pairs, rounds))
    print("| threads | mock | shim | bench CPU ns | user ns | sys ns | context switches "
          "| involuntary | futex calls | page faults |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for v in variants:
        ev = 2.0 * (pairs // v[0]) * v[0]
        med = lambda k: statistics.median(r.get(k, -1.0) for r in res[v])
        fx = med("futex")
        print("| %d | %s | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %s | %.2f |" % (
            v[0], "arenas" if v[1] else "lock", "yes" if v[2] else "no", med("bench_cpu"),
            med("user") * 1e9 / ev, med("sys") * 1e9 / ev, med("cs") * 1e3 / ev,
            med("nvcs") * 1e3 / ev, "-" if fx < 0 else "%.2f" % (fx * 1e3 / ev),
            med("faults") * 1e3 / ev))


if __name__ == "__main__":
    main()
