"""One judgement per report, harmless only when proven (issue 32), on real MindSpore 2.10 CPU runs of our own
(tests/support/gen_judge_cases.py): each holds a fault that the harmless stage used to excuse (CLEAN, exit 0 on
the code before this change). Each answer is checked in the API and in all four formats."""
import json

import pytest

import msoverflow
from msoverflow.cli import main
from msoverflow.render import render
from msoverflow.render.consistency import check

pytestmark = pytest.mark.mindspore


def _formats(report):
    return {fmt: render(report, fmt) for fmt in ("text", "json", "markdown", "html")}


def _said_everywhere(report, *words):
    out = _formats(report)
    for fmt, text in out.items():
        for word in words:
            assert word in text, f"{fmt} does not say {word!r}"
    return out


# case, first op, step, cause (conclusion), the kind every view says, the rule that decides
EXPECTED = {
    "judge_look_backward": ("MatMul", 0, "precision", "overflow", "cause_precision"),
    "judge_sqrt_zero_row": ("SqrtGrad", 0, "domain", "inf", "cause_domain"),
    "judge_log_clamp": ("Log", 0, "domain", "NaN", "cause_domain"),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_a_fault_the_loss_scale_or_a_clamp_hid_is_an_anomaly_in_every_format(judge_cases, case, capsys):
    op_type, step, cause, kind, rule = EXPECTED[case]
    report = msoverflow.analyze(str(judge_cases[case]), progress=False)
    assert (report.verdict, report.first.op_type, report.first.step) == ("anomaly", op_type, step)
    assert report.handled == [] and report.contained == []          # neither excused nor absorbed
    c = report.conclusion
    assert (c.cause, c.kind, c.rule, c.harmful) == (cause, kind, rule, True)
    assert check(report) == []
    out = _said_everywhere(report, op_type, cause)
    doc = json.loads(out["json"])
    assert doc["verdict"] == "anomaly" and doc["handled"] == [] and doc["contained"] == []
    assert (doc["conclusion"]["cause"], doc["conclusion"]["kind"], doc["conclusion"]["rule"]) == (cause, kind, rule)
    assert out["text"].startswith(f"ANOMALY: {kind} first created by {op_type}")
    assert f"**Anomaly** ({kind})" in out["markdown"]
    assert main(["analyze", str(judge_cases[case]), "--no-progress", "--no-save"]) == 1
    capsys.readouterr()


def test_backward_is_the_graphs_word_not_the_cell_class(judge_cases):
    """The overflowing MatMul sits in a Cell class named LookBackward: the saved graph records no forward node it
    differentiates and it feeds the loss, so it is forward, and the loss scale does not handle it."""
    report = msoverflow.analyze(str(judge_cases["judge_look_backward"]), progress=False)
    assert "LookBackward" in (report.first.full_name or "")
    assert report.first.forward_op is None or report.first.forward_op == "MatMul"
    assert report.conclusion.patch == "precision"


def test_a_zero_denominator_is_no_calibration_even_when_the_next_step_trains(judge_cases):
    """SqrtGrad's x/0 in step 0; the loss-scale cell skipped the update and step 1 trained: a smaller scale does not
    remove a 0 denominator, so it stays the finding (step 1 is still read: the dump has it)."""
    report = msoverflow.analyze(str(judge_cases["judge_sqrt_zero_row"]), progress=False)
    assert report.first.forward_op == "Sqrt" and "0" in report.conclusion.reason
    assert report.conclusion.patch != "precision"


def test_nan_dropped_by_a_clamp_is_not_contained(judge_cases):
    report = msoverflow.analyze(str(judge_cases["judge_log_clamp"]), progress=False)
    strict = msoverflow.analyze(str(judge_cases["judge_log_clamp"]), progress=False, strict=True)
    assert report.contained == [] and strict.first.op_type == "Log"
    assert report.conclusion.patch == "" and not report.conclusion.next_command


def test_a_static_loss_scale_without_an_overflow_check_names_the_skip(judge_cases, tmp_path, capsys):
    """TrainOneStepCell(sens=2^16): the scaled gradient overflows fp16 in the backward and SGD applies it. The fix
    names the overflow check/skip beside the precision fix; no loss scale is named (the dump holds no loss-scale
    Parameter: 2^16 is the sens)."""
    report = msoverflow.analyze(str(judge_cases["judge_static_scale"]), progress=False)
    c = report.conclusion
    assert (report.first.op_type, c.rule, c.cause, c.patch) == ("Cast", "update_applied", "precision", "precision")
    assert "skip it when they are not finite" in c.fix[0] and "float16" in c.fix[1]
    assert report.handled == [] and check(report) == []
    for fmt, text in _formats(report).items():
        assert "skip it when they are not finite" in text, fmt
        assert "loss scale calibrating" not in text and "at its floor" not in text, fmt
    assert main(["analyze", str(judge_cases["judge_static_scale"]), "--no-progress",
                 "--save", str(tmp_path / "r.json")]) == 1
    assert "next: msoverflow patch --from" in capsys.readouterr().err


# ---- the mechanisms of issue 32 that had no run of their own ---------------------------------------------------

def _analyzed_everywhere(dump, *, cli_exit, **options):
    """The report in the API (as the default reads, with --all and with --strict), its consistency, and the exit
    code of the CLI: (default, every-step, strict)."""
    report = msoverflow.analyze(str(dump), progress=False, **options)
    every = msoverflow.analyze(str(dump), progress=False, scan_all=True, **options)
    strict = msoverflow.analyze(str(dump), progress=False, strict=True, **options)
    assert check(report) == [] and check(every) == [] and check(strict) == []
    flags = ["--finished"] if options.get("finished") else []
    assert main(["analyze", str(dump), "--no-progress", "--no-save", *flags]) == cli_exit
    return report, every, strict


def test_an_inner_gradient_in_the_loss_is_forward_not_calibration(judge_cases, capsys):
    """A physics-informed loss holds du/dx (an inner GradOperation): its float16 MatMul runs under a Gradients/ scope
    but feeds the loss, which is inf at step 1. The loss scale skips step 1 and step 2 trains, as a calibration
    would: still a forward fault, never 'handled by the loss scale'."""
    report, every, strict = _analyzed_everywhere(judge_cases["judge_inner_grad"], cli_exit=1)
    for r in (report, every, strict):
        assert (r.verdict, r.first.op_type, r.first.step) == ("anomaly", "MatMul", 1)
        assert r.first.full_name.startswith("Gradients/") and "PhysicsInformedLoss" in r.first.full_name
        assert r.first.inner_gradient
    assert report.handled == [] and every.handled == []
    c = report.conclusion
    assert (c.harmful, c.kind, c.cause, c.rule) == (True, "overflow", "precision", "cause_precision")
    out = _said_everywhere(report, "MatMul", "precision")
    for fmt, text in out.items():
        assert "calibrating" not in text and "Handled by the loss scale" not in text, fmt
        # named as the gradient it is, run in the forward: never "(backward of MatMul)"
        assert "backward of MatMul" not in text, fmt
    assert "MatMul (gradient of MatMul, taken in the forward)" in out["text"]
    assert json.loads(out["json"])["conclusion"]["cause"] == "precision"
    assert json.loads(out["json"])["first"]["inner_gradient"] is True
    capsys.readouterr()


def test_a_nan_in_the_batch_that_a_max_pool_drops_is_data_not_contained(judge_cases, capsys):
    """ops.max over the sequence (ArgMaxWithValue) passes over a NaN that is not first in its window: everything
    after it is finite, and the NaN is still bad data."""
    report, every, strict = _analyzed_everywhere(judge_cases["judge_maxpool_nan"], cli_exit=1)
    for r in (report, every):
        assert (r.verdict, r.first.step, r.contained, r.handled) == ("anomaly", 0, [], [])
        assert (r.conclusion.cause, r.conclusion.kind, r.conclusion.harmful) == ("data", "NaN", True)
        assert [row.status for row in r.rank_status] == ["origin"]          # its own data: never "received"
        assert not any("dump without filters" in w for w in r.warnings)
    assert strict.conclusion.cause == "data" and strict.contained == []
    c = report.conclusion
    assert "data pipeline" in c.fix[0] and not any("earlier step" in f for f in c.fix)  # the batch is step 0's
    out = _said_everywhere(report, "data", "NaN", "data pipeline")
    for fmt, text in out.items():
        assert "Contained (" not in text and "Dump from an earlier step" not in text, fmt
    assert "received" not in out["text"] and "received" not in out["markdown"]   # HTML's stylesheet names the class
    doc = json.loads(out["json"])
    assert (doc["conclusion"]["cause"], doc["contained"]) == ("data", [])
    # no op made it: the batch is first seen as the graph input, never "created by Parameter"
    assert out["text"].startswith("ANOMALY: NaN first seen in Parameter inputs0")
    assert "first seen in **Parameter inputs0**" in out["markdown"] and "first created by" not in out["html"]
    capsys.readouterr()


def _plant_nan(dump, step: int, op_name_contains: str) -> dict:
    """EDIT of a real dump: one value of the op's output 0 at `step` becomes a NaN by setting its exponent bits
    (a value with a non-zero mantissa, so NaN and not inf), as a device fault would leave it; every tensor of that
    step holding the same values (its consumers' inputs) gets the same NaN. Returns what was edited."""
    import numpy as np

    from tests.support.gen_real_dumps import iter_tensor_files
    files = [t for t in iter_tensor_files(dump) if t.iteration == step]
    source = next(t for t in files if op_name_contains in t.op_name and t.io == "output" and t.slot == 0)
    original = np.load(source.path)
    index = int(np.flatnonzero((original != 0) & np.isfinite(original))[0])
    poisoned = original.copy()
    poisoned.reshape(-1)[index] = np.nan
    edited = []
    for t in files:
        array = np.load(t.path)
        if array.dtype == original.dtype and array.shape == original.shape and np.array_equal(array, original):
            np.save(t.path, poisoned)
            edited.append(t.path.name)
    return {"element": index, "original": float(original.reshape(-1)[index]), "files": edited}


def test_a_device_nan_in_a_backward_matmul_under_a_loss_scale_is_device(judge_cases, tmp_path, capsys):
    """EDITED copy of a real run (judge_device_skip): that run's overflow check was told at step 0 that the gradients
    are not finite, so the loss-scale cell really skipped step 0's update and halved the scale, and step 1 trained,
    as it does for a NaN in a gradient. Here the copy gets that NaN: one value of the weight gradient's backward
    MatMul (and its consumers' inputs), whose finite float16 inputs recompute finite. Cause device; never 'an
    overflow at loss scale 2^10; updates skipped', never CLEAN."""
    from tests.support.fixture_runs import copy_dump
    dump = copy_dump(judge_cases["judge_device_skip"], tmp_path)
    edits = _plant_nan(dump, 0, "first-LookBackward_dense-Dense_Grad_MatMul_MatMul-op1")
    assert len(edits["files"]) >= 2                        # the MatMul's output and a consumer's input
    report, every, strict = _analyzed_everywhere(dump, cli_exit=1, finished=True)
    for r in (report, every, strict):
        assert (r.verdict, r.first.op_type, r.first.step, r.handled) == ("anomaly", "MatMul", 0, [])
        assert (r.conclusion.cause, r.conclusion.kind, r.conclusion.rule) == ("device", "NaN", "cause_device")
    assert report.first.full_name.startswith("Gradients/") and report.conclusion.patch == ""
    out = _said_everywhere(report, "MatMul", "device", "NaN")
    for fmt, text in out.items():
        assert "updates skipped" not in text and "calibrating" not in text and "loss scale 2^" not in text, fmt
    assert out["text"].startswith("ANOMALY: NaN first created by MatMul")
    capsys.readouterr()


def test_a_forward_fault_inside_the_calibration_is_the_origin(judge_cases, capsys):
    """Dynamic loss scale from 2^24: steps 0-7 calibrate (backward overflows, updates skipped) and step 8 recovers;
    step 3's batch overflows the forward. The origin is step 3's MatMul, not step 0's calibration Cast, and the
    later steps in the dump are read, so nothing says 'no later dumped step recovers'."""
    report, every, strict = _analyzed_everywhere(judge_cases["judge_calibrating_forward"], cli_exit=1)
    for r in (report, every):
        assert (r.verdict, r.first.op_type, r.first.step, r.first.role) == ("anomaly", "MatMul", 3, "origin")
        assert "fc1-Dense" in r.first.full_name and r.conclusion.harmful
        assert 3 not in [s for h in r.handled for s in h.steps] and r.handled
        assert all(h.recovered_at == 8 for h in r.handled)
        # each run's scale runs to where it left it (steps 0-2 halve 2^24 to 2^21, which step 3 ran with), never
        # to the scale step 8 recovered at (it said 2^24 -> 2^16 for steps 0-2)
        assert [(h.steps[0], h.scale_from, h.scale_to) for h in r.handled] == [(0, 2.0 ** 24, 2.0 ** 21),
                                                                               (4, 2.0 ** 20, 2.0 ** 16)]
    assert (strict.first.op_type, strict.first.step) == ("Cast", 0)        # --strict: the calibration is a finding
    for r in (report, every, strict):
        assert not any("no later dumped step recovers" in e for f in r.anomalies for e in f.evidence)
    out = _said_everywhere(report, "MatMul", "calibrating")
    for fmt, text in out.items():
        assert "no later dumped step recovers" not in text and "dump later steps" not in text, fmt
    doc = json.loads(out["json"])
    assert (doc["first"]["op_type"], doc["first"]["iteration"]) == ("MatMul", 3)
    capsys.readouterr()
