"""The consistency job's per-row comparison: an Arrow function run on the executors.

:class:`Comparer` takes batches of (log columns, offline feature columns, oracle truth
columns) and yields one row per (logged row, feature) in :data:`COMPARED_SCHEMA`: whether it
matches, is missing or extra, and its SMAPE, edit distance and difference. O(features) per
logged row, plus the edit distance of list features (O(k²) for k items).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from timetile.core.equality import same_value
from timetile.online.jsonable import dumps
from timetile.verify.values import (
    decode_served,
    difference,
    edit_distance,
    is_list,
    is_number,
    offline_value,
    smape,
)

#: One row per (logged row, feature). ``served`` and ``offline`` (JSON text) are set on
#: mismatching rows only; ``smape``, ``edit`` and ``difference`` on rows that are not stale.
#: A logged row whose features Python does not read as a JSON object holding every feature
#: (Spark's reader accepted it: text after the object) is one row with a null ``feature``
#: and nulls in ``stale`` and ``match``: not compared, counted as left out.
COMPARED_SCHEMA = T.StructType([
    T.StructField("request_id", T.StringType()),
    T.StructField("row_index", T.IntegerType()),
    T.StructField("request_time", T.LongType()),
    T.StructField("feature", T.StringType()),
    T.StructField("stale", T.BooleanType()),
    T.StructField("match", T.BooleanType()),
    T.StructField("missing", T.BooleanType()),
    T.StructField("extra", T.BooleanType()),
    T.StructField("smape", T.DoubleType()),
    T.StructField("edit", T.DoubleType()),
    T.StructField("difference", T.DoubleType()),
    T.StructField("served", T.StringType()),
    T.StructField("offline", T.StringType()),
])
#: About how many compared rows one output batch holds (input batches are cut to fit).
OUTPUT_ROWS = 65_536
_ARROW_SCHEMA = pa.schema([
    ("request_id", pa.string()), ("row_index", pa.int32()), ("request_time", pa.int64()),
    ("feature", pa.string()), ("stale", pa.bool_()), ("match", pa.bool_()),
    ("missing", pa.bool_()), ("extra", pa.bool_()), ("smape", pa.float64()),
    ("edit", pa.float64()), ("difference", pa.float64()), ("served", pa.string()),
    ("offline", pa.string()),
])


@dataclass(frozen=True)
class FeatureSpec:
    """One feature to compare: its names, types and where its columns sit in a batch.

    Attributes:
        name: the output column.
        group_by: its GroupBy's name (what ``stale`` lists).
        op: its aggregation op.
        column: the batch column of the offline value.
        data_type: the offline value's Spark type (served values are decoded to it).
        bound: the batch column of the oracle's truth, for approximate ops; else None.
        bound_type: that column's Spark type.

    """

    name: str
    group_by: str
    op: str
    column: str
    data_type: T.DataType
    bound: str | None = None
    bound_type: T.DataType | None = None

    @property
    def numeric(self) -> bool:
        """Whether the feature is a scalar number."""
        return is_number(self.data_type)


class Comparer:
    """The Arrow function of ``DataFrame.mapInArrow``: batches in, compared rows out.

    Picklable (names, Spark types and module-level functions only), so it travels to the
    executors. ``checks`` maps each approximate op to its ``check(served, truth)``.
    """

    def __init__(self, specs: Sequence[FeatureSpec],
                 checks: Mapping[str, Callable[[Any, Any], bool]]) -> None:
        self.specs = list(specs)
        self.checks = dict(checks)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Compare each batch's rows against every feature, about :data:`OUTPUT_ROWS` at a time."""
        step = max(1, OUTPUT_ROWS // max(len(self.specs), 1))
        for batch in batches:
            for offset in range(0, batch.num_rows, step):
                yield self.compare(batch.slice(offset, step))

    def compare(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Return the compared rows of one batch: ``len(specs)`` per logged row.

        A logged row whose features ``json.loads`` does not read as an object holding every
        spec's feature gets one row instead, with a null ``feature`` (see
        :data:`COMPARED_SCHEMA`): it is counted as left out, never compared as served null.
        """
        columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        out: dict[str, list[Any]] = {name: [] for name in _ARROW_SCHEMA.names}
        for row in range(batch.num_rows):
            served = _parse(columns["log_features"][row])
            if served is None or any(spec.name not in served for spec in self.specs):
                for name in _ARROW_SCHEMA.names:
                    out[name].append(columns[name][row] if name in _LOGGED else None)
                continue
            stale = set(columns["log_stale"][row] or ())
            for spec in self.specs:
                out["request_id"].append(columns["request_id"][row])
                out["row_index"].append(columns["row_index"][row])
                out["request_time"].append(columns["request_time"][row])
                out["feature"].append(spec.name)
                truth = columns[spec.bound][row] if spec.bound is not None else None
                self._one(spec, served.get(spec.name), columns[spec.column][row],
                          truth=truth, stale=spec.group_by in stale, out=out)
        return pa.RecordBatch.from_pydict(out, schema=_ARROW_SCHEMA)

    def _one(self, spec: FeatureSpec, raw: Any, stored: Any, *, truth: Any, stale: bool,
             out: dict[str, list[Any]]) -> None:
        """Append one (row, feature)'s verdict and measures to ``out``."""
        served = decode_served(raw, spec.data_type)
        offline = offline_value(stored, spec.data_type)
        if spec.bound is not None:
            assert spec.bound_type is not None
            match = self.checks[spec.op](served, offline_value(truth, spec.bound_type))
        else:
            match = same_value(served, offline)
        out["stale"].append(stale)
        out["match"].append(match)
        out["missing"].append(served is None and offline is not None)
        out["extra"].append(served is not None and offline is None)
        both = not stale and served is not None and offline is not None
        numbers = both and spec.numeric and _is_number(served) and _is_number(offline)
        out["smape"].append(smape(float(served), float(offline)) if numbers else None)
        out["difference"].append(difference(served, offline) if numbers else None)
        lists = both and is_list(spec.data_type) and isinstance(served, list) and isinstance(
            offline, list)
        out["edit"].append(float(edit_distance(served, offline)) if lists else None)
        shown = not stale and not match
        out["served"].append(json.dumps(raw, ensure_ascii=False) if shown else None)
        out["offline"].append(dumps(offline) if shown else None)


_LOGGED = ("request_id", "row_index", "request_time")


def _parse(text: str | None) -> dict[str, Any] | None:
    """Return the logged features JSON as a dict; None when absent or not a JSON object."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
