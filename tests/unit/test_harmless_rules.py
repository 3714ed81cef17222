"""The loss-scale rules on their own (msoverflow/harmless/loss_scale.py), and what an Ascend overflow-only dump lets
them say. The real runs they decide are in tests/real/test_harmless.py; here the steps are written down, to hold the
rules that those runs do not reach: an update applied with the overflow, a scale sitting at its floor, the scale
inferred from magnitudes. The Ascend dump is SPEC-BUILT from the documented formats (tests/support/ascend_fixtures.py)."""
import pytest

from msoverflow.harmless.loss_scale import StepState, _judge_run
from msoverflow.model import OpExecution


def _step(step, *, update=False, scale=None, magnitude=None, op="Cast"):
    ex = OpExecution(rank=0, graph="0", step=step, op_type=op, op_name=f"Gradients_Default_{op}-op0", task_id=0,
                     stream_id=0)
    return StepState(step, bad=[(ex, None)], backward_only=True, first=ex, update=update,
                     update_how="the optimizer's kernels did not run" if update is False else "SGD ran",
                     scale=scale, scale_how="the scale_sense Parameter" if scale else "", magnitude=magnitude)


def _recovered(step):
    return StepState(step)


def _scale_at(scales):
    return lambda step: (scales.get(step), "read" if step in scales else "")


def test_a_calibration_that_recovers_is_handled_with_its_scales():
    run = [_step(0, scale=2.0 ** 24), _step(1, scale=2.0 ** 23)]
    handled, confirmed, note = _judge_run(0, run, [_recovered(2)], _scale_at({2: 2.0 ** 22}))
    assert confirmed and note == ""
    assert (handled.steps, handled.scale_from, handled.scale_to, handled.recovered_at) == ([0, 1], 2.0 ** 24,
                                                                                          2.0 ** 22, 2)


def test_an_update_applied_with_the_overflow_is_a_fault():
    run = [_step(0, scale=2.0 ** 24), _step(1, update=True, scale=2.0 ** 23)]
    _handled, confirmed, note = _judge_run(0, run, [_recovered(2)], _scale_at({}))
    assert not confirmed and note == ""          # a finding, nothing to explain away


def test_an_overflow_that_persists_at_the_scales_floor_is_a_fault():
    run = [_step(0, scale=2.0), _step(1, scale=1.0)]
    _handled, confirmed, note = _judge_run(0, run, [_recovered(2)], _scale_at({}))
    assert not confirmed and "persists while the loss scale sits at its floor (1): a fault" in note


def test_no_recovering_step_and_no_update_evidence_are_said_not_guessed():
    _h, confirmed, note = _judge_run(0, [_step(0, scale=2.0 ** 24)], [], _scale_at({}))
    assert not confirmed and "no later dumped step recovers" in note
    _h, confirmed, note = _judge_run(0, [_step(0, update=None)], [_recovered(1)], _scale_at({}))
    assert not confirmed and "whether step 0's update was skipped is not in the dump" in note


@pytest.mark.parametrize("magnitudes, inferred", [((8e5, 4.1e5, 1.9e5, 1e5), True),       # halving
                                                  ((8e5, 7.9e5, 8.1e5, 8e5), False),      # a fixed scale
                                                  ((8e5, 3e4, 1e3, 40.0), False)])        # falling too fast
def test_a_scale_not_in_the_dump_is_inferred_only_from_magnitudes_that_halve(magnitudes, inferred):
    run = [_step(k, magnitude=m) for k, m in enumerate(magnitudes)]
    handled, confirmed, _note = _judge_run(0, run, [_recovered(len(run))], _scale_at({}))
    assert confirmed and handled.scale_from is None
    assert (handled.scale_how == "inferred") is inferred
    if inferred:
        assert handled.scale_evidence.startswith("inferred, not read: the inputs of Cast shrink by a median x0.")


def test_an_overflow_only_ascend_dump_says_it_cannot_confirm_a_loss_scale(tmp_path):
    """The field case's Opdebug dump (overflow-only: the flagged ops' tensors and nothing else): SqrtGrad's
    overflow is in the backward, but no weights or optimizer kernels are dumped, so whether its update was skipped
    cannot be read; the finding stays and says so."""
    import msoverflow
    from tests.support.ascend_fixtures import build_seed_scenario
    build_seed_scenario(str(tmp_path / "dump"))
    report = msoverflow.analyze(str(tmp_path / "dump"))
    assert (report.verdict, report.first.op_type, report.handled) == ("anomaly", "SqrtGrad", [])
    assert any("whether step 1's update was skipped is not in the dump" in e for e in report.first.evidence)
