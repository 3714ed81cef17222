"""What to patch: a Cell (by attribute path or class name) or a single op type, taken from an analysis report
or from the command line. No MindSpore import here: the CLI and the YAML/source patches use it too."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..errors import UserError

FLOAT32, BFLOAT16, FLOAT16 = "float32", "bfloat16", "float16"
ISLAND_DTYPES = (FLOAT32, BFLOAT16)

# Which dtypes are too narrow for an island of a given dtype: bf16 has fp32's range, fp16 has neither.
NARROWER = {FLOAT32: (FLOAT16, BFLOAT16), BFLOAT16: (FLOAT16,)}


@dataclass
class SourceLocation:
    file: str
    line: int
    code: str = ""


@dataclass
class Target:
    """The region to compute in a wider dtype.

    `cell` is an attribute path from the graph's root Cell ("network._backbone.lm_head") or a class name
    ("NormHead"); `op` is a forward op type ("Sqrt"). With a cell the whole Cell is the region (its inputs,
    Parameters, constants and explicit casts); with only an op, just that primitive is wrapped.
    """
    cell: Optional[str] = None
    cell_type: Optional[str] = None
    op: Optional[str] = None
    source: Optional[SourceLocation] = None
    origin: Optional[dict] = field(default=None, repr=False)   # the report's finding this target came from

    @property
    def scope(self) -> str:
        return "cell" if (self.cell or self.cell_type) else "op"

    @property
    def cell_is_type(self) -> bool:
        """`--cell NormHead` names a class, `--cell lm_head` / `network._backbone.lm_head` a path."""
        return self.cell is not None and "." not in self.cell and self.cell[:1].isupper()

    def describe(self) -> str:
        if self.scope == "op":
            where = f" in {self.cell}" if self.cell else ""
            return f"op {self.op}{where}"
        if self.cell_is_type:
            return f"Cell type {self.cell}"
        kind = f" ({self.cell_type})" if self.cell_type else ""
        return f"Cell {self.cell}{kind}"

    def widened(self) -> "Target":
        """The owning Cell of an op-only target, when the report told us which Cell it was."""
        if self.scope == "cell":
            return self
        owner = (self.origin or {}).get("cell")
        owner_type = (self.origin or {}).get("cell_type")
        if not owner and not owner_type:
            raise UserError(f"cannot widen {self.describe()}: the report does not name the Cell that owns it")
        return Target(cell=owner or owner_type, cell_type=owner_type, source=self.source, origin=self.origin)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("origin", None)
        if self.origin:
            data["origin"] = {k: self.origin.get(k) for k in ("op_type", "full_name", "cell", "cell_type", "kind")}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Target":
        source = data.get("source")
        return cls(cell=data.get("cell"), cell_type=data.get("cell_type"), op=data.get("op"),
                   source=SourceLocation(**source) if source else None, origin=data.get("origin"))


def check_dtype(dtype: str) -> str:
    if dtype not in ISLAND_DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(ISLAND_DTYPES)}, got {dtype!r}")
    return dtype


MAX_REPORT_BYTES = 64 << 20


def load_report(path: str) -> dict:
    """A report written by `analyze --format json`: a regular file, bounded, UTF-8, with the fields `patch`
    uses of the right types (anything else is a clear error, exit 2)."""
    from ..safeio import load_json
    try:
        report = load_json(path, limit=MAX_REPORT_BYTES)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the analysis report ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not a JSON analysis report (not UTF-8 text: byte {exc.start})") from exc
    except ValueError as exc:
        raise UserError(f"{path}: not a JSON analysis report ({exc})") from exc
    if not isinstance(report, dict) or "verdict" not in report:
        raise UserError(f"{path}: not an msoverflow analysis report (no 'verdict' key)")
    _check_report_types(report, path)
    return report


def _check_report_types(report: dict, path: str) -> None:
    def bad(where: str, want: str, value) -> UserError:
        return UserError(f"{path}: not an msoverflow analysis report ({where} is {type(value).__name__}, "
                         f"expected {want})")
    if not isinstance(report["verdict"], str):
        raise bad("verdict", "a string", report["verdict"])
    first = report.get("first")
    if first is None:
        return
    if not isinstance(first, dict):
        raise bad("first", "an object or null", first)
    for key in ("cell", "cell_type", "op_type", "forward_op", "full_name", "op_name", "kind"):
        if first.get(key) is not None and not isinstance(first[key], str):
            raise bad(f"first.{key}", "a string", first[key])
    for key in ("rank", "iteration", "timestamp"):
        value = first.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64):
            raise bad(f"first.{key}", "a non-negative integer", value)
    for key in ("inputs", "outputs"):
        if first.get(key) is not None and not (isinstance(first[key], list)
                                               and all(isinstance(t, dict) for t in first[key])):
            raise bad(f"first.{key}", "a list of objects", first[key])
    source = first.get("source")
    if source is None:
        return
    if not isinstance(source, dict):
        raise bad("first.source", "an object or null", source)
    if source.get("file") is not None and not isinstance(source["file"], str):
        raise bad("first.source.file", "a string", source["file"])
    if source.get("code") is not None and not isinstance(source["code"], str):
        raise bad("first.source.code", "a string", source["code"])
    line = source.get("line")
    if line is not None and (isinstance(line, bool) or not isinstance(line, int) or not 0 <= line < 10 ** 9):
        raise bad("first.source.line", "a line number", line)


def target_from_report(report: dict, where: str = "report") -> Target:
    """The first origin's owning Cell. A report without an origin has nothing to patch."""
    first = report.get("first")
    if report.get("verdict") == "clean" or not first:
        raise UserError(f"{where}: the analysis found no anomaly, so there is nothing to patch")
    if not isinstance(first, dict):
        raise UserError(f"{where}: not an msoverflow analysis report ('first' is {type(first).__name__})")
    role = first.get("role", "origin")
    if role != "origin":
        # Only inputs prove an origin: a hardware flag alone, or the first place a bad value was seen, may be
        # downstream of where it was made. Patching there could leave the real origin untouched.
        raise UserError(f"{where}: the first finding ({first.get('op_type')}, role {role!r}) is not a proven "
                        "origin; dump its inputs (see the report's fix line), or name the target with --cell/--op")
    cell, cell_type = first.get("cell"), first.get("cell_type")
    source = first.get("source")
    location = None
    if isinstance(source, dict) and isinstance(source.get("file"), str) and source.get("line") \
            and isinstance(source.get("line"), int):
        location = SourceLocation(file=source["file"], line=int(source["line"]), code=source.get("code") or "")
    if not cell and not cell_type:
        # No Cell known: fall back to the op itself; verify will say it could not widen.
        return Target(op=first.get("forward_op") or first.get("op_type"), source=location, origin=first)
    return Target(cell=cell or cell_type, cell_type=cell_type, source=location, origin=first)


def target_from_args(cell: Optional[str] = None, op: Optional[str] = None,
                     report: Optional[dict] = None) -> Target:
    """`--cell` / `--op` given explicitly; a report, if any, supplies the owner Cell and source line."""
    base = None
    if report is not None:
        try:
            base = target_from_report(report)
        except UserError:
            base = None
    if cell and not re.fullmatch(r"[A-Za-z_][\w.]*", cell):
        raise UserError(f"--cell {cell!r}: expected an attribute path (network._backbone.lm_head) or a class name")
    if op and not re.fullmatch(r"[A-Za-z_]\w*", op):
        raise UserError(f"--op {op!r}: expected an operator type such as Sqrt")
    origin = base.origin if base else None
    source = base.source if base else None
    if cell:
        return Target(cell=cell, cell_type=(base.cell_type if base and base.cell == cell else None), op=op,
                      source=source, origin=origin)
    if op:
        # An op inside the report's Cell when there is one; everywhere otherwise.
        return Target(op=op, source=source, origin=origin)
    raise UserError("nothing to patch: give --from REPORT, --dump DIR, --cell PATH_OR_TYPE or --op TYPE")


def path_matches(target_path: str, cell_path: str) -> int:
    """Length of the common dotted suffix, 0 when the last components differ.

    The report's path starts at the graph's root (often TrainOneStepCell, so `network._backbone.lm_head`); the
    network a user hands us may be the backbone (`lm_head`). Amp wrappers (_OutputTo16) add `_backbone` levels.
    """
    want = [p for p in target_path.split(".") if p]
    have = [p for p in cell_path.split(".") if p]
    n = 0
    while n < len(want) and n < len(have) and want[-1 - n] == have[-1 - n]:
        n += 1
    return n


def describe_candidates(paths: List[str], limit: int = 8) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f", ... ({len(paths)} in all)" if len(paths) > limit else "")
