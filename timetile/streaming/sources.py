"""Where a stream's events come from, and the URI form the command line takes.

A stream source is anything with ``read_stream(spark, schema) -> DataFrame`` (a streaming
DataFrame of the batch source's raw columns) and ``describe() -> str``:
:class:`~timetile.streaming.file_source.FileSource` (a directory of JSON lines or Parquet, the
embedded default) and :class:`~timetile.streaming.redis_source.RedisStreamSource` (a Redis
Stream). :func:`parse_source` reads one from a URI.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from timetile.core.timeutil import parse_duration
from timetile.store.kv import redacted_uri
from timetile.streaming.file_source import FileSource

if TYPE_CHECKING:  # imported when used: it needs PySpark 4.2's Python streaming read limits
    from timetile.streaming.redis_source import RedisStreamSource


class StreamSource(Protocol):
    """A source of events for :func:`timetile.streaming.job.stream_group_by`."""

    def read_stream(self, spark: SparkSession, schema: StructType) -> DataFrame:
        """Return the events as a streaming DataFrame of ``schema``'s columns."""
        ...

    def describe(self) -> str:
        """Name the source in logs and messages."""
        ...


_FORMS = ("dir:PATH[?format=json|parquet][&maxFilesPerTrigger=N], or "
          "redis://host:port/db?stream=KEY[&layout=fields|json][&field=NAME]"
          "[&maxEntriesPerTrigger=N][&startId=ID]")


def parse_source(uri: str) -> FileSource | RedisStreamSource:
    """Read a stream source from a URI.

    - ``dir:PATH[?format=json|parquet][&maxFilesPerTrigger=N]``: a directory of files
      (JSON lines by default);
    - ``redis://host:port/db?stream=KEY[&layout=fields|json][&field=NAME]
      [&maxEntriesPerTrigger=N][&startId=ID]`` (also ``rediss://`` and ``unix://``): a
      Redis Stream; other query parameters go to redis-py.

    >>> parse_source("dir:landing/events?format=parquet&maxFilesPerTrigger=2")
    FileSource(path='landing/events', format='parquet', max_files_per_trigger=2)
    >>> parse_source("redis://localhost:6379/0?stream=events").stream
    'events'

    Raises:
        ValueError: the URI names no known source, or an option is wrong.

    """
    scheme, _, rest = uri.partition(":")
    if scheme == "dir":
        path, _, query = rest.partition("?")
        options = _options(uri, query, {"format", "maxFilesPerTrigger"})
        if not path:
            raise ValueError(f"stream source {redacted_uri(uri)!r} names no directory: "
                             f"use {_FORMS}")
        return FileSource(urllib.parse.unquote(path), options.pop("format", "json"),
                          _count(uri, options.pop("maxFilesPerTrigger", None)))
    if scheme in ("redis", "rediss", "unix"):
        from timetile.streaming.redis_source import RedisStreamSource  # noqa: PLC0415

        ours = {"stream", "layout", "field", "maxEntriesPerTrigger", "startId"}
        options = {}
        # redis-py's options are kept as written: an '@' of a password not percent-encoded
        # stays in view of check_redis_url
        theirs: list[str] = []
        for option in urllib.parse.urlsplit(uri).query.split("&"):
            name, _, value = map(urllib.parse.unquote_plus, option.partition("="))
            if name in ours:
                options[name] = value
            elif option:
                theirs.append(option)
        # not urlunsplit, which writes unix:///run/r.sock as unix:/run/r.sock (redis-py refuses)
        url = uri.partition("?")[0] + (f"?{'&'.join(theirs)}" if theirs else "")
        if "stream" not in options:
            raise ValueError(f"stream source {redacted_uri(uri)!r} names no stream: add "
                             "?stream=KEY")
        return RedisStreamSource(url, options["stream"], options.get("layout", "fields"),
                                 options.get("field", "json"),
                                 _count(uri, options.get("maxEntriesPerTrigger")),
                                 options.get("startId", "0-0"))
    raise ValueError(f"unknown stream source {redacted_uri(uri)!r}: use {_FORMS}")


def _options(uri: str, query: str, known: set[str]) -> dict[str, str]:
    options = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"stream source {redacted_uri(uri)!r}: unknown option {unknown[0]!r}; "
                         f"use {', '.join(sorted(known))}")
    return options


def _count(uri: str, value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"stream source {redacted_uri(uri)!r}: {value!r} is not a positive count")
    return int(value)


def lateness_ms(lateness: str | int) -> int:
    """Parse an allowed lateness: a duration (``"90m"``, ``"1h"``) or milliseconds (0 or more).

    ``"0"`` (or ``"0s"``, any unit) is no lateness, as 0 is.

    >>> lateness_ms("1h"), lateness_ms(0), lateness_ms("0")
    (3600000, 0, 0)
    """
    if isinstance(lateness, bool):
        raise ValueError(f"lateness {lateness!r} is not a duration")
    if isinstance(lateness, int):
        if lateness < 0:
            raise ValueError(f"lateness {lateness} ms is negative: use 0 or more")
        return lateness
    return parse_duration(lateness, allow_zero=True)
