"""msoverflow: find the first operator that overflowed in a MindSpore run, explain it, and patch it."""
__version__ = "0.1.0"
