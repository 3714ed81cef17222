"""`msoverflow hunt -- python train.py`: run the script with the watch injected, then build the analyze Report.

The watch (msoverflow/hunt/instrument.py) reaches the unmodified script through the same start-up hook as
`patch --verify` (msoverflow/startup_hook.py). Each training process writes one record (rank, steps, what it found)
and, for the first bad value, that op's tensors in MindSpore's dump layout. The Report is made by `analyze` over
those tensors (the same rules judge origin, kind and fix), then given what only the live run knows: the Cell path
and class, the source line, forward/backward, and how steps were counted. No MindSpore import here.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from ..errors import UserError
from ..model import RANK_CLEAN, RANK_INCOMPLETE, RANK_NOT_DUMPED, RANK_ORIGIN, RankStatus, Report, Source
from .layout import RECORD_NAME

HOOK_DIR = ".hook"
INSTALLER = f"{__package__}.instrument"     # the module the start-up hook installs in the training process
_RECORD_PARTS = re.compile(re.escape(RECORD_NAME).replace(r"\{rank\}", r"(\d+)").replace(r"\{pid\}", r"(\d+)"))
_RECORD_TMP = re.compile(r"\.msoverflow-.*\.tmp")      # safeio.write_atomic's temporary file, of a killed rank

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
    tensors_dir: Optional[str] = None    # where the first bad op's tensors were kept; None when nothing was found


def default_out_dir() -> str:
    base = os.path.abspath("msoverflow_runs")
    stamp = time.strftime("%Y%m%d_%H%M%S")
    candidate, n = os.path.join(base, f"hunt_{stamp}"), 1
    while os.path.exists(candidate):
        n += 1
        candidate = os.path.join(base, f"hunt_{stamp}_{n}")
    return candidate


def hunt(command: Sequence[str], out_dir: Optional[str] = None, steps: Optional[Sequence[int]] = None,
         on_start: Optional[Callable[[], None]] = None) -> HuntOutcome:
    """Run `command` with every op and Cell watched; the Report of the first bad value (or of none). The command
    is checked before the out directory is made; its output passes through."""
    from ..config.runner import fresh_dump_dir
    from ..job import check_command, start
    from ..startup_hook import write_hook
    command = check_command(command, "msoverflow hunt")
    out = str(fresh_dump_dir(out_dir or default_out_dir(), "--out-dir"))
    spec = {"kind": "hunt", "out_dir": out, "steps": list(steps) if steps else None}
    hook_dir = os.path.join(out, HOOK_DIR)
    env = dict(os.environ)
    env.update(write_hook(hook_dir, spec, os.path.join(hook_dir, "hunt_spec.json"), INSTALLER))
    if on_start is not None:
        on_start()
    try:
        finished = start(command, env)
    finally:
        shutil.rmtree(hook_dir, ignore_errors=True)     # only the running processes needed it
    from .instrument import EXIT_GRAPH_MODE
    records = load_records(out)
    if finished.returncode == EXIT_GRAPH_MODE or any(r.get("graph_mode") for r in records):
        _remove_if_only_records(out)
        raise UserError(GRAPH_MODE_LINE)
    records = [r for r in records if not r.get("graph_mode")]
    if not records and finished.returncode != 0:
        _remove_if_only_records(out)
        raise UserError(f"the command failed (exit {finished.returncode}) before any network ran, so nothing was "
                        "watched (its own output above says why)")
    report = build_report(out, records, finished.returncode, command)
    kept = _remove_if_only_records(out) if not any(r.get("found") for r in records) else out
    return HuntOutcome(report, finished.returncode, out, records, finished.seconds, tensors_dir=kept)


def _remove_if_only_records(out_dir: str) -> Optional[str]:
    """Nothing was found: the per-process records are in the Report; an out directory holding nothing else is
    removed rather than left empty. The directory when something else is in it, else None."""
    try:
        names = os.listdir(out_dir)
    except OSError:
        return None
    records = [n for n in names if _RECORD_PARTS.fullmatch(n) or _RECORD_TMP.fullmatch(n)]
    if len(records) != len(names):
        return out_dir
    for name in records:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(out_dir, name))
    with contextlib.suppress(OSError):
        os.rmdir(out_dir)
    return None


def load_records(out_dir: str) -> List[dict]:
    """Each process's record. One that cannot be read (a rank killed while writing it) is kept as
    {"rank", "pid", "unreadable": why}, with a warning: never fatal, never taken as a clean watch."""
    from ..logs import log
    from ..safeio import load_json
    records = []
    for path in glob.glob(os.path.join(out_dir, RECORD_NAME.format(rank="*", pid="*"))):
        named = _RECORD_PARTS.fullmatch(os.path.basename(path))
        if named is None:
            continue
        try:
            record = load_json(path)
            if not isinstance(record, dict) or not isinstance(record.get("rank"), int):
                raise ValueError("not a hunt record")
        except (OSError, ValueError) as exc:
            why = f"{os.path.basename(path)} is cut or unreadable ({exc})"
            log.warning("hunt: %s: skipped; what rank %s watched is unknown", why, named.group(1))
            record = {"rank": int(named.group(1)), "pid": int(named.group(2)), "unreadable": why}
        records.append(record)
    return sorted(records, key=lambda r: (r.get("rank", 0), r.get("pid") or 0))


def build_report(out_dir: str, records: List[dict], command_exit: int, command: Sequence[str] = ()) -> Report:
    unreadable = [r for r in records if r.get("unreadable")]
    records = [r for r in records if not r.get("unreadable")]
    found = sorted((r["found"] for r in records if r.get("found")), key=lambda f: (f["step"], f["rank"]))
    ranks = sorted({int(r["rank"]) for r in records + unreadable})
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
        if not records and not unreadable:
            report.inconclusive.append("no network was called in this run (no Cell ran in PyNative mode in any "
                                       "process): nothing was watched")
        elif command_exit != 0:
            report.inconclusive.append(f"the command exited with {command_exit} before the run finished: later "
                                       "steps were not watched")
        for r in unreadable:
            report.inconclusive.append(f"rank {r['rank']}: {r['unreadable']}: what that process watched is unknown")
    report.warnings += [f"rank {r['rank']}: {r['unreadable']}" for r in unreadable]
    report.scanned_steps = {int(r["rank"]): _steps_checked(r) for r in records}
    report.rank_status = _rank_table(report, records, unreadable)
    from ..provenance import collect
    report.provenance = {**collect(report), **report.provenance}
    report.provenance.update({"command": ["msoverflow", "hunt", "--", *command], "steps": STEPS_NOTE})
    report.extra["hunt"] = {"records": records + unreadable, "steps": STEPS_NOTE}
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
        fact = by_rank_step.get((finding.rank, finding.step))
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
        finding.evidence.insert(0, f"step {finding.step}: {STEPS_NOTE}")
        finding.evidence.insert(1, f"{fact['direction']} of {fact['forward_op']}"
                                   + (f", gradient of parameter {fact['parameter']}" if fact.get("parameter") else "")
                                   + (f"; the tensor also fed {', '.join(fact['other_consumers'])}"
                                      if fact.get("other_consumers") else ""))
        if fact.get("note"):
            finding.evidence.append(fact["note"])


def _rank_table(report: Report, records: List[dict], unreadable: Sequence[dict] = ()) -> List[RankStatus]:
    """Every process that ran a network: a rank with nothing found was watched and clean, not "not dumped"; a
    rank whose record is cut is incomplete, never clean."""
    rows = {row.rank: row for row in report.rank_status if row.status != RANK_NOT_DUMPED}
    for r in unreadable:
        rows.setdefault(int(r["rank"]), RankStatus(int(r["rank"]), RANK_INCOMPLETE, note="its hunt record is cut"))
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
