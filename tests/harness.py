"""Helpers every Python test harness shares."""
import os


def preload(shim):
    """LD_PRELOAD for a job under the shim: under the sanitizer tier
    (tools/sanitize.sh) its runtime must come first"""
    return " ".join(p for p in (os.environ.get("RS_SANITIZER_RUNTIME"), shim) if p)


class Tap:
    """A TAP producer (the protocol meson's `protocol: 'tap'` reads): ok()
    prints one numbered `ok`/`not ok` line per check, with the first
    `detail_lines` lines of its detail as `#` comments when it fails, and
    returns the condition; done() prints the plan and gives the exit status
    (1 when any check failed)."""

    def __init__(self, detail_lines=40):
        self.n = 0
        self.failed = 0
        self.detail_lines = detail_lines

    def ok(self, cond, name, detail=""):
        import sys
        self.n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", self.n, name))
        if not cond:
            self.failed += 1
            for line in str(detail).splitlines()[:self.detail_lines]:
                print("#   " + line)
        sys.stdout.flush()
        return cond

    def done(self):
        print("1..%d" % self.n)
        return 1 if self.failed else 0
