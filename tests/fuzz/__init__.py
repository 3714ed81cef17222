"""The bounded fuzz run, its regression corpus and the long run (python -m tests.fuzz.run_long)."""
