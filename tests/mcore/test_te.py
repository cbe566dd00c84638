#!/usr/bin/env python3
"""Transformer Engine loads on the fake GPU (issue 16; docs/validation/megatron-core.md,
"Transformer Engine on the fake GPU").

  1. TE's core library (transformer-engine-cu13 2.12.0,
     tools/mcore_job/te-requirements.txt) loads through TE's own loader
     (transformer_engine.common: cuDNN, NVRTC, cuRAND by path, then the core
     library) with the fake GPU first on LD_LIBRARY_PATH, and every
     CUDA-family library in the process is the fake GPU's: no real
     cuBLAS/cuDNN/NVRTC was pulled in (the real cuDNN sub-libraries used to
     be, and with them real NVRTC).

Exit 77 (SKIP) when the pinned wheels cannot be installed (no PyPI, no
CPython 3.12) unless RECOMPSHIM_REQUIRE_TORCH=1.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA_FAMILY = ("libcuda.", "libcudart", "libcublas", "libcudnn", "libnvrtc", "libnccl",
               "libcufft", "libcurand", "libcusparse", "libcusolver")
failures = []

LOAD = r'''
import transformer_engine.common  # TE's own loader: cuDNN, NVRTC, cuRAND, then the core library
with open("/proc/self/maps") as f:
    print("\n".join(sorted({l.split()[-1] for l in f if "/" in l})))
'''


def check(ok, what):
    """Print one result line; remember failures."""
    print("%s - %s" % ("ok" if ok else "not ok", what), flush=True)
    if not ok:
        failures.append(what)
    return ok


def install(script, *args):
    """Run an installer; its stdout (a site directory); exit 77 passes through."""
    p = subprocess.run([os.path.join(ROOT, *script)] + list(args), stdout=subprocess.PIPE, text=True)
    if p.returncode == 77:
        sys.exit(77)
    if p.returncode != 0:
        print("not ok - %s failed (exit %d)" % (script[-1], p.returncode))
        sys.exit(1)
    return p.stdout.strip()


def check_load(build, te_site, mcore_site, scratch):
    """Check 1: TE's own loader (transformer_engine.common) loads the core
    library on the fake GPU's libraries only. It opens cuDNN, NVRTC and
    cuRAND by path from <LIB>_HOME: a directory of links to the fake GPU's,
    as tools/mcore_job/run.sh makes."""
    fake = os.path.abspath(os.path.join(build, "tests", "doubles", "fake_gpu"))
    home = os.path.abspath(os.path.join(scratch, "te-cuda-home"))
    os.makedirs(os.path.join(home, "lib"), exist_ok=True)
    for l in ("libcudnn.so.9", "libnvrtc.so.13", "libcurand.so.10"):
        link = os.path.join(home, "lib", l)
        if not os.path.lexists(link):
            os.symlink(os.path.join(fake, l), link)
    env = dict(os.environ, LD_LIBRARY_PATH=fake, PYTHONPATH=te_site + os.pathsep + mcore_site,
               CUDNN_HOME=home, NVRTC_HOME=home, CURAND_HOME=home, PYTHONWARNINGS="ignore")
    py = subprocess.run([os.path.join(ROOT, "tools", "fake_gpu", "find-python.sh"), "3.12"],
                        stdout=subprocess.PIPE, text=True).stdout.strip()
    p = subprocess.run([py, "-c", LOAD], env=env, capture_output=True, text=True)
    if not check(p.returncode == 0, "TE's loader loads libtransformer_engine.so on the fake GPU (%s)"
                 % (p.stderr.strip().splitlines() or ["ok"])[-1]):
        return
    maps = p.stdout.split()
    check(any(m.endswith("/libtransformer_engine.so") for m in maps),
          "libtransformer_engine.so is mapped")
    cuda = [m for m in maps if os.path.basename(m).startswith(CUDA_FAMILY)]
    real = [m for m in cuda if os.path.dirname(os.path.realpath(m)) != os.path.realpath(fake)]
    check(len(cuda) >= 10 and not real, "%d CUDA-family libraries mapped, all the fake GPU's "
          "(others: %s)" % (len(cuda), real))


def main():
    build = os.environ.get("RS_BUILD_DIR") or os.path.join(ROOT, "build")
    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(build, "tests", "mcore", "out-te"))
    te_cache = os.environ.get("RECOMPSHIM_TE_CACHE") or os.path.join(build, "te-cache")
    mcore_cache = os.environ.get("RECOMPSHIM_MCORE_CACHE") or os.path.join(build, "mcore-cache")
    te_site = install(("tools", "fake_gpu", "install-torch.sh"), te_cache,
                      os.path.join(ROOT, "tools", "mcore_job", "te-requirements.txt"))
    mcore_site = install(("tools", "fake_gpu", "install-torch.sh"), mcore_cache,
                         os.path.join(ROOT, "tools", "mcore_job", "requirements.txt"))
    os.makedirs(out, exist_ok=True)
    check_load(build, te_site, mcore_site, out)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
