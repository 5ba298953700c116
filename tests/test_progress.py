"""Job progress: plain lines off a terminal, a live display with Spark's tasks on one."""

from __future__ import annotations

import threading
from io import StringIO
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from timetile.cli.progress import JobProgress, SparkTasks, spark_tasks


class FakeTracker:
    """Two active jobs; one stage was skipped (Spark has no info for it)."""

    def getActiveJobsIds(self) -> list[int]:  # noqa: N802  (Spark's name)
        return [8, 7]

    def getJobInfo(self, job_id: int) -> Any:  # noqa: N802
        return SimpleNamespace(stageIds=[job_id * 10, job_id * 10 + 1])

    def getStageInfo(self, stage_id: int) -> Any:  # noqa: N802
        if stage_id == 81:
            return None
        return SimpleNamespace(numTasks=4, numCompletedTasks=stage_id % 4, numActiveTasks=1)


class BrokenTracker:
    """A tracker whose session went away."""

    def getActiveJobsIds(self) -> list[int]:  # noqa: N802
        raise RuntimeError("session stopped")


def fake_spark(tracker: object) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))


def terminal() -> tuple[Console, StringIO]:
    out = StringIO()
    return Console(file=out, force_terminal=True, width=120), out


def test_spark_tasks_sums_the_known_stages_of_active_jobs() -> None:
    tasks = spark_tasks(FakeTracker())
    assert tasks == SparkTasks(jobs=(7, 8), done=2 + 3 + 0, total=12, running=3)
    assert tasks.describe() == "Spark jobs 7,8: 5/12 tasks, 3 running"
    assert SparkTasks((), 0, 0).describe() == ""


def test_plain_lines_off_a_terminal() -> None:
    out = StringIO()
    console = Console(file=out, width=80)
    with JobProgress(fake_spark(FakeTracker()), console) as progress:
        assert not progress.live
        with progress.stage("plan"):
            pass
        with pytest.raises(ValueError, match="boom"), progress.stage("compute+write"):
            raise ValueError("boom")
    lines = out.getvalue().splitlines()
    assert lines[0] == "timetile: plan ..."
    assert lines[1].startswith("timetile: plan done in ")
    assert lines[3].startswith("timetile: compute+write failed in ")
    assert "\x1b" not in out.getvalue()  # no escape codes in logs


def test_live_display_polls_and_stops_cleanly() -> None:
    console, out = terminal()
    with JobProgress(fake_spark(FakeTracker()), console, poll_seconds=0.01) as progress:
        assert progress.live
        with progress.stage("compute+write"):
            threading.Event().wait(0.2)
    assert progress._thread is None
    assert not [t for t in threading.enumerate() if t.name == "timetile-progress"]
    text = out.getvalue()
    assert "compute+write" in text
    assert "Spark jobs 7,8: 5/12 tasks, 3 running" in text


def test_nested_stages_each_end_done() -> None:
    """A caller's stage around one of timetile's (consistency inside "nightly"): the inner
    one ending must not leave the outer one spinning, and Spark's tasks go to the inner."""
    console, _ = terminal()
    with JobProgress(None, console, poll_seconds=0.01) as progress:
        with progress.stage("nightly"):
            with progress.stage("read logs"):
                assert len(progress._running) == 2
            assert len(progress._running) == 1
        assert progress._progress is not None
        tasks = progress._progress.tasks
        assert [task.description for task in tasks] == ["nightly", "read logs"]
        assert all(task.finished for task in tasks)


def test_live_display_survives_a_broken_tracker() -> None:
    console, out = terminal()
    with (JobProgress(fake_spark(BrokenTracker()), console, poll_seconds=0.01) as progress,
          progress.stage("plan")):
        threading.Event().wait(0.05)
    assert "plan" in out.getvalue()


@pytest.mark.spark
def test_live_display_shows_a_real_spark_job(spark: SparkSession) -> None:
    console, out = terminal()
    with JobProgress(None, console, poll_seconds=0.05) as progress:
        progress.attach(spark)
        with progress.stage("count input"):
            slow = "reflect('java.lang.Thread', 'sleep', cast(250 as bigint))"
            spark.range(0, 4, numPartitions=4).selectExpr(slow).collect()
        progress.detach()
    assert "tasks" in out.getvalue()
    assert spark_tasks(spark.sparkContext.statusTracker()).jobs == ()
