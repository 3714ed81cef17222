"""Dump configs for MindSpore: generate (build), validate (check), presets, and run-with-dump.

    from msoverflow.config import build, check
    result = build("overflow", ms_version="2.4", device="ascend", jit_level="O0", path="/data/dump", steps="0|5-8")
    result.write("/data/dump_config.json"); print(result.shell_snippet()); print(result.summary_text())
    problems = check("/data/dump_config.json", ms_version="2.4", device="ascend", jit_level="O0")

The per-version facts live in msoverflow/data/dump_rules.yaml, not in this code.
"""
from .checker import Problem, check, has_errors
from .generator import ConfigRefused, DumpConfigResult, build
from .presets import list_presets, load_preset

__all__ = ["build", "check", "has_errors", "DumpConfigResult", "Problem", "ConfigRefused", "list_presets",
           "load_preset", "run_with_dump"]


def run_with_dump(command, dump_dir=None, **config_options) -> int:
    from .runner import run_with_dump as _run

    return _run(command, dump_dir, **config_options)
