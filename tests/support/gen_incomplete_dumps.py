"""Real MindSpore CPU dumps for the incomplete-dump tests (tests/real/test_incomplete_dumps.py) that the main set
(tests/support/gen_real_dumps.py) lacks: a clean run of three steps. Same runner and case.json as gen_real_dumps (this
module only adds cases), cached apart under `.fixture-cache/incomplete/<key>/`, the key hashing this file, the
demo model and the MindSpore version, so adding a case here never regenerates the main set.

    python -m tests.support.gen_incomplete_dumps           # generate (or reuse) every case
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from tests.support import gen_real_dumps as base

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


def _sources() -> List[Path]:
    return [Path(__file__).resolve(), base.RUNNER, *sorted((base.REPO / "msoverflow" / "demo").glob("*.py"))]


CASE_SET = base.CaseSet("gen_incomplete_dumps", "incomplete", CASES, _sources)
DEFAULT_CACHE_ROOT = CASE_SET.cache_root
cache_key = CASE_SET.cache_key
ensure_cases = CASE_SET.ensure


if __name__ == "__main__":
    sys.exit(CASE_SET.main())
