"""Tiling-invariance, future-peeking and online/offline consistency checks (DESIGN §5, §7).

Not built yet: it arrives with the verification issues.
"""
