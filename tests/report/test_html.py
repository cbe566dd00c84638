#!/usr/bin/env python3
"""--html rendered in Debian's Chromium (TAP): the page is well-formed and
self-contained, holds one SVG timeline per group of ranks (per rank with
--ranks all) whose peak markers equal the analyzer's peaks (its own --json),
and Chromium's screenshot of it is not blank.

Chromium runs headless (--headless --no-sandbox --disable-gpu, --dump-dom and
--screenshot). Without it the test SKIPs and says so (TAP "1..0 # SKIP"),
never passes silently; tools/bootstrap.sh installs it.

Usage: test_html.py (RECOMP_ANALYZE, RECOMPSHIM_LIB, MEGASIM_LIB_DIR,
MEGASIM_PYDIR set by meson).
"""
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reports import FULL2, MAIN, analyze, max_peaks, megasim  # noqa: E402

results = []


def check(name, ok, detail=""):
    results.append((bool(ok), name, "" if ok else detail))


VOID = {"meta", "br", "img", "hr", "input", "link", "col", "area", "base", "wbr", "source"}


class Balance(html.parser.HTMLParser):
    """Tags opened and closed in order (SVG leaf elements may self-close)."""

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append("</%s> closes %r" % (tag, self.stack[-1:]))
        else:
            self.stack.pop()


def png_pixels(path):
    """(width, height, rows of bytes, channels) of an 8-bit RGB/RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and not interlace, "PNG kind %r" % (hdr,)
    ch = 3 if ctype == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * ch, [], bytearray(w * ch)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b, c = prev[i], prev[i - ch] if i >= ch else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, rows, ch


def chromium(*args):
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu"] + list(args),
                          capture_output=True, timeout=180)


def page_tests(run, tmp, extra, label, want_svgs):
    page = os.path.join(tmp, label + ".html")
    rc, out, err = analyze("--no-advice", "--html", page, *extra, run)
    check("%s: exit 0" % label, rc == 0, err)
    text = open(page).read()
    p = Balance()
    p.feed(text)
    check("%s: well-formed (tags balanced)" % label, not p.errors and not p.stack,
          repr(p.errors[:5] + p.stack[:5]))
    ext = re.findall(r'(?:src|href)\s*=\s*"[^"]*"|https?://(?!www\.w3\.org/2000/svg)', text)
    check("%s: self-contained (no external references)" % label,
          not ext and not any(t in ("script", "link", "img", "iframe") for t, _ in p.tags), ext)
    doc = json.loads(analyze("--json", "--no-advice", run)[1])
    peaks = {r["rank"]: r["peak"]["bytes"] for r in doc["ranks"]}
    dom = chromium("--dump-dom", "file://" + page)
    check("%s: chromium --dump-dom exit 0" % label, dom.returncode == 0, dom.stderr[-800:])
    d = Balance()
    d.feed(dom.stdout.decode("utf-8", "replace"))
    svgs = [a for t, a in d.tags if t == "svg" and a.get("class") == "timeline"]
    check("%s: %d timelines in the rendered DOM" % (label, want_svgs), len(svgs) == want_svgs,
          "got %d" % len(svgs))
    for a in svgs:
        r = int(a["data-rank"])
        check("%s: rank %d timeline's peak = the analyzer's" % (label, r),
              int(a["data-peak-bytes"]) == peaks[r], "%s vs %s" % (a["data-peak-bytes"], peaks[r]))
    markers = [int(a["data-bytes"]) for t, a in d.tags
               if t == "circle" and "peak" in a.get("class", "") and a.get("data-level") == "tensor"]
    check("%s: one tensor peak marker per timeline, each an analyzer peak" % label,
          len(markers) == want_svgs and all(m in peaks.values() for m in markers), repr(markers))
    ooms = [a for t, a in d.tags if t == "line" and a.get("class") == "oom"]
    want_oom = sum(1 for a in svgs if doc["ranks"][[x["rank"] for x in doc["ranks"]].index(
        int(a["data-rank"]))]["oom"])
    check("%s: OOM marked where the rank OOMed" % label, len(ooms) == want_oom,
          "%d vs %d" % (len(ooms), want_oom))
    screenshot_not_blank(label, page, tmp)


def screenshot_not_blank(label, page, tmp):
    png = os.path.join(tmp, label + ".png")
    shot = chromium("--screenshot=" + png, "--window-size=1024,1200", "file://" + page)
    check("%s: chromium --screenshot exit 0" % label, shot.returncode == 0 and os.path.exists(png),
          shot.stderr[-800:])
    if not os.path.exists(png):
        return
    w, h, rows, ch = png_pixels(png)
    colours, ink = set(), 0
    for row in rows[::4]:
        for x in range(0, w * ch, ch * 4):
            px = row[x:x + 3]
            colours.add(px)
            ink += px != b"\xff\xff\xff"
    check("%s: screenshot not blank" % label, len(colours) > 16 and ink > 1000,
          "%d colours, %d non-white samples" % (len(colours), ink))


def compare_page_tests(runs, tmp):
    """compare --html: the table (one row per run) and each run's hot-rank
    timeline, whose peak is that run's highest tensor-level peak."""
    page = os.path.join(tmp, "compare.html")
    rc, out, err = analyze("compare", "--no-advice", "--html", page, *runs)
    check("compare --html: exit 0", rc == 0, err)
    p = Balance()
    p.feed(open(page).read())
    check("compare --html: well-formed", not p.errors and not p.stack, repr(p.errors[:5]))
    dom = chromium("--dump-dom", "file://" + page)
    d = Balance()
    d.feed(dom.stdout.decode("utf-8", "replace"))
    rows = [a for t, a in d.tags if t == "tr" and a.get("class") == "run"]
    check("compare --html: one table row per run", len(rows) == len(runs), "%d rows" % len(rows))
    svgs = [a for t, a in d.tags if t == "svg" and a.get("class") == "timeline"]
    want = [max_peaks(r)[0] for r in runs]
    got = [int(a["data-peak-bytes"]) for a in svgs]
    check("compare --html: each run's hot-rank timeline peak = its analysis", got == want,
          "%r vs %r" % (got, want))
    screenshot_not_blank("compare", page, tmp)


def main():
    if not shutil.which("chromium"):
        print("1..0 # SKIP chromium is not installed (tools/bootstrap.sh installs it): "
              "the HTML report was not rendered")
        return 0
    tmp = tempfile.mkdtemp(prefix="html.", dir=os.environ.get("TMPDIR"))
    try:
        run = megasim(tmp, "a", MAIN)
        page_tests(run, tmp, [], "grouped", 2)
        page_tests(run, tmp, ["--ranks", "all"], "all ranks", 4)
        compare_page_tests([run, megasim(tmp, "b", MAIN + FULL2)], tmp)
    except Exception as e:  # a crash is a failure, not a silent pass
        check("no exception", False, repr(e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % len(results))
    for i, (ok, name, detail) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
        if detail:
            for l in str(detail).splitlines()[:20]:
                print("# " + l)
    return 0 if all(r[0] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
