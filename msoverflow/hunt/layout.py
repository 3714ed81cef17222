"""Where a hunt writes: one record per process, and the first bad op's tensors in MindSpore's dump layout
(rank_{r}/hunt/0/{step}/{op_type}.{op_name}.{task}.0.{ts}.{input|output}.{slot}.DefaultFormat.{DType}.npy), so
`msoverflow analyze` and `msoverflow repro` read them like any dump. Standard library only: both the training
process and the command import it."""
from __future__ import annotations

import os
import re
from typing import List, Tuple

RECORD_NAME = "hunt_rank{rank}_pid{pid}.json"
NET_NAME = "hunt"
GRAPH = "0"


def step_dir(out_dir: str, rank: int, step: int) -> str:
    return os.path.join(out_dir, f"rank_{rank}", NET_NAME, GRAPH, str(step))


def scoped_name(cells: List[Tuple[str, str]], op_type: str, number: int, backward: bool, forward_op: str) -> str:
    """A full name in MindSpore's scope form (Gradients/Default/network-CausalLMLoss/.../lm_head-NormHead/Grad_Sqrt/
    SqrtGrad-op7) from the Cell path as (attribute, class) pairs."""
    parts = ["Gradients", "Default"] if backward else ["Default"]
    parts += [f"{attr}-{cls}" for attr, cls in cells]
    if backward:
        parts.append(f"Grad_{forward_op}")
    parts.append(f"{op_type}-op{number}")
    return "/".join(parts)


def npy_name(op_type: str, full_name: str, number: int, stamp: int, io: str, slot: int, ms_dtype: str) -> str:
    op_name = re.sub(r"[/\\. ]", "_", full_name)      # as MindSpore writes scope names into file names
    return f"{op_type}.{op_name}.{number}.0.{stamp}.{io}.{slot}.DefaultFormat.{ms_dtype}.npy"
