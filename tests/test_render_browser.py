"""The HTML report in headless Chromium: it renders, logs no console message, and fetches nothing.

Skipped when Chromium is not installed (`make sysdeps` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fixtures.incident_fixture import hostile_incident, seed_incident, seed_reader

from forensics.render import ReportOptions, render_report

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make sysdeps)")
OPTS = ReportOptions(tz="Europe/Berlin", source_reader=seed_reader)


# ----------------------------------------------------------------------------- PNG, with the stdlib only

def png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, unfiltered rows) of an 8-bit RGB/RGBA/grey PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    height = depth = ctype = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and ctype in (0, 2, 4, 6), (depth, ctype)
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def colour_stats(png: bytes) -> tuple[int, float]:
    """(number of distinct colours, share of pixels that differ from the most common colour)."""
    width, height, bpp, rows = png_pixels(png)
    counts: dict[bytes, int] = {}
    for row in rows:
        for x in range(0, width * bpp, bpp):
            px = row[x:x + bpp]
            counts[px] = counts.get(px, 0) + 1
    top = max(counts.values())
    return len(counts), 1 - top / (width * height)


# ----------------------------------------------------------------------------- the browser

class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "poster", "data", "action") and value:
                self.refs.append((tag, name, value))


def chromium(html: Path, png: Path, size: str, tmp: Path) -> tuple[str, list[dict]]:
    netlog = tmp / f"net-{png.stem}.json"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp / 'profile'}",
           "--enable-logging=stderr", "--v=0", f"--log-net-log={netlog}", "--host-resolver-rules=MAP * ~NOTFOUND",
           "--hide-scrollbars", f"--screenshot={png}", f"--window-size={size}", html.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    requests = []
    if netlog.exists():
        text = netlog.read_text(errors="replace").rstrip().rstrip(",")
        if not text.endswith("}"):
            text += "]}"
        try:
            log = json.loads(text)
        except ValueError:
            log = json.loads(text + "]}")
        types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
        for e in log.get("events", []):
            p = e.get("params") or {}
            if types.get(e.get("type")) == "URL_REQUEST_START_JOB" and "url" in p:
                requests.append(p)
    return proc.stderr, requests


@pytest.mark.parametrize("which", ["seed", "hostile"])
@pytest.mark.parametrize("size", ["1280,1600", "390,1200"])
def test_html_report_in_chromium(which: str, size: str, tmp_path: Path) -> None:
    inc = seed_incident() if which == "seed" else hostile_incident()
    text = render_report([inc], "html", OPTS)
    refs = _Refs()
    refs.feed(text)
    assert refs.refs == [], f"the page refers to resources: {refs.refs[:5]}"
    html = tmp_path / "report.html"
    html.write_text(text, encoding="utf-8")
    png = tmp_path / f"shot-{which}.png"
    stderr, requests = chromium(html, png, size, tmp_path)
    console = [line for line in stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    # requests the page made (the browser's own background requests carry the initiator "not an origin")
    page = [r["url"] for r in requests if r.get("initiator") != "not an origin" and not r["url"].startswith("file:")]
    assert page == [], page
    colours, ink = colour_stats(png.read_bytes())
    assert colours > 16 and ink > 0.02, (colours, ink)
