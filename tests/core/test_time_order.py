"""The sweep's time order: what a stable sort by (group, time) gives, however the times lie.

No Spark. Rows arrive with their groups contiguous and in order (Spark sorted them by key);
:func:`~timetile.core.kernels.sweep.time_order` must give exactly ``np.lexsort``'s stable
order, ties on (group, time) included, both where the two pack into one int64 and where the
times lie too far apart to pack (the int64 ends).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from timetile.core.kernels.sweep import time_order

INT64 = st.integers(-(2**63), 2**63 - 1)
NEAR = st.integers(0, 40)  # many ties


@given(st.lists(st.tuples(st.integers(0, 6), NEAR | INT64), max_size=80))
def test_time_order_is_the_stable_sort_by_group_and_time(rows: list[tuple[int, int]]) -> None:
    rows.sort(key=lambda row: row[0])  # groups contiguous and in order, times as they come
    groups = np.array([group for group, _ in rows], dtype=np.int64)
    _, group_of_row = np.unique(groups, return_inverse=True)
    times = np.array([time for _, time in rows], dtype=np.int64)
    assert time_order(times, group_of_row.astype(np.int64)).tolist() == np.lexsort(
        (times, groups)).tolist()


def test_ties_keep_their_row_order_in_a_long_group() -> None:
    rng = np.random.default_rng(3)
    times = rng.integers(0, 50, 20_000)  # each time tied about 400 times
    groups = np.repeat(np.arange(4), 5_000)
    assert (time_order(times, groups) == np.lexsort((times, groups))).all()
