"""Presets: YAML files of `msoverflow config` options in msoverflow/data/presets/, meant to be copied and edited."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Tuple, Union

from ..errors import UserError
from .rules import PURPOSES, configs_dir

MAX_PRESET_BYTES = 256 << 10     # the shipped presets are a few hundred bytes


def _text(value) -> bool:
    return isinstance(value, str)


# Keys that take one word of a few, as their flags do (any letter case; given back as the flag spells it).
CHOICES = {"purpose": PURPOSES, "device": ("ascend", "gpu", "cpu"), "jit_level": ("O0", "O1", "O2"),
           "mode": ("graph", "pynative"), "msprobe_level": ("L0", "L1", "mix", "L2")}


def _choice(key: str, value) -> object:
    """The choice `value` names (its spelling in CHOICES), or None."""
    if not isinstance(value, str):
        return None
    return next((c for c in CHOICES[key] if c.lower() == value.lower()), None)


def _one_of(key: str) -> Tuple[Callable[[object], bool], str]:
    return (lambda value: _choice(key, value) is not None), "one of " + ", ".join(CHOICES[key])


def _version(value) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _flag(value) -> bool:
    return isinstance(value, bool)


def _ids(value) -> bool:
    """steps/ranks as the command line takes them ("0-7", "all", "0|5-8"), one number, or a list of numbers."""
    def number(v):
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63
    return isinstance(value, str) or number(value) or (isinstance(value, list) and all(number(v) for v in value))


def _names(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31


# Keys a preset may set (the keyword arguments of msoverflow.config.build, plus purpose and a description), each
# with the one type its command-line flag takes and how to say it.
PRESET_TYPES: Dict[str, Tuple[Callable[[object], bool], str]] = {
    "description": (_text, "text"),
    "purpose": _one_of("purpose"),
    "ms_version": (_version, 'a quoted version, e.g. "2.10"'),
    "device": _one_of("device"),
    "jit_level": _one_of("jit_level"),
    "mode": _one_of("mode"),
    "msprobe_level": _one_of("msprobe_level"),
    "path": (_text, "a directory name"),
    "net_name": (_text, "a name, e.g. Net"),
    "steps": (_ids, 'steps like "0-3", "all", 5 or [1, 2]'),
    "ranks": (_ids, 'ranks like "0-7", 0 or [0, 1]'),
    "multi_rank": (_flag, "true or false"),
    "inputs": (_flag, "true or false"),
    "outputs": (_flag, "true or false"),
    "kernels": (_names, "a list of kernel names or op types, e.g. [SqrtGrad]"),
    "statistic_category": (_names, "a list of categories, e.g. [max, min, nan count]"),
    "overflow_number": (_count, "a whole number, e.g. 50"),
}
PRESET_KEYS = set(PRESET_TYPES)


def presets_dir() -> Path:
    return configs_dir() / "presets"


def list_presets() -> dict:
    """name -> description of every preset shipped in msoverflow/data/presets/."""
    found = {}
    for path in sorted(presets_dir().glob("*.yaml")):
        try:
            found[path.stem] = str(load_preset(path).get("description", "")).strip()
        except UserError as exc:
            found[path.stem] = f"(unreadable: {exc})"
    return found


def resolve_preset(name_or_path: Union[str, Path]) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return candidate
    shipped = presets_dir() / f"{name_or_path}.yaml"
    if shipped.exists():
        return shipped
    raise UserError(f"preset '{name_or_path}' not found: not a file and not one of "
                    f"{', '.join(list_presets()) or '(none)'} in {presets_dir()}")


def load_preset(name_or_path: Union[str, Path]) -> dict:
    """The options of a preset (by shipped name or by path), validated; keys as in msoverflow.config.build.
    A wrong key or a value of the wrong type is a UserError naming the key and the file (exit 2)."""
    from ..safeio import TooLarge, brief, loads_yaml, read_text
    path = resolve_preset(name_or_path)
    try:
        data = loads_yaml(read_text(path, MAX_PRESET_BYTES), max_depth=16)
    except TooLarge:
        raise UserError(f"{path}: larger than {MAX_PRESET_BYTES >> 10} KiB, not a preset") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the preset ({exc.strerror or exc})") from None
    except ValueError as exc:      # not UTF-8, not YAML, nested or aliased past the bounds
        raise UserError(f"{path}: not a readable preset ({str(exc)[:200]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a preset is a YAML mapping of msoverflow config options")
    unknown = sorted(brief(key) if not isinstance(key, str) else key for key in data if key not in PRESET_TYPES)
    if unknown:
        raise UserError(f"{path}: unknown preset keys {', '.join(unknown[:10])} (allowed: "
                        f"{', '.join(sorted(PRESET_TYPES))})")
    for key, value in data.items():
        if key in ("ms_version", "steps", "ranks") and isinstance(value, float):
            # YAML reads 2.10 as the float 2.1: insist on quotes rather than guess.
            raise UserError(f"{path}: write {key} as a quoted string (e.g. \"2.10\"); YAML turns {brief(value)} "
                            "into a number")
        accepts, expected = PRESET_TYPES[key]
        if value is not None and not accepts(value):
            raise UserError(f"{path}: {key} is {brief(value)}; expected {expected}")
    return {key: _choice(key, value) if key in CHOICES else value for key, value in data.items() if value is not None}
