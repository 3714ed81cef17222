"""Real MindSpore CPU dumps for the hardening tests (tests/real/test_harden_real.py) that the main set
(tests/support/gen_real_dumps.py) lacks. Same runner and case.json as gen_real_dumps (this module only adds cases),
cached apart under `.fixture-cache/harden/<key>/`, the key hashing this file, its case scripts
(tests/support/cases/harden/), the runner and the MindSpore version, so adding a case here never regenerates the
main set.

    python -m tests.support.gen_harden_dumps           # generate (or reuse) every case
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import List, Optional

from tests.support import gen_real_dumps as base

CASES_DIR = Path(__file__).resolve().parent / "cases" / "harden"
DEFAULT_CACHE_ROOT = base.REPO / ".fixture-cache" / "harden"

CASES: List[base.Case] = [
    base.Case(
        name="branch_head_sqrt",
        description="fp32 Dense head, Sqrt inside a multi-line `if self.compute_dtype is not None:` block, called "
                    "as `self.head(x)`; one step in graph mode.",
        shows="Sqrt of negative variances makes NaN in the forward pass; its source is the innermost single-line "
              "frame `norm = self.sqrt(variance)`, not the enclosing `if` block, in the Cell `head`.",
        argv=(str(CASES_DIR / "branch_head.py"),),
        expected=base._expect("anomaly", op_type="Sqrt", iteration=0, kind="invalid", forward_op="Sqrt", cell="BranchHead",
                              source_contains="norm = self.sqrt(variance)"),
    ),
    base.Case(
        name="branch_head_scale_expand",
        description="The same head scaling its variances by 3e38 in float32 (`variance * 3e38`), one step.",
        shows="Mul overflows; MindSpore expanded it (scope Expand/_Muls/Mul-op0, no Cell in it): the Cell comes "
              "from the call trace `return self.head(x)`.",
        argv=(str(CASES_DIR / "branch_head.py"), "--form", "scale"),
        expected=base._expect("anomaly", op_type="Mul", iteration=0, kind="overflow", forward_op="Mul",
                              cell="BranchHead", source_contains="return variance * 3e38"),
    ),
]


def cache_key() -> str:
    digest = hashlib.sha256()
    for path in [Path(__file__).resolve(), base.RUNNER, *sorted(CASES_DIR.glob("*.py"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"mindspore={base.mindspore_version()}".encode())
    return digest.hexdigest()[:16]


def ensure_cases(out_dir: Optional[Path] = None, progress=None) -> base.RealDumps:
    """Generate the cases unless a finished copy is in `out_dir` (default: the cache under this file's key)."""
    out_dir = Path(out_dir) if out_dir else DEFAULT_CACHE_ROOT / cache_key()
    if not out_dir.exists():
        base.prune_stale(DEFAULT_CACHE_ROOT, out_dir)
    records = {}
    with base._locked(out_dir):
        for case in CASES:
            record = base.read_case_json(out_dir / case.name)
            if not (record and record.get("ok")):
                if progress:
                    progress(f"running {case.name}")
                record = base.run_case(case, out_dir)
            records[case.name] = record
    return base.RealDumps(out_dir, records)


def main() -> int:
    if base.mindspore_version() is None:
        print("gen_harden_dumps: MindSpore is not installed", file=sys.stderr)
        return 2
    dumps = ensure_cases(progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    for name, record in dumps.records.items():
        print(base._summary(name, record))
    return 1 if dumps.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
