"""Run a Spark program on a local cluster (``local-cluster[N,C,M]``) and say why it failed.

A local cluster starts separate executor JVMs, as a real cluster does, so it proves that a
job needs nothing from the driver's process. Its executors write their output to the
standalone worker's folder, ``work/<application id>/<executor>/stderr`` inside the pyspark
installation, where a failed run's reason stays out of sight: the driver only reports that
an executor "exited with code N". :func:`run_on_local_cluster` runs the program, and if it
fails, raises with the end of the driver's output *and* of some executors'; either way it
removes the applications' folders, so the installation does not fill up with old runs.

It runs one local cluster at a time on the machine (a lock file): each cluster's master
names its applications by the second they start (``app-20240101120000-0000``), so two
clusters started in the same second (two test processes, say) run applications of one name,
whose executors collide in one folder and fail, over and over, until both give up.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyspark

#: A standalone application's id, as Spark names it and its worker's folder.
_APPLICATION_ID = re.compile(r"\bapp-\d{14}-\d{4}\b")


def _work_folder() -> Path:
    """Return the standalone workers' folder of this pyspark (``$SPARK_HOME/work``)."""
    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    return Path(home) / "work"


def _executor_logs(applications: Sequence[str], lines: int) -> str:
    """Return the end of the output of each application's first and last two executors.

    That is the last ``lines`` lines of stdout and of stderr of each: a failing executor is
    relaunched many times, and the first failures say why, the last how it ended.
    """
    parts = []
    for application in applications:
        folders = sorted((_work_folder() / application).glob("*"),
                         key=lambda folder: int(folder.name) if folder.name.isdigit() else -1)
        for folder in folders[:2] + folders[2:][-2:]:
            for name in ("stdout", "stderr"):
                path = folder / name
                text = path.read_text(errors="replace") if path.exists() else ""
                tail = [line for line in text.splitlines()
                        if not line.startswith("Spark Executor Command")][-lines:]
                if tail:
                    parts.append(f"--- executor {application}/{folder.name} {name}\n"
                                 + "\n".join(tail))
    return "\n".join(parts) or "(no executor logs found)"


@contextmanager
def _one_cluster_at_a_time() -> Iterator[None]:
    """Hold the machine's local-cluster lock (waiting for it) while in the block."""
    with open(Path(tempfile.gettempdir()) / "timetile-local-cluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_on_local_cluster(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 600,
    lines: int = 40,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a driver program that starts a local cluster) and return its output.

    ``env`` is added to this process's environment; the executors' Python is this
    interpreter, and every JVM binds the loopback address unless ``SPARK_LOCAL_IP`` says
    otherwise (the machine's other addresses may be unreachable in a sandbox).
    Raises ``AssertionError`` with the driver's last output and the last ``lines`` lines of
    the first and last executors' output when the program exits non-zero or runs past
    ``timeout`` seconds (then it is killed with every process it started: the JVMs too).
    Waits first while another local cluster of this machine runs.
    """
    with _one_cluster_at_a_time(), subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
            env={"SPARK_LOCAL_IP": "127.0.0.1", **os.environ, "PYSPARK_PYTHON": sys.executable,
                 **(env or {})}) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            failure = f"exited with {process.returncode}" if process.returncode else ""
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            failure = f"ran past its {timeout:g} s and was killed"
    applications = sorted(set(_APPLICATION_ID.findall(stdout + stderr)))
    try:
        if failure:
            raise AssertionError(
                f"{command[0]} {failure}\n--- driver stdout\n{stdout[-2000:]}\n"
                f"--- driver stderr\n{stderr[-4000:]}\n{_executor_logs(applications, lines)}")
    finally:
        for application in applications:
            shutil.rmtree(_work_folder() / application, ignore_errors=True)
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)
