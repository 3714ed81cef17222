"""Recompute an op with MindSpore itself (PyNative, CPU) for ops without a numpy reference kernel.

It runs in a subprocess, only when MindSpore is installed: the analyzing process never imports it. Nothing the
dump or the working directory chooses runs: an op that takes code is refused before anything starts
(msoverflow/cause/safety.py), and the worker (msoverflow/cause/mindspore_worker.py, which imports nothing of
msoverflow) is started isolated (`python -I` by file path: neither the working directory nor PYTHONPATH is on its
sys.path) from an empty temporary working directory that is removed afterwards. Before it starts, the elements it
will hold are counted from the shapes it will produce; it runs under a memory limit (RLIMIT_AS), a CPU-time limit
and a wall-clock timeout. The inputs and arguments go through a temporary directory (npy files and a JSON spec);
the outputs come back the same way. MindSpore's CPU kernels compute float16 and bfloat16 ops in float32, so a
low-precision result is the float32 one rounded (the caller rounds it).
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

from . import safety
from .recompute import Precision, RecomputeError

TIMEOUT_S = 180          # importing MindSpore alone takes seconds; a CPU kernel on an origin's inputs takes less
CPU_SECONDS = TIMEOUT_S  # the worker's CPU time (RLIMIT_CPU): a worker spinning is stopped even when the wall is not
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mindspore_worker.py")
# Address space of the worker: MindSpore's import reserves about 2 GB of it (thread stacks, allocator arenas),
# more with more cores; the recompute's own arrays come on top (8 bytes an element, a few copies).
_MEMORY_BASE = 4 << 30
_MEMORY_PER_CORE = 128 << 20
_BYTES_PER_ELEMENT = 8 * 3
# Variables that would make the worker dump, or load code or configuration from elsewhere.
_DROPPED_ENV = ("MINDSPORE_DUMP_CONFIG", "MS_ACL_DUMP_CFG_PATH", "MS_OM_PATH", "LD_PRELOAD")


def _jsonable(value):
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    raise TypeError(type(value).__name__)


def _spec(op_type: str, by_slot: Dict[int, np.ndarray], node, precisions: Sequence[str]) -> dict:
    literals, attrs, tensor_slots = {}, {}, None
    if node is not None:
        from ..readers.ir_graph import attributes, literal, shapes
        for slot, text in node.literals.items():
            try:
                literals[str(slot)] = _jsonable(literal(text))
            except (ValueError, TypeError):
                continue
        for name, value in attributes(node).items():
            try:
                attrs[name] = _jsonable(value)
            except TypeError:
                continue
        inputs, _outputs = shapes(node)
        if inputs:       # the saved graph says which slots are tensors; the others are scalar arguments
            tensor_slots = [slot for slot, shape in enumerate(inputs) if shape is not None]
    arity = max([*by_slot, *(int(s) for s in literals)], default=-1) + 1
    return {"op_type": op_type, "arity": arity, "inputs": sorted(by_slot), "literals": literals, "attrs": attrs,
            "tensor_slots": tensor_slots, "precisions": [_computed_in(p) for p in precisions]}


def _computed_in(precision: str) -> str:
    return "float32" if precision in ("float16", "bfloat16") else precision


# Arguments that set the size of a result, by the slot a graph passes them in (else an attribute of that name).
_SIZE_ARGUMENTS = {"Tile": ("multiples", 1), "BroadcastTo": ("shape", 1), "Fill": ("shape", 1)}


def budget(op_type: str, by_slot: Dict[int, np.ndarray], node, spec: dict, out_shapes: Sequence) -> int:
    """The elements the worker will hold (inputs, and each precision's results), counted before it runs from
    the shapes it will produce: what the op's arguments make (Tile's multiples), else the larger of what the
    dump and the saved graph say. Raises RecomputeError when that is over the budget."""
    inputs = sum(int(np.asarray(a).size) for a in by_slot.values())
    claimed = [int(np.prod(s, dtype=np.int64)) for s in out_shapes if s is not None]
    if node is not None:
        from ..readers.ir_graph import shapes
        _ins, outs = shapes(node)
        claimed += [int(np.prod(s, dtype=np.int64)) for s in outs if s is not None]
    args = dict(spec.get("attrs") or {})
    named = _SIZE_ARGUMENTS.get(op_type)
    if named is not None and named[0] not in args:
        name, slot = named
        if slot in by_slot:
            args[name] = np.asarray(by_slot[slot]).reshape(-1).tolist()
        elif str(slot) in spec.get("literals", {}):
            args[name] = spec["literals"][str(slot)]
    shapes_in = [np.shape(by_slot[s]) if s in by_slot else None for s in range(spec["arity"])]
    produced = safety.produced_elements(op_type, shapes_in, args)
    results = max([produced or 0, *claimed]) if (produced is not None or claimed) else inputs
    copies = len(dict.fromkeys(spec["precisions"]))
    reason = safety.over_budget(f"MindSpore's {op_type}", inputs, results, copies)
    if reason:
        raise RecomputeError(reason)
    return inputs + results * copies


def memory_limit(elements: int) -> int:
    """Bytes of address space the worker may use: what importing MindSpore reserves, and its arrays on top."""
    return max(_MEMORY_BASE, (2 << 30) + (os.cpu_count() or 1) * _MEMORY_PER_CORE) + elements * _BYTES_PER_ELEMENT


def _limits(memory: int, seconds: int):
    """The worker's resource limits, set in the child before it runs Python."""
    def apply():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))
    return apply


def _ended_by(returncode: int, stderr: str, memory: int, seconds: int) -> str:
    """Why the worker failed, in words: a limit that stopped it is named with its size."""
    lines = [line for line in (stderr or "").splitlines() if line.strip()]
    why = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "no output")
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL and not lines:
        return f"its CPU-time limit of {seconds} s ended it"
    if returncode < 0:
        return f"{why.strip()[:160]} (signal {signal.Signals(-returncode).name} ended it)" if lines else \
            f"signal {signal.Signals(-returncode).name} ended it"
    if any(word in why.lower() for word in ("memoryerror", "bad_alloc", "cannot allocate memory", "out of memory",
                                            "failed to map segment")):   # a library that cannot be mapped
        return f"{why.strip()[:160]} (its memory limit of {memory >> 20} MiB ended it)"
    return why.strip()[:200]


def _environment() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV and not k.startswith("PYTHON")}
    env["GLOG_v"] = os.environ.get("GLOG_v", "3")
    env["MALLOC_ARENA_MAX"] = "2"          # fewer allocator arenas: less address space per thread
    return env


def run_in_subprocess(op_type: str, by_slot: Dict[int, np.ndarray], node, precisions: Sequence[str],
                      out_dtypes: Sequence[Optional[str]] = (), out_shapes: Sequence = ()
                      ) -> Dict[str, List[np.ndarray]]:
    """{precision: outputs} of `op_type` run by MindSpore on these inputs (slot -> array). out_shapes: the
    dumped outputs' shapes (counted in the budget with the saved graph's)."""
    del out_dtypes       # MindSpore infers the outputs' dtypes itself
    why = safety.takes_code(op_type, node.attrs_text if node is not None else "")
    if why:
        raise RecomputeError(safety.refusal(why))
    spec = _spec(op_type, by_slot, node, precisions)
    spec["budget"] = budget(op_type, by_slot, node, spec, out_shapes)
    with tempfile.TemporaryDirectory(prefix="msoverflow_recompute_") as work:
        cwd = os.path.join(work, "cwd")          # the worker's working directory: empty, removed with `work`
        os.mkdir(cwd)
        for slot, array in by_slot.items():
            np.save(os.path.join(work, f"input_{slot}.npy"), np.asarray(array), allow_pickle=False)
        with open(os.path.join(work, "spec.json"), "w") as fh:
            json.dump(spec, fh)
        memory, seconds = memory_limit(spec["budget"]), max(1, math.ceil(CPU_SECONDS))
        try:
            done = subprocess.run([sys.executable, "-I", WORKER, work], cwd=cwd, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, env=_environment(), preexec_fn=_limits(memory, seconds))
        except subprocess.TimeoutExpired:
            raise RecomputeError(f"MindSpore did not recompute {op_type} within {TIMEOUT_S} s") from None
        except (OSError, subprocess.SubprocessError) as exc:     # the worker could not be started with its limits
            raise RecomputeError(f"MindSpore's worker could not start ({type(exc).__name__}: {exc})") from None
        if done.returncode != 0:
            why = _ended_by(done.returncode, done.stderr, memory, seconds)
            raise RecomputeError(f"MindSpore could not recompute {op_type}: {why}")
        results: Dict[str, List[np.ndarray]] = {}
        for precision in precisions:
            computed = _computed_in(precision)
            outputs, k = [], 0
            while os.path.exists(os.path.join(work, f"out_{computed}_{k}.npy")):
                path = os.path.join(work, f"out_{computed}_{k}.npy")
                outputs.append(Precision(precision).round(np.load(path, allow_pickle=False)))
                k += 1
            if not outputs:
                raise RecomputeError(f"MindSpore gave no output for {op_type} in {computed}")
            results[precision] = outputs
        return results
