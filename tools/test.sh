#!/usr/bin/env bash
# test.sh: the README's test command. Bootstraps, builds into build/, runs
# every test with meson, and ends with the line "N passed, N failed"
# counting individual criterion tests (and whole meson tests otherwise).
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tools/bootstrap.sh)" || exit 2
builddir="${BUILDDIR:-build}"
if [ ! -f "$builddir/build.ninja" ]; then
    meson setup "$builddir" >/dev/null || { echo "meson setup failed"; exit 2; }
fi
ninja -C "$builddir" || { echo "0 passed, 1 failed"; exit 1; }
meson test -C "$builddir" --print-errorlogs "$@"
rc=$?
python3 tools/test-summary.py "$builddir/meson-logs/testlog.json"
sum_rc=$?
[ $rc -eq 0 ] && [ $sum_rc -eq 0 ]
