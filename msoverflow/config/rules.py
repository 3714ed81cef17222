"""Load msoverflow/data/dump_rules.yaml and evaluate its `when:` conditions. No MindSpore knowledge lives here: it is in the YAML."""
from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from ..errors import UserError
from ..resources import config_dir

DEVICES = ("ascend", "gpu", "cpu")
JIT_LEVELS = ("O0", "O1", "O2")
PURPOSES = ("overflow", "statistics", "tensors", "exception")


def configs_dir() -> Path:
    return Path(config_dir())


@functools.lru_cache(maxsize=None)
def load_rules(path: Optional[str] = None) -> dict:
    from ruamel.yaml import YAML

    rules_path = Path(path) if path else configs_dir() / "dump_rules.yaml"
    try:
        with open(rules_path, encoding="utf-8") as fh:
            return YAML(typ="safe").load(fh)
    except OSError as exc:
        raise UserError(f"{rules_path}: cannot read the dump rules ({exc.strerror})") from exc


# ---- versions -------------------------------------------------------------------------------------------------

def parse_version(text: str) -> tuple[int, int]:
    """'2.10.0', '2.3.0rc1', '2.4' -> (major, minor). Each number has at most 6 digits (user input)."""
    match = re.match(r"^\s*([0-9]{1,6})\.([0-9]{1,6})(?![0-9])", str(text))
    if not match:
        shown = str(text) if len(str(text)) <= 40 else str(text)[:40] + "..."
        raise UserError(f"MindSpore version '{shown}' is not a version like 2.4 or 2.10.0")
    return int(match.group(1)), int(match.group(2))


def version_label(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def normalise_version(text: str) -> tuple[tuple[int, int], list[str]]:
    """Map a user's version onto the versions the rules know; return it and any warning to show."""
    version = parse_version(text)
    known = [parse_version(v) for v in load_rules()["versions"]]
    if version < known[0]:
        raise UserError(f"MindSpore {text}: msoverflow knows the dump rules of {version_label(known[0])} to "
                        f"{version_label(known[-1])} only")
    if version > known[-1]:
        return known[-1], [f"MindSpore {text} is newer than the rules msoverflow knows (up to "
                           f"{version_label(known[-1])}); the {version_label(known[-1])} rules are used"]
    return version, []


def version_matches(spec: Any, version: tuple[int, int]) -> bool:
    spec = str(spec).strip()
    if spec == "all":
        return True
    if spec.startswith(">="):
        return version >= parse_version(spec[2:])
    if spec.startswith("<="):
        return version <= parse_version(spec[2:])
    if "-" in spec:
        low, high = spec.split("-", 1)
        return parse_version(low) <= version <= parse_version(high)
    return version == parse_version(spec)


# ---- conditions -----------------------------------------------------------------------------------------------

_ABSENT = object()


def get_dotted(config: Mapping, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _same(a, b) -> bool:
    # JSON true must not equal 1 here: MindSpore rejects a boolean where it wants an unsigned int.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def bad_items(value, predicate: Mapping) -> list:
    """The list items that make a has_item_* predicate true (for messages)."""
    if not isinstance(value, list):
        return []
    if "has_item_not_in" in predicate:
        return [v for v in value if v not in predicate["has_item_not_in"]]
    if "has_item_not_matching" in predicate:
        return [v for v in value if not re.search(predicate["has_item_not_matching"], str(v))]
    if "has_item_matching" in predicate:
        return [v for v in value if re.search(predicate["has_item_matching"], str(v))]
    if "has_overlapping_types" in predicate:
        return [f"'{a}' also matches every '{b}'" for a, b in overlapping_types(value)]
    return []


def is_op_type(kernel) -> bool:
    """MindSpore treats a kernel entry without '/' or '-op' (and not name-regex) as an op type."""
    text = str(kernel).replace(" ", "")
    return not text.startswith("name-regex(") and "/" not in text and "-op" not in text


def overlapping_types(kernels) -> list:
    types = [str(k) for k in kernels if is_op_type(k)]
    return [(a, b) for a in types for b in types if a != b and a.lower() in b.lower()]


def predicate_matches(value, predicate: Mapping) -> bool:
    for op, arg in predicate.items():
        present = value is not _ABSENT
        if op == "present":
            ok = present == bool(arg)
        elif not present:
            ok = False
        elif op == "in":
            ok = any(_same(value, a) for a in arg)
        elif op == "not_in":
            ok = not any(_same(value, a) for a in arg)
        elif op == "equals":
            ok = _same(value, arg)
        elif op == "not_equals":
            ok = not _same(value, arg)
        elif op == "matches":
            ok = isinstance(value, str) and re.search(arg, value) is not None
        elif op == "not_matches":
            ok = isinstance(value, str) and re.search(arg, value) is None
        elif op == "nonempty":
            ok = bool(value) == bool(arg)
        elif op in ("has_item_not_in", "has_item_matching", "has_item_not_matching"):
            ok = bool(bad_items(value, {op: arg}))
        elif op == "has_overlapping_types":
            ok = isinstance(value, list) and bool(overlapping_types(value)) == bool(arg)
        else:
            raise ValueError(f"dump_rules.yaml: unknown predicate '{op}'")
        if not ok:
            return False
    return True


@dataclass
class Situation:
    """What a rule's `when:` is evaluated against."""
    version: tuple[int, int]
    device: str
    jit_level: Optional[str] = None
    mechanism: Optional[str] = None
    purpose: Optional[str] = None
    config: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)


def when_matches(when: Optional[Mapping], situation: Situation) -> bool:
    if not when:
        return True
    for key, expected in when.items():
        if key == "versions":
            if not version_matches(expected, situation.version):
                return False
        elif key in ("device", "jit_level", "mechanism", "purpose"):
            actual = getattr(situation, key)
            if actual is None or actual not in _as_list(expected):
                return False
        elif key == "config":
            for dotted, predicate in expected.items():
                value = get_dotted(situation.config, dotted)
                if value is _ABSENT and "missing_as" in predicate:
                    value = predicate["missing_as"]  # MindSpore's default for an absent key
                if not predicate_matches(value, {k: v for k, v in predicate.items() if k != "missing_as"}):
                    return False
        elif key == "options":
            for name, predicate in expected.items():
                if not predicate_matches(situation.options.get(name, _ABSENT), predicate):
                    return False
        else:
            raise ValueError(f"dump_rules.yaml: unknown condition '{key}'")
    return True


class _Lenient(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def render(template: str, values: Optional[Mapping] = None, /, **named) -> str:
    """str.format that leaves unknown {names} alone (messages quote JSON braces). `values` may hold any key a
    user's config holds (a key named `template` too)."""
    formatter = string.Formatter()
    mapping = _Lenient({k: v for k, v in {**(values or {}), **named}.items() if v is not None})
    out = []
    for literal, name, spec, _conv in formatter.parse(template):
        out.append(literal)
        if name is None:
            continue
        if name in mapping:
            out.append(format(mapping[name], spec or ""))
        else:
            out.append("{" + name + (":" + spec if spec else "") + "}")
    return "".join(out)


def select_mechanism(situation: Situation) -> dict:
    for entry in load_rules()["mechanisms"]:
        if when_matches(entry.get("when"), situation):
            return entry
    raise UserError(f"no dump rule for MindSpore {version_label(situation.version)} on {situation.device}")
