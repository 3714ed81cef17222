"""Validate a MINDSPORE_DUMP_CONFIG file against the rules for one MindSpore version, device and jit level."""
from __future__ import annotations

import json
import os
from typing import Mapping, Optional, Union

from ..errors import UserError
from . import msprobe
from .model import SEVERITIES, Problem, Target, resolve_target
from .model import shown as _shown
from .rules import Situation, bad_items, get_dotted, load_rules, render, select_mechanism, version_matches, when_matches

__all__ = ["Problem", "Target", "resolve_target", "load_config", "check", "check_for_target", "has_errors"]

MAX_CONFIG_BYTES = 16 << 20


def load_config(source: Union[str, os.PathLike, Mapping]) -> dict:
    if isinstance(source, Mapping):
        return dict(source)
    from ..safeio import load_json
    try:   # a regular file (never a FIFO), bounded in size, nesting and integer length
        data = load_json(source, limit=MAX_CONFIG_BYTES)
    except OSError as exc:
        raise UserError(f"{source}: cannot read the dump config ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start}); MindSpore would fail "
                        "with \"Parse dump json failed\"") from exc
    except ValueError as exc:
        raise UserError(f"{source}: not valid JSON ({exc}); MindSpore would fail with \"Parse dump json failed\"") from exc
    if not isinstance(data, dict):
        raise UserError(f"{source}: a dump config is a JSON object with common_dump_settings, not {type(data).__name__}")
    return data


def infer_mechanism(target: Target, config: Mapping) -> tuple[str, list[Problem]]:
    """Which dump machinery will read this file; may need the config itself when the jit level is unknown."""
    problems: list[Problem] = []
    # Up to 2.5 the block's `enable` decides; from 2.6 on the block's presence does (DumpJsonParser).
    e2e_enabled = (get_dotted(config, "e2e_dump_settings.enable") is True
                   or (version_matches(">=2.6", target.version) and isinstance(config.get("e2e_dump_settings"), Mapping)))
    situation = Situation(target.version, target.device, target.jit_level, config=dict(config))
    if target.device == "ascend" and target.version == (2, 2):
        return ("e2e" if e2e_enabled else "async"), problems
    if target.device == "ascend" and target.jit_level is None and version_matches(">=2.3", target.version):
        if e2e_enabled:
            problems.append(Problem("jit-level-assumed", "info",
                                    "no --jit-level given: the enabled e2e block means a jit_level O0/O1 (ms_backend) run"))
            return "e2e", problems
        if version_matches("2.3-2.5", target.version):
            problems.append(Problem("jit-level-assumed", "info",
                                    "no --jit-level given and no enabled e2e block: checked as a jit_level O2 (ACL) dump; "
                                    "under O0/O1 this file would dump nothing"))
            return "acl", problems
        problems.append(Problem(
            "no-e2e-block", "error",
            "no enabled e2e_dump_settings block: under jit_level O0/O1 MindSpore dumps nothing without it, and under "
            "O2 MindSpore 2.6+ ignores MINDSPORE_DUMP_CONFIG (use msprobe)",
            key="e2e_dump_settings", fix="add \"e2e_dump_settings\": {\"enable\": true, \"trans_flag\": true}"))
        return "e2e", problems
    entry = select_mechanism(situation)
    if entry.get("writer") == "msprobe":
        problems.append(Problem(
            "msprobe-needed", "error",
            f"MindSpore {target.version_label} at jit_level O2 ignores MINDSPORE_DUMP_CONFIG: O2 dumps go through "
            "msprobe's PrecisionDebugger", key="common_dump_settings",
            fix="`msoverflow config --jit-level O2` writes msprobe's config.json, or run at jit_level O0/O1"))
    if entry.get("unsupported"):
        problems.append(Problem(f"{entry['id']}-unsupported", "error", " ".join(entry["unsupported"].split())))
    return entry["id"], problems


_TYPES = {
    "uint": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "string": lambda v: isinstance(v, str),
    "list": lambda v: isinstance(v, list),
    "bool": lambda v: isinstance(v, bool),
}
_TYPE_WORDS = {"uint": "an unsigned integer", "string": "a string", "list": "a list", "bool": "true or false"}


def _key_problems(config: Mapping, target: Target, mechanism: str) -> list[Problem]:
    problems = []
    keys = load_rules()["keys"]
    for section in config:
        if section not in keys:
            problems.append(Problem("unknown-section", "warning", f"MindSpore ignores the section '{section}'",
                                    key=section,
                                    fix="async_dump_settings was folded into common_dump_settings in 1.3"
                                    if section == "async_dump_settings" else None))
    if "common_dump_settings" not in config:
        problems.append(Problem("missing-common", "error", "the file has no common_dump_settings block",
                                key="common_dump_settings",
                                mindspore_says="Check dump json failed, common_dump_settings not found"))
    for section, spec_by_key in keys.items():
        block = config.get(section)
        if block is None:
            continue
        if not isinstance(block, Mapping):
            problems.append(Problem("section-type", "error", f"{section} must be a JSON object", key=section))
            continue
        for name in block:
            if name not in spec_by_key:
                problems.append(Problem("unknown-key", "warning", f"MindSpore does not read '{name}' (a typo?)",
                                        key=f"{section}.{name}"))
        for name, spec in spec_by_key.items():
            dotted = f"{section}.{name}"
            value = block.get(name, None)
            present = name in block
            required = spec.get("required") or mechanism in spec.get("required_for", []) or (
                "required_until" in spec and version_matches("<=" + str(spec["required_until"]), target.version))
            if not present:
                if required:
                    problems.append(Problem("missing-key", "error", f"{name} is required here", key=dotted,
                                            mindspore_says=f"Check dump json failed, {name} not found"))
                continue
            if "since" in spec and not version_matches(">=" + str(spec["since"]), target.version):
                problems.append(Problem("key-too-new", "warning",
                                        f"{name} arrived in MindSpore {spec['since']}; {target.version_label} ignores it",
                                        key=dotted))
                continue
            if "mechanisms" in spec and mechanism not in spec["mechanisms"]:
                continue  # reported by a check with a better explanation where it matters
            if not _TYPES[spec["type"]](value):
                problems.append(Problem("key-type", "error",
                                        f"{name} must be {_TYPE_WORDS[spec['type']]}, not {_shown(value)}",
                                        key=dotted,
                                        mindspore_says=f"Dump config parse failed, {name} should be "
                                                       f"{'unsigned int' if spec['type'] == 'uint' else spec['type']} type"))
                continue
            if "values" in spec and value not in spec["values"]:
                problems.append(Problem("key-value", "error",
                                        f"{name} is {_shown(value)}; allowed: "
                                        f"{', '.join(json.dumps(v) for v in spec['values'])}", key=dotted))
    return problems


def _rule_problems(config: Mapping, target: Target, mechanism: str) -> list[Problem]:
    problems = []
    situation = Situation(target.version, target.device, target.jit_level, mechanism, config=dict(config))
    common = config.get("common_dump_settings")
    if not isinstance(common, Mapping):
        common = {}
    for rule in load_rules()["checks"]:
        if not when_matches(rule["when"], situation):
            continue
        value = get_dotted(config, rule["key"]) if rule.get("key") else None
        predicate = (rule["when"].get("config") or {}).get(rule.get("key"), {})
        values = dict(common, value=_shown(value) if isinstance(value, (list, dict)) else value,
                      device=target.device.upper() if target.device != "ascend" else "Ascend",
                      version=target.version_label, jit_level=target.jit_level,
                      bad_items=", ".join(map(str, bad_items(value, predicate))) or None)
        problems.append(Problem(rule["id"], rule["severity"], render(rule["message"], values), key=rule.get("key"),
                                mindspore_says=rule.get("mindspore_says"),
                                fix=render(rule["fix"], values) if rule.get("fix") else None))
    return problems


def check(config: Union[str, os.PathLike, Mapping], ms_version: Optional[str] = None, device: Optional[str] = None,
          jit_level: Optional[str] = None) -> list[Problem]:
    """Problems of a dump config (dict or JSON path) for this platform, errors first. Raises UserError when the
    file cannot be read. Version and device default to the installed MindSpore / this machine."""
    data = load_config(config)
    target = resolve_target(ms_version, device, jit_level, newest_if_unknown=True)
    if msprobe.is_msprobe_config(data):       # msprobe's config.json (PrecisionDebugger), not MINDSPORE_DUMP_CONFIG
        return [Problem("assumed", "info", note) for note in target.notes] + msprobe.check_msprobe(data, target=target)
    return check_for_target(data, target)


def check_for_target(data: Mapping, target: Target) -> list[Problem]:
    mechanism, problems = infer_mechanism(target, data)
    problems = [Problem("assumed", "info", note) for note in target.notes] + problems
    problems += _key_problems(data, target, mechanism)
    problems += _rule_problems(data, target, mechanism)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(problems, key=lambda p: order[p.severity])


def has_errors(problems) -> bool:
    return any(p.severity == "error" for p in problems)
