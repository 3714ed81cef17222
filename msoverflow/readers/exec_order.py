"""execution_order/ms_execution_order_graph_{g}.csv and .dump_metadata/ beside a rank's dump.

The csv is the graph's kernel order; real CPU runs show it can differ from the run order, so it only breaks ties.
"""
from __future__ import annotations

import os
from typing import Dict, List

from .. import safeio
from ..names import scope_to_file_name


def execution_order(rank_root: str, graph: str, warn) -> Dict[str, int]:
    """file-style op name -> position; empty when the csv is missing."""
    path = os.path.join(rank_root, "execution_order", f"ms_execution_order_graph_{graph}.csv")
    if not os.path.isfile(path):
        return {}
    order: Dict[str, int] = {}
    try:
        with safeio.open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
            for position, line in enumerate(safeio.bounded_lines(fh, 1 << 16)):
                name = line.strip()
                if not name or name.startswith("NodeExecutionOrder"):
                    continue
                order.setdefault(scope_to_file_name(name), position)
    except OSError as exc:
        warn(f"{path}: cannot read ({exc.strerror})")
    return order


def graph_iterations(rank_root: str, graph: str) -> List[int]:
    """The iterations a graph ran (ms_global_execution_order_graph_{g}.csv), when MindSpore wrote them."""
    path = os.path.join(rank_root, "execution_order", f"ms_global_execution_order_graph_{graph}.csv")
    try:
        text = safeio.read_text(path, errors="replace")
    except OSError:
        return []
    return [int(x) for x in text.replace("\n", ",").split(",") if x.strip().isdigit() and len(x.strip()) <= 18]


def dump_metadata(rank_root: str, warn) -> Dict[str, object]:
    """device_target, ms_version and the user's dump config, from rank_N/.dump_metadata/."""
    meta: Dict[str, object] = {}
    folder = os.path.join(rank_root, ".dump_metadata")
    for name, key in (("config.json", "runtime"), ("data_dump.json", "dump_config")):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        try:
            value = safeio.json_safe(safeio.load_json(path, limit=16 << 20))
            if not isinstance(value, dict):
                raise ValueError(f"a JSON {type(value).__name__}, not an object")
            meta[key] = value
        except OSError as exc:
            warn(f"{path}: unreadable dump metadata ({exc.strerror or exc})")
        except ValueError as exc:   # JsonError, UnicodeDecodeError
            warn(f"{path}: unreadable dump metadata ({str(exc)[:200]})")
    runtime = meta.get("runtime")
    if isinstance(runtime, dict) and "ms_version" in runtime and not isinstance(runtime["ms_version"], str):
        runtime["ms_version"] = None if runtime["ms_version"] is None else str(runtime["ms_version"])[:40]
    config = meta.get("dump_config")
    if isinstance(config, dict) and not isinstance(config.get("common_dump_settings", {}), dict):
        warn(f"{os.path.join(folder, 'data_dump.json')}: common_dump_settings is not an object; ignored")
        config.pop("common_dump_settings")
    return meta
