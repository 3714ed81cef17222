"""Locate msoverflow's data tables (dump rules, presets, op knowledge, MindFormers precision fields).

They live inside the package (msoverflow/data/) and load through importlib.resources, so an install never picks up
another package's top-level `configs/` (every MindFormers wheel installs one into site-packages) and
`pip install --target DIR` carries them along. MSOVERFLOW_CONFIGS_DIR overrides the directory (tests, experiments).
"""
from __future__ import annotations

import functools
import os
from importlib import resources


def config_dir() -> str:
    override = os.environ.get("MSOVERFLOW_CONFIGS_DIR")
    if override:
        return override
    data = resources.files("msoverflow") / "data"
    path = os.fspath(data)  # type: ignore[call-overload]  # a real directory for every install msoverflow supports (not zipped)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"msoverflow's data directory is missing from this installation ({path})")
    return path


def config_path(*parts: str) -> str:
    return os.path.join(config_dir(), *parts)


@functools.lru_cache(maxsize=None)
def load_yaml(*parts: str):
    from ruamel.yaml import YAML
    with open(config_path(*parts), encoding="utf-8") as fh:
        return YAML(typ="safe").load(fh)
