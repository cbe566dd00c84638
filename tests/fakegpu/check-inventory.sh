#!/usr/bin/env bash
# The fake GPU's specification is current: regenerate the inventory of the
# pinned wheel (tools/fake-gpu-inventory.sh) into a scratch directory and
# compare it with the committed docs/validation/fake-gpu-inventory.md and
# tests/doubles/fake_gpu/torch-inventory.tsv. Exit 77 (SKIP) when the wheel
# cannot be installed (no PyPI), unless RECOMPSHIM_REQUIRE_TORCH=1.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: check-inventory.sh SCRATCH_DIR}"
mkdir -p "$out"
"$root/tools/fake-gpu-inventory.sh" "$out/inventory.md" "$out/inventory.tsv" || exit $?
rc=0
diff -u "$root/docs/validation/fake-gpu-inventory.md" "$out/inventory.md" || rc=1
diff -u "$root/tests/doubles/fake_gpu/torch-inventory.tsv" "$out/inventory.tsv" || rc=1
[ $rc = 0 ] && echo "inventory matches the pinned wheel ($(grep -vc '^#' "$out/inventory.tsv") symbols)" \
    || echo "inventory is stale: run tools/fake-gpu-inventory.sh and commit the result"
exit $rc
