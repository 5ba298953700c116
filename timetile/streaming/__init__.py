"""Spark Structured Streaming jobs that keep the online store fresh (DESIGN §6).

Not built yet: it arrives with the streaming issue.
"""
