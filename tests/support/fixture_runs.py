"""What the real-run fixture generators share (gen_real_dumps.py, gen_msprobe_dumps.py, gen_hunt_runs.py,
gen_compare_pairs.py):
installed versions, msrun launching on CPU, and pruning a cache that several checkouts share.

Only the standard library: tests import the generators.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import List, Optional

SUPPORT = Path(__file__).resolve().parent
RUNNER = Path(__file__).resolve()   # how cases run (staged_sources): part of every generator's cache key
REPO = SUPPORT.parents[1]
# Checkouts that share one cache hold different keys at the same time: only keys unused this long are removed.
STALE_AFTER_S = 86400
# msoverflow.completeness.RECENT_SECONDS and a margin: files younger than that may be a job still writing
SETTLE_S = 10.5


def version(dist: str) -> Optional[str]:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def wait_until_settled(root: Path, names) -> None:
    """Wait until the newest of these runs' case.json (each written after its dump) is SETTLE_S old. The tests read
    finished dumps, as a user does who analyses after the job ended: a run made seconds ago would rightly be told
    'may still be being written'. Only a set generated in this session waits (at most SETTLE_S, once)."""
    newest = 0.0
    for name in names:
        try:
            newest = max(newest, (Path(root) / name / "case.json").stat().st_mtime)
        except OSError:
            continue
    left = newest + SETTLE_S - time.time()
    if left > 0:
        time.sleep(left)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def msrun_prefix(python: str, workers: int, log_dir: Path) -> List[str]:
    """`msrun` on this machine's CPU workers (MCCL collectives); msrun starts the script with `python` from PATH,
    so callers put `python`'s directory first on PATH."""
    return [str(Path(python).parent / "msrun"), f"--worker_num={workers}", f"--local_worker_num={workers}",
            f"--master_port={free_port()}", "--join=True", f"--log_dir={log_dir}"]


def worker_logs(log_dir: Path, tail: int = 20000) -> str:
    """The end of every msrun worker log, for run.log."""
    if not log_dir.is_dir():
        return ""
    return "".join(p.read_text(errors="replace")[-tail:] for p in sorted(log_dir.glob("worker_*.log")))


def prune_stale(cache_root: Path, current: Path) -> None:
    """Remove other keys' directories under cache_root that nobody has used for STALE_AFTER_S. A generator opens
    its key's .lock on every use; a key without one counts from its directory's time."""
    if not cache_root.exists():
        return
    for other in cache_root.iterdir():
        if other == current or not other.is_dir():
            continue
        lock = other / ".lock"
        try:
            last_used = (lock if lock.exists() else other).stat().st_mtime
        except OSError:
            continue
        if time.time() - last_used > STALE_AFTER_S:
            shutil.rmtree(other, ignore_errors=True)


def copy_dump(source, tmp_path, name: str = "dump") -> Path:
    """A writable copy of a fixture dump that keeps the files' times (copy2): a finished dump, not one being
    written. Tests edit copies, never the shared fixture."""
    import os
    import stat
    target = Path(tmp_path) / name
    shutil.copytree(source, target)
    for root, dirs, files in os.walk(target):
        for entry in dirs + files:
            path = os.path.join(root, entry)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)
    return target


def staged_sources(entry: Path, whole_package: bool = False) -> Path:
    """entry/src: a copy of tests/support/cases/ and of msoverflow's demo package (the whole package when
    whole_package), made once per cache entry. Cases run from this copy, so the paths that the saved graphs, stack
    traces and reports record name files inside the cache entry, which outlive the checkout that made them (one
    cache is shared by several checkouts, and a removed worktree must not break the others' tests)."""
    # resolved: a checkout's .fixture-cache may be a symlink into another checkout's, and the paths must not pass
    # through the checkout
    src = Path(entry).resolve() / ("src-package" if whole_package else "src")
    if (src / ".complete").exists():
        return src
    src.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".src-", dir=src.parent))
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(SUPPORT / "cases", staging / "cases", ignore=skip)
    if whole_package:
        shutil.copytree(REPO / "msoverflow", staging / "msoverflow", ignore=skip)
    else:   # what `-m msoverflow.demo.train` and `from msoverflow.demo.model import ...` import, nothing more
        (staging / "msoverflow").mkdir()
        for name in ("__init__.py", "version.py"):
            shutil.copy2(REPO / "msoverflow" / name, staging / "msoverflow" / name)
        shutil.copytree(REPO / "msoverflow" / "demo", staging / "msoverflow" / "demo", ignore=skip)
    (staging / ".complete").write_text(f"copied from {REPO}\n")
    try:
        os.rename(staging, src)
    except OSError:     # another generator staged it first
        shutil.rmtree(staging, ignore_errors=True)
    return src


def in_staged(arg: str, src: Path) -> str:
    """A command argument naming a file under tests/support/cases/, moved into the staged copy; others unchanged."""
    if not (arg.endswith(".py") and os.path.isabs(arg)):
        return arg
    try:
        return str(src / Path(arg).resolve().relative_to(SUPPORT))
    except ValueError:
        return arg
