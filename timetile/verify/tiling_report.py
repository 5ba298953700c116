"""What ``timetile verify`` found: per feature and tiling, with the first mismatching rows.

Small, driver-side results of :func:`timetile.verify.invariance.verify`, and their Markdown
and self-contained HTML pages. No Spark here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

from timetile.core.timeutil import ms_to_iso
from timetile.verify.report_html import PAGE_STYLE
from timetile.verify.results import BOUND
from timetile.verify.tilings import KNOWN_BEFORE

#: What the leak check's column means, in the reports.
LEAKS_NOTE = (f"; `{KNOWN_BEFORE}`: each row recomputed over only the rows known before its "
              "time, so a mismatch there is a leak: rows that arrived late (a source's "
              "known_at), or a read past the row's time")
#: The cells of the table of features that hold no mismatch: none, the reference, not compared.
AGREEING = frozenset({"0", "ref", "-"})
#: What ``-`` in the table of features means.
UNSERVED_NOTE = ("not compared in that tiling, which has no value of it (the stream tiling "
                 "fetches online, where a derivation is not served)")


@dataclass(frozen=True)
class TilingRun:
    """How one tiling ran.

    Attributes:
        tiling: its name (``one``, ``daily``, ``random:3``, ``stream``).
        segments: the segments the range was cut into; the stream's micro-batches.
        runs: the backfills made (segments without a sampled left row are skipped); the
            stream's micro-batches followed by fetches.
        rows: output rows over all runs (every sampled left row exactly once when correct).
        seconds: wall time of its runs.
        partials: whether its runs reused stored hop partials, and if not why.

    """

    tiling: str
    segments: int
    runs: int
    rows: int
    seconds: float
    partials: str


@dataclass(frozen=True)
class FeatureTiling:
    """One feature under one tiling.

    Attributes:
        feature: the output column.
        op: its op (``derived`` for a derivation).
        check: ``exact`` (against the reference tiling) or ``bound`` (an approximate op,
            against the exact oracle's error bounds, in every tiling).
        tiling: the tiling's name.
        compared: left rows compared (0 for the reference tiling of an exact feature).
        mismatches: compared rows that differ.
        moved: of those, the largest absolute difference between a number and its reference
            (or the bound's truth); None when no mismatch is between two numbers.

    """

    feature: str
    op: str
    check: str
    tiling: str
    compared: int
    mismatches: int
    moved: float | None = None


@dataclass(frozen=True)
class TilingMismatch:
    """One mismatching (left row, feature, tiling), with both values as JSON text.

    Attributes:
        feature: the output column.
        tiling: the tiling whose value differs.
        time: the left row's time, epoch milliseconds.
        left: the left row's columns, as JSON text.
        reference: the reference tiling's value (for an approximate op: the oracle's truth).
        value: this tiling's value (``"(row missing)"`` when its output lacks the row).

    """

    feature: str
    tiling: str
    time: int
    left: str
    reference: str
    value: str


@dataclass(frozen=True)
class VerifyReport:
    """A tiling-invariance check of one Join: every feature under every tiling.

    Attributes:
        join: the Join's name.
        start: the first day checked (``YYYY-MM-DD``).
        end: the last day checked, inclusive.
        reference: the tiling exact features are compared against (the first one named).
        rows: sampled left rows checked.
        runs: how each tiling ran, in the order named.
        features: per (feature, tiling), in output-column order then tiling order.
        examples: up to ``EXAMPLES`` of the earliest mismatching rows per (feature, tiling).
        output: where the report was written, or None.
        skipped: derived columns not compared: they read an approximate feature, which may
            answer differently under another cut within its bound.

    """

    join: str
    start: str
    end: str
    reference: str
    rows: int
    runs: Sequence[TilingRun]
    features: Sequence[FeatureTiling]
    examples: Sequence[TilingMismatch] = field(default_factory=tuple)
    output: str | None = None
    skipped: Sequence[str] = ()

    @property
    def mismatches(self) -> int:
        """Mismatching (row, feature, tiling) triples, plus rows a tiling lost or repeated."""
        return (sum(entry.mismatches for entry in self.features)
                + sum(abs(run.rows - self.rows) for run in self.runs))

    @property
    def passed(self) -> bool:
        """Whether every tiling gave every sampled row the same features."""
        return self.mismatches == 0

    @property
    def checks_leaks(self) -> bool:
        """Whether the leak check ran (its column is named :data:`KNOWN_BEFORE`)."""
        return any(run.tiling == KNOWN_BEFORE for run in self.runs)

    def failing(self) -> list[FeatureTiling]:
        """Return the (feature, tiling) pairs with a mismatch."""
        return [entry for entry in self.features if entry.mismatches]

    def summary(self) -> str:
        """One line: what was checked and whether it held."""
        names = ", ".join(run.tiling for run in self.runs)
        checked = (f"{self.rows:,} left rows of {self.join} from {self.start} to {self.end}, "
                   f"tilings {names}")
        if self.passed:
            return f"Every feature agrees under every tiling: {checked}."
        lost = [f"{run.tiling} gave {run.rows:,} rows" for run in self.runs
                if run.rows != self.rows]
        bad = sorted({entry.feature for entry in self.failing()
                      if entry.tiling != KNOWN_BEFORE})
        leaking = sorted({entry.feature for entry in self.failing()
                          if entry.tiling == KNOWN_BEFORE})
        said = [f"{len(bad)} features differ between tilings"] if bad else []
        if leaking:
            said.append(f"{len(leaking)} features change when each row sees only what was "
                        f"known before its time (leaks: {', '.join(leaking)})")
        if lost:
            said.append(f"rows lost or repeated ({', '.join(lost)})")
        return f"MISMATCH: {'; '.join(said)}; {checked}."

    def markdown(self) -> str:
        """Return the report as Markdown: summary, runs, the per-feature table, first mismatches."""
        tilings = [run.tiling for run in self.runs]
        lines = [f"# Tiling invariance of {self.join}", "", f"**{self.summary()}**", "",
                 "| tiling | segments | runs | rows | seconds | stored partials |",
                 "|---|---:|---:|---:|---:|---|"]
        lines += [f"| {run.tiling} | {run.segments:,} | {run.runs:,} | {run.rows:,} | "
                  f"{run.seconds:.1f} | {run.partials} |" for run in self.runs]
        lines += ["", "Mismatches per feature and tiling (`ref`: the reference of exact "
                  f"features, {self.reference}; approximate ops are checked against the "
                  "exact oracle's bounds in every tiling; `moved`: the largest change of a "
                  f"number{LEAKS_NOTE if self.checks_leaks else ''}):", "",
                  "| feature | op | " + " | ".join(tilings) + " |",
                  "|---|---|" + "---:|" * len(tilings)]
        grid = self.grid()
        for feature, op, cells in grid:
            lines.append(f"| {feature} | {op} | " + " | ".join(cells) + " |")
        if any("-" in cells for _, _, cells in grid):
            lines += ["", f"`-`: {UNSERVED_NOTE}."]
        if self.skipped:
            lines += ["", f"Not compared: {', '.join(self.skipped)} (derived from an "
                      "approximate feature, which has no bound of its own)."]
        if self.examples:
            lines += ["", "First mismatching rows:", "",
                      "| feature | tiling | time | left row | reference | value |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {e.feature} | {e.tiling} | {ms_to_iso(e.time)} | `{e.left}` | "
                      f"`{e.reference}` | `{e.value}` |" for e in self.examples]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        """Return the report as one self-contained HTML page (no script, no network)."""
        runs = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in (
                run.tiling, f"{run.segments:,}", f"{run.runs:,}", f"{run.rows:,}",
                f"{run.seconds:.1f}", run.partials)) + "</tr>" for run in self.runs)
        head = "".join(f"<th>{html.escape(run.tiling)}</th>" for run in self.runs)
        grid = "".join(
            ("<tr class=\"bad\">" if any(cell not in AGREEING for cell in cells)
             else "<tr>")
            + "".join(f"<td>{html.escape(cell)}</td>" for cell in (feature, op, *cells))
            + "</tr>" for feature, op, cells in self.grid())
        examples = "".join(
            "<tr class=\"bad\">" + "".join(f"<td>{html.escape(cell)}</td>" for cell in (
                e.feature, e.tiling, ms_to_iso(e.time), e.left, e.reference, e.value))
            + "</tr>" for e in self.examples)
        title = f"Tiling invariance of {self.join}"
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p><b>{html.escape(self.summary())}</b></p>"
            "<h2>Tilings</h2><table><thead><tr><th>tiling</th><th>segments</th>"
            "<th>runs</th><th>rows</th><th>seconds</th><th>stored partials</th></tr>"
            f"</thead><tbody>{runs}</tbody></table>"
            f"<h2>Mismatches per feature</h2><p>Exact features against {self.reference} "
            "(ref); approximate ops against the exact oracle's bounds in every tiling; "
            f"moved: the largest change of a number"
            f"{html.escape(LEAKS_NOTE) if self.checks_leaks else ''}.</p>"
            f"<table><thead><tr><th>feature</th><th>op</th>{head}</tr></thead>"
            f"<tbody>{grid}</tbody></table>"
            + (f"<p>-: {html.escape(UNSERVED_NOTE)}.</p>"
               if any("-" in cells for _, _, cells in self.grid()) else "")
            + (f"<p>Not compared: {html.escape(', '.join(self.skipped))} (derived from an "
               "approximate feature, which has no bound of its own).</p>" if self.skipped
               else "")
            + (("<h2>First mismatching rows</h2><table><thead><tr><th>feature</th>"
                "<th>tiling</th><th>time</th><th>left row</th><th>reference</th>"
                f"<th>value</th></tr></thead><tbody>{examples}</tbody></table>")
               if examples else "")
            + "</body></html>\n")

    def grid(self) -> list[tuple[str, str, list[str]]]:
        """Return, per feature, its op and one cell per tiling: mismatches, ``ref`` or ``-``.

        ``-``: the tiling has no value of it (a derivation, which no fetch serves).
        """
        order = [run.tiling for run in self.runs]
        cells: dict[str, dict[str, str]] = {}
        ops: dict[str, str] = {}
        for entry in self.features:
            ops[entry.feature] = entry.op if entry.check != BOUND else f"{entry.op} (bound)"
            cells.setdefault(entry.feature, {})[entry.tiling] = (
                ("ref" if entry.check != BOUND and entry.tiling == self.reference else "-")
                if entry.compared == 0
                else f"{entry.mismatches:,}" + (f" (moved {entry.moved:.6g})"
                                                 if entry.moved else ""))
        return [(feature, ops[feature], [row.get(name, "") for name in order])
                for feature, row in cells.items()]
