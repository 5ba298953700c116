"""Each part's route comes from the capability table: declared, read, never tried.

No Spark runs here: a part's plan is built from its definition (the route reads only its
features and windows), and ``queries_fit`` stands for the query count ``auto`` may run.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import types as T

import timetile as tt
from timetile.core.types import ValueType
from timetile.offline.backfill import CHOOSABLE
from timetile.offline.executors import EXECUTORS, Source, route
from timetile.offline.executors.sweep import SWEEP_OPS
from timetile.offline.options import EXECUTOR_NAMES
from timetile.offline.plan import EntityPartPlan, Feature, PartPlan
from timetile.spark.result_types import arrow_transportable

PARAMS: dict[str, dict[str, Any]] = {"first_k": {"k": 2}, "last_k": {"k": 2}, "top_k": {"k": 2},
                                     "bottom_k": {"k": 2}, "approx_percentile": {
                                         "percentiles": [0.5]}}


def part(*specs: tuple[str, list[Any] | None]) -> PartPlan:
    """A part over a double column with one feature per (op, windows), events unread."""
    aggregations = [tt.Aggregation("x", op, windows=windows, **PARAMS.get(op, {}))
                    for op, windows in specs]
    group_by = tt.GroupBy("g", tt.EventSource("events"), ["k"], aggregations)
    features = tuple(Feature(name, aggregation, window, ValueType.FLOAT)
                     for aggregation in aggregations
                     for name, window, _ in aggregation.outputs("g", None))
    return PartPlan(tt.JoinPart(group_by), None, features)  # type: ignore[arg-type]


class Asked:
    """``queries_fit``, answering ``fit`` and counting how often it was asked."""

    def __init__(self, fit: bool) -> None:
        self.fit, self.calls = fit, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.fit


def test_the_table_declares_every_executor_and_the_cli_names_agree() -> None:
    assert CHOOSABLE == EXECUTOR_NAMES  # the command line's list, kept free of Spark
    assert {name for name, e in EXECUTORS.items() if e.source is Source.ENTITY} == {"entity"}
    assert [name for name, e in EXECUTORS.items() if e.rides] == ["sweep"]
    assert [name for name, e in EXECUTORS.items() if e.collects_queries] == ["interval_tree"]
    assert [name for name, e in EXECUTORS.items() if e.stores_partials] == ["tiled"]


def test_auto_sweeps_what_the_sweep_computes_without_counting_queries() -> None:
    asked = Asked(fit=False)
    chosen = route(part(*[(op, ["1d"]) for op in SWEEP_OPS]), "auto", asked)
    assert chosen.label == "sweep"
    assert asked.calls == 0


@pytest.mark.parametrize(("fit", "rest"), [(True, "interval_tree"), (False, "tiled")])
def test_a_part_mostly_of_sweep_ops_is_split(fit: bool, rest: str) -> None:
    mixed = part(("sum", ["1d"]), ("max", ["1d"]), ("approx_unique_count", ["1d"]))
    chosen = route(mixed, "auto", Asked(fit))
    assert chosen.label == f"sweep+{rest}"
    swept, other = chosen.pieces
    assert [f.aggregation.op for f in swept.part.features] == ["sum", "max"]
    assert [f.aggregation.op for f in other.part.features] == ["approx_unique_count"]


def test_the_rest_of_a_split_part_goes_where_its_own_windows_fit() -> None:
    """The 1 ms window is the sweep's: the rest has a hop, so it tiles (not the reference)."""
    mixed = part(("sum", [tt.Window(1)]), ("max", [tt.Window(1)]),
                 ("approx_unique_count", ["1d"]))
    assert route(mixed, "auto", Asked(False)).label == "sweep+tiled"


def test_a_part_mostly_of_other_ops_stays_whole_and_needs_a_hop_to_tile() -> None:
    mostly = part(("sum", ["1d"]), ("approx_unique_count", ["1d"]),
                  ("approx_percentile", None))
    assert route(mostly, "auto", Asked(False)).label == "tiled"
    assert route(mostly, "auto", Asked(True)).label == "interval_tree"
    no_hop = part(("approx_unique_count", [tt.Window(1)]))  # 1 ms: no hop divides it
    assert route(no_hop, "auto", Asked(False)).label == "reference"


def test_an_executor_asked_for_is_used_and_an_entity_part_has_its_own() -> None:
    sweepable = part(("sum", ["1d"]))
    for name in CHOOSABLE:
        assert route(sweepable, name, Asked(False)).label == name
    entity = EntityPartPlan(sweepable.part, None, sweepable.features)  # type: ignore[arg-type]
    for name in ("auto", *CHOOSABLE):
        assert route(entity, name, Asked(False)).label == "entity"


def test_which_columns_ride_is_declared_by_type() -> None:
    assert arrow_transportable(T.StructType([
        T.StructField("a", T.ArrayType(T.MapType(T.StringType(), T.TimestampType()))),
        T.StructField("b", T.DecimalType(10, 2)), T.StructField("c", T.DateType())]))
    assert not arrow_transportable(T.CalendarIntervalType())
    assert not arrow_transportable(T.YearMonthIntervalType())
    assert not arrow_transportable(T.ArrayType(T.StructType([
        T.StructField("i", T.CalendarIntervalType())])))


class _PointUDT(T.UserDefinedType):
    """A user-defined type stored as an array of doubles."""

    @classmethod
    def sqlType(cls) -> T.DataType:  # noqa: N802  (PySpark's name)
        return T.ArrayType(T.DoubleType(), False)


def _every_data_type() -> list[T.DataType]:
    """One instance of every Spark type PySpark defines, atomic and nested."""
    found: list[type[T.DataType]] = []
    todo = [T.DataType]
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        found.append(kind)
    atomic = []
    for kind in found:
        for arguments in ((), (5,)):  # CharType(5), VarcharType(5)
            try:
                atomic.append(kind(*arguments))
                break
            except Exception:
                continue
    atomic = [t for t in atomic if not isinstance(t, (T.StructType, T.ArrayType, T.MapType,
                                                       T.UserDefinedType))] + [_PointUDT()]
    nested = [T.ArrayType(t) for t in atomic] + [T.MapType(T.StringType(), t) for t in atomic]
    return [*atomic, *nested, T.StructType([T.StructField(f"c{i}", t)
                                            for i, t in enumerate(atomic)])]


def test_the_declared_arrow_types_are_pysparks_own() -> None:
    """The table of types that ride agrees with PySpark's conversion, on every type it has."""
    from pyspark.sql.pandas.types import to_arrow_type

    checked = 0
    for data_type in _every_data_type():
        try:
            to_arrow_type(data_type, timezone="UTC")
            converts = True
        except Exception:
            converts = False
        assert arrow_transportable(data_type) == converts, data_type
        checked += 1
    assert checked > 40
