#!/usr/bin/env python3
"""`meson install` into a temporary destination, then the installed files used
as a user would (TAP): the installed shim records a megasim run, the installed
recomp-analyze and recomp-dump read it, a C program builds against the
installed headers through the pkg-config file, the man pages render without
warnings and document every option and setting, the docs are there.

Environment (tests/install/meson.build): BUILD_ROOT, SOURCE_ROOT, PREFIX,
BINDIR, LIBDIR, INCLUDEDIR, MANDIR, DATADIR, CC, MEGASIM_LIB_DIR, MEGASIM_PYDIR,
PROJECT_VERSION, TRACE_VERSION.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Tap, preload  # noqa: E402  (tests/harness.py)

E = os.environ

TAP = Tap(30)
ok = TAP.ok


def run(argv, env=None, **kw):
    return subprocess.run(argv, capture_output=True, text=True, env=env, **kw)


def under(dest, d):
    """An install directory (absolute, or relative to the prefix) in dest."""
    p = d if os.path.isabs(d) else os.path.join(E["PREFIX"], d)
    return dest + p


def env_settings():
    """RECOMPSHIM_* names from shim/env.def, the one list of settings."""
    text = open(os.path.join(E["SOURCE_ROOT"], "shim", "env.def"), encoding="utf-8").read()
    return re.findall(r"^RS_ENV\((RECOMPSHIM_\w+)", text, re.M)


def check_tools(bindir, libdir, tmp):
    analyze, dump = os.path.join(bindir, "recomp-analyze"), os.path.join(bindir, "recomp-dump")
    shim = os.path.join(libdir, "librecompshim.so")
    for p in (analyze, dump, shim):
        ok(os.path.isfile(p), "installed: %s" % os.path.relpath(p, tmp))
    for tool in (analyze, dump):
        v = run([tool, "--version"])
        ok(v.returncode == 0 and E["PROJECT_VERSION"] in v.stdout and
           "trace format " + E["TRACE_VERSION"] in v.stdout,
           "installed %s --version" % os.path.basename(tool), v)
    out = os.path.join(tmp, "traces")
    os.mkdir(out, 0o700)
    env = dict(E, LD_PRELOAD=preload(shim), RECOMPSHIM_OUT=out, MEGASIM_LIB_DIR=E["MEGASIM_LIB_DIR"],
               PYTHONPATH=E["MEGASIM_PYDIR"])
    env.pop("RECOMPSHIM_RUN_ID", None)
    r = run([sys.executable, "-m", "megasim", "--sim-preset", "llama3-8b", "--num-layers", "2",
             "--train-iters", "1", "--profile", "--nvtx-ranges", "--profile-step-start", "0",
             "--sim-world-size", "2", "--sim-quiet"], env=env)
    runs = [os.path.join(out, d) for d in os.listdir(out)]
    ok(r.returncode == 0 and len(runs) == 1, "the installed shim records a 2-rank megasim run",
       r.stderr[-2000:])
    if len(runs) != 1:
        return
    traces = [f for f in os.listdir(runs[0]) if f.endswith(".rstrace")]
    d = run([dump, "--kind", "ALLOC", runs[0]])
    ok(d.returncode == 0 and len(traces) == 2 and d.stdout.count("recompshim trace v") == 2 and
       "\nALLOC " in d.stdout, "installed recomp-dump reads the run directory", d.stderr)
    a = run([analyze, "--no-advice", "--ranks", "all", runs[0]])
    ok(a.returncode == 0 and re.search(r"rank 0", a.stdout) and re.search(r"rank 1", a.stdout),
       "installed recomp-analyze reports both ranks", a.stdout[-1500:] + a.stderr)


def check_pkgconfig(dest, libdir, tmp):
    pcdir = os.path.join(libdir, "pkgconfig")
    ok(os.path.isfile(os.path.join(pcdir, "recompshim.pc")), "installed: recompshim.pc")
    env = dict(E, PKG_CONFIG_PATH=pcdir, PKG_CONFIG_SYSROOT_DIR=dest)
    cflags = run(["pkg-config", "--cflags", "recompshim"], env=env)
    ver = run(["pkg-config", "--variable=trace_format_version", "recompshim"], env=env)
    shimv = run(["pkg-config", "--variable=shim", "recompshim"], env=env)
    ok(cflags.returncode == 0 and ver.stdout.strip() == E["TRACE_VERSION"] and
       shimv.stdout.strip().endswith("/librecompshim.so"),
       "pkg-config recompshim: cflags, trace_format_version, shim", cflags.stderr + ver.stdout)
    src = os.path.join(tmp, "v.c")
    with open(src, "w") as f:
        f.write('#include <stdio.h>\n#include <recomp/trace_format.h>\n'
                'int main(void) { printf("%d.%d %zu\\n", RS_TRACE_VERSION_MAJOR, '
                'RS_TRACE_VERSION_MINOR, sizeof(rs_rec_oom)); return 0; }\n')
    exe = os.path.join(tmp, "v")
    c = run([E["CC"], "-std=gnu11", "-Wall", "-Werror"] + cflags.stdout.split() +
            ["-o", exe, src])
    ok(c.returncode == 0, "a C program builds against <recomp/trace_format.h> via pkg-config",
       c.stderr)
    if c.returncode == 0:
        o = run([exe])
        ok(o.stdout.split()[0] == E["TRACE_VERSION"], "its trace-format version is the tools'",
           o.stdout)


def check_man(mandir, docdir):
    pages = {"recomp-analyze": "man1/recomp-analyze.1", "recomp-dump": "man1/recomp-dump.1",
             "recompshim": "man7/recompshim.7"}
    texts = {}
    for name, rel in pages.items():
        p = os.path.join(mandir, rel)
        if not os.path.isfile(p):
            ok(False, "installed: %s" % rel)
            continue
        g = run(["groff", "-man", "-Tutf8", "-ww", "-z", p])
        ok(g.returncode == 0 and g.stderr == "", "%s renders without groff warnings" % rel,
           g.stderr)
        t = run(["groff", "-man", "-Tascii", "-P-c", "-P-b", "-P-u", p]).stdout
        texts[name] = t
        ok("@" not in t.replace("user@", ""), "%s: every @VAR@ filled in" % rel,
           [l for l in t.splitlines() if "@" in l])
    for tool in ("recomp-analyze", "recomp-dump"):
        h = run([os.path.join(E["BUILD_ROOT"], "analyzer" if tool == "recomp-analyze" else "tools",
                              tool), "--help"]).stdout
        opts = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", h))
        missing = sorted(o for o in opts if o not in texts.get(tool, ""))
        ok(opts and not missing, "%s(1) documents every option of --help" % tool, missing)
    names = env_settings()
    missing = [v for v in names if v not in texts.get("recompshim", "")]
    ok(len(names) >= 8 and not missing, "recompshim(7) documents every setting of env.def",
       missing)
    for f in ("README.md", "docs/trace-format.md", "docs/json-schema.md", "docs/advisor.md"):
        ok(os.path.isfile(os.path.join(docdir, f)), "installed doc: %s" % f)


def main():
    tmp = tempfile.mkdtemp(prefix="recomp-install.")
    dest = os.path.join(tmp, "dest")
    try:
        i = run(["meson", "install", "-C", E["BUILD_ROOT"], "--no-rebuild", "--quiet",
                 "--destdir", dest])
        ok(i.returncode == 0, "meson install --destdir", i.stdout + i.stderr)
        bindir, libdir = under(dest, E["BINDIR"]), under(dest, E["LIBDIR"])
        check_tools(bindir, libdir, tmp)
        check_pkgconfig(dest, libdir, tmp)
        check_man(under(dest, E["MANDIR"]),
                  os.path.join(under(dest, E["DATADIR"]), "doc", "recompshim"))
        inc = os.path.join(under(dest, E["INCLUDEDIR"]), "recomp")
        ok(sorted(os.listdir(inc)) == ["apis.def", "records.def", "trace_format.h"]
           if os.path.isdir(inc) else False, "installed: include/recomp/ (the trace format)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TAP.done()


if __name__ == "__main__":
    sys.exit(main())
