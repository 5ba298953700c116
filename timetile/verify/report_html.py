"""The consistency report as one self-contained HTML page, its plots as inline SVG.

No network, no script, no plotting library: :func:`histogram_svg` and :func:`line_svg` write
the few SVG elements they need (one ``rect`` per bin, one ``polyline`` and its ``circle``
points per series), and every text goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from timetile.core.timeutil import ms_to_iso
from timetile.verify.results import BOUND, ConsistencyReport, FeatureConsistency, Histogram

#: Series colours of the line chart, in order (then repeated).
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
_MARGIN = 44

#: The pages' style sheet (the consistency and the tiling reports).
PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.bad td { color: #b00020; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
svg text { font-size: 10px; }
"""


def _number(value: float) -> str:
    """Format a compact label: ``1.5``, ``0.001``, ``2e+06``."""
    return f"{value:.4g}"


def histogram_svg(histogram: Histogram, *, title: str = "", width: int = 360,
                  height: int = 170) -> str:
    """Draw a histogram: one ``<rect class="bar">`` per bin, the range and peak labelled.

    >>> svg = histogram_svg(Histogram(-1.0, 1.0, (2, 0, 5)), title="x")
    >>> svg.count('class="bar"'), svg.startswith("<svg")
    (3, True)
    """
    plot_w, plot_h = width - 2 * _MARGIN, height - 2 * _MARGIN
    peak = max(histogram.counts, default=0) or 1
    bar_w = plot_w / max(len(histogram.counts), 1)
    parts = [_open(width, height), _text(width / 2, 14, title, "middle")]
    for index, count in enumerate(histogram.counts):
        bar_h = plot_h * count / peak
        x = _MARGIN + index * bar_w
        y = _MARGIN + plot_h - bar_h
        parts.append(f'<rect class="bar" x="{x:.2f}" y="{y:.2f}" width="{max(bar_w - 1, 1):.2f}"'
                     f' height="{bar_h:.2f}" fill="#1f77b4"><title>{count}</title></rect>')
    parts.append(_axes(width, height))
    parts.append(_text(_MARGIN, height - _MARGIN + 14, _number(histogram.lo), "start"))
    parts.append(_text(width - _MARGIN, height - _MARGIN + 14, _number(histogram.hi), "end"))
    parts.append(_text(_MARGIN - 4, _MARGIN + 4, str(peak), "end"))
    parts.append(_text(width / 2, height - 6, "served − offline", "middle"))
    parts.append("</svg>")
    return "".join(parts)


def line_svg(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str = "",
             width: int = 720, height: int = 240, x_label: str = "",
             y_max: float | None = None, percent: bool = False) -> str:
    """Draw lines: per series one ``<polyline>`` and a ``<circle class="point">`` per point.

    The x axis spans every series' points; y runs from 0 to ``y_max`` (their peak by
    default), labelled as percentages with ``percent``. A legend above the plot names each
    series in its colour, on as many rows as it needs: each extra row makes the picture
    12 px taller than ``height``, the plot keeps its size.

    >>> svg = line_svg({"a": [(0, 0.0), (1, 0.5)], "b": [(1, 1.0)]})
    >>> svg.count('class="point"'), svg.count("<polyline")
    (3, 2)
    >>> 'height="252"' in line_svg({"a" * 60: [], "b" * 60: []})  # a second legend row
    True
    """
    points = [point for line in series.values() for point in line]
    x_lo = min((x for x, _ in points), default=0.0)
    x_hi = max((x for x, _ in points), default=1.0)
    top = y_max if y_max is not None else max((y for _, y in points), default=0.0)
    top = top or 1.0
    plot_w, plot_h = width - 2 * _MARGIN, height - 2 * _MARGIN
    legend: list[tuple[float, float]] = []
    legend_x, legend_y = float(_MARGIN), 26.0
    for name in series:
        wide = 6 * len(name) + 24
        if legend_x > _MARGIN and legend_x + wide > width - _MARGIN / 2:
            legend_x, legend_y = float(_MARGIN), legend_y + 12
        legend.append((legend_x, legend_y))
        legend_x += wide
    shift = legend_y - 26  # extra legend rows push the plot down
    height += round(shift)

    def place(x: float, y: float) -> tuple[float, float]:
        share = (x - x_lo) / (x_hi - x_lo) if x_hi > x_lo else 0.5
        return _MARGIN + share * plot_w, _MARGIN + shift + plot_h * (1 - y / top)

    label = (lambda value: f"{value:.3g}%") if percent else _number
    parts = [_open(width, height), _text(width / 2, 12, title, "middle"),
             _axes(width, height, top=_MARGIN + round(shift))]
    for index, (name, line) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        placed = [place(x, y) for x, y in line]
        coordinates = " ".join(f"{x:.2f},{y:.2f}" for x, y in placed)
        parts.append(f'<polyline points="{coordinates}" fill="none" stroke="{colour}" '
                     'stroke-width="1.5"/>')
        parts.extend(f'<circle class="point" cx="{x:.2f}" cy="{y:.2f}" r="2.5" '
                     f'fill="{colour}"><title>{html.escape(name)}: {label(value)}</title>'
                     '</circle>' for (x, y), (_, value) in zip(placed, line, strict=True))
        parts.append(_text(*legend[index], f"■ {name}", "start", colour))
    parts.append(_text(_MARGIN - 4, _MARGIN + shift + 4, label(top), "end"))
    parts.append(_text(_MARGIN - 4, height - _MARGIN, "0", "end"))
    parts.append(_text(width / 2, height - 6, x_label, "middle"))
    parts.append("</svg>")
    return "".join(parts)


def _open(width: int, height: int) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">')


def _axes(width: int, height: int, top: int = _MARGIN) -> str:
    bottom, right = height - _MARGIN, width - _MARGIN
    return (f'<path d="M{_MARGIN},{top} V{bottom} H{right}" fill="none" '
            'stroke="#888"/>')


def _text(x: float, y: float, text: str, anchor: str, colour: str = "#444") -> str:
    return (f'<text x="{x:.2f}" y="{y:.2f}" text-anchor="{anchor}" fill="{colour}">'
            f"{html.escape(text)}</text>")


def _cell(value: float | None, digits: str = ".4g") -> str:
    return "" if value is None else format(value, digits)


def _row(entry: FeatureConsistency) -> str:
    cells = [entry.feature, entry.op, "within bound" if entry.check == BOUND else "exact",
             f"{entry.rows:,}", f"{entry.stale:,}", f"{entry.matches:,}",
             f"{entry.mismatch_rate:.2%}", f"{entry.missing:,}", f"{entry.extra:,}",
             _cell(entry.smape_mean), _cell(entry.smape_max), _cell(entry.edit_distance_mean)]
    marked = ' class="bad"' if entry.mismatches else ""
    return f"<tr{marked}>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>"


def _hour_label(millis: int) -> str:
    """Return an hour's start as ISO text cut to the hour, or as its number outside years 1 to 9999.

    >>> _hour_label(3_600_000), _hour_label(2**62)
    ('1970-01-01T01h', 'epoch ms 4611686018427387904')
    """
    text = ms_to_iso(millis)
    return f"{text[:13]}h" if text.endswith("Z") else text


_HEADER = ("feature", "op", "check", "rows", "stale", "matches", "mismatch rate", "missing",
           "extra", "SMAPE mean", "SMAPE max", "edit distance mean")


def render_report(report: ConsistencyReport) -> str:
    """Return the whole page: summary, per-feature table, mismatch rate over time, histograms."""
    timeline: dict[str, list[tuple[float, float]]] = {
        "all features": [(point.hour, 100 * point.rate) for point in report.timeline]}
    timeline.update({name: [(point.hour, 100 * point.rate) for point in points]
                     for name, points in report.feature_timelines.items()})
    first = report.timeline[0].hour if report.timeline else 0
    last = report.timeline[-1].hour if report.timeline else 0
    span = (f"hour of request time, {_hour_label(first)} to {_hour_label(last)} UTC"
            if report.timeline else "no row compared (every row stale)")
    histograms = "".join(
        histogram_svg(histogram, title=name) for name, histogram in report.histograms.items())
    header = "".join(f"<th>{html.escape(name)}</th>" for name in _HEADER)
    body = "".join(_row(entry) for entry in report.features)
    title = f"Consistency of {report.join}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p><b>{html.escape(report.summary())}</b></p>"
        f"<p>Logs: {html.escape(report.logs)}. Served values against tt.backfill at the "
        "logged request times; approximate ops against the exact oracle's error bounds; "
        "SMAPE is |s − o| / ((|s| + |o|) / 2), in [0, 2].</p>"
        f"<h2>Features</h2><table><thead><tr>{header}</tr></thead><tbody>{body}</tbody>"
        "</table>"
        "<h2>Mismatch rate over time</h2>"
        f"{line_svg(timeline, title='mismatch rate by hour', x_label=span, percent=True)}"
        "<h2>Differences (served − offline), numeric features</h2>"
        f"<div class=\"plots\">{histograms or '<p>No numeric feature.</p>'}</div>"
        "</body></html>\n"
    )
