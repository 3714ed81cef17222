"""The version of msoverflow (a module of its own: the log, the provenance and the CLI read it without importing
the package's API)."""
__version__ = "0.1.0"
