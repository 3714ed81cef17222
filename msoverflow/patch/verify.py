"""Prove a precision patch: re-run the user's training with dump on, analyse the new dump, compare before/after.

    result = verify(report, ["python", "train.py"], dtype="float32", workdir="/tmp/msov")
    result.render(), result.exit_code, [run.report for run in result.runs]

The runtime patch reaches the unmodified script through msoverflow.patch.hook. With how="none" the command is
run as it is (a source or YAML patch already written). An op-only target that does not fix the run is widened
to its owning Cell (when the report names it) and run again. Nothing is printed here: the training's output goes
to `echo` (when given), the narration to the msoverflow logger, and the caller shows the result.
"""
from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

from ..errors import UserError
from ..job import OutputWatch
from ..logs import log
from ..model import Report
from .targets import Target, check_dtype, load_report, target_from_report

_DUMP_PATH_OK = re.compile(r"^[A-Za-z0-9\-_/]+$")


@dataclass
class VerifyRun:
    """One training run of a verification: its exit code, its dump's Report, what its output said."""
    label: str                      # "baseline", "patched", "widened"
    target: Optional[Target]
    returncode: int
    dump_dir: str
    report: Optional[Report] = None
    report_path: Optional[str] = None   # where the caller saved the Report's JSON
    analysis_error: Optional[str] = None
    output: OutputWatch = field(default_factory=OutputWatch)
    per_rank: Dict[int, OutputWatch] = field(default_factory=dict)    # msrun: each worker's own output
    patch_log: Optional[dict] = None

    @functools.cached_property
    def report_dict(self) -> Optional[dict]:
        return self.report.to_dict() if self.report is not None else None

    @property
    def first(self) -> Optional[dict]:
        return (self.report_dict or {}).get("first")

    @property
    def losses(self) -> List[float]:
        return self.output.loss_values

    @property
    def params_finite(self) -> List[bool]:
        return self.output.params_finite

    @property
    def skipped(self) -> List[str]:
        """Zero-token guard: the steps the runs said they skipped."""
        return sorted(set(self.output.skipped))

    @property
    def output_tail(self) -> List[str]:
        return list(self.output.tail)

    @property
    def clean_dump(self) -> bool:
        return self.report is not None and self.report.verdict == "clean"

    @property
    def loss_finite(self) -> Optional[bool]:
        return self.output.loss_finite

    @property
    def weights_finite(self) -> Optional[bool]:
        return self.output.weights_finite

    @property
    def patch_applied(self) -> Optional[bool]:
        if self.patch_log is None:
            return None
        return bool(self.patch_log.get("applied"))

    @property
    def healthy(self) -> bool:
        return (self.returncode == 0 and self.clean_dump and self.loss_finite is not False
                and self.weights_finite is not False and self.patch_applied is not False)


@dataclass
class VerifyResult:
    target: Target
    dtype: str
    command: List[str]
    before: Optional[dict]           # the origin the patch is meant to remove
    workdir: str = ""
    runs: List[VerifyRun] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    title: Optional[str] = None      # what was applied, when it is not a precision island (e.g. the guard)

    @property
    def final(self) -> Optional[VerifyRun]:
        patched = [r for r in self.runs if r.label != "baseline"]
        return patched[-1] if patched else None

    @property
    def fixed(self) -> bool:
        return self.final is not None and self.final.healthy

    @property
    def exit_code(self) -> int:
        return 0 if self.fixed else 1

    def to_dict(self) -> dict:
        return {"target": self.target.to_dict(), "dtype": self.dtype, "command": self.command, "workdir": self.workdir,
                "fixed": self.fixed, "before": _brief(self.before), "notes": self.notes,
                "runs": [{"label": r.label, "target": r.target.to_dict() if r.target else None,
                          "returncode": r.returncode, "dump_dir": r.dump_dir, "report": r.report_path,
                          "verdict": r.report.verdict if r.report is not None else None,
                          "first": _brief(r.first), "analysis_error": r.analysis_error, "losses": r.losses,
                          "params_finite": r.params_finite, "patch_log": r.patch_log,
                          "per_rank": {rank: {"losses": w.loss_values, "params_finite": w.params_finite}
                                       for rank, w in sorted(r.per_rank.items())},
                          "skipped": r.skipped} for r in self.runs]}

    def render(self) -> str:
        lines = [f"verify: {self.title or self.target.describe() + ' in ' + self.dtype}",
                 f"  command: {' '.join(self.command)}",
                 f"  dumps and reports: {self.workdir}"]
        lines.append(f"  before: {_describe_finding(self.before) if self.before else 'no origin known'}")
        for run in self.runs:
            lines.append(f"  {run.label} run" + (f" ({run.target.describe()})" if run.target and run.label != "baseline"
                                                 else "") + ":")
            lines += ["    " + line for line in _describe_run(run, self.before)]
        lines += [f"  note: {n}" for n in self.notes]
        lines.append("result: " + self._verdict())
        return "\n".join(lines)

    def _verdict(self) -> str:
        final = self.final
        if final is None:
            return "NOT VERIFIED: no patched run"
        if self.fixed:
            return (f"FIXED: {'the origin is gone, ' if self.before else ''}the new dump has no anomaly, "
                    f"loss and parameters finite")
        reasons = []
        if final.patch_applied is False:
            reasons.append("the patch target was never found in the running network")
        if final.analysis_error:
            reasons.append(f"the new dump could not be analysed ({final.analysis_error})")
        elif not final.clean_dump:
            if _same_region(self.before, final.first):
                kind = (final.first or {}).get("kind") or "overflow"
                reasons.append(f"the {kind} origin is still there"
                               + (" (a 0/0 or x/0 is not a precision problem: msoverflow patch --how guard)"
                                  if kind == "invalid" else ""))
            else:
                reasons.append(f"the origin moved: next origin {_describe_finding(final.first)}")
        if final.loss_finite is False:
            reasons.append("the loss is not finite")
        if final.weights_finite is False:
            reasons.append("parameters are not finite")
        if final.returncode != 0:
            reasons.append(f"the command exited with {final.returncode}")
            if self.dtype == "bfloat16" and any("Unsupported" in line or "bfloat16" in line.lower()
                                                for line in final.output_tail):
                reasons.append("bfloat16 kernels are missing on this device (CPU lacks bf16 Sqrt/MatMul/...): "
                               "verify with --dtype float32 here, bfloat16 on Ascend")
        return "NOT FIXED: " + ("; ".join(reasons) or "see above")


def _brief(finding: Optional[dict]) -> Optional[dict]:
    if not finding:
        return None
    return {k: finding.get(k) for k in ("op_type", "full_name", "kind", "cell", "cell_type", "forward_op", "source")}


def _describe_finding(f: Optional[dict]) -> str:
    if not f:
        return "none"
    where = f.get("cell") or "?"
    if f.get("cell_type"):
        where += f" ({f['cell_type']})"
    src = f.get("source") or {}
    at = f", {os.path.basename(src['file'])}:{src['line']}" if src.get("file") else ""
    return f"{f.get('kind', 'anomaly')} in {f.get('op_type')} [{f.get('full_name') or f.get('op_name')}], Cell {where}{at}"


def _same_region(before: Optional[dict], after: Optional[dict]) -> bool:
    if not before or not after:
        return False
    b, a = before.get("cell") or "", after.get("cell") or ""
    if b and a and (a == b or a.startswith(b + ".")):
        return True
    return before.get("op_type") == after.get("op_type") and b == a


def _describe_run(run: VerifyRun, before: Optional[dict]) -> List[str]:
    out = []
    patch_log = run.patch_log
    if patch_log is not None:
        if patch_log.get("applied"):
            for entry in patch_log["applied"]:
                kinds: dict = {}
                for c in entry.get("changes", []):
                    kinds.setdefault(c["kind"], []).append(c["where"])
                summary = ", ".join(f"{k} x{len(v)}" for k, v in kinds.items())
                out.append(f"patch applied in {entry['root']} at {', '.join(entry['cells'])}: {summary}")
                out += [f"warning: {w}" for w in entry.get("warnings", [])]
        else:
            searched = ", ".join(s["root"] for s in patch_log.get("searched", [])) or "no Cell was called"
            out.append(f"PATCH TARGET NOT FOUND (searched: {searched})")
        out += [f"patch error in {e['root']}: {e['message']}" for e in patch_log.get("errors", [])]
    if run.per_rank:     # each rank's own first and last loss (one rank's first against another's last says nothing)
        out.append(f"exit {run.returncode}")
        out += [f"rank {rank}: {_losses_text(watch)}" for rank, watch in sorted(run.per_rank.items())]
    else:
        out.append(f"exit {run.returncode}; {_losses_text(run.output)}")
    if run.skipped:
        out.append("zero-token guard skipped: " + ", ".join(run.skipped))
    report = run.report
    size = ""
    if report is not None:
        from ..render.common import steps_text
        steps = {s for its in report.iterations.values() for s in its}
        size = (f" ({report.files} files, {report.tensors_read} tensors read"
                + (f", steps {steps_text(steps)}" if steps else "") + ")")
    if run.analysis_error:
        out.append(f"analysis failed: {run.analysis_error}")
    elif run.clean_dump and report is not None:      # (clean_dump: a report said clean)
        ranks = ", ".join(str(r) for r in report.ranks[:16]) + (", ..." if len(report.ranks) > 16 else "")
        out.append(f"new dump{size}: no anomaly" + (f" on ranks {ranks}" if ranks else "")
                   + (" (the origin is gone)" if before else ""))
    elif run.label == "baseline":
        out.append(f"dump{size}: first origin {_describe_finding(run.first)}")
    else:
        first = run.first
        tag = "still" if _same_region(before, first) else "next origin:"
        out.append(f"new dump{size}: {tag} {_describe_finding(first)}")
    if run.returncode != 0 and run.output_tail:
        out.append("last output: " + " | ".join(run.output_tail[-3:]))
    return out


def _losses_text(watch: OutputWatch) -> str:
    """`3 step(s), loss 2.31 -> 2.29 (finite); parameters finite` for one process's output."""
    if not watch.losses:
        text = "no loss found in the output"
    else:
        values = watch.loss_values
        text = (f"{len(values)} step(s), loss {values[0]:.4g} -> {values[-1]:.4g} "
                f"({'finite' if watch.loss_finite else 'NOT finite'})")
    if watch.weights_finite is not None:
        text += f"; parameters {'finite' if watch.weights_finite else 'NOT finite'}"
    return text


def _process_logs(log_path: str) -> List[dict]:
    """The hook's logs: one per Python process (`patch_log.json.<pid>`), e.g. msrun and each of its workers.
    Processes that never loaded MindSpore's Cell (the launcher) have nothing to say."""
    found = []
    directory, base = os.path.split(log_path)
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if name == base or name.startswith(base + "."):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as fh:
                    found.append(json.load(fh))
            except (OSError, ValueError):
                continue
    hooked = [entry for entry in found if entry.get("hooked") and (entry.get("applied") or entry.get("searched")
                                                                   or entry.get("errors"))]
    return hooked or found


def _merge_logs(logs: List[dict]) -> dict:
    merged = dict(logs[0])
    for key in ("applied", "searched", "errors"):
        merged[key] = [entry for one in logs for entry in one.get(key, [])]
    merged["processes"] = len(logs)
    return merged


def _dump_env(dump_dir: str, workdir: str, dump_options: Optional[dict] = None) -> dict:
    """Environment for an overflow dump of every step, its config written into the workdir by msoverflow.config's
    generator (which knows the MindSpore version, device and jit-level rules)."""
    from ..config.generator import build
    from ..config.runner import run_env
    config_path = os.path.join(workdir, f"dump_config_{os.path.basename(os.path.dirname(dump_dir))}.json")
    result = build("overflow", path=dump_dir, steps="all", **(dump_options or {}))
    result.write(config_path)
    return run_env(result)


def analyse(dump_dir: str):
    """The run's dump through the Python API: (its Report, None), or (None, the one-line reason) when it could not
    be analysed (a crash in the analysis is reported, the verification goes on)."""
    from ..api import analyze
    try:
        return analyze(dump_dir, finished=True, warn=lambda message: log.debug("warning: %s", message)), None
    except UserError as exc:
        return None, str(exc)
    except Exception as exc:      # noqa: BLE001
        return None, f"msoverflow analyze failed on {dump_dir}: {type(exc).__name__}: {exc}"


def run_once(label: str, command: List[str], workdir: str, target: Optional[Target], dtype: str,
             echo: Optional[Callable[[str], None]] = None, cwd=None,
             dump_options: Optional[dict] = None) -> VerifyRun:
    """One training run with dump on; with a target, the runtime patch is injected through the hook. The
    training's output lines go to `echo` (when given)."""
    from ..job import start
    from .hook import write_patch_hook
    run_dir = os.path.join(workdir, label)
    dump_dir = os.path.join(run_dir, "dump")
    os.makedirs(run_dir, exist_ok=True)
    env, log_path = _dump_env(dump_dir, workdir, dump_options), None
    if target is not None:
        log_path = os.path.join(run_dir, "patch_log.json")
        spec = {"target": target.to_dict(), "dtype": dtype, "log": log_path}
        env.update(write_patch_hook(os.path.join(run_dir, "hook"), spec, os.path.join(run_dir, "patch_spec.json")))
    log.info("verify: %s run: %s", label, " ".join(command))
    finished = start(command, env, cwd=cwd, echo=echo if echo is not None else lambda line: None,
                     log_dir=os.path.join(run_dir, "msrun_logs"))
    outcome = VerifyRun(label=label, target=target, returncode=finished.returncode, dump_dir=dump_dir,
                        output=finished.output, per_rank=finished.per_rank)
    if log_path:
        logs = _process_logs(log_path)
        if logs:
            outcome.patch_log = _merge_logs(logs)
        else:
            outcome.patch_log = {"applied": [], "searched": [], "errors": [
                {"root": "-", "message": "the patch hook never ran (is the command a Python process?)"}]}
    if os.path.isdir(dump_dir):
        outcome.report, outcome.analysis_error = analyse(dump_dir)
    else:
        outcome.analysis_error = "the run wrote no dump (did it reach a training step?)"
    return outcome


def _resolve(report_or_target) -> Tuple[Target, Optional[dict]]:
    if isinstance(report_or_target, Target):
        return report_or_target, report_or_target.origin
    if isinstance(report_or_target, str):
        report_or_target = load_report(report_or_target)
    if isinstance(report_or_target, dict):
        target = target_from_report(report_or_target)
        return target, report_or_target.get("first")
    raise TypeError("verify() takes an analysis report (dict or path) or a Target")


def verify(report_or_target: Union[dict, str, Target], command: List[str], dtype: str = "float32",
           workdir: Optional[str] = None, *, how: str = "runtime", widen: bool = True,
           baseline: Optional[bool] = None, echo: Optional[Callable[[str], None]] = None, cwd: Optional[str] = None,
           dump_options: Optional[dict] = None, title: Optional[str] = None) -> VerifyResult:
    """Re-run `command` with dump on and the patch in place; analyse; widen an op-only patch if it falls short.

    how: "runtime" injects msoverflow.patch.apply through the hook; "none" runs the command unchanged (the
    source or YAML patch was written beforehand). baseline: also run unpatched first (default: only when no
    report tells what the origin was). dump_options: msoverflow.config.build keywords for the re-run's dump
    (device, jit_level, ms_version; detected when left out). echo: gets each line of the training's output.
    """
    from ..job import check_command
    check_dtype(dtype)
    command = check_command(command, "msoverflow patch --verify")
    if how not in ("runtime", "none"):
        raise UserError(f"verify: how must be 'runtime' or 'none', got {how!r}")
    target, before = _resolve(report_or_target)
    workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="msoverflow-verify-"))
    if not _DUMP_PATH_OK.match(workdir):
        raise UserError(f"{workdir}: MindSpore dump paths may hold only letters, digits, '-', '_' and '/'; "
                        f"choose another --workdir")
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{workdir}: cannot create --workdir ({exc.strerror or exc})") from None
    result = VerifyResult(target=target, dtype=dtype, command=list(command), before=before, workdir=workdir,
                          title=title)
    if baseline if baseline is not None else before is None:
        base = run_once("baseline", command, workdir, None, dtype, echo, cwd, dump_options)
        result.runs.append(base)
        if before is None:
            result.before = before = base.first
            if target.origin is None and base.first:
                target.origin = base.first
    patched = run_once("patched", command, workdir, target if how == "runtime" else None, dtype, echo, cwd, dump_options)
    result.runs.append(patched)
    if not patched.healthy and how == "runtime" and target.scope == "op":
        if not widen:
            result.notes.append(f"computing only {target.op} in {dtype} is not enough; widen the patch to the "
                                f"owning Cell (--cell {(before or {}).get('cell') or 'PATH'})")
        else:
            try:
                wider = target.widened()
            except UserError as exc:
                result.notes.append(f"computing only {target.op} in {dtype} is not enough, and {exc}")
            else:
                result.notes.append(f"computing only {target.op} in {dtype} was not enough (its gradient is cast "
                                    f"back to fp16 at the island's edge): widened to {wider.describe()}")
                result.runs.append(run_once("widened", command, workdir, wider, dtype, echo, cwd, dump_options))
                result.target = wider
    return result
