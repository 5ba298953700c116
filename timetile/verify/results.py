"""What the consistency job found: per feature, over time, and the spread of differences.

Small, driver-side results of :func:`timetile.verify.consistency.consistency` (per-feature
counts, hourly rates, histogram counts): the event-sized data never leaves Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

#: How an op's served values are judged: ``exact`` (:func:`~timetile.testing.same_value`)
#: or ``bound`` (approximate ops, against the oracle's error bounds).
EXACT, BOUND = "exact", "bound"


@dataclass(frozen=True)
class FeatureConsistency:
    """One feature's served values against the offline recomputation.

    Attributes:
        feature: the output column, as ``backfill`` names it.
        group_by: its GroupBy (the name ``stale`` lists).
        op: its aggregation op.
        check: :data:`EXACT` or :data:`BOUND`.
        rows: logged rows compared (stale rows left out).
        stale: logged rows whose GroupBy was stale when served: not compared.
        matches: rows that match (exactly, or within bounds for ``check == "bound"``).
        missing: rows served null where the offline value is not.
        extra: rows served a value where the offline value is null.
        smape_mean: mean SMAPE (a fraction in [0, 2]) of the rows where both are numbers;
            None for features that are not numbers.
        smape_max: the largest such SMAPE.
        edit_distance_mean: mean edit distance of the rows where both are lists; None for
            features that are not lists.

    """

    feature: str
    group_by: str
    op: str
    check: str
    rows: int
    stale: int
    matches: int
    missing: int
    extra: int
    smape_mean: float | None = None
    smape_max: float | None = None
    edit_distance_mean: float | None = None

    @property
    def mismatches(self) -> int:
        """Compared rows that do not match (``missing`` and ``extra`` ones included)."""
        return self.rows - self.matches

    @property
    def mismatch_rate(self) -> float:
        """``mismatches / rows``; 0 when no row was compared."""
        return self.mismatches / self.rows if self.rows else 0.0

    @property
    def within_bound_rate(self) -> float | None:
        """For approximate ops, the share of rows within bounds; None for exact ops."""
        if self.check != BOUND:
            return None
        return self.matches / self.rows if self.rows else 1.0


@dataclass(frozen=True)
class TimelinePoint:
    """One hour of request times: compared rows and mismatching ones (over features)."""

    hour: int  # epoch ms of the hour's start
    rows: int
    mismatches: int

    @property
    def rate(self) -> float:
        """``mismatches / rows``."""
        return self.mismatches / self.rows if self.rows else 0.0


@dataclass(frozen=True)
class Histogram:
    """Counts of ``served − offline`` in equal bins over ``[lo, hi]`` (one bin when equal)."""

    lo: float
    hi: float
    counts: tuple[int, ...]

    def edges(self) -> list[float]:
        """Return the bin edges, ``len(counts) + 1`` of them.

        >>> Histogram(0.0, 1.0, (1, 2)).edges()
        [0.0, 0.5, 1.0]
        """
        width = (self.hi - self.lo) / len(self.counts)
        return [self.lo + index * width for index in range(len(self.counts))] + [self.hi]


#: The columns of ``features.parquet`` (:meth:`ConsistencyReport.table`).
FEATURES_SCHEMA = pa.schema([
    ("feature", pa.string()), ("group_by", pa.string()), ("op", pa.string()),
    ("check", pa.string()), ("rows", pa.int64()), ("stale", pa.int64()),
    ("matches", pa.int64()), ("mismatches", pa.int64()), ("mismatch_rate", pa.float64()),
    ("missing", pa.int64()), ("extra", pa.int64()), ("within_bound_rate", pa.float64()),
    ("smape_mean", pa.float64()), ("smape_max", pa.float64()),
    ("edit_distance_mean", pa.float64()),
])


@dataclass(frozen=True)
class ConsistencyReport:
    """The consistency of one Join's served responses with ``backfill`` at the same times.

    Attributes:
        join: the Join's name.
        logs: the folder the logged rows were read from.
        rows: logged rows read, each compared against every feature but those of a GroupBy
            it lists as stale.
        features: one entry per feature, in ``join.output_columns()`` order.
        timeline: per hour of request time, compared (feature, row) pairs and mismatches.
        feature_timelines: the same per feature, for the features that mismatch most.
        histograms: per numeric feature with a finite difference, its distribution.
        output: where the table and the HTML report were written, or None.
        left_out: logged rows not compared: without request id, join, row index, request
            time, keys, stale or features that read as a JSON object; of another Join (their
            ``join`` column); with keys that do not read as the Join's key columns (a missing
            key, a value of another type); or with features that lack one of the Join's
            (served by another definition of it).

    """

    join: str
    logs: str
    rows: int
    features: Sequence[FeatureConsistency]
    timeline: Sequence[TimelinePoint] = ()
    feature_timelines: Mapping[str, Sequence[TimelinePoint]] = field(default_factory=dict)
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    output: str | None = None
    left_out: int = 0

    def feature(self, name: str) -> FeatureConsistency:
        """Return the entry of the feature column ``name``; KeyError when there is none."""
        for entry in self.features:
            if entry.feature == name:
                return entry
        raise KeyError(name)

    @property
    def matching(self) -> list[FeatureConsistency]:
        """The features that match on every compared row."""
        return [entry for entry in self.features if entry.mismatches == 0]

    @property
    def stale_rows(self) -> int:
        """The most stale rows of any feature (a row is stale per GroupBy)."""
        return max((entry.stale for entry in self.features), default=0)

    def summary(self) -> str:
        """One line: how many features match on all rows, and what was left out.

        >>> entry = FeatureConsistency("f", "g", "sum", "exact", 3, 0, 3, 0, 0)
        >>> ConsistencyReport("j", "logs", 3, [entry]).summary()
        '1 of 1 features match exactly on all 3 rows'
        """
        line = (f"{len(self.matching)} of {len(self.features)} features match exactly on "
                f"all {self.rows:,} rows")
        if any(entry.check == BOUND for entry in self.features):
            line += " (approximate ops: within their error bounds)"
        if self.stale_rows:
            line += (f"; up to {self.stale_rows:,} of them stale, not compared for their "
                     "stale GroupBy's features")
        if self.left_out:
            line += (f"; {self.left_out:,} logged rows left out (unreadable, of another Join, "
                     "or keys or features that are not the Join's)")
        return line

    def table(self) -> pa.Table:
        """Return the per-feature table, as written to ``features.parquet``."""
        rows = [{
            "feature": entry.feature, "group_by": entry.group_by, "op": entry.op,
            "check": entry.check, "rows": entry.rows, "stale": entry.stale,
            "matches": entry.matches, "mismatches": entry.mismatches,
            "mismatch_rate": entry.mismatch_rate, "missing": entry.missing,
            "extra": entry.extra, "within_bound_rate": entry.within_bound_rate,
            "smape_mean": entry.smape_mean, "smape_max": entry.smape_max,
            "edit_distance_mean": entry.edit_distance_mean,
        } for entry in self.features]
        return pa.Table.from_pylist(rows, schema=FEATURES_SCHEMA)
