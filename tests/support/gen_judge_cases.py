"""Real MindSpore CPU runs for the judgement (issue 32: one judgement per report, harmless only when proven): each
case holds a fault no loss scale handles and nothing contains. Same runner and case.json as gen_real_dumps (this
module only adds cases), cached apart under `.fixture-cache/judge/<key>/`, the key hashing this file, its case
scripts (tests/support/cases/judge/) and the MindSpore version, so adding a case never regenerates another set.

    python -m tests.support.gen_judge_cases            # generate (or reuse) every case
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from tests.support import gen_real_dumps as base

SCRIPTS = Path(__file__).resolve().parent / "cases" / "judge"
LOSS_SCALED = str(SCRIPTS / "loss_scaled.py")      # absolute: Case.command keeps an absolute script path
# the project's dynamic-loss-scale calibration run (gen_real_dumps' loss_scale_fp16 cases), here with a forward fault
# inside the calibration; hashed into this set's key with the scripts above
CALIBRATING = base.CASES_DIR / "loss_scale_fp16.py"

CASES: List[base.Case] = [
    base.Case(
        name="judge_look_backward",
        description="fp16 regressor under a dynamic loss scale (2^10); its first layer's Cell class is LookBackward.",
        shows="Step 0's fp16 MatMul overflows in the forward (loss inf): a fault, though a Cell name says Backward.",
        argv=(LOSS_SCALED, "--case", "look_backward"),
        expected=base._expect("anomaly", op_type="MatMul", iteration=0, kind="overflow",
                              layout={0: [0, 1], 1: [0, 1], 2: [1]}),
    ),
    base.Case(
        name="judge_sqrt_zero_row",
        description="fp32 regressor under a dynamic loss scale; sqrt of each row's sum of squares, step 0's batch "
                    "holds an all-zero row.",
        shows="SqrtGrad divides by sqrt(0) in step 0's backward; the loss scale skips the step and step 1 trains: a "
              "0 denominator no smaller scale removes, never 'the loss scale calibrating'.",
        argv=(LOSS_SCALED, "--case", "sqrt_zero_row"),
        expected=base._expect("anomaly", op_type="SqrtGrad", iteration=0, kind="invalid",
                              layout={0: [0, 1], 1: [0, 1], 2: [1]}),
    ),
    base.Case(
        name="judge_log_clamp",
        description="fp32 regressor: maximum(log(x), -10) on a batch holding a 0 and a -1.",
        shows="log(-1) = NaN is a domain fault that CPU Maximum drops: never 'contained' (NaN is no fill).",
        argv=(LOSS_SCALED, "--case", "log_clamp"),
        expected=base._expect("anomaly", op_type="Log", iteration=0, kind="invalid",
                              layout={0: [0, 1], 1: [0, 1], 2: [0, 1]}),
    ),
    base.Case(
        name="judge_static_scale",
        description="fp16 regressor, TrainOneStepCell with sens 2^16 (a static loss scale, no overflow check), SGD.",
        shows="The scaled gradients overflow fp16 in step 0's backward and SGD applies them: the weights go "
              "non-finite. The fix names the overflow check/skip beside the precision fix; no loss scale is named "
              "(the dump holds no loss-scale Parameter: 2^16 is the sens).",
        argv=(LOSS_SCALED, "--case", "static_scale"),
        expected=base._expect("anomaly", op_type="Cast", iteration=0, kind="overflow", layout={0: [0, 1]}),
    ),
    base.Case(
        name="judge_inner_grad",
        description="A physics-informed loss holding an inner GradOperation (du/dx of a float16 field), dynamic loss "
                    "scale from 2^10, SGD, three steps; step 1's batch holds a row of 4000s.",
        shows="The inner gradient's float16 MatMul (under a Gradients/ scope) overflows in the forward of step 1 "
              "(loss inf); the loss scale skips the step and step 2 trains: a forward fault, never calibration.",
        argv=(str(SCRIPTS / "inner_grad.py"),),
        expected=base._expect("anomaly", op_type="MatMul", iteration=1, kind="overflow",
                              layout={0: [0, 1, 2], 1: [0, 1, 2], 2: [0, 2]}),
    ),
    base.Case(
        name="judge_maxpool_nan",
        description="fp32 regressor over features max-pooled along the sequence (ops.max: ArgMaxWithValue), SGD, two "
                    "steps; step 0's batch holds one NaN that is not first in its window.",
        shows="CPU ArgMaxWithValue passes over the NaN and everything after it stays finite: the NaN is bad data "
              "(cause data), never 'contained'.",
        argv=(str(SCRIPTS / "maxpool_nan.py"),),
        expected=base._expect("anomaly", iteration=0, kind="invalid", expected_cause="data", layout={0: [0, 1]},
                              expected_first_bad_tensor={"op_type": "ArgMaxWithValue", "io": "input", "slot": 0}),
    ),
    base.Case(
        name="judge_device_skip",
        description="fp16 regressor under a dynamic loss scale (2^10) whose overflow check is also told, at step 0, "
                    "that the gradients are not finite; no bad value in the run (the base of an edited copy).",
        shows="The loss-scale cell's own answer to a gradient NaN: step 0's update skipped, the scale halved, step 1 "
              "trains. tests/real/test_judge_mechanisms_real.py plants the device fault's NaN in a copy.",
        argv=(LOSS_SCALED, "--case", "device_skip"),
        expected=base._expect("clean", layout={0: [0, 1], 1: [0, 1], 2: [1]}),
    ),
    base.Case(
        name="judge_calibrating_forward",
        description="fp16 regressor with a dynamic loss scale from 2^24 (steps 0-7 calibrate: the scaled gradients "
                    "overflow, updates skipped), twelve steps; step 3's batch holds a row of 65000s that the first "
                    "fp16 MatMul sums past 65504.",
        shows="A forward fault inside the calibration, before any step recovers: the origin is step 3's MatMul, not "
              "step 0's calibration Cast, and steps 8-11 (in the dump) show the recovery.",
        argv=(str(CALIBRATING), "--steps", "12", "--forward-overflow-step", "3"),
        expected=base._expect("anomaly", op_type="MatMul", iteration=3, kind="overflow",
                              layout={0: list(range(12)), 1: list(range(12)), 2: [8, 9, 10, 11]},
                              expected_first_bad_tensor={"op_type": "Cast", "io": "output", "slot": 0,
                                                         "iteration": 0}),
    ),
]


def _sources() -> List[Path]:
    return [Path(__file__).resolve(), *sorted(SCRIPTS.glob("*.py")), CALIBRATING]


CASE_SET = base.CaseSet("gen_judge_cases", "judge", CASES, _sources)
DEFAULT_CACHE_ROOT = CASE_SET.cache_root
cache_key = CASE_SET.cache_key
ensure_cases = CASE_SET.ensure


if __name__ == "__main__":
    sys.exit(CASE_SET.main())
