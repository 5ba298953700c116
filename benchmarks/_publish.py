"""What a backfill run leaves behind: its section of RESULTS.md (or its row of the table of
other ops and buckets), its seconds as JSON (_results.py) and its plot (plots.py)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _contenders import OPS, Contender
from _datasets import Dataset
from _report import (
    Run,
    contender_records,
    executor_seconds,
    goals,
    scaling_table,
    table,
    write_row,
    write_section,
)
from _results import backfill_name, json_path, png_path, scaling_name, write
from _runner import Outcome

#: The section of RESULTS.md that holds one row per run of other ops or buckets.
VARIANTS = "backfill, other ops and buckets"
VARIANTS_PREAMBLE = [
    "timetile's executors alone, against each other: the hand-written plans compute sum, "
    "count and max only. A run of `backfill.py --ops …` or `--buckets N` rewrites its row. "
    "Seconds are each executor's best of the run's `--repeat`; `>` marks a timeout.",
]
VARIANTS_HEAD = ["run", "seconds by executor", "check", "date", "commit", "machine",
                 "command"]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Measured:
    """One dataset's run: the best outcome per contender, the check's lines, the load."""

    dataset: Dataset
    outcomes: dict[str, Outcome]
    checked: list[str]
    load: tuple[float, float]


def data_text(dataset: Dataset) -> str:
    meta = dataset.meta
    return (f"{meta['events']:,} events, {meta['queries']:,} distinct queries, "
            f"{meta['keys']:,} keys, {meta['days']} days; top key: "
            f"{meta['top_key_share_events'] * 100:.3g}% of events, "
            f"{meta['top_key_share_queries'] * 100:.3g}% of queries")


def timing_text(args: argparse.Namespace, measured: list[Measured]) -> str:
    """How the contenders were timed, and the machine's load before and after each
    dataset (named by its scale when there are several)."""
    runs = f"best of {args.repeat}" if args.repeat > 1 else "one run"
    warmth = ("cold (no check first)" if args.check_after or args.no_check
              else "warm (README.md, \"What is timed\")")
    load = "; ".join(("" if len(measured) == 1 else f"scale {m.dataset.scale:g}: ")
                     + f"{m.load[0]:.1f}, {m.load[1]:.1f}" for m in measured)
    return (f"{runs} per contender, {warmth}; timeout {args.timeout:g} s; load average "
            f"(1 min) before and after: {load} (the run keeps about {args.cores} busy: "
            "much more means something else ran too)")


def record(args: argparse.Namespace, run: Run, dataset: str, **fields: Any) -> dict[str, Any]:
    """The JSON of a run (see _results.py): its head, then ``fields``."""
    return {"benchmark": "backfill", "dataset": dataset, "date": run.date,
            "commit": run.commit, "machine": run.machine, "command": run.command,
            "source": "measured", "timeout": args.timeout, **fields}


def redraw(data: Path, image: Path) -> None:
    """Draw ``image`` from ``data`` with plots.py, if matplotlib is there."""
    try:
        import plots
    except ImportError as missing:
        log(f"no plot ({missing}): install the dev extras, then run "
            "python benchmarks/plots.py")
        return
    plots.draw(data, image)
    log(f"drew {image}")


def report(args: argparse.Namespace, chosen: list[Contender], measured: Measured, run: Run,
           setup: str) -> None:
    """Print one dataset's section; write it, its JSON and its plot (or its row, for other
    ops and buckets)."""
    dataset, outcomes = measured.dataset, measured.outcomes
    name = dataset.spec.name
    variant = ", ".join(([f"ops {','.join(args.ops)}"] if args.ops != OPS else [])
                        + ([f"buckets {args.buckets}"] if args.buckets else []))
    heading = f"{name}, scale {args.scale:g}" + (f", {variant}" if variant else "")
    stem = backfill_name(name, args.scale, variant)
    scale_note = [] if args.scale == 1 else [
        f"Scale {args.scale:g}: the goals are stated for scale 1, so these verdicts only hint."]
    body = [
        *run.lines(),
        f"- software: {setup}",
        f"- data: {data_text(dataset)}",
        f"- timing: {timing_text(args, [measured])}",
        *(line if line.startswith("WARNING") else f"- {line}" for line in measured.checked),
        "",
        *table(chosen, outcomes, args.timeout),
        *([] if variant else [
            "",
            "Goals (issue 3):",
            "",
            *scale_note,
            *(goals(name, chosen, outcomes, args.timeout) or ["- no timetile contender ran"]),
            "",
            f"![{heading}](plots/{stem}.png)",
        ]),
    ]
    data = printed(args, run, name, heading=heading, stem=stem, body=body, scale=args.scale,
                   variant=variant, events=dataset.meta["events"], queries=dataset.meta["queries"],
                   contenders=contender_records(chosen, outcomes))
    if data is None:
        return
    if variant:
        check = "; ".join(line.removeprefix("check: ") for line in measured.checked)
        write_row(args.results, VARIANTS, VARIANTS_PREAMBLE, VARIANTS_HEAD, [
            heading, executor_seconds(chosen, outcomes, args.timeout), check or "not run",
            run.date, run.commit, run.machine, f"`{run.command}`"])
        log(f"[{name}] wrote the row '{heading}' of '{VARIANTS}' in {args.results}, and {data}")
        return
    published(args, heading, stem, body, data)


def report_scaling(args: argparse.Namespace, chosen: list[Contender],
                   measured: list[Measured], run: Run, setup: str) -> None:
    """Print the scaling section; write it, its JSON and its plot."""
    name = measured[0].dataset.spec.name
    heading = f"{name}, scaling"
    stem = scaling_name(name)
    points = [(int(m.dataset.meta["events"]), int(m.dataset.meta["queries"]), m.outcomes)
              for m in measured]
    checks = [f"scale {m.dataset.scale:g}: {line}" for m in measured for line in m.checked]
    body = [
        *run.lines(),
        f"- software: {setup}",
        f"- data: {name} at scales {', '.join(f'{m.dataset.scale:g}' for m in measured)} "
        "(events, queries and keys times the scale; days the same)",
        f"- timing: {timing_text(args, measured)}",
        *(f"- {line}" for line in checks),
        "",
        *scaling_table(chosen, points, args.timeout),
        "",
        f"![{heading}](plots/{stem}.png)",
    ]
    data = printed(args, run, name, heading=heading, stem=stem, body=body,
                   scales=[m.dataset.scale for m in measured], points=[
                       {"scale": m.dataset.scale, "events": m.dataset.meta["events"],
                        "queries": m.dataset.meta["queries"],
                        "contenders": contender_records(chosen, m.outcomes)}
                       for m in measured])
    if data is not None:
        published(args, heading, stem, body, data)


def printed(args: argparse.Namespace, run: Run, name: str, *, heading: str, stem: str,
            body: list[str], **fields: Any) -> Path | None:
    """Print a section; unless ``--no-results``, write its JSON record and return its path."""
    print(f"\n## {heading}\n\n" + "\n".join(body) + "\n", flush=True)
    if args.no_results:
        return None
    data = json_path(args.results, stem)
    write(data, record(args, run, name, **fields))
    return data


def published(args: argparse.Namespace, heading: str, stem: str, body: list[str],
              data: Path) -> None:
    """Write a section into RESULTS.md and redraw its plot from its JSON record."""
    write_section(args.results, heading, body)
    log(f"wrote the section '{heading}' of {args.results}, and {data}")
    redraw(data, png_path(args.results, stem))


