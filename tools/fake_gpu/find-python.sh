#!/usr/bin/env bash
# find-python.sh X.Y: print the path of a CPython X.Y interpreter, or nothing
# (exit 1). Tries python3 (when it is X.Y), pythonX.Y on PATH, then pyenv's
# installed X.Y.* versions (the build machines carry pyenv with 3.10-3.13; a
# pyenv shim for a version that is not selected fails, so each candidate is run).
want="${1:?usage: find-python.sh X.Y}"
is_ver() { [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; }
for c in python3 "python$want"; do
    p="$(command -v "$c" 2>/dev/null)" || continue
    is_ver "$p" && { echo "$p"; exit 0; }
done
root="${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}"
for p in $(ls -d "$root/versions/$want".* 2>/dev/null | sort -rV); do
    is_ver "$p/bin/python$want" && { echo "$p/bin/python$want"; exit 0; }
done
exit 1
