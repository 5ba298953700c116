"""The benchmarks' output: who ran what, where (date, commit, machine, command), the backfill's
table of seconds and ratios, the issue's goals, and the sections of ``RESULTS.md`` that hold
them.

Every section a benchmark writes has the same head: ``- date``, ``- commit``, ``- machine``
and ``- command`` (:class:`Run`), then what it measured, in one table. A rerun replaces its
section (:func:`write_section`) or, for the backfill's other features, its row of one table
(:func:`write_row`).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _contenders import Contender
from _runner import Outcome

INTRO = """\
# Benchmark results

The current figure of each benchmark, one section each: each benchmark that writes (backfill,
serving, streaming) rewrites its own section when it runs; see benchmarks/README.md.
"""


@dataclass(frozen=True)
class Run:
    """When, on which commit and machine, and by which command a figure was measured."""

    date: str
    commit: str
    machine: str
    command: str

    def lines(self) -> list[str]:
        """The head of a section: one bullet each."""
        return [f"- date: {self.date}", f"- commit: {self.commit}",
                f"- machine: {self.machine}", f"- command: `{self.command}`"]


def this_run(command: str) -> Run:
    """The :class:`Run` of ``command``, started in this process, now."""
    return Run(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", revision(), host(),
               command)


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """``python benchmarks/<script> <argv>``, quoted for a shell; ``argv`` None: this
    process's arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([f"python benchmarks/{script}", *(shlex.quote(arg) for arg in args)])


def run_lines(script: str, argv: Sequence[str] | None) -> list[str]:
    """A section's first lines: when it ran, on which commit and machine, and the command
    that reruns it."""
    return this_run(command_line(script, argv)).lines()


def host() -> str:
    """This machine: cores, memory and CPU, e.g. ``2 cores (nproc), 23.5 GiB RAM, AMD EPYC``."""
    cpu = "unknown CPU"
    memory = "unknown RAM"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 2**20:.1f} GiB RAM"
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} cores (nproc), {memory}, {cpu}"


def software(spark_conf: dict[str, str]) -> str:
    """The versions the backfill ran with, and its Spark settings."""
    import duckdb
    import pyspark

    settings = ", ".join(f"{key}={value}" for key, value in spark_conf.items())
    return (f"Python {platform.python_version()}, PySpark {pyspark.__version__}, "
            f"DuckDB {duckdb.__version__}; Spark {settings}")


def revision() -> str:
    """The git revision of the timetile that is imported, and whether it has changes."""
    import timetile

    root = Path(timetile.__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "timetile"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{timetile.__version__} (from {root}, not a git checkout)"
    return f"{head}{' + uncommitted changes' if dirty else ''}"


def seconds_text(outcome: Outcome | None, timeout: float) -> str:
    if outcome is None:
        return "—"
    if outcome.status == "timeout":
        return f">{timeout:g}"
    if outcome.status == "error":
        return "error"
    return f"{outcome.seconds:.1f}" if outcome.seconds >= 10 else f"{outcome.seconds:.2f}"


def ratio_text(peer: Outcome, mine: Outcome, timeout: float) -> str:
    """How many times faster ``mine`` is than ``peer`` (peer seconds / mine seconds)."""
    if peer.status == "error" or mine.status == "error":
        return "—"
    if peer.status == "timeout" and mine.status == "timeout":
        return "?"
    if peer.status == "timeout":
        return f">{times(timeout / mine.seconds)}"
    if mine.status == "timeout":
        return f"<{times(peer.seconds / timeout)}"
    return times(peer.seconds / mine.seconds)


def times(ratio: float) -> str:
    """A ratio with three significant digits: 0.0026×, 0.42×, 12.2×, 349×."""
    return f"{ratio:.3g}×"


def table(contenders: Sequence[Contender], outcomes: dict[str, Outcome],
          timeout: float) -> list[str]:
    """A Markdown table: one row per contender, one ratio column per timetile executor."""
    mine = [c.name for c in contenders if c.family == "timetile"]
    head = ["contender", "seconds", *(f"{name} speedup" for name in mine)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for contender in contenders:
        outcome = outcomes.get(contender.name)
        cells = [contender.title, seconds_text(outcome, timeout)]
        for name in mine:
            if outcome is None or name == contender.name:
                cells.append("")
            else:
                cells.append(ratio_text(outcome, outcomes[name], timeout))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def scaling_table(contenders: Sequence[Contender], points: Sequence[tuple[int, int, dict[
        str, Outcome]]], timeout: float) -> list[str]:
    """A Markdown table of ``(events, queries, outcomes)`` per scale: each contender's
    seconds, then each timetile executor's speedup over each peer."""
    mine = [c for c in contenders if c.family == "timetile"]
    peers = [c for c in contenders if c.family != "timetile"]
    head = ["events", "queries", *(f"{c.title} (s)" for c in contenders),
            *(f"{m.title} speedup over {p.title}" for m in mine for p in peers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for events, queries, outcomes in points:
        cells = [f"{events:,}", f"{queries:,}",
                 *(seconds_text(outcomes.get(c.name), timeout) for c in contenders)]
        for m in mine:
            for p in peers:
                ours, theirs = outcomes.get(m.name), outcomes.get(p.name)
                cells.append("—" if ours is None or theirs is None
                             else ratio_text(theirs, ours, timeout))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def executor_seconds(contenders: Sequence[Contender], outcomes: dict[str, Outcome],
                     timeout: float) -> str:
    """One cell: each timetile executor's seconds, ``auto 2.71 · tiled 64.1``."""
    return " · ".join(f"{c.name.removeprefix('timetile[').removesuffix(']')} "
                      f"{seconds_text(outcomes.get(c.name), timeout)}" for c in contenders)


# (dataset, description, contender names, wanted speedup): timetile must be at least `wanted`
# times faster than the fastest of the contenders (a speedup of 1/3 means "within 3×").
GOALS = [
    ("skewed", "≥5× faster than the fastest Spark SQL plan",
     ("spark_join", "spark_window_segtree", "spark_window"), 5.0),
    ("skewed", "≥50× faster than the naive Spark join", ("spark_join",), 50.0),
    ("skewed", "faster than DuckDB's naive join", ("duckdb_join",), 1.0),
    ("skewed", "faster than DuckDB's window SQL", ("duckdb_window",), 1.0),
    ("uniform", "≥2× faster than the fastest Spark SQL plan",
     ("spark_join", "spark_window_segtree", "spark_window"), 2.0),
    ("uniform", "within 3× of the plain Spark scan", ("spark_scan",), 1 / 3),
    ("uniform", "faster than DuckDB's window SQL", ("duckdb_window",), 1.0),
]


def goals(dataset: str, contenders: Sequence[Contender], outcomes: dict[str, Outcome],
          timeout: float) -> list[str]:
    """The issue's goals for ``dataset``, met or not, for each timetile executor."""
    lines = []
    for mine in (c.name for c in contenders if c.family == "timetile"):
        me = outcomes.get(mine)
        for goal_dataset, text, peers, wanted in GOALS:
            if goal_dataset != dataset:
                continue
            measured = [outcomes[p] for p in peers if p in outcomes]
            if me is None or not measured or me.status == "error":
                verdict = "not measured"
            elif me.status == "timeout":
                verdict = "NOT MET (timetile timed out)"
            else:
                finished = [o.seconds for o in measured if o.ok]
                errors = any(o.status == "error" for o in measured)
                # A peer that finished bounds the fastest from above; one that timed out only
                # from below (it needs more than `timeout`), and one that failed not at all.
                speedup = (min(finished) if finished else timeout) / me.seconds
                shown = f"{'' if finished else '>'}{times(speedup)}"
                if finished and speedup < wanted:
                    verdict = f"NOT MET ({shown})"
                elif speedup >= wanted and not errors:
                    verdict = f"met ({shown})"
                else:
                    verdict = f"unknown ({shown}; a peer failed or timed out)"
            lines.append(f"- {mine}: {text}: {verdict}")
    return lines


def contender_records(contenders: Sequence[Contender], outcomes: dict[str, Outcome]
                      ) -> list[dict[str, Any]]:
    """Each contender that ran, as the JSON of :mod:`_results` keeps it."""
    return [{"name": c.name, "title": c.title, "family": c.family,
             "status": outcomes[c.name].status, "seconds": round(outcomes[c.name].seconds, 6),
             **({"detail": outcomes[c.name].detail} if outcomes[c.name].detail else {})}
            for c in contenders if c.name in outcomes]


def _section_pattern(heading: str) -> re.Pattern[str]:
    return re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.M | re.S)


def write_section(path: Path, heading: str, body: Sequence[str]) -> None:
    """Replace the ``## heading`` section of ``path`` with ``body``, or append it."""
    text = path.read_text() if path.exists() else INTRO
    section = f"## {heading}\n\n" + "\n".join(body).rstrip() + "\n"
    pattern = _section_pattern(heading)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)


def write_row(path: Path, heading: str, preamble: Sequence[str], head: Sequence[str],
              row: Sequence[str]) -> None:
    """Put ``row`` in the one table of the ``## heading`` section of ``path``: in place of
    the row with the same first cell, or last. The section is ``preamble``, then the
    table, whose header is ``head``."""
    found = _section_pattern(heading).search(path.read_text()) if path.exists() else None
    rows = [line for line in (found.group(0).splitlines() if found else [])
            if line.startswith("| ")][1:]  # the header is the first
    line = "| " + " | ".join(row) + " |"
    same = [index for index, old in enumerate(rows)
            if old[2:].split(" | ", 1)[0] == row[0]]
    if same:
        rows[same[0]] = line
    else:
        rows.append(line)
    write_section(path, heading, [*preamble, "", "| " + " | ".join(head) + " |",
                                  "|" + "---|" * len(head), *rows])


def verdict(goal: str, met: bool, measured: str) -> str:
    """Return one goal's line: ``- {goal}: MET ({measured})`` or ``NOT MET``."""
    return f"- {goal}: {'MET' if met else 'NOT MET'} ({measured})"
