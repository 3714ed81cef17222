"""Fast in-process tests of the library; none runs MindSpore or reads a real-run fixture (those are in tests/real:
tests/unit/test_house_rules.py checks it)."""
