"""The decision between causes on SYNTHETIC npy dumps (tests/support/synth_dump.py): the edges the real fixtures do not
reach (a float16 recompute near the limit, a zero denominator that is not a count, statistics only, an Opdebug flag
alone). The real cases are in test_diagnosis_real.py."""
import numpy as np

from msoverflow.analysis import analyze
from msoverflow.cause.cause import diagnose
from msoverflow.evaluate import TensorAccess
from msoverflow.walk import read_unit, units
from tests.support.synth_dump import SynthDump

F16, F32 = np.float16, np.float32


def _first_cause(tmp_path, build):
    dump = SynthDump(str(tmp_path / "d"))
    build(dump)
    report = analyze(str(tmp_path / "d"), progress=False)
    assert report.first is not None
    return report.first.cause


def test_an_inf_whose_float16_recompute_is_small_is_a_device_fault(tmp_path):
    cause = _first_cause(tmp_path, lambda d: d.op(0, "Mul", "Default_Mul-op0",
                                                 [np.array([2, 3], F16), np.array([3, 4], F16)],
                                                 [np.array([6, np.inf], F16)]))
    assert cause.cause == "device" and "finite values where the dump holds 1 +inf" in cause.reason
    assert [r.dtype for r in cause.recompute] == ["float16", "float32", "float64"]
    assert cause.samples[0].recomputed["float16"] == 12.0


def test_near_the_float16_limit_the_recompute_does_not_prove_a_device_fault(tmp_path):
    """250 * 250 = 62500 fits float16, but a kernel that orders its arithmetic differently can overflow there."""
    cause = _first_cause(tmp_path, lambda d: d.op(0, "Mul", "Default_Mul-op0",
                                                 [np.array([250, 3], F16), np.array([250, 4], F16)],
                                                 [np.array([np.inf, 12], F16)]))
    assert cause.cause == "precision" and "near its max" in cause.reason


def test_a_float16_overflow_the_recompute_makes_is_precision(tmp_path):
    cause = _first_cause(tmp_path, lambda d: d.op(0, "Exp", "Default_Exp-op0", [np.array([12.0, 1.0], F16)],
                                                 [np.array([np.inf, 2.719], F16)]))
    assert cause.cause == "precision" and cause.pattern == "overflow"
    by = {r.dtype: r for r in cause.recompute}
    assert not by["float16"].finite and by["float32"].max_abs > 65504 and by["float16"].agrees


def test_beyond_float32_is_domain_not_precision(tmp_path):
    cause = _first_cause(tmp_path, lambda d: d.op(0, "Exp", "Default_Exp-op0", [np.array([100.0, 1.0], F16)],
                                                 [np.array([np.inf, 2.719], F16)]))
    assert cause.cause == "domain" and "beyond float32" in cause.reason


def test_a_zero_denominator_that_is_not_a_count_is_domain(tmp_path):
    """No saved graph says where the zero came from: 0/0 is a domain fault, not a zero-token batch."""
    cause = _first_cause(tmp_path, lambda d: d.op(0, "RealDiv", "Default_RealDiv-op0",
                                                 [np.array([0.0, 1.0], F32), np.array([0.0, 2.0], F32)],
                                                 [np.array([np.nan, 0.5], F32)]))
    assert cause.cause == "domain" and cause.reason.startswith("0/0 in every dtype")


def test_a_float32_op_overflowing_float32_is_domain(tmp_path):
    cause = _first_cause(tmp_path, lambda d: d.op(0, "Sub", "Default_Sub-op0",
                                                 [np.array([3e38, 1.0], F32), np.array([-3e38, 1.0], F32)],
                                                 [np.array([np.inf, 0.0], F32)]))
    assert cause.cause == "domain" and "6e+38" in cause.reason


def test_an_op_without_inputs_in_the_dump_is_unknown(tmp_path):
    cause = _first_cause(tmp_path, lambda d: d.op(0, "Exp", "Default_Exp-op0", [],
                                                 [np.array([np.inf, 2.719], F16)]))
    assert cause.cause == "unknown" and "not dumped" in cause.reason


def test_an_op_with_no_bad_output_says_so(tmp_path):
    dump = SynthDump(str(tmp_path / "d"))
    dump.op(0, "Exp", "Default_Exp-op0", [np.array([1.0], F32)], [np.array([2.718], F32)])
    ex = read_unit(units(str(tmp_path / "d"))[0]).executions[0]
    cause = diagnose(ex, TensorAccess(lambda message: None), mindspore=False)
    assert cause.cause == "unknown" and "no bad value" in cause.reason


def test_transpose_flags_nobody_gave_are_never_guessed(tmp_path):
    """An Ascend-style dump: MatMul's inputs only, no flag inputs and no saved graph. Only transpose_b fits these
    shapes, but square ones fit several (issue 32): flags the dump does not hold are never guessed."""
    a = np.full((2, 3), 200.0, F16)
    b = np.full((4, 3), 100.0, F16)
    out = np.full((2, 4), 60000.0, F16)
    out[1, 2] = np.inf
    cause = _first_cause(tmp_path, lambda d: d.op(0, "MatMul", "Default_MatMul-op0", [a, b], [out]))
    assert cause.cause == "unknown" and cause.by == ""
    assert "transpose_a and transpose_b flags are in neither the dump nor a saved graph" in cause.reason
    assert "never guessed from shapes" in cause.reason


def test_a_tensor_that_fails_to_read_during_diagnosis_is_a_warning(tmp_path, monkeypatch):
    import msoverflow.cause.stage as stage
    dump = SynthDump(str(tmp_path / "d"))
    dump.op(0, "Exp", "Default_Exp-op0", [np.array([12.0, 1.0], F16)], [np.array([np.inf, 2.719], F16)])

    def vanished(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")
    monkeypatch.setattr(stage, "diagnose_op", vanished)
    report = analyze(str(tmp_path / "d"), progress=False)
    assert report.first.cause.cause == "unknown" and "FileNotFoundError" in report.first.cause.reason
    assert any("its cause could not be found" in w for w in report.warnings)
    assert report.verdict == "anomaly"


def test_an_output_too_large_to_hold_is_unknown_and_says_so(tmp_path, monkeypatch):
    import msoverflow.cause.cause as cause_module
    monkeypatch.setattr(cause_module, "MAX_ELEMENTS", 1)
    cause = _first_cause(tmp_path, lambda d: d.op(0, "Exp", "Default_Exp-op0", [np.array([12.0, 1.0], F16)],
                                                 [np.array([np.inf, 2.719], F16)]))
    assert cause.cause == "unknown" and "more than the 1 recomputed" in cause.reason


def test_diagnose_is_a_stage_that_hands_on_a_new_decision(tmp_path, monkeypatch):
    """analysis.analyze() runs the diagnosis between settle and assemble: it is handed the decision and returns a
    new one whose origin carries its cause and the advice that follows it; the finding it was handed is left as
    it was. A clean dump never reaches it."""
    import msoverflow.cause.stage as stage
    seen = []
    real = stage.diagnose

    def recording(decision, *args, **kwargs):
        seen.append((decision, real(decision, *args, **kwargs)))
        return seen[-1][1]
    monkeypatch.setattr(stage, "diagnose", recording)
    dump = SynthDump(str(tmp_path / "d"))
    dump.op(0, "Mul", "Default_Mul-op0", [np.array([2, 3], F16), np.array([3, 4], F16)], [np.array([6, np.inf], F16)])
    report = analyze(str(tmp_path / "d"), progress=False)
    (handed, returned), = seen
    assert handed.first.cause is None and "float32" in handed.first.recommendation
    assert returned.first is report.first and report.first.cause.cause == "device"
    assert report.anomalies[0] is report.first                   # one finding, replaced everywhere it stood
    assert report.first.recommendation != handed.first.recommendation    # a device fault gets no precision fix
    clean = SynthDump(str(tmp_path / "clean"))
    clean.op(0, "Mul", "Default_Mul-op0", [np.array([2, 3], F16)] * 2, [np.array([4, 9], F16)])
    assert analyze(str(tmp_path / "clean"), progress=False).verdict == "clean" and len(seen) == 1


def test_a_bad_value_no_dumped_op_made_asks_for_a_dump_without_filters(tmp_path):
    """The first bad op read its NaN from an op the dump does not hold (a kernel filter): the one advice that helps
    is to dump without filters, given once the diagnosis found no other maker (a weight changed in memory is one)."""
    dump = SynthDump(str(tmp_path / "d"))
    dump.op(0, "Exp", "Default_Exp-op0", [np.array([np.nan, 1.0], F32)], [np.array([np.nan, 2.718], F32)])
    report = analyze(str(tmp_path / "d"), progress=False)
    assert report.first is not None and report.first.op_type == "Exp"
    assert any("was not dumped" in line for line in report.first.evidence)
    assert [w for w in report.warnings if "dump without filters" in w] == [
        "no dumped op created the first bad value: it is first seen as an input; dump without filters"]
