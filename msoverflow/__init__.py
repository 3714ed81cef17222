"""msoverflow: find the first operator that overflowed in a MindSpore run, explain it, and patch it.

`msoverflow.analyze(path, ranks=..., steps=...)` returns the Report, `msoverflow.events(report)` its tensor events
as a table, `msoverflow.compare(baseline, target)` the Comparison, `msoverflow.watch(command)` a watched run
(msoverflow/api.py). Imported lazily so that
`import msoverflow` (and `msoverflow --help`) stays light.
"""
from .version import __version__  # noqa: F401

_API = ("analyze", "compare", "events", "watch", "watch_history")


def __getattr__(name):
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'msoverflow' has no attribute {name!r}")
