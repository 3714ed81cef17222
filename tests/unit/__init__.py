"""Fast in-process tests of the library (the quick subset with tests/cli: ./scripts/test.sh quick)."""
