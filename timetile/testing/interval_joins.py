"""A transcript's interval join on Spark: its tables, and its output rows split back.

A transcript (:mod:`timetile.core.interval_join.transcript`) gives each row only the columns
it names; on Spark each input is a table. :func:`transcript_join` builds the transcript's
join over tables of its columns (``bigint``, but ``name``, a string), with one more key,
:data:`MARK`, that is 1 on the transcript's rows, so rows a test adds with another mark
(a row far ahead that moves a stream's watermark) join none of them.
:func:`joined_sides` splits an output row back into its inputs' rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Row, SparkSession

from timetile.api.interval_join import IntervalJoin
from timetile.api.sources import EventSource
from timetile.core.interval_join.condition import LEFT, RIGHT
from timetile.core.interval_join.transcript import Transcript

#: The key column that tells the transcript's rows (1) from rows a test adds.
MARK = "_k"


def transcript_join(spark: SparkSession, transcript: Transcript,
                    rows: Mapping[str, Sequence[Mapping[str, Any]]], *,
                    filled: bool = True) -> IntervalJoin:
    """Return the transcript's join over tables of ``rows`` (per alias), marked 1.

    The tables' columns are every column of ``rows``, the time fields and the keys; with
    ``filled=False`` they are empty (a streaming join reads its rows from files, and the
    tables give their schemas). No job runs.
    """
    spec = transcript.spec
    tables = {}
    for position, alias in enumerate((LEFT, RIGHT)):
        columns = sorted({column for row in rows[alias] for column in row}
                         | set(spec.time_fields[alias])
                         | {pair[position] for pair in spec.keys} | {MARK})
        data = [tuple({**row, MARK: 1}.get(column) for column in columns)
                for row in rows[alias]] if filled else []
        tables[alias] = spark.createDataFrame(data, ", ".join(
            f"`{column}` {'string' if column == 'name' else 'bigint'}" for column in columns))
    return IntervalJoin(
        Path(transcript.path).stem,
        EventSource(tables[LEFT], time_column=spec.time_fields[LEFT][0]),
        EventSource(tables[RIGHT], time_column=spec.time_fields[RIGHT][0]),
        on=[*spec.keys, MARK], condition=spec.condition.text, how=spec.how)


def joined_sides(join: IntervalJoin, row: Row) -> tuple[dict[str, Any] | None,
                                                        dict[str, Any] | None]:
    """Split an output row of :func:`transcript_join`'s join into its inputs' rows.

    Each side unprefixed and without :data:`MARK`; None for a null-padded side.
    """
    values = row.asDict()
    sides = []
    for prefix in join.prefixes:
        side = {name[len(prefix):]: value for name, value in values.items()
                if name.startswith(prefix) and name != prefix + MARK}
        sides.append(None if values[prefix + MARK] is None else side)
    return sides[0], sides[1]
