"""The plots of RESULTS.md, drawn from the JSON the benchmarks write (see _results.py).

Two kinds, by what the JSON holds:

- a backfill run (``results/backfill-<dataset>-<scale>.json``): one horizontal bar per
  contender, its seconds on a log scale, timetile's bars highlighted, a timeout drawn at its
  limit and hatched;
- the scaling run (``results/scaling-<dataset>.json``): each contender's seconds against the
  number of events, both axes logarithmic.

Each title names the dataset, the scale, the commit, the date and the machine; a footnote
says where figures copied by hand come from. ``backfill.py`` redraws its own plot after a
run; this script redraws every plot from the committed JSON, rerunning nothing::

    python benchmarks/plots.py                    # every results/*.json to plots/*.png
    python benchmarks/plots.py results/scaling-uniform.json

Matplotlib draws with its Agg canvas (no display, no global pyplot state), and the PNGs carry
no version stamp, so the same JSON gives the same bytes on the same matplotlib.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _results import PLOTS, RESULTS, read  # noqa: E402

#: Bar colours by contender family; timetile's stands out.
COLOURS = {"timetile": "#d9480f", "spark_sql": "#4c6ef5", "duckdb": "#37b24d",
           "floor": "#adb5bd"}
OTHER = "#868e96"


def _seconds(contender: dict[str, Any], timeout: float) -> tuple[float, str] | None:
    """The length to draw and its label, or None for a contender that failed."""
    if contender["status"] == "ok":
        seconds = float(contender["seconds"])
        return seconds, f"{seconds:.1f} s" if seconds >= 10 else f"{seconds:.2f} s"
    if contender["status"] == "timeout":
        return timeout, f">{timeout:g} s (timed out)"
    return None


def _run(record: dict[str, Any]) -> str:
    """The title's second line: commit, date and machine."""
    return textwrap.fill(f"timetile {record['commit']} · {record['date']} · "
                         f"{record['machine']}", 90)


def _footnote(record: dict[str, Any], notes: Sequence[str]) -> str:
    lines = ["sum, count and max of value over 1d and 7d for every query; "
             f"`{record['command']}`"]
    if record.get("source", "measured") != "measured":
        lines.append(f"Figures {record['source']}.")
    lines += notes
    return "\n".join(textwrap.fill(line, 120) for line in lines)


def bars(record: dict[str, Any], image: Path) -> None:
    """Draw a backfill run: one bar per contender, fastest on top."""
    timeout = float(record["timeout"])
    drawn: list[tuple[float, str, str, dict[str, Any]]] = []
    notes: list[str] = []
    failed: list[str] = []
    for contender in record["contenders"]:
        shown = _seconds(contender, timeout)
        if shown is None:
            failed.append(contender["title"])
            continue
        label = contender["title"]
        if contender.get("note"):
            label += " *" * (len(notes) + 1)
            notes.append("*" * (len(notes) + 1) + f" {contender['title']}: {contender['note']}")
        drawn.append((shown[0], shown[1], label, contender))
    if failed:
        notes.append(f"Failed, not drawn: {', '.join(failed)}.")
    drawn.sort(key=lambda item: -item[0])  # barh draws from the bottom: the slowest there
    figure = Figure(figsize=(8.5, 1.6 + 0.42 * len(drawn)), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for row, (seconds, text, _, contender) in enumerate(drawn):
        mine = contender["family"] == "timetile"
        axes.barh(row, seconds, color=COLOURS.get(contender["family"], OTHER),
                  hatch="//" if contender["status"] == "timeout" else None,
                  edgecolor="black" if mine else "none", linewidth=1.2 if mine else 0)
        axes.text(seconds * 1.06, row, text, va="center", fontsize=9,
                  fontweight="bold" if mine else "normal")
    axes.set_yticks(range(len(drawn)), [label for _, _, label, _ in drawn])
    for tick, (_, _, _, contender) in zip(axes.get_yticklabels(), drawn, strict=True):
        if contender["family"] == "timetile":
            tick.set_fontweight("bold")
    axes.set_xscale("log")
    longest = max((seconds for seconds, *_ in drawn), default=1.0)
    shortest = min((seconds for seconds, *_ in drawn), default=1.0)
    axes.set_xlim(shortest / 3, longest * 6)  # room for the labels
    axes.set_xlabel("seconds (log scale; shorter is faster)")
    axes.grid(axis="x", which="major", alpha=0.3)
    axes.set_title(f"Backfill, {record['dataset']} dataset, scale {record['scale']:g}: "
                   f"{record['events']:,} events, {record['queries']:,} queries\n"
                   f"{_run(record)}", fontsize=10, loc="left")
    figure.text(0, 0, _footnote(record, notes), fontsize=7.5, va="top", color="#495057")
    _save(figure, image)


def scaling(record: dict[str, Any], image: Path) -> None:
    """Draw a scaling run: each contender's seconds against the events."""
    timeout = float(record["timeout"])
    series: dict[str, list[tuple[int, float, bool]]] = {}
    families: dict[str, str] = {}
    for point in record["points"]:
        for contender in point["contenders"]:
            shown = _seconds(contender, timeout)
            if shown is None:
                continue
            series.setdefault(contender["title"], []).append(
                (int(point["events"]), shown[0], contender["status"] == "timeout"))
            families[contender["title"]] = contender["family"]
    figure = Figure(figsize=(7.5, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for title, points in series.items():
        mine = families[title] == "timetile"
        events = [events for events, _, _ in points]
        seconds = [seconds for _, seconds, _ in points]
        axes.plot(events, seconds, marker="o", color=COLOURS.get(families[title], OTHER),
                  linewidth=2.5 if mine else 1.5, label=title, zorder=3 if mine else 2)
        for x, y, late in points:
            axes.annotate(f">{y:g} s" if late else (f"{y:.1f}" if y >= 10 else f"{y:.2f}"),
                          (x, y), textcoords="offset points", xytext=(6, -10 if mine else 6),
                          fontsize=8, fontweight="bold" if mine else "normal")
    axes.set_xscale("log")
    axes.set_yscale("log")
    measured = sorted({int(point["events"]) for point in record["points"]})
    axes.set_xticks(measured, [_count(events) for events in measured])
    axes.xaxis.set_minor_locator(NullLocator())
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.margins(x=0.12, y=0.15)
    axes.set_xlabel("events (queries a tenth, keys a hundredth)")
    axes.set_ylabel("seconds (log scale)")
    axes.grid(which="major", alpha=0.3)
    axes.legend(loc="upper left")
    axes.set_title(f"Backfill seconds as the events grow, {record['dataset']} dataset\n"
                   f"{_run(record)}", fontsize=10, loc="left")
    figure.text(0, 0, _footnote(record, []), fontsize=7.5, va="top", color="#495057")
    _save(figure, image)


def _count(number: int) -> str:
    """``1M``, ``3M``, ``30K``: an axis label for a count of events."""
    for size, suffix in ((1_000_000, "M"), (1_000, "K")):
        if number >= size:
            return f"{number / size:g}{suffix}"
    return str(number)


def _save(figure: Figure, image: Path) -> None:
    image.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(image, bbox_inches="tight", pad_inches=0.15,
                   metadata={"Software": None})  # no version stamp: the same JSON, the same PNG


def draw(data: Path, image: Path) -> None:
    """Draw the JSON at ``data`` as the PNG ``image``, by the kind of run it holds."""
    record = read(data)
    if "points" in record:
        scaling(record, image)
    elif not record.get("variant"):
        bars(record, image)
    else:
        raise ValueError(f"{data}: a run of other ops or buckets ({record['variant']}) has no "
                         "plot")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path,
                        help=f"JSON files to draw (default: every plotted one in {RESULTS}/)")
    parser.add_argument("--folder", type=Path, default=HERE,
                        help=f"the folder that holds {RESULTS}/ and {PLOTS}/ (default: "
                             "benchmarks/)")
    args = parser.parse_args(argv)
    files = args.files or sorted(path for path in (args.folder / RESULTS).glob("*.json")
                                 if "points" in read(path) or not read(path).get("variant"))
    for data in files:
        image = data.resolve().parent.parent / PLOTS / f"{data.stem}.png"
        draw(data, image)
        print(f"{data} -> {image}")


if __name__ == "__main__":
    main()
