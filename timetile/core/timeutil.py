"""Durations and epoch-millisecond arithmetic.

Event time in timetile is int64 milliseconds since the Unix epoch, UTC (DESIGN §2).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

#: Duration units, largest first, so :func:`format_duration` picks the largest exact unit.
UNIT_MS: dict[str, int] = {"d": DAY_MS, "h": HOUR_MS, "m": MINUTE_MS, "s": SECOND_MS}

_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$", re.ASCII)  # no other script's digits
_ZERO = re.compile(r"^\s*0+\s*[smhd]?\s*$", re.ASCII)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Epoch milliseconds below this (1973-03-03T09:46:40Z) look like epoch seconds, or a basic
#: ISO date (20240301): seconds of any day up to the year 5138 are below it. The backfill
#: warns when every integer time of a source is; ``fetch --at`` refuses such digits.
SECONDS_LIKE_MS = 100_000_000_000


def parse_duration(text: str, *, allow_zero: bool = False) -> int:
    """Parse ``"<n><unit>"`` (unit one of ``s m h d``) into milliseconds.

    >>> parse_duration("90m")
    5400000
    >>> parse_duration("7d") == 7 * DAY_MS
    True
    >>> parse_duration("0", allow_zero=True), parse_duration("0s", allow_zero=True)
    (0, 0)

    Raises:
        ValueError: when ``text`` is not of that form, or is zero without ``allow_zero``
            (zero needs no unit then).

    """
    if allow_zero and isinstance(text, str) and _ZERO.match(text):
        return 0
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: write '<n><unit>' with unit one of s, m, h, d "
            "(for example '90m' or '7d')"
        )
    millis = int(match.group(1)) * UNIT_MS[match.group(2)]
    if millis <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return millis


def format_duration(millis: int) -> str:
    """Write a duration with the largest unit that divides it exactly.

    >>> format_duration(7 * DAY_MS), format_duration(5400000), format_duration(1500)
    ('7d', '90m', '1500ms')
    """
    for unit, size in UNIT_MS.items():
        if millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


def date_to_ms(day: str | date) -> int:
    """Milliseconds at 00:00 UTC of a ``YYYY-MM-DD`` day.

    >>> date_to_ms("1970-01-02")
    86400000
    """
    if isinstance(day, datetime):  # a date too, whose time and zone would be dropped
        raise ValueError(f"{day!r} is a moment, not a day: write the day as YYYY-MM-DD")
    if isinstance(day, str):
        try:
            day = date.fromisoformat(day)
        except ValueError:
            raise ValueError(f"{day!r} is not a date: write it as YYYY-MM-DD") from None
    moment = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def ms_to_iso(millis: int) -> str:
    """Render epoch milliseconds as an ISO-8601 UTC string, for messages and reports.

    A time outside years 1 to 9999, which ISO-8601 cannot write, is rendered as its number.

    >>> ms_to_iso(86400000)
    '1970-01-02T00:00:00.000Z'
    >>> ms_to_iso(2**63 - 1)
    'epoch ms 9223372036854775807'
    """
    try:
        moment = _EPOCH + timedelta(milliseconds=millis)
    except OverflowError:
        return f"epoch ms {millis}"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
