#!/usr/bin/env bash
# install-torch.sh CACHE_DIR [PINS]: install the pinned PyTorch wheel
# (PINS, default tools/fake_gpu/torch-requirements.txt, hashes checked) and its
# pure-Python dependencies with --no-deps into CACHE_DIR/site, never
# system-wide. The pins are for CPython 3.11 unless PINS has a line
# `# python: X.Y` (tools/mcore_job/requirements.txt: 3.12); the interpreter is
# $RECOMPSHIM_TORCH_PYTHON, else pythonX.Y, else pyenv's X.Y (find-python.sh). The
# wheels are kept in CACHE_DIR/wheels; a second call with the same pins reuses
# the installation (stamp CACHE_DIR/site/.pins = sha256 of the pin file) and
# needs no network. Concurrent calls serialise on CACHE_DIR/.lock.
#
# Prints the site directory (for PYTHONPATH) on stdout. Exit status:
#   0   installed or reused
#   77  PyPI unreachable or the pinned Python (3.11, x86_64) missing: a SKIP
#       (one line on stderr with the reason) -- unless RECOMPSHIM_REQUIRE_TORCH=1
#       (set by .ci/run), which turns that into
#   1   a failure; also any other install error (hash mismatch, disk full).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:?usage: install-torch.sh CACHE_DIR [PINS]}"
pins="${2:-$here/torch-requirements.txt}"
pyver="$(sed -n 's/^# python: \([0-9.]*\)$/\1/p' "$pins" | head -n1)"
pyver="${pyver:-3.11}"
py="${RECOMPSHIM_TORCH_PYTHON:-$("$here/find-python.sh" "$pyver")}"

skip() {
    if [ "${RECOMPSHIM_REQUIRE_TORCH:-0}" = 1 ]; then
        echo "install-torch: FAIL (RECOMPSHIM_REQUIRE_TORCH=1): $*" >&2
        exit 1
    fi
    echo "install-torch: SKIP: $*" >&2
    exit 77
}

ver="$("$py" -c 'import sys, platform; print("%d.%d-%s" % (sys.version_info[:2] + (platform.machine(),)))' 2>/dev/null)"
[ "$ver" = "$pyver-x86_64" ] || skip "the pinned wheels are for CPython $pyver on x86_64; ${py:-python$pyver} is ${ver:-missing}"

mkdir -p "$cache/wheels" || { echo "install-torch: cannot create $cache" >&2; exit 1; }
exec 9>"$cache/.lock"
flock 9
want="$(sha256sum "$pins" | cut -d' ' -f1)"
if [ -f "$cache/site/.pins" ] && [ "$(cat "$cache/site/.pins")" = "$want" ]; then
    echo "$cache/site"
    exit 0
fi

start=$(date +%s)
if ! "$py" -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
        --python-version "$pyver" --platform manylinux_2_28_x86_64 \
        -r "$pins" -d "$cache/wheels" >"$cache/download.log" 2>&1; then
    if grep -qiE 'THESE PACKAGES DO NOT MATCH THE HASHES' "$cache/download.log"; then
        echo "install-torch: hash mismatch, see $cache/download.log" >&2
        exit 1
    fi
    skip "cannot download the pinned wheels from PyPI ($(tail -n1 "$cache/download.log"))"
fi
rm -rf "$cache/site.new"
if ! "$py" -m pip install --quiet --no-deps --no-index --require-hashes \
        --find-links "$cache/wheels" --target "$cache/site.new" -r "$pins" \
        >"$cache/install.log" 2>&1; then
    echo "install-torch: pip install failed, see $cache/install.log" >&2
    exit 1
fi
echo "$want" >"$cache/site.new/.pins"
rm -rf "$cache/site" && mv "$cache/site.new" "$cache/site"
echo "install-torch: installed in $(( $(date +%s) - start )) s, $(du -sh "$cache" | cut -f1) in $cache" >&2
echo "$cache/site"
