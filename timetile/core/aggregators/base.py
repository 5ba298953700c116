"""The aggregator contract: one algebra for every op (STYLE §1).

An aggregator folds the non-null values of one column into an intermediate state (IR) and
turns a state into a result::

    state = agg.update(agg.init(), values, times)        # fold a batch, vectorized
    both = agg.merge(state_a, state_b)                   # combine disjoint inputs
    agg.finalize(both)                                   # the user-visible result
    agg.finalize_at(both, q)                             # ... of a query at time q
    agg.from_bytes(agg.to_bytes(both)) == both           # states travel as bytes

Laws every aggregator keeps (tested with hypothesis in ``tests/core``):

- ``init()`` is the identity of ``merge``;
- ``merge`` is associative and, up to the order rules of the op, commutative:
  ``finalize(merge(fold(A), fold(B))) == finalize(fold(A + B))``;
- where ``invertible`` is declared, ``retract(update(s, v), v)`` finalizes like ``s`` and
  ``unmerge(merge(a, b), b)`` finalizes like ``a``;
- ``from_bytes(to_bytes(s))`` finalizes like ``s``;
- where ``columnar`` is declared, ``finalize_many`` of a column of states gives, run by run,
  what ``finalize`` gives of each state: the op's result rules live in its class, once, for
  one state and for a column of them (:mod:`.columnar`).

No method mutates its arguments: states can be shared freely between tiles, trees and caches.

Aggregators never see nulls: the windowing layer drops null values once, so ``values`` holds
only real values (NaN is a real value). ``times`` holds the event times in epoch milliseconds,
aligned with ``values``; ops that order by time (``first``, ``last_k``…) read it, others
ignore it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from timetile.core.aggregators.columnar import Finalized
from timetile.core.types import ResultType, ValueType

StateT = TypeVar("StateT")

Values = npt.NDArray[Any]
Times = npt.NDArray[np.int64]

#: The int64 range: a result of type INT outside it cannot be served or stored.
INT64_RANGE = range(-(2**63), 2**63)


class ResultOverflowError(OverflowError):
    """A result outside the range of its type: an integer ``sum`` past int64.

    Raised by ``finalize`` and ``finalize_many`` alike, so every executor and the online
    fetcher refuse the same windows (Spark SQL's ``sum`` raises ``ARITHMETIC_OVERFLOW``
    there under ANSI mode, its default). Every path names the feature with :func:`refused`.
    """


def refused(feature: str, column: str, error: ResultOverflowError) -> ResultOverflowError:
    """Return ``error`` naming the output ``feature`` and the input ``column`` it reads.

    The aggregator states the rule and the fix; whoever finalizes a feature names it.

    >>> str(refused("g_v_sum_1d", "v", ResultOverflowError("past int64")))
    "g_v_sum_1d (column 'v'): past int64"
    """
    return ResultOverflowError(f"{feature} (column {column!r}): {error}")


class Aggregator(ABC, Generic[StateT]):
    """Base class of every aggregation op. Capabilities are declared as class attributes.

    Attributes:
        op: the op's name as users write it, e.g. ``"last_k"``.
        invertible: whether :meth:`retract` is supported (prefix differences, retractions).
        numeric_only: whether the op accepts only ``INT`` and ``FLOAT`` columns.
        approximate: whether the result is an estimate; ``error_bound`` then says how good.
        error_bound: a sentence stating the op's error guarantee, for docs and tests.
        state_version: which form of the state :meth:`to_bytes` writes; raised when the form
            changes, so that stores keyed by it (stored hop partials) never mix forms.
        columnar: the column of states :meth:`finalize_many` takes (a class of
            :mod:`.columnar`), or None where the op has no vectorized finalizer.
        checkpointable: whether a state stays small, whatever its input, and merging the
            states of consecutive runs of events gives the state of one fold of them all,
            wherever the runs are cut (to a double's last bits for the moment ops): then the
            online fetcher keeps the states of a hot key's long runs
            (:mod:`timetile.core.series_folds`). Not KLL (its merges are randomized), nor
            the multisets (their states grow with the distinct values).

    """

    op: ClassVar[str]
    invertible: ClassVar[bool] = False
    numeric_only: ClassVar[bool] = False
    approximate: ClassVar[bool] = False
    error_bound: ClassVar[str | None] = None
    state_version: ClassVar[int] = 1
    checkpointable: ClassVar[bool] = False
    columnar: ClassVar[type | None] = None

    def __init__(self, input_type: ValueType) -> None:
        if self.numeric_only and not input_type.numeric:
            raise TypeError(f"{self.op} needs a numeric column, not {input_type.value}")
        self.input_type = input_type

    @abstractmethod
    def result_type(self) -> ResultType:
        """Return the type of :meth:`finalize`'s non-null results for this input type."""

    @abstractmethod
    def init(self) -> StateT:
        """Return the state of an empty input: the identity of :meth:`merge`."""

    @abstractmethod
    def update(self, state: StateT, values: Values, times: Times) -> StateT:
        """Fold a batch of non-null values (with their event times) into ``state``.

        Vectorized over the batch; O(len(values)) unless the op's docstring says otherwise.
        """

    @abstractmethod
    def merge(self, left: StateT, right: StateT) -> StateT:
        """Combine the states of two disjoint inputs."""

    def retract(self, state: StateT, values: Values, times: Times) -> StateT:
        """Remove values that an earlier :meth:`update` folded in. Only if ``invertible``."""
        del state, values, times
        raise TypeError(f"{self.op} is not invertible: it cannot retract values")

    def unmerge(self, whole: StateT, part: StateT) -> StateT:
        """Return the state of A given ``whole = merge(A, B)`` and ``part = B``.

        Only for invertible ops; the others raise TypeError. The inverse of :meth:`merge`, which
        prefix differences are made of (``states[lo:hi] = unmerge(prefix[hi], prefix[lo])``);
        exact for every invertible op.
        """
        del whole, part
        raise TypeError(f"{self.op} is not invertible: it cannot unmerge states")

    @abstractmethod
    def finalize(self, state: StateT) -> Any:
        """Return the result: a Python scalar, list or dict, or None where the contract says so."""

    def finalize_at(self, state: StateT, at_ms: int | None) -> Any:
        """Return the result of a query at ``at_ms`` (epoch ms), or None for no time.

        What every engine calls, with the query's as-of time: the decayed ops weigh each event
        by its age at that time (:mod:`.decayed`); every other op's result is its
        :meth:`finalize`, whatever the time.
        """
        del at_ms
        return self.finalize(state)

    def finalize_many(self, states: Any) -> Finalized:
        """Return the result of each state of a column (:attr:`columnar`), vectorized.

        By the rules of :meth:`finalize`, one result per run of the column. Only where
        ``columnar`` is declared; the others raise TypeError.
        """
        del states
        raise TypeError(f"{self.op} has no vectorized finalizer")

    @abstractmethod
    def to_bytes(self, state: StateT) -> bytes:
        """Serialize a state. The first byte is a format version."""

    @abstractmethod
    def from_bytes(self, data: bytes) -> StateT:
        """Inverse of :meth:`to_bytes`."""

    def needs_times(self) -> bool:
        """Whether each value weighs by its time (the decayed ops).

        A value without a time (an entity row without one) has no weight in such an op:
        the entity replay leaves it out. Every other op takes it, ordered first.
        """
        return False

    def fold(self, values: Values, times: Times) -> StateT:
        """``update(init(), values, times)``: the state of one batch."""
        return self.update(self.init(), values, times)

    def warm_up(self) -> None:
        """Compile, or load from numba's cache, what :meth:`merge` runs. O(1) once loaded.

        The fetcher calls it as it reads an upload, so that the first fetch does not pay for
        it (the moment ops' merge is compiled: loading it, or compiling it the first time,
        takes a noticeable part of a second).
        """
        self.merge(self.init(), self.init())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input_type.value})"
