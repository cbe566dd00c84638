#!/usr/bin/env bash
# update-golden.sh: rewrite tests/golden/expected/ from the current build after
# a deliberate change of recomp-analyze's output; review `git diff` and commit
# the new files with the change that made them. Arguments: case names to
# rewrite only those (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
builddir="${BUILDDIR:-build}"
ninja -C "$builddir" >/dev/null
only=$(IFS=,; echo "$*")
RECOMP_GOLDEN_UPDATE=1 RECOMP_GOLDEN_ONLY="$only" \
    meson test -C "$builddir" --suite golden --print-errorlogs >/dev/null
git status --short tests/golden/expected | head -50
