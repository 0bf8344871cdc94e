#!/usr/bin/env python3
"""Draws Hearth's icons (no third-party code or assets): the app icon set and
the tray icons, written as PNG (and ICNS for macOS) into src-tauri/icons/.

The mark is a flame over a hearth stone. Shapes are signed distance
functions, anti-aliased by 4x4 supersampling; the files are plain zlib PNGs
from the standard library, so this runs anywhere with Python 3.

    python3 scripts/make_icons.py            # rewrites src-tauri/icons/*
"""
import math
import os
import struct
import sys
import zlib

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src-tauri", "icons")


def png(width, height, rgba_rows):
    """Encodes rows of (r, g, b, a) tuples as an RGBA PNG."""
    raw = bytearray()
    for row in rgba_rows:
        raw.append(0)
        for r, g, b, a in row:
            raw += bytes((r, g, b, a))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b"")


def rounded_box(x, y, cx, cy, hw, hh, r):
    qx, qy = abs(x - cx) - hw + r, abs(y - cy) - hh + r
    return math.hypot(max(qx, 0), max(qy, 0)) + min(max(qx, qy), 0) - r


def flame(x, y):
    """Distance to a flame: a circle at the bottom narrowing to a point on top."""
    cx, cy, r = 0.5, 0.60, 0.19
    d_circle = math.hypot(x - cx, y - cy) - r
    # The tip: the region between two arcs meeting at (0.5, 0.16).
    tip_y = 0.16
    if y < cy:
        t = min((cy - y) / (cy - tip_y), 1.0)  # 0 at the circle's centre, 1 at the tip
        half = r * (1 - t) ** 1.25
        # a slight lean gives it life
        lean = 0.04 * math.sin(t * math.pi)
        d_tip = abs(x - cx - lean) - half
        d_tip = max(d_tip, tip_y - y)
        return min(d_circle, d_tip)
    return d_circle


def inner_flame(x, y):
    # a smaller flame inside: the hot core
    sx, sy = 0.5 + (x - 0.5) / 0.5, 0.78 + (y - 0.78) / 0.5
    return flame(sx, sy) * 0.5


def stone(x, y):
    return rounded_box(x, y, 0.5, 0.86, 0.30, 0.045, 0.03)


def coverage(fn, px, py, size, ss=4):
    hit = 0
    for i in range(ss):
        for j in range(ss):
            x = (px + (i + 0.5) / ss) / size
            y = (py + (j + 0.5) / ss) / size
            hit += fn(x, y) <= 0
    return hit / (ss * ss)


def app_icon(size):
    """Full-colour app icon: warm rounded square, cream flame, amber core."""
    rows = []
    for py in range(size):
        row = []
        for px in range(size):
            bg = coverage(lambda x, y: rounded_box(x, y, 0.5, 0.5, 0.46, 0.46, 0.2), px, py, size)
            fl = coverage(flame, px, py, size)
            core = coverage(inner_flame, px, py, size)
            st = coverage(stone, px, py, size)
            t = py / size
            base = (int(200 - 60 * t), int(70 - 30 * t), int(40 - 10 * t))  # ember gradient
            r, g, b = base
            for cov, col in ((fl, (255, 236, 200)), (core, (255, 170, 50)), (st, (255, 236, 200))):
                r = round(r + (col[0] - r) * cov)
                g = round(g + (col[1] - g) * cov)
                b = round(b + (col[2] - b) * cov)
            row.append((r, g, b, round(255 * bg)))
        rows.append(row)
    return png(size, size, rows)


def tray_icon(size, colour):
    """Single-colour glyph on transparency (macOS uses the black one as a template)."""
    rows = []
    for py in range(size):
        row = []
        for px in range(size):
            a = max(coverage(flame, px, py, size), coverage(stone, px, py, size))
            row.append((*colour, round(255 * a)))
        rows.append(row)
    return png(size, size, rows)


def icns(pngs):
    """Apple icon file: PNG payloads under their size's chunk type."""
    kinds = {32: b"ic11", 64: b"ic12", 128: b"ic07", 256: b"ic08", 512: b"ic09", 1024: b"ic10"}
    body = b"".join(kinds[s] + struct.pack(">I", 8 + len(data)) + data for s, data in sorted(pngs.items()))
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main():
    os.makedirs(OUT, exist_ok=True)
    sizes = {s: app_icon(s) for s in (32, 64, 128, 256, 512)}

    def write(name, data):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)

    write("32x32.png", sizes[32])
    write("128x128.png", sizes[128])
    write("128x128@2x.png", sizes[256])
    write("icon.png", sizes[512])
    write("icon.icns", icns(sizes))
    # Tray: 22 pt menu-bar glyphs at 2x (44 px). Black = macOS template and
    # light panels; white = dark panels (Linux picks by the theme).
    write("tray-template.png", tray_icon(44, (0, 0, 0)))
    write("tray-light.png", tray_icon(44, (0, 0, 0)))
    write("tray-dark.png", tray_icon(44, (255, 255, 255)))
    print(f"wrote icons to {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
