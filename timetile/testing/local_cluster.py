"""Run a Spark program on a local cluster (``local-cluster[N,C,M]``) and say why it failed.

A local cluster starts separate executor JVMs, as a real cluster does, so it proves that a
job needs nothing from the driver's process. A failed run hides its reason: when the driver
program raises, the cluster's shutdown (every executor killed, relaunched and refused) fills
the end of its output, and the executors write theirs to the standalone worker's folder,
``work/<application id>/<executor>/`` inside the pyspark installation.
:func:`run_on_local_cluster` runs the program and, if it fails, raises with the driver's
Python traceback, the end of its output and of some executors'; either way it removes the
applications' folders, so the installation does not fill up with old runs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyspark

#: Java options for a JVM that runs Spark for a minute or two (a test's ``spark-submit``, a
#: stream started and killed): one garbage collector thread (the serial collector), as the
#: machine's other processes need the cores too, and only the JIT's quick tier (C1). Over a
#: short run, C2's compiling costs more CPU than its faster code gives back; over a whole
#: test run, as in the tests' own session, a lean C2 pays (``SESSION_JAVA_OPTIONS`` in
#: ``tests/conftest.py``).
SHORT_RUN_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

#: A standalone application's id, as Spark names it and its worker's folder.
_APPLICATION_ID = re.compile(r"\bapp-\d{14}-\d{4}\b")
#: A line of Spark's log (``26/01/31 12:00:00 INFO ...``), which ends a Python error's text.
_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ")


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


def _python_error(stderr: str) -> str:
    """Return the driver's last Python traceback in ``stderr``, or a note that it has none.

    The cluster's shutdown, which follows the traceback, floods the end of the output.
    """
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return "(no Python traceback from the driver)"
    end = starts[-1] + 1
    while end < len(lines) and lines[end].startswith((" ", "\t")):  # the frames
        end += 1
    while end < len(lines) and lines[end] and not _LOG_LINE.match(lines[end]):  # the error
        end += 1
    return "\n".join(lines[starts[-1]:end])


def run_on_local_cluster(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 600,
    lines: int = 40,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (a driver program that starts a local cluster) and return its output.

    ``env`` is added to this process's environment; the executors' Python is this
    interpreter, and every JVM binds the loopback address unless ``SPARK_LOCAL_IP`` says
    otherwise (the machine's other addresses may be unreachable in a sandbox).
    Raises ``AssertionError`` with the driver's last output and Python traceback, and the
    last ``lines`` lines of the first and last executors' output, when the program exits
    non-zero or runs past ``timeout`` seconds (then it is killed with every process it
    started: the JVMs too).
    """
    with subprocess.Popen(
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
        except BaseException:  # Ctrl-C, say: the cluster, in a session of its own, must go too
            os.killpg(process.pid, signal.SIGKILL)
            raise
    applications = sorted(set(_APPLICATION_ID.findall(stdout + stderr)))
    try:
        if failure:
            raise AssertionError(
                f"{command[0]} {failure}\n--- driver stdout\n{stdout[-2000:]}\n"
                f"--- driver's Python error\n{_python_error(stderr)}\n"
                f"--- driver stderr\n{stderr[-4000:]}\n{_executor_logs(applications, lines)}")
    finally:
        for application in applications:
            shutil.rmtree(_work_folder() / application, ignore_errors=True)
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)
