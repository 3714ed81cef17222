"""execution_order/ms_execution_order_graph_{g}.csv and .dump_metadata/ beside a rank's dump.

The csv is the graph's kernel order; real CPU runs show it can differ from the run order, so it only breaks ties.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List

from ..names import scope_to_file_name


def execution_order(rank_root: str, graph: str, warn) -> Dict[str, int]:
    """file-style op name -> position; empty when the csv is missing."""
    path = os.path.join(rank_root, "execution_order", f"ms_execution_order_graph_{graph}.csv")
    if not os.path.isfile(path):
        return {}
    order: Dict[str, int] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for position, line in enumerate(fh):
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
        with open(path, encoding="utf-8") as fh:
            return [int(x) for x in fh.read().replace("\n", ",").split(",") if x.strip().isdigit()]
    except OSError:
        return []


def dump_metadata(rank_root: str, warn) -> Dict[str, object]:
    """device_target, ms_version and the user's dump config, from rank_N/.dump_metadata/."""
    meta: Dict[str, object] = {}
    folder = os.path.join(rank_root, ".dump_metadata")
    for name, key in (("config.json", "runtime"), ("data_dump.json", "dump_config")):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                meta[key] = json.load(fh)
        except (OSError, ValueError) as exc:
            warn(f"{path}: unreadable dump metadata ({exc})")
    return meta
