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
     MindFormers YAML (`parallel_config: data_parallel, model_parallel, pipeline_stage`), an HCCL rank table, or
     MindSpore strategy checkpoint(s) (a file, or a folder of `*strategy*.ckpt|json`; pipeline stages only,
     msoverflow/strategy_checkpoint.py);
  2. a MindFormers YAML beside the dump (the dump directory or its parent);
  3. strategy checkpoints beside the dump (those folders and their `strategy/` subfolders, where MindFormers
     saves `ckpt_strategy_rank_N.ckpt`);
  4. nothing: pipeline stages are inferred from the saved execution orders (ranks whose graphs hold the same
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
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import safeio
from .errors import UserError
from .readers.exec_order import execution_order
from .strategy_checkpoint import (
    StrategyError,
    StrategyFacts,
    is_strategy_name,
    rank_stages,
    read_strategy,
    strategy_files,
)

MAX_SIZE = 1 << 16
_SPEC_KEYS = {"dp": "dp", "data_parallel": "dp", "tp": "tp", "mp": "tp", "model_parallel": "tp", "pp": "pp",
              "pipeline_stage": "pp", "pipeline_stages": "pp"}
_YAML_LIMIT = 256 << 10     # MindFormers configs are a few KiB; pure-Python ruamel.yaml loads tens of KiB a second
_MAX_FILES_LOOKED_AT = 200
_BESIDE_YAMLS_READ = 16          # YAMLs beside a dump read for a parallel_config (the first, by name)
_BESIDE_YAMLS_PARSED = 4         # of those, parsed (only those with a top-level parallel_config: key)
_BESIDE_YAML_LIMIT = 64 << 10    # bytes of a YAML found beside a dump (a named --parallel YAML: _YAML_LIMIT)
_PARALLEL_KEY = re.compile(r"^[\"']?parallel_config[\"']?[ \t]*:", re.M)   # a top-level key, block style
ORDER = "rank = pp * (dp_size * tp_size) + dp * tp_size + tp (MindSpore/MindFormers: pipeline-major, tp fastest)"


@dataclass
class ParallelSpec:
    """What the user (or a file) said; a size left None is filled from the world size."""
    dp: Optional[int] = None
    tp: Optional[int] = None
    pp: Optional[int] = None
    source: str = "--parallel"
    strategies: List[StrategyFacts] = field(default_factory=list)   # strategy checkpoints: stages, no dp/tp


@dataclass
class ParallelLayout:
    dp: int
    tp: int
    pp: int
    source: str
    stages: Dict[int, List[int]] = field(default_factory=dict)   # inferred: stage -> ranks (no dp/tp then)
    notes: List[str] = field(default_factory=list)
    declared: List[Tuple[int, int]] = field(default_factory=list)   # ranks the source declares: (first, last) runs
    per_stage: Optional[int] = None      # strategy checkpoints: devices of one stage (stage = rank // per_stage)
    _stage_of: Optional[Dict[int, int]] = field(default=None, repr=False, compare=False)

    @property
    def inferred(self) -> bool:
        return bool(self.stages)

    def coords(self, rank: int) -> Optional[Dict[str, int]]:
        """{"pp", "dp", "tp"} (stages only: {"pp"}), in the order the rank number is built from them."""
        if self.inferred:
            if self._stage_of is None:
                self._stage_of = {r: s for s, ranks in self.stages.items() for r in ranks}
            stage = self._stage_of.get(rank)
            if stage is None and self.per_stage and any(first <= rank <= last for first, last in self.declared):
                stage = rank // self.per_stage
            return None if stage is None else {"pp": stage}
        if rank < 0 or rank >= self.dp * self.tp * self.pp:
            return None
        per_stage = self.dp * self.tp
        return {"pp": rank // per_stage, "dp": (rank % per_stage) // self.tp, "tp": rank % self.tp}

    def to_dict(self) -> Dict[str, object]:
        if self.inferred:
            return {"pp": self.pp, "source": self.source, "stages": {str(k): v for k, v in self.stages.items()},
                    "notes": self.notes}
        return {"pp": self.pp, "dp": self.dp, "tp": self.tp, "source": self.source, "order": ORDER,
                "notes": self.notes}


# ---- the option ---------------------------------------------------------------------------------------------

def parse_spec(text: str) -> ParallelSpec:
    """`dp=4,tp=2,pp=2` (also mp= for tp, any subset, any order) or a file holding the layout."""
    text = text.strip()
    if "=" not in text:
        if text and os.path.lexists(text):
            return spec_from_file(text)
        files = "a MindFormers YAML, an HCCL rank table or MindSpore strategy checkpoint(s)"
        if os.sep in text or text.lower().endswith((".yaml", ".yml", ".json", ".ckpt")):
            raise UserError(f"{text}: no such file (a layout is sizes like dp=4,tp=2,pp=2, or {files})")
        raise UserError(f"--parallel {text!r}: expected sizes like dp=4,tp=2,pp=2, or {files} (no file of that "
                        "name)")
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
                             "over the others), or a MindFormers YAML (parallel_config) / HCCL rank table / "
                             "MindSpore strategy checkpoint file or folder (pipeline stages only); rank "
                             "rows then carry their coordinates (default: a MindFormers YAML beside the dump, "
                             "else strategy checkpoints beside it, else pipeline stages inferred from the saved "
                             "execution orders). Rank order: pipeline-major, tp fastest, as MindSpore numbers ranks")


# ---- files --------------------------------------------------------------------------------------------------

def spec_from_file(path: str) -> ParallelSpec:
    lower = path.lower()
    if os.path.isdir(path):
        files = strategy_files(path)
        if not files:
            raise UserError(f"{path}: a folder, but no strategy checkpoint (*strategy*.ckpt or .json) in it")
        return _read_strategies(files, path)
    if lower.endswith((".yaml", ".yml")):
        spec = _yaml_spec(path)
        if spec is None:
            raise UserError(f"{path}: no parallel_config (data_parallel, model_parallel, pipeline_stage) in it")
        return spec
    if lower.endswith(".ckpt"):
        return _read_strategies([path], path)
    if lower.endswith(".json"):
        count = rank_table_size(path)
        if count is not None:
            return ParallelSpec(dp=count, tp=1, pp=1, source=f"rank table {os.path.basename(path)} ({count} "
                                                              "devices, data parallel)")
        try:
            return ParallelSpec(source=f"strategy checkpoint {os.path.basename(path)}",
                                strategies=[read_strategy(path)])
        except (StrategyError, OSError) as exc:
            raise UserError(f"{path}: neither an HCCL rank table (server_list[].device[].rank_id) nor a readable "
                            f"strategy checkpoint ({getattr(exc, 'strerror', None) or exc})") from None
    raise UserError(f"{path}: --parallel reads a MindFormers YAML (.yaml), an HCCL rank table (.json) or MindSpore "
                    "strategy checkpoint(s) (.ckpt, .json, or their folder)")


def _strategy_spec(files: List[str], where: str, fail: bool, warn=None) -> Optional[ParallelSpec]:
    """A spec from strategy checkpoints; an unreadable one is a usage error when named (fail), else a warning."""
    facts: List[StrategyFacts] = []
    refused: List[str] = []
    for path in files:
        try:
            facts.append(read_strategy(path))
        except (StrategyError, OSError) as exc:
            reason = f"{path}: not a readable MindSpore strategy checkpoint ({getattr(exc, 'strerror', None) or exc})"
            if fail:
                raise UserError(reason) from exc
            refused.append(reason)
    if refused and warn is not None:
        warn(refused[0] + (f" (and {len(refused) - 1} more strategy files)" if len(refused) > 1 else ""))
    if not facts:
        return None
    name = os.path.basename(files[0]) if len(files) == 1 else f"{len(facts)} files in {where}"
    return ParallelSpec(source=f"strategy checkpoint {name}", strategies=facts)


def _read_strategies(files: List[str], where: str) -> ParallelSpec:
    spec = _strategy_spec(files, where, fail=True)
    assert spec is not None         # fail=True: a file that cannot be read raised, so every file gave facts
    return spec


def _yaml_text(path: str, limit: int = _YAML_LIMIT, key=re.compile("parallel_config")) -> Optional[str]:
    """A YAML's text when it names `parallel_config` (`key`: where; None: it does not)."""
    try:
        text = safeio.read_text(path, limit, errors="replace")
    except safeio.TooLarge:
        raise UserError(f"{path}: larger than {limit >> 10} KiB, not a MindFormers YAML (they are a few KiB)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return text if key.search(text) else None


def _yaml_spec(path: str, text: Optional[str] = None) -> Optional[ParallelSpec]:
    text = _yaml_text(path) if text is None else text
    if text is None:
        return None
    try:       # nesting and alias expansion bounded before anything is built (an alias bomb is refused)
        doc = safeio.loads_yaml(text)
    except ValueError as exc:
        raise UserError(f"{path}: not a readable YAML ({exc})") from exc
    config = doc.get("parallel_config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        return None
    sizes: Dict[str, int] = {}
    for key, name in (("data_parallel", "dp"), ("model_parallel", "tp"), ("pipeline_stage", "pp")):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise UserError(f"{path}: parallel_config.{key} is {safeio.brief(value)}, not a size from 1 to "
                            f"{MAX_SIZE}")
        sizes[name] = value
    return ParallelSpec(source=f"MindFormers YAML {os.path.basename(path)} (parallel_config)", dp=sizes.get("dp"),
                        tp=sizes.get("tp"), pp=sizes.get("pp"))


def rank_table_size(path: str) -> Optional[int]:
    from .ranks import rank_table_ranks
    return len(rank_table_ranks(path)) or None


def _beside(path: str, root_files: Optional[Sequence[str]] = None) -> List[str]:
    """Regular files in the dump directory and its parent (where YAMLs, rank tables and msrun logs sit).
    root_files: the dump directory's own, as the dump's one listing found them (layout.Dump.root_files)."""
    found: List[str] = []
    here = os.path.abspath(path)
    if root_files is not None:
        found = [os.path.join(here, name) for name in sorted(root_files)[:_MAX_FILES_LOOKED_AT]]
    for folder in (here, os.path.dirname(here))[1 if root_files is not None else 0:]:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)[:_MAX_FILES_LOOKED_AT]
        except OSError:
            continue
        found += [e.path for e in entries if e.is_file(follow_symlinks=False)]
    return found


_DUMPED = "the dump's ranks"
_WORKER_LOG = re.compile(r"^worker_([0-9]{1,6})\.log$")
_RANK_TABLE = re.compile(r"(rank_table|hccl).*\.json$", re.IGNORECASE)


def world_size(path: str, expected_ranks: Sequence[int], beside: Optional[List[str]] = None) -> Tuple[int, str]:
    """The number of ranks in the job, and what says so. beside: _beside(path), when already listed."""
    size, why = (max(expected_ranks) + 1, _DUMPED) if expected_ranks else (0, "")
    files = _beside(path) if beside is None else beside
    workers = {int(m.group(1)) for f in files for m in [_WORKER_LOG.match(os.path.basename(f))] if m}
    if workers and max(workers) + 1 > size:
        size, why = max(workers) + 1, f"msrun's worker logs ({len(workers)} workers)"
    for f in files:
        if _RANK_TABLE.search(os.path.basename(f)):
            count = rank_table_size(f)
            if count and count > size:
                size, why = count, f"the rank table {os.path.basename(f)}"
    return size, why


def _strategy_beside(path: str, warn, beside: Optional[List[str]] = None) -> Optional[ParallelSpec]:
    """Strategy checkpoints in the dump directory, its parent (as _beside listed them), and their `strategy/`
    folders."""
    here = os.path.abspath(path)
    beside = _beside(path) if beside is None else beside
    for folder in (here, os.path.dirname(here)):
        listed = sorted(f for f in beside if os.path.dirname(f) == folder and is_strategy_name(os.path.basename(f)))
        for place, files in ((folder, listed), (os.path.join(folder, "strategy"), None)):
            files = strategy_files(place) if files is None else files
            if files:
                return _strategy_spec(files, place, fail=False, warn=warn)
    return None


def _yaml_beside(path: str, warn, beside: Optional[List[str]] = None) -> Optional[ParallelSpec]:
    """A MindFormers YAML found without --parallel: among the files _beside() lists (the dump directory and its
    parent, by name), the first _BESIDE_YAMLS_READ named *.yaml/*.yml are read (each at most _BESIDE_YAML_LIMIT),
    and only those with a top-level `parallel_config:` key are parsed, at most _BESIDE_YAMLS_PARSED of them: an
    unrelated YAML costs one bounded read, a hostile one a bounded parse (docs/analyze.md)."""
    read = parsed = 0
    for f in _beside(path) if beside is None else beside:
        if not f.lower().endswith((".yaml", ".yml")):
            continue
        if read == _BESIDE_YAMLS_READ or parsed == _BESIDE_YAMLS_PARSED:
            warn(f"{os.path.dirname(f)}: more YAML files than the {_BESIDE_YAMLS_READ} looked at for a parallel "
                 "layout; name the one to use with --parallel")
            return None
        read += 1
        try:
            text = _yaml_text(f, _BESIDE_YAML_LIMIT, _PARALLEL_KEY)
            if text is None:
                continue
            parsed += 1
            spec = _yaml_spec(f, text)
        except UserError as exc:
            warn(f"{exc}; not used (name a layout with --parallel)")
            continue
        if spec is not None:
            return spec
    return None


# ---- the layout ---------------------------------------------------------------------------------------------

def resolve(spec: Optional[ParallelSpec], path: str, expected_ranks: Sequence[int], rank_roots: Dict[int, str],
            warn: Callable[[str], None], root_files: Optional[Sequence[str]] = None) -> Optional[ParallelLayout]:
    """The layout to label ranks with (None: unknown). rank_roots: rank -> its rank_N directory. A layout whose
    pipeline stages the saved execution orders contradict is not used (a warning says why); the stages the
    graphs show, if any, are used instead."""
    named = spec is not None           # the user's --parallel: what does not fit is a usage error
    beside = _beside(path, root_files)     # the dump directory (as the dump's listing has it) and its parent, once
    spec = spec or _yaml_beside(path, warn, beside) or _strategy_beside(path, warn, beside)
    world, world_why = world_size(path, expected_ranks, beside)
    groups = _graph_kernels(rank_roots, warn)
    if spec is None:
        return _inferred(groups, rank_roots)
    if spec.strategies:
        layout = _strategy_layout(spec, world, world_why, sorted(rank_roots), warn)
    else:
        try:
            layout = _sizes_layout(spec, world, world_why, warn)
        except UserError as exc:       # a file found beside the dump: not used, said
            if named:
                raise
            warn(f"{exc}; not used")
            layout = None
    if layout is None:
        return _inferred(groups, rank_roots)
    refused = _contradicted(layout, groups, rank_roots)
    if refused is None:
        return layout
    warn(refused)
    inferred = _inferred(groups, rank_roots)
    if inferred is not None:
        inferred.notes.insert(0, refused)
    return inferred


def _sizes_layout(spec: ParallelSpec, world: int, world_why: str, warn) -> ParallelLayout:
    notes: List[str] = []
    tp, pp = spec.tp or 1, spec.pp or 1     # a model/pipeline size left out is 1
    dp = spec.dp
    if dp is None:                     # data parallel left out: the world over the rest
        rest = tp * pp
        if not world or world % rest:
            raise UserError(f"{spec.source}: the world size ({world or 'unknown'}) is not a multiple of tp*pp = "
                            f"{rest}; give dp too")
        dp = world // rest
        notes.append(f"dp={dp} from the world size {world} ({world_why})")
    total = dp * tp * pp
    layout = ParallelLayout(dp=dp, tp=tp, pp=pp, source=spec.source, notes=notes, declared=[(0, total - 1)])
    # Ranks past dp*tp*pp get no coordinates; ranks it declares beyond the dump are listed as not dumped, and
    # only a count from outside the dump (msrun's logs, a rank table) that disagrees is a warning.
    if world and (total < world or (total > world and world_why != _DUMPED)):
        message = (f"{spec.source}: dp*tp*pp = {total}, but the job has {world} ranks ({world_why})"
                   + (f"; ranks past {total - 1} get no coordinates" if total < world else ""))
        warn(message)
        notes.append(message)
    return layout


def _contradicted(layout: ParallelLayout, graphs: Optional[Dict[frozenset, List[int]]],
                  rank_roots: Dict[int, str]) -> Optional[str]:
    """Why the saved execution orders contradict the layout's pipeline stages, or None. Ranks of different
    stages run different kernels (other layers, the Send/Receive between stages): a layout that puts ranks with
    the same kernels in different stages is wrong. When every dumped rank runs the same kernels it is data
    parallel, and the message says what spans them (a collective over the world group, or no Send/Receive)."""
    if layout.pp <= 1 or graphs is None:
        return None
    stage_of = {rank: (layout.coords(rank) or {}).get("pp") for rank in rank_roots}
    split = [ranks for ranks in graphs.values() if len({stage_of[r] for r in ranks if stage_of[r] is not None}) > 1]
    if not split:
        return None
    if len(graphs) == 1:
        ranks = split[0]
        kernels = next(iter(graphs))
        evidence = _spans_every_rank(rank_roots[ranks[0]], kernels)
        advice = ("the strategy of another job?" if layout.inferred else
                  "--parallel dp=..,tp=.. without pp gives the other coordinates")
        return (f"{layout.source}: not used: every dumped rank ({_span_text(ranks)}) runs the same {len(kernels)} "
                f"kernels{evidence}: data parallel, not {layout.pp} pipeline stages; no stages are claimed "
                f"({advice})")
    pairs = "; ".join(f"ranks {_span_text(ranks)} run the same kernels but are put in stages "
                      f"{', '.join(str(s) for s in sorted({s for s in (stage_of[r] for r in ranks) if s is not None}))}"
                      for ranks in split[:3])
    return (f"{layout.source}: not used: the saved execution orders contradict its pipeline stages ({pairs}); the "
            "stages the graphs show are used instead")


def _spans_every_rank(rank_root: str, kernels: frozenset) -> str:
    """' and AllReduce over mccl_world_group spans them all' (a saved graph shows it), ' and none sends to
    another' (no Send/Receive kernel), or ''."""
    from .readers.ir_graph import collective_groups
    world = next(((group, op) for group, op in collective_groups(rank_root).items()
                  if group.endswith("_world_group")), None)
    if world:
        return f" and {world[1]} over {world[0]} spans them all"
    if not any(_kernel_type(name).startswith(("Send", "Receive")) for name in kernels):
        return " and none sends to another (no Send/Receive kernel)"
    return ""


def _span_text(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks[-1] - ranks[0] + 1 == len(ranks):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def _strategy_layout(spec: ParallelSpec, world: int, world_why: str, dumped_ranks: List[int],
                     warn) -> Optional[ParallelLayout]:
    """Pipeline stages from strategy checkpoints: a file that names its rank and holds one stage's ops gives that
    rank's stage; otherwise MindSpore's own rule, stage = rank // (devices in a stage). The ranks the files
    declare: those they name, and devices per stage x the stages their ops are in."""
    facts = spec.strategies
    per_stage = max((f.stage_devices for f in facts if f.stage_devices), default=None)
    own = {rank: stage for rank, stage in rank_stages(facts).items() if 0 <= rank < MAX_SIZE}
    named = {f.rank for f in facts if f.rank is not None and 0 <= f.rank < MAX_SIZE}
    listed_stages = max((max(f.stages) + 1 for f in facts if f.stages), default=1)
    declared = _merge_spans([(r, r) for r in named] + ([(0, min(per_stage * listed_stages, MAX_SIZE) - 1)]
                                                        if per_stage else []))
    ranks = set(dumped_ranks) | set(own) | set(range(min(world, MAX_SIZE)))
    ranks.update(rank for first, last in declared for rank in range(first, last + 1))
    notes = [f"pipeline stages from {spec.source}: a rank's own file gives its stage, else stage = rank // "
             f"{per_stage or '?'} (the devices of one stage, from the parameter layouts' device matrix, as MindSpore "
             "computes it); a strategy checkpoint does not record dp and tp (give --parallel dp=..,tp=..,pp=..)"]
    if len({f.stage_devices for f in facts if f.stage_devices}) > 1 or any(len(f.device_counts) > 1 for f in facts):
        notes.append("the parameter layouts' device matrices differ in size; the largest is taken as one stage")
    stage_of: Dict[int, int] = {}
    for rank in sorted(ranks):
        if rank in own:
            stage_of[rank] = own[rank]
        elif per_stage:
            stage_of[rank] = rank // per_stage
    if not stage_of:
        warn(f"{spec.source}: names no rank and holds no parameter layout, so no rank's pipeline stage is known")
        return None
    wrong = [r for r, s in own.items() if per_stage and r // per_stage != s]
    if wrong:
        message = (f"{spec.source}: rank(s) {', '.join(map(str, sorted(wrong)[:8]))} hold the ops of another stage "
                   f"than rank // {per_stage}; each rank's own file is taken")
        warn(message)
        notes.append(message)
    if per_stage and world and world % per_stage:
        message = (f"{spec.source}: the world size {world} ({world_why}) is not a multiple of {per_stage} "
                   "devices per stage")
        warn(message)
        notes.append(message)
    stages: Dict[int, List[int]] = {}
    for rank, stage in sorted(stage_of.items()):
        stages.setdefault(stage, []).append(rank)
    stages = dict(sorted(stages.items()))
    pp = max(max(stages) + 1, listed_stages)
    return ParallelLayout(dp=0, tp=0, pp=pp, source=spec.source, stages=stages, notes=notes, declared=declared,
                          per_stage=per_stage)


def _merge_spans(spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    merged: List[Tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def label_ranks(spec: Optional[ParallelSpec], path: str, rank_status, rank_roots: Dict[Tuple[int, str], Optional[str]],
                warn: Callable[[str], None], selected=None) -> Optional[Dict[str, object]]:
    """Give every rank row its coordinates, and add a `not dumped` row for the ranks the layout declares that the
    dump does not hold (unless `selected` ranks were asked for); returns Report.parallel (None: unknown)."""
    roots: Dict[int, str] = {}
    for (rank, _graph), root in sorted(rank_roots.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        if root:
            roots.setdefault(rank, root)
    return apply_layout(resolve(spec, path, [row.rank for row in rank_status], roots, warn), rank_status, selected)


def apply_layout(layout: Optional[ParallelLayout], rank_status, selected=None) -> Optional[Dict[str, object]]:
    """label_ranks with the layout already resolved (the analysis resolves it once: rank_rows.rank_rows)."""
    if layout is None:
        return None
    for row in rank_status:
        row.coords = layout.coords(row.rank)
    parallel = layout.to_dict()
    if selected is None:
        missing = declared_not_dumped(layout, rank_status)
        if missing:
            rank_status.extend(missing)
            rank_status.sort(key=lambda row: row.rank)
            parallel["declared_not_dumped"] = [[row.rank, row.last_rank if row.last_rank is not None else row.rank]
                                               for row in missing]
    return parallel


def declared_not_dumped(layout: ParallelLayout, rank_status) -> list:
    """`not dumped` rows (one per run of ranks) for the ranks the layout declares and no row covers."""
    from .model import RANK_NOT_DUMPED, RankStatus
    covered = _merge_spans([(row.rank, row.last_rank if row.last_rank is not None else row.rank)
                            for row in rank_status])
    rows = []
    for first, last in layout.declared:
        for gap_first, gap_last in _gaps(first, last, covered):
            row = RankStatus(gap_first, RANK_NOT_DUMPED, note=f"declared by {layout.source}",
                             last_rank=gap_last if gap_last > gap_first else None)
            if gap_first == gap_last:
                row.coords = layout.coords(gap_first)
            rows.append(row)
    return rows


def _gaps(first: int, last: int, covered: List[Tuple[int, int]]) -> Iterator[Tuple[int, int]]:
    """The runs of [first, last] that no span in `covered` (sorted, merged) holds."""
    at = first
    for lo, hi in covered:
        if hi < at:
            continue
        if lo > last:
            break
        if lo > at:
            yield at, lo - 1
        at = max(at, hi + 1)
        if at > last:
            return
    if at <= last:
        yield at, last


def _graph_kernels(rank_roots: Dict[int, str], warn) -> Optional[Dict[frozenset, List[int]]]:
    """The ranks grouped by the kernels of their saved execution orders (every graph of the rank); None when
    a rank has none (nothing to compare). `warn` hears why an order could not be used."""
    groups: Dict[frozenset, List[int]] = {}
    for rank in sorted(rank_roots):
        kernels = frozenset(name for graph in _graph_ids(rank_roots[rank])
                            for name in execution_order(rank_roots[rank], graph, warn))
        if not kernels:
            return None
        groups.setdefault(kernels, []).append(rank)
    return groups or None


def _quiet(_message: str) -> None:
    """An order read again (already read, and its problems said, by _graph_kernels)."""


_ORDER_FILE = re.compile(r"^ms_execution_order_graph_([0-9]{1,9})\.csv$")


def _graph_ids(rank_root: str) -> List[str]:
    try:
        names = os.listdir(os.path.join(rank_root, "execution_order"))
    except OSError:
        return []
    return sorted((m.group(1) for m in map(_ORDER_FILE.match, names) if m), key=int)[:16]


def _kernel_type(name: str) -> str:
    """`Default_network-Net_Send-op3` (a file-style kernel name) -> `Send-op3`."""
    return name.rsplit("_", 1)[-1]


def _p2p_key(rank_root: str) -> Tuple[int, int]:
    """Stage order from Send/Receive: a stage whose first point-to-point op is a Send is first; after it, the
    fewer kernels between a stage's first Receive and its first Send, the earlier (the last stage runs its whole
    forward, loss and backward in between)."""
    order = [name for graph in _graph_ids(rank_root)
             for name, _ in sorted(execution_order(rank_root, graph, _quiet).items(), key=lambda item: item[1])]

    def first(kind: str) -> Optional[int]:
        return next((i for i, n in enumerate(order) if _kernel_type(n).startswith(kind)), None)
    send, receive = first("Send"), first("Receive")
    if send is None and receive is None:
        return (2, 0)
    if receive is None or (send is not None and send < receive):
        return (0, 0)
    return (1, (send - receive) if send is not None else 1 << 30)


def infer_stages(rank_roots: Dict[int, str], warn: Callable[[str], None] = _quiet) -> Optional[ParallelLayout]:
    """Pipeline stages from the graphs; None when the graphs are missing or every rank runs the same kernels."""
    return _inferred(_graph_kernels(rank_roots, warn), rank_roots)


def _inferred(groups: Optional[Dict[frozenset, List[int]]], rank_roots: Dict[int, str]) -> Optional[ParallelLayout]:
    if groups is None or len(groups) < 2:
        return None
    p2p = {kernels: _p2p_key(rank_roots[ranks[0]]) for kernels, ranks in groups.items()}
    keys = sorted(groups, key=lambda k: (p2p[k], groups[k][0]))
    notes = ["pipeline stages inferred from the saved execution orders: ranks with the same kernels form a stage, "
             "Send/Receive order the stages; dp and tp unknown (give --parallel)"]
    if len(set(p2p.values())) < len(p2p) or any(key[0] == 2 for key in p2p.values()):
        notes.append("the Send/Receive order does not tell every stage apart: stage numbers follow the lowest rank "
                     "where it does not")
    stages = {i: groups[k] for i, k in enumerate(keys)}
    return ParallelLayout(dp=0, tp=0, pp=len(stages), source="inferred from the graphs", stages=stages, notes=notes)


__all__ = ["ParallelSpec", "ParallelLayout", "parse_spec", "add_parallel_option", "resolve", "infer_stages",
           "world_size", "label_ranks", "apply_layout", "ORDER"]
