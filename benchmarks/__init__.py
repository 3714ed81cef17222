"""Benchmarks, run from the repository root as `python -m benchmarks.bench_NAME` (not part of the test suite)."""
