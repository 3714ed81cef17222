"""Commands end to end (msoverflow.cli.main and subprocesses) on dumps written by tests/support."""
