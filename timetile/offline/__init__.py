"""Spark: loading sources, the backfill planner and its executors (DESIGN §3–4)."""
