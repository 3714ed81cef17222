"""Presets: YAML files of `msoverflow config` options in msoverflow/data/presets/, meant to be copied and edited."""
from __future__ import annotations

from pathlib import Path
from typing import Union

from ..errors import UserError
from .rules import PURPOSES, configs_dir

# Keys a preset may set: the keyword arguments of msoverflow.config.build (plus purpose and a description).
PRESET_KEYS = {"description", "purpose", "ms_version", "device", "jit_level", "path", "net_name", "steps", "ranks",
               "inputs", "outputs", "kernels", "statistic_category", "overflow_number", "multi_rank"}


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
    """The options of a preset (by shipped name or by path), validated; keys as in msoverflow.config.build."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from ..safeio import read_text, source_nesting
    path = resolve_preset(name_or_path)
    try:
        text = read_text(path, 1 << 20)
        if source_nesting(text) > 100:
            raise ValueError("nested too deeply")
        data = YAML(typ="safe").load(text)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the preset ({exc.strerror})") from exc
    except YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    except (ValueError, RecursionError) as exc:
        raise UserError(f"{path}: not a readable preset ({str(exc)[:100]})") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: a preset is a YAML mapping of msoverflow config options")
    unknown = sorted(set(data) - PRESET_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown preset keys {', '.join(unknown)} (allowed: {', '.join(sorted(PRESET_KEYS))})")
    if "purpose" in data and data["purpose"] not in PURPOSES:
        raise UserError(f"{path}: purpose '{data['purpose']}' is not one of {', '.join(PURPOSES)}")
    for key in ("ms_version", "steps", "ranks"):
        if key in data and isinstance(data[key], float):
            # YAML reads 2.10 as the float 2.1: insist on quotes rather than guess.
            raise UserError(f"{path}: write {key} as a quoted string (e.g. \"2.10\"); YAML turns {data[key]} into a number")
    return data
