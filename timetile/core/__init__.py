"""Engine-free algorithms: the aggregator algebra, time and window arithmetic.

Nothing under ``timetile.core`` imports Spark, Redis or a web framework (DESIGN §3): the same
code runs in Spark executors, in the streaming job and in the online fetcher, which is what
makes online and offline numbers agree by construction.
"""
