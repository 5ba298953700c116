"""Columns of states: what an aggregator's ``finalize_many`` takes, and what it returns.

The sweep (``timetile.offline.executors.sweep``) answers every query of a table of keys at
once: each query's window is a run ``[lo, hi)`` of its key's sorted events, and compiled
kernels (:mod:`timetile.core.kernels`) compute, per run, what an op's result is made of.
These are those columns. An aggregator declares which one its vectorized finalizer takes
(:attr:`~timetile.core.aggregators.base.Aggregator.columnar`) and turns it into results by
the very rules of its scalar ``finalize`` (its null, NaN, empty and overflow rules):
``finalize_many`` of a column equals ``finalize`` of each run's state, which the tests
check on random windows.

States in:

- :class:`Runs`: each run's bounds, over the values in event order (time, ties by value);
- :class:`RunSums`: each run's sum state (count, sum of the finite values, NaN and ±inf
  counts), as :data:`~timetile.core.aggregators.counting.SumState` holds one;
- :class:`RunMoments`: each run's central moments;
- :class:`RunExtremes`: each run's least or greatest value in the value order;
- :class:`RankedRuns`: each run over the values' ranks among the distinct values.

Results out, always with a null mask: :class:`Scalars` (one value per run),
:class:`Picks` (one position per run into the values the runs are over: in event order for
:class:`Runs`, by rank for :class:`RankedRuns`), :class:`Lists` (positions, per run) and
:class:`Counted` (positions with counts, per run: a map). No engine, no Arrow: the caller
builds its columns from these arrays.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


class Runs(NamedTuple):
    """Each query's window as a run ``values[lows[i]:highs[i]]`` of its key's events."""

    lows: Int64s
    highs: Int64s


class RunSums(NamedTuple):
    """The sum state of each run, field by field.

    Attributes:
        counts: how many values (NaN and ±inf included).
        finite: the sum of the finite values: exact integers for an INT column (int64, or
            Python ints in an object array where int64 could overflow), and for a FLOAT
            column the exact sum correctly rounded to a double.
        nan: how many NaN.
        positive: how many +inf.
        negative: how many -inf.

    """

    counts: Int64s
    finite: npt.NDArray[Any]
    nan: Int64s
    positive: Int64s
    negative: Int64s


class RunMoments(NamedTuple):
    """The central moments of each run.

    ``sizes`` counts every value of a run and ``nonfinite`` its NaN and ±inf. The moment
    sums are those of its finite values, and 0.0 for a run of fewer than two values or with
    a NaN or ±inf (whose results the counts decide).
    """

    sizes: Int64s
    nonfinite: Int64s
    m2: Floats
    m3: Floats
    m4: Floats


class RunExtremes(NamedTuple):
    """Each run's least or greatest value (value order: NaN above every number).

    ``values`` holds anything where ``empty`` is set.
    """

    values: npt.NDArray[Any]
    empty: Bools


class RankedRuns(NamedTuple):
    """Each run over the values' ranks (equal values share one) among ``distinct`` values.

    Ranks follow the value order; ``event_offsets`` and ``query_offsets`` delimit each key's
    events and queries, and the runs ``[lows, highs)`` index the events; the queries of a
    key are in time order, so no bound moves back.

    The multiset of each run is the state of ``unique_count``, ``histogram``, ``top_k`` and
    ``bottom_k``, but written out it would hold every distinct value of every window (the
    size of ``histogram``'s output, for a ``top_k`` of 5). So this column holds the runs,
    and those ops' finalizers read each multiset as they finalize it, with the compiled
    sweep of :mod:`timetile.core.kernels.multisets`: O((n + q·k) log d) for ``top_k``.
    """

    ranks: Int64s
    distinct: int
    event_offsets: Int64s
    query_offsets: Int64s
    lows: Int64s
    highs: Int64s


class Scalars(NamedTuple):
    """One result per run; ``null`` where the result is null (``values`` is then anything)."""

    values: npt.NDArray[Any]
    null: Bools


class Picks(NamedTuple):
    """One value per run, at ``positions`` of the values the runs are over; or null."""

    positions: Int64s
    null: Bools


class Lists(NamedTuple):
    """A list per run: ``positions[offsets[i]:offsets[i + 1]]``, in output order; or null."""

    offsets: Int64s
    positions: Int64s
    null: Bools


class Counted(NamedTuple):
    """A map per run: keys at ``positions[offsets[i]:offsets[i + 1]]`` with their counts."""

    offsets: Int64s
    positions: Int64s
    counts: Int64s
    null: Bools


#: What a vectorized finalizer returns.
Finalized = Scalars | Picks | Lists | Counted


def never_null(size: int) -> Bools:
    """Return a mask of ``size`` falses: results with no null (counts)."""
    return np.zeros(size, dtype=np.bool_)


def empty_runs(runs: Runs | RankedRuns) -> Bools:
    """Return where a run holds no value."""
    empty: Bools = runs.highs <= runs.lows
    return empty
