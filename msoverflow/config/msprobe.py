"""msprobe's config.json (mindstudio-probe PrecisionDebugger): written for MindSpore 2.6+ at jit_level O2 and for
PyNative runs, checked by `config --check`. The facts live in dump_rules.yaml (`msprobe:`)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import List, Mapping, Optional, Sequence

from .. import selection
from ..errors import UserError
from .model import ConfigRefused, DumpConfigResult, Problem, Target
from .model import shown as _shown
from .rules import Situation, load_rules, parse_version, version_matches, when_matches

MODES = ("graph", "pynative")
# `msoverflow config`/`run` point this at the config.json, so a script can read it instead of hard-coding a path.
CONFIG_ENV = "MSOVERFLOW_MSPROBE_CONFIG"


def rules() -> dict:
    return load_rules()["msprobe"]


def installed_msprobe() -> Optional[str]:
    try:
        return metadata.version("mindstudio-probe")
    except metadata.PackageNotFoundError:
        return None


def kernel_dump_extension() -> Optional[str]:
    """The adump extension of the installed msprobe (found by file, without importing msprobe or MindSpore), or
    None when msprobe is not installed or was installed without it (the wheel on PyPI)."""
    import glob
    from importlib.util import find_spec
    try:
        spec = find_spec("msprobe")
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(glob.glob(os.path.join(base, rules()["kernel_dump_extension"]["glob"])))
        if found:
            return found[0]
    return None


def needs_kernel_dump_extension(level, target: Optional[Target]) -> bool:
    """L2 on a static graph at O2 from MindSpore 2.6 (an unknown jit level on Ascend counts as O2 there)."""
    need = rules()["kernel_dump_extension"]["needed"]
    return (level == need["level"] and target is not None and target.device == "ascend"
            and target.jit_level in (None, need["jit_level"]) and version_matches(need["versions"], target.version))


def kernel_dump_problem(level, target: Optional[Target]) -> Optional[Problem]:
    """What stops a kernel-level dump on this machine (checked here, where the training runs), with the fix."""
    if not needs_kernel_dump_extension(level, target):
        return None
    ext = rules()["kernel_dump_extension"]
    assert target is not None           # needed only for a known target
    where = f"level L2 at jit_level O2 on MindSpore {target.version_label}"
    if installed_msprobe() is None:
        return Problem("msprobe-adump", "info", f"{where} needs mindstudio-probe with its adump module; msprobe "
                       "is not installed here, so this machine cannot be checked.", key="level",
                       fix=f"{ext['install']}; {ext['instead']}")
    if kernel_dump_extension() is None:
        return Problem("msprobe-adump", "warning", f"{where} needs mindstudio-probe's adump module, and the "
                       f"mindstudio-probe {installed_msprobe()} installed here has none (msprobe/lib/_msprobe_c*): "
                       "it would dump no kernels.", key="level", fix=f"{ext['install']}; {ext['instead']}")
    return None


def _version_tuple(text: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", str(text))[:3])


def _id_list(values, what: str = "--steps") -> list:
    """msprobe's rank/step lists (ints, and "4-6" strings for ranges) from msoverflow.selection's grammar
    ('0,5-8', '0|5-8', 'all' = []); ranges stay ranges, never expanded."""
    chosen = selection.parse(values, what)
    if chosen is None:
        return []
    return [low if low == high else f"{low}-{high}" for low, high in chosen.ranges]


@dataclass
class MsprobeConfigResult(DumpConfigResult):
    level: str = "L1"
    python: List[str] = field(default_factory=list)   # the PrecisionDebugger lines for the training script

    @property
    def dump_path(self) -> str:
        return self.config.get("dump_path", "")

    def set_config_path(self, config_path: str) -> None:
        self.config_path = config_path
        self.python = snippet(config_path)
        if config_path and not config_path.startswith("<"):
            self.env[CONFIG_ENV] = config_path
            self.env_why[CONFIG_ENV] = "the config.json path, for scripts that read it from the environment"

    def shell_snippet(self) -> str:
        lines = [f"# msoverflow: {self.purpose} dump through msprobe (level {self.level}), MindSpore "
                 f"{self.ms_version}, {self.device}" + (f", jit_level {self.jit_level}" if self.jit_level else "")]
        lines += self.environment_lines()
        lines.append("# in the training script (" + install_hint(self) + "):")
        lines.extend(f"#   {line}" for line in (self.python or snippet(self.config_path or "<config.json>")))
        lines.extend(f"# {hint}" for hint in self.hints)
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        data = super().to_dict()
        data.update(level=self.level, python=self.python, tool="msprobe")
        return data


def install_hint(result: "MsprobeConfigResult") -> str:
    target = Target(parse_version(result.ms_version), result.device, result.jit_level, [])   # a version_label
    if needs_kernel_dump_extension(result.level, target):
        return "mindstudio-probe built with its adump module, see the note below"
    return "pip install mindstudio-probe"


def snippet(config_path: str) -> List[str]:
    return ["from msprobe.mindspore import PrecisionDebugger",
            f"debugger = PrecisionDebugger(config_path={config_path!r})",
            "debugger.start(model); <one training step>; debugger.stop(); debugger.step()   # every step"]


def build_msprobe(purpose: str, target: Target, *, mode: str, path: Optional[str], steps=None, ranks=None,
                  kernels: Optional[Sequence[str]] = None, level: Optional[str] = None,
                  config_path: Optional[str] = None, multi_rank: bool = False) -> MsprobeConfigResult:
    r = rules()
    spec = r["purposes"][purpose]
    if level is None:
        level = "L2" if mode == "graph" else "L1"
    if mode == "pynative" and level not in r["pynative_levels"]:
        raise UserError(f"msprobe level {level} is not a PyNative level (use one of {', '.join(r['pynative_levels'])})")
    if mode == "graph" and level != "L2":
        raise UserError(f"msprobe level {level} needs PyNative; graph-mode (jit) runs dump kernels at level L2")
    dump_path = os.path.abspath("msoverflow_dump") if path is None else os.fspath(path)
    section = json.loads(json.dumps(spec["section"]))
    if kernels:
        section["list"] = list(kernels)
    config = {"task": spec["task"], "dump_path": dump_path, "rank": _id_list(ranks, "--ranks"), "step": _id_list(steps),
              "level": level, "async_dump": False, spec["task"]: section}
    if level != "L2":
        config["extra_info"] = True          # stack.json and construct.json: source lines and Cell paths
    situation = Situation(target.version, target.device, target.jit_level, purpose=purpose,
                          options={"multi_rank": multi_rank})
    env: dict = {}
    unset: list = []
    why: dict = {}
    for entry in r["environment"]:
        if not when_matches(entry.get("when"), situation):
            continue
        env.update({k: str(v) for k, v in (entry.get("set") or {}).items()})
        unset.extend(n for n in entry.get("unset", []) if n not in unset)
        why.update(entry.get("why") or {})
    if target.device == "ascend" and multi_rank:
        env["HCCL_EXEC_TIMEOUT"] = "1800"
        why["HCCL_EXEC_TIMEOUT"] = "dumping slows ranks unevenly and trips collective time-outs"
    what = {"statistics": "Max/Min/Mean/Norm of every input and output (inf and NaN show in Max/Min)",
            "tensor": "every input and output tensor as .npy (large: narrow with --kernels or --steps)",
            "exception_dump": "the inputs of the operator that raised an exception"}[spec["task"]]
    unit = {"L0": "Cell", "L1": "API", "mix": "Cell and API", "L2": "kernel"}[level]
    where = (f"{dump_path}/step{{k}}/rank{{r}}/ (dump.json, stack.json, construct.json, dump_tensor_data/)"
             if level != "L2" else f"{dump_path}/rank_{{r}}/{{timestamp}}/step_{{k}}/")
    summary = [f"{purpose.capitalize()} dump through msprobe's PrecisionDebugger (task {spec['task']}, level "
               f"{level}: {unit} granularity), MindSpore {target.version_label}, {target.device}"
               + (f", jit_level {target.jit_level}" if target.jit_level else "") + ".",
               f"Will capture: {what}.",
               "Steps: " + ("every step" if not config["step"] else "steps " + ", ".join(map(str, config["step"]))) +
               " (msprobe counts debugger.step() calls).",
               f"Where: {where}."]
    warnings = list(target.notes)
    version = installed_msprobe()
    if needs_kernel_dump_extension(level, target):
        ext = r["kernel_dump_extension"]
        summary.append(f"Needs: mindstudio-probe with its adump module for kernel-level (L2) dumps at O2: "
                       f"{ext['install']}; {ext['instead']}.")
    elif version is None:
        warnings.append("mindstudio-probe is not installed here: pip install mindstudio-probe (26.2.0 tested)")
    result = MsprobeConfigResult(purpose=purpose, ms_version=target.version_label, device=target.device,
                                 jit_level=target.jit_level, mechanism="msprobe", config=config, env=env,
                                 unset=unset, summary=summary, warnings=warnings, env_why=why, level=level)
    result.set_config_path(os.path.abspath(config_path) if config_path else "<path of config.json>")
    if not config_path:
        result.config_path = None
    problems = check_msprobe(config, target=target, mode=mode, msprobe_version=version)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise ConfigRefused("refusing this msprobe config: " + " ".join(str(p) for p in errors), errors)
    result.problems = problems
    result.warnings += [str(p) for p in problems]
    return result


# ---- checking -------------------------------------------------------------------------------------------------

def is_msprobe_config(data: Mapping) -> bool:
    return "common_dump_settings" not in data and any(k in data for k in ("task", "dump_path", "level"))


def _ids_ok(values) -> bool:
    return isinstance(values, list) and all(
        (isinstance(v, int) and not isinstance(v, bool) and v >= 0) or
        (isinstance(v, str) and re.fullmatch(r"\d+(-\d+)?", v)) for v in values)


def check_msprobe(data: Mapping, *, target: Optional[Target] = None, mode: Optional[str] = None,
                  msprobe_version: Optional[str] = None) -> List[Problem]:
    """Problems of an msprobe config.json, errors first."""
    r = rules()
    problems: List[Problem] = []

    def add(pid, severity, message, key=None, fix=None):
        problems.append(Problem(pid, severity, message, key=key, fix=fix))

    task = data.get("task", "statistics")
    level = data.get("level", "L1")
    if task not in r["tasks"]:
        add("msprobe-task", "error", f"task {_shown(task)} is not one of {', '.join(r['tasks'])}", key="task")
        task = None            # a wrong task (a list or an object too) names no section and no removal rule
    if level not in r["levels"]:
        add("msprobe-level", "error", f"level {_shown(level)} is not one of {', '.join(r['levels'])}",
            key="level")
        level = None
    refused_from = r.get("tasks_refused_from", {}).get(task)
    if refused_from:
        version = msprobe_version or installed_msprobe()
        if version is None or _version_tuple(version) >= _version_tuple(refused_from):
            add("msprobe-task-removed", "error" if version else "warning",
                f"task {task} is refused by mindstudio-probe {refused_from}+ (\"task is invalid\")"
                + (f"; installed: {version}" if version else ""),
                key="task", fix="use task \"statistics\": inf and NaN show in every API's Max/Min")
        if level != "L2":
            add("msprobe-overflow-level", "error", "overflow_check works at level L2 (static graph, O2) only",
                key="level")
    if not isinstance(data.get("dump_path"), str) or not data.get("dump_path"):
        add("msprobe-dump-path", "error", "dump_path is required (a directory path string)", key="dump_path")
    for key in ("rank", "step"):
        if key in data and not _ids_ok(data[key]):
            add(f"msprobe-{key}", "error", f"{key} must be a list of ids (0, \"4\" or \"4-6\"), not "
                f"{_shown(data[key])}", key=key)
    for key in data:
        if key not in r["common_keys"] and key not in r["task_keys"] and key not in ("acc_check",):
            add("msprobe-unknown-key", "warning", f"msprobe does not read '{key}' (a typo?)", key=key)
    section = data.get(task) if task else None
    if section is not None and not isinstance(section, Mapping):
        add("msprobe-section", "error", f"the {task} section must be a JSON object", key=task)
    elif isinstance(section, Mapping):
        allowed = r["task_keys"].get(task, [])
        for key, value in section.items():
            dotted = f"{task}.{key}"
            if key not in allowed:
                add("msprobe-unknown-key", "warning", f"msprobe does not read '{key}' for task {task}", key=dotted)
            elif key in ("scope", "list", "tensor_list") and not (
                    isinstance(value, list) and all(isinstance(v, str) for v in value)):
                add("msprobe-list", "error", f"{key} must be a list of strings", key=dotted)
            elif key == "data_mode" and not (isinstance(value, list) and value and
                                             all(v in r["data_mode"] for v in value)):
                add("msprobe-data-mode", "error", f"data_mode must be a list of {', '.join(r['data_mode'])}",
                    key=dotted)
            elif key == "summary_mode" and not (value in r["summary_mode"] or (
                    isinstance(value, list) and all(v in r["summary_items"] for v in value))):
                add("msprobe-summary-mode", "error", f"summary_mode must be one of {', '.join(r['summary_mode'])} "
                    f"or a list of {', '.join(r['summary_items'])}", key=dotted)
            elif key == "file_format" and value not in ("npy", "bin"):
                add("msprobe-file-format", "error", "file_format must be npy or bin", key=dotted)
        if task in ("statistics", "tensor") and "scope" in section and section.get("scope") and \
                len(section["scope"]) not in (0, 2):
            add("msprobe-scope", "error", "scope names a range: exactly two entries (first and last)",
                key=f"{task}.scope")
    kernel = kernel_dump_problem(level, target)
    if kernel is not None:
        problems.append(kernel)
    if mode == "pynative" and level == "L2":
        add("msprobe-level-mode", "warning", "level L2 dumps kernels of jit/static graphs; a PyNative run needs "
            "L0, L1 or mix", key="level")
    if target is not None and target.device == "ascend" and target.jit_level == "O2" and level != "L2":
        add("msprobe-level-o2", "error", f"jit_level O2 runs as a static graph: level {level} dumps nothing there",
            key="level", fix="level \"L2\"")
    if task == "statistics" and level in ("L0", "L1", "mix") and data.get("extra_info") is False:
        add("msprobe-extra-info", "info", "extra_info false: no stack.json/construct.json, so msoverflow cannot "
            "name the source line or the Cell")
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(problems, key=lambda p: order[p.severity])
