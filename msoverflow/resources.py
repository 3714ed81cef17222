"""Locate the data tables in configs/ (beside the package in a checkout or editable install, or installed data)."""
from __future__ import annotations

import functools
import os
import sys


def config_dir() -> str:
    """MSOVERFLOW_CONFIGS_DIR, else configs/ beside the package (checkout, editable install), else the copy a
    regular install puts in {prefix}/share/msoverflow/configs."""
    override = os.environ.get("MSOVERFLOW_CONFIGS_DIR")
    if override:
        return override
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(os.path.dirname(here), "configs"),
                      os.path.join(sys.prefix, "share", "msoverflow", "configs")):
        if os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError("msoverflow's configs/ directory is missing from this installation")


def config_path(*parts: str) -> str:
    return os.path.join(config_dir(), *parts)


@functools.lru_cache(maxsize=None)
def load_yaml(*parts: str):
    from ruamel.yaml import YAML
    with open(config_path(*parts), encoding="utf-8") as fh:
        return YAML(typ="safe").load(fh)
