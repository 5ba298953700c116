"""The comparison of ``verify``: every run's output joined on the row number and judged.

Per sampled row, each feature in each run (a tiling, or the leak check): exact ops (and
derivations) against the reference run, the first, with :func:`~timetile.core.equality.
same_value`; approximate ops in every run against the exact oracle's error bounds, as the
consistency check judges them (:data:`~timetile.verify.consistency.APPROX_CHECKS`). A row a
run lost or repeated counts as a mismatch too. The judging runs on the executors
(``mapInArrow``); only per-(feature, run) counts and the first mismatching rows come back
to the driver.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.join import Join
from timetile.api.sources import EventSource
from timetile.core.aggregators.sketches import KLL_RANK_ERROR
from timetile.core.equality import same_value
from timetile.online.jsonable import dumps
from timetile.spark.sources import time_millis
from timetile.testing import percentile_rank_bounds
from timetile.verify.consistency import APPROX_CHECKS, approx_parts, feature_ops
from timetile.verify.results import BOUND, EXACT
from timetile.verify.tiling_report import FeatureTiling, TilingMismatch
from timetile.verify.values import decode_served, offline_value

__all__ = ["EXAMPLES", "Sampled", "compare"]


#: Mismatching rows kept per (feature, tiling) for the report: the earliest ones.
EXAMPLES = 5
#: What the comparison writes per (sampled row, feature, tiling) it judges.
_COMPARED = pa.schema([("feature", pa.string()), ("tiling", pa.string()),
                       ("time", pa.int64()), ("match", pa.bool_()), ("left", pa.string()),
                       ("reference", pa.string()), ("value", pa.string()),
                       ("moved", pa.float64())])
_COMPARED_SPARK = T.StructType([
    T.StructField("feature", T.StringType()), T.StructField("tiling", T.StringType()),
    T.StructField("time", T.LongType()), T.StructField("match", T.BooleanType()),
    T.StructField("left", T.StringType()), T.StructField("reference", T.StringType()),
    T.StructField("value", T.StringType()), T.StructField("moved", T.DoubleType())])
_MISSING_ROW = "(row missing)"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Sampled:
    """The sampled left rows, written once so that every tiling reads the same ones.

    Attributes:
        path: their Parquet folder (the left source's columns, projected, and ``row``).
        row: the column numbering them 0, 1, …: a name the left source does not use.
        columns: the left source's columns, projected.
        time_column: the left source's time column.
        times: their times, epoch milliseconds, ascending.

    """

    path: str
    row: str
    columns: tuple[str, ...]
    time_column: str
    times: tuple[int, ...]

    def read(self, spark: SparkSession) -> DataFrame:
        """Return the sampled rows (no job runs)."""
        return spark.read.parquet(self.path)

    def millis(self, frame: DataFrame) -> Any:
        """Return the rows' time as epoch milliseconds, a Column of ``frame``."""
        return time_millis(self.time_column, frame.schema[self.time_column].dataType)


@dataclass(frozen=True)
class _Feature:
    """One compared output column: its op, Spark type and, for an approximate op, truth's."""

    name: str
    op: str
    data_type: T.DataType
    bound_type: T.DataType | None


def compare(join: Join, spark: SparkSession, sampled: Sampled,
            written: Sequence[tuple[str, str]], *, output: str | os.PathLike[str] | None,
            served: Sequence[bool]) -> tuple[list[FeatureTiling], list[TilingMismatch],
                                             list[str]]:
    """Join every run's output on the row number, judge each value, count per feature.

    ``written`` names each run (a tiling, or the leak check) and its output's folder, the
    reference first; ``served`` says, per run, that its values are served JSON text (the
    stream tiling's): a derivation, which no fetch serves, is not judged in it. Returns the
    per-(feature, run) counts, the first mismatching rows, and the derived columns left out
    (:func:`_uncomparable`).

    Raises:
        RuntimeError: a batch run's output lacks a column of the reference's.

    """
    rows = sampled.read(spark)
    frame = rows.select(sampled.row, sampled.millis(rows).alias("time"),
                        F.to_json(F.struct(*sampled.columns)).alias("left"))
    names_of_runs = [name for name, _ in written]
    outputs = [spark.read.parquet(path) for _, path in written]
    ops = {name: op for name, _, op in feature_ops(join)}
    skipped = _uncomparable(join)
    names = [column for column in outputs[0].columns
             if column not in (sampled.row, *sampled.columns, *skipped)]
    truth = _truth(join, spark, sampled, {name: feature for feature, name in enumerate(names)
                                          if ops.get(name) in APPROX_CHECKS})
    derived = {name for name, _ in join.derivation_items}
    absent = [{feature for feature, name in enumerate(names) if name in derived}
              if is_served else set() for is_served in served]
    for (run, _), out, unserved in zip(written, outputs, absent, strict=True):
        lacking = [name for feature, name in enumerate(names)
                   if name not in out.columns and feature not in unserved]
        if lacking:
            raise RuntimeError(f"verify: the {run} run's output lacks {', '.join(lacking)}, "
                               "which the reference has: an engine fault, please report it")
    for index, out in enumerate(outputs):
        frame = frame.join(out.select(
            sampled.row, F.lit(True).alias(f"p{index}"),
            *((F.lit(None) if feature in absent[index] else F.col(name))
              .alias(f"t{index}_{feature}") for feature, name in enumerate(names))),
            sampled.row, "left")
    if truth is not None:
        frame = frame.join(truth, sampled.row, "left")
    schema = frame.schema
    features = [_Feature(name, ops.get(name, "derived"), outputs[0].schema[name].dataType,
                         schema[f"b{feature}"].dataType if f"b{feature}" in schema.names
                         else None) for feature, name in enumerate(names)]
    compared = frame.mapInArrow(_Judge(features, names_of_runs, served, absent),
                                _COMPARED_SPARK).persist()
    try:
        counts = {(row["feature"], row["tiling"]): (row["n"], row["bad"], row["moved"])
                  for row in compared.groupBy("feature", "tiling").agg(
                      F.count(F.lit(1)).alias("n"), F.count_if(~F.col("match")).alias("bad"),
                      F.max("moved").alias("moved")).collect()}
        bad = compared.where(~F.col("match"))
        first = F.row_number().over(Window.partitionBy("feature", "tiling").orderBy("time"))
        examples = [TilingMismatch(row["feature"], row["tiling"], row["time"], row["left"],
                                   row["reference"], row["value"])
                    for row in bad.withColumn("n", first).where(F.col("n") <= EXAMPLES)
                    .orderBy("feature", "tiling", "time").collect()]
        if output is not None:
            bad.write.mode("overwrite").parquet(str(Path(output).resolve() / "mismatches.parquet"))
    finally:
        compared.unpersist()
    table = [FeatureTiling(feature.name, feature.op,
                           BOUND if feature.bound_type is not None else EXACT, name,
                           *counts.get((feature.name, name), (0, 0, None)))
             for feature in features for name in names_of_runs]
    return table, examples, skipped


def _uncomparable(join: Join) -> list[str]:
    """Return the derived columns whose expression reads an approximate feature.

    A sketch may answer differently under another cut (KLL compacts at random) while each
    answer lies within its bound, and a derivation of it has no bound: such columns are
    left out of the comparison, and the report names them.
    """
    approx = {name.casefold() for name, _, op in feature_ops(join) if op in APPROX_CHECKS}
    return [name for name, expression in join.derivation_items
            if approx & {word.casefold() for word in _WORD.findall(expression)}]


def _truth(join: Join, spark: SparkSession, sampled: Sampled, names: dict[str, int]
           ) -> DataFrame | None:
    """Return the oracle's truth of the approximate features, ``b{index}`` by output index."""
    parts = approx_parts(join)
    if not names or not parts:
        return None
    left = EventSource(sampled.read(spark), sampled.time_column)
    truth = percentile_rank_bounds(Join(join.name, left, parts), spark, KLL_RANK_ERROR)
    return truth.select(sampled.row, *(F.col(name).alias(f"b{index}")
                                       for name, index in names.items()))


class _Judge:
    """The Arrow function of ``mapInArrow``: per sampled row, each feature in each tiling.

    Picklable (names, Spark types, module-level functions), so it travels to the executors.
    O(features × tilings) per row. ``served[t]``: tiling ``t``'s values are served JSON text;
    ``absent[t]``: the features it has no value of, not judged in it.
    """

    def __init__(self, features: Sequence[_Feature], tilings: Sequence[str],
                 served: Sequence[bool], absent: Sequence[set[int]]) -> None:
        self.features = list(features)
        self.tilings = list(tilings)
        self.served = list(served)
        self.absent = list(absent)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self.judge(batch)

    def judge(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Return the judged (row, feature, tiling) triples of one batch of joined rows.

        A row the reference tiling lost is that tiling's mismatch, per exact feature, and
        those features of the row are compared in no other tiling.
        """
        columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        out: dict[str, list[Any]] = {name: [] for name in _COMPARED.names}

        def judged(feature: str, tiling: str, row: int, *, match: bool,
                   reference: Any = _MISSING_ROW, value: Any = _MISSING_ROW) -> None:
            out["feature"].append(feature)
            out["tiling"].append(tiling)
            out["time"].append(columns["time"][row])
            out["match"].append(match)
            out["left"].append(None if match else columns["left"][row])
            out["reference"].append(None if match else _text(reference))
            out["value"].append(None if match else _text(value))
            out["moved"].append(None if match else _moved(reference, value))

        for row in range(batch.num_rows):
            for index, feature in enumerate(self.features):
                bound = feature.bound_type is not None
                truth = (offline_value(columns[f"b{index}"][row], feature.bound_type)
                         if feature.bound_type is not None else None)
                if not bound and columns["p0"][row] is None:
                    judged(feature.name, self.tilings[0], row, match=False)
                    continue
                reference = offline_value(columns[f"t0_{index}"][row], feature.data_type)
                for tiling, name in enumerate(self.tilings):
                    if (tiling == 0 and not bound) or index in self.absent[tiling]:
                        continue  # the reference of an exact feature, or a value not served
                    present = columns[f"p{tiling}"][row] is not None
                    cell = columns[f"t{tiling}_{index}"][row]
                    value = (decode_served(json.loads(cell), feature.data_type)
                             if self.served[tiling] and cell is not None
                             else offline_value(cell, feature.data_type))
                    match = present and (APPROX_CHECKS[feature.op](value, truth) if bound
                                         else same_value(value, reference))
                    if match:
                        judged(feature.name, name, row, match=True)
                    else:
                        judged(feature.name, name, row, match=False,
                               reference=truth if bound else reference,
                               value=value if present else _MISSING_ROW)
        return pa.RecordBatch.from_pydict(out, schema=_COMPARED)


def _text(value: Any) -> str:
    """Return a compared value as JSON text (the missing-row marker as it is)."""
    return value if value is _MISSING_ROW else dumps(value)


def _moved(reference: Any, value: Any) -> float | None:
    """Return how far a number moved from the reference; None where either is no number."""
    numbers = [v for v in (reference, value)
               if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) < 2:
        return None
    moved = abs(float(value) - float(reference))
    return moved if math.isfinite(moved) else None
