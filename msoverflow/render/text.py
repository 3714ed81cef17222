"""Text: a verdict a person can read in five seconds, then the evidence."""
from __future__ import annotations

import io
from typing import TYPE_CHECKING, List, Optional

from ..model import NONFINITE_INPUT, SUSPECT
from ..scope import is_backward
from .common import (
    arrival_text,
    arrivals_shown,
    cause_shown,
    cause_text,
    cause_values_text,
    clean_text,
    contained_text,
    coords_phrase,
    count_cell,
    counts_note,
    fixes_shown,
    handled_details,
    handled_text,
    history_lines,
    inconclusive_lead,
    kind_shown,
    made_shown,
    parallel_text,
    parameters_shown,
    producer_text,
    provenance_text,
    rank_where,
    ranks_shown,
    recompute_rows,
    recompute_shown,
    recompute_title,
    sample_texts,
    scanned_text,
    steps_text,
    tensors_shown,
)
from .safe import plain

if TYPE_CHECKING:
    from ..model import Finding, RankStatus, Report, TensorSummary


def max_abs_text(stats) -> str:
    """max |x| as people mean it: inf when the tensor holds an inf, else the largest finite |x|."""
    if stats is None:
        return "-"
    if stats.posinf or stats.neginf:
        return "inf"
    if stats.max_abs is None:
        return "nan" if stats.nan else "-"
    return f"{stats.max_abs:.4g}"


def range_used_text(t: TensorSummary, digits: int = 0) -> str:
    """The share of the declared dtype's range used; "inf" when the tensor holds an inf (past any range)."""
    if t.stats is not None and (t.stats.posinf or t.stats.neginf):
        return "inf"
    return f"{t.range_used:.{digits}%}" if t.range_used is not None else "-"


def chain_label(f: Finding) -> str:
    """One hop of a spread chain: the op type and the Cell it ran in (the last two parts of the path)."""
    if f.op_type == "Parameter":
        return f"Parameter({f.op_name})"
    cell = ".".join(f.cell.split(".")[-2:]) if f.cell else (f.cell_type or "")
    return f"{f.op_type}[{cell}]" if cell else f.op_type


def _where(f: Finding, report: Optional[Report] = None) -> str:
    if report is not None:
        return f"{rank_where(f.rank, report)}, step {f.step}, graph {f.graph}"
    return f"rank {f.rank}, step {f.step}, graph {f.graph}"


def op_label(f: Finding) -> str:
    """`SqrtGrad (backward of Sqrt) in network.lm_head (NormHead)`: a backward op is named as one, also when it has
    its forward op's type (the gradient of a Div is a Div)."""
    label = f.op_type
    if f.kind == NONFINITE_INPUT and f.op_type == "Parameter":     # a graph input or weight: its name says which
        label += f" {f.op_name}"
    if f.inner_gradient:
        label += f" (gradient of {f.forward_op or 'its forward op'}, taken in the forward)"
    elif (f.forward_op and f.forward_op != f.op_type) or is_backward(f.full_name or f.op_name):
        label += f" (backward of {f.forward_op})" if f.forward_op else " (backward)"
    if f.cell:
        label += f" in {f.cell} ({f.cell_type})"
    elif f.cell_type:
        label += f" in a {f.cell_type}"
    return label


def _print(table) -> str:
    from rich.console import Console
    out = io.StringIO()
    Console(file=out, width=160, color_system=None, highlight=False, soft_wrap=False, markup=False,
            emoji=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())


def _cells(*values) -> list:
    """Table cells as rich Text: a name like `[bold]` or `[/]` from a dump is shown, never read as markup."""
    from rich.text import Text
    return [Text(plain(v)) for v in values]


def tensor_table(title: str, tensors: List[TensorSummary]) -> str:
    from rich.table import Table
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, show_edge=False)
    for column in ("slot", "dtype", "shape", "max |x|", "range used", "nan", "+inf", "-inf", "produced by"):
        table.add_column(column, overflow="fold")
    shown, left_out = tensors_shown(tensors)
    for t in shown:
        s = t.stats
        dtype = t.dtype or "?"
        if t.payload_dtype:
            dtype += f" ({t.payload_dtype} bytes)"
        table.add_row(*_cells(t.slot, dtype, shape_text(t.shape), max_abs_text(s), range_used_text(t),
                              count_cell(s, "nan"), count_cell(s, "posinf"), count_cell(s, "neginf"),
                              producer_text(t)))
    lines = [_print(table)]
    if left_out:
        lines.append(f"    ... {left_out}")
    note = counts_note(shown)
    if note:
        lines.append(f"    {note}")
    return "\n".join(lines)


def cause_lines(cause) -> List[str]:
    """The recompute behind the cause: per precision, and the bad values beside the recomputed ones."""
    from rich.table import Table
    lines = []
    if cause.recompute:
        table = Table(box=None, pad_edge=False, show_edge=False)
        for column in ("dtype", "finite", "max |x|", "agrees with the dump"):
            table.add_column(column, overflow="fold")
        for row in recompute_rows(cause):
            table.add_row(*_cells(*row))
        lines.append(f"  {recompute_title(cause)}")
        lines.append(_print(table))
        lines += [f"    {text}" for text in sample_texts(cause)]
    lines += [f"  - {item}" for item in cause.evidence]
    return lines


def headline(report: Report) -> str:
    """The verdict in one line: the text report's first line (and the Report's repr)."""
    f = report.first
    if f is None and report.inconclusive:
        return f"INCONCLUSIVE: {inconclusive_lead(report)}{report.inconclusive[0]}"
    if f is None:
        return f"CLEAN: {clean_text(report)}."
    if f.role == SUSPECT:
        return (f"ANOMALY: the hardware flagged {op_label(f)}; its inputs were not dumped, so it may have received "
                "the bad value rather than created it")
    return f"ANOMALY: {kind_shown(f)} {made_shown(f)} {op_label(f)}"


def render_text(report: Report, top: int = 10) -> str:
    lines: List[str] = [headline(report)]
    f = report.first
    if f is None and report.inconclusive:
        lines += [f"  also: {reason}" for reason in report.inconclusive[1:]]
        lines += [f"  caveat: {limit}" for limit in report.coverage]
    elif f is None:
        lines += [f"  caveat: {limit}" for limit in report.coverage]
    else:
        lines.append(f"  where : {_where(f, report)}")
        lines.append(f"  what  : {f.detail}")
        if f.source:
            lines.append(f"  source: {f.source.file}:{f.source.line}  {f.source.code}")
        said, recomputed = cause_shown(report, f), recompute_shown(report, f)
        if said is not None:
            lines.append(f"  cause : {said[0]}: {said[1]}")
        if recomputed is not None:
            lines.append(f"  op    : {cause_text(recomputed)}")
        if f.cause is not None:
            if cause_values_text(f.cause):
                lines.append(f"  values: {cause_values_text(f.cause)}")
        lines += [f"  fix   : {fix}" for fix in fixes_shown(report, f)]
        lines.append("")
        lines.append("Evidence")
        lines.append(f"  op: {f.full_name or f.op_name}")
        if f.inputs:
            lines.append(tensor_table("  inputs", f.inputs))
        if f.outputs:
            lines.append(tensor_table("  outputs", f.outputs))
        for flag in f.flags:
            lines.append(f"  overflow flag: {flag.unit} status {flag.status:#x} "
                         f"({', '.join(flag.status_words) or 'overflow'}) from {flag.source}")
        for item in f.evidence:
            lines.append(f"  - {item}")
        if f.cause is not None:
            lines += cause_lines(f.cause)
        if report.propagation:
            chain = [chain_label(p) for p in report.propagation]
            shown = chain[:8] + (["..."] + chain[-3:] if len(chain) > 11 else chain[8:])
            lines.append(f"  spread in step {f.step} through {len(chain)} ops: "
                         + " -> ".join([chain_label(f)] + shown))
        if f.history is not None:
            lines.append("")
            lines.append(f"Since when: {f.history.summary}")
            lines += [f"  {line}" for line in history_lines(f.history)]
        later = report.anomalies[1:]
        if later:
            lines.append("")
            lines.append(f"Later origins ({len(later)}, by step)")
            for other in later[:top]:
                cause = f" (cause: {other.cause.cause})" if other.cause is not None else ""
                lines.append(f"  {_where(other)}: {kind_shown(other)} in {op_label(other)} - {other.detail}{cause}")
            if len(later) > top:
                lines.append(f"  ... {len(later) - top} more (--top N, or --format json)")
        if report.flagged:
            lines.append("")
            lines.append(f"Flagged by the hardware, not decided ({len(report.flagged)}: inputs not dumped or not "
                         "matched)")
            for other in report.flagged[:top]:
                lines.append(f"  {_where(other)}: {op_label(other)} - {other.detail}")
            if len(report.flagged) > top:
                lines.append(f"  ... {len(report.flagged) - top} more (--top N, or --format json)")
        if report.coverage or report.inconclusive:
            lines.append("")
            lines.append("Limits of this dump")
            lines += [f"  caveat: {limit}" for limit in report.coverage]
            lines += [f"  also: {reason}" for reason in report.inconclusive]
    lines += harmless_sections(report, top)
    if report.rank_status:
        lines.append("")
        lines.append(rank_table(report.rank_status))
        if report.parallel:
            lines.append(f"  layout: {parallel_text(report.parallel)}")
    if report.parameters:
        lines.append("")
        lines.append(parameter_table(report))
    if report.arrivals:
        arrivals, left_out = arrivals_shown(report)
        lines.append("")
        lines.append(f"Arrivals ({len(report.arrivals)}: a collective delivered a bad value to the rank)")
        lines += [f"  {arrival_text(a)}" for a in arrivals]
        if left_out:
            lines.append(f"  ... {left_out}")
    lines.append("")
    lines.append(scan_summary(report))
    lines.append(scanned_text(report).capitalize() + ".")
    if not report.tail_clean:
        lines.append("Steps after the first origin were not scanned (--all scans every step).")
    if report.warnings:
        lines.append(f"Warnings ({len(report.warnings)}):")
        for w in report.warnings[:5]:
            lines.append(f"  ! {w}")
        if len(report.warnings) > 5:
            lines.append(f"  ... {len(report.warnings) - 5} more (--format json lists all)")
    provenance = provenance_text(report)
    if provenance:
        lines.append(f"-- {provenance}")
    # Everything above may carry names from the dump: no control character reaches the terminal.
    return plain("\n".join(lines) + "\n")


def harmless_sections(report: Report, top: int = 10) -> List[str]:
    """Non-finite values that are no fault: contained ones, and overflows the loss scale handled."""
    lines: List[str] = []
    strict = " (reported as findings: --strict)" if report.strict else ""
    if report.contained:
        lines += ["", f"Contained ({len(report.contained)}: absorbed with finite outputs; they reach no loss, "
                      f"gradient, parameter or optimizer state){strict}"]
        for c in report.contained[:top]:
            lines.append(f"  {contained_text(c)}")
            if c.source:
                lines.append(f"    source: {c.source.file}:{c.source.line}  {c.source.code}")
        if len(report.contained) > top:
            lines.append(f"  ... {len(report.contained) - top} more (--top N, or --format json)")
    if report.handled:
        lines += ["", f"Handled by the loss scale ({len(report.handled)}: backward only, updates skipped, later "
                      f"steps recover){strict}"]
        for h in report.handled[:top]:
            lines.append(f"  {handled_text(h)}")
            lines += [f"    {detail}" for detail in handled_details(h)]
        if len(report.handled) > top:
            lines.append(f"  ... {len(report.handled) - top} more (--top N, or --format json)")
    return lines


def _short(name: Optional[str], width: int = 56) -> str:
    name = name or ""
    return name if len(name) <= width else "..." + name[-(width - 3):]


def rank_text(row: RankStatus) -> str:
    """One rank's story in a few words: how it first went bad, and where."""
    if row.status == "received":
        return f"via {row.op_type} {_short(row.op_name)}" if row.via else row.note
    if row.op_type:
        return f"{row.op_type} {_short(row.op_name)}" + (f" ({row.note})" if row.note else "")
    return row.note


def rank_table(rows: List[RankStatus]) -> str:
    from rich.table import Table
    table = Table(title="Ranks", title_justify="left", box=None, pad_edge=False, show_edge=False)
    with_coords = any(row.coords for row in rows)
    for column in ("rank", "status", "step") + (("coords",) if with_coords else ()) + ("first bad op / how",):
        table.add_column(column, overflow="fold")
    shown, left_out = ranks_shown(rows)
    for label, row in shown:
        table.add_row(*_cells(label, row.status, "-" if row.step is None else row.step,
                              *((coords_phrase(row.coords),) if with_coords else ()), rank_text(row)))
    return _print(table) + (f"\n  ... {left_out}" if left_out else "")


def parameter_table(report: Report) -> str:
    """Per rank, the parameters whose gradient or value first went non-finite, and how."""
    from rich.table import Table
    table = Table(title=f"Parameters hit ({len(report.parameters)}: first non-finite gradient or value, per rank)",
                  title_justify="left", box=None, pad_edge=False, show_edge=False)
    for column in ("rank", "coordinates", "step", "parameter", "shape"):
        table.add_column(column, overflow="fold")
    table.add_column("how", ratio=1, overflow="fold")     # whole sentences, wrapped between words
    shown, left_out = parameters_shown(report)
    for hit in shown:
        table.add_row(*_cells(hit.rank, coords_phrase(hit.coords) or "-", hit.step, _short(hit.name, 60),
                              shape_text(hit.shape), hit.how))
    return _print(table) + (f"\n  ... {left_out}" if left_out else "")


def scan_summary(report: Report) -> str:
    """One line on what the dump holds: files, layout, writer, tensors read, ranks and the steps present (the
    steps scanned are said by common.scanned_text)."""
    per_rank = {r: steps_text(v) for r, v in sorted(report.steps.items())}
    if not per_rank:
        steps = "no step"
    elif len(set(per_rank.values())) == 1:
        steps = f"steps present: {next(iter(per_rank.values()))} on every rank"
    else:
        shown = list(per_rank.items())[:64]
        steps = "steps present: " + "; ".join(f"rank {r}: {v}" for r, v in shown) + (
            f"; ... {len(per_rank) - len(shown)} more rank(s)" if len(per_rank) > len(shown) else "")
    meta = report.extra.get("mindspore") or {}
    written_by = (f", MindSpore {meta['version']} {meta.get('device_target') or ''}".rstrip()
                  if meta.get("version") else "")
    if report.layout == "hunt" and not report.files:
        return (f"Checked {report.tensors_read} tensors live (hunt, no dump files); ranks "
                f"{steps_text(report.ranks)}; {steps}")
    return (f"Scanned {report.files} files ({report.layout or 'unknown'} layout{written_by}), read "
            f"{report.tensors_read} tensors; ranks {steps_text(report.ranks)}; {steps}")


def shape_text(shape) -> str:
    if shape is None:
        return "?"
    return "x".join(map(str, shape)) if shape else "scalar"
