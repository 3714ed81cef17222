"""The config package's small data model: a checker's Problem, the target platform, a built config's result.

checker, generator and msprobe all import this module and never each other in a circle: the checker dispatches to
msprobe's check, the generator to msprobe's build; msprobe needs only these types and the rules.
"""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence, Union

from ..errors import UserError
from . import detect
from .rules import DEVICES, JIT_LEVELS, load_rules, normalise_version, version_label

SEVERITIES = ("error", "warning", "info")


@dataclass
class Problem:
    id: str
    severity: str  # error: MindSpore refuses or dumps nothing; warning: silently changed/ignored; info
    message: str
    key: Optional[str] = None
    mindspore_says: Optional[str] = None
    fix: Optional[str] = None

    def __str__(self) -> str:
        text = f"{self.severity}: {self.key + ': ' if self.key else ''}{self.message}"
        if self.mindspore_says:
            text += f" (MindSpore: \"{self.mindspore_says}\")"
        if self.fix:
            text += f" Fix: {self.fix}."
        return text

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Target:
    """The platform a config is meant for, after defaults and detection."""
    version: tuple[int, int]
    device: str
    jit_level: Optional[str]
    notes: list  # what was assumed, and why

    @property
    def version_label(self) -> str:
        return version_label(self.version)


def resolve_target(ms_version: Optional[str], device: Optional[str], jit_level: Optional[str],
                   *, newest_if_unknown: bool = False) -> Target:
    notes = []
    if ms_version is None:
        ms_version = detect.detect_ms_version()
        if ms_version:
            notes.append(f"MindSpore {ms_version} detected (installed package)")
        elif newest_if_unknown:
            ms_version = load_rules()["versions"][-1]
            notes.append(f"no MindSpore installed and no --ms-version: checked against the {ms_version} rules")
        else:
            raise UserError("no MindSpore installed here to take the version from: pass --ms-version (e.g. 2.4)")
    version, warnings = normalise_version(ms_version)
    notes.extend(warnings)
    if device is None:
        device, why = detect.detect_device()
        notes.append(f"device {device} assumed ({why}); pass --device to choose")
    device = device.lower()
    if device not in DEVICES:
        raise UserError(f"device '{device}' is not one of {', '.join(DEVICES)}")
    if jit_level is not None:
        jit_level = jit_level.upper()
        if jit_level not in JIT_LEVELS:
            raise UserError(f"jit level '{jit_level}' is not one of {', '.join(JIT_LEVELS)}")
    return Target(version, device, jit_level, notes)


def shown(value, limit: int = 200) -> str:
    """A config value as JSON for a message, cut to `limit` characters (a config may hold huge values)."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


class ConfigRefused(UserError):
    """The requested config cannot work on this platform; `problems` says why."""

    def __init__(self, message: str, problems: Sequence[Problem] = ()):
        super().__init__(message)
        self.problems = list(problems)


@dataclass
class DumpConfigResult:
    purpose: str
    ms_version: str
    device: str
    jit_level: Optional[str]
    mechanism: str
    config: dict
    env: dict                      # variables to export (values are final strings)
    unset: list                    # variables to unset
    summary: list                  # plain lines: what the dump will and will not capture
    warnings: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # non-error Problems the checker found (warnings, info)
    env_why: dict = field(default_factory=dict)
    hints: list = field(default_factory=list)     # commented shell lines
    config_path: Optional[str] = None

    @property
    def dump_path(self) -> str:
        return self.config["common_dump_settings"].get("path", "")

    def to_json(self) -> str:
        return json.dumps(self.config, indent=4) + "\n"

    def write(self, config_path: Union[str, os.PathLike]) -> str:
        """Write the JSON config; returns its absolute path and points MINDSPORE_DUMP_CONFIG at it."""
        config_path = os.path.abspath(os.fspath(config_path))
        try:
            os.makedirs(os.path.dirname(config_path), exist_ok=True)
        except OSError as exc:
            raise UserError(f"{config_path}: cannot write the config ({exc.strerror})") from exc
        from ..safeio import write_atomic  # whole or not at all: a config MindSpore half-reads fails hours later
        write_atomic(config_path, self.to_json(), what="the config")
        self.set_config_path(config_path)
        return config_path

    def set_config_path(self, config_path: str) -> None:
        self.config_path = config_path
        self.env["MINDSPORE_DUMP_CONFIG"] = config_path

    def environment_lines(self) -> list:
        """export/unset lines, each with why."""
        lines = []
        for name, value in self.env.items():
            why = self.env_why.get(name)
            lines.append(f"export {name}={shlex.quote(value)}" + (f"   # {why}" if why else ""))
        for name in self.unset:
            why = self.env_why.get(name)
            lines.append(f"unset {name}" + (f"   # {why}" if why else ""))
        return lines

    def shell_snippet(self) -> str:
        lines = [f"# msoverflow: {self.purpose} dump, MindSpore {self.ms_version}, {self.device}"
                 + (f", jit_level {self.jit_level}" if self.jit_level else "")]
        lines += self.environment_lines()
        lines.extend(f"# {hint}" for hint in self.hints)
        return "\n".join(lines) + "\n"

    def summary_text(self) -> str:
        return "\n".join(self.summary) + "\n"

    def to_dict(self) -> dict:
        return {"purpose": self.purpose, "ms_version": self.ms_version, "device": self.device,
                "jit_level": self.jit_level, "mechanism": self.mechanism, "config": self.config,
                "config_path": self.config_path, "env": self.env, "unset": self.unset, "summary": self.summary,
                "warnings": self.warnings, "problems": [p.to_dict() for p in self.problems], "hints": self.hints}
