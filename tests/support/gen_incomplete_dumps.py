"""Real MindSpore CPU dumps for the incomplete-dump tests (tests/real/test_incomplete_dumps.py) that the main set
(tests/support/gen_real_dumps.py) lacks: a clean run of three steps. Same runner and case.json as gen_real_dumps (this
module only adds cases), cached apart under `.fixture-cache/incomplete/<key>/`, the key hashing this file, the
demo model and the MindSpore version, so adding a case here never regenerates the main set.

    python -m tests.support.gen_incomplete_dumps           # generate (or reuse) every case
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import List, Optional

from tests.support import gen_real_dumps as base

DEFAULT_CACHE_ROOT = base.REPO / ".fixture-cache" / "incomplete"

CASES: List[base.Case] = [
    base.Case(
        name="normhead_fp32_clean_3steps",
        description="The demo TinyBaichuan with the NormHead computed in fp32, loss scale 64, three steps.",
        shows="A clean run of three steps (iterations 0, 1, 2): every step holds the same kernels' files; the tests "
              "cut its last step as a killed job leaves it.",
        argv=(*base.DEMO_TRAIN, "--steps", "3", "--head-dtype", "float32"),
        expected=base._expect("clean", layout={0: [0, 1, 2]}),
    ),
]


def cache_key() -> str:
    digest = hashlib.sha256()
    for path in [Path(__file__).resolve(), base.RUNNER, *sorted((base.REPO / "msoverflow" / "demo").glob("*.py"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"mindspore={base.mindspore_version()}".encode())
    return digest.hexdigest()[:16]


def ensure_cases(out_dir: Optional[Path] = None, progress=None) -> base.RealDumps:
    """Generate the cases unless a finished copy is in `out_dir` (default: the cache under this file's key)."""
    out_dir = Path(out_dir) if out_dir else DEFAULT_CACHE_ROOT / cache_key()
    records = {}
    with base._locked(out_dir):
        for case in CASES:
            record = base.read_case_json(out_dir / case.name)
            if not (record and record.get("ok")):
                if progress:
                    progress(f"running {case.name}: {' '.join(['python', *case.argv])}")
                record = base.run_case(case, out_dir)
            records[case.name] = record
    return base.RealDumps(out_dir, records)


def main() -> int:
    if base.mindspore_version() is None:
        print("gen_incomplete_dumps: MindSpore is not installed", file=sys.stderr)
        return 2
    dumps = ensure_cases(progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    for name, record in dumps.records.items():
        print(base._summary(name, record))
    return 1 if dumps.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
