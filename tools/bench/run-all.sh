#!/usr/bin/env bash
# run-all.sh [--quick]: every benchmark in one command; prints the Markdown
# tables docs/performance.md quotes (ratios measured side by side in one run).
#
# Builds a release build in build-bench/ (not the test build), compiles
# bench_shim_overhead.c against the mock runtime, installs heaptrack (Debian
# package, only here: the test suite never needs it) when it is missing, and
# runs tools/bench/run_all.py. --quick: smaller counts and 3 rounds (about
# 4 minutes on 2 vCPUs instead of about 15). No timing assertions anywhere.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
eval "$(tools/bootstrap.sh)"
if ! command -v heaptrack >/dev/null || ! command -v heaptrack_print >/dev/null; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get install -y --no-install-recommends heaptrack >&2 ||
        echo "run-all: heaptrack could not be installed: its comparisons are skipped" >&2
fi
b="$root/build-bench"
[ -f "$b/build.ninja" ] || meson setup "$b" -Dbuildtype=release >/dev/null
ninja -C "$b" >/dev/null
cc -O2 -std=gnu11 -isystem "$CUDA_HOME/include" "$root/tools/bench/bench_shim_overhead.c" \
    -L"$b/tests/doubles" -l:libcudart.so.13 -Wl,-rpath,"$b/tests/doubles" -ldl -lpthread \
    -o "$b/bench_shim_overhead"
exec python3 "$root/tools/bench/run_all.py" "$b" "$b/bench_shim_overhead" "$@"
