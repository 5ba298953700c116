"""Reading ISO-8601 time strings (the parts that need no Spark; see tests/spark for Spark)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timetile.core.time_text import TimeTextError, text_millis

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
       st.integers(-18 * 60, 18 * 60))
def test_valid_times_match_the_calendar(moment: datetime, offset: int) -> None:
    sign = "-" if offset < 0 else "+"
    text = (f"{moment.year:04d}-{moment.month}-{moment.day:02d}T{moment:%H:%M:%S}."
            f"{moment.microsecond:06d}{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}")
    zone = timezone(timedelta(minutes=offset))
    expected = (moment.replace(tzinfo=zone) - EPOCH) // timedelta(milliseconds=1)
    assert text_millis(text) == expected


def test_missing_parts_default_to_the_start_and_year_zero_is_a_leap_year() -> None:
    assert text_millis("1970") == text_millis("1970-01") == text_millis("1970-1-1T0") == 0
    assert text_millis("0000-02-29") is not None
    assert text_millis("0001-01-01") - text_millis("0000-01-01") == 366 * 86_400_000
    assert text_millis("1970-01-01T00:00:00.0005-00:00") == 0  # truncated, then floored
    assert text_millis("1969-12-31T23:59:59.9999") == -1


@pytest.mark.parametrize("text", ["2023-02-29", "2024-13-01", "2024-04-31", "2024-01-01T24",
                                  "2024-01-01T00:60", "2024-01-01T00:00:60",
                                  "2024-01-01T00:00:00+18:01", "2024-01-01T00:00:00+05:60"])
def test_impossible_fields_are_null(text: str) -> None:
    assert text_millis(text) is None


@pytest.mark.parametrize("text", ["", "2024-01-04T", "2024-01-04Z", "2024-01-04T10Z",
                                  "20240104", "2024-01-04T00:00:00,5", "2024-W01-4",
                                  "+2024-01-04", "10:00:00", "2024-01-04T00:00:00 Europe/Paris",
                                  "2024-01-04T00:00:00.1234567890", "2024-01-01T00:00:00+01:",
                                  "\u0662\u0660\u0662\u0664-01-01",
                                  "\uff12\uff10\uff12\uff14-01-01",
                                  "2024-01-01\x85", "\x9f2024-01-01", "2024-01-01\u00a0"])
def test_other_shapes_raise(text: str) -> None:
    # Spark gives null for the last six (non-ASCII digits, a dangling colon, characters beyond
    # ASCII it does not trim); the others it may read differently. Never a different time.
    with pytest.raises(TimeTextError, match="is not an ISO-8601 time of the form"):
        text_millis(text)
