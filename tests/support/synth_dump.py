"""Build synthetic MindSpore-layout dumps (rank_{r}/{net}/{graph}/{iteration}/*.npy) for tests and benchmarks.

These are SYNTHETIC: the file names, layout and npy payload quirk follow what real MindSpore 2.10 CPU runs write
(see tests/real/test_real_dumps_analyze.py for the real thing). Nothing here imports mindspore.
"""
from __future__ import annotations

import itertools
import os
from typing import Optional, Sequence, Tuple

import numpy as np

_DTYPE_NAMES = {"float16": "Float16", "float32": "Float32", "float64": "Float64", "int32": "Int32",
                "int64": "Int64", "bool": "Bool"}


def write_npy(path: str, array: np.ndarray, declared: Optional[str] = None):
    """Write `array`; with `declared`, the npy header claims that dtype while the bytes stay the array's
    (the real CPU quirk: fp16-labelled files holding fp32 bytes)."""
    array = np.ascontiguousarray(array)
    if declared is None or np.dtype(declared) == array.dtype:
        np.save(path, array)
        return
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(declared)), "fortran_order": False,
              "shape": array.shape}
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        fh.write(array.tobytes())


class SynthDump:
    def __init__(self, root: str, rank: int = 0, net: str = "Net", graph: int = 0, with_dtype_suffix: bool = True,
                 clock: int = 1_700_000_000_000_000):
        self.root, self.rank, self.net, self.graph = root, rank, net, graph
        self.with_dtype_suffix = with_dtype_suffix
        self._clock = itertools.count(clock, 7)

    def dir(self, iteration: int) -> str:
        path = os.path.join(self.root, f"rank_{self.rank}", self.net, str(self.graph), str(iteration))
        os.makedirs(path, exist_ok=True)
        return path

    def tensor(self, iteration: int, op_type: str, op_name: str, io: str, slot: int, array: np.ndarray,
               declared: Optional[str] = None, timestamp: Optional[int] = None) -> str:
        ts = next(self._clock) if timestamp is None else timestamp
        dtype = declared or array.dtype.name
        suffix = f".{_DTYPE_NAMES.get(dtype, dtype.title())}" if self.with_dtype_suffix else ""
        name = f"{op_type}.{op_name}.0.0.{ts}.{io}.{slot}.DefaultFormat{suffix}.npy"
        path = os.path.join(self.dir(iteration), name)
        write_npy(path, array, declared)
        return path

    def op(self, iteration: int, op_type: str, op_name: str, inputs: Sequence[np.ndarray] = (),
           outputs: Sequence[np.ndarray] = (), declared: Optional[str] = None):
        for slot, a in enumerate(inputs):
            self.tensor(iteration, op_type, op_name, "input", slot, a, declared if a.dtype.kind == "f" else None)
        for slot, a in enumerate(outputs):
            self.tensor(iteration, op_type, op_name, "output", slot, a, declared if a.dtype.kind == "f" else None)

    def parameter(self, iteration: int, name: str, array: np.ndarray):
        self.tensor(iteration, "Parameter", name, "output", 0, array)

    def write_ir(self, text: str):
        folder = os.path.join(self.root, f"rank_{self.rank}", "graphs")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"ms_output_trace_code_graph_{self.graph}.ir"), "w") as fh:
            fh.write(text)


def ir_node(index: int, op_type: str, full_name: str, inputs: Sequence[str] = (), source: Optional[tuple] = None,
            forward: Optional[str] = None, out_dtype: str = "Float16", kernel_dtype: Optional[str] = None) -> str:
    """One node in the .ir text format MindSpore 2.10 writes (the fields msoverflow reads)."""
    attrs = f' cnode_primal_attrs: {{forward_node_name: "{forward}"}}' if forward else ""
    lines = [f"  %{index}(CNode_{index}) = PrimFunc_{op_type}({', '.join(inputs)}) primitive_attrs: {{}}{attrs}",
             f"      : (<Tensor[Float16], (2)>) -> (<Tensor[{out_dtype}], (2)>)",
             f"      : (<Float16xDefaultFormat>) -> (<{kernel_dtype or out_dtype}xDefaultFormat>)",
             f"      # Fullname with scope: ({full_name})"]
    if source:
        lines.append(f"      # In file {source[0]}:{source[1]}, 8~20/        {source[2]}/")
    return "\n".join(lines) + "\n"


def same_run_pair(root: str, ranks: Sequence[int] = (0,)) -> Tuple[str, str]:
    """Two dumps of the same one-op run (root/a and root/b, an Add on each rank): compare's smallest pair."""
    ones = np.ones(4, np.float32)
    for side in ("a", "b"):
        for rank in ranks:
            SynthDump(os.path.join(root, side), rank=rank).op(0, "Add", "Default_network-Net_Add-op1", [ones], [ones])
    return os.path.join(root, "a"), os.path.join(root, "b")
