"""The browser check of docs/report.md: write demo HTML reports from hand-made results (24 h, 400 pods).

    .venv/bin/python -m tests.report.demo /tmp/report.html             # three policies compared, 24 h
    .venv/bin/python -m tests.report.demo /tmp/single.html --single    # one policy
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscale.report.html import render_html
from gpuscale.sim.result import SimResult
from tests.report.builders import make_day_result


def demo_results(single: bool = False, days: float = 1.0, sample_s: float = 60.0) -> list[SimResult]:
    results = [make_day_result("gpuscale", seed=1, warm=0.35, days=days, sample_s=sample_s)]
    if not single:
        results += [make_day_result("cluster-autoscaler", seed=1, warm=0.1, boot_scale=2.5, days=days,
                                    sample_s=sample_s),
                    make_day_result("gpuscale-warm-pool", seed=1, warm=0.7, days=days, sample_s=sample_s)]
    return results


def main(argv: list[str]) -> None:
    path = Path(argv[0] if argv else "/tmp/report.html")
    html = render_html(demo_results(single="--single" in argv), "gpuscale twin — diurnal ML workload")
    path.write_text(html, encoding="utf-8")
    print(f"wrote {path} ({len(html.encode()):,} bytes)")


if __name__ == "__main__":
    main(sys.argv[1:])
