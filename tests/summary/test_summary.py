#!/usr/bin/env python3
"""recomp-analyze summarize and merge (docs/summary-format.md; TAP).

- summarize RUNDIR then merge gives the same text, JSON, stderr and exit
  code as recomp-analyze RUNDIR on every scenario of tests/scenarios.py
  (the README's main job also with --ranks all, Markdown and --fail-on):
  together they take every path of the advisor's job part: recompute on
  (full and selective: the undo, the measured current setting), MoE/MLA (more
  labels), replays with extra work, triage findings (fragmentation, CUDA
  graphs, NCCL, retention), an explicit --budget;
- the pipeline layouts of REGRESSIONS (issue 14 class C: uneven first/last
  stages, virtual stages, a hybrid layer pattern), whose verdict a 5.0
  summary changed: the same, and the verdict and candidates named;
- the real fixtures of tests/scenarios.py (Kineto traces, a memory
  snapshot) when RECOMP_FIXTURES holds them (skipped visibly otherwise);
- two "nodes": the ranks of one job in two run directories of the same name,
  one summary each, merged (files, or a directory of them) = the direct
  analysis of both directories;
- compare with summaries as runs (tests/scenarios.py's COMPARISONS): the
  same table, text and JSON, as compare of the run directories (each run's
  label is its argument); compare --html of a summary refused;
- --rank, --iteration and --no-advice through summaries;
- bad summaries: not a summary, truncated, a flipped payload byte (checksum),
  another format version, a payload cut at every field boundary or with
  random bytes changed (checksum fixed, so the fields are checked): a clear
  error naming the file and the field, exit 2, never a crash; mixed jobs,
  one rank twice, summaries made with other options; options merge refuses
  (--html, --perfetto, --budget) and summarize's own (--out).

Environment (tests/summary/meson.build): RECOMP_SHIM, RECOMP_ANALYZE,
MEGASIM_LIB_DIR, MEGASIM_PYDIR, RECOMP_FIXTURES.
"""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import scenarios  # noqa: E402
from harness import Tap, preload  # noqa: E402  (tests/harness.py)

SHIM = os.environ["RECOMP_SHIM"]
ANALYZE = os.environ["RECOMP_ANALYZE"]
LIBDIR = os.environ["MEGASIM_LIB_DIR"]
PYDIR = os.environ["MEGASIM_PYDIR"]

# every scenario is compared (together they take every path of the advisor's
# job part); a new scenario is compared without a change here
COMPARED = list(scenarios.SCENARIOS)

# issue 14 class C: summaries of pipeline layouts whose verdict depends on the
# advisor's placement fields and the hybrid layer pattern, which summary
# format 5.0 did not carry. Each is compared as the scenarios are (text and
# JSON of merge identical to the direct analysis: the verdict, every
# candidate's predicted bytes per rank, the findings). name -> (megasim
# flags, capacity GiB, extra recomp-analyze arguments)
UNEVEN_PP = ["--sim-preset", "llama3-8b", "--num-layers", "8", "--pipeline-model-parallel-size",
             "4", "--decoder-first-pipeline-num-layers", "1",
             "--decoder-last-pipeline-num-layers", "3", "--sim-world-size", "4",
             "--use-distributed-optimizer", "--seq-length", "8192", "--global-batch-size", "8"]
REGRESSIONS = {
    # the tester's case: PP4 over 8 layers, stages of 1, 2, 2 and 3 layers. A
    # 5.0 summary listed full[uniform,2]/full[block,2] (27.05 GiB) where the
    # traces list full[*,3] (25.99 GiB): the job part took the even split
    "uneven first/last stage (issue 14 C)": (UNEVEN_PP + scenarios.PROFILE, 30, []),
    # virtual stages by --num-layers-per-virtual-pipeline-stage, PP2 VPP2
    "virtual stages by layers per virtual stage": (
        scenarios.SMALL["llama3-8b"] + ["--num-layers-per-virtual-pipeline-stage", "2"] +
        scenarios.PROFILE, None, []),
    # virtual and uneven: the last stage holds 6 of 8 layers over two chunks
    "virtual and uneven last stage": (
        ["--sim-preset", "llama3-8b", "--num-layers", "8", "--pipeline-model-parallel-size",
         "2", "--sim-world-size", "2", "--use-distributed-optimizer", "--seq-length", "4096",
         "--global-batch-size", "8", "--train-iters", "2",
         "--num-virtual-stages-per-pipeline-rank", "2", "--decoder-last-pipeline-num-layers",
         "6"] + scenarios.PROFILE, 80, []),
    # a hybrid Mamba/attention model (--hybrid-layer-pattern), out of memory
    "hybrid layer pattern": (scenarios.HYBRID_JOB + scenarios.PROFILE,
                             scenarios.HYBRID_JOB_CAP, []),
}


TAP = Tap()
ok = TAP.ok


GEN_SUMMARIES = os.environ.get("GEN_SUMMARIES", "")


def analyze(*args):
    p = subprocess.run([ANALYZE] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def spec(name):
    """(flags, capacity, extra arguments) of a scenario or a regression"""
    return scenarios.SCENARIOS[name] if name in scenarios.SCENARIOS else REGRESSIONS[name]


def megasim(name, out):
    """scenario `name` under the shim into out; its run directory"""
    flags, capacity, _ = spec(name)
    env = dict(os.environ, MEGASIM_LIB_DIR=LIBDIR, PYTHONPATH=PYDIR, LD_PRELOAD=preload(SHIM),
               RECOMPSHIM_OUT=out, RECOMPSHIM_MEMINFO_MS="3600000")
    args = [sys.executable, "-m", "megasim"] + flags + ["--sim-quiet"]
    if capacity:
        args += ["--sim-capacity-gib", str(capacity)]
    subprocess.run(args, env=env, capture_output=True)
    runs = [os.path.join(out, d) for d in sorted(os.listdir(out))]
    return runs[0] if len(runs) == 1 else None


def diff(a, b):
    import difflib
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "direct",
                                        "merged", n=1))[:4000]


def same(label, direct, merged):
    """direct and merged (rc, stdout, stderr) alike; stderr's gate line names
    the input (the run directory, or the summary) and is compared without it"""
    def norm(e):
        return re.sub(r"\((\S+?): ", "(<input>: ", e)
    okay = direct[0] == merged[0] and direct[1] == merged[1] and norm(direct[2]) == norm(merged[2])
    return ok(okay, label, "exit %d vs %d\n%s%s\n%s" % (direct[0], merged[0],
                                                      diff(direct[1], merged[1]),
                                                      norm(direct[2]), norm(merged[2])))


def compare_scenario(name, tmp):
    rundir = megasim(name, os.path.join(tmp, name))
    if not ok(rundir, "%s: megasim left one run directory" % name):
        return None
    extra = spec(name)[2]
    summ = os.path.join(tmp, re.sub(r"[^A-Za-z0-9.-]+", "_", name) + ".rssum")
    rc = analyze("summarize", *extra, rundir, "--out", summ)
    if not ok(rc[0] == 0 and os.path.getsize(summ) > 0, "%s: summarize" % name, rc[2]):
        return None
    same("%s: text identical" % name, analyze(*extra, rundir), analyze("merge", summ))
    same("%s: JSON identical" % name, analyze("--json", *extra, rundir),
         analyze("merge", "--json", summ))
    if name == "main":
        md_d, md_m = os.path.join(tmp, "d.md"), os.path.join(tmp, "m.md")
        same("main: --ranks all, --markdown, --fail-on identical",
             analyze("--ranks", "all", "--markdown", md_d, "--fail-on", "oom,verdict!=OK:FITS",
                     rundir),
             analyze("merge", "--ranks", "all", "--markdown", md_m, "--fail-on",
                     "oom,verdict!=OK:FITS", summ))
        ok(open(md_d).read() == open(md_m).read(), "main: Markdown identical")
    return rundir, summ


def regression(name, tmp):
    """a REGRESSIONS job compared, and its verdict and candidates named"""
    got = compare_scenario(name, tmp)
    if not got:
        return
    rundir, summ = got
    d = json.loads(analyze("--json", *spec(name)[2], rundir)[1] or "{}").get("verdict") or {}
    m = json.loads(analyze("merge", "--json", summ)[1] or "{}").get("verdict") or {}

    def cands(v):
        return [(k.get("setting"), k.get("effect"), k.get("predicted_peak_bytes"),
                 k.get("predicted_reserved_bytes")) for k in v.get("candidates") or []]
    ok(d.get("code") and d.get("code") == m.get("code") and cands(d) and cands(d) == cands(m),
       "%s: the summary's verdict %s and its %d candidates' predicted bytes per rank are the "
       "traces'" % (name, m.get("code"), len(cands(m))),
       "traces: %s %s\nsummary: %s %s" % (d.get("code"), cands(d)[:6], m.get("code"),
                                          cands(m)[:6]))


def comparisons(got, tmp):
    for name, members in scenarios.COMPARISONS.items():
        if not all(got.get(m) for m in members):
            ok(False, "%s: its runs exist" % name)
            continue
        dirs = [got[m][0] for m in members]
        sums = [got[m][1] for m in members]
        for flag in ([], ["--json"]):
            d = analyze("compare", *flag, *dirs)
            for a, b in zip(dirs, sums):
                d = (d[0], d[1].replace(a, b), d[2].replace(a, b))
            same("%s: compare of summaries %s= compare of the run directories" %
                 (name, "--json " if flag else ""), d, analyze("compare", *flag, *sums))
        rc = analyze("compare", "--html", os.path.join(tmp, "c.html"), *sums)
        ok(rc[0] == 1 and "summary" in rc[2], "%s: compare --html of summaries refused" % name,
           rc[2])


def fixtures(tmp):
    root = os.environ.get("RECOMP_FIXTURES", "")
    have = [f for f in scenarios.FIXTURES if root and os.path.exists(os.path.join(root, f))]
    if not have:
        print("# SKIP fixtures: RECOMP_FIXTURES (%s) holds none of them" % (root or "unset"))
        return
    for k, rel in enumerate(have):
        f = os.path.join(root, rel)
        summ = os.path.join(tmp, "fixture%d.rssum" % k)
        rc = analyze("summarize", f, "--out", summ)
        if not ok(rc[0] == 0, "fixture %s: summarize" % rel, rc[2]):
            continue
        same("fixture %s: text identical" % rel, analyze(f), analyze("merge", summ))
        same("fixture %s: JSON identical" % rel, analyze("--json", f),
             analyze("merge", "--json", summ))


def split_nodes(rundir, tmp, name):
    """the ranks of rundir in two run directories of its name ("two nodes")"""
    base = os.path.basename(rundir)
    files = sorted(os.listdir(rundir))
    half = len(files) // 2
    dirs = []
    for k, part in enumerate((files[:half], files[half:])):
        d = os.path.join(tmp, "%s-node%d" % (name, k), base)
        os.makedirs(d)
        for f in part:
            shutil.copy2(os.path.join(rundir, f), d)
        dirs.append(d)
    return dirs


def two_nodes(name, rundir, tmp):
    a, b = split_nodes(rundir, tmp, name)
    sa, sb = os.path.join(tmp, name + "-a.rssum"), os.path.join(tmp, name + "-b.rssum")
    ok(analyze("summarize", a, "--out", sa)[0] == 0 and
       analyze("summarize", b, "--out", sb)[0] == 0, "%s: summarize per node" % name)
    same("%s: two nodes merged, text" % name, analyze(a, b), analyze("merge", sa, sb))
    sdir = os.path.join(tmp, name + "-summaries")
    os.makedirs(sdir)
    shutil.copy(sa, sdir)
    shutil.copy(sb, sdir)
    with open(os.path.join(sdir, "README.txt"), "w") as f:
        f.write("not a summary: skipped\n")
    same("%s: two nodes merged from a directory, JSON" % name, analyze("--json", a, b),
         analyze("merge", "--json", sdir))
    return a, b, sa, sb


def options(rundir, summ, nodes, tmp):
    same("--rank 2 through a summary", analyze("--rank", "2", rundir),
         analyze("merge", "--rank", "2", summ))
    s1 = os.path.join(tmp, "iter1.rssum")
    analyze("summarize", "--iteration", "1", rundir, "--out", s1)
    same("--iteration 1 through a summary", analyze("--json", "--iteration", "1", rundir),
         analyze("merge", "--json", s1))
    rc = analyze("merge", "--iteration", "2", s1)
    ok(rc[0] == 1 and "give them to summarize" in rc[2], "merge --iteration other than "
       "summarize's: exit 1, says where it belongs", rc[2])
    s0 = os.path.join(tmp, "noadv.rssum")
    analyze("summarize", "--no-advice", rundir, "--out", s0)
    same("--no-advice through a summary", analyze("--no-advice", rundir),
         analyze("merge", "--no-advice", s0))
    rc = analyze("merge", s0)
    ok(rc[0] == 2 and "no advisor part" in rc[2] and s0 in rc[2],
       "merge with advice of a --no-advice summary: exit 2, names the file", rc[2])
    sb = os.path.join(tmp, "budget.rssum")
    analyze("summarize", "--budget", "70GiB", nodes[1], "--out", sb)
    rc = analyze("merge", nodes[2], sb)
    ok(rc[0] == 2 and "field budget" in rc[2] and sb in rc[2],
       "summaries made with other options: exit 2, names the file and the field", rc[2])
    rc = analyze("merge", "--budget", "60GiB", summ)
    ok(rc[0] == 1 and "give them to summarize" in rc[2], "merge --budget: exit 1", rc[2])
    for opt in ("--html", "--perfetto"):
        rc = analyze("merge", opt, os.path.join(tmp, "x"), summ)
        ok(rc[0] == 1 and "need the" in rc[2] and "traces" in rc[2],
           "merge %s refused: timelines need the traces" % opt, rc[2])
    rc = analyze("summarize", rundir)
    ok(rc[0] == 1 and "--out" in rc[2], "summarize without --out: exit 1", rc[2])
    rc = analyze("summarize", "--json", rundir, "--out", os.path.join(tmp, "y"))
    ok(rc[0] == 1, "summarize --json: exit 1 (report options go to merge)", rc[2])


def header(buf):
    return struct.unpack_from("<8sHHIQQ", buf, 0)


def fnv(b):
    h = 1469598103934665603
    for x in b:
        h = ((h ^ x) * 1099511628211) & 0xffffffffffffffff
    return h


def reseal(payload, flags=0):
    """a summary around payload with a valid header (length and checksum);
    flags 0: the payload stored as it is"""
    return struct.pack("<8sHHIQQ", b"RSSUMMRY", FORMAT_MAJOR, FORMAT_MINOR, flags,
                       len(payload), fnv(payload)) + payload


FORMAT_MAJOR = 6  # docs/summary-format.md
FORMAT_MINOR = 1  # 6.1: each rank's caught OOMs after the last rank


def bad(label, data, tmp, *want):
    p = os.path.join(tmp, "bad.rssum")
    with open(p, "wb") as f:
        f.write(data)
    rc = analyze("merge", p)
    okay = rc[0] == 2 and p in rc[2] and all(w in rc[2] for w in want)
    return ok(okay, label, "exit %d: %s" % (rc[0], rc[2]))


def corrupt(summ, other, tmp):
    buf = open(summ, "rb").read()
    ok(header(buf)[3] == 1, "summaries are written deflated (flags 1)")
    pay = zlib.decompress(buf[40:])  # the fields, as a reader sees them
    bad("unknown flags: field flags", reseal(pay, flags=6), tmp, "field flags")
    bad("a damaged zlib stream (checksum fixed): field payload, damaged",
        reseal(buf[32:40] + b"\x78\x9c" + bytes(200), flags=1), tmp, "field payload",
        "damaged")
    bad("not a summary: field magic", b"hello world, not a summary" * 3, tmp, "field magic")
    bad("truncated file: payload_length, truncated", buf[:len(buf) // 2], tmp,
        "payload_length", "truncated")
    bad("header only, cut: truncated header", buf[:20], tmp, "truncated header")
    flip = bytearray(buf)
    flip[len(buf) // 3] ^= 0x40
    bad("a flipped payload byte: field checksum", bytes(flip), tmp, "checksum")
    v2 = bytearray(buf)
    v2[8] = FORMAT_MAJOR + 1
    v2[10] = 0  # minor 0 of the next major
    bad("format %d.0: field version, says to summarize again" % (FORMAT_MAJOR + 1), bytes(v2),
        tmp, "field version", "%d.0" % (FORMAT_MAJOR + 1))
    bad("trailing bytes after the last rank: field (end)", reseal(pay + b"\0" * 9), tmp,
        "(end)")
    # a string byte changed to one no UTF-8 text holds (the job id: a damaged
    # summary printed it raw in the "different jobs" listing, which a UTF-8
    # reader of stderr could not decode): exit 2 naming the field
    i = pay.find(b"megasim")
    if ok(i >= 0, "the job id is in the payload"):
        bad("a job id byte made 0xa6: string is not valid UTF-8",
            reseal(pay[:i + 4] + b"\xa6" + pay[i + 5:]), tmp, "not valid UTF-8")
    # damaged summaries that once crashed or misbehaved (found by the random
    # changes below under ASan+UBSan): a peak of 2^63 bytes overflowed the
    # advisor's signed byte differences (UBSan), a stored --iteration the
    # ranks lack exited 1 as a usage error, a path byte outside UTF-8 reached
    # stderr raw. Each: exit 0 or 2, stderr valid UTF-8, no sanitizer report
    damaged = os.path.join(os.path.dirname(os.path.abspath(__file__)), "damaged")
    want = {"iteration.rssum": "field options.iteration",
            "non-utf8-path.rssum": "not valid UTF-8", "overflow-peak.rssum": None}
    for name in sorted(want):
        q = subprocess.run([ANALYZE, "merge", "--json", os.path.join(damaged, name)],
                           capture_output=True)
        try:
            err = q.stderr.decode()
        except UnicodeDecodeError as e:
            err = "stderr not UTF-8: %s" % e
        okay = q.returncode in (0, 2) and "runtime error" not in err and \
            "Sanitizer" not in err and not err.startswith("stderr not UTF-8") and \
            (want[name] is None or (q.returncode == 2 and want[name] in err))
        ok(okay, "damaged/%s: exit 0 or 2%s, no sanitizer report" %
           (name, ", '%s'" % want[name] if want[name] else ""), "exit %d: %s" %
           (q.returncode, err[-1500:]))
    # every cut of the payload: a clean error naming a field, never a crash
    cuts = sorted(set([0, 1, 7, 8, 20] + random.Random(18).sample(range(len(pay)), 150)))
    crashes, unnamed = [], []
    p = os.path.join(tmp, "cut.rssum")
    for k in cuts:
        with open(p, "wb") as f:
            f.write(reseal(pay[:k]))
        rc = analyze("merge", p)
        if rc[0] != 2:
            crashes.append((k, rc[0], rc[2][-200:]))
        elif "field " not in rc[2] or "offset" not in rc[2]:
            unnamed.append((k, rc[2]))
    ok(not crashes and not unnamed, "payload cut at %d places (checksum fixed): exit 2 with "
       "offset and field every time" % len(cuts), "%s %s" % (crashes[:5], unnamed[:5]))
    # random bytes changed, checksum fixed: exit 0 or 2, never a signal
    rnd = random.Random(1818)
    sig = []
    for _ in range(60):
        b = bytearray(pay)
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(len(b))
            b[i] = rnd.choice([0, 0xff, 0x7f, 0x80, rnd.randrange(256)])
        with open(p, "wb") as f:
            f.write(reseal(bytes(b)))
        rc = analyze("merge", "--json", p)
        if rc[0] not in (0, 2):
            sig.append((rc[0], rc[2][-300:]))
    ok(not sig, "60 payloads with random bytes changed (checksum fixed): exit 0 or 2, no "
       "crash", sig[:3])
    rc = analyze("merge", summ, other)
    ok(rc[0] == 2 and ("different jobs" in rc[2] or "did not run at the same time" in rc[2])
       and summ in rc[2] and other in rc[2] and "field job" in rc[2],
       "summaries of two jobs: exit 2, names both summaries", rc[2])
    # as a trace given twice is read once (hnew2 finding 7: it was refused as
    # two processes of one rank)
    rc = analyze("merge", summ, summ)
    ok(rc[0] == 0 and "skipped %s (the same summary again)" % summ in rc[2],
       "one summary twice: read once, said on stderr", rc[2])


def many_ranks(rundir, summ, tmp):
    """a job of more ranks than the advisor evaluates (256): 1,024 copies of
    the main job's 4 ranks laid out as Megatron does (pipeline outermost:
    ranks 0-511 stage 0, 512-1023 stage 1, gen_summaries block). The
    advisor takes ranks from both stages (before, the first 256 by rank
    number were all stage 0) and says so; the verdict is the 4-rank job's."""
    if not GEN_SUMMARIES:
        ok(False, "many ranks: gen_summaries not given (GEN_SUMMARIES)")
        return
    d = os.path.join(tmp, "many")
    os.mkdir(d)
    p = subprocess.run([GEN_SUMMARIES, summ, d, "1024", "32", "block"], capture_output=True,
                       text=True)
    if not ok(p.returncode == 0, "many ranks: 1,024 rank summaries generated", p.stderr):
        return
    rc, out, err = analyze("merge", "--json", d)
    direct = json.loads(analyze("--json", rundir)[1])["verdict"]
    try:
        v = json.loads(out)["verdict"]
    except ValueError:
        ok(False, "many ranks: merge --json parses", err[-800:])
        return
    ranks = [r["rank"] for r in v.get("ranks", [])]
    ok(len(ranks) == 256 and any(r < 512 for r in ranks) and any(r >= 512 for r in ranks),
       "many ranks: the advisor evaluates 256 ranks from both pipeline stages",
       "%d ranks, %d of stage 1" % (len(ranks), sum(r >= 512 for r in ranks)))
    ok("evaluated 256 of the job's 1024 ranks" in v.get("note", ""),
       "many ranks: the verdict's note says which ranks were evaluated", v.get("note"))
    ok(v["code"] == direct["code"], "many ranks: the verdict is the 4-rank job's (%s)"
       % direct["code"], "%s vs %s" % (v["code"], direct["code"]))


def main():
    tmp = tempfile.mkdtemp(prefix="summary.", dir=os.environ.get("TMPDIR"))
    try:
        got = {}
        fixtures(tmp)
        for name in COMPARED:
            got[name] = compare_scenario(name, tmp)
        for name in REGRESSIONS:
            regression(name, tmp)
        comparisons(got, tmp)
        if got.get("main"):
            rundir, summ = got["main"]
            nodes = two_nodes("main", rundir, tmp)
            sa = nodes[2]
            if got.get("main-full-block-3"):
                two_nodes("main-full-block-3", got["main-full-block-3"][0], tmp)
            options(rundir, summ, nodes, tmp)
            many_ranks(rundir, summ, tmp)
            other = got.get("R09") or got.get("R01")
            corrupt(summ, other[1] if other else sa, tmp)
            size = os.path.getsize(summ)
            ok(size < 16 * 1024, "the main job's summary is small: %d bytes for 4 ranks" % size)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
