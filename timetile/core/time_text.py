"""Times written as text, read exactly as the batch side's Spark reads them.

The backfill reads a string time column with Spark's ``try_to_timestamp`` (a string cast
to a timestamp: null where it cannot). Anything that writes the same events without Spark
(``put_events``, ``put_mutations``) must place every row at the same millisecond, or leave
out the same rows. :func:`text_millis` reads the ISO-8601 forms of Spark's grammar:

``yyyy[-[m]m[-[d]d[(T| )[h]h[:[m]m[:[s]s[.fraction][zone]]]]]]``

with up to 9 digits of fraction (truncated to the millisecond, as Spark truncates to the
microsecond and ``unix_millis`` floors), and a zone of ``Z``, ``UTC``, ``GMT`` or an
offset ``±hh``, ``±hhmm``, ``±hh:mm`` (optionally after one space); none means UTC (the
batch side refuses other session zones). Surrounding ASCII whitespace and control
characters are ignored. A string of that shape with an impossible field (month 13,
30 February, hour 24, second 60, an offset beyond ±18:00) is null, as Spark makes it.
Spark reads a few more forms (a signed or longer year, a zone by region name, a time without
a date, which means today); those, and anything else, raise, so that no row is ever placed
differently online. Spark's ``spark.sql.timestampType=TIMESTAMP_NTZ`` would drop offsets
on the batch side: keep the default.
"""

from __future__ import annotations

import calendar
import re

_SHAPE = re.compile(
    r"(?P<year>\d{4})"
    r"(?:-(?P<month>\d{1,2})"
    r"(?:-(?P<day>\d{1,2})"
    r"(?:[T ](?P<hour>\d{1,2})"
    r"(?::(?P<minute>\d{1,2})"
    r"(?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d{1,9}))?"
    r"(?: ?(?P<zone>Z|UTC|GMT|(?P<sign>[+-])(?P<zone_hours>\d{2})(?::?(?P<zone_minutes>\d{2}))?))?"
    r")?)?)?)?)?",
    re.ASCII,  # Spark reads only ASCII digits
)
#: What Spark trims from both ends: ASCII whitespace and control characters (it looks at
#: single bytes, so no character beyond ASCII is trimmed).
_TRIMMED = "".join(chr(code) for code in (*range(33), 127))
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # in a common year
_DAYS_TO_EPOCH = 365 * 1970 + calendar.leapdays(0, 1970)  # from 0000-01-01
_MAX_OFFSET_MINUTES = 18 * 60


class TimeTextError(ValueError):
    """A time string outside the forms :func:`text_millis` reads exactly as Spark does."""


def text_millis(text: str) -> int | None:
    """Return an ISO-8601 time string as epoch milliseconds, as Spark's cast reads it.

    None where Spark's cast gives null for a string of the accepted shape (an impossible
    date, time or offset). O(len(text)).

    >>> text_millis("1970-01-02"), text_millis(" 1970-01-01T00:00:01.9999+01:00 ")
    (86400000, -3598001)
    >>> text_millis("2024-02-30") is None
    True

    Raises:
        TimeTextError: ``text`` is not of the shape above, so its reading could differ.

    """
    found = _SHAPE.fullmatch(text.strip(_TRIMMED))
    if found is None:
        raise TimeTextError(f"{text!r} is not an ISO-8601 time of the form "
                            "yyyy[-mm[-dd[Thh[:mm[:ss[.fff][Z|±hh:mm]]]]]]")
    year, month, day = (int(found[name] or 1) for name in ("year", "month", "day"))
    hour, minute, second = (int(found[name] or 0) for name in ("hour", "minute", "second"))
    offset = _offset_minutes(found)
    if (not 1 <= month <= 12 or not 1 <= day <= _days_in_month(year, month) or hour > 23
            or minute > 59 or second > 59 or offset is None):
        return None
    millis = (found["fraction"] or "").ljust(3, "0")[:3]
    seconds = (_days_from_epoch(year, month, day) * 86_400 + hour * 3_600 + minute * 60
               + second - offset * 60)
    return seconds * 1_000 + int(millis)


def _offset_minutes(found: re.Match[str]) -> int | None:
    """Return the zone's offset east of UTC in minutes; None beyond Spark's ±18:00."""
    if found["sign"] is None:
        return 0  # no zone, Z, UTC or GMT
    hours, minutes = int(found["zone_hours"]), int(found["zone_minutes"] or 0)
    if minutes > 59 or hours * 60 + minutes > _MAX_OFFSET_MINUTES:
        return None
    return (hours * 60 + minutes) * (-1 if found["sign"] == "-" else 1)


def _days_in_month(year: int, month: int) -> int:
    return _MONTH_DAYS[month - 1] + (month == 2 and calendar.isleap(year))


def _days_from_epoch(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 in the proleptic Gregorian calendar (Spark's), year 0 included.

    ``calendar``'s leap-year arithmetic takes year 0 (a leap year); ``datetime`` does not.
    """
    days = (365 * year + calendar.leapdays(0, year) + sum(_MONTH_DAYS[:month - 1]) + day - 1
            + (month > 2 and calendar.isleap(year)))
    return days - _DAYS_TO_EPOCH
