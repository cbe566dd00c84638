#!/usr/bin/env bash
# bootstrap.sh: install what the build needs (Debian packages, by name) and
# find the CUDA toolkit. Called by both README commands and by .ci/run.
# Prints the CUDA_HOME it found as its last line: eval "$(tools/bootstrap.sh)".
set -euo pipefail

say() { printf 'bootstrap: %s\n' "$*" >&2; }

# Package -> a file or pkg-config name that proves it is installed.
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pc() { pkg-config --exists "$1" 2>/dev/null; }

have_cmd cc || need+=(gcc libc6-dev)
have_cmd meson || need+=(meson)
have_cmd ninja || need+=(ninja-build)
have_cmd pkg-config || need+=(pkg-config)
have_cmd python3 || need+=(python3)
have_pc zlib || need+=(zlib1g-dev)
have_pc yajl || need+=(libyajl-dev)
have_pc criterion || need+=(libcriterion-dev)
have_pc libunwind || need+=(libunwind-dev)
have_pc libdw || need+=(libdw-dev)
have_cmd groff || need+=(groff-base)
[ -f /usr/include/uthash.h ] || need+=(uthash-dev)
# the fuzz tier (tools/fuzz.sh) builds its targets with clang's libFuzzer
[ "${RS_NEED_CLANG:-0}" = 1 ] && ! have_cmd clang && need+=(clang)

if [ ${#need[@]} -gt 0 ]; then
    say "installing: ${need[*]}"
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2 || say "apt-get update failed; trying the install anyway"
        apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
    elif have_cmd sudo && sudo -n true 2>/dev/null; then
        sudo -n apt-get update -qq >&2 || true
        sudo -n DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
    else
        say "missing packages and no root: run  sudo apt-get install ${need[*]}"
        exit 2
    fi
fi

# Optional: Debian's Chromium renders the --html report in its test
# (tests/report/test_html.py); that test SKIPs, visibly, when it is missing,
# so a failed install does not stop the build.
if ! have_cmd chromium && [ "${RECOMP_NO_CHROMIUM:-0}" != 1 ]; then
    say "installing: chromium (optional, for the HTML report test)"
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2 ||
            { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                  --no-install-recommends chromium >&2; } ||
            say "chromium could not be installed: the HTML render test will be skipped"
    elif have_cmd sudo && sudo -n true 2>/dev/null; then
        sudo -n DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            chromium >&2 || say "chromium could not be installed: the HTML render test will be skipped"
    else
        say "chromium missing and no root: the HTML render test will be skipped"
    fi
fi
# Optional, for tests only (they skip visibly without it): Open MPI's
# mpirun for the real-launcher test in tests/integration/test_jobid.c.
# Installed when we are root; a failure here never stops the build.
if ! have_cmd mpirun.openmpi && [ "$(id -u)" = 0 ]; then
    say "installing (optional, tests): openmpi-bin"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends openmpi-bin >&2 ||
        { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends openmpi-bin >&2; }; } ||
        say "could not install openmpi-bin; the real mpirun test will be skipped"
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda_runtime_api.h" ] || [ ! -f "$cuda/include/nvtx3/nvToolsExt.h" ]; then
    say "CUDA toolkit headers not found under $cuda/include (need cuda_runtime_api.h and nvtx3/)."
    say "Install the CUDA toolkit (12 or 13) and set CUDA_HOME to its root. No GPU is needed to build."
    exit 2
fi
echo "export CUDA_HOME=$cuda"
