"""The analysis as a chain of stages, each taking a value and handing one on:

    open the dump once -> plan the units -> walk (map/reduce) -> take out what is no fault (harmless) -> decide
    the findings -> settle completeness -> explain (what harmless found) -> ranks -> diagnose (the cause; it may
    move the origin upstream) -> since when (the origin's history) -> assemble the Report

Per rank, executions are walked in time order (step, then timestamp). The first execution whose outputs are bad
while its inputs are fine is that rank's origin. The rest of that step is scanned cheaply (a tensor read stops at
its first bad chunk) to show how it spread; later steps are skipped unless `scan_all`, or while the bad values may
be no fault (contained, or a loss scale's business: later steps decide). Ranks are compared by step, never by their
clocks. Where each stage lives: layout.py (Dump, Plan), walk.py and parallel.py (the walk), harmless/stage.py
(harmless, explain, since_when), findings.py (decide), cause/stage.py (diagnose), completeness.py (check, settle), assemble.py. Each stage's time goes to the `msoverflow`
logger (-v, --log-file).
"""
from __future__ import annotations

import sys
from typing import Callable, Optional

from . import completeness, findings
from .assemble import assemble, not_understood, nothing_understood
from .dataflow import StepReads
from .errors import UserError
from .evaluate import TensorAccess
from .graphs import SavedGraphs
from .harmless import stage as harmless
from .judgement import conclude
from .layout import Dump
from .logs import Notes, timed
from .model import Report
from .parallel import map_reduce
from .rank_rows import rank_rows
from .rules.knowledge import knowledge
from .selection import not_in_dump, parse


def analyze(path: str, *, ranks=None, steps=None, scan_all: bool = False, progress: Optional[bool] = None,
            warn: Optional[Callable[[str], None]] = None, jobs: Optional[int] = None,
            scheduler: Optional[str] = None, finished: bool = False, parallel=None, strict: bool = False) -> Report:
    """ranks/steps: a selection (msoverflow.selection.Selection, or any collection; None: all).
    jobs: worker processes (None: from the CPU count, for dumps large enough); scheduler: a Dask scheduler
    address to run the per-rank scans on (msoverflow/parallel.py); finished: the job that wrote the dump has
    ended; parallel: a parallel_layout.ParallelSpec (None: from a file beside the dump, else inferred); strict:
    contained values and overflows a loss scale handled stay findings."""
    notes = Notes(warn)
    with timed("discover"):
        dump = Dump.open(path, notes)
    if all(d.unlisted for d in dump.dirs):
        if dump.unlisted:       # named, never "no dump files found"
            raise UserError(dump.unlisted_reason().split("; it could")[0] + ": no dump directory could be listed")
        if not dump.other_files:
            raise UserError(f"{path}: no dump files found (expected rank_*/<net>/<graph>/<iteration>/ with .npy, "
                            "binary dump, statistic.csv or Opdebug files)")
        return conclude(not_understood(dump, list(notes)))
    with timed("plan"):
        plan = dump.plan(parse(ranks, "--ranks"), parse(steps, "--steps"))
    if not plan.units:
        raise not_in_dump(path, plan.ranks, plan.steps, dump.dirs)
    kn = knowledge()
    # the dump holds what every stage reads through: one tensor access, the saved graphs (learnt as the walk goes)
    # and one cache of the steps read again after the walk
    dump.access, dump.graphs = TensorAccess(notes), SavedGraphs({}, {}, notes)
    dump.step_reads = StepReads(dump, dump.access, notes)
    access, graphs = dump.access, dump.graphs
    sight = harmless.Sight(graphs, plan.units, dump.step_reads, kn)
    with timed("walk"), _Progress(sys.stderr.isatty() if progress is None else progress, plan.files) as bar:
        # Opdebug records mean the hardware watched every op: every unit is judged by them (only flagged ops, whose
        # inputs decide, and collectives, which tell which rank a bad value came from, are worth a tensor read).
        walked = map_reduce(plan.units, kn, scan_all, access, notes, jobs=jobs, scheduler=scheduler,
                            files=plan.files, advance=bar.advance, flags=plan.flags, stops=sight.stops(strict))
    if not walked.runs and not walked.records:
        if plan.ranks or plan.steps:
            raise not_in_dump(path, plan.ranks, plan.steps, dump.dirs)
        return conclude(nothing_understood(dump, walked, list(notes)))
    graphs.learn(walked.rank_roots, walked.graphs)
    dump.step_reads.scanned = walked.scanned
    with timed("harmless"):     # contained values and overflows a loss scale handled are no finding (--strict: are)
        found = harmless.find(walked, sight, strict)
        walked = found.remove(walked)
    with timed("decide"):
        decision = findings.decide(walked, graphs, access, kn, notes)
    with timed("settle"):
        # (rank, step)s whose files stop short (job killed, dump still being written): the listing and headers only
        incomplete = completeness.check(plan.dirs, cut=walked.truncated, unreadable=walked.unreadable, warn=notes,
                                        finished=finished, settings=dump.settings(d.rank_root for d in plan.dirs))
        decision = completeness.settle(decision, incomplete, walked.unreadable, plan.dirs, graphs, access, kn)
    with timed("explain"):
        decision = found.explain(decision, sight)
    with timed("ranks"):        # every rank's row; the parallel layout, resolved once (kept on the dump)
        ranks_seen = rank_rows(dump, plan, walked, decision, notes, parallel)
    if decision.first is not None or decision.likely is not None:   # a clean dump does not even import it
        with timed("diagnose"):
            # the cause of every origin, recomputed from its dumped inputs (msoverflow/cause)
            from .cause.stage import diagnose, follow_origin
            before = decision.first
            decision = diagnose(decision, dump, plan, walked, graphs, notes, parallel=parallel)
            follow_origin(ranks_seen.rows, before, decision.first)
        findings.unmade_note(decision, notes)
        with timed("history"):      # the first origin's since-when, once the diagnosis settled which op it is
            decision = harmless.since_when(decision, sight)
    with timed("assemble"):
        report = assemble(dump, plan, walked, decision, ranks_seen, kn, notes)
    with timed("judge"):      # the one conclusion: kind, harm, cause, fix, next command (msoverflow/judgement)
        return conclude(report)


class _Progress:
    """A progress bar on stderr, only on a terminal."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled and total > 2000
        self.total = total
        self._bar = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress
            self._bar = Progress(transient=True, console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task("scanning ops", total=self.total)
        return self

    def advance(self, n: int = 1):
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
