"""Progress for long Spark jobs: named stages, and the running Spark job's tasks.

On a terminal, :class:`JobProgress` draws a live rich display: one line per named stage
(``plan``, ``count input``, ``compute+write``) with a spinner, its elapsed time and, while
Spark runs, the tasks done out of the total of the active Spark jobs, polled from
``spark.sparkContext.statusTracker()`` in a background thread every ``poll_seconds``.
Anywhere else (a pipe, a CI log, a test runner) it draws nothing live and prints one plain
line when a stage starts and one when it ends, so logs stay readable.

>>> from io import StringIO
>>> from rich.console import Console
>>> out = StringIO()
>>> with JobProgress(None, Console(file=out, width=80)) as progress:
...     with progress.stage("plan"):
...         pass
>>> print(out.getvalue().splitlines()[0])
timetile: plan ...
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


@dataclass(frozen=True)
class SparkTasks:
    """What the active Spark jobs have done, summed over their known stages.

    Attributes:
        jobs: the ids of the active jobs, ascending.
        done: completed tasks.
        total: all tasks of those stages (0 when no job runs).
        running: tasks running now.

    """

    jobs: tuple[int, ...]
    done: int
    total: int
    running: int = 0

    def describe(self) -> str:
        """Label the tasks briefly (``Spark job 7: 12/40 tasks, 2 running``); empty when idle."""
        if not self.jobs:
            return ""
        noun = "job" if len(self.jobs) == 1 else "jobs"
        ids = ",".join(str(job) for job in self.jobs)
        return f"Spark {noun} {ids}: {self.done}/{self.total} tasks, {self.running} running"


def spark_tasks(tracker: Any) -> SparkTasks:
    """Poll a ``StatusTracker`` once: the tasks of every active job's stages.

    Stages Spark skipped (their output was reused) have no info and are not counted.
    """
    jobs = tuple(sorted(tracker.getActiveJobsIds()))
    done = total = running = 0
    for job_id in jobs:
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                total += stage.numTasks
                running += stage.numActiveTasks
    return SparkTasks(jobs, done, total, running)


class JobProgress:
    """A context manager that shows a job's named stages and its Spark tasks as it runs.

    Use :meth:`stage` inside the ``with`` block, once per stage, and :meth:`attach` when the
    session starts inside the block. Leaving the block stops the polling thread (joined,
    never left running) and the live display, also on errors.

    Args:
        spark: the SparkSession whose jobs to poll, or None to show stages only (for now).
        console: where to draw; a plain-line fallback is used when it is not a terminal.
        poll_seconds: how often the background thread polls Spark's status tracker.

    """

    def __init__(self, spark: Any, console: Console | None = None,
                 poll_seconds: float = 0.5) -> None:
        self.spark = spark
        self.console = console or Console()
        self.poll_seconds = poll_seconds
        self.live = self.console.is_terminal and not self.console.is_dumb_terminal
        self._progress: Progress | None = None
        self._running: list[TaskID] = []  # the stages begun and not ended, innermost last
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> JobProgress:
        if not self.live:
            return self
        self._progress = Progress(
            SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[spark]}"),
            TimeElapsedColumn(),
            console=self.console,
            refresh_per_second=8,
        )
        self._progress.start()
        if self.spark is not None:
            self.attach(self.spark)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.detach()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def attach(self, spark: Any) -> None:
        """Poll ``spark``'s jobs from now on (for a session started inside the block)."""
        self.detach()
        self.spark = spark
        tracker = self._tracker() if self._progress is not None else None
        if tracker is None:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(tracker, self._stop),
                                        name="timetile-progress", daemon=True)
        self._thread.start()

    def detach(self) -> None:
        """Stop polling (before the session stops); waits for the polling thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.poll_seconds + 5)
            self._thread = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Show ``name`` as the running stage until the block ends, then mark it done."""
        began = time.perf_counter()
        task: TaskID | None = None
        if self._progress is None:
            self.console.print(f"timetile: {name} ...", highlight=False, markup=False)
        else:
            with self._lock:
                task = self._progress.add_task(escape(name), total=None, spark="")
                self._running.append(task)
        failed = True
        try:
            yield
            failed = False
        finally:
            seconds = time.perf_counter() - began
            outcome = "failed" if failed else "done"
            if self._progress is None:
                self.console.print(f"timetile: {name} {outcome} in {seconds:.1f}s",
                                   highlight=False, markup=False)
            elif task is not None:
                self._finish(task, name, failed)

    def _finish(self, task: TaskID, name: str, failed: bool) -> None:
        assert self._progress is not None
        with self._lock:
            if task not in self._running:  # the display was closed under the stage
                return
            self._running.remove(task)
        label = f"[red]{escape(name)} (failed)[/]" if failed else escape(name)
        self._progress.update(task, description=label, total=1, completed=1, spark="")
        self._progress.stop_task(task)

    def _tracker(self) -> Any:
        try:
            return self.spark.sparkContext.statusTracker() if self.spark is not None else None
        except Exception:  # no tracker (e.g. Spark Connect): show stages only
            return None

    def _poll(self, tracker: Any, stop: threading.Event) -> None:
        while not stop.wait(self.poll_seconds):
            try:
                tasks = spark_tasks(tracker)
            except Exception:  # the session stopped under us: stop polling
                return
            with self._lock:
                if self._progress is None or not self._running:
                    continue
                if tasks.total:
                    self._progress.update(self._running[-1], total=tasks.total,
                                          completed=tasks.done, spark=tasks.describe())
                else:
                    self._progress.update(self._running[-1], total=None, spark="")
