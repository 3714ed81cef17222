"""The Python API: what the command line does, for notebooks and for msoverflow's own commands.

    import msoverflow
    report = msoverflow.analyze("dump", ranks=[0, 1], steps="2")
    report.verdict, report.first.step, report.to_dict()
    events = msoverflow.events(report)            # or msoverflow.events("dump", steps="0")
    events[events.bad]                            # the one definition of a bad value
    diff = msoverflow.compare("dump_fp32", "dump_fp16", ranks="0-3")
    diff.verdict, diff.first_divergence, diff.to_dict()

Arguments are checked before anything is read: a wrong type is a TypeError naming the argument
(`path must be str or os.PathLike, not int`); a selection that does not follow the grammar is a SelectionError in
the API's words (`ranks='0-x': expected ...`). Selections stay ranges (`ranks=range(0, 2**31 - 1)` costs two
integers). Library code (patch --verify, config/run) calls these, never `cli.main([...])`.
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Callable as AnyCallable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence, Union

from .model import Report
from .selection import Selection, parse

if TYPE_CHECKING:
    from .comparison import Comparison

Ids = Union[None, str, int, Iterable[int], Selection]


def analyze(path: Union[str, "os.PathLike[str]"], *, ranks: Ids = None, steps: Ids = None, scan_all: bool = False,
            warn: Optional[Callable[[str], None]] = None, jobs: Optional[int] = 1, scheduler: Optional[str] = None,
            finished: bool = False, parallel=None, progress: Optional[bool] = False,
            command: Union[None, str, Sequence[str]] = None, strict: bool = False) -> Report:
    """Analyse a dump directory (any layout `msoverflow analyze` reads) and return the Report.
    ranks/steps: only these (None: all), as ints, a range, or in the command line's grammar ("0-3", "0|5-8").
    Warnings go to `warn` (default: kept in report.warnings only). finished: the job that wrote the dump has ended
    (files written seconds ago are complete). parallel: the layout as `--parallel` takes it ("dp=4,tp=2,pp=2" or a
    MindFormers YAML / rank table; or the ParallelSpec `--parallel` parsed). command: the command line that asked
    (the CLI passes its argv), recorded in report.provenance. strict: non-finite values that are no fault
    (report.contained: absorbed, e.g. a causal mask's -inf by Softmax; report.handled: overflows a dynamic loss
    scale skipped) are findings too."""
    path = _path("path", path)
    _check(jobs=(jobs, (int, type(None))), scheduler=(scheduler, (str, type(None))),
           warn=(warn, (AnyCallable, type(None))), strict=(strict, (bool,)), **_parallel(parallel))
    selected = parse(ranks, "ranks="), parse(steps, "steps=")
    from .analysis import analyze as run_analysis
    from .parallel_layout import parse_spec
    from .provenance import collect
    report = run_analysis(path, ranks=selected[0], steps=selected[1], scan_all=scan_all, progress=progress,
                          warn=warn, jobs=jobs, scheduler=scheduler, finished=finished, strict=strict,
                          parallel=parse_spec(parallel) if isinstance(parallel, str) else parallel)
    report.provenance = collect(report, command)
    return report



def events(source: Union[Report, str, "os.PathLike[str]"], *, ranks: Ids = None, steps: Ids = None,
           warn: Optional[Callable[[str], None]] = None):
    """Every tensor event as a pandas DataFrame, one row per tensor: rank, step, op_type, op_name, io, slot, dtype,
    shape, max_abs, nan, posinf, neginf, over_range, counts_exact (False: the counts are lower bounds read from
    statistics' Max/Min), bad (msoverflow's one definition: non-finite or beyond the declared dtype's range), file.
    source: a Report (the steps its analysis scanned) or a dump directory (the selected ranks/steps, read whole)."""
    if isinstance(source, Report):
        return source.events()
    path = _path("source", source, also="a Report")
    _check(warn=(warn, (AnyCallable, type(None))))
    from .layout import Dump
    from .walk import events_frame
    quiet = warn or (lambda message: None)
    return events_frame(Dump.open(path, quiet).plan(parse(ranks, "ranks="), parse(steps, "steps=")).units, quiet)


def compare(baseline: Union[str, "os.PathLike[str]"], target: Union[str, "os.PathLike[str]"], *, ranks: Ids = None,
            steps: Ids = None, tolerance_ulps: Optional[float] = None, top: int = 10,
            warn: Optional[Callable[[str], None]] = None, parallel=None,
            command: Union[None, str, Sequence[str]] = None,
            name_map: Union[None, str, "os.PathLike[str]"] = None) -> "Comparison":
    """Compare two dumps of the same model and return the Comparison `msoverflow compare` renders:
    .verdict (diverged | equivalent | inconclusive), .first_divergence, .worst, .unmatched, .to_dict().
    ranks/steps: as analyze() takes them. parallel: the layout as analyze() takes it; ranks then carry their
    coordinates (.coords, .parallel). command: the command line that asked, recorded in .provenance. name_map:
    `--map FILE`, names that pair across modes or frameworks (docs/compare.md)."""
    baseline, target = _path("baseline", baseline), _path("target", target)
    _check(tolerance_ulps=(tolerance_ulps, (numbers.Real, type(None))), top=(top, (int,)),
           warn=(warn, (AnyCallable, type(None))), **_parallel(parallel))
    if tolerance_ulps is not None and not tolerance_ulps >= 0:
        raise ValueError(f"tolerance_ulps must be 0 or more, not {tolerance_ulps!r}")
    selected = parse(ranks, "ranks="), parse(steps, "steps=")
    from .comparison import DEFAULT_ULPS
    from .comparison import compare as run_comparison
    from .provenance import stamp
    result = run_comparison(baseline, target, ranks=selected[0], steps=selected[1], top=top, warn=warn,
                            parallel=parallel, name_map=None if name_map is None else _path("name_map", name_map),
                            tolerance_ulps=DEFAULT_ULPS if tolerance_ulps is None else tolerance_ulps)
    result.provenance = stamp(command)
    return result


def _path(name: str, value, also: str = "") -> str:
    """A path argument as a str; TypeError naming the argument for anything else (bytes included)."""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, str):
            return path
    wanted = "str or os.PathLike" + (f" or {also}" if also else "")
    raise TypeError(f"{name} must be {wanted}, not {type(value).__name__}")


def _parallel(parallel) -> dict:
    from .parallel_layout import ParallelSpec
    return {"parallel": (parallel, (str, ParallelSpec, type(None)))}


_TYPE_WORDS = {type(None): "None", numbers.Real: "a number", AnyCallable: "a callable"}


def _check(**arguments) -> None:
    """name=(value, accepted types): TypeError naming the first argument of another type (bool is no number)."""
    for name, (value, accepted) in arguments.items():
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            names = " or ".join(_TYPE_WORDS.get(t, getattr(t, "__name__", str(t))) for t in accepted)
            raise TypeError(f"{name} must be {names}, not {type(value).__name__}")


@dataclass(frozen=True)
class Options:
    """What analyze() takes besides the dump, as one value: the commands build it from their arguments and hand
    it to the library code that analyses a dump it made (run, run --two-pass, patch --verify)."""
    ranks: Ids = None
    steps: Ids = None
    scan_all: bool = False
    jobs: Optional[int] = None
    scheduler: Optional[str] = None
    finished: bool = False
    parallel: object = None
    progress: Optional[bool] = False
    warn: Optional[Callable[[str], None]] = None
    strict: bool = False


def analyze_with(path: str, options: Options, command: Union[None, str, Sequence[str]] = None) -> Report:
    """analyze(path) with the Options' values."""
    return analyze(path, command=command, **{f.name: getattr(options, f.name) for f in fields(options)})
