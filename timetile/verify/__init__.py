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

The tiling-invariance and future-peeking checks arrive with the other verification issues.
"""
