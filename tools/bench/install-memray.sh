#!/usr/bin/env bash
# install-memray.sh VENV PYTHON: a virtual environment of PYTHON at VENV with
# memray pinned by hash (tools/bench/memray-requirements.txt, PyPI), for
# tools/bench/bench_pystack.py --memray-python VENV/bin/python. Reused when
# VENV already imports memray. The test suite never needs it.
# Exit: 0 ready, 1 usage, 2 the install failed (no PyPI, no wheel for PYTHON).
set -euo pipefail
venv="${1:?usage: install-memray.sh VENV PYTHON}"
py="${2:?usage: install-memray.sh VENV PYTHON}"
req="$(cd "$(dirname "$0")" && pwd)/memray-requirements.txt"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import memray, memray.reporters.module_tools" 2>/dev/null; then
    exit 0
fi
"$py" -m venv "$venv" || exit 2
"$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
    --only-binary :all: -r "$req" || exit 2
"$venv/bin/python" -c "import memray, memray.reporters.module_tools; memray.Tracker" || exit 2
