"""The measured seconds as JSON, beside ``RESULTS.md``, so that its plots can be redrawn
without rerunning anything.

One file per figure, named after it: ``results/backfill-<dataset>-<scale>.json`` for a
backfill run (``…-ops-<op>-<op>`` or ``…-buckets-<n>`` for the other features),
``results/scaling-<dataset>.json`` for the scaling run, and the plot drawn from it
``plots/<the same name>.png``; both folders sit beside the Markdown file a run updates (so
``--results /tmp/x.md`` writes ``/tmp/results/`` and ``/tmp/plots/``, never the committed
ones). This module imports neither Spark nor matplotlib: the benchmark writes with it, the
plots read with it.

A backfill file is one object::

    {"benchmark": "backfill", "dataset": "uniform", "scale": 1, "variant": "",
     "date": "2026-11-28 15:07 UTC", "commit": "a5dc667", "machine": "2 cores ...",
     "command": "python benchmarks/backfill.py ...", "source": "measured",
     "events": 10000000, "queries": 1000000, "timeout": 300,
     "contenders": [{"name": "spark_join", "title": "naive Spark join",
                     "family": "spark_sql", "status": "ok", "seconds": 6.72}, ...]}

``status`` is ``ok``, ``timeout`` (``seconds``: when it was abandoned) or ``error``; a
contender may carry a ``note`` (a figure from another run, say). ``source`` is
``measured`` when the benchmark wrote the file, else where its figures were copied from. A
scaling file holds the same header and, in place of ``contenders``, ``points``: one object
per scale with its ``scale``, ``events``, ``queries`` and ``contenders``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = "results"
PLOTS = "plots"


def backfill_name(dataset: str, scale: float, variant: str = "") -> str:
    """``backfill-uniform-1``, or with a variant ``backfill-skewed-1-ops-first-last``."""
    slug = "-".join(variant.replace(",", " ").split())
    return f"backfill-{dataset}-{scale:g}" + (f"-{slug}" if slug else "")


def scaling_name(dataset: str) -> str:
    """``scaling-uniform``: timetile's seconds against the number of events."""
    return f"scaling-{dataset}"


def json_path(markdown: Path, name: str) -> Path:
    """Where the figure ``name`` of the Markdown file ``markdown`` keeps its seconds."""
    return markdown.parent / RESULTS / f"{name}.json"


def png_path(markdown: Path, name: str) -> Path:
    """Where the plot of the figure ``name`` goes."""
    return markdown.parent / PLOTS / f"{name}.png"


def write(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` as indented JSON, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def read(path: Path) -> dict[str, Any]:
    """The record written by :func:`write`."""
    record: dict[str, Any] = json.loads(path.read_text())
    return record
