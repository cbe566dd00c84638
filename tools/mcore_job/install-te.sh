#!/usr/bin/env bash
# install-te.sh CACHE_DIR MCORE_SITE: Transformer Engine for the real
# Megatron-Core job (issue 16), next to MCORE_SITE's torch 2.11.0.
#
#  1. tools/fake_gpu/install-torch.sh CACHE_DIR te-requirements.txt: the core
#     library and TE's Python package (transformer-engine-cu13 2.12.0) and
#     their pure-Python dependencies, hashes checked, --no-deps (no second
#     torch) into CACHE_DIR/site.
#  2. TE's PyTorch extension, published as a source distribution only
#     (te-torch-requirements.txt, hash checked): downloaded, compiled against
#     MCORE_SITE's torch (C++ only; CUDA headers from $CUDA_HOME, default
#     /usr/local/cuda) and unpacked into CACHE_DIR/site. It is compiled with
#     -O0 instead of its -O3: its host code only launches kernels, which the
#     fake GPU accepts without running, and -O0 halves the build (the
#     slowest step: 28 C++ files, each including torch/torch.h).
#     MAX_JOBS (default 2) compiles in parallel.
#
# Reused when present (stamp CACHE_DIR/site/.te-torch = sha256 of the pin file
# and this script); concurrent calls serialise on CACHE_DIR/.te-lock. Prints
# the site directory (for PYTHONPATH, before MCORE_SITE) on stdout.
# Exit status: 0 installed or reused; 77 SKIP (install-torch.sh's: no PyPI or
# no CPython 3.12; a failure with RECOMPSHIM_REQUIRE_TORCH=1); 1 download or
# build error (the log named on stderr).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${1:?usage: install-te.sh CACHE_DIR MCORE_SITE}"
mcore_site="${2:?usage: install-te.sh CACHE_DIR MCORE_SITE}"
here="$root/tools/mcore_job"
site="$("$root/tools/fake_gpu/install-torch.sh" "$cache" "$here/te-requirements.txt")" || exit $?
py="${RECOMPSHIM_TORCH_PYTHON:-$("$root/tools/fake_gpu/find-python.sh" 3.12)}"
fake="${RS_BUILD_DIR:-$root/build}/tests/doubles/fake_gpu"
want="$(cat "$here/te-torch-requirements.txt" "$0" | sha256sum | cut -d' ' -f1)"
exec 8>"$cache/.te-lock"
flock 8
if [ -f "$site/.te-torch" ] && [ "$(cat "$site/.te-torch")" = "$want" ]; then
    echo "$site"
    exit 0
fi
start=$(date +%s)
log="$cache/te-torch-build.log"
rm -rf "$cache/sdist" "$cache/te-build" && mkdir -p "$cache/sdist" "$cache/te-build"
# pip prepares the sdist's metadata by running its setup.py, which imports
# torch (MCORE_SITE, on the fake GPU's libraries) and wheel (SITE).
export PYTHONPATH="$site:$mcore_site" LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! "$py" -m pip download --no-deps --no-binary=:all: --no-build-isolation --require-hashes \
        -r "$here/te-torch-requirements.txt" -d "$cache/sdist" >"$log" 2>&1; then
    if grep -qiE 'THESE PACKAGES DO NOT MATCH THE HASHES' "$log"; then
        echo "install-te: hash mismatch, see $log" >&2
        exit 1
    fi
    if [ "${RECOMPSHIM_REQUIRE_TORCH:-0}" != 1 ] && grep -qiE 'connection|resolve|network|No matching distribution' "$log"; then
        echo "install-te: SKIP: cannot download transformer-engine-torch from PyPI ($(tail -n1 "$log"))" >&2
        exit 77
    fi
    echo "install-te: downloading the PyTorch extension failed, see $log" >&2
    exit 1
fi
tar -xzf "$cache"/sdist/transformer_engine_torch-*.tar.gz -C "$cache/te-build" || exit 1
src="$(echo "$cache"/te-build/transformer_engine_torch-*)"
grep -q 'cxx_flags = \["-O3", ' "$src/build_tools/pytorch.py" || {
    echo "install-te: $src/build_tools/pytorch.py: no -O3 flag list to replace" >&2; exit 1; }
sed -i 's/cxx_flags = \["-O3", /cxx_flags = ["-O0", /' "$src/build_tools/pytorch.py"
# NVTE_NO_LOCAL_VERSION=1: TE's te_version() otherwise appends the short
# commit of whatever git repository encloses the build directory (this one:
# build/ is inside the checkout), "2.12.0+50d8fe3", and TE's loader asserts
# that the extension's version equals transformer-engine's (AssertionError:
# Transformer Engine package version mismatch).
if ! (cd "$src" && NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_NO_LOCAL_VERSION=1 MAX_JOBS="${MAX_JOBS:-2}" \
        CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
        "$py" setup.py bdist_wheel -d "$cache/te-build/dist") >>"$log" 2>&1; then
    echo "install-te: building transformer_engine_torch failed, see $log" >&2
    exit 1
fi
"$py" -m zipfile -e "$cache"/te-build/dist/transformer_engine_torch-*.whl "$site" || exit 1
echo "$want" >"$site/.te-torch"
rm -rf "$cache/te-build"
echo "install-te: built the PyTorch extension in $(( $(date +%s) - start )) s" >&2
echo "$site"
