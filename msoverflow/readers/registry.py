"""One reader per format, behind one registry: what a leaf directory's files are, read into one DirContent.

A reader module declares a `READER = Reader(...)` (readers/reader.py): what it recognises (the file-name kinds the one grammar in
msoverflow/names.py gives, exact file names such as `statistic.csv`, or whole directories of a layout such as
msprobe's `dump.json` steps) and a `read(content, files)` that adds its events/records to the directory's
DirContent. A new format is one module and one line in READER_MODULES. Readers never judge values.

npy files arrive as columns (names.parse_many: many names parsed at once) and stay columns: the walk checks
them vectorised and makes objects only of the op runs that need a closer look (msoverflow/walk.py). A
statistic.csv arrives as a StatTable (numpy columns) for the same reason.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from .. import names
from ..model import OverflowRecord, Status, TensorEvent
from .reader import Reader

if TYPE_CHECKING:
    from ..layout import DumpDir
    from .statistic_csv import StatTable

Warn = Callable[[str], None]

# The registry: one line per format (modules of msoverflow.readers).
READER_MODULES = ("statistic_csv", "npy", "dumpdata_bin", "raw", "opdebug", "msprobe")


@dataclass
class DirContent:
    """What the readers made of one leaf directory (a layout.DumpDir)."""
    d: DumpDir
    warn: Warn
    events: List[TensorEvent] = field(default_factory=list)       # tensors as objects
    records: List[OverflowRecord] = field(default_factory=list)   # hardware overflow records (Opdebug)
    npy_files: List[str] = field(default_factory=list)            # npy file names (row i of `npy`)
    npy: Optional[names.NpyNames] = None                          # their names as columns (mapping applied)
    table: Optional[StatTable] = None                                      # statistic.csv as a StatTable
    table_covers_npy: bool = False      # the table has a row for every npy file: its rows are the events
    nodes: list = field(default_factory=list)                     # msprobe: the ops' graph nodes
    files: int = 0                                                # dump files understood
    unknown: List[str] = field(default_factory=list)              # dump-looking files whose names are not known
    # files a reader could not read, path -> Status.UNREADABLE | TRUNCATED (walk.unread_of: the one rule of "read")
    unread: Dict[str, Status] = field(default_factory=dict)
    refused: List[str] = field(default_factory=list)              # "path: why" of refused statistic files

    def path(self, name: str) -> str:
        return os.path.join(self.d.path, name)

    def not_read(self, path: str, status: Status = Status.UNREADABLE, why: str = "") -> None:
        """A dump file whose tensors could not be read, whatever the reason (corrupt, cut short, empty, a shortened
        name no mapping.csv row resolves): it could hold the origin, so no verdict is clean while it is left."""
        if why:
            self.warn(why)
        if status is Status.TRUNCATED or path not in self.unread:
            self.unread[path] = status


_READERS: Optional[List[Reader]] = None


def readers() -> List[Reader]:
    global _READERS
    if _READERS is None:
        _READERS = [importlib.import_module(f"{__package__}.{m}").READER for m in READER_MODULES]
    return _READERS


def read_dir(d, warn: Warn) -> DirContent:
    """Every file of one leaf directory (a layout.DumpDir: its entries as listed once, its mapping.csv read once)
    through the reader that recognises it. A name that looks like a dump file (names.is_dump_file) and that no
    reader takes is reported as not understood."""
    content = DirContent(d, warn)
    for path in d.unread_paths():     # what the listing could not open (told where it was listed)
        content.not_read(path)
    for reader in readers():
        if d.layout in reader.layouts:
            reader.read(content, [])
            return content
    mapping = d.mapping        # names over 255 characters were replaced by random ones; mapping.csv gives them back
    by_file_name = {n: r for r in readers() for n in r.file_names}
    by_kind = {k: r for r in readers() for k in r.kinds}
    ignored = tuple(p for r in readers() for p in r.ignores)
    batches: Dict[str, list] = {}
    npy_names: List[str] = []
    for name in d.entries:
        if names.SHORT_NAME.match(name) and name not in mapping:
            content.not_read(content.path(name), why=f"{content.path(name)}: a shortened file name (the dump writer's "
                             "for names over 255 characters) that mapping.csv does not list: its op is not known, "
                             "not read")
            continue
        if name in by_file_name:
            by_file_name[name].read(content, [name])
        elif name.startswith(ignored):
            continue
        elif name.endswith(".npy") and not name.startswith("Opdebug."):
            npy_names.append(name)
        else:
            parsed = names.parse(mapping.get(name, name))
            kind_reader = by_kind.get(parsed.kind) if parsed is not None else None
            if kind_reader is None:
                if names.is_dump_file(mapping.get(name, name)):
                    _unknown(content, name)
                elif names.training_file(name):
                    content.warn(f"{content.path(name)}: {names.training_file(name)}, not a dump file: skipped")
                continue
            batches.setdefault(kind_reader.name, []).append((name, parsed))
    for reader in readers():
        if reader.name in batches:
            reader.read(content, batches[reader.name])
    if content.table is not None:   # with binary files to join, rows give stats to their tensors instead
        content.table_covers_npy = content.table.size >= len(npy_names) and names.KIND_BIN not in {
            parsed.kind for batch in batches.values() for _name, parsed in batch}
    if npy_names:
        shown = [mapping.get(n, n) for n in npy_names] if mapping else npy_names
        columns = names.parse_many(shown)
        by_kind[names.KIND_NPY].read(content, [npy_names, columns])
    return content


def _unknown(content: DirContent, name: str) -> None:
    path = content.path(name)
    content.warn(f"{path}: file name not understood, skipped")
    content.unknown.append(path)
