"""Where each rank sits in the parallel layout: its data-parallel, tensor-parallel and pipeline coordinates.

Rank order (MindSpore / MindFormers): a global rank is split pipeline-major, then data parallel, then tensor
(model) parallel, fastest:

    rank = pp * (dp_size * tp_size) + dp * tp_size + tp

The stage is `rank // (device_num // pipeline_stages)`, as MindSpore's own code computes it
(mindspore/parallel/_parallel_serialization.py: `rank_id // stage_device_num`; MindFormers
mindformers/models/utils.py `get_current_rank_stage`: `rank_id // (device_num // pipeline_stages)`); inside a
stage the device matrix of a MindFormers strategy `((dp, mp), ...)` puts model parallel in the last, fastest
dimension. So with dp=2, tp=2, pp=2 rank 5 is pipeline stage 1, dp 0, tp 1.

Where the layout comes from, first found wins:
  1. `--parallel "dp=4,tp=2,pp=2"` (a missing size is the world size over the others), or `--parallel FILE`: a
     MindFormers YAML (`parallel_config: data_parallel, model_parallel, pipeline_stage`) or an HCCL rank table;
  2. a MindFormers YAML beside the dump (the dump directory or its parent);
  3. nothing: pipeline stages are inferred from the saved execution orders (ranks whose graphs hold the same
     kernels form a stage; the stage whose first point-to-point op is a Send comes first), or the layout is
     said to be unknown.
The world size is the largest of: the ranks the dump expects, an HCCL rank table's devices, msrun's worker logs
(`worker_N.log` beside the dump).
"""
from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import safeio
from .errors import UserError

MAX_SIZE = 1 << 16
_SPEC_KEYS = {"dp": "dp", "data_parallel": "dp", "tp": "tp", "mp": "tp", "model_parallel": "tp", "pp": "pp",
              "pipeline_stage": "pp", "pipeline_stages": "pp"}
_YAML_LIMIT = 1 << 20
_MAX_FILES_LOOKED_AT = 200
ORDER = "rank = pp * (dp_size * tp_size) + dp * tp_size + tp (MindSpore/MindFormers: pipeline-major, tp fastest)"


@dataclass
class ParallelSpec:
    """What the user (or a file) said; a size left None is filled from the world size."""
    dp: Optional[int] = None
    tp: Optional[int] = None
    pp: Optional[int] = None
    source: str = "--parallel"


@dataclass
class ParallelLayout:
    dp: int
    tp: int
    pp: int
    source: str
    stages: Dict[int, List[int]] = field(default_factory=dict)   # inferred: stage -> ranks (no dp/tp then)
    notes: List[str] = field(default_factory=list)

    @property
    def inferred(self) -> bool:
        return bool(self.stages)

    def coords(self, rank: int) -> Optional[Dict[str, int]]:
        if self.inferred:
            stage = next((s for s, ranks in self.stages.items() if rank in ranks), None)
            return None if stage is None else {"pp": stage}
        if rank < 0 or rank >= self.dp * self.tp * self.pp:
            return None
        per_stage = self.dp * self.tp
        return {"dp": (rank % per_stage) // self.tp, "tp": rank % self.tp, "pp": rank // per_stage}

    def to_dict(self) -> Dict[str, object]:
        if self.inferred:
            return {"pp": self.pp, "source": self.source, "stages": {str(k): v for k, v in self.stages.items()},
                    "notes": self.notes}
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "source": self.source, "order": ORDER,
                "notes": self.notes}


# ---- the option ---------------------------------------------------------------------------------------------

def parse_spec(text: str) -> ParallelSpec:
    """`dp=4,tp=2,pp=2` (also mp= for tp, any subset, any order) or a file holding the layout."""
    text = text.strip()
    if "=" not in text:
        if not text or not os.path.exists(text):
            raise UserError(f"--parallel {text!r}: expected sizes like dp=4,tp=2,pp=2 or a MindFormers YAML / rank "
                            "table file")
        return spec_from_file(text)
    spec = ParallelSpec(source=f"--parallel {text}")
    for part in text.split(","):
        key, _, value = part.partition("=")
        name = _SPEC_KEYS.get(key.strip().lower())
        if name is None:
            raise UserError(f"--parallel {text!r}: unknown size {key.strip()!r} (use dp, tp (or mp) and pp)")
        try:
            size = safeio.int_text(value, f"--parallel {name}", max_digits=6)
        except ValueError:      # not a number, or thousands of digits
            size = None
        if size is None or not 1 <= size <= MAX_SIZE:
            raise UserError(f"--parallel {text!r}: {name} must be a whole number from 1 to {MAX_SIZE}")
        if getattr(spec, name) is not None:
            raise UserError(f"--parallel {text!r}: {name} is given twice")
        setattr(spec, name, size)
    return spec


def _argparse_spec(text: str) -> ParallelSpec:
    try:
        return parse_spec(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--parallel ", "", 1)) from None


def add_parallel_option(parser) -> None:
    """The one `--parallel` option (analyze, compare, hunt): the value is a ParallelSpec (args.parallel)."""
    parser.add_argument("--parallel", type=_argparse_spec, metavar="LAYOUT",
                        help="parallel layout, e.g. dp=4,tp=2,pp=2 (mp= is tp; a size left out is the world size "
                             "over the others), or a MindFormers YAML (parallel_config) / HCCL rank table; rank "
                             "rows then carry their coordinates (default: a MindFormers YAML beside the dump, "
                             "else pipeline stages inferred from the saved execution orders). Rank order: "
                             "pipeline-major, tp fastest, as MindSpore numbers ranks")


# ---- files --------------------------------------------------------------------------------------------------

def spec_from_file(path: str) -> ParallelSpec:
    lower = path.lower()
    if lower.endswith((".yaml", ".yml")):
        spec = _yaml_spec(path)
        if spec is None:
            raise UserError(f"{path}: no parallel_config (data_parallel, model_parallel, pipeline_stage) in it")
        return spec
    if lower.endswith(".json"):
        count = rank_table_size(path)
        if count is None:
            raise UserError(f"{path}: not an HCCL rank table (server_list[].device[].rank_id)")
        return ParallelSpec(dp=count, tp=1, pp=1, source=f"rank table {os.path.basename(path)} ({count} devices, "
                                                          "data parallel)")
    raise UserError(f"{path}: --parallel reads a MindFormers YAML (.yaml) or an HCCL rank table (.json)")


def _yaml_spec(path: str) -> Optional[ParallelSpec]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    try:
        text = safeio.read_text(path, _YAML_LIMIT, errors="replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})")
    if "parallel_config" not in text:
        return None
    if safeio.source_nesting(text) > 64:
        raise UserError(f"{path}: nested too deeply to be a MindFormers YAML")
    try:
        doc = YAML(typ="safe").load(text)
    except (YAMLError, ValueError, RecursionError) as exc:
        raise UserError(f"{path}: not valid YAML ({type(exc).__name__})")
    config = doc.get("parallel_config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        return None
    sizes = {}
    for key, name in (("data_parallel", "dp"), ("model_parallel", "tp"), ("pipeline_stage", "pp")):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise UserError(f"{path}: parallel_config.{key} is {str(value)[:40]!r}, not a size from 1 to {MAX_SIZE}")
        sizes[name] = value
    return ParallelSpec(source=f"MindFormers YAML {os.path.basename(path)} (parallel_config)", **sizes)


def rank_table_size(path: str) -> Optional[int]:
    from .ranks import rank_table_ranks
    return len(rank_table_ranks(path)) or None


def _beside(path: str) -> List[str]:
    """Regular files in the dump directory and its parent (where YAMLs, rank tables and msrun logs sit)."""
    found: List[str] = []
    here = os.path.abspath(path)
    for folder in (here, os.path.dirname(here)):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)[:_MAX_FILES_LOOKED_AT]
        except OSError:
            continue
        found += [e.path for e in entries if e.is_file(follow_symlinks=False)]
    return found


_WORKER_LOG = re.compile(r"^worker_([0-9]{1,6})\.log$")
_RANK_TABLE = re.compile(r"(rank_table|hccl).*\.json$", re.IGNORECASE)


def world_size(path: str, expected_ranks: Sequence[int]) -> Tuple[int, str]:
    """The number of ranks in the job, and what says so."""
    size, why = (max(expected_ranks) + 1, "the dump's ranks") if expected_ranks else (0, "")
    files = _beside(path)
    workers = {int(m.group(1)) for f in files for m in [_WORKER_LOG.match(os.path.basename(f))] if m}
    if workers and max(workers) + 1 > size:
        size, why = max(workers) + 1, f"msrun's worker logs ({len(workers)} workers)"
    for f in files:
        if _RANK_TABLE.search(os.path.basename(f)):
            count = rank_table_size(f)
            if count and count > size:
                size, why = count, f"the rank table {os.path.basename(f)}"
    return size, why


def _yaml_beside(path: str, warn) -> Optional[ParallelSpec]:
    for f in _beside(path):
        if f.lower().endswith((".yaml", ".yml")):
            try:
                spec = _yaml_spec(f)
            except UserError as exc:
                warn(str(exc))
                continue
            if spec is not None:
                return spec
    return None


# ---- the layout ---------------------------------------------------------------------------------------------

def resolve(spec: Optional[ParallelSpec], path: str, expected_ranks: Sequence[int], rank_roots: Dict[int, str],
            warn: Callable[[str], None]) -> Optional[ParallelLayout]:
    """The layout to label ranks with (None: unknown). rank_roots: rank -> its rank_N directory."""
    spec = spec or _yaml_beside(path, warn)
    world, world_why = world_size(path, expected_ranks)
    if spec is None:
        return infer_stages(rank_roots)
    sizes = {"dp": spec.dp, "tp": spec.tp, "pp": spec.pp}
    notes: List[str] = []
    for name in ("tp", "pp"):          # a model/pipeline size left out is 1
        sizes[name] = sizes[name] or 1
    if sizes["dp"] is None:            # data parallel left out: the world over the rest
        rest = sizes["tp"] * sizes["pp"]
        if not world or world % rest:
            raise UserError(f"{spec.source}: the world size ({world or 'unknown'}) is not a multiple of tp*pp = "
                            f"{rest}; give dp too")
        sizes["dp"] = world // rest
        notes.append(f"dp={sizes['dp']} from the world size {world} ({world_why})")
    layout = ParallelLayout(dp=sizes["dp"], tp=sizes["tp"], pp=sizes["pp"], source=spec.source, notes=notes)
    total = layout.dp * layout.tp * layout.pp
    if world and total != world:
        message = (f"{spec.source}: dp*tp*pp = {total}, but the job has {world} ranks ({world_why}); ranks past "
                   f"{total - 1} get no coordinates" if total < world else
                   f"{spec.source}: dp*tp*pp = {total}, but the job has {world} ranks ({world_why})")
        warn(message)
        notes.append(message)
    inferred = infer_stages(rank_roots)
    if inferred is not None and layout.pp > 1:
        disagree = [min(ranks) for ranks in inferred.stages.values()
                    if len({(layout.coords(r) or {}).get("pp") for r in ranks}) > 1]
        if disagree:
            message = (f"the layout splits ranks that run the same kernels (those of rank(s) "
                       f"{', '.join(map(str, disagree[:8]))}) over several pipeline stages: check --parallel")
            warn(message)
            notes.append(message)
    return layout


def label_ranks(spec: Optional[ParallelSpec], path: str, rank_status, rank_roots: Dict[Tuple[int, str], str],
                warn: Callable[[str], None]) -> Optional[Dict[str, object]]:
    """Give every rank row its coordinates; returns Report.parallel (None: the layout is unknown)."""
    roots: Dict[int, str] = {}
    for (rank, _graph), root in sorted(rank_roots.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        if root:
            roots.setdefault(rank, root)
    layout = resolve(spec, path, [row.rank for row in rank_status], roots, warn)
    if layout is None:
        return None
    for row in rank_status:
        row.coords = layout.coords(row.rank)
    return layout.to_dict()


def _kernels(rank_root: str) -> Tuple[frozenset, List[str]]:
    """The kernel names of a rank's saved execution orders, and their order (graph 0 first)."""
    folder = os.path.join(rank_root, "execution_order")
    names: List[str] = []
    try:
        files = sorted(n for n in os.listdir(folder) if n.startswith("ms_execution_order_graph_")
                       and n.endswith(".csv"))[:16]
    except OSError:
        return frozenset(), []
    for name in files:
        try:
            with safeio.open_regular(os.path.join(folder, name), "r", encoding="utf-8", errors="replace") as fh:
                for position, line in enumerate(safeio.bounded_lines(fh, 1 << 12)):
                    if position > 200_000:
                        break
                    line = line.strip()
                    if line and not line.startswith("NodeExecutionOrder"):
                        names.append(line)
        except OSError:
            continue
    return frozenset(names), names


def _p2p_key(order: List[str]) -> Tuple[int, int]:
    """Stage order from Send/Receive: a stage whose first point-to-point op is a Send is first; after it, the
    fewer kernels between a stage's first Receive and its first Send, the earlier (the last stage runs its whole
    forward, loss and backward in between)."""
    def first(kind: str) -> Optional[int]:
        return next((i for i, n in enumerate(order) if n.rsplit("/", 1)[-1].startswith(kind)), None)
    send, receive = first("Send"), first("Receive")
    if send is None and receive is None:
        return (2, 0)
    if receive is None or (send is not None and send < receive):
        return (0, 0)
    return (1, (send - receive) if send is not None else 1 << 30)


def infer_stages(rank_roots: Dict[int, str]) -> Optional[ParallelLayout]:
    """Pipeline stages from the graphs; None when the graphs are missing or every rank runs the same kernels."""
    groups: Dict[frozenset, List[int]] = {}
    orders: Dict[frozenset, List[str]] = {}
    for rank in sorted(rank_roots):
        kernels, order = _kernels(rank_roots[rank])
        if not kernels:
            return None
        groups.setdefault(kernels, []).append(rank)
        orders.setdefault(kernels, order)
    if len(groups) < 2:
        return None
    keys = sorted(groups, key=lambda k: (_p2p_key(orders[k]), groups[k][0]))
    p2p = [_p2p_key(orders[k]) for k in keys]
    notes = ["pipeline stages inferred from the saved execution orders: ranks with the same kernels form a stage, "
             "Send/Receive order the stages; dp and tp unknown (give --parallel)"]
    if len(set(p2p)) < len(p2p) or any(k[0] == 2 for k in p2p):
        notes.append("the Send/Receive order does not tell every stage apart: stage numbers follow the lowest rank "
                     "where it does not")
    stages = {i: groups[k] for i, k in enumerate(keys)}
    return ParallelLayout(dp=0, tp=0, pp=len(stages), source="inferred from the graphs", stages=stages, notes=notes)


__all__ = ["ParallelSpec", "ParallelLayout", "parse_spec", "add_parallel_option", "resolve", "infer_stages",
           "world_size", "label_ranks", "ORDER"]
