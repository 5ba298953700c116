"""Spark: the backfill planner and its executors (DESIGN §3–4).

Sources load through :mod:`timetile.spark`, which the upload and the stream share.
"""
