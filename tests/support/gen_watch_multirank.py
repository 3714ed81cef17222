"""Real 2-rank `msoverflow watch --on-event stop` runs (msrun --worker_num=2 --local_worker_num=2, MindSpore CPU,
data parallel: tests/support/watch_cases/train_dp.py, rank 1's batch corrupted at one step: its targets x10 in
`spike`, a NaN in `nan`), for tests/real/test_watch_real.py. Cached apart under
`.fixture-cache/watch-multirank/<key>/<case>/`, the key hashing this file, the case script, msoverflow/watcher/*.py
and the MindSpore version. Each case's directory holds `report.json`, `warnings.txt`, `out/` (the watch's
directory) and `ok` when whole.

    python -m tests.support.gen_watch_multirank
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from tests.support import gen_real_dumps as base

CASE_SCRIPT = base.REPO / "tests" / "support" / "watch_cases" / "train_dp.py"
DEFAULT_CACHE_ROOT = base.REPO / ".fixture-cache" / "watch-multirank"
ARGV = ("--steps", "1000", "--bad-step", "20")   # the stop comes about two files (1 s) after the event when
# the machine is idle; under a loaded 2-core CI run the watcher was seen 8 s late (stop asked at 207 of 200 steps):
# the run is long enough that the stop, not the end of the job, ends it
CASES = {"spike": ARGV, "nan": ARGV + ("--bad-value", "nan")}    # nan: rank 1's loss alone is NaN at the bad step


def cache_key() -> str:
    digest = hashlib.sha256()
    for path in [Path(__file__).resolve(), CASE_SCRIPT, *sorted((base.REPO / "msoverflow" / "watcher").glob("*.py")),
                 base.REPO / "msoverflow" / "readers" / "statistic_csv.py"]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(base.mindspore_identity().encode())
    return digest.hexdigest()[:16]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_runs(out_dir: Optional[Path] = None) -> Dict[str, Path]:
    """case -> its directory, each run once (cached)."""
    root = Path(out_dir) if out_dir else DEFAULT_CACHE_ROOT / cache_key()
    found = {}
    for case, argv in CASES.items():
        case_dir = root / case
        with base._locked(case_dir):
            if not (case_dir / "ok").exists():
                _run(case_dir, argv)
        found[case] = case_dir
    return found


def _run(case_dir: Path, argv) -> None:
    from msoverflow.render.watch import render_json
    from msoverflow.watcher.session import watch
    shutil.rmtree(case_dir / "out", ignore_errors=True)      # a run cut short before `ok`
    said: List[str] = []
    bin_dir = os.path.dirname(sys.executable)      # msrun starts workers with the first `python` on PATH
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = bin_dir + os.pathsep + old_path
    try:
        with tempfile.TemporaryDirectory(prefix="msoverflow_watch_mr_") as tmp:
            command = [os.path.join(bin_dir, "msrun"), "--worker_num=2", "--local_worker_num=2",
                       f"--master_port={_free_port()}", "--join=True", f"--log_dir={tmp}/logs",
                       "python", str(CASE_SCRIPT), *argv]
            outcome = watch(command, Path(tmp) / "out", keep=10, on_event="stop", say=said.append, device="cpu")
            shutil.copytree(Path(tmp) / "out", case_dir / "out", symlinks=True)
    finally:
        os.environ["PATH"] = old_path
    (case_dir / "report.json").write_text(render_json(outcome.report))
    (case_dir / "warnings.txt").write_text("".join(line + "\n" for line in said))
    (case_dir / "ok").write_text("ok\n")


if __name__ == "__main__":
    print(ensure_runs())
