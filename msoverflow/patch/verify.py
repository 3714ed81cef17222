"""Prove a precision patch: re-run the user's training with dump on, analyse the new dump, compare before/after.

    result = verify(report, ["python", "train.py"], dtype="float32", workdir="/tmp/msov")
    print(result.render()); sys.exit(result.exit_code)

The runtime patch reaches the unmodified script through msoverflow.patch.hook. With how="none" the command is
run as it is (a source or YAML patch already written). An op-only target that does not fix the run is widened
to its owning Cell (when the report names it) and run again.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import List, Optional, Union

from ..errors import UserError
from .targets import Target, check_dtype, load_report, target_from_report

# "loss 2.3", "loss: 2.3", "loss=nan", "loss is 2.3" (LossMonitor), "loss: [2.3]", "scaled loss inf"
_LOSS = re.compile(r"\bloss(?:\s+is)?\s*[:=]?\s*[\[(]?\s*([-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf(?:inity)?))\b",
                   re.I)
_PARAMS_FINITE = re.compile(r"params(?:eters)?[ _]finite[:=]?\s*(true|false)", re.I)
_DUMP_PATH_OK = re.compile(r"^[A-Za-z0-9\-_/]+$")


@dataclass
class RunOutcome:
    label: str                      # "baseline", "patched", "widened"
    target: Optional[Target]
    returncode: int
    dump_dir: str
    report: Optional[dict] = None
    report_path: Optional[str] = None
    analysis_error: Optional[str] = None
    losses: List[float] = field(default_factory=list)
    params_finite: List[bool] = field(default_factory=list)
    patch_log: Optional[dict] = None
    output_tail: List[str] = field(default_factory=list)
    per_rank: dict = field(default_factory=dict)     # rank -> {"losses": [...], "params_finite": [...]} (msrun)
    skipped: List[str] = field(default_factory=list)  # zero-token guard: steps skipped, as the runs said

    @property
    def first(self) -> Optional[dict]:
        return (self.report or {}).get("first")

    @property
    def clean_dump(self) -> bool:
        return self.report is not None and self.report.get("verdict") == "clean"

    @property
    def loss_finite(self) -> Optional[bool]:
        return all(math.isfinite(v) for v in self.losses) if self.losses else None

    @property
    def weights_finite(self) -> Optional[bool]:
        return all(self.params_finite) if self.params_finite else None

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
    runs: List[RunOutcome] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    title: Optional[str] = None      # what was applied, when it is not a precision island (e.g. the guard)

    @property
    def final(self) -> Optional[RunOutcome]:
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
                          "verdict": (r.report or {}).get("verdict"), "first": _brief(r.first),
                          "analysis_error": r.analysis_error, "losses": r.losses,
                          "params_finite": r.params_finite, "patch_log": r.patch_log,
                          "per_rank": r.per_rank, "skipped": r.skipped} for r in self.runs]}

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


def _describe_run(run: RunOutcome, before: Optional[dict]) -> List[str]:
    out = []
    log = run.patch_log
    if log is not None:
        if log.get("applied"):
            for entry in log["applied"]:
                kinds = {}
                for c in entry.get("changes", []):
                    kinds.setdefault(c["kind"], []).append(c["where"])
                summary = ", ".join(f"{k} x{len(v)}" for k, v in kinds.items())
                out.append(f"patch applied in {entry['root']} at {', '.join(entry['cells'])}: {summary}")
                out += [f"warning: {w}" for w in entry.get("warnings", [])]
        else:
            searched = ", ".join(s["root"] for s in log.get("searched", [])) or "no Cell was called"
            out.append(f"PATCH TARGET NOT FOUND (searched: {searched})")
        out += [f"patch error in {e['root']}: {e['message']}" for e in log.get("errors", [])]
    steps = len(run.losses)
    if steps:
        out.append(f"exit {run.returncode}; {steps} step(s), loss {run.losses[0]:.4g} -> {run.losses[-1]:.4g} "
                   f"({'finite' if run.loss_finite else 'NOT finite'})"
                   + ("" if run.weights_finite is None else
                      f"; parameters {'finite' if run.weights_finite else 'NOT finite'}"))
    else:
        out.append(f"exit {run.returncode}; no loss found in the output")
    for rank in sorted(run.per_rank):
        data = run.per_rank[rank]
        losses, flags = data["losses"], data["params_finite"]
        loss_ok = all(math.isfinite(v) for v in losses) if losses else None
        out.append(f"rank {rank}: {len(losses)} step(s)"
                   + (f", loss {losses[0]:.4g} -> {losses[-1]:.4g} ({'finite' if loss_ok else 'NOT finite'})"
                      if losses else ", no loss found")
                   + ("" if not flags else f"; parameters {'finite' if all(flags) else 'NOT finite'}"))
    if run.skipped:
        out.append("zero-token guard skipped: " + ", ".join(run.skipped))
    summary = (run.report or {}).get("summary") or {}
    size = ""
    if summary.get("files") is not None:
        steps = sorted({i for its in (summary.get("iterations") or {}).values() for i in its})
        size = f" ({summary['files']} files" + (f", {summary['tensors_read']} tensors read" if summary.get(
            "tensors_read") is not None else "") + (f", iterations {steps[0]}-{steps[-1]}" if steps else "") + ")"
    if run.analysis_error:
        out.append(f"analysis failed: {run.analysis_error}")
    elif run.clean_dump:
        ranks = ", ".join(str(r) for r in (summary.get("ranks") or []))
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


_RANK_LINE = re.compile(r"\brank\s*[:=]?\s*(\d+)\b", re.I)
_GUARD_SKIP = re.compile(r"msoverflow guard: step (\d+) skipped on rank (\d+)")
_LOG_DIR = re.compile(r"^--log_dir(?:=(.*))?$")


def _launcher_log_dir(command: List[str], run_dir: str) -> (List[str], Optional[str]):
    """msrun writes each worker's output to --log_dir/worker_N.log, not to its own stdout: give every verify
    run its own log dir (so runs do not mix) and read the worker logs afterwards."""
    if not command or os.path.basename(command[0]) != "msrun" and "msrun" not in command[:3]:
        return command, None
    out, log_dir, i = [], None, 0
    while i < len(command):
        m = _LOG_DIR.match(command[i])
        if m and log_dir is None:
            log_dir = os.path.join(run_dir, "msrun_logs")
            if m.group(1) is None and i + 1 < len(command):
                i += 1
            out.append(f"--log_dir={log_dir}")
        else:
            out.append(command[i])
        i += 1
    if log_dir is None:
        log_dir = os.path.join(run_dir, "msrun_logs")
        out.insert(1, f"--log_dir={log_dir}")
    return out, log_dir


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
    hooked = [log for log in found if log.get("hooked") and (log.get("applied") or log.get("searched")
                                                             or log.get("errors"))]
    return hooked or found


def _merge_logs(logs: List[dict]) -> dict:
    merged = dict(logs[0])
    for key in ("applied", "searched", "errors"):
        merged[key] = [entry for log in logs for entry in log.get(key, [])]
    merged["processes"] = len(logs)
    return merged


def _worker_lines(log_dir: str) -> dict:
    """worker rank -> its output lines (msrun's worker_N.log)."""
    found = {}
    if not log_dir or not os.path.isdir(log_dir):
        return found
    for name in sorted(os.listdir(log_dir)):
        m = re.fullmatch(r"worker_(\d+)\.log", name)
        if m:
            with open(os.path.join(log_dir, name), encoding="utf-8", errors="replace") as fh:
                found[int(m.group(1))] = [l.rstrip("\n") for l in fh if "[WARNING]" not in l and "[INFO]" not in l]
    return found


def _parse_output(lines: List[str]):
    losses, finite = [], []
    for line in lines:
        m = _LOSS.search(line)
        if m:
            text = m.group(1).lower()
            losses.append(float("inf" if text.startswith("inf") else text))
        m = _PARAMS_FINITE.search(line)
        if m:
            finite.append(m.group(1).lower() == "true")
    return losses, finite


def _dump_env(dump_dir: str, workdir: str, dump_options: Optional[dict] = None) -> (dict, list):
    """Config file + environment for an overflow dump of every step, from msoverflow.config's generator (which
    knows the MindSpore version, device and jit-level rules)."""
    from ..config.generator import build
    from ..config.runner import run_env
    config_path = os.path.join(workdir, f"dump_config_{os.path.basename(os.path.dirname(dump_dir))}.json")
    result = build("overflow", path=dump_dir, steps="all", **(dump_options or {}))
    result.write(config_path)
    return run_env(result), list(result.warnings)


def _run_with_dump(command: List[str], dump_dir: str, workdir: str, extra_env: dict, echo: bool, cwd=None,
                   dump_options: Optional[dict] = None):
    env, _ = _dump_env(dump_dir, workdir, dump_options)
    env.update(extra_env)
    lines = []
    try:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
    except OSError as exc:
        raise UserError(f"{command[0]}: cannot run the training command ({exc.strerror})")
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if echo and "[WARNING]" not in line and "[INFO]" not in line:
            sys.stdout.write("    | " + line)
            sys.stdout.flush()
    return proc.wait(), lines


def analyse(dump_dir: str, out_path: str):
    """Analyse the run's dump through the Python API; writes the JSON report to `out_path` and returns
    (its dict, None), or (None, the one-line reason) when the dump could not be analysed."""
    from ..api import analyze
    from ..errors import UserError
    from ..logs import log
    from ..render.json_report import render_json
    try:
        report = analyze(dump_dir, finished=True, warn=lambda message: log.debug("warning: %s", message))
    except UserError as exc:
        return None, str(exc)
    except Exception as exc:      # a crash in the analysis is reported, the verification goes on
        return None, f"msoverflow analyze failed on {dump_dir}: {type(exc).__name__}: {exc}"
    with open(out_path, "w", encoding="utf-8") as fh:
        fh.write(render_json(report))
    log.info("wrote %s (json, %d bytes)", os.path.abspath(out_path), os.path.getsize(out_path))
    return report.to_dict(), None


def run_once(label: str, command: List[str], workdir: str, target: Optional[Target], dtype: str,
             echo: bool = True, cwd=None, dump_options: Optional[dict] = None) -> RunOutcome:
    """One training run with dump on; with a target, the runtime patch is injected through the hook."""
    from .hook import write_hook
    run_dir = os.path.join(workdir, label)
    dump_dir = os.path.join(run_dir, "dump")
    os.makedirs(run_dir, exist_ok=True)
    extra_env, log_path = {}, None
    if target is not None:
        log_path = os.path.join(run_dir, "patch_log.json")
        spec = {"target": target.to_dict(), "dtype": dtype, "log": log_path}
        extra_env = write_hook(os.path.join(run_dir, "hook"), spec, os.path.join(run_dir, "patch_spec.json"))
    command, log_dir = _launcher_log_dir(command, run_dir)
    if echo:
        print(f"  {label} run: {' '.join(command)}", flush=True)
    code, lines = _run_with_dump(command, dump_dir, workdir, extra_env, echo, cwd=cwd, dump_options=dump_options)
    workers = _worker_lines(log_dir)
    # with worker logs, they are the training's output (msrun's own stdout may repeat parts of them)
    all_lines = [l for rank in sorted(workers) for l in workers[rank]] if workers else lines
    losses, finite = _parse_output(all_lines)
    outcome = RunOutcome(label=label, target=target, returncode=code, dump_dir=dump_dir,
                         losses=losses, params_finite=finite,
                         output_tail=[l for l in all_lines if "[WARNING]" not in l and "[INFO]" not in l][-5:])
    for rank, rank_lines in workers.items():
        rank_losses, rank_finite = _parse_output(rank_lines)
        outcome.per_rank[rank] = {"losses": rank_losses, "params_finite": rank_finite}
    outcome.skipped = sorted({f"step {m.group(1)} on rank {m.group(2)}" for l in all_lines
                              for m in [_GUARD_SKIP.search(l)] if m})
    if log_path:
        logs = _process_logs(log_path)
        if logs:
            outcome.patch_log = _merge_logs(logs)
        else:
            outcome.patch_log = {"applied": [], "searched": [], "errors": [
                {"root": "-", "message": "the patch hook never ran (is the command a Python process?)"}]}
    if os.path.isdir(dump_dir):
        report_path = os.path.join(run_dir, "report.json")
        outcome.report, outcome.analysis_error = analyse(dump_dir, report_path)
        outcome.report_path = report_path if outcome.report is not None else None
    else:
        outcome.analysis_error = "the run wrote no dump (did it reach a training step?)"
    return outcome


def _resolve(report_or_target) -> (Target, Optional[dict]):
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
           baseline: Optional[bool] = None, echo: bool = True, cwd: Optional[str] = None,
           dump_options: Optional[dict] = None, title: Optional[str] = None) -> VerifyResult:
    """Re-run `command` with dump on and the patch in place; analyse; widen an op-only patch if it falls short.

    how: "runtime" injects msoverflow.patch.apply through the hook; "none" runs the command unchanged (the
    source or YAML patch was written beforehand). baseline: also run unpatched first (default: only when no
    report tells what the origin was). dump_options: msoverflow.config.build keywords for the re-run's dump
    (device, jit_level, ms_version; detected when left out).
    """
    check_dtype(dtype)
    if not command:
        raise UserError("--verify needs the training command after `--`, e.g. -- python train.py")
    if how not in ("runtime", "none"):
        raise UserError(f"verify: how must be 'runtime' or 'none', got {how!r}")
    target, before = _resolve(report_or_target)
    workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="msoverflow-verify-"))
    if not _DUMP_PATH_OK.match(workdir):
        raise UserError(f"{workdir}: MindSpore dump paths may hold only letters, digits, '-', '_' and '/'; "
                        f"choose another --workdir")
    os.makedirs(workdir, exist_ok=True)
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
