"""msoverflow: find the first operator that overflowed in a MindSpore run, explain it, and patch it.

`msoverflow.analyze(path, ranks=..., steps=...)` returns the Report, `msoverflow.events(report)` its tensor events
as a table, `msoverflow.compare(baseline, target)` the Comparison, `msoverflow.watch(command)` a watched run
(msoverflow/api.py; the watch: msoverflow/watcher/). Imported lazily so that
`import msoverflow` (and `msoverflow --help`) stays light.
"""
from .version import __version__  # noqa: F401

_API = ("analyze", "compare", "events")
_WATCH = ("watch", "watch_history")      # msoverflow/watcher/__init__.py


def _register_formatters() -> None:
    """A Report's and a Comparison's repr and notebook card are render/notebook.py's, registered with the model as
    formatters (the model and comparison.py import no renderer); the renderer is imported on first display."""
    from .model import register_formatter

    def lazy(name):
        def show(obj):
            from .render import notebook
            return getattr(notebook, name)(obj)
        return show
    for type_name, kind, name in (("Report", "repr", "report_repr"), ("Report", "html", "report_html"),
                                  ("Comparison", "repr", "comparison_repr"),
                                  ("Comparison", "html", "comparison_html")):
        register_formatter(type_name, kind, lazy(name))


def _register_judge() -> None:
    """A Report made by hand (no analysis judged it) gets the judgement's conclusion when a view asks
    (Report.judged); the model and report_dict import no judge."""
    from .model import register_judge

    def judge(report):
        from .judgement import conclusion_of
        return conclusion_of(report)
    register_judge(judge)


_register_formatters()
_register_judge()


def __getattr__(name):
    if name in _API:
        from . import api
        return getattr(api, name)
    if name in _WATCH:       # a function, never the subpackage's name (msoverflow.watcher)
        from . import watcher
        return getattr(watcher, name)
    raise AttributeError(f"module 'msoverflow' has no attribute {name!r}")
