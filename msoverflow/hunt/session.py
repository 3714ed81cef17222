"""`msoverflow hunt -- python train.py`: run the script with the watch injected, then build the analyze Report.

The watch (msoverflow/hunt/instrument.py) reaches the unmodified script through the same sitecustomize hook as
`patch --verify` (msoverflow/patch/hook.py). Each training process writes one record (rank, steps, what it found)
and, for the first bad value, that op's tensors in MindSpore's dump layout. The Report is made by `analyze` over
those tensors (the same rules judge origin, kind and fix), then given what only the live run knows: the Cell path
and class, the source line, forward/backward, and how steps were counted. No MindSpore import here.
"""
from __future__ import annotations

import glob
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from ..errors import UserError
from ..model import RANK_CLEAN, RANK_NOT_DUMPED, RANK_ORIGIN, RankStatus, Report, Source
from .layout import RECORD_NAME

GRAPH_MODE_LINE = ("hunt cannot hook compiled graphs (this run is in graph mode): use "
                   "`msoverflow run --two-pass -- COMMAND`, which finds the step with a cheap dump and then dumps "
                   "that step in full")
STEPS_NOTE = ("steps are counted as optimizer updates: step N is the forward, backward and update that follow N "
              "updates")
WATCHED = ("hunt watched Primitive calls (mindspore.ops / mint functions reach their kernels through them), Tensor "
           "arithmetic methods and Cell outputs in PyNative, their gradients and the parameter gradients given to "
           "the optimizer; ops inside @jit functions or compiled graphs were not watched one by one")


@dataclass
class HuntOutcome:
    report: Report
    command_exit: int
    out_dir: str
    records: List[dict] = field(default_factory=list)
    seconds: float = 0.0


def default_out_dir() -> str:
    base = os.path.abspath("msoverflow_runs")
    stamp = time.strftime("%Y%m%d_%H%M%S")
    candidate, n = os.path.join(base, f"hunt_{stamp}"), 1
    while os.path.exists(candidate):
        n += 1
        candidate = os.path.join(base, f"hunt_{stamp}_{n}")
    return candidate


def hunt(command: Sequence[str], out_dir: Optional[str] = None, steps: Optional[Sequence[int]] = None,
         log=None) -> HuntOutcome:
    """Run `command` with every op and Cell watched; the Report of the first bad value (or of none)."""
    from ..config.runner import fresh_dump_dir
    from ..patch.hook import write_hook
    if not command:
        raise UserError("msoverflow hunt needs a command after '--', e.g. msoverflow hunt -- python train.py")
    out = str(fresh_dump_dir(out_dir or default_out_dir()))
    spec = {"kind": "hunt", "out_dir": out, "steps": list(steps) if steps else None}
    env = dict(os.environ)
    env.update(write_hook(os.path.join(out, ".hook"), spec, os.path.join(out, ".hook", "hunt_spec.json")))
    started = time.monotonic()
    try:
        completed = subprocess.run(list(command), env=env)
    except FileNotFoundError as exc:
        raise UserError(f"cannot run {command[0]!r}: {exc.strerror}") from exc
    seconds = time.monotonic() - started
    from .instrument import EXIT_GRAPH_MODE
    if completed.returncode == EXIT_GRAPH_MODE:
        raise UserError(GRAPH_MODE_LINE)
    records = load_records(out)
    report = build_report(out, records, completed.returncode, command)
    return HuntOutcome(report, completed.returncode, out, records, seconds)


def load_records(out_dir: str) -> List[dict]:
    from ..safeio import load_json
    pattern = os.path.join(out_dir, RECORD_NAME.format(rank="*", pid="*"))
    return sorted((load_json(path) for path in glob.glob(pattern)), key=lambda r: (r.get("rank", 0), r.get("pid")))


def build_report(out_dir: str, records: List[dict], command_exit: int, command: Sequence[str] = ()) -> Report:
    found = sorted((r["found"] for r in records if r.get("found")), key=lambda f: (f["step"], f["rank"]))
    ranks = sorted({int(r["rank"]) for r in records})
    if found:
        from ..api import analyze
        report = analyze(out_dir, finished=True)   # the training has exited
        if report.first is not None:
            _enrich(report, found)
    else:
        report = Report(dump_dir=out_dir, first=None, anomalies=[], propagation=[], warnings=[], ranks=ranks,
                        steps={int(r["rank"]): _steps_run(r) for r in records})
        report.layout = "hunt"
        report.tensors_read = sum(int((r.get("counts") or {}).get("tensors", 0)) for r in records)
        report.coverage.append(WATCHED)
        report.coverage.append(f"{report.tensors_read} tensors checked on the device; {STEPS_NOTE}")
        if not records:
            report.inconclusive.append("no network was called in this run (no Cell ran in PyNative mode in any "
                                       "process): nothing was watched")
        elif command_exit != 0:
            report.inconclusive.append(f"the command exited with {command_exit} before the run finished: later "
                                       "steps were not watched")
    report.scanned_steps = {int(r["rank"]): _steps_checked(r) for r in records}
    report.rank_status = _rank_table(report, records)
    from ..provenance import collect
    report.provenance = {**collect(report), **report.provenance}
    report.provenance.update({"command": ["msoverflow", "hunt", "--", *command], "steps": STEPS_NOTE})
    report.extra["hunt"] = {"records": records, "steps": STEPS_NOTE}
    return report


def _steps_run(record: dict) -> List[int]:
    """Steps 0..N-1 after N optimizer updates (a run that never called an optimizer is one step, 0)."""
    return list(range(max(1, int(record.get("steps_seen") or 0))))


def _steps_checked(record: dict) -> List[int]:
    """The steps whose values were checked: up to the first find (the watch stops there), within --steps."""
    run = _steps_run(record)
    if record.get("found"):
        run = [s for s in run if s <= int(record["found"]["step"])]
    chosen = record.get("steps_checked")
    return [s for s in run if s in set(chosen)] if chosen else run


def _enrich(report: Report, found: List[dict]) -> None:
    """What the live run knows and a dump's file name does not: Cell path, class, source line, direction."""
    by_rank_step = {(f["rank"], f["step"]): f for f in found}
    for finding in report.anomalies:
        fact = by_rank_step.get((finding.rank, finding.iteration))
        if fact is None:
            continue
        finding.cell = fact.get("cell") or finding.cell
        finding.cell_type = fact.get("cell_type") or finding.cell_type
        finding.graph = "pynative"
        finding.full_name = fact.get("full_name") or finding.full_name
        if fact.get("direction") == "backward":
            finding.forward_op = fact.get("forward_op")
        if fact.get("source"):
            s = fact["source"]
            finding.source = Source(s["file"], int(s["line"]), s.get("code") or "")
        finding.evidence.insert(0, f"step {finding.iteration}: {STEPS_NOTE}")
        finding.evidence.insert(1, f"{fact['direction']} of {fact['forward_op']}"
                                   + (f", gradient of parameter {fact['parameter']}" if fact.get("parameter") else "")
                                   + (f"; the tensor also fed {', '.join(fact['other_consumers'])}"
                                      if fact.get("other_consumers") else ""))
        if fact.get("note"):
            finding.evidence.append(fact["note"])


def _rank_table(report: Report, records: List[dict]) -> List[RankStatus]:
    """Every process that ran a network: a rank with nothing found was watched and clean, not "not dumped"."""
    rows = {row.rank: row for row in report.rank_status if row.status != RANK_NOT_DUMPED}
    for r in records:
        rank = int(r["rank"])
        if rank in rows:
            continue
        if r.get("found"):
            f = r["found"]
            rows[rank] = RankStatus(rank, RANK_ORIGIN, f["step"], f["full_name"], f["op_type"])
        else:
            rows[rank] = RankStatus(rank, RANK_CLEAN, note=f"watched {r.get('steps_seen', 0)} steps")
    return [rows[k] for k in sorted(rows)]


def write_summary(outcome: HuntOutcome, log) -> None:
    for record in outcome.records:
        counts = record.get("counts") or {}
        print(f"msoverflow hunt: rank {record['rank']}: {record['steps_seen']} optimizer updates, "
              f"{counts.get('ops', 0)} ops, {counts.get('cells', 0)} Cell calls, {counts.get('grads', 0)} "
              f"gradients, {counts.get('parameter_grads', 0)} parameter gradients watched"
              + (f"; first bad value at step {record['found']['step']}" if record.get("found") else ""),
              file=log)
    print(f"msoverflow hunt: command exited with {outcome.command_exit} after {outcome.seconds:.1f} s; "
          f"tensors of the first bad op in {outcome.out_dir}", file=log)
    log.flush()
