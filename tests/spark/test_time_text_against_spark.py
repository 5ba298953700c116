"""Time strings read without Spark land where Spark's cast puts them, or are refused.

The batch side reads a string time with ``try_to_timestamp``; ``put_events`` and
``put_mutations`` read it with :func:`timetile.core.time_text.text_millis`. On strings made
from the ISO-8601 grammar with valid and impossible fields, single-digit fields, 0 to 9
digits of fraction, every zone form, surrounding whitespace and control characters, each
string either gets Spark's value (null included) or raises: never a different millisecond.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pyspark.sql import types as T

from timetile.core.time_text import TimeTextError, text_millis
from timetile.spark.sources import time_millis

FIELDS = {
    "year": ["2024", "1969", "0000", "0001", "1900", "2000", "9999"],
    "month": ["1", "01", "02", "12", "13", "0", "00"],
    "day": ["1", "01", "28", "29", "30", "31", "32", "0"],
    "hour": ["0", "00", "9", "23", "24"],
    "minute": ["0", "00", "59", "60", "5"],
    "second": ["0", "00", "59", "60", "7"],
    "zone": ["Z", "UTC", "GMT", "+01:00", "-00:30", "+0100", "+01", "-18:00", "+18:01", "+19",
             "+05:60", "+14:45", "z", "+1:00", "UTC+01:00", "America/New_York"],
}


def time_string(rng: random.Random) -> str:
    """A string of the timestamp grammar, cut anywhere, with random fields and padding."""
    text = rng.choice(FIELDS["year"])
    date_time = rng.choice(["T", " "])
    for separator, field in (("-", "month"), ("-", "day"), (date_time, "hour"),
                             (":", "minute"), (":", "second")):
        if rng.random() < 0.15:
            break
        text += separator + rng.choice(FIELDS[field])
    else:
        if rng.random() < 0.6:
            text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 10)))
    if rng.random() < 0.5:
        text += rng.choice(["", " "]) + rng.choice(FIELDS["zone"])
    return rng.choice(["", " ", "\t", "\n "]) + text + rng.choice(["", " ", "\t", "\x00"])


def test_text_times_read_as_spark_reads_them_or_raise(spark: Any) -> None:
    rng = random.Random(11)
    texts = sorted({time_string(rng) for _ in range(2_000)} | {
        "2024-01-04", "2024-01-04T00:00:00.999999999Z", "1969-12-31T23:59:59.9995",
        "2024-02-29T12:00:00", "2023-02-29T12:00:00", "20240104T000000", "2024-W01-4",
        "2024-01-04T00:00:00,5", "+2024-01-04", "10:00:00", "2024-01-04\u00a0"})
    frame = spark.createDataFrame([(text,) for text in texts], "t string")
    read = [row[0] for row in frame.select(time_millis("t", T.StringType())).collect()]
    compared = refused = 0
    for text, expected in zip(texts, read, strict=True):
        try:
            got = text_millis(text)
        except TimeTextError:
            refused += 1
            continue
        compared += 1
        assert got == expected, text
    assert compared > 1_000
    assert refused < compared  # the grammar covers most shapes


def test_what_spark_leaves_out_text_millis_refuses(spark: Any) -> None:
    # Python reads these (its \d and int() take any digit; it could trim U+0085), Spark does not
    texts = ["2024-01-01T00:00:00+01:", "\u0662\u0660\u0662\u0664-01-01",
             "\uff12\uff10\uff12\uff14-01-01", "2024-01-01\x85", "\x9f2024-01-01"]
    frame = spark.createDataFrame([(text,) for text in texts], "t string")
    assert [row[0] for row in frame.select(time_millis("t", T.StringType())).collect()] == [
        None] * len(texts)
    for text in texts:
        with pytest.raises(TimeTextError):
            text_millis(text)
