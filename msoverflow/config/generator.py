"""Build a MINDSPORE_DUMP_CONFIG for a purpose on one platform: skeleton + purpose layers from dump_rules.yaml,
then the user's options, then the checker. Whatever the checker calls an error is refused here, before MindSpore
gets to refuse it hours into a run."""
from __future__ import annotations

import copy
import os
from typing import Iterable, Optional, Sequence, Union

from .. import selection
from ..errors import UserError
from . import msprobe
from .checker import check_for_target
from .model import ConfigRefused, DumpConfigResult, Target, resolve_target
from .rules import PURPOSES, Situation, load_rules, render, select_mechanism, when_matches

DEFAULT_CONFIG_NAME = "dump_config.json"

__all__ = ["build", "ConfigRefused", "DumpConfigResult", "parse_steps", "parse_ranks", "DEFAULT_CONFIG_NAME"]


# ---- option parsing -------------------------------------------------------------------------------------------

def parse_steps(steps: Union[None, str, int, Iterable[int]]) -> str:
    """'0|5-8', '0,5-8', 3, [0, 5] or 'all' -> MindSpore's iteration string (msoverflow.selection's grammar)."""
    if steps is None:
        return "0"
    chosen = selection.parse(steps, "--steps")
    return "all" if chosen is None else str(chosen)


MAX_DEVICE_IDS = 4096     # a dump config lists device ids one by one


def parse_ranks(ranks: Union[None, str, int, Iterable[int]]) -> Optional[list]:
    """'0,1', '0-3', 0 or [0, 1] -> sorted device ids (msoverflow.selection's grammar); None means the default."""
    chosen = selection.parse(ranks, "--ranks")
    return None if chosen is None else chosen.values(MAX_DEVICE_IDS, "--ranks")


def _set_dotted(config: dict, dotted: str, value) -> None:
    node = config
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = copy.deepcopy(value)


# ---- build ----------------------------------------------------------------------------------------------------

def build(purpose: str, *, ms_version: Optional[str] = None, device: Optional[str] = None,
          jit_level: Optional[str] = None, path: Optional[str] = None, net_name: str = "Net",
          steps: Union[None, str, int, Iterable[int]] = None, ranks: Union[None, str, int, Iterable[int]] = None,
          inputs: bool = False, outputs: bool = False, kernels: Optional[Sequence[str]] = None,
          statistic_category: Optional[Sequence[str]] = None, overflow_number: Optional[int] = None,
          multi_rank: Optional[bool] = None, config_path: Optional[str] = None, mode: Optional[str] = None,
          msprobe_level: Optional[str] = None) -> DumpConfigResult:
    """A dump config for `purpose` (overflow | statistics | tensors | exception) on this platform.

    ms_version defaults to the installed MindSpore (read from package metadata), device to this machine's
    (Ascend toolkit present -> ascend, else cpu). jit_level matters on Ascend 2.3+ only. path must be absolute
    (default: ./msoverflow_dump made absolute). Raises ConfigRefused (a UserError) when the combination cannot work.
    mode "pynative", and Ascend O2 from MindSpore 2.6, give msprobe's config.json (an MsprobeConfigResult).
    """
    if purpose not in PURPOSES:
        raise UserError(f"purpose '{purpose}' is not one of {', '.join(PURPOSES)}")
    rules = load_rules()
    target = resolve_target(ms_version, device, jit_level)
    kernels = [k for k in (kernels or []) if str(k).strip()]
    support_device = parse_ranks(ranks)
    if multi_rank is None:
        multi_rank = bool(support_device and len(support_device) > 1)
    options = {"kernels": kernels, "multi_rank": multi_rank, "ranks": support_device}
    situation = Situation(target.version, target.device, target.jit_level, purpose=purpose, options=options)
    where = f"MindSpore {target.version_label} on {target.device}" + (
        f" (jit_level {target.jit_level})" if target.jit_level else "")

    if mode not in (None, "graph", "pynative"):
        raise UserError(f"mode '{mode}' is not graph or pynative")
    mechanism_entry = None if mode == "pynative" else select_mechanism(situation)
    if mechanism_entry is None or mechanism_entry.get("writer") == "msprobe":     # (None: pynative)
        # MindSpore's own dump does not cover these runs: msprobe's PrecisionDebugger does.
        return msprobe.build_msprobe(purpose, target, mode=mode or "graph", path=path, steps=steps, ranks=ranks,
                             kernels=kernels, level=msprobe_level, config_path=config_path,
                             multi_rank=bool(multi_rank))
    if mechanism_entry.get("unsupported"):
        raise ConfigRefused(f"no {purpose} dump config for {where}: " + " ".join(mechanism_entry["unsupported"].split()))
    situation.mechanism = mechanism = mechanism_entry["id"]

    config = copy.deepcopy(rules["skeleton"][mechanism])
    will, wont = [], []
    for layer in rules["purposes"][purpose]["layers"]:
        if not when_matches(layer.get("when"), situation):
            continue
        if layer.get("refuse"):
            raise ConfigRefused(f"no {purpose} dump config for {where}: {layer['refuse']}")
        for dotted, value in (layer.get("set") or {}).items():
            _set_dotted(config, dotted, value)
        will.extend(layer.get("will", []))
        wont.extend(layer.get("wont", []))

    common = config["common_dump_settings"]
    common["path"] = os.path.abspath("msoverflow_dump") if path is None else os.fspath(path)
    common["net_name"] = net_name
    if common.get("iteration") != "all" or steps is not None:
        common["iteration"] = parse_steps(steps)
    if support_device is not None:
        common["support_device"] = support_device
    if inputs != outputs:
        common["input_output"] = 1 if inputs else 2
    if kernels:
        common["kernels"] = list(kernels)
        if purpose in ("tensors", "statistics"):
            common["dump_mode"] = 1
    if statistic_category is not None:
        common["statistic_category"] = list(statistic_category)
    if overflow_number is not None:
        common["overflow_number"] = int(overflow_number)

    situation.config = config
    problems = check_for_target(config, Target(target.version, target.device, target.jit_level, []))
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise ConfigRefused(f"refusing this {purpose} dump config for {where}: "
                            + " ".join(str(p) for p in errors), errors)

    env: dict = {}
    unset: list = []
    env_why: dict = {}
    hints: list = []
    for entry in rules["environment"]:
        if not when_matches(entry.get("when"), situation):
            continue
        for name, value in (entry.get("set") or {}).items():
            env[name] = render(str(value), config_path=config_path or "<path of the JSON file>",
                               dump_path=common["path"])
        unset.extend(n for n in entry.get("unset", []) if n not in unset)
        env_why.update(entry.get("why") or {})
        if entry.get("hint"):
            hints.append(entry["hint"])
        if entry.get("note"):
            hints.append(entry["note"])

    summary = _summary(purpose, target, mechanism_entry, config, will, wont, rules, problems)
    result = DumpConfigResult(purpose=purpose, ms_version=target.version_label, device=target.device,
                              jit_level=target.jit_level, mechanism=mechanism, config=config, env=env, unset=unset,
                              summary=summary, warnings=list(target.notes) + [str(p) for p in problems],
                              problems=problems, env_why=env_why, hints=hints)
    if config_path:
        result.set_config_path(os.path.abspath(config_path))
    return result


def _summary(purpose, target, mechanism_entry, config, will, wont, rules, problems) -> list:
    common = config["common_dump_settings"]
    platform = {"cpu": "CPU", "gpu": "GPU", "ascend": "Ascend"}[target.device]
    lines = [f"{rules['purposes'][purpose]['title'].capitalize()} for MindSpore {target.version_label}, {platform}"
             + (f", jit_level {target.jit_level}" if target.jit_level else "") + f": {mechanism_entry['title']}."]
    lines += [f"Will capture: {line}." for line in will]
    lines += [f"Will not capture: {line}." for line in wont]
    iteration = common["iteration"]
    overflow_only = common.get("op_debug_mode") in (3, 4) and target.device == "ascend"
    ignored = [p for p in problems if p.key == "common_dump_settings.iteration"]
    if ignored:     # the steps written are not the steps MindSpore will dump: say both, never one of them
        lines.append(f"Steps: iteration \"{iteration}\" is written, but MindSpore does not follow it here: "
                     f"{ignored[0].message}")
    elif iteration == "all":
        lines.append("Steps: every step (iteration \"all\")" + (
            ": only ops that overflow are written, so this stays small until something breaks." if overflow_only
            else ": watch the disk."))
    else:
        lines.append(f"Steps: iteration \"{iteration}\". MindSpore counts graph runs, not your loop: a step that "
                     "runs two graphs (e.g. an all_finite check) advances the count twice.")
    per_op = rules["files_per_op"]["tensor"][common["input_output"]]
    if common.get("op_debug_mode") == 3 and target.device == "ascend":
        lines.append("Size: only ops that overflowed are written: a handful of files per step when something breaks, "
                     "none otherwise.")
    elif common.get("saved_data") == "statistic":
        lines.append("Size: one statistic.csv per dumped graph and step (one row per op input/output).")
    elif common.get("op_debug_mode") == 4:
        lines.append("Size: files only when an op fails.")
    else:
        scope = "listed kernels only" if common.get("dump_mode") == 1 else "every op"
        extra = ", plus one Parameter file per weight and graph input" if target.device in ("cpu", "gpu") else ""
        lines.append(f"Size: expect ~{per_op} files per op per dumped step ({scope}){extra}; a 1000-op network "
                     "writes thousands of files per step, so keep --steps narrow.")
    layout = render(mechanism_entry.get("layout", ""), path=common["path"], net_name=common["net_name"])
    if layout:
        lines.append(f"Where: {layout}.")
    return lines
