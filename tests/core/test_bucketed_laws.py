"""The algebra's laws for :class:`Bucketed` around every op, and its own contract.

Batches are the ones of ``test_aggregator_laws`` (every awkward value, ties in time) with a
bucket per row drawn from a few strings, ``''`` included. Beyond the laws, the defining
property: a bucketed result is, bucket by bucket, the inner op's result over that bucket's
rows alone, and None when there are none. The laws are those of ``test_aggregator_laws``,
written once in ``aggregator_strategies.Flavor`` and run here through ``BUCKETED``.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from aggregator_strategies import (
    ALL_CASES,
    CASES,
    INVERTIBLE_CASES,
    REFUSED,
    Batch,
    Flavor,
    agree,
    batches,
    build,
    outcome,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from timetile.core.aggregators import Aggregator, Bucketed, bucketed_values, make_aggregator
from timetile.core.aggregators.bucketed import InvertibleBucketed
from timetile.core.aggregators.codec import FORMAT_VERSION, encode
from timetile.core.types import ValueType

LAW_SETTINGS = settings(max_examples=10, deadline=None)
BUCKETS = ["", "a", "b", "日本"]


def bucketed_batches(op: str, value_type: ValueType, count: int) -> st.SearchStrategy[list[Batch]]:
    """``count`` batches of bucketed values (see :func:`bucketed_values`) and times."""

    def with_buckets(parts: list[Batch], draw: st.DrawFn) -> list[Batch]:
        out = []
        for values, times in parts:
            buckets = draw(st.lists(st.sampled_from(BUCKETS), min_size=len(values),
                                    max_size=len(values)))
            out.append((bucketed_values(buckets, values, value_type), times))
        return out

    @st.composite
    def strategy(draw: st.DrawFn) -> list[Batch]:
        return with_buckets(draw(batches(op, value_type, count)), draw)

    return strategy()


def concat(parts: list[Batch], value_type: ValueType) -> Batch:
    if not parts:
        return bucketed_values([], np.array([]), value_type), np.array([], np.int64)
    return (np.concatenate([values for values, _ in parts]),
            np.concatenate([times for _, times in parts]).astype(np.int64))


def agree_maps(agg: Bucketed, got: Any, want: Any, values: np.ndarray) -> None:
    """Two bucketed results of the same rows agree entry by entry (see ``agree``).

    A map with a refused entry (an INT sum past int64) is refused whole.
    """
    if want is None:
        assert got is None
        return
    if REFUSED in (got, want):
        refused = [map_ for map_ in (got, want) if map_ != REFUSED]
        assert all(REFUSED in map_.values() for map_ in refused), (got, want)
        return
    assert isinstance(got, dict)
    assert list(got) == list(want) == sorted(want)
    for bucket in want:
        rows = values[values["bucket"] == bucket]["value"]
        agree(agg.inner, got[bucket], want[bucket], rows)


def per_bucket(inner: Aggregator[Any], values: np.ndarray, times: np.ndarray) -> Any:
    """The contract, spelled out: the inner op over each bucket's rows, None for no rows."""
    buckets = sorted(set(values["bucket"].tolist()))
    if not buckets:
        return None
    result = {}
    for bucket in buckets:
        rows = values["bucket"] == bucket
        result[bucket] = outcome(inner, inner.fold(values["value"][rows], times[rows]))
    return result


def bucketed(op: str, value_type: ValueType) -> Bucketed:
    return Bucketed(build(op, value_type))


#: The laws' view of :class:`Bucketed` around each op: bucketed batches, results compared map
#: by map, an empty state's result is None (even for count: a map, not a count), and the state
#: bytes are a codec payload (the inner sketches' bytes inside).
BUCKETED = Flavor(
    build=bucketed,
    batches=bucketed_batches,
    concat=concat,
    agree=agree_maps,
    empty_result=lambda op: None,
    format_version=lambda agg: FORMAT_VERSION,
)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_the_result_is_the_op_bucket_by_bucket(op: str, value_type: ValueType,
                                               data: st.DataObject) -> None:
    agg = bucketed(op, value_type)
    ((values, times),) = data.draw(bucketed_batches(op, value_type, 1))
    agree_maps(agg, outcome(agg, agg.fold(values, times)), per_bucket(agg.inner, values, times),
               values)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_init_is_the_identity(op: str, value_type: ValueType, data: st.DataObject) -> None:
    BUCKETED.init_is_the_identity(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_merge_is_the_fold_of_the_union(op: str, value_type: ValueType,
                                        data: st.DataObject) -> None:
    BUCKETED.merge_is_the_fold_of_the_union(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_merge_is_associative(op: str, value_type: ValueType, data: st.DataObject) -> None:
    BUCKETED.merge_is_associative(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_bytes_round_trip(op: str, value_type: ValueType, data: st.DataObject) -> None:
    BUCKETED.bytes_round_trip(op, value_type, data)


@pytest.mark.parametrize(("op", "value_type"), INVERTIBLE_CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_retract_undoes_update(op: str, value_type: ValueType, data: st.DataObject) -> None:
    agg, removed = BUCKETED.retract_undoes_update(op, value_type, data)
    # A bucket whose values are all retracted leaves the map: nothing left gives None.
    assert agg.retract(agg.fold(*removed), *removed) == {}
    assert outcome(agg, agg.retract(agg.fold(*removed), *removed)) is None


@pytest.mark.parametrize(("op", "value_type"), CASES)
@LAW_SETTINGS
@given(data=st.data())
def test_no_method_mutates_its_arguments(op: str, value_type: ValueType,
                                         data: st.DataObject) -> None:
    BUCKETED.no_method_mutates_its_arguments(op, value_type, data)


def test_a_mutation_within_one_bucket_is_kept() -> None:
    # Retracting one value and inserting another nets zero values in the bucket, and is
    # still a change: the bucket must not be dropped.
    agg = Bucketed(make_aggregator("sum", ValueType.INT))
    times = np.zeros(1, np.int64)
    change = agg.update(agg.retract(agg.init(), bucketed_values(["a"], np.array([5]),
                                                                ValueType.INT), times),
                        bucketed_values(["a"], np.array([3]), ValueType.INT), times)
    before = agg.fold(bucketed_values(["a", "b"], np.array([5, 1]), ValueType.INT),
                      np.zeros(2, np.int64))
    assert outcome(agg, agg.merge(before, change)) == {"a": 3, "b": 1}


def test_capabilities_are_the_inner_ops() -> None:
    for op, value_type in ALL_CASES:
        inner = build(op, value_type)
        agg = Bucketed(inner)
        assert (agg.invertible, agg.approximate) == (inner.invertible, inner.approximate)
        assert agg.result_type().bucketed
        assert agg.result_type().element is inner.result_type().element
    with pytest.raises(TypeError, match="already bucketed"):
        Bucketed(Bucketed(make_aggregator("count", ValueType.INT)))
    with pytest.raises(TypeError, match="capabilities"):
        InvertibleBucketed(make_aggregator("max", ValueType.INT))


def test_pickles_and_repr() -> None:
    agg = Bucketed(make_aggregator("last_k", ValueType.STRING, k=2))
    copied = pickle.loads(pickle.dumps(agg))
    values = bucketed_values(["x", "y", "x"], np.array(["p", "q", "r"], dtype=object),
                             ValueType.STRING)
    state = copied.fold(values, np.array([1, 2, 3]))
    assert copied.finalize(state) == {"x": ["r", "p"], "y": ["q"]}
    assert repr(agg) == "Bucketed(LastK(string, k=2))"


@pytest.mark.parametrize(
    "payload",
    [
        (("b", "a"), (b"x", b"y")),  # unsorted
        (("a", "a"), (b"x", b"y")),  # repeated
        (("a",), ()),  # lengths differ
        ((1,), (b"x",)),  # not a string
        (("a",), ("x",)),  # not bytes
        ("a", b"x"),  # not sequences
    ],
)
def test_malformed_bytes_are_value_errors(payload: Any) -> None:
    agg = Bucketed(make_aggregator("count", ValueType.INT))
    with pytest.raises(ValueError, match="state bytes"):
        agg.from_bytes(encode(payload))


def test_values_must_be_bucketed() -> None:
    agg = Bucketed(make_aggregator("count", ValueType.INT))
    with pytest.raises(TypeError, match="fields"):
        agg.update(agg.init(), np.array([1, 2]), np.array([1, 2]))


def test_a_bucket_whose_values_a_sketch_skips_is_still_an_entry() -> None:
    # HLL skips '' (as DataSketches does): the bucket has a value, and its count is 0.
    agg = Bucketed(make_aggregator("approx_unique_count", ValueType.STRING))
    values = bucketed_values(["a", "b"], np.array(["", "x"], dtype=object), ValueType.STRING)
    state = agg.from_bytes(agg.to_bytes(agg.fold(values, np.zeros(2, np.int64))))
    assert outcome(agg, state) == {"a": 0, "b": 1}
