"""What a training command compiles, read from a short probe run: which update kernels and which loss kernel
`run --two-pass`'s first pass watches (a list of likely optimizer kernels made MindSpore warn "Unused Kernel in
json: Adam ..." for each one the graph did not have).

The probe runs the command once with a dump config whose only step is one no run reaches (GRAPHS_ONLY_STEP):
MindSpore then writes the graphs it compiles (rank_N/graphs/*.ir, with the execution order) and no tensor. Once
every rank that has started holds a graph with a weight update, the command is stopped (its process group):
the probe costs the start-up and one compile, not the run. The command's output goes to probe.log beside them.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..errors import UserError
from ..readers.ir_graph import GraphIndex, load_ir
from ..rules.knowledge import knowledge
from ..selection import MAX_ID
from .generator import DumpConfigResult, build
from .runner import CONFIG_FILE_NAME, run_env

GRAPHS_ONLY_STEP = MAX_ID     # a step no run reaches: MindSpore saves its graphs and dumps no tensor
POLL_S = 0.1
SETTLED_S = 0.2               # a graph file is read once its size has not changed for this long
OTHER_RANKS_S = 5.0           # after the first rank's update graph, how long the others get to write theirs
STOP_WAIT_S = 15.0
LOG_NAME = "probe.log"
# Nodes of a saved graph that carry values or order between kernels and compute nothing.
_PASS_THROUGH = {"MakeTuple", "Depend", "TupleGetItem", "tuple_getitem", "make_tuple", "Load", "UpdateState"}


@dataclass
class GraphProbe:
    update_kernels: List[str] = field(default_factory=list)   # op types of the weight updates, e.g. ["SGD"]
    loss_kernel: Optional[str] = None                          # full name of the kernel that makes the loss
    graphs: List[str] = field(default_factory=list)           # the graphs read, relative to the probe directory
    seconds: float = 0.0
    bytes: int = 0
    stopped: bool = False       # stopped once the graphs were read (else the command ended by itself)
    command_exit: Optional[int] = None

    def kernels(self) -> List[str]:
        """What pass 1 asks MindSpore to dump: the update kernels by op type, the loss kernel by full name."""
        return self.update_kernels + ([self.loss_kernel] if self.loss_kernel else [])


def graphs_only_config(directory, **config_options) -> DumpConfigResult:
    """A dump config that makes MindSpore save its compiled graphs and dump no tensor."""
    return build("tensors", path=str(directory), steps=str(GRAPHS_ONLY_STEP), **config_options)


def weight_updates(graph: GraphIndex) -> List[str]:
    """Op types of the graph's weight updates: the optimizer's update kernels (SGD, Adam, Apply*), or, for an
    optimizer built from plain writes (MindFormers' AdamW assigns its results), the Assign/Scatter kernels inside
    the optimizer's scope (the train step's `optimizer` Cell)."""
    kn = knowledge()
    updates = {n.op_type for n in graph.nodes if kn.updates_weights(n.op_type)}
    if updates:
        return sorted(updates)
    return sorted({n.op_type for n in graph.nodes if kn.written_inputs(n.op_type)
                   and any(part.startswith("optimizer") for part in n.full_name.split("/")[:-1])})


def loss_kernel(graphs: Sequence[GraphIndex]) -> Optional[str]:
    """The kernel that makes the loss: the last real kernel of the forward (the train step's `network` Cell,
    scope Default/network-*) in the graph that holds the backward (scope Gradients/). What a step returns is no
    guide: a step with a branch returns the branch's inputs from its first graph."""
    def backward_size(graph):
        return sum(n.full_name.startswith("Gradients/") for n in graph.nodes)
    graph = max(graphs, key=backward_size, default=None)
    if graph is None or not backward_size(graph):
        return None
    forward = [n.full_name for n in graph.nodes
               if n.full_name.startswith("Default/network") and n.op_type not in _PASS_THROUGH]
    return forward[-1] if forward else None


def probe(command: Sequence[str], directory: Path, **config_options) -> GraphProbe:
    """Run `command` until its compiled graphs are on disk (see the module docstring) and read them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = graphs_only_config(directory, **config_options)
    config.write(directory / CONFIG_FILE_NAME)
    result = GraphProbe()
    started = time.monotonic()
    read: Dict[Path, GraphIndex] = {}
    sizes: Dict[Path, tuple] = {}
    first_update = None
    with open(directory / LOG_NAME, "wb") as output:
        try:
            proc = subprocess.Popen(list(command), env=run_env(config), stdout=output, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except FileNotFoundError as exc:
            raise UserError(f"cannot run {command[0]!r}: {exc.strerror}") from exc
        try:
            while True:
                exited = proc.poll() is not None
                _read_settled(directory, read, sizes, force=exited)
                ranks = sorted(p.name for p in directory.glob("rank_*") if p.is_dir())
                with_updates = {p.parent.parent.name for p, g in read.items() if weight_updates(g)}
                if with_updates and first_update is None:
                    first_update = time.monotonic()
                if exited:
                    result.command_exit = proc.returncode
                    break
                if first_update is not None and (set(ranks) <= with_updates
                                                  or time.monotonic() - first_update > OTHER_RANKS_S):
                    _read_settled(directory, read, sizes, force=True)
                    result.stopped = True
                    break
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                _stop(proc)
            result.command_exit = proc.returncode if result.command_exit is None else result.command_exit
    result.seconds = time.monotonic() - started
    result.bytes = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    result.graphs = sorted(str(p.relative_to(directory)) for p in read)
    updates = sorted({t for g in read.values() for t in weight_updates(g)})
    result.update_kernels = updates
    first_rank = min((p.parent.parent.name for p in read), default=None, key=lambda r: int(r.split("_")[-1]))
    result.loss_kernel = loss_kernel([g for p, g in read.items() if p.parent.parent.name == first_rank])
    return result


def log_tail(directory: Path, lines: int = 20) -> str:
    """The end of the probe's own output (what the command printed), for an error message."""
    try:
        text = (Path(directory) / LOG_NAME).read_bytes()[-16384:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _read_settled(directory: Path, read: Dict[Path, GraphIndex], sizes: Dict[Path, tuple], force: bool) -> None:
    """Parse each graph file whose size has held still for SETTLED_S (or every one, when the writer is done)."""
    now = time.monotonic()
    for path in sorted(directory.glob("rank_*/graphs/*.ir")):
        if path in read:
            continue
        try:
            size = path.stat().st_size
        except OSError:
            continue
        seen = sizes.get(path)
        if seen is None or seen[0] != size:
            sizes[path] = (size, now)
            if not force:
                continue
        elif not force and now - seen[1] < SETTLED_S:
            continue
        try:
            read[path] = load_ir(str(path))
        except (OSError, ValueError):
            continue


def _stop(proc: subprocess.Popen) -> None:
    """Stop the command and every process it started: SIGTERM, then SIGKILL. A launcher's workers may sit in
    sessions of their own (msrun's do) and outlive it when only its group is signalled, so the whole tree of
    descendants is found first (before they are orphaned) and each one is signalled by its id."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        tree = [proc.pid] + _descendants(proc.pid)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None and not any(_alive(pid) for pid in tree[1:]):
                return
            time.sleep(POLL_S)


def _descendants(pid: int) -> List[int]:
    """Every process below `pid` (Linux /proc; empty elsewhere)."""
    children: Dict[int, List[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = entry.read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")
