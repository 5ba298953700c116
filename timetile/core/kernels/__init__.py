"""Vectorized kernels of the sorted sweep: numpy and numba over sorted runs, no engine."""
