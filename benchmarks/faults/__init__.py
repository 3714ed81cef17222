"""The scored fault suite (`python -m benchmarks.faults`): see suite.py and docs/robustness.md."""
