"""msoverflow: find the first operator that overflowed in a MindSpore run, explain it, and patch it.

`msoverflow.analyze(path, ranks=..., steps=...)` returns the Report (msoverflow/api.py). Imported lazily so that
`import msoverflow` (and `msoverflow --help`) stays light.
"""
__version__ = "0.1.0"

_API = ("analyze", "compare")


def __getattr__(name):
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'msoverflow' has no attribute {name!r}")
