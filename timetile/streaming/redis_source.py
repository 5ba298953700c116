"""Events from a Redis Stream: a real bus, read through PySpark's Python data source API.

:class:`RedisStreamDataSource` (registered as ``timetile_redis_stream``) is a
``pyspark.sql.datasource`` streaming source. Its offsets are stream entry ids
(``{"id": "1700000000000-0"}``, exclusive): each micro-batch reads the entries after the
previous batch's end id up to its own end id, with ``XRANGE`` in pages, in one partition.
Spark's checkpoint journals each batch's offsets before running it, so a restarted query
reads exactly the same entries again for a replayed batch and continues after the last
committed one. ``commit`` leaves the stream alone: other consumers may read it, and trimming
(``XADD … MAXLEN``/``XTRIM``) is the producer's policy; trim only what every stream has
committed (see ``offsets/`` and ``commits/`` in the checkpoint).

Entry layout (``format``):

- ``fields`` (default): one field per raw source column (before the source's ``select``),
  its value as text: ``user_id 7 ts 1704153600000 amount 2.5 item apple flag true``.
  A missing field is null. Values are read as the batch source's column types with
  ``try_cast``: numbers as Python or JSON write them (``nan``, ``inf``, ``-0.0`` too),
  booleans ``true``/``false``; a ``bigint`` time as epoch ms, a ``timestamp`` time as
  epoch ms (digits only) or ISO-8601 text. Text that does not parse is null (a null time or
  key is then counted as unusable by the job).
- ``json``: one field (``json`` by default; option ``field``) holding a JSON object of the raw
  columns, read with ``from_json`` and the batch source's schema (``NaN``, ``Infinity``
  allowed). An object with a value of the wrong type is read as all nulls, as the file
  source reads such a line: the job counts it as unusable.

An entry that is not UTF-8 text (its field names or values) reads as all nulls too.

Requires Redis 6.2 or later (exclusive ``XRANGE`` starts) and PySpark 4.2 or later (read
limits and ``Trigger.AvailableNow`` for Python sources).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
)

from timetile.streaming.file_source import (
    CORRUPT,
    read_columns,
    read_text,
    read_texts,
    text_schema,
)

#: The name the data source is registered under.
NAME = "timetile_redis_stream"
#: The schema the data source reads: each entry's id and its fields.
RAW_SCHEMA = "id string, fields map<string,string>"
#: Entries per ``XRANGE`` call when reading a batch.
PAGE = 1_000
#: The entry layouts a source reads.
LAYOUTS = ("fields", "json")
_START = "0-0"
#: What ``startId`` takes: an entry id, ``millis`` or ``millis-sequence``.
_ENTRY_ID = re.compile(r"[0-9]{1,20}(-[0-9]{1,20})?")


def _order(entry_id: str) -> tuple[int, int]:
    """Return a stream id's sort key.

    >>> _order("1700000000000-12") > _order("1700000000000-2")
    True
    """
    millis, _, sequence = entry_id.partition("-")
    return int(millis), int(sequence or 0)


class _Range(InputPartition):
    """The entries with ``start < id <= end``."""

    def __init__(self, start: str, end: str) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class RedisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads one Redis Stream; offsets are ``{"id": last entry id read}``.

    Options: ``url`` (redis-py's URL), ``stream`` (the key), ``startId`` (read the entries
    after it; ``0-0``, everything, by default), ``maxEntriesPerTrigger`` (at most this many
    entries per micro-batch), ``pageSize`` (entries per ``XRANGE``). Each offset call costs
    one ``XREVRANGE`` (or one ``XRANGE … COUNT n`` under a limit); a batch of n entries costs
    ``n / pageSize + 1`` ``XRANGE`` calls.
    """

    def __init__(self, options: dict[str, str]) -> None:
        options = {name.lower(): value for name, value in options.items()}  # Spark's are
        self.url = options["url"]                                             # case-blind
        self.stream = options["stream"]
        self.start_id = options.get("startid", _START)
        limit = int(options.get("maxentriespertrigger", "0"))
        self.max_entries = limit if limit > 0 else None
        self.page = int(options.get("pagesize", str(PAGE)))
        self._target: str | None = None
        self._connection: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_connection"] = None  # a connection does not travel to executors
        return state

    def _client(self) -> Any:
        if self._connection is None:
            import redis  # noqa: PLC0415  (only where a Redis source is read)

            # bytes, decoded here: one entry that is not UTF-8 must not fail the batch
            self._connection = redis.Redis.from_url(self.url, decode_responses=False)
        return self._connection

    def _last_id(self) -> str:
        newest = self._client().xrevrange(self.stream, "+", "-", count=1)
        return newest[0][0].decode() if newest else _START

    def initialOffset(self) -> dict[str, str]:  # noqa: N802  (PySpark's names)
        """Start after ``startId``."""
        return {"id": self.start_id}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """``ReadMaxRows(maxEntriesPerTrigger)``, or everything available."""
        return ReadAllAvailable() if self.max_entries is None else ReadMaxRows(self.max_entries)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Remember the newest entry now: an ``availableNow`` run reads up to it and stops."""
        self._target = self._last_id()

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:  # noqa: N802
        """Return the newest entry id (capped by the limit), or ``start`` when none is new."""
        last = self._target if self._target is not None else self._last_id()
        if _order(last) <= _order(start["id"]):
            return start
        if isinstance(limit, ReadMaxRows):
            entries = self._client().xrange(self.stream, f"({start['id']}", last,
                                            count=limit.max_rows)
            if entries:
                last = entries[-1][0].decode()
        return {"id": last}

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        """One partition of the entries in ``(start, end]``; none when the range is empty."""
        if _order(end["id"]) <= _order(start["id"]):
            return []
        return [_Range(start["id"], end["id"])]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, dict[str, str] | None]]:
        """Yield ``(id, fields)`` of the partition's entries, in id order.

        The fields are None for an entry that is not UTF-8 text.
        """
        assert isinstance(partition, _Range)
        after = partition.start
        while True:
            entries = self._client().xrange(self.stream, f"({after}", partition.end,
                                            count=self.page)
            for entry_id, fields in entries:
                yield entry_id.decode(), _decoded(fields)
            if len(entries) < self.page:
                return
            after = entries[-1][0].decode()

    def commit(self, end: dict[str, str]) -> None:
        """Do nothing: the stream is left for other consumers and the producer's trimming."""

    def stop(self) -> None:
        """Close the connection."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _decoded(fields: dict[bytes, bytes]) -> dict[str, str] | None:
    """Return an entry's fields as text; None if any name or value is not UTF-8."""
    try:
        return {name.decode(): value.decode() for name, value in fields.items()}
    except UnicodeDecodeError:
        return None


class RedisStreamDataSource(DataSource):
    """The ``timetile_redis_stream`` data source: a Redis Stream's entries, streamed.

    Reads ``id string, fields map<string,string>``; see :class:`RedisStreamReader` for the
    options.
    """

    @classmethod
    def name(cls) -> str:
        """Return the format name Spark knows it by."""
        return NAME

    def schema(self) -> str:
        """Return the raw schema: the entry id and its fields."""
        return RAW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802, ARG002
        """Return the reader of the options' stream."""
        return RedisStreamReader(dict(self.options))


@dataclass(frozen=True)
class RedisStreamSource:
    """Events as entries of a Redis Stream.

    Args:
        url: the server, as redis-py takes it: ``redis://host:port/db``, ``rediss://…``,
            ``unix:///path?db=N``.
        stream: the stream's key.
        layout: ``fields`` (one field per column) or ``json`` (one JSON field); see the module.
        field: the JSON field's name, for ``layout="json"``.
        max_entries_per_trigger: at most this many entries per micro-batch; None: all.
        start_id: a new stream reads the entries after this id (``0-0``: all of them;
            ``millis`` or ``millis-sequence``).

    >>> RedisStreamSource("redis://localhost:6379/0", "events", layout="avro")
    Traceback (most recent call last):
    ValueError: Redis stream layout 'avro': use fields or json

    """

    url: str
    stream: str
    layout: str = "fields"
    field: str = "json"
    max_entries_per_trigger: int | None = None
    start_id: str = _START

    def __post_init__(self) -> None:
        from timetile.store.redis_store import check_redis_url  # noqa: PLC0415  (lazy redis)

        check_redis_url(self.url)
        if self.layout not in LAYOUTS:
            raise ValueError(f"Redis stream layout {self.layout!r}: use {' or '.join(LAYOUTS)}")
        if not self.stream:
            raise ValueError("a Redis stream source needs the stream's key")
        if not isinstance(self.start_id, str) or not _ENTRY_ID.fullmatch(self.start_id):
            raise ValueError(
                f"Redis stream startId {self.start_id!r} is not an entry id. Fix: give "
                "0-0 (every entry) or an id such as 1700000000000-0 (the entries after it); "
                "for only new entries, the newest id now (XREVRANGE key + - COUNT 1)")

    def read_stream(self, spark: SparkSession, schema: StructType) -> DataFrame:
        """Return the stream's entries as a streaming DataFrame of ``schema``. No job runs.

        Registers the data source with ``spark`` (again is harmless).
        """
        spark.dataSource.register(RedisStreamDataSource)
        reader = (spark.readStream.format(NAME).option("url", self.url)
                  .option("stream", self.stream).option("startId", self.start_id))
        if self.max_entries_per_trigger is not None:
            reader = reader.option("maxEntriesPerTrigger", str(self.max_entries_per_trigger))
        raw = reader.load()
        fields = F.col("fields")
        # CORRUPT holds what could not be read, so it is counted: an entry that is not UTF-8
        # (null fields), a json field missing or of a wrong-typed value, or a field (a time
        # in JSON) whose text its column's type cannot read (read_columns)
        read_as = text_schema(spark, schema, self.describe())  # times: the batch side's
        if self.layout == "json":
            text = fields.getItem(self.field)
            parsed = F.from_json(text, StructType([*read_as.fields,
                                                   StructField(CORRUPT, StringType())]),
                                 {"columnNameOfCorruptRecord": CORRUPT})
            event = F.col("_tt_event")
            columns, unread = read_columns([event.getField(f.name) for f in schema.fields],
                                           schema, read_texts)
            return raw.select(parsed.alias("_tt_event"), text.alias("_tt_text")).select(
                *columns, F.when(event.isNull(), F.coalesce(F.col("_tt_text"), F.lit("")))
                .otherwise(F.coalesce(event.getField(CORRUPT), F.when(unread, F.col("_tt_text"))))
                .alias(CORRUPT))
        columns, unread = read_columns([fields.getItem(f.name) for f in schema.fields], schema,
                                       read_text)
        return raw.select(*columns, F.when(fields.isNull(), F.lit(""))
                          .when(unread, F.to_json(fields)).alias(CORRUPT))

    def describe(self) -> str:
        """Name the source in logs and messages (without a password)."""
        parts = urllib.parse.urlsplit(self.url)
        where = (f"{parts.hostname}:{parts.port or 6379}{parts.path}" if parts.hostname
                 else parts.path)
        return f"redis stream {self.stream!r} on {parts.scheme}://{where}"
