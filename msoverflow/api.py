"""The Python API: what the command line does, for notebooks and for msoverflow's own commands.

    import msoverflow
    report = msoverflow.analyze("dump", ranks=[0, 1], steps=[2])
    report.verdict, report.first, report.to_dict()
    diff = msoverflow.compare("dump_fp32", "dump_fp16")
    diff.verdict, diff.first_divergence, diff.to_dict()

Library code (patch --verify, config/run) calls these, never `cli.main([...])`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, Iterable, Optional, Sequence, Union

from .model import Report


def analyze(path: str, *, ranks: Union[None, str, Iterable[int]] = None,
            steps: Union[None, str, Iterable[int]] = None,
            scan_all: bool = False, warn: Optional[Callable[[str], None]] = None, jobs: Optional[int] = 1,
            scheduler: Optional[str] = None, finished: bool = False, parallel=None,
            progress: Optional[bool] = False, command: Union[None, str, Sequence[str]] = None) -> Report:
    """Analyse a dump directory (any layout `msoverflow analyze` reads) and return the Report.
    ranks/steps: only these (None: all), as ints or in the command line's grammar ("0-3", "0|5-8"). Warnings go
    to `warn` (default: kept in report.warnings only). finished: the job that wrote the dump has ended (files
    written seconds ago are complete). parallel: the layout as `--parallel` takes it ("dp=4,tp=2,pp=2" or a
    MindFormers YAML / rank table; or the ParallelSpec `--parallel` parsed). command: the command line that asked (the CLI passes its argv), recorded in
    report.provenance."""
    from .analyze import analyze as _analyze
    from .parallel_layout import parse_spec
    from .provenance import collect
    import sys
    # Importing the pipeline module msoverflow.analyze rebinds the package's `analyze` to that module: keep
    # `msoverflow.analyze(...)` this function for the next call.
    sys.modules[__package__].analyze = analyze
    report = _analyze(path, ranks=ranks, iterations=steps, scan_all=scan_all, progress=progress, warn=warn,
                      jobs=jobs, scheduler=scheduler, finished=finished,
                      parallel=parse_spec(parallel) if isinstance(parallel, str) else parallel)
    report.provenance = collect(report, command)
    return report


def compare(baseline: str, target: str, *, ranks: Optional[Iterable[int]] = None,
            steps: Optional[Iterable[int]] = None, tolerance_ulps: Optional[float] = None, top: int = 10,
            warn: Optional[Callable[[str], None]] = None, parallel=None):
    """Compare two dumps of the same model and return the Comparison `msoverflow compare` renders:
    .verdict (diverged | equivalent | inconclusive), .first_divergence, .worst, .unmatched, .to_dict().
    parallel: the layout as analyze() takes it; ranks then carry their coordinates (.coords, .parallel)."""
    from .comparison import DEFAULT_ULPS, compare as _compare
    return _compare(baseline, target, ranks=ranks, steps=steps, top=top, warn=warn, parallel=parallel,
                    tolerance_ulps=DEFAULT_ULPS if tolerance_ulps is None else tolerance_ulps)


@dataclass(frozen=True)
class Options:
    """What analyze() takes besides the dump, as one value: the commands build it from their arguments and hand
    it to the library code that analyses a dump it made (run, run --two-pass, patch --verify)."""
    ranks: Union[None, str, Iterable[int]] = None
    steps: Union[None, str, Iterable[int]] = None
    scan_all: bool = False
    jobs: Optional[int] = None
    scheduler: Optional[str] = None
    finished: bool = False
    parallel: object = None
    progress: Optional[bool] = False
    warn: Optional[Callable[[str], None]] = None


def analyze_with(path: str, options: Options, command: Union[None, str, Sequence[str]] = None) -> Report:
    """analyze(path) with the Options' values."""
    return analyze(path, command=command, **{f.name: getattr(options, f.name) for f in fields(options)})
