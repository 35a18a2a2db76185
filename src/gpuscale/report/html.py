"""Rendering twin runs as one self-contained HTML page: inline CSS and inline SVG plots, no script, no network.

Pure: the same results and title give the same bytes. Long series are cut to at most `MAX_POINTS` per line, keeping
each bucket's lowest and highest sample so spikes survive, which keeps a 7-day comparison well under 1 MB. Numbers
come from `report.twin`, so the page, the terminal summary and the JSON agree. Coordinates are in SVG user units
(`WIDTH` × `HEIGHT` per chart), drawn at roughly one unit per CSS pixel.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from gpuscale.lifecycle.phases import percentile
from gpuscale.report import twin
from gpuscale.sim.result import SimResult

MAX_POINTS = 600
MAX_NOTABLE_ROWS = 200
WIDTH, HEIGHT = 560, 250
LEFT, RIGHT, TOP, BOTTOM = 58, 18, 14, 42
POLICY_COLOURS = ("#4269d0", "#e8793b", "#3ca951", "#a463f2", "#d4386c", "#1f9eaa", "#9c6b4e", "#6e7079")
POOL_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac")
PHASE_COLOURS = ("#c9ced3", "#9aa0a6", "#4269d0", "#97bbf5", "#efb118", "#ff725c", "#ff8ab7", "#a463f2", "#6cc5b0",
                 "#3ca951", "#9c6b4e", "#38383f")
LOG_TICKS = ((0.1, "0.1 s"), (1, "1 s"), (10, "10 s"), (60, "1 min"), (600, "10 min"), (3600, "1 h"),
             (86400, "1 d"), (864000, "10 d"))
Tick = tuple[float, str]

CSS = """
:root{--fg:#1f2328;--muted:#656d76;--line:#d8dee4;--bg:#f6f8fa;--card:#fff;--good:#1a7f37}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:1200px;margin:0 auto;padding:28px 24px 48px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:17px;margin:32px 0 12px}h3{font-size:14px;margin:0}
.sub{color:var(--muted);margin:0}
.kpis{display:grid;gap:12px;margin-top:18px}
.kpi-row{display:grid;grid-template-columns:170px;grid-auto-flow:column;grid-auto-columns:minmax(0,1fr);gap:8px;align-items:stretch}
.kpi-row .policy{display:flex;align-items:center;gap:8px;font-weight:600}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 12px}
.kpi .v{font-size:19px;font-weight:600;font-variant-numeric:tabular-nums}
.kpi .l{font-size:12px;color:var(--muted)}
.dot{display:inline-block;width:11px;height:11px;border-radius:3px;flex:none}
.grid{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:16px}
.wide{grid-column:1/-1}
figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 14px 8px}
figcaption .sub{font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:8px 0 2px;font-size:12px;color:var(--muted)}
.legend span{display:inline-flex;align-items:center;gap:5px}
.legend .dash{width:18px;height:0;border-top:2px dashed var(--muted)}
.legend .solid{width:18px;height:0;border-top:2px solid var(--muted)}
svg{display:block;width:100%;height:auto;font:11px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
svg .tick{fill:#57606a}svg .title{fill:#57606a;font-size:11.5px}
table{border-collapse:collapse;background:var(--card);border:1px solid var(--line);border-radius:8px;width:100%;
font-variant-numeric:tabular-nums}
th,td{padding:6px 12px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th{font-weight:600;background:#f0f3f6;font-size:13px}
th:first-child,td:first-child,th.left{text-align:left}
td.msg{text-align:left;white-space:normal;width:100%}td.left{text-align:left}
td.best{color:var(--good);font-weight:700}
tr:last-child td{border-bottom:none}
.grid table{font-size:13px}.grid th,.grid td{padding:5px 8px}
table.narrow{width:auto;min-width:480px}
.note{color:var(--muted);font-size:12px;margin:6px 0 0}
"""


def render_html(results: Sequence[SimResult], title: str) -> str:
    """One page for one run, or several policies on the same scenario overlaid (one colour per policy, in the order
    given). Deterministic; references nothing outside the file."""
    colours = [POLICY_COLOURS[i % len(POLICY_COLOURS)] for i in range(len(results))]
    numbers = "Policies compared" if len(results) > 1 else "Key numbers"
    body = [_header(results, title, colours), f"<h2>{numbers}</h2>", _comparison_table(results, colours),
            "<h2>Over time</h2>", _time_plots(results, colours),
            "<h2>Pending → running</h2>", _latency_plots(results, colours),
            "<h2>Details</h2>", _details(results), "<h2>Notable events</h2>", _notable_table(results)]
    if any(r.teams for r in results):
        body[6:6] = ["<h2>Teams: queue wait vs scale-up wait</h2>", _teams(results)]
    return page(title, body)


def page(title: str, body: Sequence[str]) -> str:
    """The self-contained page around sections of HTML: inline CSS, no script, nothing fetched."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">\n<title>{_esc(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n" + "\n".join(body) + "\n</main>\n</body>\n</html>\n")


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _human(name: str) -> str:
    """`capacity_acquisition` → `capacity acquisition`."""
    return name.replace("_", " ")


def _dot(colour: str) -> str:
    return f'<span class="dot" style="background:{colour}"></span>'


# ---------------------------------------------------------------------------------------------------- page sections


def _header(results: Sequence[SimResult], title: str, colours: Sequence[str]) -> str:
    scenarios = ", ".join(sorted({r.scenario for r in results}))
    seeds = ", ".join(str(s) for s in sorted({r.seed for r in results}))
    duration = max((r.duration_s for r in results), default=0.0)
    pods = max((len(r.pods) for r in results), default=0)
    rows = []
    for r, colour in zip(results, colours, strict=True):
        ran, bound = twin.waits(r.pods), twin.capacity_waits(r.pods)
        idle = r.gpu_hours_idle / r.gpu_hours_provisioned if r.gpu_hours_provisioned else 0.0
        kpis = (("Cost", twin.format_usd(r.cost_usd)),
                (f"Idle GPU-hours · {idle:.0%}", twin.format_hours(r.gpu_hours_idle)),
                ("Efficiency · hindsight bound",
                 f"{twin.format_share(r.efficiency)} · {twin.format_share(r.hindsight_efficiency)}"),
                ("p95 capacity wait · pending→running",
                 f"{twin.format_duration(percentile(bound, 95) if bound else None)} · "
                 f"{twin.format_duration(percentile(ran, 95) if ran else None)}"),
                ("Scale-ups", twin.format_count(r.scale_ups)), ("Stockouts", twin.format_count(r.stockouts)),
                ("Never ran", twin.format_count(r.never_ran)))
        cells = "".join(f'<div class="kpi"><div class="v">{_esc(v)}</div><div class="l">{_esc(k)}</div></div>'
                        for k, v in kpis)
        rows.append(f'<div class="kpi-row"><div class="policy">{_dot(colour)}{_esc(r.policy)}</div>'
                    f"{cells}</div>")
    changes = "".join(f'<p class="note">Preset {_esc(r.policy)} changed against the scenario: '
                      f'{_esc("; ".join(r.policy_changes))}</p>' for r in results if r.policy_changes)
    return (f"<header><h1>{_esc(title)}</h1><p class=\"sub\">Scenario {_esc(scenarios)} · seed {_esc(seeds)} · "
            f"{_esc(twin.format_duration(duration))} simulated · {pods:,} pods</p>"
            f'<div class="kpis">{"".join(rows)}</div>{changes}</header>')


def _comparison_table(results: Sequence[SimResult], colours: Sequence[str]) -> str:
    head = "".join(f"<th>{_dot(c)} {_esc(r.policy)}</th>" for r, c in zip(results, colours, strict=True))
    rows = []
    for row in twin.comparison_rows(results):
        best = row.best()
        cells = "".join(f'<td{" class=best" if i in best else ""}>{_esc(row.format(v))}</td>'
                        for i, v in enumerate(row.values))
        hint = f' <span class="sub">({row.better} is better)</span>' if len(results) > 1 else ""
        rows.append(f"<tr><td>{_esc(row.label)}{hint}</td>{cells}</tr>")
    if len(results) > 1:
        return (f"<table><tr><th></th>{head}</tr>{''.join(rows)}</table>"
                '<p class="note">Best value per row in green.</p>')
    return f'<table class="narrow"><tr><th></th>{head}</tr>{"".join(rows)}</table>'


def _details(results: Sequence[SimResult]) -> str:
    parts = []
    for r in results:
        work = "".join(f"<tr><td>{_esc(w.workload)}</td><td>{w.pods:,}</td><td>{twin.format_duration(w.p50_s)}</td>"
                       f"<td>{twin.format_duration(w.p95_s)}</td><td>{twin.format_duration(w.capacity_p95_s)}</td>"
                       f"<td>{w.never_ran:,}</td></tr>"
                       for w in twin.workload_rows(r))
        pools = "".join(f"<tr><td>{_esc(p.pool)}</td><td>{p.scale_ups:,}</td><td>{twin.format_usd(p.cost_usd)}</td>"
                        f"<td>{twin.format_hours(p.provisioned_gpu_h)}</td><td>{twin.format_hours(p.allocated_gpu_h)}"
                        f"</td><td>{twin.format_hours(p.useful_gpu_h)}</td><td>{twin.format_hours(p.idle_gpu_h)}</td>"
                        f"<td>{twin.format_hours(p.bound_gpu_h)}</td>"
                        "</tr>" for p in twin.pool_rows(r))
        parts.append(
            f'<figure><figcaption><h3>{_esc(r.policy)}: pods by workload</h3><p class="sub">pending→running of the '
            f'pods that ran; capacity wait: pending→bound</p></figcaption><table><tr><th>workload</th>'
            f"<th>pods</th><th>p50</th><th>p95</th><th>p95 capacity wait</th><th>never ran</th></tr>{work}</table>"
            "</figure>"
            f'<figure class="wide"><figcaption><h3>{_esc(r.policy)}: pools</h3><p class="sub">GPU-hours; '
            f'allocated: from bind; useful: while every pod of the job runs; bound: the hindsight bound, nodes '
            f'exactly when needed</p></figcaption><table>'
            f"<tr><th>pool</th><th>scale-ups</th><th>cost</th><th>provisioned</th><th>allocated</th><th>useful</th>"
            f"<th>idle</th>"
            f"<th>bound</th></tr>{pools}</table></figure>")
    return f'<div class="grid">{"".join(parts)}</div>'


TEAM_WAIT_COLOURS = {"queue wait": "#efb118", "scale-up wait": "#4269d0"}


def _teams(results: Sequence[SimResult]) -> str:
    """Per team of the queueing layer: mean queue wait (quota) then mean scale-up wait (capacity) as one stacked bar
    (the phase waterfall's chart), and the team table of each policy."""
    several = len(results) > 1
    means = [(f"{t.team} · {r.policy}" if several else t.team,
              {"queue wait": t.queue_mean_s or 0.0, "scale-up wait": t.scale_up_mean_s or 0.0})
             for r in results for t in twin.team_rows(r)]
    chart = _figure("Where each team's jobs wait", "mean seconds per admission: in the queue (quota), then from "
                    "admission until every pod runs (capacity)", _phase_chart(means, TEAM_WAIT_COLOURS),
                    _legend(list(TEAM_WAIT_COLOURS.items())))
    tables = []
    for r in results:
        rows = "".join(
            f"<tr><td>{_esc(t.team)}</td><td class=\"left\">{_esc(t.cluster_queues)}</td><td>{t.workloads:,}</td>"
            f"<td>{twin.format_duration(t.queue_p50_s)}</td><td>{twin.format_duration(t.queue_p95_s)}</td>"
            f"<td>{twin.format_duration(t.scale_up_p50_s)}</td><td>{twin.format_duration(t.scale_up_p95_s)}</td>"
            f"<td>{twin.format_hours(t.admitted_gpu_h)}</td><td>{t.preemptions:,}</td><td>{t.requeues:,}</td>"
            f"<td>{t.still_queued:,}</td></tr>" for t in twin.team_rows(r))
        tables.append(
            f'<figure class="wide"><figcaption><h3>{_esc(r.policy)}: teams</h3><p class="sub">waits per admission; '
            f'GPU-hours of quota held</p></figcaption><table><tr><th>team</th><th class="left">queue</th><th>jobs</th>'
            f"<th>queue p50</th><th>queue p95</th><th>scale-up p50</th><th>scale-up p95</th><th>GPU-h</th>"
            f"<th>preempted</th><th>requeued</th><th>queued</th></tr>{rows}</table></figure>")
    return f'<div class="grid">{chart}{"".join(tables)}</div>'


def _notable_table(results: Sequence[SimResult]) -> str:
    several = len(results) > 1
    rows, hidden = [], 0
    for r in results:
        events = twin.notable_events(r)
        hidden += max(0, len(events) - MAX_NOTABLE_ROWS)
        for n in events[:MAX_NOTABLE_ROWS]:
            policy = f'<td class="left">{_esc(r.policy)}</td>' if several else ""
            rows.append(f"<tr><td>{_esc(twin.format_clock(n.t_s))}</td>{policy}<td class=\"left\">{_esc(n.kind)}</td>"
                        f'<td class="msg">{_esc(n.message)}</td></tr>')
    if not rows:
        return '<p class="sub">None.</p>'
    head = ('<tr><th>time</th>' + ('<th class="left">policy</th>' if several else "")
            + '<th class="left">kind</th><th class="left">message</th></tr>')
    more = f'<p class="note">{hidden:,} more not shown; all are in the JSON report.</p>' if hidden else ""
    return f"<table>{head}{''.join(rows)}</table>{more}"


def _figure(title: str, subtitle: str, svg: str, legend: str = "", wide: bool = False) -> str:
    return (f'<figure{" class=wide" if wide else ""}><figcaption><h3>{_esc(title)}</h3><p class="sub">{_esc(subtitle)}'
            f"</p></figcaption>{legend}{svg}</figure>")


def _legend(items: Sequence[tuple[str, str]], styles: Sequence[tuple[str, str]] = ()) -> str:
    """Colour swatches, then line-style keys (`solid`/`dash`, label)."""
    spans = [f"<span>{_dot(colour)}{_esc(label)}</span>" for label, colour in items]
    spans += [f'<span><i class="{style}"></i>{_esc(label)}</span>' for style, label in styles]
    return f'<div class="legend">{"".join(spans)}</div>'


# ------------------------------------------------------------------------------------------------------------ plots


def _time_plots(results: Sequence[SimResult], colours: Sequence[str]) -> str:
    end_s = max((max([r.duration_s, *r.series.t_s[-1:]]) for r in results), default=0.0)
    xticks, xtitle = _time_ticks(end_s)
    policies = [(r.policy, c) for r, c in zip(results, colours, strict=True)]
    pools = sorted({p for r in results for p in r.series.nodes_by_pool})
    pool_colours = {p: POOL_COLOURS[i % len(POOL_COLOURS)] for i, p in enumerate(pools)}
    node_top = max((max(map(sum, zip(*r.series.nodes_by_pool.values(), strict=True)), default=0) for r in results),
                   default=0)
    figures = [_figure(f"Nodes per pool — {r.policy}" if len(results) > 1 else "Nodes per pool",
                       "nodes, stacked by pool", _stacked_chart(r, pools, pool_colours, end_s, node_top, xticks,
                                                                xtitle),
                       _legend([(p, pool_colours[p]) for p in pools if p in r.series.nodes_by_pool]))
               for r in results]
    line_charts: list[tuple[str, str, Callable[[SimResult], Sequence[float]], Callable[[float], str], bool, str]] = [
        ("Pending pods", "pods waiting to run", lambda r: r.series.pending_pods, _short, True, "pods"),
        ("Cumulative cost", "USD since the start", lambda r: r.series.cost_usd, _usd_tick, False, "USD")]
    for name, sub, pick, fmt, counts, ytitle in line_charts:
        lines = [_Line(r.policy, c, r.series.t_s, pick(r)) for r, c in zip(results, colours, strict=True)]
        figures.append(_figure(name, sub, _line_chart(lines, end_s, xticks, xtitle, fmt, counts, ytitle),
                               _legend(policies) if len(results) > 1 else ""))
    gpu_lines = [line for r, c in zip(results, colours, strict=True) for line in (
        _Line(r.policy, c, r.series.t_s, r.series.gpus_provisioned),
        _Line(r.policy, c, r.series.t_s, r.series.gpus_allocated, dash=True))]
    figures.append(_figure("GPUs provisioned vs allocated", "physical GPUs; the gap is idle capacity",
                           _line_chart(gpu_lines, end_s, xticks, xtitle, _short, True, "GPUs"),
                           _legend(policies if len(results) > 1 else [],
                                   (("solid", "provisioned"), ("dash", "allocated")))))
    return f'<div class="grid">{"".join(figures)}</div>'


def _latency_plots(results: Sequence[SimResult], colours: Sequence[str]) -> str:
    policies = [(r.policy, c) for r, c in zip(results, colours, strict=True)]
    cdf = _figure("Latency CDF", "share of pods that ran, by pending→running time (log scale)",
                  _cdf_chart(results, colours), _legend(policies))
    stats = [twin.phase_stats(r.pods) for r in results]
    every = twin.phase_names([p for r in results for p in r.pods])
    phase_colours = {n: PHASE_COLOURS[i % len(PHASE_COLOURS)] for i, n in enumerate(every)}
    names = [n for n in every if any((s.get(n, {}).get("mean") or 0.0) > 0 for s in stats)]
    means = [(r.policy, {n: s.get(n, {}).get("mean") or 0.0 for n in names}) for r, s in zip(results, stats,
                                                                                             strict=True)]
    waterfall = _figure("Where new-node pods wait", "mean seconds per phase, stacked in lifecycle order",
                        _phase_chart(means, phase_colours), _legend([(_human(n), phase_colours[n]) for n in names]))
    return f'<div class="grid">{cdf}{waterfall}</div>'


@dataclass(frozen=True, slots=True)
class _Axis:
    """Maps data values in [lo, hi] to pixels in [start, end]; log axes clamp values below `lo` to it."""

    lo: float
    hi: float
    start: float
    end: float
    log: bool = False

    def at(self, value: float) -> float:
        lo, hi, v = self.lo, self.hi, value
        if self.log:
            lo, hi, v = math.log10(lo), math.log10(hi), math.log10(max(value, self.lo))
        frac = (v - lo) / (hi - lo) if hi > lo else 0.0
        return round(self.start + min(max(frac, 0.0), 1.0) * (self.end - self.start), 1)


@dataclass(frozen=True, slots=True)
class _Line:
    label: str
    colour: str
    t_s: Sequence[float]
    values: Sequence[float]
    dash: bool = False


def _svg(height: int, parts: Sequence[str], label: str) -> str:
    return (f'<svg viewBox="0 0 {WIDTH} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{_esc(label)}">{"".join(parts)}</svg>')


def _frame(x: _Axis, y: _Axis, xticks: Sequence[Tick], yticks: Sequence[Tick], xtitle: str, ytitle: str) -> list[str]:
    """Gridlines, tick labels, the baseline and axis titles."""
    parts = []
    for value, label in yticks:
        py = y.at(value)
        parts.append(f'<line x1="{x.start}" x2="{x.end}" y1="{py}" y2="{py}" stroke="#eaeef2"/>'
                     f'<text class="tick" x="{x.start - 6}" y="{py + 3.5}" text-anchor="end">{_esc(label)}</text>')
    for value, label in xticks:
        px = x.at(value)
        parts.append(f'<line x1="{px}" x2="{px}" y1="{y.end}" y2="{y.start}" stroke="#f3f5f7"/>'
                     f'<line x1="{px}" x2="{px}" y1="{y.start}" y2="{y.start + 4}" stroke="#8c959f"/>'
                     f'<text class="tick" x="{px}" y="{y.start + 16}" text-anchor="middle">{_esc(label)}</text>')
    parts.append(f'<line x1="{x.start}" x2="{x.end}" y1="{y.start}" y2="{y.start}" stroke="#8c959f"/>')
    parts.append(f'<text class="title" x="{(x.start + x.end) / 2}" y="{y.start + 34}" text-anchor="middle">'
                 f"{_esc(xtitle)}</text>")
    if ytitle:
        mid = (y.start + y.end) / 2
        parts.append(f'<text class="title" transform="translate(13 {mid}) rotate(-90)" text-anchor="middle">'
                     f"{_esc(ytitle)}</text>")
    return parts


def _steps(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """A step line through `points`: each value holds until the next sample's time."""
    out = list(points[:1])
    for (_, y0), (x1, y1) in pairwise(points):
        out += [(x1, y0), (x1, y1)] if y1 != y0 else [(x1, y1)]
    return out


def _path(points: Sequence[tuple[float, float]]) -> str:
    return "M" + "L".join(f"{px:g},{py:g}" for px, py in points)


def _line_chart(lines: Sequence[_Line], end_s: float, xticks: Sequence[Tick], xtitle: str,
                fmt: Callable[[float], str], counts: bool, ytitle: str) -> str:
    """Lines over simulated time from 0; `counts` (pods, GPUs) get integer ticks and are drawn as steps, since a count
    holds its value until the next sample."""
    top = max((max(line.values, default=0.0) for line in lines), default=0.0)
    yticks = _nice_ticks(top, counts)
    x = _Axis(0.0, end_s, LEFT, WIDTH - RIGHT)
    y = _Axis(0.0, yticks[-1], HEIGHT - BOTTOM, TOP)
    parts = _frame(x, y, xticks, [(v, fmt(v)) for v in yticks], xtitle, ytitle)
    for line in lines:
        keep = downsample(line.values)
        points = [(x.at(line.t_s[i]), y.at(line.values[i])) for i in keep]
        points = _steps(points) if counts else points
        dash = ' stroke-dasharray="5 3"' if line.dash else ""
        parts.append(f'<path d="{_path(points)}" fill="none" stroke="{line.colour}" stroke-width="1.6"'
                     f' stroke-linejoin="round"{dash}/>')
    return _svg(HEIGHT, parts, xtitle)


def _stacked_chart(result: SimResult, pools: Sequence[str], colours: dict[str, str], end_s: float, top: float,
                   xticks: Sequence[Tick], xtitle: str) -> str:
    series = result.series
    present = [p for p in pools if p in series.nodes_by_pool]
    totals = [float(sum(c)) for c in zip(*(series.nodes_by_pool[p] for p in present), strict=True)]
    yticks = _nice_ticks(top, integer=True)
    x = _Axis(0.0, end_s, LEFT, WIDTH - RIGHT)
    y = _Axis(0.0, yticks[-1], HEIGHT - BOTTOM, TOP)
    parts = _frame(x, y, xticks, [(v, _short(v)) for v in yticks], xtitle, "nodes")
    keep = downsample(totals)
    below = [0.0] * len(keep)
    for pool in present:
        above = [b + series.nodes_by_pool[pool][i] for b, i in zip(below, keep, strict=True)]
        upper = _steps([(x.at(series.t_s[i]), y.at(a)) for i, a in zip(keep, above, strict=True)])
        lower = _steps([(x.at(series.t_s[i]), y.at(b)) for i, b in zip(keep, below, strict=True)])[::-1]
        parts.append(f'<path d="{_path(upper + lower)}Z" fill="{colours[pool]}" fill-opacity="0.78" '
                     f'stroke="{colours[pool]}" stroke-width="0.8"/>')
        below = above
    return _svg(HEIGHT, parts, f"nodes per pool, {result.policy}")


def _cdf_chart(results: Sequence[SimResult], colours: Sequence[str]) -> str:
    waits = [sorted(twin.waits(r.pods)) for r in results]
    everything = [w for ws in waits for w in ws]
    positive = [w for w in everything if w > 0]
    lo = max((v for v, _ in LOG_TICKS if v <= min(positive, default=1.0)), default=LOG_TICKS[0][0])
    hi = min((v for v, _ in LOG_TICKS if v >= max(everything, default=60.0)), default=LOG_TICKS[-1][0])
    hi = max(hi, lo * 10)
    x = _Axis(lo, hi, LEFT, WIDTH - RIGHT, log=True)
    y = _Axis(0.0, 1.0, HEIGHT - BOTTOM, TOP)
    yticks = [(q / 100, f"{q}%") for q in (0, 25, 50, 75, 100)]
    parts = _frame(x, y, [t for t in LOG_TICKS if lo <= t[0] <= hi], yticks, "pending→running (log scale)",
                   "share of pods")
    p95 = y.at(0.95)
    parts.append(f'<line x1="{x.start}" x2="{x.end}" y1="{p95}" y2="{p95}" stroke="#8c959f" stroke-dasharray="2 3"/>'
                 f'<text class="tick" x="{x.start + 4}" y="{p95 - 4}">95%</text>')
    for ws, colour in zip(waits, colours, strict=True):
        if not ws:
            continue
        n = len(ws)
        ranks = range(n) if n <= MAX_POINTS else sorted({round(k * (n - 1) / (MAX_POINTS - 1))
                                                          for k in range(MAX_POINTS)})
        points = [(x.at(ws[0]), y.at(0.0))]
        for k in ranks:
            points += [(x.at(ws[k]), points[-1][1]), (x.at(ws[k]), y.at((k + 1) / n))]
        parts.append(f'<path d="{_path(points)}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
    return _svg(HEIGHT, parts, "latency CDF")


def _phase_chart(means: Sequence[tuple[str, dict[str, float]]], colours: dict[str, str],
                 xtitle: str = "mean time from creation to running") -> str:
    """One horizontal bar per row (a policy, a pod, a pool): seconds per phase, stacked in lifecycle order, total at
    the end."""
    top = max((sum(m.values()) for _, m in means), default=0.0) * 1.15
    minutes = top >= 900
    xticks = [v * 60 for v in _nice_ticks(top / 60, integer=False)] if minutes else _nice_ticks(top, integer=False)
    left = min(max(LEFT, 12 + 7 * max((len(policy) for policy, _ in means), default=0)), 200)
    bar, gap = 30, 16
    height = TOP + len(means) * (bar + gap) + BOTTOM
    x = _Axis(0.0, xticks[-1], left, WIDTH - RIGHT)
    y = _Axis(0.0, 1.0, height - BOTTOM, TOP)
    labels = [(v, f"{v / 60:g} min" if minutes else f"{v:g} s") for v in xticks]
    parts = _frame(x, y, labels, [], xtitle, "")
    for row, (policy, phase_means) in enumerate(means):
        top_y = TOP + gap / 2 + row * (bar + gap)
        parts.append(f'<text x="{left - 8}" y="{top_y + bar / 2 + 4}" text-anchor="end" font-weight="600">'
                     f"{_esc(policy)}</text>")
        start = 0.0
        for name, mean in phase_means.items():
            if mean <= 0:
                continue
            x0, x1 = x.at(start), x.at(start + mean)
            parts.append(f'<rect x="{x0}" y="{top_y}" width="{max(x1 - x0, 0.5):.1f}" height="{bar}" '
                         f'fill="{colours[name]}"><title>{_esc(_human(name))}: {mean:.1f} s</title></rect>')
            if x1 - x0 > 34:
                parts.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{top_y + bar / 2 + 4}" text-anchor="middle" '
                             f'fill="#fff" font-size="10.5">{_esc(_seconds_label(mean))}</text>')
            start += mean
        if start > 0:
            parts.append(f'<text class="tick" x="{x.at(start) + 5}" y="{top_y + bar / 2 + 4}">'
                         f"{_esc(twin.format_duration(start))}</text>")
        else:
            parts.append(f'<text class="tick" x="{left + 5}" y="{top_y + bar / 2 + 4}">no new-node pods ran</text>')
    return _svg(height, parts, "phase waterfall")


# ------------------------------------------------------------------------------------------------- ticks and points


def downsample(values: Sequence[float], limit: int = MAX_POINTS) -> list[int]:
    """Indexes of at most `limit` samples to draw: the first, the last, and each bucket's lowest and highest sample
    (earliest on ties), in order — so peaks and dips survive."""
    n = len(values)
    if n <= limit:
        return list(range(n))
    buckets = (limit - 2) // 2
    keep = {0, n - 1}
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if lo < hi:
            keep.add(min(range(lo, hi), key=lambda i: (values[i], i)))
            keep.add(max(range(lo, hi), key=lambda i: (values[i], -i)))
    return sorted(keep)


def _nice_ticks(top: float, integer: bool, count: int = 5) -> list[float]:
    """Ticks from 0 to the first round value ≥ `top`, about `count` intervals, steps 1, 2, 2.5 or 5 × 10ⁿ."""
    if not top > 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.999)
    if integer:
        step = max(1.0, float(math.ceil(step)))
    intervals = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(intervals + 1)]


def _time_ticks(end_s: float) -> tuple[list[Tick], str]:
    """Ticks on simulated time in minutes, hours or days, whichever gives 4–8 labels."""
    for unit, name, steps in ((60, "min", (1, 2, 5, 10, 15, 20, 30)), (3600, "h", (1, 2, 3, 4, 6, 8, 12)),
                              (86400, "days", (1, 2, 7, 14, 30, 90))):
        for step in steps:
            if end_s / (step * unit) <= 8:
                count = int(end_s // (step * unit) + 1e-9)
                return [(i * step * unit, f"{i * step:g}") for i in range(count + 1)], f"simulated time ({name})"
    return [(0.0, "0")], "simulated time"


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def _usd_tick(value: float) -> str:
    return "$" + _short(value)


def _seconds_label(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s" if value < 600 else f"{value / 60:.1f} min"
