"""The dump, discovered once: its leaf directories (what each one is: rank, graph, step, for every known layout),
the files each one holds, and the plan of (rank, step) units the walk reads.

O0/O1, CPU, GPU, 2.2 async : {path}/rank_{r}/{net}/{graph}/{iteration}/
2.2 async overflow files   : {path}/rank_{r}/debug_files/{iteration}/
O2 ACL dump (2.3-2.5)      : {path}/{step}/{time}/{device}/{model_name}/{model_id}/{iteration}/
GE dump                    : {path}/{time}/{device}/{model_name}/{model_id}/{iteration}/
msprobe kernel dump (O2 2.5+ through adump): {path}/rank_{r}/{timestamp}/step_{k}/ (+ {path}/acl_dump_{device}.json);
                             step_{k} is the iteration
msprobe framework dump     : {path}/[graph|pynative/]step{k}/rank{r}|proc{pid}/ with dump.json, stack.json,
                             construct.json, dump_tensor_data/ (read by readers/msprobe.py)
The path given may point at any level inside a dump; leaf directories are interpreted by their absolute path.

`Dump.open` is the only place that lists the tree: every directory once, each leaf directory's file names and its
mapping.csv kept on its DumpDir, so the readers, completeness and the rank table never list or walk it again.
The directory patterns and what a dump file is come from the one grammar (msoverflow/names.py).
"""
from __future__ import annotations

import bisect
import csv
import os
import stat
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import names, safeio
from .errors import UserError
from .model import IterationAlias
from .names import FRAMEWORK_RANK_DIR, FRAMEWORK_STEP_DIR, KERNEL_STEP_DIR, RANK_DIR, STEP_DIR, TIME_DIR

LAYOUT_MS = "mindspore"       # rank_{r}/{net}/{graph}/{iter}
LAYOUT_DEBUG = "debug_files"  # rank_{r}/debug_files/{iter}
LAYOUT_ACL = "acl"            # {step}/{time}/{device}/{model}/{model_id}/{iter}
LAYOUT_GE = "ge"              # {time}/{device}/{model}/{model_id}/{iter}
LAYOUT_MSPROBE_KERNEL = "msprobe-kernel"   # rank_{r}/{timestamp}/step_{k}
LAYOUT_MSPROBE = "msprobe"    # step{k}/rank{r}/dump.json
LAYOUT_UNKNOWN = "unknown"

RANK_SEARCH_DEPTH = 3         # rank_* directories are expected this many levels below the path at most
MAX_OTHER_FILES = 2000        # regular files that are no dump files, kept to name in a message
Warn = Callable[[str], None]


@dataclass(frozen=True)
class DumpDir(IterationAlias):
    """One leaf directory: what its path says it is, and the regular files it holds as listed once."""
    path: str
    layout: str
    rank: int
    graph: str
    step: int
    net: str = ""
    rank_root: Optional[str] = None   # rank_{r} directory: graphs/, execution_order/, .dump_metadata/
    entries: Tuple[str, ...] = ()     # names of its regular files, sorted (symlinks followed)
    mapping: Mapping[str, str] = field(default_factory=dict, compare=False)   # mapping.csv: short -> original name
    mtime: float = float("inf")       # the directory's own mtime: when its last file was created
    # names of entries that look like dump files but cannot be read as one (a FIFO, a socket, a directory or a
    # dangling link in a file's place): one rule with every other unread file (walk.unread_of)
    unreadable: Tuple[str, ...] = ()
    unlisted: str = ""                # why the directory itself could not be listed ("" when it was)

    def unread_paths(self) -> List[str]:
        """Every file of it known unreadable from the listing alone (the directory itself when unlisted)."""
        if self.unlisted:
            return [self.path]
        return [os.path.join(self.path, name) for name in self.unreadable]

    def original(self, name: str) -> str:
        """A file's name as the dump writer meant it (names over 255 characters are written as random ones)."""
        return self.mapping.get(name, name)

    def holds(self, prefix: str) -> bool:
        """Whether one of its files' names starts with `prefix` (the entries are sorted: a bisection)."""
        i = bisect.bisect_left(self.entries, prefix)
        return i < len(self.entries) and self.entries[i].startswith(prefix)


@dataclass
class Unit(IterationAlias):
    """The directories of one rank's step (several graphs may run in one step): what the walk reads at once."""
    rank: int
    step: int
    dirs: List[DumpDir]



@dataclass(frozen=True)
class RankDir:
    """A rank_{r} directory found below the path, whether or not it holds a tensor file."""
    path: str
    holds_files: bool       # any regular file below it (saved graphs and metadata count)


@dataclass
class Plan:
    """What the walk will read: the selected units in rank then step order, and facts of their listings."""
    units: List[Unit]
    ranks: Any = None       # the Selection (or any container) asked for; None: every rank
    steps: Any = None

    @property
    def dirs(self) -> List[DumpDir]:
        return [d for unit in self.units for d in unit.dirs]

    @property
    def files(self) -> int:
        """Entries of the planned directories (sizes the progress bar and the choice of a process pool)."""
        return sum(len(d.entries) for unit in self.units for d in unit.dirs)

    @property
    def flags(self) -> bool:
        """The dump holds hardware overflow records (Opdebug): every unit is judged by them."""
        return any(d.holds("Opdebug.") for unit in self.units for d in unit.dirs)


@dataclass
class Dump:
    """A dump as listed once by `open`, and what the stages ask of it, each worked out once: its leaf directories,
    its rank_* directories and the files at its root (the one listing); each rank's .dump_metadata (`metadata`,
    parsed on first need, once); the saved graphs (`graphs`, learnt as the walk goes); the tensor access every
    stage reads through (`access`); the steps read again after the walk (`step_reads`, one cache whoever asks:
    dataflow.StepReads); the parallel layout (`layout`, resolved once by ranks.rank_rows)."""
    path: str
    dirs: List[DumpDir]
    rank_dirs: Dict[int, RankDir] = field(default_factory=dict)   # rank_N at most RANK_SEARCH_DEPTH below path
    root_files: Tuple[str, ...] = ()        # regular files directly in `path` (acl_dump_*.json, rank tables)
    other_files: List[str] = field(default_factory=list)   # regular files that are no dump files (a few)
    unlisted: List[Tuple[str, str]] = field(default_factory=list)   # (directory, why) that could not be listed
    warn: Warn = field(default=lambda message: None, repr=False, compare=False)
    # set by the analysis that opened it (analysis.py): layout.py stays below the modules that read tensors
    graphs: Any = field(default=None, repr=False, compare=False)   # graphs.SavedGraphs
    access: Any = field(default=None, repr=False, compare=False)   # evaluate.TensorAccess
    step_reads: Any = field(default=None, repr=False, compare=False)   # dataflow.StepReads
    layout: Any = field(default=None, repr=False, compare=False)   # parallel_layout.ParallelLayout, once resolved
    layout_resolved: bool = field(default=False, repr=False, compare=False)
    _metadata: Dict[str, Dict[str, object]] = field(default_factory=dict, repr=False, compare=False)

    def metadata(self, rank_root: str) -> Dict[str, object]:
        """A rank's .dump_metadata (device, version, the dump config), parsed once whoever asks."""
        if rank_root not in self._metadata:
            self._metadata[rank_root] = read_dump_metadata(rank_root, self.warn)
        return self._metadata[rank_root]

    def settings(self, rank_roots) -> Dict[str, object]:
        """The first of these ranks' common_dump_settings that its metadata holds ({} when none does)."""
        for root in sorted({root for root in rank_roots if root}):
            config = self.metadata(root).get("dump_config")
            if isinstance(config, dict) and isinstance(config.get("common_dump_settings"), dict):
                return config["common_dump_settings"]
        return {}

    def unlisted_reason(self) -> str:
        """One line naming the directories that could not be listed ("" when every one was)."""
        if not self.unlisted:
            return ""
        path, why = self.unlisted[0]
        more = f" and {len(self.unlisted) - 1} more" if len(self.unlisted) > 1 else ""
        return f"{path}: cannot list directory ({why}){more}; it could hold the origin"

    @classmethod
    def open(cls, path: str, warn: Warn) -> "Dump":
        """List every directory under `path` once, in a stable order. Follows symlinks once (no loops)."""
        if not os.path.exists(path):
            raise UserError(f"{path}: no such file or directory")
        if not os.path.isdir(path):
            raise UserError(f"{path}: not a directory (give the dump directory, or any directory inside it)")
        if not os.access(path, os.R_OK | os.X_OK):
            raise UserError(f"{path}: directory is not readable")
        dump = _Lister(os.path.abspath(path), warn).run()
        dump.warn = warn
        return dump

    def plan(self, ranks=None, steps=None) -> Plan:
        """One unit per (rank, step), in rank then step order. ranks/steps: a selection (anything with `in`),
        never expanded."""
        units: Dict[Tuple[int, int], Unit] = {}
        for d in self.dirs:
            if ranks is not None and d.rank not in ranks:
                continue
            if steps is not None and d.step not in steps:
                continue
            units.setdefault((d.rank, d.step), Unit(d.rank, d.step, [])).dirs.append(d)
        return Plan([units[k] for k in sorted(units)], ranks, steps)


class _Lister:
    """One depth-first listing of the tree (the only one)."""

    def __init__(self, root: str, warn: Warn):
        self.root, self.warn = root, warn
        self.dirs: List[DumpDir] = []
        self.rank_dirs: Dict[int, str] = {}
        self.with_files: List[str] = []      # directories that hold a regular file (or a metadata folder)
        self.others: List[str] = []
        self.root_files: Tuple[str, ...] = ()
        self.unlisted: List[Tuple[str, str]] = []

    def run(self) -> Dump:
        seen = set()
        stack = [(self.root, 0)]
        while stack:
            current, depth = stack.pop()
            real = os.path.realpath(current)
            if real in seen:
                self.warn(f"{current}: directory visited twice (symlink loop or duplicate link), skipped")
                continue
            seen.add(real)
            rank = RANK_DIR.match(os.path.basename(current))
            if rank and depth <= RANK_SEARCH_DEPTH:
                self.rank_dirs.setdefault(int(rank.group(1)), current)
            stack.extend((sub, depth + 1) for sub in sorted(self._list(current, depth), reverse=True))
        self.dirs.sort(key=lambda d: (d.rank, d.step, d.graph, d.path))
        rank_of = {path: rank for rank, path in self.rank_dirs.items()}
        holding = set()
        for path in self.with_files:      # a rank_N directory holds files when one of its folders does
            while path not in holding and len(path) >= len(self.root):
                if path in rank_of:
                    holding.add(path)
                    break
                parent = os.path.dirname(path)
                path = parent if parent != path else ""
        rank_dirs = {rank: RankDir(path, path in holding) for rank, path in self.rank_dirs.items()}
        return Dump(self.root, self.dirs, rank_dirs, self.root_files, self.others, self.unlisted)

    def _list(self, current: str, depth: int) -> List[str]:
        """List one directory; keep it as a DumpDir when it holds dump files; its subdirectories to visit."""
        try:
            entries = list(os.scandir(current))
        except OSError as exc:
            # named, never taken for "no dump here": a step directory that cannot be listed is a step whose files
            # cannot be read; any other directory is one that could hold the origin
            why = exc.strerror or str(exc)
            self.warn(f"{current}: cannot list directory ({why})")
            self.unlisted.append((current, why))
            if interpret(current).layout != LAYOUT_UNKNOWN:
                self.dirs.append(replace(interpret(current), unlisted=why))
            return []
        subdirs, files, unreadable = [], [], []
        for entry in entries:
            try:
                if entry.is_file():         # regular files only (symlinks followed): never a FIFO or device
                    files.append(entry.name)
                elif not entry.is_dir():
                    self.warn(f"{entry.path}: {_not_regular(entry.path)}, not a regular file: skipped")
                    if names.is_dump_file(entry.name):
                        unreadable.append(entry.name)
                elif entry.name in names.METADATA_DIRS:
                    self.with_files.append(current)    # a rank that wrote only its graphs is not empty
                elif entry.name not in names.READER_DIRS:
                    subdirs.append(entry.path)
                    if names.is_dump_file(entry.name) and names.understood(entry.name):
                        self.warn(f"{entry.path}: a directory where a dump file is expected: cannot be read")
                        unreadable.append(entry.name)
            except OSError:
                self.warn(f"{entry.path}: cannot stat, skipped")
                if names.is_dump_file(entry.name):
                    unreadable.append(entry.name)
        if files:
            self.with_files.append(current)
            files.sort()
        if depth == 0:
            self.root_files = tuple(files)
        if any(map(names.is_dump_file, files)) or unreadable:
            self.dirs.append(self._leaf(current, tuple(files), tuple(sorted(unreadable))))
        elif not entries and interpret(current).layout != LAYOUT_UNKNOWN:
            # a step directory left empty (its files removed, or the job died before writing): a step that holds
            # nothing, counted against the others, never left out of the listing
            self.dirs.append(self._leaf(current, ()))
        elif len(self.others) < MAX_OTHER_FILES:
            self.others += [os.path.join(current, name) for name in files[:MAX_OTHER_FILES - len(self.others)]]
        return subdirs

    def _leaf(self, path: str, entries: Tuple[str, ...], unreadable: Tuple[str, ...] = ()) -> DumpDir:
        mapping = read_mapping(os.path.join(path, names.MAPPING_FILE), self.warn) \
            if names.MAPPING_FILE in entries else {}
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = float("inf")
        return replace(interpret(path), entries=entries, mapping=mapping, mtime=mtime, unreadable=unreadable)


def read_dump_metadata(rank_root: str, warn) -> Dict[str, object]:
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


def read_mapping(path: str, warn) -> Dict[str, str]:
    """mapping.csv: `{random name},{original name}` rows (names over 255 chars are replaced by a random one)."""
    mapping: Dict[str, str] = {}
    try:
        with safeio.open_regular(path, "r", newline="", encoding="utf-8", errors="replace") as fh:
            if os.fstat(fh.fileno()).st_size > safeio.MAX_READ_BYTES:
                raise safeio.TooLarge(0, f"over the {safeio.MAX_READ_BYTES}-byte limit", path)
            for lineno, row in enumerate(csv.reader(fh), 1):
                if len(row) < 2 or not row[0].strip():
                    if row:
                        warn(f"{path}:{lineno}: mapping row without an original name, ignored")
                    continue
                mapping[os.path.basename(row[0].strip())] = row[1].strip()
    except OSError as exc:
        warn(f"{path}: cannot read mapping file ({exc.strerror})")
    except csv.Error as exc:    # a NUL byte, a field over the csv module's limit: keep the rows read so far
        warn(f"{path}: mapping file is not readable CSV ({exc}); {len(mapping)} row(s) used")
    return mapping


def _not_regular(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a dangling link"
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "special file"


def interpret(path: str) -> DumpDir:
    """What a directory holding dump files is, from its absolute path."""
    parts = os.path.abspath(path).split(os.sep)

    def at(i):
        return parts[i] if len(parts) >= -i else ""

    last = at(-1)
    if STEP_DIR.match(last):
        step = int(last)
        rank = RANK_DIR.match(at(-3))
        if at(-2) == "debug_files" and rank:
            return DumpDir(path, LAYOUT_DEBUG, int(rank.group(1)), "debug", step, rank_root=os.sep.join(parts[:-2]))
        rank = RANK_DIR.match(at(-4))
        if STEP_DIR.match(at(-2)) and rank:
            return DumpDir(path, LAYOUT_MS, int(rank.group(1)), at(-2), step, net=at(-3),
                           rank_root=os.sep.join(parts[:-3]))
        if STEP_DIR.match(at(-2)) and STEP_DIR.match(at(-4)) and TIME_DIR.match(at(-5)):
            layout = LAYOUT_ACL if STEP_DIR.match(at(-6)) else LAYOUT_GE
            return DumpDir(path, layout, int(at(-4)), at(-2), step, net=at(-3))
    kernel_step = KERNEL_STEP_DIR.match(last)
    rank = RANK_DIR.match(at(-3))
    if kernel_step and rank:
        return DumpDir(path, LAYOUT_MSPROBE_KERNEL, int(rank.group(1)), "0", int(kernel_step.group(1)), net=at(-2))
    framework_rank = FRAMEWORK_RANK_DIR.match(last)
    framework_step = FRAMEWORK_STEP_DIR.match(at(-2))
    if framework_rank and framework_step:
        rank_number = int(framework_rank.group(1)) if framework_rank.group(1) is not None else 0
        graph = at(-3) if at(-3) in ("graph", "pynative") else "pynative"
        return DumpDir(path, LAYOUT_MSPROBE, rank_number, graph, int(framework_step.group(1)), net=last)
    rank_number = next((int(m.group(1)) for m in map(RANK_DIR.match, reversed(parts)) if m), 0)
    return DumpDir(path, LAYOUT_UNKNOWN, rank_number, "?", int(last) if STEP_DIR.match(last) else 0)

