"""What each MCP tool does. Every answer comes from msoverflow's library (api.analyze/events/compare, the config
generator and checker, patch.targets and patch.source_patch, repro.write): nothing here analyses a dump.

Two halves:
- `heavy(name, args, report)` runs in the worker process (worker.py: time and memory bounded): it reads dumps,
  configs and sources and returns the library's answer as JSON-able dicts.
- the compact forms (`analyze_answer`, `explain`, ...) run in the server: they cut the answers to a model's
  context (MAX_CHARS), page them, and end each with the next useful calls.
Arguments were checked (types, ranges) and every path resolved under the roots (confine.py) before either half.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Any, Dict, List, Optional

from .answer import MAX_CHARS, call, dumps, fit  # noqa: F401  (MAX_CHARS, dumps: also read as the tools' names)
from .confine import Roots, ToolError

EVENT_COLUMNS = ("rank", "step", "op_type", "op_name", "io", "slot", "dtype", "shape", "max_abs", "nan", "posinf",
                 "neginf", "over_range", "counts_exact", "bad")
MAX_EVENT_ROWS = 200


# ---- the worker's half: the library's answers ----------------------------------------------------------------

def heavy(name: str, args: Dict[str, Any], report: Optional[dict], roots: Roots) -> dict:
    """Run one reading tool through the library; anything the library prints goes to stderr (stdout carries the
    worker's answer)."""
    with contextlib.redirect_stdout(sys.stderr):
        return _HEAVY[name](args, report, roots)


def _analyze(args, report, roots) -> dict:
    from .. import api
    result = api.analyze(args["path"], ranks=args.get("ranks"), steps=args.get("steps"),
                         strict=bool(args.get("strict", False)), scan_all=bool(args.get("all", False)),
                         finished=True, command=["msoverflow", "mcp", "analyze"])
    return {"report": result.to_dict(), "exit_code": result.exit_code}


def _events(args, report, roots) -> dict:
    from .. import api
    frame = api.events(args["path"], ranks=args.get("ranks"), steps=args.get("steps"))
    total = len(frame)
    if args.get("bad_only", True):
        frame = frame[frame["bad"]]
    if args.get("op_type"):
        frame = frame[frame["op_type"] == args["op_type"]]
    if args.get("op_name"):
        frame = frame[frame["op_name"].str.contains(args["op_name"], regex=False)]
    if args.get("io"):
        frame = frame[frame["io"] == args["io"]]
    offset, limit = int(args.get("offset", 0)), int(args.get("limit", 40))
    page = frame.iloc[offset:offset + limit]
    rows = [[_cell(v) for v in row] for row in page[list(EVENT_COLUMNS)].itertuples(index=False, name=None)]
    held = {"ranks": sorted({int(r) for r in frame["rank"]}) if len(frame) else [],
            "op_types": sorted({str(t) for t in frame["op_type"]})[:50]}
    return {"events_in_selection": total, "matched": len(frame), "offset": offset, "columns": list(EVENT_COLUMNS),
            "rows": rows, "matched_holds": held}


def _cell(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, tuple):
        return list(value)
    return value


def _compare(args, report, roots) -> dict:
    from .. import api
    result = api.compare(args["baseline"], args["target"], ranks=args.get("ranks"), steps=args.get("steps"),
                         tolerance_ulps=args.get("ulps"), top=int(args.get("top", 10)),
                         command=["msoverflow", "mcp", "compare"])
    return {"report": result.to_dict()}


def _config(args, report, roots) -> dict:
    from ..config.generator import build
    result = build(args.get("purpose", "overflow"), ms_version=args.get("ms_version"), device=args.get("device"),
                   jit_level=args.get("jit_level"), mode=args.get("mode"), path=args.get("dump_path"),
                   config_path=None)
    return {"result": result.to_dict()}


def _check_config(args, report, roots) -> dict:
    from ..config.checker import check
    problems = check(args["path"], ms_version=args.get("ms_version"), device=args.get("device"),
                     jit_level=args.get("jit_level"))
    errors = sum(p.severity == "error" for p in problems)
    warnings = sum(p.severity == "warning" for p in problems)
    strict = bool(args.get("strict", False))
    return {"result": {"file": args["path"], "ok": not (errors or (strict and warnings)), "errors": errors,
                       "warnings": warnings, "strict": strict, "problems": [p.to_dict() for p in problems]}}


def _patch_preview(args, report, roots) -> dict:
    from ..commands.patch import _cause_refuses, _is_masked_division
    from ..patch import source_patch
    from ..patch.targets import target_from_report
    assert report is not None
    where = "the report"
    target = target_from_report(report, where)
    refused = _cause_refuses(report, target, where)
    first = report.get("first") or {}
    answer: Dict[str, Any] = {"target": target.to_dict(), "cause": first.get("cause"),
                              "dtype": args.get("dtype", "float32")}
    if refused:
        answer.update(patched=False, refused=refused)
        return answer
    if _is_masked_division(target):
        answer.update(patched=False, how="guard",
                      refused="an invalid 0/0 or x/0 at a masked mean: the fix is the zero-token guard, not a "
                              "precision patch (msoverflow patch --from REPORT --how guard shows its diff)")
        return answer
    if not target.source:
        answer.update(patched=False, how="runtime",
                      runtime=f"from msoverflow.patch import apply, Target; apply(train_network, "
                              f"Target(cell={target.cell or target.op!r}), {answer['dtype']!r})")
        return answer
    source = roots.path(target.source.file, "the report's source file")
    patch = source_patch.plan(source, target.source.line, answer["dtype"], code=target.source.code)
    answer.update(how="source", file=source, line=patch.line, function=patch.function, already=patch.already,
                  changes=patch.changes, diff="" if patch.already else patch.diff(), written=False)
    return answer


def _repro(args, report, roots) -> dict:
    import tempfile

    from .. import repro
    assert report is not None
    dump_dir = roots.path(args["dump"], "dump") if args.get("dump") else None
    if dump_dir is None and isinstance(report.get("dump_dir"), str):
        dump_dir = roots.path(report["dump_dir"], "the report's dump_dir")
    device = {"cpu": "CPU", "ascend": "Ascend", "gpu": "GPU"}[args.get("device", "cpu")]
    op = str((report.get("first") or {}).get("op_type") or "origin").replace(os.sep, "_")
    if roots.write:
        out_dir = os.path.join(roots.write, f"repro_{op}")
        made = repro.write(report, out_dir, device=device, dump_dir=dump_dir)
        return {"script_text": _read(made.script), "written": out_dir, "inputs": made.inputs, "how": made.how,
                "cause": made.cause}
    # Without --allow-write the script is made in a private temporary directory, read, and removed with it.
    with tempfile.TemporaryDirectory(prefix="msoverflow-mcp-repro-") as tmp:
        made = repro.write(report, os.path.join(tmp, f"repro_{op}"), device=device, dump_dir=dump_dir)
        inputs = [os.path.basename(p) for p in made.inputs]
        return {"script_text": _read(made.script), "written": None, "inputs": inputs, "how": made.how,
                "cause": made.cause}


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _watch_status(args, report, roots) -> dict:
    from .watch import watch_status
    return watch_status(args["dir"])


_HEAVY = {"watch_status": _watch_status, "analyze": _analyze, "events": _events, "compare": _compare, "config": _config,
          "check_config": _check_config, "patch_preview": _patch_preview, "repro": _repro}
HEAVY_TOOLS = frozenset(_HEAVY)


# ---- the server's half: compact answers for a model's context ------------------------------------------------

def origin_of(finding: Optional[dict]) -> Optional[dict]:
    """A finding in the few fields an agent acts on; every name is the dump's."""
    if not finding:
        return None
    diagnosis = finding.get("diagnosis") or {}
    return {"op_type": finding.get("op_type"), "op_name": finding.get("op_name"),
            "forward_op": finding.get("forward_op"), "cell": finding.get("cell"),
            "cell_type": finding.get("cell_type"), "source": finding.get("source"), "rank": finding.get("rank"),
            "step": finding.get("iteration"), "role": finding.get("role"), "kind": finding.get("kind"),
            "detail": finding.get("detail"), "cause": finding.get("cause"),
            "cause_reason": diagnosis.get("reason"), "fix": finding.get("recommendation")}


def analyze_answer(report: dict, report_id: str, path: str) -> dict:
    first = report.get("first")
    summary = report.get("summary") or {}
    answer = {
        "report": report_id, "verdict": report.get("verdict"), "dump_dir": report.get("dump_dir"),
        "first": origin_of(first),
        "counts": {"anomalies": len(report.get("anomalies") or []), "flagged": len(report.get("flagged") or []),
                   "contained": len(report.get("contained") or []), "handled": len(report.get("handled") or []),
                   "propagation": len(report.get("propagation") or []), "warnings": len(report.get("warnings") or []),
                   "files": summary.get("files"), "tensors_read": summary.get("tensors_read")},
        "ranks": [{"rank": r.get("rank"), "status": r.get("status"), "step": r.get("iteration"),
                   "op_type": r.get("op_type"), "via": r.get("via")} for r in (report.get("ranks") or [])][:16],
        "dump_holds": {"ranks": summary.get("ranks"), "steps": summary.get("iterations")},
        "inconclusive": (report.get("inconclusive") or [])[:5],
    }
    answer["next"] = _after_analyze(report, report_id, path)
    return fit(answer)


def _after_analyze(report: dict, report_id: str, path: str) -> List[dict]:
    first = report.get("first") or {}
    verdict = report.get("verdict")
    steps: List[dict] = []
    if verdict == "anomaly" and first:
        steps.append(call("explain", "why this op: the evidence and the cause behind the verdict",
                          report=report_id, part="evidence"))
        if first.get("history") and not (first.get("history") or {}).get("earlier_cause"):
            steps.append(call("explain", "since when the values grew (a dynamics problem is not fixed by dtype)",
                              report=report_id, part="history"))
        cause = first.get("cause")
        dynamics = bool((first.get("history") or {}).get("earlier_cause"))
        if dynamics:
            steps.append(call("explain", "the values grew over earlier steps: training dynamics (learning rate, "
                                         "clipping), which a dtype patch only delays", report=report_id,
                              part="history"))
        elif first.get("role") == "origin" and cause not in ("device", "data", "domain"):
            steps.append(call("patch_preview", "the source diff that moves the region to float32 (not written)",
                              report=report_id))
        elif cause in ("device", "data", "domain"):
            steps.append(call("explain", f"the cause is {cause}: a precision patch would not fix it; read the "
                                         "advice", report=report_id, part="diagnosis"))
        steps.append(call("events", "the bad tensors of the origin's step", path=path, ranks=str(first.get("rank")),
                          steps=str(first.get("iteration")), bad_only=True))
        steps.append(call("repro", "a script re-running the origin op alone from its dumped inputs",
                          report=report_id))
    elif verdict == "inconclusive":
        steps.append(call("explain", "what was not understood or not read", report=report_id, part="inconclusive"))
        steps.append(call("explain", "which (rank, step) is incomplete", report=report_id, part="completeness"))
    else:
        if report.get("contained") or report.get("handled"):
            steps.append(call("explain", "non-finite values that were absorbed or handled (no fault)",
                              report=report_id, part="contained" if report.get("contained") else "handled"))
        steps.append(call("compare", "clean but the loss differs: find where this run parts from a good one",
                          baseline="<a good run's dump>", target=path))
    if len(report.get("ranks") or []) > 1:
        steps.append(call("explain", "how each rank went bad", report=report_id, part="ranks"))
    return steps


# The parts explain() shows: where each lives in the report (top level or the first origin's finding).
FINDING_PARTS = ("evidence", "diagnosis", "recompute", "history", "inputs", "outputs", "overflow_flags", "source")
REPORT_PARTS = ("first", "anomalies", "flagged", "propagation", "ranks", "parameters", "contained", "handled",
                "arrivals", "completeness", "coverage", "inconclusive", "warnings", "edges", "summary", "provenance",
                "scanned_steps", "step_spans", "parallel")
COMPARE_PARTS = ("first_divergence", "worst", "unmatched", "summary", "inconclusive", "caveats", "warnings",
                 "parallel", "provenance", "baseline", "target")
PARTS = tuple(dict.fromkeys(FINDING_PARTS + REPORT_PARTS + COMPARE_PARTS))


def explain(report: dict, report_id: str, part: str, page: int, per_page: int) -> dict:
    kind = "comparison" if "first_divergence" in report else "analysis"
    holds = COMPARE_PARTS if kind == "comparison" else FINDING_PARTS + REPORT_PARTS
    if part not in holds:
        raise ToolError(f"part {part!r} is not in this {kind} report; it holds: {', '.join(holds)}")
    if kind == "analysis" and part in FINDING_PARTS:
        first = report.get("first") or {}
        if not first:
            raise ToolError(f"part {part!r} belongs to the first origin, and this report has none (verdict "
                            f"{report.get('verdict')}); parts with content: "
                            f"{', '.join(p for p in REPORT_PARTS if report.get(p))}")
        value = first.get(part)
        if part == "evidence":
            value = {"evidence": first.get("evidence"), "detail": first.get("detail"),
                     "cause": first.get("cause"), "diagnosis_evidence": (first.get("diagnosis") or {}).get("evidence"),
                     "fix": first.get("recommendation")}
    else:
        value = report.get(part)
    answer: Dict[str, Any] = {"report": report_id, "part": part}
    if isinstance(value, list):
        total = len(value)
        pages = max(1, math.ceil(total / per_page))
        if page > pages:
            raise ToolError(f"page {page} is past the end: part {part!r} has {total} items, {pages} page(s) of "
                            f"{per_page}")
        chunk = value[(page - 1) * per_page: page * per_page]
        while len(chunk) > 1 and len(dumps(chunk)) > MAX_CHARS - 2000:
            chunk = chunk[:len(chunk) // 2]          # a page never outgrows the context budget
        answer.update(total=total, page=page, per_page=len(chunk), items=chunk)
        more = (page - 1) * per_page + len(chunk) < total
        answer["next"] = ([call("explain", "the next page", report=report_id, part=part, page=page + 1,
                                per_page=len(chunk))] if more else []) + _explain_next(report, report_id, part)
    else:
        text = dumps(value)
        if len(text) > MAX_CHARS - 2000:
            # One large object: sent as pages of its JSON text (page N of M), so nothing is lost.
            size = MAX_CHARS - 4000
            pages = math.ceil(len(text) / size)
            if page > pages:
                raise ToolError(f"page {page} is past the end: part {part!r} is {pages} page(s) of JSON text")
            answer.update(page=page, pages=pages, json_text=text[(page - 1) * size: page * size])
            more = page < pages
            answer["next"] = ([call("explain", "the next page of this part's JSON text", report=report_id,
                                    part=part, page=page + 1)] if more else []) + _explain_next(report, report_id,
                                                                                                part)
        else:
            answer["value"] = value
            answer["next"] = _explain_next(report, report_id, part)
    return fit(answer)


def _explain_next(report: dict, report_id: str, part: str) -> List[dict]:
    first = report.get("first") or {}
    if "first_divergence" in report:
        return [call("explain", "the largest differences", report=report_id, part="worst")] if part != "worst" else []
    steps = []
    if part != "diagnosis" and first.get("diagnosis"):
        steps.append(call("explain", "the cause: why the value went bad and what to do", report=report_id,
                          part="diagnosis"))
    if first.get("role") == "origin" and first.get("cause") not in ("device", "data", "domain"):
        steps.append(call("patch_preview", "the fix as a diff (never written)", report=report_id))
    return steps[:3]


def events_answer(result: dict, args: dict) -> dict:
    answer = dict(result)
    offset, limit = int(args.get("offset", 0)), int(args.get("limit", 40))
    while len(answer["rows"]) > 1 and len(dumps(answer)) > MAX_CHARS - 3000:
        answer["rows"] = answer["rows"][:len(answer["rows"]) * 3 // 4]      # a page fits the context budget
    answer["rows_asked"] = limit
    more = offset + len(answer["rows"]) < answer["matched"]
    nxt = []
    if more:
        nxt.append(call("events", "the next rows", **{**args, "offset": offset + len(answer["rows"]),
                                                      "limit": limit}))
    if answer["matched"] and args.get("bad_only", True):
        nxt.append(call("analyze", "which of these bad tensors was made first, and why", path=args["path"]))
    elif not answer["matched"]:
        nxt.append(call("events", "every tensor, not only the bad ones", **{**args, "bad_only": False,
                                                                            "offset": 0}))
    answer["next"] = nxt
    return fit(answer)


def compare_answer(result: dict, report_id: str) -> dict:
    worst = result.get("worst") or []
    answer = {"report": report_id, "verdict": result.get("verdict"),
              "first_divergence": result.get("first_divergence"), "worst": worst[:5],
              "worst_total": len(worst), "unmatched": _count_unmatched(result.get("unmatched")),
              "summary": result.get("summary"), "inconclusive": (result.get("inconclusive") or [])[:5],
              "caveats": (result.get("caveats") or [])[:5]}
    nxt = []
    if len(worst) > 5:
        nxt.append(call("explain", "every largest difference", report=report_id, part="worst"))
    if result.get("unmatched"):
        nxt.append(call("explain", "ops present in one run only", report=report_id, part="unmatched"))
    if result.get("verdict") == "diverged":
        nxt.append(call("analyze", "does the target hold a non-finite origin too?",
                        path=(result.get("target") or {}).get("dump_dir") if isinstance(result.get("target"), dict)
                        else "<target dump>"))
    answer["next"] = nxt
    return fit(answer)


def _count_unmatched(unmatched) -> Any:
    if isinstance(unmatched, list):
        return {"count": len(unmatched)}
    if isinstance(unmatched, dict):
        return {k: len(v) if isinstance(v, list) else v for k, v in unmatched.items()}
    return unmatched


def config_answer(result: dict) -> dict:
    data = result["result"]
    answer = {"purpose": data.get("purpose"), "ms_version": data.get("ms_version"), "device": data.get("device"),
              "jit_level": data.get("jit_level"), "mechanism": data.get("mechanism"), "config": data.get("config"),
              "env": data.get("env"), "unset": data.get("unset"), "summary": data.get("summary"),
              "warnings": data.get("warnings"), "problems": data.get("problems"), "hints": data.get("hints"),
              "written": None}
    answer["next"] = [call("check_config", "check a config you already have against this platform",
                           path="<dump_config.json>")]
    answer["next_shell"] = ["msoverflow config -o dump_config.json  # writes it (this tool never writes)",
                            "msoverflow run -- python train.py  # runs the training under the dump, then analyzes"]
    return fit(answer)


def check_config_answer(result: dict) -> dict:
    answer = dict(result["result"])
    answer["next"] = ([call("config", "a correct config for this platform", device="<cpu|gpu|ascend>")]
                      if not answer["ok"] else [])
    return fit(answer)


def patch_answer(result: dict, report_id: str) -> dict:
    answer = dict(result)
    if answer.get("refused"):
        answer["next"] = [call("explain", "the cause and what to do instead of patching", report=report_id,
                               part="diagnosis")]
    else:
        answer["next"] = [call("repro", "confirm on the op alone that float32 holds the value", report=report_id)]
        answer["next_shell"] = ["msoverflow patch --from report.json --verify -- python train.py  # re-runs "
                                "training with the patch and compares (runs your training: not a tool here)"]
    return fit(answer)


def repro_answer(result: dict, report_id: str) -> dict:
    answer = dict(result)
    answer["next"] = [call("patch_preview", "the fix, once the script shows float32 holds the value",
                           report=report_id)]
    answer["next_shell"] = ["python repro.py --device CPU  # after `msoverflow repro --from report.json -o DIR` "
                            "writes it with its inputs"]
    return fit(answer)
