"""Checks of definitions against the schemas of their sources, before any job starts.

Schemas are engine-free here: a mapping from column name to a coarse type name, one of
``int float string bool timestamp date`` or the engine's own name for anything else. The
offline layer reads them off Spark DataFrames (after ``select`` and ``where``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from timetile.api.errors import DefinitionError, Problem, one_of
from timetile.api.group_by import GroupBy
from timetile.api.join import Join
from timetile.api.sources import EventSource
from timetile.core.aggregators import OPS
from timetile.core.types import ValueType

Schema = Mapping[str, str]

#: Column types a time column may have: epoch milliseconds, timestamps, ISO strings.
TIME_TYPES = frozenset({"int", "timestamp", "string"})
#: Column types an aggregation may read.
VALUE_TYPES = frozenset(value.value for value in ValueType)
#: Type names of nested (and semi-structured) columns, which cannot key a GroupBy: the
#: executors group by one value.
_NESTED_TYPES = ("array<", "struct<", "map<", "variant")
#: How a string of a collation other than byte order starts (``string collate UTF8_LCASE``).
COLLATED = "string collate "


def _collation_problem(field: str, column: str, kind: str) -> Problem:
    """Describe a collated string column: timetile compares strings by their bytes."""
    return Problem(field, f"{column!r} is {kind}, whose equal strings may differ in bytes, and "
                   "timetile compares strings by their bytes (online, and in its executors)",
                   f"select it as bytes that are equal when the strings are: {{'{column}': "
                   f"'CAST(lower({column}) AS STRING COLLATE UTF8_BINARY)'}} for UTF8_LCASE, "
                   f"or without lower() to tell all bytes apart")


def _missing(field: str, column: str, label: str, schema: Schema) -> Problem:
    return Problem(field, f"{column!r} is not a column of {label}", one_of(column, schema))


def time_problems(field: str, column: str | None, label: str, schema: Schema) -> list[Problem]:
    """Problems with a time column: absent, or of a type that is not a time."""
    if column is None:
        return []
    if column not in schema:
        return [_missing(field, column, label, schema)]
    if schema[column] not in TIME_TYPES:
        return [not_a_time(field, column, schema[column])]
    return []


def event_known_at(source: object) -> str | None:
    """Return an event source's ``known_at`` column, or None.

    An entity source's names a column of its mutation table, checked where that is read.
    """
    return source.known_at if isinstance(source, EventSource) else None


def not_a_time(field: str, column: str, kind: str) -> Problem:
    """Describe a time column of type ``kind``, which holds no time, with the fix."""
    return Problem(field, f"{column!r} is {kind}, not a time",
                   "use epoch milliseconds (bigint), a timestamp or an ISO-8601 string"
                   + (f"; for the day's start, select {{{column!r}: 'CAST({column} AS "
                      "TIMESTAMP)'}" if kind == "date" else ""))


def _dotted_problems(field: str, names: Sequence[str | None]) -> list[Problem]:
    """Column names Spark would read as a struct field (a dot) or a quoted name (a backtick)."""
    return [Problem(field, f"{name!r} holds a dot or a backtick, which Spark reads as a "
                    "struct field or a quote", f"rename it in the source's select, e.g. "
                    f"{{'{name.replace('.', '_').replace('`', '')}': "
                    f"'`{name.replace('`', '``')}`'}}")
            for name in names if name is not None and ("." in name or "`" in name)]


def group_by_problems(group_by: GroupBy, schema: Schema, field: str = "") -> list[Problem]:
    """Problems of one GroupBy against its source's schema."""
    label = group_by.source.label
    problems = _dotted_problems(f"{field}keys", group_by.keys)
    problems += _dotted_problems(f"{field}source.select", group_by.lookup_columns)
    problems += _dotted_problems(f"{field}source.time_column", [group_by.time_column])
    problems += _dotted_problems(f"{field}source.known_at", [event_known_at(group_by.source)])
    for index, aggregation in enumerate(group_by.aggregations or ()):
        problems += _dotted_problems(f"{field}aggregations[{index}].column", [aggregation.column])
        problems += _dotted_problems(f"{field}aggregations[{index}].buckets",
                                     aggregation.buckets or ())
    if problems:
        return problems
    problems = time_problems(f"{field}source.time_column", group_by.time_column, label, schema)
    problems += time_problems(f"{field}source.known_at", event_known_at(group_by.source),
                              label, schema)
    problems += [_missing(f"{field}keys", key, label, schema)
                 for key in group_by.keys if key not in schema]
    problems += [Problem(f"{field}keys", f"key {key!r} is {schema[key]}, and a key must be one "
                         "value (a number, string, boolean, date, timestamp or binary)",
                         f"cast it in the source's select, e.g. {{'{key}': 'to_json({key})'}}, "
                         "or key by its parts as several columns")
                 for key in group_by.keys if schema.get(key, "").startswith(_NESTED_TYPES)]
    problems += [_collation_problem(f"{field}keys", key, schema[key])
                 for key in group_by.keys if schema.get(key, "").startswith(COLLATED)]
    for index, aggregation in enumerate(group_by.aggregations or ()):
        where = f"{field}aggregations[{index}]"
        column_type = schema.get(aggregation.column)
        if column_type is None:
            problems.append(_missing(f"{where}.column", aggregation.column, label, schema))
        elif column_type.startswith(COLLATED):
            problems.append(_collation_problem(f"{where}.column", aggregation.column,
                                               column_type))
        elif column_type not in VALUE_TYPES:
            problems.append(Problem(
                f"{where}.column", f"{aggregation.column!r} is {column_type}, which no op reads",
                f"cast it in the source's select, e.g. {{'{aggregation.column}': "
                f"'CAST({aggregation.column} AS DOUBLE)'}}",
            ))
        elif OPS[aggregation.op].numeric_only and not ValueType(column_type).numeric:
            numeric_ops = [op for op, spec in OPS.items() if not spec.numeric_only]
            problems.append(Problem(
                f"{where}.op", f"{aggregation.op} needs a numeric column, and "
                f"{aggregation.column!r} is {column_type}",
                f"aggregate a numeric column, or use one of {', '.join(numeric_ops)}",
            ))
        problems += _bucket_problems(aggregation.buckets or (), where, label, schema)
    return problems


def _bucket_problems(buckets: Sequence[str], where: str, label: str,
                     schema: Schema) -> list[Problem]:
    """Problems of an aggregation's bucket columns: absent, or not strings."""
    problems = []
    for index, bucket in enumerate(buckets):
        field = f"{where}.buckets[{index}]"
        if bucket not in schema:
            problems.append(_missing(field, bucket, label, schema))
        elif schema[bucket].startswith(COLLATED):
            problems.append(_collation_problem(field, bucket, schema[bucket]))
        elif schema[bucket] != "string":
            problems.append(Problem(
                field, f"{bucket!r} is {schema[bucket]}, and buckets must be strings",
                f"cast it in the source's select, e.g. {{'{bucket}': "
                f"'CAST({bucket} AS STRING)'}}",
            ))
    return problems


def check_join(join: Join, left_schema: Schema, part_schemas: Mapping[str, Schema]) -> None:
    """Raise :class:`DefinitionError` listing every problem of ``join`` against its schemas.

    Args:
        join: the definition.
        left_schema: the schema of the left source.
        part_schemas: the schema of each part's source, by GroupBy name.

    """
    left_label = join.left.label
    problems = time_problems("left.time_column", join.left.time_column, left_label, left_schema)
    problems += time_problems("left.known_at", event_known_at(join.left), left_label,
                              left_schema)
    for index, part in enumerate(join.join_parts):
        field = f"parts[{index}]."
        schema = part_schemas[part.group_by.name]
        problems += group_by_problems(part.group_by, schema, field)
        for key, left_column in zip(part.group_by.keys, part.left_keys, strict=True):
            if left_column not in left_schema:
                fix = (f"add {left_column!r} to the left side, or map another left column to "
                       f"key {key!r} with key_mapping={{'<left column>': '{key}'}}")
                problems.append(Problem(f"{field}key_mapping", f"{left_column!r} is not a "
                                        f"column of the left side {left_label}", fix))
            elif key in schema and schema[key] != left_schema[left_column]:
                problems.append(Problem(
                    f"{field}keys", f"key {key!r} is {schema[key]} in {part.group_by.name} but "
                    f"{left_column!r} is {left_schema[left_column]} on the left side",
                    "cast one side in its source's select so both keys have the same type",
                ))
        left_names = {column.casefold() for column in left_schema}  # Spark ignores case
        clashes = sorted(c for c in part.output_columns() if c.casefold() in left_names)
        if clashes:
            problems.append(Problem(f"{field}prefix", f"outputs {clashes}, which the left side "
                                    "already has", "give the part a prefix"))
    if problems:
        raise DefinitionError(f"Join {join.name!r}", problems)
