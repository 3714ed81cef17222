"""Real MindSpore CPU dumps for the hardening tests (tests/real/test_harden_real.py) that the main set
(tests/support/gen_real_dumps.py) lacks. Same runner and case.json as gen_real_dumps (this module only adds cases),
cached apart under `.fixture-cache/harden/<key>/`, the key hashing this file, its case scripts
(tests/support/cases/harden/), the runner and the MindSpore version, so adding a case here never regenerates the
main set.

    python -m tests.support.gen_harden_dumps           # generate (or reuse) every case
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from tests.support import gen_real_dumps as base

CASES_DIR = Path(__file__).resolve().parent / "cases" / "harden"

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


def _sources() -> List[Path]:
    return [Path(__file__).resolve(), base.RUNNER, *sorted(CASES_DIR.glob("*.py"))]


CASE_SET = base.CaseSet("gen_harden_dumps", "harden", CASES, _sources)
DEFAULT_CACHE_ROOT = CASE_SET.cache_root
cache_key = CASE_SET.cache_key
ensure_cases = CASE_SET.ensure


if __name__ == "__main__":
    sys.exit(CASE_SET.main())
