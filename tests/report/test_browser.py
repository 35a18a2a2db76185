"""The HTML report in a real browser: `gpuscale compare` on the bundled default scenario writes the page, headless
Chromium renders it to a PNG, and the picture must show the report — not a blank or broken page.

The structural tests (test_html.py) cannot see what a browser paints; this one checks that the page has content
(enough non-background pixels and colours), that each policy's colour is painted (legends, lines, areas — the SVG
rendered), and that nothing spills past the right margin. docs/report.md says how to look at the page by eye.
Skipped, with the reason, when no Chromium is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.report.html import POLICY_COLOURS
from tests.report.png import read_png

WIDTH, HEIGHT = 1280, 4000
BACKGROUND = (0xF6, 0xF8, 0xFA)
"""`--bg` of the page's CSS."""


def chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


@pytest.fixture(scope="module")
def screenshot(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH: the browser check needs one "
                    "(apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("browser")
    default = yaml.safe_load(resources.files("gpuscale.data").joinpath("scenarios", "default.yaml").read_text())
    default["duration"] = "6h"  # the default day's first quarter: every plot has data, and the test stays short
    scenario = tmp / "default-6h.yaml"
    scenario.write_text(yaml.safe_dump(default), encoding="utf-8")
    page = tmp / "report.html"
    result = CliRunner().invoke(app, ["compare", str(scenario), "--policy", "gpuscale", "--policy", "ca-defaults",
                                      "--quiet", "--html", str(page)])
    assert result.exit_code == 0, result.output
    png = tmp / "report.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp / 'profile'}", f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}",
                    page.as_uri()], check=True, capture_output=True, timeout=180)
    return read_png(png)[:, :, :3]


def test_the_page_is_painted_with_content(screenshot: np.ndarray) -> None:
    assert screenshot.shape == (HEIGHT, WIDTH, 3)
    pixels = screenshot.reshape(-1, 3)
    not_background = np.any(pixels != BACKGROUND, axis=1).mean()
    assert not_background > 0.15, f"only {not_background:.1%} of the page differs from the background"
    colours = len(np.unique(pixels.astype(np.int64) @ np.array([65536, 256, 1])))
    assert colours > 500, f"only {colours} distinct colours: text and plots did not render"


def test_every_policy_colour_is_painted(screenshot: np.ndarray) -> None:
    pixels = screenshot.reshape(-1, 3)
    for policy, colour in zip(("gpuscale", "ca-defaults"), POLICY_COLOURS, strict=False):
        count = int(np.all(pixels == rgb(colour), axis=1).sum())
        assert count >= 100, f"{policy}'s colour {colour} painted on {count} pixels only: its plots are missing"


def test_nothing_spills_past_the_right_margin(screenshot: np.ndarray) -> None:
    margin = screenshot[:, WIDTH - 24:, :]
    assert np.all(margin == BACKGROUND), "something is drawn in the right margin: a table or plot overflows"
