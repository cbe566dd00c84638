#!/usr/bin/env bash
# run-torch.sh FAKE_GPU_DIR CMD...: run CMD with real PyTorch on the fake GPU.
# Installs the pinned wheel into $RECOMPSHIM_TORCH_CACHE (reused when present;
# exit 77 = SKIP when PyPI is out of reach, unless RECOMPSHIM_REQUIRE_TORCH=1),
# puts the fake GPU's libraries first on LD_LIBRARY_PATH before Python starts
# and the wheel on PYTHONPATH.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
fake="${1:?usage: run-torch.sh FAKE_GPU_DIR CMD...}"
shift
site="$("$root/tools/fake_gpu/install-torch.sh" "${RECOMPSHIM_TORCH_CACHE:-$root/build/torch-cache}")" || exit $?
export FAKE_GPU_DIR="$(cd "$fake" && pwd)"
export LD_LIBRARY_PATH="$FAKE_GPU_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::UserWarning}"
exec "$@"
