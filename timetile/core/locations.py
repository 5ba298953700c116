"""Locations a job writes to, checked before the job: engine-free, for the CLI and Spark alike.

A job that cannot write learns it only at the end, after all its work, from a Java stack
trace: a local location is probed first instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def is_local(location: str) -> bool:
    """Whether ``location`` is a path on this machine: no URI scheme, or ``file:``."""
    return "://" not in location or location.startswith("file:")


def local_path(location: str) -> Path | None:
    """Return a local ``location`` as an absolute path (``file:`` stripped), else None."""
    if not is_local(location):
        return None
    return Path(location.removeprefix("file://").removeprefix("file:")).absolute()


def overlapping(location: str, others: list[str], *, holding: bool = True) -> str | None:
    """Return the first of ``others`` that ``location`` is, holds or lies in (local only).

    For an output that would replace its own input: resolved, so ``./a/../data`` is ``data``.
    Without ``holding``, only one that ``location`` is or lies in: for a folder that writes
    below names of its own, beside what it holds.
    """
    path = local_path(location)
    if path is None:
        return None
    path = path.resolve()
    for other in others:
        held = local_path(other)
        if held is None:
            continue
        held = held.resolve()
        if path == held or held in path.parents or (holding and path in held.parents):
            return other
    return None


def write_problem(location: str) -> str | None:
    """Return why a local ``location`` cannot be written, with the fix, or None if it can.

    Probed by making and removing an empty folder in the nearest existing folder on its
    path. A location with another scheme (``s3://``, ``hdfs://``) is not probed: None.
    """
    path = local_path(location)
    if path is None:
        return None
    folder = next(parent for parent in (path, *path.parents) if parent.exists())
    if not folder.is_dir():
        return f"{folder} is a file, not a folder. Fix: give a folder path."
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".timetile-probe-", dir=folder))
    except OSError as error:
        return (f"cannot be written: {error.strerror} in {folder}. Fix: write somewhere you "
                "may, or fix the folder's permissions.")
    return None
