"""Real MindSpore CPU runs under `msoverflow watch` (tests/real/test_watch_real.py, docs/watch.md): the cases of
tests/support/watch_cases/train_case.py, each watched live through msoverflow.watcher.session.watch. Cached apart
under `.fixture-cache/watch/<key>/<case>/`, the key hashing the case script, this file, msoverflow/watcher/*.py (the
live report is made by the detectors and the root cause as the run goes) and the MindSpore version.

Each case directory holds `report.json` (the live report), `warnings.txt` (the lines printed live, in order),
`out/` (the watch's own directory: stats/, the event log, a dump of the non-finite step) and `ok` when whole.

    python -m tests.support.gen_watch_runs           # generate (or reuse) every case
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tests.support import gen_real_dumps as base

CASE_SCRIPT = base.REPO / "tests" / "support" / "watch_cases" / "train_case.py"
DEFAULT_CACHE_ROOT = base.REPO / ".fixture-cache" / "watch"


@dataclass(frozen=True)
class WatchCase:
    name: str
    argv: Tuple[str, ...]
    keep: int = 10
    on_event: str = "dump"
    full_every: Optional[int] = None


CASES: List[WatchCase] = [
    WatchCase("fp16_growth", ("--case", "fp16_growth", "--steps", "70")),
    WatchCase("data_spike", ("--case", "data_spike", "--steps", "40", "--bad-step", "30"), on_event="continue"),
    WatchCase("lr_divergence", ("--case", "lr_divergence", "--steps", "35", "--onset", "15"), on_event="continue"),
    WatchCase("healthy", ("--case", "healthy", "--steps", "80"), keep=5, on_event="continue"),
    WatchCase("noisy", ("--case", "noisy", "--steps", "400"), keep=5, on_event="continue"),
    WatchCase("attention", ("--case", "attention", "--steps", "48", "--onset", "20"), on_event="continue"),
    # the same run read in full every step: the climb of the logits from its first step, whatever this machine's
    # timings make of the default sampling (the long-gap test removes readings from it)
    WatchCase("attention_every_step", ("--case", "attention", "--steps", "48", "--onset", "20"), on_event="continue",
              full_every=1),
    # read in full every step (--full-every 1): the side weight's state falls over 40 steps in which the loss
    # shows nothing; under the default sampling (a full step every ~150 steps) those steps are not read, and the
    # report says so (optimizer_sampled)
    WatchCase("optimizer", ("--case", "optimizer", "--steps", "60", "--onset", "15", "--gap", "40"),
              on_event="continue", full_every=1),
    WatchCase("optimizer_sampled", ("--case", "optimizer", "--steps", "60", "--onset", "15", "--gap", "40"),
              on_event="continue"),
]


def cache_key() -> str:
    digest = hashlib.sha256()
    watch_dir = base.REPO / "msoverflow" / "watcher"       # (was msoverflow/watch: no file, so no key moved)
    for path in [Path(__file__).resolve(), CASE_SCRIPT, *sorted(watch_dir.glob("*.py")),
                 base.REPO / "msoverflow" / "readers" / "statistic_csv.py"]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(base.mindspore_identity().encode())
    return digest.hexdigest()[:16]


def run_one(case: WatchCase, case_dir: Path) -> None:
    import tempfile

    from msoverflow.render.watch import render_json
    from msoverflow.watcher.session import watch
    shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    said: List[str] = []
    # MindSpore refuses a dump path with a dot (.fixture-cache): the run goes into a temporary directory, copied
    # into the cache once whole (the report keeps the path it ran in)
    with tempfile.TemporaryDirectory(prefix="msoverflow_watch_") as tmp:
        outcome = watch([sys.executable, str(CASE_SCRIPT), *case.argv], Path(tmp) / "out", keep=case.keep,
                        on_event=case.on_event, full_every=case.full_every, say=said.append, device="cpu")
        shutil.copytree(Path(tmp) / "out", case_dir / "out", symlinks=True)
    (case_dir / "report.json").write_text(render_json(outcome.report))
    (case_dir / "warnings.txt").write_text("".join(line + "\n" for line in said))
    (case_dir / "ok").write_text("ok\n")


def ensure_runs(out_dir: Optional[Path] = None, progress=None) -> Dict[str, Path]:
    out_dir = Path(out_dir) if out_dir else DEFAULT_CACHE_ROOT / cache_key()
    found = {}
    with base._locked(out_dir):
        for case in CASES:
            case_dir = out_dir / case.name
            if not (case_dir / "ok").exists():
                if progress:
                    progress(f"watching {case.name}: {' '.join(case.argv)}")
                run_one(case, case_dir)
            found[case.name] = case_dir
    return found


def load(case_dir: Path) -> dict:
    return json.loads((case_dir / "report.json").read_text())


def main() -> int:
    if base.mindspore_version() is None:
        print("gen_watch_runs: MindSpore is not installed", file=sys.stderr)
        return 2
    for name, path in ensure_runs(progress=lambda msg: print(msg, file=sys.stderr, flush=True)).items():
        report = load(path)
        print(name, report["verdict"], [(e["step"], e["kind"], e["tensor"]) for e in report["events"]])
        if report["root_cause"]:
            print("   ", report["root_cause"]["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
