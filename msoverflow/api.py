"""The Python API: what the command line does, for notebooks and for msoverflow's own commands.

    import msoverflow
    report = msoverflow.analyze("dump", ranks=[0, 1], steps=[2])
    report.verdict, report.first, report.to_dict()

Library code (patch --verify, config/run) calls these, never `cli.main([...])`.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence, Union

from .model import Report


def analyze(path: str, *, ranks: Optional[Iterable[int]] = None, steps: Optional[Iterable[int]] = None,
            scan_all: bool = False, warn: Optional[Callable[[str], None]] = None, jobs: Optional[int] = 1,
            scheduler: Optional[str] = None, progress: Optional[bool] = False,
            command: Union[None, str, Sequence[str]] = None) -> Report:
    """Analyse a dump directory (any layout `msoverflow analyze` reads) and return the Report.
    ranks/steps: only these (None: all). Warnings go to `warn` (default: kept in report.warnings only).
    command: the command line that asked (the CLI passes its argv), recorded in report.provenance."""
    from .analyze import analyze as _analyze
    from .provenance import collect
    report = _analyze(path, ranks=sorted(set(ranks)) if ranks is not None else None,
                      iterations=sorted(set(steps)) if steps is not None else None, scan_all=scan_all,
                      progress=progress, warn=warn, jobs=jobs, scheduler=scheduler)
    report.provenance = collect(report, command)
    return report
