"""`gpuscale trace`'s views: aggregates per pool and phase, the slowest pods with their dominant phase, text
waterfalls, and the HTML page — checked in a real headless browser (chromium) when one is installed."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from rich.console import Console

from gpuscale.lifecycle.phases import Milestone, Phase
from gpuscale.lifecycle.trace import PodTrace, build_trace
from gpuscale.report.html import PHASE_COLOURS
from gpuscale.report.trace import aggregate, print_traces, render_trace_html, slowest, waterfall_lines
from tests.report.test_html import external_references

CHROMIUM = os.environ.get("GPUSCALE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def trace(name: str, pool: str, *, ready: float, gpu: float, pull: float, new_node: bool = True) -> PodTrace:
    times = {Milestone.CREATED: 0.0, Milestone.UNSCHEDULABLE: 0.5, Milestone.DECIDED: 1.0,
             Milestone.REQUESTED: 1.0, Milestone.REGISTERED: 2.0, Milestone.READY: 2.0 + ready,
             Milestone.GPU_REGISTERED: 2.0 + ready + gpu}
    if not new_node:
        times = {Milestone.CREATED: 0.0}
    bound = max(times.values()) + 0.5
    times |= {Milestone.BOUND: bound, Milestone.PULLED: bound + pull, Milestone.STARTED: bound + pull + 1.0}
    return build_trace(pod=f"ns/{name}", source="twin", times=times, new_node=new_node, pool=pool, node=f"{pool}-1")


TRACES = [trace("a", "a100", ready=5, gpu=8, pull=3), trace("b", "a100", ready=6, gpu=60, pull=3),
          trace("c", "a100", ready=5, gpu=9, pull=30), trace("d", "t4", ready=5, gpu=2, pull=1, new_node=False)]


def test_aggregates_per_pool_and_phase_use_nearest_rank() -> None:
    rows = {(r.pool, r.phase): r for r in aggregate(TRACES)}
    gpu = rows[("a100", Phase.GPU_REGISTRATION.value)]
    assert (gpu.count, gpu.p50_s, gpu.p95_s) == (3, 9.0, 60.0)
    assert rows[("a100", "pending_to_running")].p50_s == TRACES[2].pending_to_running_s
    assert ("t4", Phase.GPU_REGISTRATION.value) not in rows  # all zero: the short path
    assert rows[("t4", Phase.IMAGE_PULL.value)].p50_s == 1.0


def test_slowest_pods_with_the_phase_that_dominated() -> None:
    worst = slowest(TRACES, 2)
    assert [t.pod for t in worst] == ["ns/b", "ns/c"]
    assert worst[0].dominant_phase() == (Phase.GPU_REGISTRATION.value, 60.0)
    assert worst[1].dominant_phase() == (Phase.IMAGE_PULL.value, 30.0)


def test_text_waterfall_offsets_add_up() -> None:
    lines = waterfall_lines(TRACES[0])
    assert [line.split()[0] for line in lines] == ["first_scheduling_attempt", "decision", "node_registration",
                                                   "node_ready", "gpu_registration", "scheduling", "image_pull",
                                                   "container_start"]
    assert "+   18.50s" in lines[-1] and "1.00s" in lines[-1]
    console = Console(record=True, width=140)
    print_traces(TRACES, console, top=2)
    text = console.export_text()
    assert "ns/b" in text and "gpu_registration" in text and "4 pods traced to Ready (3 waited" in text


def test_html_is_self_contained_with_both_charts() -> None:
    page = render_trace_html(TRACES, "trace")
    assert page.count("<svg") == 2 and "Per pool" in page and "Slowest 4 pods" in page
    assert external_references(page) == [] and "<script" not in page
    assert render_trace_html(TRACES, "trace") == page


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what chromium writes) into rows of pixel bytes; undoes the five row filters."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return width, channels, rows


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (set GPUSCALE_CHROMIUM to a headless-capable "
                                             "browser to run this check); docs/tracing.md describes the manual check")
def test_html_waterfall_renders_in_a_real_headless_browser(tmp_path: Path) -> None:
    page, shot = tmp_path / "trace.html", tmp_path / "trace.png"
    page.write_text(render_trace_html(TRACES, "trace"), encoding="utf-8")
    assert CHROMIUM is not None
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,1400", f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    width, channels, rows = _png_pixels(shot.read_bytes())
    pixels = {row[i:i + 3] for row in rows[::4] for i in range(0, width * channels, channels * 4)}
    assert len(pixels) > 20, "the screenshot is blank"
    drawn = {bytes.fromhex(PHASE_COLOURS[list(Phase).index(p)][1:]) for p in
             (Phase.GPU_REGISTRATION, Phase.IMAGE_PULL, Phase.NODE_READY)}
    assert drawn <= pixels, "the waterfall's phase colours are not on screen"
