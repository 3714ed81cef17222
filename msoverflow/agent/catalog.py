"""The tools an agent sees: names, descriptions written for an agent (when to call, what it costs), and input and
output schemas GENERATED from the command line: each argument's type, choices and help text come from the
command's argparse parser (`msoverflow analyze --ranks` ...), each output field's schema from the package's JSON
schemas (schema/report.schema.json, schema/compare.schema.json, what `--format json` writes). A change to the CLI
or its JSON changes the MCP schema with it. No `mcp` import here: the catalog is plain dicts.
"""
from __future__ import annotations

import argparse
import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Dict, List, Optional, Tuple

from .confine import ToolError
from .tools import MAX_EVENT_ROWS, PARTS

IDS = ("ranks", "steps")


@lru_cache(maxsize=None)
def _command_parser(command: str) -> argparse.ArgumentParser:
    from ..cli import build_parser
    parser = build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _from_cli(command: str, dest: str, name: Optional[str] = None) -> Dict[str, Any]:
    """One argument's JSON schema, read off `msoverflow COMMAND`'s parser (type, choices, help)."""
    action = next(a for a in _command_parser(command)._actions if a.dest == dest)
    flag = action.option_strings[0] if action.option_strings else action.metavar or dest
    help_text = (action.help or "").replace("%%", "%")
    schema: Dict[str, Any]
    if dest in IDS:
        schema = {"type": ["string", "integer"]}
    elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreConstAction)):
        schema = {"type": "boolean"}
    elif action.type is int:
        schema = {"type": "integer"}
    elif action.type is float:
        schema = {"type": "number", "minimum": 0}
    else:
        schema = {"type": "string"}
    if action.choices:
        schema["enum"] = list(action.choices)
    schema["description"] = f"{help_text} (CLI: msoverflow {command} {flag})".strip()
    return schema


@lru_cache(maxsize=None)
def package_schema(name: str) -> dict:
    """schema/NAME.schema.json as shipped in the package: what `--format json` writes."""
    return json.loads(resources.files("msoverflow.schema").joinpath(f"{name}.schema.json").read_text("utf-8"))


def _report_field(*path: str) -> Dict[str, Any]:
    """A field's schema from report.schema.json (`"$defs", "finding", "op_type"` walks properties)."""
    node: Any = package_schema("report")
    for i, key in enumerate(path):
        node = node[key] if key == "$defs" or path[i - 1:i] == ("$defs",) else node["properties"][key]
    return _without_refs(copy.deepcopy(node))


def _compare_field(key: str) -> Dict[str, Any]:
    return _without_refs(copy.deepcopy(package_schema("compare")["properties"][key]))


def _without_refs(node):
    """Schemas cut out of a document lose its $defs: a $ref becomes 'any value' (the CLI's schema still holds it)."""
    if isinstance(node, dict):
        if "$ref" in node:
            return {"description": f"as {node['$ref']} in the package's JSON schema"}
        return {k: _without_refs(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_refs(v) for v in node]
    return node


def _finding(name: str) -> Dict[str, Any]:
    return _report_field("$defs", "finding", name)


def _origin_schema() -> Dict[str, Any]:
    props = {k: _finding(k) for k in ("op_type", "op_name", "forward_op", "cell", "cell_type", "source", "rank",
                                      "role", "kind", "detail", "cause")}
    props["step"] = _finding("iteration")
    props["fix"] = _finding("recommendation")
    props["cause_reason"] = {"type": ["string", "null"]}
    return {"type": ["object", "null"], "properties": props}


NEXT = {"type": "array", "description": "the next useful calls: tool, args, why",
        "items": {"type": "object", "properties": {"tool": {"type": "string"}, "args": {"type": "object"},
                                                   "why": {"type": "string"}}}}
REPORT_ARG = {"type": "string", "description": "a report id an earlier analyze/compare returned (r1, c1), or the "
                                               "path of a JSON report (msoverflow analyze --format json) under a root"}


def _obj(props: Dict[str, Any], required: Tuple[str, ...] = ()) -> Dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _out(props: Dict[str, Any]) -> Dict[str, Any]:
    return {"type": "object", "properties": {**props, "next": NEXT}}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: Dict[str, Any]
    output_schema: Dict[str, Any]
    paths: Tuple[str, ...] = ()       # arguments that are paths: resolved and held under the roots


@lru_cache(maxsize=1)
def tools() -> Tuple[Tool, ...]:
    dump = {"type": "string", "description": "a dump directory (any layout analyze reads, any level inside it) "
                                             "under one of the server's roots"}
    return (
        Tool("analyze",
             "Find the first operator that created an inf/NaN/out-of-range value in a MindSpore dump: verdict "
             "(clean/anomaly/inconclusive), the origin (op, Cell, source line, rank, step, kind, cause, fix) and "
             "counts. Call it first on any dump. Cost: reads the dump (seconds for small dumps, minutes for large "
             "multi-rank ones; bounded by the server's --timeout); the answer is small (< 2k tokens) and returns a "
             "report id for explain, patch_preview and repro. Unknown ranks/steps are an error listing what the "
             "dump holds.",
             _obj({"path": dump, "ranks": _from_cli("analyze", "ranks"), "steps": _from_cli("analyze", "steps"),
                   "strict": _from_cli("analyze", "strict"), "all": _from_cli("analyze", "scan_all")}, ("path",)),
             _out({"report": {"type": "string"}, "verdict": _report_field("verdict"), "dump_dir":
                   _report_field("dump_dir"), "first": _origin_schema(), "counts": {"type": "object"},
                   "ranks": {"type": "array"}, "dump_holds": {"type": "object"},
                   "inconclusive": _report_field("inconclusive")}),
             ("path",)),
        Tool("explain",
             "One part of an analysis or comparison report in detail, paged: evidence, diagnosis (cause and "
             "advice), recompute, history (since when values grew), ranks, parameters, contained, handled, "
             "completeness, inconclusive, anomalies, propagation, ... (a comparison: worst, unmatched, "
             "first_divergence). Call after analyze/compare when the short answer is not enough to decide. "
             "Cost: no dump is read (the report is kept by the server); each page is at most ~8k tokens.",
             _obj({"report": REPORT_ARG, "part": {"type": "string", "enum": list(PARTS)},
                   "page": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 1},
                   "per_page": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
                  ("report", "part")),
             _out({"report": {"type": "string"}, "part": {"type": "string"}, "total": {"type": "integer"},
                   "page": {"type": "integer"}, "items": {"type": "array"}, "value": {},
                   "json_text": {"type": "string"}})),
        Tool("events",
             "The dump's tensor events as a table (rank, step, op, io, slot, dtype, shape, max_abs, nan/inf counts, "
             "bad), filtered and paged: at most 200 rows a call (default 40; bad tensors only unless bad_only is "
             "false). Call to look at the values around an origin or to list what a step holds. Cost: reads the "
             "selected ranks/steps whole (narrow them with ranks/steps on large dumps).",
             _obj({"path": dump, "ranks": _from_cli("analyze", "ranks"), "steps": _from_cli("analyze", "steps"),
                   "bad_only": {"type": "boolean", "default": True,
                                "description": "only tensors with a non-finite or out-of-dtype-range value"},
                   "op_type": {"type": "string", "description": "only this op type, as the dump names it"},
                   "op_name": {"type": "string", "description": "only op names containing this text"},
                   "io": {"type": "string", "enum": ["input", "output"]},
                   "offset": {"type": "integer", "minimum": 0, "maximum": 10**9, "default": 0},
                   "limit": {"type": "integer", "minimum": 1, "maximum": MAX_EVENT_ROWS, "default": 40}},
                  ("path",)),
             _out({"events_in_selection": {"type": "integer"}, "matched": {"type": "integer"},
                   "offset": {"type": "integer"}, "columns": {"type": "array", "items": {"type": "string"}},
                   "rows": {"type": "array", "items": {"type": "array"}}}),
             ("path",)),
        Tool("compare",
             "Compare two dumps of the same model (a good baseline and a failing target): the first op whose inputs "
             "agree and whose outputs do not, the largest differences, ops on one side only. Call when the target "
             "is clean or inconclusive but its loss differs, or to prove a fix changed only what it should. Cost: "
             "reads both dumps' tensors (slower than analyze).",
             _obj({"baseline": {**dump, "description": "the good run's dump directory"},
                   "target": {**dump, "description": "the run to explain"},
                   "ranks": _from_cli("compare", "ranks"), "steps": _from_cli("compare", "steps"),
                   "ulps": _from_cli("compare", "ulps"),
                   "top": {**_from_cli("compare", "top"), "minimum": 1, "maximum": 100}},
                  ("baseline", "target")),
             _out({"report": {"type": "string"}, "verdict": _compare_field("verdict"),
                   "first_divergence": _compare_field("first_divergence"), "worst": {"type": "array"},
                   "summary": {"type": ["object", "null"]}}),
             ("baseline", "target")),
        Tool("config",
             "The MindSpore dump config (MINDSPORE_DUMP_CONFIG JSON) for a purpose on a MindSpore version, device and "
             "jit level, with the environment variables to set and what it will and will not capture. Call before "
             "a run that has no dump yet. Cost: no files read or written (instant).",
             _obj({"purpose": _from_cli("config", "purpose"), "ms_version": _from_cli("config", "ms_version"),
                   "device": _from_cli("config", "device"), "jit_level": _from_cli("config", "jit_level"),
                   "mode": _from_cli("config", "mode"),
                   "dump_path": {**_from_cli("config", "path"), "type": "string"}}),
             _out({"config": {"type": "object"}, "env": {}, "summary": {}, "written": {"type": "null"}})),
        Tool("check_config",
             "Check an existing dump config file against a MindSpore version/device/jit level: each problem with "
             "what to change. Call when a run produced no dump or the wrong one. Cost: reads one small file.",
             _obj({"path": {"type": "string", "description": "the dump config JSON under a root"},
                   "ms_version": _from_cli("config", "ms_version"), "device": _from_cli("config", "device"),
                   "jit_level": _from_cli("config", "jit_level"), "strict": _from_cli("config", "strict")},
                  ("path",)),
             _out({"ok": {"type": "boolean"}, "errors": {"type": "integer"}, "warnings": {"type": "integer"},
                   "problems": {"type": "array"}}),
             ("path",)),
        Tool("patch_preview",
             "The precision patch for the report's origin as a unified diff of the model source (the owning Cell's "
             "region in float32 or bfloat16), NEVER written. Refuses, with what to do instead, when the cause is "
             "device, data or domain (a dtype change would not fix those). Call after analyze names an origin with "
             "cause precision/unknown. Cost: reads one source file (it must lie under a root).",
             _obj({"report": REPORT_ARG, "dtype": _from_cli("patch", "dtype")}, ("report",)),
             _out({"target": {"type": "object"}, "cause": _finding("cause"), "diff": {"type": "string"},
                   "refused": {"type": "string"}, "written": {"type": "boolean"}})),
        Tool("repro",
             "The text of a standalone script that re-runs the origin op alone from its dumped inputs, in the dumped "
             "dtype and in float32, printing max |x| and inf/NaN counts. Call to show on the op "
             "alone that float32 holds the value (before trusting a patch). Without --allow-write nothing is kept (the "
             "script is made in a private temp dir and removed); with it the script and inputs go there. Cost: "
             "copies the origin's input tensors once.",
             _obj({"report": REPORT_ARG, "device": _from_cli("repro", "device"),
                   "dump": {"type": "string", "description": _from_cli("repro", "dump")["description"]}},
                  ("report",)),
             _out({"script_text": {"type": "string"}, "written": {"type": ["string", "null"]},
                   "inputs": {"type": "array"}})),
        Tool("watch_status",
             "What a running `msoverflow watch` has seen in its directory: early warnings and the state of the run. "
             "Call while a training runs under watch. Cost: reads the watch directory's small status files.",
             _obj({"dir": {"type": "string", "description": "the watch directory under a root"}}, ("dir",)),
             _out({"found": {"type": "boolean"}, "status": {}}),
             ("dir",)),
    )


def by_name() -> Dict[str, Tool]:
    return {tool.name: tool for tool in tools()}


_TYPES: Dict[str, Any] = {"string": str, "integer": int, "boolean": bool, "number": (int, float), "object": dict, "array": list,
          "null": type(None)}


def check_arguments(tool: Tool, arguments: Any) -> Dict[str, Any]:
    """The arguments held to the tool's input schema: one ToolError line naming the first that is not."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolError(f"{tool.name}: arguments must be an object, not {type(arguments).__name__}")
    schema = tool.input_schema
    props = schema["properties"]
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        raise ToolError(f"{tool.name}: unknown argument {unknown[0]!r}; it takes {', '.join(props)}")
    for name in schema.get("required", []):
        if arguments.get(name) is None:
            raise ToolError(f"{tool.name}: {name} is required")
    checked = {}
    for name, value in arguments.items():
        if value is None:
            continue
        rule = props[name]
        kinds: List[str] = rule["type"] if isinstance(rule.get("type"), list) else [rule.get("type", "string")]
        ok = any(isinstance(value, _TYPES[k]) and not (isinstance(value, bool) and k in ("integer", "number"))
                 for k in kinds)
        if not ok:
            raise ToolError(f"{tool.name}: {name} must be {' or '.join(kinds)}, not {type(value).__name__} "
                            f"({json.dumps(value)[:40]})")
        if "enum" in rule and value not in rule["enum"]:
            raise ToolError(f"{tool.name}: {name} {value!r} is not one of {', '.join(map(str, rule['enum']))}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in rule and value < rule["minimum"] or "maximum" in rule and value > rule["maximum"]:
                raise ToolError(f"{tool.name}: {name} {value} is out of range {rule.get('minimum')}.."
                                f"{rule.get('maximum')}")
        if isinstance(value, str) and len(value) > 4096:
            raise ToolError(f"{tool.name}: {name} is {len(value)} characters long; at most 4096")
        checked[name] = value
    return checked
