"""Running a contender under a time limit, and the correctness check.

A contender that runs past ``--timeout`` is abandoned, not waited for: Spark jobs run in a job
group that a watchdog thread cancels (again and again until the contender returns, so that a
plan made of several jobs stops too), and DuckDB queries are stopped with
``Connection.interrupt()``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from _contenders import Contender, Inputs
from pyspark.sql import SparkSession

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Outcome:
    """What one timed run gave: seconds, or why there are none."""

    status: str  # "ok", "timeout" or "error"
    seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Watchdog:
    """Calls ``cancel`` every half second once ``timeout`` seconds have passed, until closed."""

    def __init__(self, timeout: float, cancel: Callable[[], None]) -> None:
        self.timeout, self.cancel = timeout, cancel
        self.fired = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        if self._done.wait(self.timeout):
            return
        self.fired = True
        while not self._done.is_set():
            with suppress(Exception):  # keep trying until the contender returns
                self.cancel()
            self._done.wait(0.5)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


class Runner:
    """Runs contenders on one SparkSession and fresh DuckDB connections."""

    def __init__(self, spark: SparkSession, *, duck_threads: int, duck_tmp: Path,
                 segtree_default: str | None) -> None:
        self.spark = spark
        self.duck_threads = duck_threads
        self.duck_tmp = duck_tmp
        self.segtree_default = segtree_default
        self._groups = 0

    def _duck(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        con.execute(f"SET threads = {self.duck_threads}")
        con.execute(f"SET temp_directory = '{self.duck_tmp}'")
        return con

    @contextmanager
    def _spark_conf(self, contender: Contender) -> Iterator[None]:
        for key, value in contender.conf.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key in contender.conf:
                if key.endswith("segmentTree.enabled") and self.segtree_default is not None:
                    self.spark.conf.set(key, self.segtree_default)
                else:
                    self.spark.conf.unset(key)

    def _limited(self, contender: Contender, timeout: float,
                 work: Callable[[Any], Any]) -> tuple[Outcome, Any]:
        """Run ``work(handle)`` (handle: a DuckDB connection or None) within ``timeout``, then
        drop whatever a Spark contender cached."""
        if contender.engine == "duckdb":
            con = self._duck()
            cancel: Callable[[], None] = con.interrupt
            handle: Any = con
        else:
            self._groups += 1
            group = f"bench-{self._groups}"
            context = self.spark.sparkContext
            context.setJobGroup(group, contender.title, interruptOnCancel=True)
            cancel, handle = (lambda: context.cancelJobGroup(group)), None
        started = time.perf_counter()
        value = None
        try:
            with Watchdog(timeout, cancel) as dog, self._spark_conf(contender):
                try:
                    value = work(handle)
                    outcome = Outcome("ok", time.perf_counter() - started)
                except Exception as exc:  # reported in the table; the run goes on
                    elapsed = time.perf_counter() - started
                    if dog.fired:
                        outcome = Outcome("timeout", elapsed)
                    else:
                        first = str(exc).strip().splitlines()[0][:300] if str(exc) else ""
                        outcome = Outcome("error", elapsed, f"{type(exc).__name__}: {first}")
        finally:
            if handle is not None:
                handle.close()
            else:
                self.spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
                # What a contender cached (timetile's tiled pass keeps its first stage) must
                # not hold memory while the next one runs; the inputs are never cached.
                self.spark.catalog.clearCache()
        return outcome, value

    def timed(self, contender: Contender, inputs: Inputs, timeout: float) -> Outcome:
        """Build and materialize the contender's result: the seconds reported."""
        def work(con: duckdb.DuckDBPyConnection | None) -> None:
            built = contender.build(inputs)
            if con is not None:
                con.execute(f"CREATE OR REPLACE TEMP TABLE bench_result AS {built}")
                con.execute("DROP TABLE bench_result")
            else:
                built.write.format("noop").mode("overwrite").save()  # type: ignore[union-attr]

        outcome, _ = self._limited(contender, timeout, work)
        return outcome

    def rows(self, contender: Contender, inputs: Inputs,
             timeout: float) -> tuple[Outcome, list[Row] | None]:
        """The contender's result rows on ``inputs`` (the check's sample), untimed."""
        def work(con: duckdb.DuckDBPyConnection | None) -> list[Row]:
            built = contender.build(inputs)
            if con is not None:
                return [tuple(row) for row in con.execute(str(built)).fetchall()]
            return [tuple(row) for row in built.collect()]  # type: ignore[union-attr]

        return self._limited(contender, timeout, work)


def _same(a: Any, b: Any, rel: float) -> bool:
    """Equal, numbers within ``rel`` (NaN equal to NaN), lists element by element, maps by
    key."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key], rel) for key in a)
    numbers = (int, float)
    if not (isinstance(a, numbers) and isinstance(b, numbers)):
        return bool(a == b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=rel)


def compare(results: dict[str, list[Row]], columns: Sequence[str],
            rel: float = 1e-9) -> list[str]:
    """Warnings for every contender whose rows differ from the first one's (empty: agree)."""
    if len(results) < 2:
        return []
    names = list(results)
    base_name = names[0]
    base = {row[:2]: row[2:] for row in results[base_name]}
    warnings = []
    for name in names[1:]:
        other = {row[:2]: row[2:] for row in results[name]}
        problems = []
        if len(results[name]) != len(other):
            problems.append(f"{len(results[name]) - len(other)} repeated queries")
        missing, extra = base.keys() - other.keys(), other.keys() - base.keys()
        if missing or extra:
            problems.append(f"{len(missing)} queries missing, {len(extra)} extra")
        differing = []
        for query in sorted(base.keys() & other.keys()):
            for column, a, b in zip(columns[2:], base[query], other[query], strict=True):
                if not _same(a, b, rel):
                    differing.append(f"key={query[0]} ts={query[1]} {column}: {a!r} vs {b!r}")
        if differing:
            problems.append(f"{len(differing)} values differ, e.g. {differing[0]}")
        if problems:
            warnings.append(f"WARNING: {name} disagrees with {base_name}: "
                            + "; ".join(problems))
    return warnings
