"""Real MindSpore CPU dumps for the tests of how a dump's files are told (tests/real/test_dump_files_told.py) that the
main set (tests/support/gen_real_dumps.py) lacks. Same runner and case.json as gen_real_dumps (this module only adds
cases), cached apart under `.fixture-cache/dumpobj/<key>/`, the key hashing this file, its case scripts
(tests/support/cases/dumpobj/), the demo model and the MindSpore version, so adding a case here never regenerates
the main set.

    python -m tests.support.gen_dumpobj_dumps           # generate (or reuse) every case
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from tests.support import gen_real_dumps as base

CASES_DIR = Path(__file__).resolve().parent / "cases" / "dumpobj"


def _script(name: str) -> str:
    return str(CASES_DIR / name)     # absolute: the base runner resolves bare names in its own cases directory


CASES: List[base.Case] = [
    base.Case(
        name="jit_dynamic_scale",
        description="PyNative TinyBaichuan (fp16 NormHead), a @ms.jit forward/backward from ms.value_and_grad (sens "
                    "1) on a loss multiplied by a dynamic loss scale: 256, then 4 after the overflow; amp.all_finite "
                    "and an SGD update skipped when the grads are not finite; three steps.",
        shows="Iteration folders count graph launches, not steps: the skipped update of step 0 leaves the "
              "forward/backward graph of steps 1 and 2 both in Net/0/1 (692 files, two runs of 346), Net/0/0 holds "
              "step 0's (346). The backward's seed (value_and_grad's sens) is 1; the scale (256, then 4) is a Mul "
              "input inside the graph.",
        argv=(_script("jit_dynamic_scale.py"),),
        expected=base._expect("anomaly", op_type="SqrtGrad", iteration=0, kind="overflow",
                              layout={0: [0, 1], 1: [1, 2, 3], 2: [2, 3]}),
    ),
    base.Case(
        name="pynative_optimizer_only",
        description="PyNative Dense(4, 1) trained one step with an eager ms.value_and_grad and nn.SGD.",
        shows="Only the optimizer is a compiled graph: the dump holds three ops (two SGD and an AssignAdd), whose "
              "saved graph carries PyNative's graph attributes (bprop_value_node_ref_count).",
        argv=(_script("pynative_optimizer_only.py"),),
        expected=base._expect("clean", layout={0: [0]}),
    ),
    base.Case(
        name="clean_inputs_only",
        description="The demo TinyBaichuan with the NormHead in fp32, one step, dumped with input_output 1.",
        shows="An inputs-only dump of a clean run: no output file at all.",
        argv=(*base.DEMO_TRAIN, "--steps", "1", "--head-dtype", "float32"),
        dump_settings={"input_output": 1},
        expected=base._expect("clean", layout={0: [0]}),
    ),
]


def _sources() -> List[Path]:
    return [Path(__file__).resolve(), *sorted(CASES_DIR.glob("*.py")), *sorted((base.REPO / "msoverflow" / "demo").glob("*.py"))]


CASE_SET = base.CaseSet("gen_dumpobj_dumps", "dumpobj", CASES, _sources)
DEFAULT_CACHE_ROOT = CASE_SET.cache_root
cache_key = CASE_SET.cache_key
ensure_cases = CASE_SET.ensure


if __name__ == "__main__":
    sys.exit(CASE_SET.main())
