#!/usr/bin/env bash
# tsan.sh: the shim's threading programs under ThreadSanitizer, outside
# Criterion (Criterion itself crashes under TSan). Builds the shim, the test
# doubles, the integration programs and recomp-dump with -fsanitize=thread
# into build-tsan/, runs each program with the TSan runtime preloaded before
# the shim, and counts a program run as passed when it exits 0 with zero
# TSan reports (data races, lock-order inversions: TSan's deadlock detector
# sees a lock order broken even in runs that happen not to hang) and every
# trace it wrote reads back. Ends with "N passed, N failed".
#   tools/tsan.sh [REPEATS]   (default 5 runs of each program)
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tools/bootstrap.sh)" || exit 2
repeats="${1:-5}"
b="${TSAN_BUILDDIR:-build-tsan}"
if [ ! -f "$b/build.ninja" ]; then
    meson setup "$b" -Db_sanitize=thread -Db_lundef=false >/dev/null ||
        { echo "meson setup failed"; echo "0 passed, 1 failed"; exit 1; }
fi
progs=(itp_threads itp_fork itp_stress itp_nvtx itp_basic)
targets=(shim/librecompshim.so tools/recomp-dump)
for p in "${progs[@]}"; do targets+=("tests/integration/progs/$p"); done
ninja -C "$b" "${targets[@]}" >/dev/null ||
    { echo "tsan build failed"; echo "0 passed, 1 failed"; exit 1; }
bb="$(cd "$b" && pwd)"
tsan_rt="$(${CC:-cc} -print-file-name=libtsan.so)"
work="$(mktemp -d "${TMPDIR:-/tmp}/rs-tsan-XXXXXX")"
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
for p in "${progs[@]}"; do
    for i in $(seq 1 "$repeats"); do
        d="$work/$p.$i"
        mkdir -p "$d/out"
        (cd "$d" && LD_LIBRARY_PATH="$bb/tests/doubles" \
            LD_PRELOAD="$tsan_rt:$bb/shim/librecompshim.so" \
            RECOMPSHIM_OUT="$d/out" TSAN_OPTIONS="halt_on_error=0 exitcode=66" \
            timeout 300 "$bb/tests/integration/progs/$p" >"$d/stdout" 2>"$d/stderr")
        rc=$?
        reports=$(grep -c "WARNING: ThreadSanitizer" "$d/stderr")
        bad_traces=0
        while IFS= read -r -d '' t; do
            "$b/tools/recomp-dump" "$t" >/dev/null 2>"$d/dump.err" || bad_traces=$((bad_traces + 1))
        done < <(find "$d/out" -name '*.rstrace' -print0)
        if [ "$rc" -eq 0 ] && [ "$reports" -eq 0 ] && [ "$bad_traces" -eq 0 ]; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1))
            echo "tsan: $p run $i: exit $rc, $reports TSan reports, $bad_traces unreadable traces"
            grep -A30 "WARNING: ThreadSanitizer" "$d/stderr" | head -60
        fi
    done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
