"""Tiling-invariance, future-peeking and online/offline consistency checks (DESIGN §5, §7).

:func:`timetile.verify.consistency.consistency` is the consistency job: it recomputes every
response the online service logged (:class:`~timetile.online.response_log.ResponseLog`)
with ``tt.backfill`` at the logged request time and reports, per feature, the mismatch rate,
missing and extra values, SMAPE and edit distances; approximate ops are checked against the
oracle's error bounds. ``timetile consistency`` runs it from the command line and writes a
table and a self-contained HTML report. Modules: ``consistency`` (the Spark job), ``logs``
(the response logs read, and their rows as left rows), ``compare`` (the per-row comparison
on the executors), ``values`` (one value against another), ``results`` (what the job
reports) and ``report_html`` (the page and its SVG).

:func:`timetile.verify.invariance.verify` (``timetile verify``) is the
tiling-invariance check (seed 001): it computes a Join's features under several cuts of time
(one batch, day by day on stored hop partials, random cuts; :mod:`.tilings`; and a replay
through the streaming job, fetched online: :mod:`.replay`) and compares them value by value
with the same rules (:mod:`.tiling_compare`); ``leaks`` recomputes each row over what was
known before its time (``--leaks``, a source's ``known_at``), over the cuts of ``cuts``;
``tiling_report`` holds what it finds and its Markdown and HTML pages.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["verify"]


def verify(*args: Any, **kwargs: Any) -> Any:
    """Run :func:`timetile.verify.invariance.verify`: ``tt.verify(join, spark, start, end)``."""
    from timetile.verify.invariance import verify as check  # noqa: PLC0415  (loads Spark)

    return check(*args, **kwargs)


class _CallablePackage(types.ModuleType):
    """The verify package, which ``tt.verify`` names, called as :func:`verify`.

    ``timetile.verify`` is a package (DESIGN §3) and ``tt.verify(...)`` the check: Python
    binds a package to its parent's attribute whenever it is imported, so the package itself
    takes the call.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
