"""Reading a Join's response logs for the consistency job, and their rows as left rows.

:func:`read_logs` keeps the rows of this Join and definition that have every column a
:class:`~timetile.online.response_log.ResponseLog` writes, and counts and names the rest;
:func:`left_rows` casts each row's logged keys to the types of the Join's left source. Both
run one Spark job; nothing of event size comes to the driver. See
:mod:`timetile.verify.consistency` for which rows are compared.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from timetile.api.join import Join
from timetile.api.sources import EventSource
from timetile.core.locations import local_path
from timetile.online.response_log import SCHEMA
from timetile.spark.sources import literal_path, load
from timetile.store.layout import part_signatures

log = logging.getLogger(__name__)

#: The log columns a left row carries through the backfill; key columns may not take them.
LOG_COLUMNS = ("request_id", "row_index", "request_time", "log_keys", "log_features",
               "log_stale")


class ConsistencyError(Exception):
    """The logs cannot be compared: none for the Join, unreadable, or keys the left lacks."""


def logs_path(logs_dir: str | os.PathLike[str], join: str) -> str:
    """Return the folder of ``join``'s logs under ``logs_dir``; a local one must exist.

    Raises:
        ConsistencyError: a local ``logs_dir`` has no folder for ``join``.

    """
    text = os.fspath(logs_dir)
    local = "://" not in text and not text.startswith("file:")
    path = str(Path(text) / join) if local else f"{text.rstrip('/')}/{join}"
    if local and not Path(path).is_dir():
        raise ConsistencyError(
            f"No response logs of Join {join!r} under {text}: {path} does not exist. Fix: "
            f"serve with --log-dir {text} (or log fetches with a ResponseLog) first, or pass "
            f"the directory that holds the {join} folder")
    return path


#: How ``features`` is read in Spark: as the Comparer's ``json.loads`` reads it (no single
#: quotes), so that a row Spark finds usable holds the values Python compares.
_JSON_OPTIONS = {"allowSingleQuotes": "false"}


def _features_map(column: str = "features") -> Column:
    """Read the logged features as a map of JSON texts, null where they are no JSON object."""
    return F.from_json(column, T.MapType(T.StringType(), T.StringType()), _JSON_OPTIONS)


#: Per column a ResponseLog always writes: what a row lacks when that check is true. A row
#: lacking any of them is unusable: left out and counted.
_UNUSABLE: dict[str, tuple[Callable[[], Column], str]] = {
    "request_id": (lambda: F.col("request_id").isNull(), "null"),
    "join": (lambda: F.col("join").isNull(), "null"),
    "row_index": (lambda: F.col("row_index").isNull(), "null"),
    "request_time": (lambda: F.col("request_time").isNull(), "null"),
    "keys": (lambda: F.col("keys").isNull(), "null"),
    "features": (lambda: _features_map().isNull(), "null or not a JSON object"),
    "stale": (lambda: F.col("stale").isNull(), "null"),
}


def read_logs(spark: SparkSession, path: str, join: Join) -> tuple[DataFrame, int]:
    """Return the usable log rows of ``join``'s definition; count the rest (one job).

    A row is left out, counted and warned about when it lacks a column a ResponseLog always
    writes (:data:`_UNUSABLE`: a null ``request_id``, ``join``, ``row_index``,
    ``request_time``, ``keys`` or ``stale``, or ``features`` that are not a JSON object);
    when its ``join`` names another Join; when its features lack one of the Join's
    features that other rows hold: the Fetcher logs every feature of its definition, nulls
    included, so such a row was served by another definition of the Join (one changed
    while it logged), and none of its values is compared; or when its ``definition`` gives
    one of ``join``'s parts another digest than :func:`~timetile.store.layout.part_signatures`,
    or none (a part changed without changing names: a ``where`` added). Parts the row's
    Join had beyond ``join``'s do not matter, as extra features do not. A row without
    ``definition`` (a file of an earlier build, a result no Fetcher made) is told apart by
    names only.

    Raises:
        ConsistencyError: no logs at ``path``, an empty local log file (its rows lost), files
            that are not response logs, no usable row, none of ``join``, a feature of
            ``join`` that no usable row holds, or no row of ``join``'s definition (the logs
            of another definition).

    """
    names = join.output_columns()
    lacks = {column: check() for column, (check, _) in _UNUSABLE.items()}
    usable = ~functools.reduce(operator.or_, lacks.values())  # each check is never null
    ours = F.col("join") == join.name
    lacking = F.array_sort(F.array_except(F.array(*map(F.lit, names)),
                                          F.map_keys(_features_map())))
    # null where the row does not say (files of earlier builds): then only names tell
    digests = F.from_json("definition", T.MapType(T.StringType(), T.StringType()),
                          _JSON_OPTIONS)
    same = functools.reduce(operator.and_, (digests.getItem(label) == digest for label, digest
                                            in part_signatures(join).items()))
    redefined = F.col("definition").isNotNull() & ~F.coalesce(same, F.lit(False))
    _refuse_empty_files(path)
    try:
        logs = spark.read.schema(from_arrow_schema(SCHEMA)).parquet(literal_path(path))
        groups = logs.groupBy(  # few groups: the unusable rows, one per other Join and
            F.when(usable & ~ours, F.col("join")).alias("other"),  # per definition
            F.when(usable & ours, lacking).alias("lacking"),
            F.when(usable & ours, redefined).alias("redefined"),
        ).agg(F.count(F.lit(1)).alias("rows"),
              *(F.count_if(bad).alias(column) for column, bad in lacks.items()),
              ).collect()  # reads every column: corrupt files fail
    except (PySparkException, Py4JJavaError) as error:
        if isinstance(error, AnalysisException) and error.getCondition() == "PATH_NOT_FOUND":
            raise ConsistencyError(
                f"No response logs under {path}: the path does not exist. Fix: serve with "
                "--log-dir (or log fetches with a ResponseLog) first, or pass the directory "
                "that holds the Join's folder") from None
        raise ConsistencyError(
            f"Cannot read the response logs under {path}: {_cause(error)}. Fix: remove or "
            "repair the files that are not response logs (ResponseLog writes "
            "part-*.parquet files of its SCHEMA)") from None
    total = sum(group["rows"] for group in groups)
    unusable = sum(group["rows"] for group in groups
                   if group["other"] is None and group["lacking"] is None)
    lacked = _lacked(groups, path) if unusable else ""
    if unusable:
        log.warning("%s: %s of %s logged rows are unusable and left out (%s); %s", path,
                    f"{unusable:,}", f"{total:,}", lacked, _LOGGED)
    if total == unusable:
        fix = (f"rewrite or remove those rows or files: {_LOGGED}" if total else
               "serve some requests with logging on first")
        raise ConsistencyError(
            f"The response logs under {path} hold no usable row ({total:,} rows"
            + (f"; {lacked}" if total else "") + f"). Fix: {fix}")
    others: dict[str, int] = {}
    for group in groups:
        if group["other"] is not None:
            others[group["other"]] = others.get(group["other"], 0) + group["rows"]
    other = sum(others.values())
    named = ", ".join(f"{name!r} ({count:,})" for name, count in
                      sorted(others.items(), key=lambda item: -item[1])[:5])
    if other == total - unusable:
        raise ConsistencyError(
            f"None of the {other:,} usable logged rows under {path} is of Join {join.name!r}: "
            f"their join column names {named}{' and more' if len(others) > 5 else ''}. Fix: "
            "pass the definitions of the Join that served these logs, or the logs of "
            f"{join.name!r}")
    if other:
        log.warning("%s: %s logged rows are of another Join (%s%s), not %r, and are left out",
                    path, f"{other:,}", named, " and more" if len(others) > 5 else "",
                    join.name)
    kept = _rows_of_this_definition(groups, names, join, path)
    return (logs.where(usable & ours & (F.size(lacking) == 0) & ~redefined), total - kept)


def _rows_of_this_definition(groups: Sequence[Any], names: Sequence[str], join: Join,
                             path: str) -> int:
    """Return how many usable rows of ``join`` its definition served; warn of the others.

    ``groups`` are :func:`read_logs`'s counts; of the rows of ``join``, those lacking some
    of its features (``lacking``) or naming another definition (``redefined``) were served
    by another definition.

    Raises:
        ConsistencyError: a feature no row holds, or no row of this definition.

    """
    definitions: dict[tuple[str, ...], int] = {}  # rows, by the features they lack
    for group in groups:
        if group["lacking"] is not None:
            lacked: tuple[str, ...] = tuple(group["lacking"])
            definitions[lacked] = definitions.get(lacked, 0) + int(group["rows"])
    lacked_by_all = functools.reduce(operator.and_, (set(gone) for gone in definitions))
    held = set(names) - lacked_by_all
    if len(held) < len(names):
        absent = [name for name in names if name not in held]
        raise ConsistencyError(
            f"No usable logged row under {path} holds the feature"
            f"{'s' if len(absent) > 1 else ''} {', '.join(absent[:10])}"
            f"{f' (and {len(absent) - 10} more)' if len(absent) > 10 else ''} of Join "
            f"{join.name!r}, and the Fetcher logs every feature of its Join, nulls included: "
            "these logs were served by another definition (an aggregation or window added "
            "or changed since). Fix: pass the definitions of the Join that served these logs")
    changed = {gone: rows for gone, rows in definitions.items() if gone}
    if changed:
        gone = sorted({name for lost in changed for name in lost}, key=names.index)
        log.warning("%s: %s logged rows of Join %r lack some of its features (%s%s): served "
                    "by another definition of it, they are left out", path,
                    f"{sum(changed.values()):,}", join.name, ", ".join(gone[:10]),
                    " and more" if len(gone) > 10 else "")
    if not definitions.get(()):
        raise ConsistencyError(
            f"No usable logged row of Join {join.name!r} under {path} holds all of its "
            "features: each was served by another definition. Fix: pass the definitions of "
            "the Join that served these logs")
    redefinitions = sum(int(group["rows"]) for group in groups
                        if group["lacking"] == [] and group["redefined"])
    kept = definitions[()] - redefinitions
    if not kept:
        raise ConsistencyError(
            f"None of the {redefinitions:,} logged rows of Join {join.name!r} under {path} "
            "that hold all of its features was served by this definition of it: their "
            "definition column gives some of its GroupBys another digest, or none (since, a "
            "GroupBy was added, or one changed its source's where, select or time column, a "
            "key, its accuracy or an aggregation, or a prefix or key mapping changed). Fix: "
            "pass the definitions of the Join that served these logs")
    if redefinitions:
        log.warning("%s: %s logged rows of Join %r were served by another definition of it "
                    "(their definition column gives some of its GroupBys another digest: a "
                    "source, key, aggregation, prefix or key mapping changed), they are left "
                    "out", path, f"{redefinitions:,}", join.name)
    return kept


def _refuse_empty_files(path: str) -> None:
    """Refuse local log files of 0 bytes, which Spark would skip without a word.

    A ResponseLog syncs a file before naming it, so one is left only by an OS crash under an
    earlier build, or by hand; whatever rows it held are lost, which the job must not hide.

    Raises:
        ConsistencyError: naming the empty files.

    """
    empty = [file.name for file, size in _local_files(path) if size == 0]
    if empty:
        raise ConsistencyError(
            f"{len(empty):,} response log file{'s' if len(empty) > 1 else ''} under {path} "
            f"{'are' if len(empty) > 1 else 'is'} empty ({', '.join(empty[:3])}"
            f"{' and more' if len(empty) > 3 else ''}): what {'they' if len(empty) > 1 else 'it'} "
            "held was lost (an OS crash while it was written, under a build that did not "
            "sync log files). Fix: remove the empty files and run again; their rows cannot "
            "be compared")


def _local_files(path: str) -> list[tuple[Path, int]]:
    """Return the files Spark reads in a local log folder, by name, with their sizes.

    Those not hidden (Spark skips names that start with ``.`` or ``_``, as a ResponseLog's
    temporary files do); none for logs that are not on the local disk (a ``file:`` URI is).
    """
    folder = local_path(path)
    if folder is None or not folder.is_dir():
        return []
    found = []
    for file in sorted(folder.iterdir()):
        if file.name.startswith((".", "_")):
            continue
        try:
            if file.is_file():
                found.append((file, file.stat().st_size))
        except OSError:  # gone since it was listed
            continue
    return found


#: Where the fix of logs that lack columns begins.
_LOGGED = ("a ResponseLog writes every column of its SCHEMA (request_id, join, row_index, "
           "request_time, served_at, keys, features, stale, definition)")


def _lacked(groups: Sequence[Any], path: str) -> str:
    """Say how many rows lack each column, and which local files have no such column."""
    counts = {column: sum(group[column] for group in groups) for column in _UNUSABLE}
    said = [f"{column} {_UNUSABLE[column][1]} in {count:,}"
            for column, count in counts.items() if count]
    missing = _files_without(path, [column for column, count in counts.items() if count])
    said.extend(f"{column} absent from the file{'s' if len(files) > 1 else ''} "
                f"{', '.join(files[:3])}{' and more' if len(files) > 3 else ''}"
                for column, files in missing.items())
    return "; ".join(said)


def _files_without(path: str, columns: Sequence[str]) -> dict[str, list[str]]:
    """Per column, the local log files whose Parquet schema lacks it (their footers only).

    Spark reads such a column as nulls; empty for logs that are not on the local disk.
    """
    if not columns:
        return {}
    found: dict[str, list[str]] = {}
    for file, _ in _local_files(path):
        try:
            names = set(pq.read_schema(file).names)
        except (OSError, ValueError):  # Spark read it: a race with a writer, at worst
            continue
        for column in columns:
            if column not in names:
                found.setdefault(column, []).append(file.name)
    return found


_JAVA_ERROR = re.compile(r"^(Caused by: )?[\w.$]+(Exception|Error): (.+)$")


def _cause(error: Exception) -> str:
    """Return the root cause of a Spark error in one line: the last Java "Caused by"."""
    lines = [line.strip() for line in str(error).splitlines()]
    found = [match for match in map(_JAVA_ERROR.match, lines) if match is not None]
    causes = [match for match in found if match.group(1)] or found
    text = causes[-1].group(3) if causes else (lines[0] if lines else type(error).__name__)
    return text.rstrip(". ")[:300]


def left_rows(spark: SparkSession, join: Join, logs: DataFrame) -> tuple[DataFrame, int]:
    """Each log row as a left row: key columns (the left source's types), time, log columns.

    A row whose keys lack one of the Join's, or hold a value that does not read as its
    column's type, was not a fetch of this Join's keys: it is left out, and counted (one job).

    Raises:
        ConsistencyError: no row holds this Join's keys.

    """
    keys = list(dict.fromkeys(key for part in join.join_parts for key in part.left_keys))
    taken = sorted(set(keys) & set(LOG_COLUMNS))
    if taken:
        raise ConsistencyError(
            f"Join {join.name!r} has key columns named {', '.join(taken)}, which the "
            f"consistency job uses for the log's own columns. Fix: rename them in the left "
            "source's select")
    schema = _left_schema(spark, join)
    lacking = [key for key in keys if key not in schema.names]
    if lacking:
        raise ConsistencyError(
            f"The left source of Join {join.name!r} has no column {', '.join(lacking)}, so "
            "the logged keys have no type to take. Fix: select the key columns in the left "
            "source")
    parsed = F.from_json("keys", T.MapType(T.StringType(), T.StringType()))
    readable = F.lit(True)
    for key in keys:
        text = parsed.getItem(key)
        readable &= F.map_contains_key(parsed, key) & (
            text.isNull() | _typed(text, schema[key].dataType).isNotNull())
    rows = logs.select(
        *(_typed(parsed.getItem(key), schema[key].dataType).alias(key) for key in keys),
        "request_id", "row_index", "request_time", F.col("keys").alias("log_keys"),
        F.col("features").alias("log_features"), F.col("stale").alias("log_stale"),
        F.coalesce(readable, F.lit(False)).alias("_tt_readable"))
    counted = rows.agg(F.count(F.lit(1)), F.count_if(~F.col("_tt_readable"))).first()
    assert counted is not None
    total, unreadable = int(counted[0]), int(counted[1] or 0)
    if unreadable == total:
        raise ConsistencyError(
            f"None of the {total:,} usable logged rows holds Join {join.name!r}'s keys "
            f"({', '.join(keys)}, each of its left column's type). Fix: pass the definitions "
            "of the Join that served these logs")
    if unreadable:
        log.warning("%s of the logged rows have keys that are not Join %r's key columns; "
                    "they are left out", f"{unreadable:,}", join.name)
    return rows.where("_tt_readable").drop("_tt_readable"), unreadable


def _left_schema(spark: SparkSession, join: Join) -> T.StructType:
    """Return the left source's schema after its select (no job runs).

    Raises:
        ConsistencyError: Spark cannot read the left source.

    """
    table = join.left.table if isinstance(join.left, EventSource) else \
        join.left.snapshot_table
    try:
        return load(spark, join.left, table, "left").schema
    except (PySparkException, Py4JJavaError) as error:
        shown = table if isinstance(table, str) else type(table).__name__
        raise ConsistencyError(
            f"Cannot read join.left of Join {join.name!r} ({shown}): {_cause(error)}. The "
            "logged keys take the types of its key columns. Fix: pass a left source Spark "
            "can read (a table that exists, a Parquet path or a DataFrame) with the key "
            "columns") from None


def _typed(text: Column, data_type: T.DataType) -> Column:
    """Cast a logged key (JSON text) to ``data_type``, null where it is not one.

    Integral keys accept ``7.0`` too, but ``7.5`` is no key of the type (null), not 7.
    """
    if isinstance(data_type, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        decimal = text.try_cast("decimal(38,6)")
        return F.coalesce(text.try_cast(data_type),
                          F.when(decimal == F.floor(decimal), decimal.try_cast(data_type)))
    return text.try_cast(data_type)


