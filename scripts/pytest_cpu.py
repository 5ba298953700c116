"""A pytest plugin that records the CPU seconds each test process and its children spent.

On a shared machine the suite's wall time moves with the other tenants' load; the CPU time
of its processes (each worker, its Spark JVM, that JVM's Python workers, the JVMs a test
starts) moves much less, so it is the figure to compare two versions of the tests by::

    PYTHONPATH=scripts ./dev.sh test -p pytest_cpu
    cat .pytest-cpu.txt          # one line per process: gw0 cpu 517.2 wall 709.8

Each process (every pytest-xdist worker, or the one process of ``TEST_WORKERS=0``) appends
its line when its session ends, to ``$PYTEST_CPU_LOG`` (``.pytest-cpu.txt`` by default). The
CPU time is user and system time, of the process and of every descendant alive then, and of
the children they have waited for; a child that exited unwaited is missed (Linux only: it
reads ``/proc``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_STARTED = time.monotonic()


def _processes() -> dict[int, tuple[int, float]]:
    """Return every process's parent id and CPU seconds (its own and its waited-for children's)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited meanwhile
            continue
        utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
        found[int(entry.name)] = (int(fields[1]), (utime + stime + cutime + cstime) / _TICKS)
    return found


def tree_cpu_seconds(root: int) -> float:
    """Return the CPU seconds of ``root`` and of its descendants alive now."""
    processes = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += processes.get(pid, (0, 0.0))[1]
        stack.extend(children.get(pid, ()))
    return total


def pytest_sessionfinish() -> None:
    """Append this process's line: its name, CPU seconds and wall seconds."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = (f"{name} cpu {tree_cpu_seconds(os.getpid()):.1f} "
            f"wall {time.monotonic() - _STARTED:.1f}\n")
    with open(os.environ.get("PYTEST_CPU_LOG", ".pytest-cpu.txt"), "a") as log:
        log.write(line)
