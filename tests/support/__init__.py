"""Fixture writers and case models the tests, benchmarks and the long fuzz run share (importable as tests.support)."""
