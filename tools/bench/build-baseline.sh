#!/usr/bin/env bash
# build-baseline.sh [REF] [DIR]: a release build of REF's librecompshim.so
# (default main), for run-all.sh --baseline-lib (or --old-shim): the shim
# section then measures this tree's library against REF's in the same
# interleaved rounds. Prints the library's path. DIR defaults to
# build-bench-baseline/ at the root of the tree (rebuilt from scratch).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
ref="${1:-main}"
dir="${2:-$root/build-bench-baseline}"
git -C "$root" rev-parse --verify --quiet "$ref^{commit}" >/dev/null ||
    { echo "build-baseline: $ref is not a commit in $root" >&2; exit 2; }
rm -rf "$dir"
mkdir -p "$dir/src"
git -C "$root" archive "$ref" | tar -x -C "$dir/src"
meson setup "$dir/b" "$dir/src" -Dbuildtype=release >/dev/null
ninja -C "$dir/b" shim/librecompshim.so >/dev/null
echo "$dir/b/shim/librecompshim.so"
