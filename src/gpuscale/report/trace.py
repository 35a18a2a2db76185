"""`gpuscale trace`: phase traces read back as people use them — where do pods wait, per pool, and which pods waited
longest and on what.

Three views of the same complete traces (from the twin or the controller, one schema: `lifecycle/trace.py`):
aggregates per pool and phase (p50/p95, nearest rank), the slowest pods with the phase that dominated, and per-pod
waterfalls — as text, or as a self-contained HTML page drawn with the helpers of `report/html.py`. Pure: values in,
text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from gpuscale.lifecycle.phases import OPTIONAL_PHASES, Phase, percentile
from gpuscale.lifecycle.trace import PodTrace
from gpuscale.report import html
from gpuscale.report.twin import format_duration

BAR_WIDTH = 48
MAX_HTML_PODS = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseStats:
    pool: str
    phase: str
    """A `Phase` value, or `pending_to_running` for the whole wait."""
    count: int
    p50_s: float
    p95_s: float


def _complete(traces: Sequence[PodTrace]) -> list[PodTrace]:
    return [t for t in traces if t.complete and t.pending_to_running_s is not None]


def aggregate(traces: Sequence[PodTrace]) -> list[PhaseStats]:
    """Per pool (a pod's pool, `-` if none), the whole wait and then every phase that was non-zero for any pod."""
    by_pool: dict[str, list[PodTrace]] = {}
    for trace in _complete(traces):
        by_pool.setdefault(trace.pool or "-", []).append(trace)
    rows = []
    for pool, pool_traces in sorted(by_pool.items()):
        waits = [t.pending_to_running_s or 0.0 for t in pool_traces]
        rows.append(PhaseStats(pool=pool, phase="pending_to_running", count=len(waits),
                               p50_s=percentile(waits, 50), p95_s=percentile(waits, 95)))
        for phase in Phase:
            values = [t.phases.get(phase.value, 0.0) for t in pool_traces]
            if any(v > 0 for v in values):
                rows.append(PhaseStats(pool=pool, phase=phase.value, count=len(values),
                                       p50_s=percentile(values, 50), p95_s=percentile(values, 95)))
    return rows


def slowest(traces: Sequence[PodTrace], count: int) -> list[PodTrace]:
    """The `count` longest waits, longest first (ties by pod key)."""
    return sorted(_complete(traces), key=lambda t: (-(t.pending_to_running_s or 0.0), t.pod))[:count]


def waterfall_lines(trace: PodTrace) -> list[str]:
    """One line per non-zero phase: its name, start offset, duration and a bar on the pod's own time scale."""
    total = trace.pending_to_running_s or 0.0
    lines, start = [], 0.0
    for phase in Phase:
        seconds = trace.phases.get(phase.value, 0.0)
        if seconds <= 0:
            continue
        lead = round(start / total * BAR_WIDTH) if total else 0
        width = max(1, round(seconds / total * BAR_WIDTH)) if total else 1
        lines.append(f"  {phase.value:<26} +{start:8.2f}s {seconds:8.2f}s  {' ' * lead}{'█' * width}")
        start += seconds
    return lines


def print_traces(traces: Sequence[PodTrace], console: Console, *, top: int = 5) -> None:
    done = _complete(traces)
    console.print(f"[bold]{len(done)}[/] pods traced to Ready ({sum(t.new_node for t in done)} waited for a new "
                  f"node); {len(traces) - len(done)} still waiting.")
    if not done:
        return
    table = Table(title="Per pool and phase (seconds, nearest-rank percentiles)", title_justify="left")
    for name in ("pool", "phase", "pods", "p50", "p95"):
        table.add_column(name, justify="left" if name in ("pool", "phase") else "right")
    for row in aggregate(done):
        table.add_row(row.pool, row.phase, str(row.count), format_duration(row.p50_s), format_duration(row.p95_s))
    console.print(table)
    worst = Table(title=f"Slowest {min(top, len(done))} pods", title_justify="left")
    for name in ("pod", "pool", "path", "pending→running", "dominant phase", "share"):
        worst.add_column(name, justify="right" if name in ("pending→running", "share") else "left")
    for trace in slowest(done, top):
        phase, seconds = trace.dominant_phase()
        total = trace.pending_to_running_s or 0.0
        worst.add_row(trace.pod, trace.pool or "-", "new node" if trace.new_node else "existing node",
                      format_duration(total), phase, f"{seconds / total:.0%}" if total else "-")
    console.print(worst)
    for trace in slowest(done, top):
        reason = f"; blocked: {trace.reason}" if trace.reason else ""
        console.print(f"\n[bold]{trace.pod}[/] on {trace.node or '-'} ({trace.pool or '-'}), "
                      f"{format_duration(trace.pending_to_running_s)}{reason}", highlight=False)
        for line in waterfall_lines(trace):
            console.print(line, highlight=False, markup=False)


def render_trace_html(traces: Sequence[PodTrace], title: str) -> str:
    """Per-pool p50 phases and the slowest pods' waterfalls, stacked bars in lifecycle order, plus the tables."""
    done = _complete(traces)
    ordered = [p for p in Phase if p not in OPTIONAL_PHASES] + list(OPTIONAL_PHASES)  # colours kept as before them
    colours = {p.value: html.PHASE_COLOURS[i % len(html.PHASE_COLOURS)] for i, p in enumerate(ordered)}
    used = [p.value for p in Phase if any(t.phases.get(p.value, 0.0) > 0 for t in done)]
    legend = html._legend([(html._human(n), colours[n]) for n in used])
    pools: dict[str, dict[str, float]] = {}
    for row in aggregate(done):
        if row.phase != "pending_to_running":
            pools.setdefault(row.pool, {})[row.phase] = row.p50_s
    pool_rows = [(pool, {n: phases.get(n, 0.0) for n in used}) for pool, phases in pools.items()]
    pod_rows = [(t.pod.split("/")[-1], {n: t.phases.get(n, 0.0) for n in used})
                for t in slowest(done, MAX_HTML_PODS)]
    body = [f"<h1>{html._esc(title)}</h1>",
            f'<p class="sub">{len(done)} pods traced to Ready, {sum(t.new_node for t in done)} of them waited for a '
            f"new node; {len(traces) - len(done)} still waiting.</p>",
            "<h2>Where pods wait</h2>",
            html._figure("Per pool", "p50 seconds of each phase, stacked in lifecycle order",
                         html._phase_chart(pool_rows, colours, "p50 seconds per phase"), legend, wide=True),
            html._figure(f"Slowest {len(pod_rows)} pods", "seconds per phase, from creation to Ready",
                         html._phase_chart(pod_rows, colours, "time from creation to Ready"), legend, wide=True),
            "<h2>Per pool and phase</h2>", _stats_table(aggregate(done)),
            "<h2>Slowest pods</h2>", _slowest_table(slowest(done, MAX_HTML_PODS))]
    return html.page(title, body)


def _stats_table(rows: Sequence[PhaseStats]) -> str:
    body = "".join(f'<tr><td class="left">{html._esc(r.pool)}</td><td class="left">{html._esc(html._human(r.phase))}'
                   f"</td><td>{r.count}</td><td>{html._esc(format_duration(r.p50_s))}</td>"
                   f"<td>{html._esc(format_duration(r.p95_s))}</td></tr>" for r in rows)
    return ('<table><tr><th class="left">pool</th><th class="left">phase</th><th>pods</th><th>p50</th><th>p95</th>'
            f"</tr>{body}</table>")


def _slowest_table(traces: Sequence[PodTrace]) -> str:
    rows = []
    for t in traces:
        phase, seconds = t.dominant_phase()
        rows.append(f'<tr><td class="left">{html._esc(t.pod)}</td><td class="left">{html._esc(t.pool or "-")}</td>'
                    f"<td>{html._esc(format_duration(t.pending_to_running_s))}</td>"
                    f'<td class="left">{html._esc(html._human(phase))} ({html._esc(format_duration(seconds))})</td>'
                    f'<td class="msg">{html._esc(t.reason or "")}</td></tr>')
    return ('<table><tr><th class="left">pod</th><th class="left">pool</th><th>pending→running</th>'
            f'<th class="left">dominant phase</th><th class="left">blocked by</th></tr>{"".join(rows)}</table>')
