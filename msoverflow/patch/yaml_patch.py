"""MindFormers YAML patch: set the model_config precision field(s) that cover the overflow's origin.

The culprit -> field mapping is data (msoverflow/data/mindformers_precision.yaml). ruamel.yaml's round-trip loader finds
each field and the line/column of its value; the edit then replaces just that value token in the original text
(or adds one line next to the other precision fields), so comments, key order, quoting and indentation stay
byte-for-byte as they were. The result is re-read and checked: only the intended fields may differ.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..errors import UserError
from .targets import NARROWER, Target, check_dtype
from .textfile import unified_diff

GLOBAL_PLACEHOLDER = "ISLAND"


def mapping_path() -> Path:
    from ..resources import config_path
    try:
        return Path(config_path("mindformers_precision.yaml"))
    except FileNotFoundError as exc:
        raise UserError(f"mindformers_precision.yaml: {exc}") from exc


MAX_YAML_CHARS = 16 << 20


@functools.lru_cache(maxsize=None)
def load_mapping(path: Optional[str] = None) -> dict:
    from ruamel.yaml import YAML
    source = Path(path) if path else mapping_path()
    try:
        with open(source, encoding="utf-8") as fh:
            return YAML(typ="safe").load(fh)
    except OSError as exc:
        raise UserError(f"{source}: cannot read the MindFormers precision mapping ({exc.strerror})") from exc


@functools.lru_cache(maxsize=None)
def load_reach() -> dict:
    """msoverflow/data/mindformers_reach.yaml: which field reaches which Cell/op, citing MindFormers' source."""
    from ruamel.yaml import YAML

    from ..resources import config_path
    try:
        with open(config_path("mindformers_reach.yaml"), encoding="utf-8") as fh:
            return YAML(typ="safe").load(fh)
    except (OSError, FileNotFoundError) as exc:
        raise UserError(f"mindformers_reach.yaml: cannot read the MindFormers reach table ({exc})") from exc


def _cites(entry: dict) -> str:
    return ", ".join(f"{c['file'].rsplit('/', 1)[-1]}:{c['line']}" for c in entry.get("cites", []))


def _entry_matches(entry: dict, culprit: "Culprit") -> bool:
    ops, cells = entry.get("ops") or [], entry.get("cells") or []
    op_hit = any(op in ops for op in culprit.op_types)
    if cells and culprit.cell_type:
        return culprit.cell_type in cells and (op_hit or not ops)
    return op_hit


def reach_check(culprit: "Culprit", fields: List[str], config) -> Optional[str]:
    """Why none of `fields` reaches the culprit (None when the reach table raises no objection)."""
    for family, versions in load_reach()["families"].items():
        for version, body in versions.items():
            where = f"MindFormers {family} {version}"
            for entry in body.get("unreached") or []:
                if _entry_matches(entry, culprit):
                    return f"{' '.join(str(entry['why']).split())} ({where}: {_cites(entry)})"
            for name in fields:
                entry = (body.get("fields") or {}).get(name)
                if not entry or not _entry_matches(entry, culprit):
                    continue
                for key, wanted in (entry.get("only_when") or {}).items():
                    have = config.get(key) if hasattr(config, "get") else None
                    if have is not None and str(have).lower() != str(wanted).lower():
                        return (f"{name} reaches {entry['reaches']} only when {key} is {wanted}, and this config "
                                f"sets {key}: {have} ({where}: {_cites(entry)})")
    return None


@dataclass
class Culprit:
    """What the mapping is matched on."""
    op_types: Tuple[str, ...] = ()
    cell_type: str = ""
    cell_path: str = ""

    @classmethod
    def from_target(cls, target: Target) -> "Culprit":
        origin = target.origin or {}
        ops = tuple(o for o in (origin.get("op_type"), origin.get("forward_op"), target.op) if o)
        cell_type = target.cell_type or (target.cell if target.cell_is_type else "") or origin.get("cell_type") or ""
        path = "" if target.cell_is_type else (target.cell or origin.get("cell") or "")
        return cls(op_types=ops, cell_type=cell_type, cell_path=path)

    def describe(self) -> str:
        parts = [f"op {'/'.join(self.op_types)}" if self.op_types else "",
                 f"Cell {self.cell_path}" if self.cell_path else "",
                 (f"({self.cell_type})" if self.cell_path else f"Cell type {self.cell_type}") if self.cell_type else ""]
        return " ".join(p for p in parts if p) or "unknown culprit"


def match_rule(culprit: Culprit, mapping: Optional[dict] = None) -> Optional[dict]:
    """First rule whose Cell class, path word or op type fits; Cell evidence is checked before ops."""
    rules = (mapping or load_mapping())["rules"]
    for rule in rules:
        if culprit.cell_type and culprit.cell_type in rule.get("cells", []):
            return rule
    last = culprit.cell_path.split(".")[-1].lower() if culprit.cell_path else ""
    for rule in rules:
        if last and any(word == last or word in last for word in rule.get("path_words", [])):
            return rule
    for rule in rules:
        if any(op in rule.get("ops", []) for op in culprit.op_types):
            return rule
    return None


@dataclass
class YamlPatch:
    path: str
    dtype: str
    culprit: Culprit
    rule: Optional[str] = None
    generation: str = ""
    original: str = ""
    patched: str = ""
    changes: List[Tuple[str, Optional[str], str]] = field(default_factory=list)   # field, old, new
    uncovered: Optional[str] = None        # why no field covers the culprit (-> source patch)
    global_option: Dict[str, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.patched != self.original

    @property
    def already(self) -> bool:
        return self.uncovered is None and not self.changed

    def diff(self) -> str:
        return unified_diff(self.path, self.original, self.patched) if self.changed else ""

    def describe(self) -> str:
        head = f"MindFormers YAML patch ({self.generation} field names) for {self.culprit.describe()}"
        if self.rule:
            head += f": rule '{self.rule}'"
        lines = [head]
        if self.uncovered:
            lines.append(f"  no model_config field covers it: {self.uncovered}")
            if self.global_option:
                lines.append("  a global alternative (--allow-global) would set "
                             + ", ".join(f"{k}: {v}" for k, v in self.global_option.items())
                             + " for the whole model")
            lines.append("  falling back to a source patch of the culprit's Cell (msoverflow patch --how source)")
        for name, old, new in self.changes:
            lines.append(f"  {name}: {old if old is not None else '(absent)'} -> {new}")
        if not self.uncovered and not self.changes:
            lines.append("  nothing to change: already patched")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _load_rt(text: str, path: str):
    from ..safeio import loads_yaml
    try:       # nesting and alias expansion bounded (safeio): the config is searched and compared as a tree
        return loads_yaml(text, typ="rt")
    except ValueError as exc:
        raise UserError(f"{path}: not valid YAML ({exc}); refusing to patch") from exc


def _find_model_config(data, path: str):
    if isinstance(data, dict):
        model = data.get("model")
        if isinstance(model, dict) and isinstance(model.get("model_config"), dict):
            return model["model_config"], "model.model_config"
        if isinstance(data.get("model_config"), dict):
            return data["model_config"], "model_config"
    # Anything else: the first mapping that holds compute_dtype.
    stack = [(data, "")]
    while stack:
        node, where = stack.pop(0)
        if isinstance(node, dict):
            if "compute_dtype" in node:
                return node, where or "(top level)"
            stack += [(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [(v, f"{where}[{i}]") for i, v in enumerate(node)]
    raise UserError(f"{path}: no model.model_config (or any mapping with compute_dtype) to patch")


def _generation(config: dict, mapping: dict, forced: Optional[str]) -> Tuple[str, Optional[str]]:
    if forced:
        if forced not in mapping["generations"]:
            raise UserError(f"--mf-generation must be one of {', '.join(mapping['generations'])}, got {forced!r}")
        return forced, None
    for generation, keys in mapping["generation_markers"].items():
        if any(k in config for k in keys):
            return generation, None
    return "1.x", "no generation-specific precision field in the config: assuming MindFormers 1.x names"


_SCALAR = re.compile(r"""("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#,\]}]+)""")


def _replace_value(lines: List[str], line: int, col: int, new: str) -> None:
    text = lines[line]
    m = _SCALAR.match(text, col)
    if not m:
        raise UserError(f"cannot find the value at line {line + 1}, column {col + 1}")
    token = m.group(1)
    quote = token[0] if token[0] in "\"'" else ""
    lines[line] = text[:m.start(1)] + f"{quote}{new}{quote}" + text[m.end(1):]


def _insert_field(lines: List[str], config, name: str, value: str, precision_fields: List[str]) -> None:
    """Add `name: value` after the last precision field already present (else after the mapping's last key)."""
    present = [k for k in config if k in precision_fields] or list(config)
    anchor = present[-1]
    key_line, key_col = config.lc.key(anchor)
    anchor_value = config[anchor]
    if isinstance(anchor_value, (dict, list)):
        raise UserError(f"cannot place {name}: the mapping's last key holds a block; add it by hand")
    value_line, value_col = config.lc.value(anchor)
    sibling = _SCALAR.match(lines[value_line], value_col)
    quote = sibling.group(1)[0] if sibling and sibling.group(1)[0] in "\"'" else ""
    newline = "\r\n" if lines[key_line].endswith("\r\n") else "\n"
    lines.insert(value_line + 1, " " * key_col + f"{name}: {quote}{value}{quote}{newline}")


def plan(path: str, target: Target, dtype: str = "float32", *, allow_global: bool = False,
         generation: Optional[str] = None, mapping: Optional[dict] = None) -> YamlPatch:
    """Work out the YAML edit for `target`'s culprit; nothing is written."""
    check_dtype(dtype)
    mapping = mapping or load_mapping()
    from ..safeio import open_regular
    try:   # a regular file only: a FIFO given as --yaml never blocks
        with open_regular(path, "r", encoding="utf-8", newline="") as fh:
            original = fh.read(MAX_YAML_CHARS + 1)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the MindFormers config ({exc.strerror})") from exc
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    if len(original) > MAX_YAML_CHARS:
        raise UserError(f"{path}: over {MAX_YAML_CHARS} characters, not a MindFormers config")
    data = _load_rt(original, path)
    config, where = _find_model_config(data, path)
    gen, note = _generation(config, mapping, generation)
    culprit = Culprit.from_target(target)
    result = YamlPatch(path=path, dtype=dtype, culprit=culprit, generation=gen, original=original,
                       patched=original)
    if note:
        result.notes.append(note)
    rule = match_rule(culprit, mapping)
    if rule is None:
        result.uncovered = (f"no rule in {mapping_path().name} matches {culprit.describe()}")
        return result
    result.rule = rule["name"]
    fields = list(rule.get("fields", {}).get(gen, []))
    global_names = list((rule.get("global_fields", {}) or {}).get(gen, {}) or {})
    unreached = reach_check(culprit, fields + global_names, config)
    if unreached:
        # the reach table (MindFormers' own source) says no field, local or global, reaches it
        result.uncovered = unreached
        return result
    wanted = {f: dtype for f in fields}
    global_fields = {k: (dtype if v == GLOBAL_PLACEHOLDER else v)
                     for k, v in (rule.get("global_fields", {}) or {}).get(gen, {}).items()}
    if not fields:
        result.uncovered = " ".join(str(rule.get("why", "")).split())
        result.global_option = global_fields
        if not (allow_global and global_fields):
            return result
        wanted = dict(global_fields)
        result.notes.append("--allow-global: switching whole-model fields, which costs memory and speed")
    lines = original.splitlines(True)
    precision_fields = mapping["generations"][gen]["fields"]
    inserts = []
    for name, value in wanted.items():
        old = config.get(name)
        if old is not None and (str(old) == value or str(old) not in NARROWER[dtype] + (value,)):
            result.notes.append(f"{name} is already {old}: wide enough for a {dtype} island")
            continue   # never narrow a float32 field to bfloat16
        if name in config and old is not None and not isinstance(old, (dict, list)):
            line, col = config.lc.value(name)
            _replace_value(lines, line, col, value)
        else:
            inserts.append((name, value))
            result.notes.append(f"{name} was absent: check that {config.get('type', 'the model config class')} "
                                f"reads it")
        result.changes.append((name, None if old is None else str(old), value))
    for name, value in reversed(inserts):
        _insert_field(lines, config, name, value, precision_fields)
    result.patched = "".join(lines)
    if result.changed:
        _check_only(original, result.patched, where, {n: v for n, _, v in result.changes}, path)
        if result.uncovered and allow_global:
            result.uncovered = None
    return result


def _check_only(before: str, after: str, where: str, expected: Dict[str, str], path: str) -> None:
    """The edit must parse and differ from the original in exactly the expected model_config fields."""
    old, new = _load_rt(before, path), _load_rt(after, f"{path} (patched)")
    old_config, _ = _find_model_config(old, path)
    new_config, _ = _find_model_config(new, path)
    for name, value in expected.items():
        if str(new_config.get(name)) != value:
            raise UserError(f"{path}: internal error: {name} did not become {value} after the edit")
        old_config[name] = new_config[name]
    if _plain(old) != _plain(new):
        raise UserError(f"{path}: internal error: the edit changed more than {', '.join(expected)}")


def _plain(node):
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return str(node) if node is not None else None
