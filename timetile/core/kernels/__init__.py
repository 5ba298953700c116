"""Vectorized kernels for ops whose state is a few numbers: numpy and numba, no engine."""
