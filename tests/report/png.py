"""A small PNG reader for the browser test: 8-bit RGB or RGBA, non-interlaced — what Chromium's screenshots are.

Pillow is not a dependency and one test does not justify it. Rows filtered None, Sub and Up are undone with NumPy;
Average and Paeth depend on the pixel to the left, so those rows are undone byte by byte (a screenshot at scale 0.5
has a few hundred such rows: well under a second).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {2: 3, 6: 4}
"""PNG colour type → channels: 2 is RGB, 6 is RGBA."""


def read_png(path: Path) -> npt.NDArray[np.uint8]:
    """The image as a (height, width, channels) array; `ValueError` for a PNG this reader does not handle."""
    data = path.read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    at, idat, header = len(SIGNATURE), bytearray(), None
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    if header is None:
        raise ValueError(f"{path}: no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"{path}: only 8-bit non-interlaced RGB/RGBA is supported (depth {depth}, type {colour})")
    bpp = CHANNELS[colour]
    raw = np.frombuffer(zlib.decompress(bytes(idat)), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    previous = np.zeros(width * bpp, dtype=np.uint8)
    for y in range(height):
        out[y] = _unfilter(int(raw[y, 0]), raw[y, 1:], previous, bpp)
        previous = out[y]
    return out.reshape(height, width, bpp)


def _unfilter(kind: int, line: npt.NDArray[np.uint8], up: npt.NDArray[np.uint8], bpp: int) -> npt.NDArray[np.uint8]:
    if kind == 0:
        return line
    if kind == 1:  # Sub: a running sum per channel, modulo 256
        sums = np.cumsum(line.reshape(-1, bpp).astype(np.int64), axis=0) % 256
        return sums.astype(np.uint8).reshape(-1)
    if kind == 2:  # Up
        return (line.astype(np.int64) + up) .astype(np.uint8)
    if kind not in (3, 4):
        raise ValueError(f"unknown PNG filter type {kind}")
    cur = bytearray(line.tobytes())
    above = up.tobytes()
    for i in range(len(cur)):
        a = cur[i - bpp] if i >= bpp else 0
        b = above[i]
        if kind == 3:  # Average
            cur[i] = (cur[i] + (a + b) // 2) & 0xFF
            continue
        c = above[i - bpp] if i >= bpp else 0  # Paeth
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return np.frombuffer(bytes(cur), dtype=np.uint8)
