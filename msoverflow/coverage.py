"""What a dump could not show, and when "nothing found" is not "clean".

coverage_limits: the dump config (rank_N/.dump_metadata) and the files present limit where an origin can be seen:
inputs or outputs only, a kernel filter, overflow-only mode, Parameter-only files, selected steps, PyNative runs
where only compiled graphs were dumped. A clean verdict carries these as caveats.
inconclusive_reasons: files that were not understood or not read, and expected ranks with no files. With any of
these, a verdict without findings is `inconclusive`, never `clean`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from .model import RANK_NOT_DUMPED, RankStatus


def _int(value) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def coverage_limits(settings: Dict[str, Any], runtime: Dict[str, Any], facts, overflow_records: int,
                    framework_dump: bool = False, pynative: Optional[bool] = None) -> List[str]:
    """One line per limit, in the user's terms (the config key that causes it). `facts`: what the scanned files
    hold (walk.DumpedFacts, counted over every op run). framework_dump: the ops were recorded by the framework's
    own hooks (msprobe), every op run eagerly included: no PyNative caveat. pynative: the saved graphs carry
    PyNative's graph attributes (graphs.SavedGraphs.compiled_by_pynative; None: no saved graph)."""
    limits: List[str] = []
    device = str(runtime.get("device_target") or "").upper()
    input_output = _int(settings.get("input_output"))
    has_inputs, has_outputs, runs = facts.with_inputs > 0, facts.with_outputs > 0, facts.runs > 0
    only_parameters = runs and facts.parameter_runs == facts.runs
    if input_output == 1 or (runs and has_inputs and not has_outputs):
        limits.append("inputs only (input_output 1): no output was dumped, so an op that made a bad value is "
                      "known only through the op that read it, and a bad value nobody read is not seen")
    elif input_output == 2 or (runs and has_outputs and not has_inputs and not only_parameters):
        limits.append("outputs only (input_output 2): no input was dumped, so an op is called the origin because "
                      "its output is the first bad one in time; its inputs could not confirm it")
    kernels = settings.get("kernels") or []
    if _int(settings.get("dump_mode")) == 1 or kernels:
        shown = ", ".join(str(k) for k in list(kernels)[:3]) + (" ..." if len(kernels) > 3 else "")
        limits.append(f"kernel filter (dump_mode 1, kernels [{shown}]): only the selected kernels were dumped; "
                      "an origin in any other op cannot be seen")
    op_debug_mode = _int(settings.get("op_debug_mode"))
    only_flagged = bool(overflow_records) and facts.ops > 0 and facts.flagged >= facts.ops
    if (op_debug_mode in (1, 2, 3) and device not in ("CPU", "")) or only_flagged:
        limits.append("overflow-only mode (op_debug_mode 3): only ops the hardware flagged were dumped; a NaN made "
                      "without an overflow flag, or a value received from another rank, may not be seen")
    if only_parameters:
        why = "op_debug_mode 4" if op_debug_mode == 4 else "only Parameter files in the dump"
        limits.append(f"Parameter-only files ({why}): no op's tensors were dumped, only weights and graph inputs; "
                      "an origin inside the network cannot be seen")
    iteration = settings.get("iteration")
    if iteration not in (None, "", "all"):
        limits.append(f"selected steps (iteration \"{iteration}\"): an origin in another step is not seen")
    mode = str(runtime.get("execution_mode") or runtime.get("mode") or "").lower()
    # The saved graphs say it (PyNative's grad marks the graphs it compiles), whatever the number of ops: an
    # optimizer-only dump holds three. Without saved graphs: graph mode names every op under its Cells
    # (`Default/network-WithLossCell/fc1-Dense/MatMul-op0`), the graphs PyNative compiles carry no Cell.
    unscoped = pynative is None and facts.ops >= 4 and not facts.scoped
    if not framework_dump and ("pynative" in mode or pynative or unscoped):
        limits.append("PyNative run: only compiled graphs (@jit functions, the optimizer, checks) were dumped; ops "
                      "run eagerly between them are not in the dump")
    return limits


def inconclusive_reasons(*, unknown: List[str], unknown_count: int, unreadable: List[str],
                         rank_status: List[RankStatus], dumped_anything: bool,
                         refused: Optional[List[str]] = None) -> List[str]:
    """Why nothing found is not the same as clean. Empty when everything that could hold an origin was read.
    refused: "path: why" of statistics files refused as a whole (named as refused, never as unknown names)."""
    reasons: List[str] = []
    refused = refused or []
    if refused:
        reasons.append(f"{len(refused)} statistics file(s) refused (e.g. {refused[0]}); they could hold the origin")
    if not dumped_anything and (unknown_count or not (refused or unreadable)):
        example = f" (e.g. {unknown[0]})" if unknown else ""
        reasons.append(f"no file was understood: {unknown_count} file(s) with names msoverflow does not know"
                       f"{example}; they could hold the bad value")
    elif unknown_count:
        reasons.append(f"{unknown_count} file(s) not understood (e.g. {unknown[0] if unknown else '?'}); they "
                       "could hold the origin")
    if unreadable:
        reasons.append(f"{len(unreadable)} file(s) could not be read (e.g. {unreadable[0]}); they could hold the "
                       "origin")
    missing = [row.rank_label for row in rank_status if row.status == RANK_NOT_DUMPED]
    if missing and dumped_anything:
        shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more ranges" if len(missing) > 20 else "")
        reasons.append(f"rank{'s' if len(missing) > 1 or '-' in missing[0] else ''} {shown} expected but not "
                       f"dumped ({next(r.note for r in rank_status if r.status == RANK_NOT_DUMPED)}); the origin "
                       "could be there")
    return reasons
