"""The benchmark's output: the machine, the table of seconds and ratios, the issue's goals, and
the section of ``RESULTS.md`` that holds them."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from _contenders import Contender
from _runner import Outcome


def machine(spark_conf: dict[str, str]) -> list[str]:
    """Lines describing this machine and the software versions."""
    import duckdb
    import pyspark

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
    settings = ", ".join(f"{key}={value}" for key, value in spark_conf.items())
    return [
        f"machine: {cores} cores (nproc), {memory}, {cpu}",
        f"software: Python {platform.python_version()}, PySpark {pyspark.__version__}, "
        f"DuckDB {duckdb.__version__}, timetile {_revision()}",
        f"spark: {settings}",
    ]


def _revision() -> str:
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


def write_section(path: Path, heading: str, body: Sequence[str]) -> None:
    """Replace the ``## heading`` section of ``path`` with ``body``, or append it."""
    intro = ("# Backfill benchmark results\n\nWritten by `benchmarks/backfill.py` (see "
             "benchmarks/README.md). One section per dataset and scale; a rerun replaces its "
             "section. Speedup = the peer's seconds / timetile's seconds: above 1× timetile is "
             "faster.\n")
    text = path.read_text() if path.exists() else intro
    section = f"## {heading}\n\n" + "\n".join(body).rstrip() + "\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)


def verdict(goal: str, met: bool, measured: str) -> str:
    """Return one goal's line: ``- {goal}: MET ({measured})`` or ``NOT MET``."""
    return f"- {goal}: {'MET' if met else 'NOT MET'} ({measured})"


def run_lines(script: str, argv: Sequence[str] | None) -> list[str]:
    """Return a section's first lines: when it ran, and the command that reruns it."""
    args = list(argv or sys.argv[1:])
    return [f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            f"- command: `{' '.join([f'python benchmarks/{script}', *args])}`"]
