#!/usr/bin/env python
"""Generate real MindSpore (CPU) dump directories used as test fixtures.

Each case runs in its own subprocess and temporary working directory with its own dump config; the result is
`<out>/<case>/dump/` plus `run.log` (stdout+stderr) and `case.json` (what was run, what the case is meant to show,
the facts a test may assert, and what was observed in the files). Outputs are cached under
`<repo>/.fixture-cache/realdumps/<key>/`, the key hashing this file, the case scripts, msoverflow/demo/*.py and
the installed MindSpore version, so reruns are free.

    python -m tests.support.gen_real_dumps [--out DIR] [--case NAME ...] [--force] [--jobs N]

Only the standard library is imported at module level (pytest's conftest loads this file); numpy is imported
lazily by the scan helpers.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from tests.support.fixture_runs import RUNNER, in_staged, prune_stale, staged_sources, wait_until_settled

REPO = Path(__file__).resolve().parents[2]
CASES_DIR = Path(__file__).resolve().parent / "cases" / "realdump"
DEFAULT_CACHE_ROOT = REPO / ".fixture-cache" / "realdumps"
CASE_TIMEOUT_S = 300
# MindSpore rejects dump paths with any other character (a '.' in `.fixture-cache` included), so cases dump
# into a temporary directory first and are moved into the cache afterwards.
_DUMP_PATH_OK = re.compile(r"^/[A-Za-z0-9_/-]+$")
FP16_MAX = 65504.0

BASE_DUMP_CONFIG = {
    "common_dump_settings": {
        "dump_mode": 0,
        "path": "",  # filled in per run (absolute)
        "net_name": "Net",
        "iteration": "all",
        "saved_data": "tensor",
        "input_output": 0,
        "kernels": [],
        "support_device": [0],
        "op_debug_mode": 0,
    },
    "e2e_dump_settings": {"enable": True, "trans_flag": True},
}

DEMO_TRAIN = ("-m", "msoverflow.demo.train")
NORMHEAD_SQRT_LINE = "norm = self.sqrt(variance + self.eps)"
KERNELS_CASE_KERNELS = [
    "SqrtGrad",
    "Default/network-CausalLMLoss/_backbone-TinyBaichuan/lm_head-NormHead/RealDiv-op0",
]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    description: str
    shows: str
    argv: tuple  # arguments after the python executable; script paths relative to tests/support/cases/realdump/
    expected: dict  # design intent, stated once; copied into case.json
    dump_settings: dict = dataclasses.field(default_factory=dict)  # overrides of common_dump_settings
    workers: int = 0      # > 0: started by `msrun` with this many local workers (one rank each, MCCL on CPU)
    derive: Optional[tuple] = None   # (source case, transform): made from another case's real dump, no run

    def command(self, python: str = sys.executable, master_port: int = 0, log_dir: str = "") -> List[str]:
        args = [str(CASES_DIR / a) if a.endswith(".py") else a for a in self.argv]
        if self.workers:
            msrun = str(Path(python).parent / "msrun")
            return [msrun, f"--worker_num={self.workers}", f"--local_worker_num={self.workers}",
                    f"--master_port={master_port}", "--join=True", f"--log_dir={log_dir}", *args]
        return [python, *args]

    def dump_config(self, dump_path: str) -> dict:
        config = copy.deepcopy(BASE_DUMP_CONFIG)
        config["common_dump_settings"].update(self.dump_settings)
        config["common_dump_settings"]["path"] = dump_path
        return config


def _expect(verdict, *, op_type=None, iteration=None, kind=None, graph=0, forward_op=None, cell=None,
            source_contains=None, layout=None, **extra) -> dict:
    """The facts a test may assert. layout: {graph_id: [iteration dirs]}."""
    return {
        "expected_verdict": verdict,
        "expected_first_op_type": op_type,
        "expected_iteration": iteration,
        "expected_graph": graph if verdict == "anomaly" else None,
        "expected_kind": kind,
        "expected_forward_op": forward_op,
        "expected_cell": cell,
        "expected_source_contains": source_contains,
        "expected_layout": {str(g): list(its) for g, its in (layout or {0: [0]}).items()},
        **extra,
    }


_NORMHEAD_OVERFLOW = dict(op_type="SqrtGrad", iteration=0, kind="overflow", forward_op="Sqrt", cell="NormHead",
                          source_contains=NORMHEAD_SQRT_LINE, expected_first_op_scope_contains="lm_head-NormHead",
                          expected_cause="precision")

CASES: List[Case] = [
    Case(
        name="clean_fp32",
        description="fp32 Dense-ReLU-Dense regressor, MSE loss, SGD, two steps in graph mode.",
        shows="A run with no anomaly at all: every tensor finite; verdict clean.",
        argv=("clean_fp32.py",),
        expected=_expect("clean", layout={0: [0, 1]}),
    ),
    Case(
        name="normhead_fp16_overflow",
        description="The demo TinyBaichuan, fp16 NormHead lm head, loss scale 64, one step.",
        shows="SqrtGrad in NormHead's backward creates values above fp16's max (65504) in an fp16-declared file "
              "that holds fp32 bytes; the next Cast turns them into inf.",
        argv=(*DEMO_TRAIN, "--steps", "1"),
        expected=_expect("anomaly", **_NORMHEAD_OVERFLOW),
    ),
    Case(
        name="normhead_fp32_clean",
        description="The demo TinyBaichuan with the NormHead computed in fp32, loss scale 64, one step.",
        shows="The precision fix for the NormHead overflow: same model and data, verdict clean.",
        argv=(*DEMO_TRAIN, "--steps", "1", "--head-dtype", "float32"),
        expected=_expect("clean"),
    ),
    Case(
        name="overflow_last_of_three_steps",
        description="The demo TinyBaichuan (fp16 NormHead), loss scale 1, 4, 256 over three steps, lr 1e-4.",
        shows="Iterations 0 and 1 are clean; SqrtGrad overflows only at iteration 2.",
        argv=(*DEMO_TRAIN, "--steps", "3", "--lr", "1e-4", "--loss-scale", "1,4,256"),
        expected=_expect("anomaly", layout={0: [0, 1, 2]}, **{**_NORMHEAD_OVERFLOW, "iteration": 2}),
    ),
    Case(
        name="zero_token_loss_division",
        description="fp32 tiny LM, loss = sum(ce * mask) / sum(mask); the loss mask is all zero on step 1 of 2.",
        shows="The empty-loss-mask case with the division in the loss. Observed: the backward of that division "
              "(Gradients/.../Grad_Div/Div-op0: dloss / token_count = 1/0 -> +inf) runs before the forward "
              "Div and is the first origin; the forward Div (0/0 -> NaN) follows later in iteration 1. "
              "Both divide by the zero token count. Iteration 0 is clean.",
        argv=("zero_token_step.py", "--formula", "loss_division"),
        expected=_expect("anomaly", op_type="Div", iteration=1, kind="invalid", forward_op="Div",
                         cell="TokenAveragedLoss", source_contains="/ token_count", layout={0: [0, 1]},
                         expected_first_op_scope_contains="Grad_Div",
                         expected_cause="data",
                         expected_zero_denominator_input_slot=1,
                         expected_later_origin={"op_type": "Div", "scope_contains": "network-TokenAveragedLoss_Div",
                                                "nan": True}),
    ),
    Case(
        name="zero_token_mask_weights",
        description="fp32 tiny LM, per-token weights = mask / sum(mask), loss = sum(ce * weights); the loss mask "
                    "is all zero on step 1 of 2.",
        shows="The empty-loss-mask case as 0/0: the forward Div of the mask by the token count creates NaN from "
              "two zeros (no gradient flows through the mask, so no backward division runs first).",
        argv=("zero_token_step.py", "--formula", "token_weights"),
        expected=_expect("anomaly", op_type="Div", iteration=1, kind="invalid", forward_op="Div",
                         cell="TokenAveragedLoss", source_contains="/ token_count", layout={0: [0, 1]},
                         expected_first_op_scope_contains="network-TokenAveragedLoss_Div",
                         expected_zero_denominator_input_slot=1, expected_cause="data"),
    ),
    Case(
        name="sqrt_negative",
        description="fp32 head predicting an unconstrained variance and taking ops.sqrt of it, one step.",
        shows="Sqrt creates NaN from finite (negative) inputs in the forward pass.",
        argv=("sqrt_negative.py",),
        expected=_expect("anomaly", op_type="Sqrt", iteration=0, kind="invalid", forward_op="Sqrt",
                         cell="StdHead", source_contains="ops.sqrt(self.variance(x))",
                         expected_cause="domain",
                         expected_first_op_scope_contains="StdHead"),
    ),
    Case(
        name="log_nonpositive",
        description="fp32 regressor that log-transforms input features containing a 0 and a -1, one step.",
        shows="Log creates -inf (log 0) and NaN (log -1) from finite inputs in the forward pass.",
        argv=("log_nonpositive.py",),
        expected=_expect("anomaly", op_type="Log", iteration=0, kind="invalid", forward_op="Log",
                         cell="LogFeatures", source_contains="ops.log(x)",
                         expected_cause="domain",
                         expected_first_op_scope_contains="LogFeatures"),
    ),
    Case(
        name="sgd_update_overflow",
        description="fp32 regressor, SGD with learning rate 3e38 and gradients of about 50, two steps.",
        shows="The optimizer update itself overflows: SGD writes -inf into the weights in place from finite inputs. "
              "The dump reads SGD's inputs after it ran, so the first bad tensor in the files is SGD's input 0 (the "
              "weight it wrote), equal to its output.",
        argv=("sgd_update_overflow.py",),
        expected=_expect("anomaly", op_type="SGD", iteration=0, kind="overflow", forward_op="SGD", cell="SGD",
                         source_contains="hyper_map", layout={0: [0, 1]},
                         expected_first_op_scope_contains="optimizer-SGD",
                         expected_cause="domain",
                         expected_first_bad_tensor={"op_type": "SGD", "io": "input", "slot": 0,
                                                    "scope_contains": "optimizer-SGD"}),
    ),
    Case(
        name="jit_value_and_grad_three_graphs",
        description="PyNative TinyBaichuan (fp16 NormHead) with a @ms.jit forward/backward from ms.value_and_grad, "
                    "amp.all_finite on the grads and an SGD update skipped when they are not finite; loss scale "
                    "1, 4, 256 over three steps.",
        shows="Several graphs in one dump and iteration numbers that count across graphs: graph 0 is the "
              "forward/backward (iterations 0,1,2 = steps 0,1,2), graph 1 is all_finite (iterations 1,2,3 = "
              "steps 0,1,2), graph 2 is the SGD update (iterations 1,2: skipped on step 2). SqrtGrad overflows "
              "in graph 0 at iteration 2. Scopes carry no Cell path here (Gradients/Default/Grad_Sqrt/...): "
              "the Cell is only visible in the .ir source-line stack. The global execution-order csv is "
              "incomplete here: graph 0's lists only iteration 0 and graph 2 has none.",
        argv=("jit_value_and_grad.py",),
        expected=_expect("anomaly", layout={0: [0, 1, 2], 1: [1, 2, 3], 2: [1, 2]},
                         **{**_NORMHEAD_OVERFLOW, "iteration": 2, "expected_first_op_scope_contains": "Grad_Sqrt"},
                         expected_graph_roles={"0": "forward_backward", "1": "all_finite", "2": "optimizer"}),
    ),
    Case(
        name="normhead_kernels_filtered",
        description="The NormHead fp16 overflow (demo, one step) dumped with dump_mode 1 and a kernels list: the op "
                    "type 'SqrtGrad' and the full name of NormHead's forward RealDiv.",
        shows="A filtered dump: only the selected kernels are present. Observed: an op-type entry matches as a "
              "case-insensitive substring, so 'SqrtGrad' also dumps RsqrtGrad.",
        argv=(*DEMO_TRAIN, "--steps", "1"),
        dump_settings={"dump_mode": 1, "kernels": KERNELS_CASE_KERNELS},
        expected=_expect("anomaly", **_NORMHEAD_OVERFLOW,
                         expected_op_types=["RealDiv", "RsqrtGrad", "SqrtGrad"]),
    ),
    Case(
        name="normhead_inputs_only",
        description="The NormHead fp16 overflow (demo, one step) dumped with input_output 1 (inputs only).",
        shows="No output files at all: the first out-of-range tensor is the input 0 of the Cast after SqrtGrad "
              "(Grad_ReduceSum/Cast-op0); SqrtGrad itself is known only through the graph (its output feeds it).",
        argv=(*DEMO_TRAIN, "--steps", "1"),
        dump_settings={"input_output": 1},
        expected=_expect("anomaly", **_NORMHEAD_OVERFLOW,
                         expected_first_bad_tensor={"op_type": "Cast", "io": "input", "slot": 0,
                                                    "scope_contains": "Grad_ReduceSum"}),
    ),
    Case(
        name="nan_in_batch",
        description="fp32 sequence regressor fed a batch whose row 1 holds NaN at sequence positions 1-4, every "
                    "channel, one step.",
        shows="The first bad value is in the data batch, a graph input (inputs0), before any op ran. Observed: "
              "the Parameter files are written at the end of the step, so the first bad tensor in time is the input "
              "0 of the Reshape that reads the batch (produced by `parameter inputs0` in the .ir).",
        argv=("nan_in_batch.py",),
        expected=_expect("anomaly", op_type="Reshape", iteration=0, kind="invalid", forward_op="Reshape",
                         cell="Dense", source_contains="self.fc(x)", expected_cause="data",
                         expected_first_op_scope_contains="fc-Dense_Reshape",
                         expected_first_bad_tensor={"op_type": "Reshape", "io": "input", "slot": 0,
                                                    "scope_contains": "fc-Dense_Reshape"}),
    ),
    Case(
        name="kernel_zoo",
        description="fp32 network through many kinds of op (MatMul/BatchMatMul with each transpose flag, LayerNorm, "
                    "Softmax, LogSoftmax, elementwise math, reductions, a Cast to float16), one clean SGD step.",
        shows="Every op's dumped output, to check msoverflow's reference kernels against MindSpore's own results "
              "(forward and backward); verdict clean.",
        argv=("kernel_zoo.py",),
        expected=_expect("clean"),
    ),
    Case(
        name="sdc_gradient_nan",
        description="EDITED, not a run of its own: the clean_fp32 dump (a real run) with the weight gradient of fc2 "
                    "at step 1 edited as silent data corruption would leave it: the exponent bits of one of its 16 "
                    "values flipped to make a NaN, and that NaN carried to the tensors that hold the gradient "
                    "downstream (SGD's gradient input) and to the weight SGD updates with it (SGD's written "
                    "input 0, its output, the weight's Parameter file). Made by gen_real_dumps._derive, never by "
                    "hand; the edits are listed in case.json.",
        shows="A NaN in a gradient and its consumers whose finite fp32 inputs recompute finite: cause `device`, "
              "with the layout of a bit flip (1 of 16 values, isolated, two exponent bits from the recomputed "
              "value).",
        argv=(),
        derive=("clean_fp32", "silent_corruption"),
        expected=_expect("anomaly", op_type="MatMul", iteration=1, kind="invalid", forward_op="MatMul",
                         cell="Dense", source_contains="self.fc2(", layout={0: [0, 1]},
                         expected_first_op_scope_contains="fc2-Dense_Grad_MatMul_MatMul-op2", expected_cause="device"),
    ),
    Case(
        name="causal_mask_softmax",
        description="fp32 single-head causal self-attention: ops.masked_fill(scores, causal, float('-inf')) before "
                    "Softmax, MSE loss, SGD, two steps in graph mode.",
        shows="The standard causal mask: MaskedFill writes -inf above the diagonal and Softmax turns it into exact "
              "zeros; the loss, every gradient and every weight stay finite. The -inf is contained: clean.",
        argv=("causal_mask_softmax.py",),
        expected=_expect("clean", layout={0: [0, 1]},
                         expected_contained={"op_type": "MaskedFill", "cell": "attn", "value": "-inf",
                                             "absorbed_by": "Softmax"},
                         expected_first_bad_tensor={"op_type": "MaskedFill", "io": "input", "slot": 2,
                                                    "iteration": 0}),
    ),
    Case(
        name="loss_scale_calibration_fp16",
        description="fp16 regressor (fp32 loss) trained with a dynamic loss scale from 2^24 (TrainOneStepWithLossScale"
                    "Cell with a DynamicLossScaleUpdateCell, overflow checked with the cell's IsFinite path on CPU), "
                    "SGD, twelve steps.",
        shows="Steps 0-7: the scaled gradients leave fp16's range in the backward, the updates are skipped and the "
              "scale halves each step (2^24 -> 2^16); steps 8-11 train at 2^16. Every overflow is handled by the "
              "loss scale: clean.",
        argv=("loss_scale_fp16.py", "--steps", "12"),
        expected=_expect("clean", layout={0: list(range(12)), 1: list(range(12)), 2: [8, 9, 10, 11]},
                         expected_handled={"steps": [0, 7], "scale_from": 2.0 ** 24, "scale_to": 2.0 ** 16},
                         expected_first_bad_tensor={"op_type": "Cast", "io": "output", "slot": 0,
                                                    "iteration": 0}),
    ),
    Case(
        name="loss_scale_then_forward_overflow",
        description="The loss_scale_calibration_fp16 loop for fourteen steps; the batch of step 10 holds a row of "
                    "65000s (within fp16's range) that the first fp16 MatMul sums past 65504.",
        shows="Steps 0-7 are the loss scale calibrating (handled, not a fault); step 10's forward overflow is the "
              "first harmful origin, in fc1's MatMul.",
        argv=("loss_scale_fp16.py", "--steps", "14", "--forward-overflow-step", "10"),
        expected=_expect("anomaly", op_type="MatMul", iteration=10, kind="overflow", forward_op="MatMul",
                         expected_cause="precision",
                         cell="Dense", source_contains="self.fc1(x)",
                         layout={0: list(range(14)), 1: list(range(14)), 2: [8, 9, 11, 12, 13]},
                         expected_first_op_scope_contains="fc1-Dense",
                         expected_handled={"steps": [0, 7], "scale_from": 2.0 ** 24, "scale_to": 2.0 ** 16},
                         expected_first_bad_tensor={"op_type": "Cast", "io": "output", "slot": 0,
                                                    "iteration": 0}),
    ),
    Case(
        name="lr_warmup_divergence",
        description="fp16 regressor (fp32 loss), SGD with a learning rate warming up by 0.03 per step, 38 steps.",
        shows="From about step 10 the learning rate is past what the problem tolerates and fc.weight grows every "
              "step (max |w| 0.2 -> 3e4); at step 37 fc's fp16 MatMul overflows. Since when: the weights' "
              "growth, long before the step, is the cause (training dynamics), not the op's precision.",
        argv=("lr_warmup_divergence.py",),
        expected=_expect("anomaly", op_type="MatMul", iteration=37, kind="overflow", forward_op="MatMul",
                         expected_cause="precision",
                         cell="Dense", source_contains="self.fc(x)", layout={0: list(range(38))},
                         expected_first_op_scope_contains="fc-Dense",
                         expected_growing_parameter="fc.weight"),
    ),
]
# The op whose output 0 the silent_corruption transform edits, and the step.
SDC_TARGET = {"iteration": 1, "op_name_contains": "fc2-Dense_Grad_MatMul_MatMul-op2", "io": "output", "slot": 0}
# Ops that write the tensor in their input 0 in place (the dump holds it after the write): what they compute from
# an edited gradient is edited too.
_IN_PLACE = ("SGD",)

def _ranks(statuses: Dict[int, tuple]) -> Dict[str, dict]:
    """expected per-rank table: rank -> (status, iteration, op_type)."""
    return {str(r): {"status": s, "iteration": i, "op_type": t} for r, (s, i, t) in statuses.items()}


_DP = "dp_allreduce.py"
_ALL_DEVICES = {"support_device": [0, 1, 2, 3, 4, 5, 6, 7]}
# Real multi-rank runs: `msrun` starts N CPU workers; init() + DATA_PARALLEL make TrainOneStepCell insert the
# gradient AllReduce, so a bad gradient on one rank reaches every rank in the same step.
MULTI_RANK_CASES: List[Case] = [
    Case(
        name="dp2_empty_loss_mask",
        description="2 ranks (msrun, MCCL), data parallel, tiny LM with per-token weights mask / sum(mask); "
                    "rank 1's loss mask is all zero at step 1 of 2.",
        shows="The origin is rank 1's forward Div (0/0 -> NaN) at step 1; rank 0 never divides by zero but "
              "receives NaN gradients through the gradient AllReduce in the same step.",
        argv=(_DP, "--model", "tokens", "--steps", "2", "--bad", "1:1"),
        workers=2, dump_settings=_ALL_DEVICES,
        expected=_expect("anomaly", op_type="Div", iteration=1, kind="invalid", forward_op="Div",
                         cell="TokenWeightedLoss", expected_cause="data", source_contains="mask / token_count",
                         layout={0: [0, 1]},
                         expected_origin_rank=1, expected_ranks=_ranks({0: ("received", 1, "AllReduce"),
                                                                        1: ("origin", 1, "Div")})),
    ),
    Case(
        name="dp2_normhead_one_rank",
        description="2 ranks (msrun, MCCL), data parallel, the demo TinyBaichuan (fp16 NormHead); rank 1 trains "
                    "step 1 of 2 with loss scale 256, every other (rank, step) with 1.",
        shows="SqrtGrad in NormHead's backward leaves fp16's range on rank 1 only, at step 1; rank 0 receives "
              "the bad gradient through the AllReduce.",
        argv=(_DP, "--model", "normhead", "--steps", "2", "--bad", "1:1"),
        workers=2, dump_settings=_ALL_DEVICES,
        expected=_expect("anomaly", layout={0: [0, 1]}, **{**_NORMHEAD_OVERFLOW, "iteration": 1},
                         expected_origin_rank=1, expected_ranks=_ranks({0: ("received", 1, "AllReduce"),
                                                                        1: ("origin", 1, "SqrtGrad")})),
    ),
    Case(
        name="dp4_two_origins",
        description="4 ranks (msrun, MCCL), data parallel tiny LM; rank 1's loss mask is empty at step 1 and "
                    "rank 3's at step 2 (of 3). A step that leaves non-finite weights is rolled back (skipped), "
                    "so the two origins are independent.",
        shows="Two real origins in different steps: rank 1 at step 1, rank 3 at step 2; ranks 0 and 2 receive "
              "through the AllReduce at step 1, and so does rank 3 before its own origin.",
        argv=(_DP, "--model", "tokens", "--steps", "3", "--bad", "1:1,3:2", "--rollback"),
        workers=4, dump_settings=_ALL_DEVICES,
        expected=_expect("anomaly", op_type="Div", iteration=1, kind="invalid", forward_op="Div",
                         cell="TokenWeightedLoss", expected_cause="data", source_contains="mask / token_count",
                         layout={0: [0, 1, 2]},
                         expected_origin_rank=1,
                         expected_later_origins=[{"rank": 3, "iteration": 2, "op_type": "Div"}],
                         expected_ranks=_ranks({0: ("received", 1, "AllReduce"), 1: ("origin", 1, "Div"),
                                                2: ("received", 1, "AllReduce"), 3: ("origin", 2, "Div")})),
    ),
    Case(
        name="dp4_skip_on_overflow",
        description="4 ranks (msrun, MCCL), data parallel, the demo TinyBaichuan (fp16 NormHead) under a "
                    "loss-scale-style cell whose optimizer runs only inside `if every reduced gradient is finite`; "
                    "rank 2 trains step 1 of 2 with loss scale 256, every other (rank, step) with 1.",
        shows="SqrtGrad in NormHead's backward overflows on rank 2 at step 1; the NormHead weight's inf gradient "
              "reaches every rank through the gradient AllReduce, and the step runs no optimizer kernel (skipped "
              "on overflow): the parameters hit come from the gradients, through the saved graph.",
        argv=(_DP, "--model", "normhead", "--steps", "2", "--bad", "2:1", "--skip-on-overflow"),
        workers=4, dump_settings=_ALL_DEVICES,
        expected=_expect("anomaly", layout={0: [0, 1], 2: [0]}, **{**_NORMHEAD_OVERFLOW, "iteration": 1},
                         expected_origin_rank=2,
                         expected_ranks=_ranks({0: ("received", 1, "AllReduce"), 1: ("received", 1, "AllReduce"),
                                                2: ("origin", 1, "SqrtGrad"), 3: ("received", 1, "AllReduce")})),
    ),
    Case(
        name="dp2_loss_scale_calibrating",
        description="2 ranks (msrun, MCCL), data parallel, the loss_scale_calibration_fp16 regressor (dynamic loss "
                    "scale from 2^24, the cell's AllReduced gradients and overflow status); rank 1's batches are 8x "
                    "larger, sixteen steps.",
        shows="Steps 0-7 overflow in both ranks' backward; steps 8-11 only in rank 1's (its gradients are 64x "
              "larger), and rank 0 receives them through the gradient AllReduce; every step 0-11 is skipped on "
              "both ranks and step 12 recovers at 2^12. All handled by the loss scale, on every rank: clean.",
        argv=("loss_scale_fp16.py", "--steps", "16", "--data-parallel", "--input-scale", "1:8"),
        workers=2, dump_settings=_ALL_DEVICES,
        expected=_expect("clean", layout={0: list(range(16)), 1: list(range(16)), 2: [12, 13, 14, 15]},
                         expected_origin_rank=1,
                         expected_handled={"steps": [0, 11], "ranks": [0, 1], "scale_from": 2.0 ** 24,
                                           "scale_to": 2.0 ** 12},
                         expected_first_bad_tensor={"op_type": "Cast", "io": "output", "slot": 0,
                                                    "iteration": 0}),
    ),
    Case(
        name="dp4_rank_dump_empty",
        description="The dp4_two_origins dump (a real 4-rank run) with rank 2's directory emptied afterwards, as "
                    "when one node's dump was lost or never copied. Derived from a real run, not a run of its own.",
        shows="An expected rank with no files is reported as `not dumped`; the rest of the answer is unchanged.",
        argv=(),
        derive=("dp4_two_origins", "empty_rank_2"),
        expected=_expect("anomaly", op_type="Div", iteration=1, kind="invalid", forward_op="Div",
                         cell="TokenWeightedLoss", expected_cause="data", source_contains="mask / token_count",
                         layout={0: [0, 1, 2]},
                         expected_origin_rank=1,
                         expected_later_origins=[{"rank": 3, "iteration": 2, "op_type": "Div"}],
                         expected_ranks=_ranks({0: ("received", 1, "AllReduce"), 1: ("origin", 1, "Div"),
                                                2: ("not dumped", None, None), 3: ("origin", 2, "Div")})),
    ),
]
CASES_BY_NAME: Dict[str, Case] = {case.name: case for case in CASES + MULTI_RANK_CASES}


class CaseFailed(RuntimeError):
    """A case did not produce a usable dump; the message carries the tail of its run.log."""


# ----------------------------------------------------------------------------------------------- cache key

def mindspore_version() -> Optional[str]:
    from importlib import metadata
    try:
        return metadata.version("mindspore")
    except metadata.PackageNotFoundError:
        return None


def mindspore_identity() -> str:
    """What a cached run depends on besides its sources: MindSpore's version and where it is installed (a dump
    records the absolute paths of MindSpore's own source files it ran, e.g. an optimizer's; a cache made by another
    environment, such as a removed worktree's, names files that are gone)."""
    import importlib.util
    spec = importlib.util.find_spec("mindspore")
    # as imported, not resolved: a worktree's .venv linked to another's records its own path in the dumps
    where = os.path.abspath(spec.origin) if spec is not None and spec.origin else None
    return f"mindspore={mindspore_version()} at {where}"


def cache_key() -> str:
    digest = hashlib.sha256()
    sources = [Path(__file__).resolve(), RUNNER, *sorted(CASES_DIR.glob("*.py")), *sorted((REPO / "msoverflow" / "demo").glob("*.py"))]
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(mindspore_identity().encode())
    return digest.hexdigest()[:16]


def default_out_dir() -> Path:
    return DEFAULT_CACHE_ROOT / cache_key()


# ----------------------------------------------------------------------------------------------- dump scan

@dataclasses.dataclass
class TensorFile:
    path: Path
    rank: int
    graph: int
    iteration: int
    op_type: str
    op_name: str
    timestamp: int
    io: str
    slot: int
    declared_dtype: str

    @property
    def sort_key(self):
        return (self.rank, self.iteration, self.timestamp)


def parse_tensor_name(name: str):
    """`{op_type}.{op_name}.{task}.{stream}.{timestamp}.{io}.{slot}.{format}.{DType}.npy`, parsed from the right."""
    head, _task, _stream, ts, io, slot, _fmt, dtype = name[: -len(".npy")].rsplit(".", 7)
    op_type, op_name = head.split(".", 1)
    return op_type, op_name, int(ts), io, int(slot), dtype


def iter_tensor_files(dump_dir: Path) -> Iterator[TensorFile]:
    """Every tensor file under `rank_*/<net>/<graph>/<iteration>/`."""
    for rank_dir in sorted(Path(dump_dir).glob("rank_*")):
        rank = int(rank_dir.name.split("_", 1)[1])
        for npy in rank_dir.glob("*/*/*/*.npy"):
            graph, iteration = npy.parent.parent.name, npy.parent.name
            if not (graph.isdigit() and iteration.isdigit()):
                continue
            op_type, op_name, ts, io, slot, dtype = parse_tensor_name(npy.name)
            yield TensorFile(npy, rank, int(graph), int(iteration), op_type, op_name, ts, io, slot, dtype)


def load_tensor(path: Path):
    """Load a dumped .npy, recovering fp32 payloads behind fp16 headers (a CPU quirk).

    Returns (declared numpy dtype, array in the payload's real dtype).
    """
    import numpy as np

    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        shape, fortran, declared = np.lib.format._read_array_header(fh, version)
        offset = fh.tell()
    payload = path.stat().st_size - offset
    count = int(np.prod(shape, dtype=np.int64))
    real = declared
    if count and payload != count * declared.itemsize and declared.kind == "f" and payload % count == 0:
        real = np.dtype({2: np.float16, 4: np.float32, 8: np.float64}[payload // count])
    array = np.fromfile(path, dtype=real, count=count, offset=offset)
    return declared, array.reshape(shape, order="F" if fortran else "C")


def tensor_health(path: Path) -> dict:
    """nan/inf counts, max |x| over finite values and whether an fp16-declared tensor exceeds fp16's range."""
    import numpy as np

    declared, array = load_tensor(path)
    info = {"declared_dtype": str(declared), "payload_dtype": str(array.dtype), "nan": 0, "posinf": 0,
            "neginf": 0, "max_abs": None, "over_fp16_range": False}
    if array.dtype.kind != "f" or array.size == 0:
        return info
    values = array.astype(np.float64)
    finite = values[np.isfinite(values)]
    info.update(nan=int(np.isnan(values).sum()), posinf=int(np.isposinf(values).sum()),
                neginf=int(np.isneginf(values).sum()),
                max_abs=float(np.abs(finite).max()) if finite.size else None)
    info["over_fp16_range"] = bool(declared == np.float16 and info["max_abs"] is not None and info["max_abs"] > FP16_MAX)
    return info


def is_bad(health: dict) -> bool:
    return bool(health["nan"] or health["posinf"] or health["neginf"] or health["over_fp16_range"])


def first_bad_tensors(dump_dir: Path, limit: int = 1, rank: Optional[int] = None) -> List[dict]:
    """The naive answer: tensor files in (rank, iteration, timestamp) order, first ones non-finite or over range
    (on one rank only when `rank` is given)."""
    found = []
    tensors = [t for t in iter_tensor_files(dump_dir) if rank is None or t.rank == rank]
    for tensor in sorted(tensors, key=lambda t: t.sort_key):
        health = tensor_health(tensor.path)
        if is_bad(health):
            found.append({"file": tensor.path.name, "rank": tensor.rank, "graph": tensor.graph,
                          "iteration": tensor.iteration, "op_type": tensor.op_type, "op_name": tensor.op_name,
                          "timestamp": tensor.timestamp, "io": tensor.io, "slot": tensor.slot, **health})
            if len(found) >= limit:
                break
    return found


def observe(dump_dir: Path, origin_rank: Optional[int] = None) -> dict:
    """What the dump really contains, recorded next to the design intent in case.json. With several ranks,
    `first_bad_tensors` looks at `origin_rank` only (another rank's first bad tensor is one it received)."""
    files = list(iter_tensor_files(dump_dir))
    layout: Dict[str, set] = {}
    for tensor in files:
        layout.setdefault(str(tensor.graph), set()).add(tensor.iteration)
    mismatched = sum(1 for t in files if _payload_mismatch(t.path))
    return {
        "ranks": sorted({t.rank for t in files}),
        "layout": {g: sorted(its) for g, its in sorted(layout.items(), key=lambda kv: int(kv[0]))},
        "global_execution_order": read_global_execution_order(Path(dump_dir) / "rank_0"),
        "tensor_files": len(files),
        "output_files": sum(1 for t in files if t.io == "output"),
        "input_files": sum(1 for t in files if t.io == "input"),
        "op_types": sorted({t.op_type for t in files}),
        "files_with_payload_dtype_mismatch": mismatched,
        "first_bad_tensors": first_bad_tensors(dump_dir, limit=3, rank=origin_rank),
        "rank_dirs": sorted(p.name for p in Path(dump_dir).glob("rank_*")),
        "empty_rank_dirs": sorted(p.name for p in Path(dump_dir).glob("rank_*") if not any(p.iterdir())),
    }


def read_global_execution_order(rank_dir: Path) -> Dict[str, List[int]]:
    """`execution_order/ms_global_execution_order_graph_{g}.csv`: the iterations MindSpore says graph g ran."""
    orders = {}
    for csv in sorted(Path(rank_dir, "execution_order").glob("ms_global_execution_order_graph_*.csv")):
        graph = csv.stem.rsplit("_", 1)[1]
        orders[graph] = [int(line) for line in csv.read_text().split() if line.strip().isdigit()]
    return dict(sorted(orders.items(), key=lambda kv: int(kv[0])))


def _payload_mismatch(path: Path) -> bool:
    declared, array = load_tensor(path)
    return declared != array.dtype


def self_check(case: Case, observed: dict) -> List[str]:
    """Disagreements between a case's stated intent and its files (empty when the case shows what it claims)."""
    exp = case.expected
    problems = []
    if observed["layout"] != exp["expected_layout"]:
        problems.append(f"layout {observed['layout']} != expected {exp['expected_layout']}")
    first = observed["first_bad_tensors"][0] if observed["first_bad_tensors"] else None
    want = exp.get("expected_first_bad_tensor")
    # A clean case may hold non-finite values by design (contained by Softmax, handled by the loss scale): it
    # then states its first bad tensor like an anomaly does.
    if exp["expected_verdict"] == "clean" and want is None:
        if first:
            problems.append(f"expected clean, found {first['op_type']} {first['io']} in iteration {first['iteration']}")
        return problems
    if first is None:
        return problems + ["expected a non-finite value, every tensor is finite and in range"]
    want = want or {"op_type": exp["expected_first_op_type"], "io": "output"}
    if (first["op_type"], first["io"]) != (want["op_type"], want["io"]):
        problems.append(f"first bad tensor is {first['op_type']} {first['io']}, expected {want['op_type']} {want['io']}")
    where = (want.get("graph", exp["expected_graph"] or 0), want.get("iteration", exp["expected_iteration"]))
    if (first["graph"], first["iteration"]) != where:
        problems.append(f"first bad tensor in graph {first['graph']} iteration {first['iteration']}, expected "
                        f"graph {where[0]} iteration {where[1]}")
    return problems


# ----------------------------------------------------------------------------------------------- running

def _staging_dir() -> Path:
    for base in (tempfile.gettempdir(), "/tmp"):
        staging = Path(tempfile.mkdtemp(prefix="msoverflow_realdump_", dir=base))
        if _DUMP_PATH_OK.match(str(staging)):
            return staging
        shutil.rmtree(staging, ignore_errors=True)
    raise RuntimeError("no temporary directory whose path MindSpore accepts for dumps ([A-Za-z0-9_/-] only)")


def log_tail(log_path: Path, lines: int = 30) -> str:
    try:
        text = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no run.log)"
    return "\n".join(text[-lines:])


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _derive(case: Case, source_dump: Path, target: Path):
    """Make a derived case's dump from another case's real dump (copied, then changed as the case says)."""
    shutil.copytree(source_dump, target, symlinks=True)
    _source, transform = case.derive
    if transform == "empty_rank_2":
        rank_dir = target / "rank_2"
        shutil.rmtree(rank_dir)
        rank_dir.mkdir()
        return {}
    if transform == "silent_corruption":
        return _silent_corruption(target, SDC_TARGET)
    raise ValueError(f"unknown transform {transform!r}")


def _silent_corruption(dump: Path, target: dict) -> dict:
    """Turn one value of an op's output into NaN by flipping exponent bits (the fewest that make the exponent all
    ones, on a value with a non-zero mantissa), and give the same NaN to every tensor of that step that held the
    same values (the consumers' inputs) and to what in-place writers (SGD) made from it. Returns what was edited."""
    import numpy as np

    step_files = [t for t in iter_tensor_files(dump) if t.iteration == target["iteration"]]
    source = next(t for t in step_files if target["op_name_contains"] in t.op_name and t.io == target["io"]
                  and t.slot == target["slot"])
    original = np.load(source.path)
    bits = original.reshape(-1).view(np.uint32)
    exponent = (bits >> np.uint32(23)) & np.uint32(0xFF)
    flips = np.array([8 - bin(int(e)).count("1") for e in exponent])
    flips[(bits & np.uint32(0x7FFFFF)) == 0] = 99          # a zero mantissa would make inf, not NaN
    index = int(np.argmin(flips))
    nan_bits = np.uint32(bits[index] | np.uint32(0x7F800000))
    edits = {"element": index, "original_value": float(original.reshape(-1)[index]),
             "flipped_exponent_bits": int(flips[index]), "new_bits": f"0x{int(nan_bits):08x}", "files": []}

    def give_nan(path: Path):
        array = np.load(path)
        array.reshape(-1).view(np.uint32)[index] = nan_bits
        np.save(path, array)
        edits["files"].append(path.name)

    written = []
    for t in step_files:
        array = np.load(t.path)
        if array.dtype == original.dtype and array.shape == original.shape and np.array_equal(array, original):
            if t.op_type in _IN_PLACE and t.io == "input" and t.slot == 1:
                written.append(t)
            give_nan(t.path)
    for writer in written:
        out = next(t for t in step_files if t.op_name == writer.op_name and t.io == "output" and t.slot == 0)
        updated = np.load(out.path)
        for t in step_files:
            array = np.load(t.path)
            if array.dtype == updated.dtype and array.shape == updated.shape and np.array_equal(array, updated):
                give_nan(t.path)
    return edits


def run_case(case: Case, out_dir: Path, python: str = sys.executable, timeout: float = CASE_TIMEOUT_S) -> dict:
    """Run one case from scratch into `out_dir/<case>/`; returns its case.json content (also written to disk)."""
    case_dir = Path(out_dir) / case.name
    shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    staging = _staging_dir()
    work, dump = staging / "work", staging / "dump"
    work.mkdir()
    config = case.dump_config(str(dump))
    config_path = staging / "dump_config.json"
    config_path.write_text(json.dumps(config, indent=2))
    env = dict(os.environ)
    env["MINDSPORE_DUMP_CONFIG"] = str(config_path)
    # run from the cache entry's copy of the case scripts and the demo package (fixture_runs.staged_sources)
    src = staged_sources(Path(out_dir))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])  # msrun runs the first python
    env.pop("MS_ACL_DUMP_CFG_PATH", None)  # would divert O0/O1 dumps to the ACL path
    env.setdefault("GLOG_v", "2")
    log_dir = staging / "logs"
    command = case.command(python, master_port=_free_port(), log_dir=str(log_dir)) if not case.derive else []
    command = [in_staged(arg, src) for arg in command]
    log_path = case_dir / "run.log"
    started = time.monotonic()
    derived_edits: dict = {}
    try:
        with open(log_path, "wb") as log:
            if case.derive:
                source = Path(out_dir) / case.derive[0] / "dump"
                log.write(f"[gen_real_dumps] derived from {source} ({case.derive[1]})\n".encode())
                derived_edits = _derive(case, source, staging / "derived")
                exit_code = 0
                dump = staging / "derived"
            else:
                try:
                    exit_code = subprocess.run(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               timeout=timeout).returncode
                except subprocess.TimeoutExpired:
                    exit_code = None
                    log.write(f"\n[gen_real_dumps] killed after {timeout} s\n".encode())
            for worker_log in sorted(log_dir.glob("*.log")) if log_dir.is_dir() else []:
                log.write(f"\n[gen_real_dumps] --- {worker_log.name} ---\n".encode())
                log.write(worker_log.read_bytes()[-20000:])
        if dump.is_dir():
            shutil.move(str(dump), str(case_dir / "dump"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    record = {
        "name": case.name,
        "description": case.description,
        "shows": case.shows,
        "command": command,
        "command_display": " ".join(["msrun", f"--worker_num={case.workers}", f"--local_worker_num={case.workers}",
                                     "--master_port=P", "--join=True", "--log_dir=D", *case.argv]
                                    if case.workers else ["python", *case.argv]),
        "derived_from": list(case.derive) if case.derive else None,
        **({"derived_edits": derived_edits} if derived_edits else {}),
        "workers": case.workers,
        # a derived dump keeps the files, and so the dump settings, of the run it was made from
        "dump_config": (read_case_json(Path(out_dir) / case.derive[0]) or {}).get("dump_config", config)
        if case.derive else config,
        "dump_path_note": "the dump was written to the temporary path in dump_config and then moved here",
        "exit_code": exit_code,
        "duration_s": round(time.monotonic() - started, 2),
        "mindspore_version": mindspore_version(),
        "python": sys.version.split()[0],
        "cache_key": cache_key(),
        **case.expected,
    }
    problems = []
    if exit_code != 0:
        problems.append(f"exit code {exit_code}")
    if not (case_dir / "dump" / "rank_0").is_dir():
        problems.append("no rank_0 directory in the dump")
    if case.workers and not problems:
        missing = [r for r in range(case.workers) if not (case_dir / "dump" / f"rank_{r}").is_dir()]
        if missing:
            problems.append(f"no dump directory for rank(s) {missing}")
    if not problems:
        record["observed"] = observe(case_dir / "dump", case.expected.get("expected_origin_rank"))
        record["self_check"] = self_check(case, record["observed"])
    record["ok"] = not problems
    record["problems"] = problems
    # case.json is written last: its presence with ok=true marks a finished, reusable case.
    (case_dir / "case.json").write_text(json.dumps(record, indent=2, sort_keys=False))
    return record


@contextlib.contextmanager
def _locked(out_dir: Path):
    """Serialise generators (e.g. two pytest sessions) writing the same cache directory."""
    import fcntl

    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_case_json(case_dir: Path) -> Optional[dict]:
    try:
        return json.loads((case_dir / "case.json").read_text())
    except (OSError, ValueError):
        return None


class RealDumps(Mapping):
    """case name -> Path of that case's `dump` directory; `.case(name)` gives its case.json.

    Looking up a case that failed raises CaseFailed with the tail of its run.log.
    """

    def __init__(self, out_dir: Path, records: Dict[str, dict]):
        self.root = Path(out_dir)
        self.records = records
        wait_until_settled(self.root, records)

    def __getitem__(self, name: str) -> Path:
        record = self.case(name)
        if not record.get("ok"):
            raise CaseFailed(failure_message(self.root / name, record))
        return self.root / name / "dump"

    def __iter__(self):
        return iter(self.records)

    def __len__(self):
        return len(self.records)

    def case(self, name: str) -> dict:
        if name not in self.records:
            raise KeyError(f"no real-dump case {name!r}; known: {', '.join(self.records)}")
        return self.records[name]

    def failed(self) -> List[str]:
        return [name for name, record in self.records.items() if not record.get("ok")]


@dataclasses.dataclass
class CaseSet:
    """A set of cases beside the main one (same runner and case.json), cached apart under
    `.fixture-cache/<cache_dir>/<key>/`, the key hashing `sources()` and the MindSpore version: adding a case to
    one set never regenerates another. `derive` makes cases from finished ones (edited copies) after the runs."""
    tool: str
    cache_dir: str
    cases: Sequence[Case]
    sources: Callable[[], Iterable[Path]]
    derive: Optional[Callable[[Path, Dict[str, dict]], Dict[str, dict]]] = None

    @property
    def cache_root(self) -> Path:
        return REPO / ".fixture-cache" / self.cache_dir

    def cache_key(self) -> str:
        digest = hashlib.sha256()
        for path in self.sources():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(mindspore_identity().encode())
        return digest.hexdigest()[:16]

    def ensure(self, out_dir: Optional[Path] = None, progress=None) -> RealDumps:
        """Generate the cases unless a finished copy is in `out_dir` (default: the cache under this set's key)."""
        if out_dir is None:
            out_dir = self.cache_root / self.cache_key()
            prune_stale(self.cache_root, out_dir)
        out_dir = Path(out_dir)
        records: Dict[str, dict] = {}
        with _locked(out_dir):
            for case in self.cases:
                record = read_case_json(out_dir / case.name)
                if not (record and record.get("ok")):
                    if progress:
                        progress(f"running {case.name}: {' '.join(['python', *case.argv])}")
                    record = run_case(case, out_dir)
                records[case.name] = record
            if self.derive:
                records.update(self.derive(out_dir, records))
        return RealDumps(out_dir, records)

    def main(self) -> int:
        if mindspore_version() is None:
            print(f"{self.tool}: MindSpore is not installed", file=sys.stderr)
            return 2
        dumps = self.ensure(progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        for name, record in dumps.records.items():
            print(_summary(name, record))
        return 1 if dumps.failed() else 0


def failure_message(case_dir: Path, record: dict) -> str:
    return (f"real-dump case {record.get('name', case_dir.name)} failed ({'; '.join(record.get('problems', []))}); "
            f"command: {' '.join(record.get('command', []))}\n--- tail of {case_dir / 'run.log'} ---\n"
            f"{log_tail(case_dir / 'run.log')}")


def ensure_cases(names: Optional[Sequence[str]] = None, out_dir: Optional[Path] = None, force: bool = False,
                 jobs: int = 2, python: str = sys.executable, progress=None) -> RealDumps:
    """Generate the named cases (the single-rank CASES by default; MULTI_RANK_CASES by name) unless a finished
    copy is already in `out_dir`."""
    names = list(names or [case.name for case in CASES])
    unknown = [n for n in names if n not in CASES_BY_NAME]
    if unknown:
        raise KeyError(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES_BY_NAME)}")
    if out_dir is None:
        out_dir = default_out_dir()
        prune_stale(DEFAULT_CACHE_ROOT, out_dir)
    out_dir = Path(out_dir)
    with _locked(out_dir):
        records = {}
        todo = []
        for name in names:
            record = None if force else read_case_json(out_dir / name)
            if record and record.get("ok"):
                records[name] = record
            else:
                todo.append(CASES_BY_NAME[name])

        def run(case):
            if progress:
                progress(f"running {case.name}: {' '.join(['python', *case.argv])}")
            record = run_case(case, out_dir, python)
            if progress:
                progress(f"{case.name}: {'ok' if record['ok'] else 'FAILED'} in {record['duration_s']} s")
            return record

        # msrun cases start several processes each and derived cases need their source: one at a time, last.
        alone = [c for c in todo if c.workers or c.derive]
        alone.sort(key=lambda c: c.derive is not None)
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for record in pool.map(run, [c for c in todo if c not in alone]):
                records[record["name"]] = record
        for case in alone:
            if case.derive and not (records.get(case.derive[0]) or read_case_json(out_dir / case.derive[0]) or {}
                                    ).get("ok"):
                source = CASES_BY_NAME[case.derive[0]]
                records[source.name] = run(source)
            records[case.name] = run(case)
    return RealDumps(out_dir, {name: records[name] for name in names})


# ----------------------------------------------------------------------------------------------- CLI

def _summary(name: str, record: dict) -> str:
    if not record.get("ok"):
        return f"{name}: FAILED ({'; '.join(record.get('problems', []))})"
    if record.get("edited"):
        return f"{name}: ok (edited from {record.get('edited_from')}: {record.get('edit')})"
    observed = record["observed"]
    first = observed["first_bad_tensors"][0] if observed["first_bad_tensors"] else None
    what = (f"first bad: {first['op_type']} {first['io']}.{first['slot']} graph {first['graph']} "
            f"iteration {first['iteration']}" if first else "clean")
    check = "" if not record["self_check"] else f"  SELF-CHECK: {'; '.join(record['self_check'])}"
    return f"{name}: layout {observed['layout']}, {observed['tensor_files']} files, {what}{check}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help=f"output directory (default {DEFAULT_CACHE_ROOT}/<key>)")
    parser.add_argument("--case", action="append", choices=sorted(CASES_BY_NAME), help="only this case (repeatable)")
    parser.add_argument("--multi-rank", action="store_true", help="the msrun (multi-rank) cases only")
    parser.add_argument("--force", action="store_true", help="regenerate even when a finished copy exists")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at the same time (default 2)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    if args.list:
        for case in CASES + MULTI_RANK_CASES:
            print(f"{case.name}: {case.shows}")
        return 0
    if mindspore_version() is None:
        print("gen_real_dumps: MindSpore is not installed (pip install 'msoverflow[mindspore]')", file=sys.stderr)
        return 2
    names = args.case or ([c.name for c in MULTI_RANK_CASES] if args.multi_rank else None)
    dumps = ensure_cases(names, args.out, args.force, args.jobs,
                         progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(f"out: {dumps.root}")
    for name, record in dumps.records.items():
        print(_summary(name, record))
    for name in dumps.failed():
        print("\n" + failure_message(dumps.root / name, dumps.case(name)), file=sys.stderr)
    return 1 if dumps.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
