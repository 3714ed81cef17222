"""The documented, stable JSON report as a dict (schema: msoverflow/schema/report.schema.json), beside the model it
describes: model.Report.to_dict() calls it, render/json_report.py writes it out. It stands below the model and
imports nothing of it: it only reads the attributes the schema lists. Schema 1 keeps the dump's word `iteration`
for steps."""
from __future__ import annotations

import math
from typing import Optional

SCHEMA_VERSION = 1


def finite_or_none(x: Optional[float]):
    """A number as the JSON schemas hold it: null for NaN and infinities (JSON has none)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return x


def graph_id(graph: str):
    """The dump's graph/model id: an integer where it is numeric (graph 0), else the string as written."""
    return int(graph) if isinstance(graph, str) and graph.isdigit() else graph


_COUNTS = ("nan", "posinf", "neginf", "over_range")


def _counts(s) -> dict:
    """Exact counts, or null with `<name>_at_least` when the dump recorded only statistics (Max = inf says at
    least one +inf, not how many). `<name>_at_least` is always given: an exact count is its own lower bound."""
    if s is None:
        return {**{name: None for name in _COUNTS}, **{f"{name}_at_least": None for name in _COUNTS},
                "counts_exact": None}
    exact = s.counts_exact
    return {**{name: getattr(s, name) if exact else None for name in _COUNTS},
            **{f"{name}_at_least": getattr(s, name) for name in _COUNTS}, "counts_exact": exact}


def tensor_dict(t) -> dict:
    s = t.stats
    return {
        "slot": t.slot, "dtype": t.dtype, "payload_dtype": t.payload_dtype,
        "shape": list(t.shape) if t.shape is not None else None,
        "max_abs": finite_or_none(s.max_abs) if s else None, "min": finite_or_none(s.min) if s else None, "max": finite_or_none(s.max) if s else None,
        **_counts(s), "zero": s.zero if s else None,
        "count": s.count if s else None, "range_used": finite_or_none(t.range_used),
        "headroom": finite_or_none(t.range_used),  # old name of range_used, kept for readers of schema 1
        "producer": t.producer, "file": t.file,
    }


def finding_dict(f) -> dict:
    return {
        "rank": f.rank, "graph": graph_id(f.graph), "iteration": f.step, "op_type": f.op_type,
        "op_name": f.op_name, "full_name": f.full_name, "ir_file": f.ir_file, "ir_line": f.ir_line, "role": f.role, "kind": f.kind, "detail": f.detail, "timestamp": f.timestamp,
        "forward_op": f.forward_op, "inner_gradient": f.inner_gradient, "cell": f.cell, "cell_type": f.cell_type,
        "source": _source(f.source),
        "inputs": [tensor_dict(t) for t in f.inputs], "outputs": [tensor_dict(t) for t in f.outputs],
        "overflow_flags": [{"unit": r.unit, "status": r.status, "status_words": r.status_words,
                            "task_id": r.task_id, "stream_id": r.stream_id, "source": r.source} for r in f.flags],
        "recommendation": f.recommendation, "evidence": f.evidence,
        "cause": f.cause.cause if f.cause else None,
        "recompute": [recomputed_dict(r) for r in f.cause.recompute] if f.cause else [],
        "diagnosis": cause_dict(f.cause) if f.cause else None,
        "history": history_dict(f.history) if f.history is not None else None,
    }


def recomputed_dict(r) -> dict:
    return {"dtype": r.dtype, "finite": r.finite, "max_abs": r.max_abs, "nonfinite": r.nonfinite,
            "agrees": r.agrees, "mismatches": r.mismatches}


def _value(x: float):
    """A value that may be non-finite: the number, or 'nan' / 'inf' / '-inf' (JSON has no such numbers)."""
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def cause_dict(cause) -> dict:
    return {"reason": cause.reason, "advice": cause.advice, "by": cause.by, "output_slot": cause.output_slot,
            "where": cause.where, "axes": cause.axes, "pattern": cause.pattern, "pattern_text": cause.pattern_text,
            "evidence": cause.evidence,
            "samples": [{"index": list(s.index), "dumped": _value(s.dumped),
                         "recomputed": {k: _value(v) for k, v in s.recomputed.items()}} for s in cause.samples]}


def _source(s) -> Optional[dict]:
    return {"file": s.file, "line": s.line, "code": s.code} if s else None


def history_dict(h) -> dict:
    return {"rank": h.rank, "step": h.step, "summary": h.summary, "earlier_cause": h.earlier_cause,
            "series": [{"name": s.name, "kind": s.kind, "steps": s.steps,
                        "max_abs": [finite_or_none(v) for v in s.max_abs], "trend": s.trend or None,
                        "since": s.since} for s in h.series]}


def contained_dict(c) -> dict:
    return {"rank": c.rank, "steps": c.steps, "graph": graph_id(c.graph), "op_type": c.op_type, "op_name": c.op_name,
            "full_name": c.full_name, "cell": c.cell, "cell_type": c.cell_type, "value": c.value,
            "absorbed_by": c.absorbed_by, "absorbers": c.absorbers, "spread": c.spread, "source": _source(c.source),
            "evidence": c.evidence}


def handled_dict(h) -> dict:
    return {"ranks": h.ranks, "steps": h.steps, "scale_from": finite_or_none(h.scale_from),
            "scale_to": finite_or_none(h.scale_to), "scale_how": h.scale_how or None,
            "scale_evidence": h.scale_evidence or None, "skipped_how": h.skipped_how, "recovered_at": h.recovered_at,
            "ops": h.ops, "evidence": h.evidence,
            "received": {str(rank): steps for rank, steps in sorted(h.received.items())}}


def conclusion_dict(report) -> dict:
    """The report's one judgement (msoverflow/judgement/): what `patch` and the next-command hint read."""
    c = report.judged()
    return {"rule": c.rule, "verdict": c.verdict, "harmful": c.harmful, "kind": c.kind, "cause": c.cause,
            "reason": c.reason, "fix": c.fix, "next_command": c.next_command, "patch": c.patch,
            "patch_may_act": c.patch_may_act, "evidence": c.used}


def report_dict(report) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": report.verdict,
        "dump_dir": report.dump_dir,
        "first": {**finding_dict(report.first), "recommendation": report.fix_shown(report.first)} if report.first
        else None,
        "conclusion": conclusion_dict(report),
        "anomalies": [{**finding_dict(f), "recommendation": report.fix_shown(f)} for f in report.anomalies],
        "propagation": [{"rank": f.rank, "graph": graph_id(f.graph), "iteration": f.step, "op_type": f.op_type,
                         "op_name": f.op_name, "full_name": f.full_name, "kind": f.kind, "cell": f.cell}
                        for f in report.propagation],
        "flagged": [finding_dict(f) for f in report.flagged],
        "strict": report.strict,
        "contained": [contained_dict(c) for c in report.contained],
        "handled": [handled_dict(h) for h in report.handled],
        "ranks": [{"rank": r.rank, "status": r.status, "iteration": r.step, "op_name": r.op_name,
                   "op_type": r.op_type, "via": r.via, "note": r.note, "coords": r.coords, "present": r.present,
                   "expected": r.expected, **({"last_rank": r.last_rank} if r.last_rank is not None else {})}
                  for r in report.rank_status],
        "arrivals": [{"rank": a.rank, "iteration": a.step, "op_type": a.op_type, "op_name": a.op_name,
                      "offset_us": a.offset_us} for a in report.arrivals],
        "scanned_steps": {str(rank): steps for rank, steps in sorted(report.scanned_steps.items())},
        "step_spans": {str(rank): {str(step): {"first_us": span[0], "last_us": span[1]}
                                   for step, span in sorted(steps.items())}
                       for rank, steps in sorted(report.step_times.items())},
        "edges": [{"producer": producer, "consumer": consumer} for producer, consumer in report.edges],
        "likely_origin": finding_dict(report.likely_origin) if report.likely_origin else None,
        "completeness": [{"rank": c.rank, "iteration": c.step, "present": c.present, "expected": c.expected,
                          "reasons": c.reasons, "truncated": c.truncated, "recent": c.recent}
                         for c in report.completeness],
        "parameters": [{"name": p.name, "rank": p.rank, "iteration": p.step,
                        "shape": list(p.shape) if p.shape is not None else None, "how": p.how, "op_name": p.op_name,
                        "coords": p.coords} for p in report.parameters],
        "parallel": report.parallel,
        "provenance": report.provenance or None,
        "coverage": report.coverage,
        "inconclusive": report.inconclusive,
        "warnings": report.warnings,
        "summary": {"layout": report.layout, "ranks": report.ranks,
                    "iterations": {str(k): v for k, v in report.steps.items()},
                    "files": report.files, "tensors_read": report.tensors_read,
                    "tensors_read_to_decide": report.extra.get("tensors_read_to_decide", report.tensors_read),
                    "scanned_all_steps": report.tail_clean,
                    "mindspore": report.extra.get("mindspore") or {}},
    }
