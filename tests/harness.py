"""Helpers every Python test harness shares."""
import os


def preload(shim):
    """LD_PRELOAD for a job under the shim: under the sanitizer tier
    (tools/sanitize.sh) its runtime must come first"""
    return " ".join(p for p in (os.environ.get("RS_SANITIZER_RUNTIME"), shim) if p)
