"""The cause of every origin, on REAL MindSpore 2.10 CPU dumps (tests/support/gen_real_dumps.py; sdc_gradient_nan is a
real dump edited by the generator as silent data corruption would leave it, and says so in its case.json).

- Every op of every real dump that has a reference kernel recomputes to what MindSpore wrote (the kernels are
  checked against MindSpore itself, forward and backward, including the edited op being the only one that does not).
- Every fixture keeps its origin and gets the cause its case states (`expected_cause`).
"""
import collections

import numpy as np
import pytest

from msoverflow.analysis import analyze
from msoverflow.cause import recompute
from msoverflow.cause.cause import diagnose, reproduce
from msoverflow.cause.recompute import RecomputeError, disagreement
from msoverflow.evaluate import TensorAccess
from msoverflow.model import CAUSES
from msoverflow.readers.ir_graph import graph_files, load_ir
from msoverflow.walk import read_unit, units

pytestmark = pytest.mark.mindspore

# Kernels MindSpore 2.10 runs on CPU in these dumps: each must have been checked on at least one real op.
CHECKED_ON_CPU = {"Add", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "Pow", "Select", "AddN", "Sqrt",
                  "Rsqrt", "Exp", "Log", "Square", "Neg", "Abs", "Sign", "Reciprocal", "Sigmoid", "Tanh", "ReLU",
                  "Cast", "SqrtGrad", "RsqrtGrad", "SigmoidGrad", "TanhGrad", "ReluGrad", "MatMul", "BatchMatMul",
                  "BiasAdd", "BiasAddGrad", "ReduceSum", "ReduceMean", "ReduceMax", "Softmax", "LogSoftmax",
                  "LogSoftmaxGrad", "LayerNorm", "LayerNormGrad", "SparseSoftmaxCrossEntropyWithLogits"}


def _disagreeing_ops(dump_dir):
    """(op types checked, [(op_name, step) whose recompute in the declared dtype differs from the dump])."""
    checked, differ = collections.Counter(), []
    for unit in units(str(dump_dir)):
        read = read_unit(unit)
        access = TensorAccess(lambda message: None)
        graphs = {}
        for ex in read.executions:
            if not recompute.supported(ex.op_type) or not ex.outputs or ex.op_type in recompute.UPDATES:
                continue
            if ex.graph not in graphs:
                files = graph_files(read.rank_roots[(ex.rank, ex.graph)], ex.graph)
                graphs[ex.graph] = load_ir(files[0]) if files else None
            node = graphs[ex.graph].find(ex.op_name) if graphs[ex.graph] else None
            outputs = sorted(ex.outputs, key=lambda e: e.slot)
            first = np.asarray(access.array(outputs[0]))
            precision = outputs[0].dtype if outputs[0].dtype in ("float16", "float32") else "float32"
            results, _by, _inputs = reproduce(ex, access, [precision], node=node, out_slot=outputs[0].slot,
                                              out_shape=first.shape, out_dtypes=[e.dtype for e in outputs],
                                              mindspore=False)
            checked[ex.op_type] += 1
            for event in outputs:
                dumped = np.asarray(access.array(event))
                got = results[precision][event.slot]
                if dumped.dtype.kind != "f":
                    same = np.array_equal(np.asarray(got).reshape(dumped.shape), dumped)
                else:
                    same = not disagreement(got, dumped, precision, event.dtype).any()
                if not same:
                    differ.append((ex.op_name, ex.iteration))
    return checked, differ


def test_every_dumped_op_agrees_with_its_reference_kernel(real_dumps):
    checked = collections.Counter()
    for case in real_dumps:
        if real_dumps.case(case).get("derived_from"):
            continue
        seen, differ = _disagreeing_ops(real_dumps[case])
        assert differ == [], f"{case}: recomputes differ from MindSpore's results: {differ[:5]}"
        checked.update(seen)
    assert CHECKED_ON_CPU <= set(checked), f"never checked on a real op: {CHECKED_ON_CPU - set(checked)}"
    assert sum(checked.values()) > 1000


def test_in_the_edited_dump_only_the_edited_op_disagrees(real_dumps):
    _seen, differ = _disagreeing_ops(real_dumps["sdc_gradient_nan"])
    edited = real_dumps.case("sdc_gradient_nan")["derived_edits"]
    assert edited["flipped_exponent_bits"] <= 2 and len(edited["files"]) >= 4
    assert [(name.rsplit("_", 1)[-1], step) for name, step in differ] == [("MatMul-op2", 1)]


def _anomaly_cases(dumps, generator_cases):
    return [c.name for c in generator_cases if c.expected["expected_verdict"] == "anomaly"]


def _check_cause(dump_dir, expected):
    report = analyze(str(dump_dir), progress=False)
    first = report.first
    assert (first.op_type, first.iteration, first.kind) == (
        expected["expected_first_op_type"], expected["expected_iteration"], expected["expected_kind"])
    assert first.cause is not None and first.cause.cause == expected["expected_cause"], first.cause
    for finding in report.anomalies:
        assert finding.cause is not None and finding.cause.cause in CAUSES
    return first.cause


def test_every_single_rank_fixture_keeps_its_origin_and_gets_its_cause(real_dumps):
    from tests.support import gen_real_dumps as gen
    for name in _anomaly_cases(real_dumps, gen.CASES):
        _check_cause(real_dumps[name], real_dumps.case(name))


def test_every_multi_rank_fixture_keeps_its_origin_and_gets_its_cause(multirank_dumps):
    from tests.support import gen_real_dumps as gen
    for name in _anomaly_cases(multirank_dumps, gen.MULTI_RANK_CASES):
        _check_cause(multirank_dumps[name], multirank_dumps.case(name))


def test_precision_normhead(real_dumps):
    cause = _check_cause(real_dumps["normhead_fp16_overflow"], real_dumps.case("normhead_fp16_overflow"))
    by = {r.dtype: r for r in cause.recompute}
    assert not by["float16"].finite and by["float32"].finite and by["float64"].finite
    assert by["float32"].max_abs > 65504 and by["float16"].agrees and by["float32"].agrees
    assert "float32" in cause.reason and cause.where == "1 of 32 values, at row 3, column 0"
    assert cause.pattern == "overflow" and cause.samples[0].recomputed["float16"] == np.inf


def test_domain_names_the_inputs_and_positions(real_dumps):
    log = _check_cause(real_dumps["log_nonpositive"], real_dumps.case("log_nonpositive"))
    assert "input 0 is 0 at row 0, column 0 and -1 at row 1, column 2" in log.reason
    sqrt = _check_cause(real_dumps["sqrt_negative"], real_dumps.case("sqrt_negative"))
    assert "input 0 is" in sqrt.reason and "columns 0-1" in sqrt.reason
    assert all(not r.finite for r in sqrt.recompute)
    sgd = _check_cause(real_dumps["sgd_update_overflow"], real_dumps.case("sgd_update_overflow"))
    assert "beyond float32" in sgd.reason


def test_data_names_the_empty_mask(real_dumps):
    for case in ("zero_token_loss_division", "zero_token_mask_weights"):
        cause = _check_cause(real_dumps[case], real_dumps.case(case))
        assert "mask" in cause.reason and "0 in all 8 positions (rows 0-1)" in cause.reason
    assert _check_cause(real_dumps["zero_token_mask_weights"], real_dumps.case("zero_token_mask_weights")
                        ).reason.startswith("0/0")


def test_device_on_the_edited_gradient(real_dumps):
    cause = _check_cause(real_dumps["sdc_gradient_nan"], real_dumps.case("sdc_gradient_nan"))
    assert all(r.finite for r in cause.recompute) and all(r.agrees is False and r.mismatches == 1
                                                          for r in cause.recompute)
    assert cause.where == "1 of 16 values, at row 0, column 3"
    assert cause.pattern == "bit flip"
    assert cause.pattern_text.startswith("NaN in 1 of 16 values, isolated, 2 exponent bits from the recomputed")
    assert "Re-run this step on the same device and on another" in cause.advice
    original = real_dumps.case("sdc_gradient_nan")["derived_edits"]["original_value"]
    assert cause.samples[0].recomputed["float32"] == pytest.approx(original, rel=1e-6)


def test_a_dump_without_the_inputs_is_unknown_and_says_why(real_dumps, tmp_path):
    """The same edited gradient with the op's input files gone: nothing to recompute from."""
    import shutil
    dump = tmp_path / "dump"
    shutil.copytree(real_dumps["sdc_gradient_nan"], dump)
    for path in dump.rglob("MatMul.*fc2-Dense_Grad_MatMul_MatMul-op2.*.input.*.npy"):
        if "/1/" in str(path):
            path.unlink()
    report = analyze(str(dump), progress=False)
    assert report.first.cause.cause == "unknown"
    assert "inputs were not dumped" in report.first.cause.reason
    assert report.first.cause.pattern == "bit flip"     # the layout still speaks: a bit flip, not an overflow


def test_without_a_kernel_or_mindspore_the_cause_is_unknown(real_dumps, monkeypatch):
    import msoverflow.cause.stage as stage
    monkeypatch.delitem(recompute.KERNELS, "Sqrt")
    numpy_only = stage.diagnose_op
    monkeypatch.setattr(stage, "diagnose_op", lambda *a, **k: numpy_only(*a, **{**k, "mindspore": False}))
    report = analyze(str(real_dumps["sqrt_negative"]), progress=False)
    assert report.first.cause.cause == "unknown" and "no reference kernel for Sqrt" in report.first.cause.reason


def test_diagnosis_reads_no_step_again(real_dumps, monkeypatch):
    """The origin's op run and its graph are handed on from the walk: the diagnose stage reads no step's directory
    again. The since-when history (explain stage, the first origin only) reads the origin's rank once per step,
    and only the rows of the ops it needs (walk.read_unit_runs(ops=...))."""
    import msoverflow.cause.stage as stage
    import msoverflow.walk as walk
    walked, in_diagnose, in_history = [], [], []
    real = walk.read_dir
    diagnosing = [False]
    monkeypatch.setattr(walk, "read_dir", lambda d, warn=None: (
        (in_diagnose if diagnosing[0] else walked).append(d.path) or real(d, warn)))
    real_diagnose = stage.diagnose

    def diagnose(*args, **kwargs):
        diagnosing[0] = True
        try:
            return real_diagnose(*args, **kwargs)
        finally:
            diagnosing[0] = False
    monkeypatch.setattr(stage, "diagnose", diagnose)
    real_ops = walk.read_unit_runs
    monkeypatch.setattr(walk, "read_unit_runs", lambda unit, warn=lambda m: None, ops=None: (
        in_history.append((unit.rank, unit.step)) if ops is not None else None) or real_ops(unit, warn, ops))
    report = analyze(str(real_dumps["overflow_last_of_three_steps"]), progress=False, jobs=1)
    assert report.first.cause.cause == "precision"
    assert not in_diagnose, in_diagnose
    assert len(in_history) == len(set(in_history)) == 3, in_history       # steps 0-2 of rank 0, once each
    # the walk itself and the history's filtered reads: each directory at most twice in all
    counts = collections.Counter(walked)
    assert walked and max(counts.values()) <= 2, counts.most_common(3)


def test_recompute_error_is_never_raised_out_of_diagnose(real_dumps):
    """An op whose inputs cannot be read at all: unknown, with the reason."""
    unit = next(u for u in units(str(real_dumps["sqrt_negative"])) if u.step == 0)
    ex = next(e for e in read_unit(unit).executions if e.op_type == "Sqrt")
    for event in ex.inputs:
        event.source = event.source + ".gone"
    cause = diagnose(ex, TensorAccess(lambda message: None), mindspore=False)
    assert cause.cause == "unknown" and "could not be read" in cause.reason
    with pytest.raises(RecomputeError):
        reproduce(ex, TensorAccess(lambda message: None), ["float32"], mindspore=False)


# Real msprobe dumps (tests/support/gen_msprobe_dumps.py): the cause each origin gets, and why.
MSPROBE_CAUSES = {
    "l1_tensor_step2": ("precision", "overflows float16"),         # Sqrt.backward fed by its forward entry's output
    "mix_tensor_step2": ("precision", "overflows float16"),
    "l1_statistics_stepk": ("unknown", "statistics only"),
    "l0_statistics": ("unknown", "statistics only"),
    "dp2_l1_statistics_rank1": ("unknown", "statistics only"),
    "l0_tensor_stepk": ("unknown", "framework-level entry"),       # a whole Cell's backward is not one op
}


def test_every_msprobe_fixture_keeps_its_origin_and_gets_a_cause(msprobe_dumps):
    import json
    for name, root in msprobe_dumps.items():
        expected = json.loads((root / "case.json").read_text())["expected"]
        report = analyze(str(root / "dump"), progress=False)
        assert report.verdict == expected["verdict"], name
        if name not in MSPROBE_CAUSES:
            assert report.first is None, name
            continue
        assert report.first.op_name == expected["op_name"], name
        cause, words = MSPROBE_CAUSES[name]
        assert report.first.cause.cause == cause and words in report.first.cause.reason, (name, report.first.cause)


def test_data_names_the_batch_rows_of_a_bad_graph_input(real_dumps):
    cause = _check_cause(real_dumps["nan_in_batch"], real_dumps.case("nan_in_batch"))
    assert "graph input inputs0" in cause.reason and cause.by == ""
    assert cause.where == "all 12 in batch row 1, sequence positions 1-4 (of 60 values)"
    assert cause.pattern == ""


def test_the_dump_reads_a_tensor_file_once_across_harmless_and_cause(real_dumps, monkeypatch):
    """The Dump holds one step re-read cache and one tensor access: a file the harmless stage (the since-when
    history) and the diagnosis both ask about (the origin SqrtGrad's inputs in step 2 of 3) is opened at most once
    after the walk, and each (rank, step) is read again at most once. (Before: the harmless stage's steps had
    an access of their own, the diagnosis another, each opened the file again.)"""
    import msoverflow.analysis as analysis
    import msoverflow.cause.stage as stage
    import msoverflow.harmless.stage as harmless
    import msoverflow.walk as walk
    from msoverflow import dataflow, evaluate
    from msoverflow.readers import npy
    phase = ["walk"]
    asked, opened, steps_read = collections.defaultdict(set), collections.Counter(), collections.Counter()

    def during(name, fn):
        def run(*args, **kwargs):
            before, phase[0] = phase[0], name
            try:
                return fn(*args, **kwargs)
            finally:
                phase[0] = before
        return run
    monkeypatch.setattr(harmless.EarlyStop, "__call__", during("harmless", harmless.EarlyStop.__call__))
    monkeypatch.setattr(analysis.harmless, "find", during("harmless", harmless.find))
    monkeypatch.setattr(harmless.Harmless, "explain", during("harmless", harmless.Harmless.explain))
    monkeypatch.setattr(stage, "diagnose", during("cause", stage.diagnose))
    real_load, real_runs = npy.load, walk.read_unit_runs

    def question(name):         # what a stage asks of a tensor: its values, its badness, its statistics
        real = getattr(evaluate.TensorAccess, name)

        def ask(self, event):
            if event is not None and phase[0] != "walk":
                asked[event.source].add(phase[0])
            return real(self, event)
        return ask
    for name in ("array", "bad", "stats"):
        monkeypatch.setattr(evaluate.TensorAccess, name, question(name))

    def load(path, *args, **kwargs):
        if phase[0] != "walk":
            opened[path] += 1
        return real_load(path, *args, **kwargs)

    def runs(unit, warn=lambda message: None, ops=None):
        if ops is None and phase[0] != "walk":
            steps_read[(unit.rank, unit.step)] += 1
        return real_runs(unit, warn, ops)
    monkeypatch.setattr(npy, "load", load)
    monkeypatch.setattr(walk, "read_unit_runs", runs)
    caches = set()                 # the StepReads objects that served the stages' step reads

    def served(name):
        real = getattr(dataflow.StepReads, name)

        def serve(self, *args):
            caches.add(id(self))
            return real(self, *args)
        return serve
    for name in ("__call__", "ops_of"):
        monkeypatch.setattr(dataflow.StepReads, name, served(name))
    report = analyze(str(real_dumps["overflow_last_of_three_steps"]), progress=False, jobs=1)
    assert report.first.op_type == "SqrtGrad" and report.first.cause.cause == "precision"
    both = [path for path, stages in asked.items() if stages == {"harmless", "cause"}]
    assert any("SqrtGrad" in path for path in both), dict(asked)     # the two stages ask for the same files
    assert opened and max(opened.values()) == 1, opened.most_common(3)
    assert all(n == 1 for n in steps_read.values()), steps_read
    assert len(caches) == 1
