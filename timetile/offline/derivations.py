"""Derivations: per-row Spark SQL columns over a Join's output (``Join.derivations``).

The output of a backfill is the left columns, unchanged and first (DESIGN §2, contract),
then :meth:`Join.final_columns`: every feature column when there are no derivations or
``"*"`` keeps them, then the derived columns in the given order. Each expression is Spark
SQL over the left columns and every feature column, kept or not, and gives one value per
row: aggregates, window functions, generators (``explode``) and subqueries are refused,
since they would make a row depend on other rows or change the number of rows.

:func:`check_derivations` analyzes every expression against the real schemas (no Spark job
runs) and raises :class:`DefinitionError` before any job starts; :func:`apply_derivations`
computes them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pyspark.errors import AnalysisException
from pyspark.logger import PySparkLogger
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from timetile.api.errors import DefinitionError, Problem, one_of
from timetile.api.join import Join
from timetile.offline.executors.entity import entity_output_fields
from timetile.offline.executors.features import feature_fields
from timetile.offline.plan import AnyPartPlan, BackfillPlan, EntityPartPlan
from timetile.spark.sources import quote

#: PySpark logs every analysis error with its query context before raising it; the checks
#: below expect errors and report them as definition problems, so they silence these.
_SPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+.*$", re.DOTALL)
_CONDITION = re.compile(r"^\[[A-Z_.]+\]\s*")
_REASON_CHARS = 200
#: What a WHERE clause refuses, by Spark's error condition: an expression that a WHERE
#: refuses but a SELECT takes is not one value per row.
_NOT_PER_ROW = {
    "INVALID_WHERE_CONDITION": "it aggregates rows",
    "WINDOW_FUNCTION_NOT_ALLOWED_IN_CLAUSE": "it is a window function",
    "UNSUPPORTED_GENERATOR": "it generates rows",
}
_CLOSE_NAMES = 3


def apply_derivations(join: Join, frame: DataFrame) -> DataFrame:
    """Return ``frame`` with ``join``'s derivations applied. Lazy: no job runs.

    Args:
        join: the definition.
        frame: the left columns (any, in order), then every column of
            ``join.output_columns()``.

    Returns:
        ``frame`` itself without derivations; otherwise the left columns unchanged, then
        ``join.final_columns()``.

    """
    if not join.derivation_items:
        return frame
    features = set(join.output_columns())
    left = [column for column in frame.columns if column not in features]
    kept = join.output_columns() if join.keeps_features else []
    derived = [F.expr(expression).alias(name) for name, expression in join.derivation_items]
    return frame.select(*[F.col(quote(column)) for column in [*left, *kept]], *derived)


def check_derivations(join: Join, frame: DataFrame) -> None:
    """Raise :class:`DefinitionError` listing every derivation that cannot work on ``frame``.

    Spark analyzes each expression over ``frame`` (the left columns, then every feature
    column, with their real types); no job runs. A problem is at field
    ``derivations['name']`` when the expression does not parse, names an unknown column
    (the fix lists the closest names), does not type-check, is not one value per row
    (an aggregate, a window function, a generator), has no type (a bare ``NULL``), or when
    the derived name is a left column's or a kept feature column's (case-insensitively).

    Args:
        join: the definition.
        frame: left and feature columns, as :func:`apply_derivations` takes; its rows do
            not matter (see :func:`schema_frame`).

    """
    if not join.derivation_items:
        return
    features = set(join.output_columns())
    left = [column for column in frame.columns if column not in features]
    taken = {column.casefold(): column for column in left}
    if join.keeps_features:
        taken.update({column.casefold(): column for column in features})
    problems = []
    with _quiet_spark_errors():
        for name, expression in join.derivation_items:
            field = f"derivations[{name!r}]"
            if name.casefold() in taken:
                what = "a left column" if taken[name.casefold()] in left else "a feature column"
                problems.append(Problem(field, f"{name!r} is {what}'s name too, and the output "
                                        "keeps it", "give the derived column another name"))
            problem = _expression_problem(frame, field, expression)
            if problem is not None:
                problems.append(problem)
    if problems:
        raise DefinitionError(f"Join {join.name!r}", problems)


def schema_frame(plan: BackfillPlan) -> DataFrame:
    """Return an empty frame shaped like a backfill's output before derivations. No job runs.

    The left columns with their types, then a typed null column per feature column, as the
    executors type them.
    """
    left = plan.left.select(*[F.col(quote(column)) for column in plan.left_columns])
    nulls = [F.lit(None).cast(field.dataType).alias(field.name)
             for part in plan.parts for field in _output_fields(part)]
    return left.select("*", *nulls).limit(0)


def check_plan(plan: BackfillPlan) -> None:
    """Check a backfill's derivations against its real schemas (:func:`check_derivations`)."""
    if plan.join.derivation_items:
        check_derivations(plan.join, schema_frame(plan))


def _output_fields(part: AnyPartPlan) -> list[T.StructField]:
    """Return a part's output columns with the types its executor gives them."""
    if isinstance(part, EntityPartPlan):
        return entity_output_fields(part)
    return feature_fields(part.features)


def _expression_problem(frame: DataFrame, field: str, expression: str) -> Problem | None:
    """Return the problem with one expression over ``frame``, or None. No job runs."""
    columns = frame.columns
    try:
        analyzed = frame.select(F.expr(expression).alias("_tt_derived"))
        data_type = analyzed.schema["_tt_derived"].dataType
    except AnalysisException as error:  # ParseException is one too
        reason = _reason(error)
        unknown = _unknown_column(error)
        if unknown is not None:
            return Problem(field, f"Spark cannot use {expression!r}: {reason}",
                           _close_columns(unknown, columns))
        return Problem(field, f"Spark cannot use {expression!r}: {reason}",
                       "write one Spark SQL expression over the left and feature columns, "
                       "e.g. 'a / nullif(b, 0)'")
    try:  # a WHERE clause refuses aggregates, window functions and generators
        _ = frame.where(F.isnull(F.expr(expression))).schema  # analysis only
    except AnalysisException as error:
        condition = (error.getCondition() or "").split(".")[0]
        why = _NOT_PER_ROW.get(condition, _reason(error))
        return Problem(field, f"{expression!r} is not one value per row: {why}",
                       "compute from the row's own columns: no aggregates (sum, count), "
                       "window functions (OVER) or generators (explode)")
    if _holds_subquery(analyzed):
        return Problem(field, f"{expression!r} holds a subquery, which reads rows other than "
                       "its own (and may read past the row's time)",
                       "compute from the row's own columns; join what else it needs to the "
                       "left rows before the backfill")
    if isinstance(data_type, T.NullType):
        return Problem(field, f"{expression!r} has no type", "cast it, e.g. "
                       "'CAST(NULL AS DOUBLE)'")
    return None


def _holds_subquery(frame: DataFrame) -> bool:
    """Whether the analyzed expressions of ``frame``'s last step hold a subquery.

    A walk of the Catalyst expression tree through py4j (a node per call; an expression has
    few): a WHERE clause takes scalar, ``EXISTS`` and ``IN`` subqueries, so that check
    cannot see them.
    """
    jvm = frame.sparkSession.sparkContext._jvm
    assert jvm is not None
    subquery = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.catalyst.expressions.SubqueryExpression")
    expressions = frame._jdf.queryExecution().analyzed().expressions()
    stack = [expressions.apply(i) for i in range(expressions.size())]
    while stack:
        node = stack.pop()
        if subquery.isInstance(node):
            return True
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return False


def _reason(error: AnalysisException) -> str:
    """Spark's reason, briefly: the message without its condition, SQLSTATE and suggestions."""
    message = (error.getMessage() or str(error)).strip().split("\n")[0]
    message = _SQLSTATE.sub("", _CONDITION.sub("", message))
    message = message.split(" Did you mean one of the following?")[0].rstrip(". ")
    return message if len(message) <= _REASON_CHARS else message[:_REASON_CHARS] + "…"


def _unknown_column(error: AnalysisException) -> str | None:
    """Return the column name Spark could not resolve, or None for another error."""
    if not (error.getCondition() or "").startswith("UNRESOLVED_COLUMN"):
        return None
    name = (error.getMessageParameters() or {}).get("objectName", "")
    return ".".join(part.strip("`") for part in name.split("`.`")) or None


def _close_columns(name: str, columns: Sequence[str]) -> str:
    """Return a fix naming the columns closest to ``name``, or all when none is close."""
    close = difflib.get_close_matches(name, columns, n=_CLOSE_NAMES, cutoff=0.5)
    if not close:
        return one_of(name, columns)
    names = ", ".join(close)
    return f"use a left or feature column; the closest to {name!r}: {names}"


@contextmanager
def _quiet_spark_errors() -> Iterator[None]:
    """Keep PySpark from logging the analysis errors a check expects and reports itself."""
    # PySpark's own class: a plain logger made first under these names would stay, and
    # PySpark's later calls (with its extra arguments) would fail on every error.
    loggers = [PySparkLogger.getLogger(name) for name in _SPARK_ERROR_LOGGERS]
    before = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, before, strict=True):
            logger.disabled = disabled
