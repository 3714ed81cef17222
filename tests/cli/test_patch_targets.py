"""Targets from a report or the command line, and the CLI's input errors (no MindSpore needed)."""
import json

import pytest

from msoverflow import cli
from msoverflow.errors import UserError
from msoverflow.patch.targets import Target, path_matches, target_from_args, target_from_report
from tests.support.patch_reports import DEMO_MODEL, hand_report, write_report


def test_report_target_is_the_owning_cell_with_its_source_line():
    target = target_from_report(hand_report())
    assert target.scope == "cell"
    assert (target.cell, target.cell_type) == ("network._backbone.lm_head", "NormHead")
    assert target.source.file == str(DEMO_MODEL) and target.source.code.startswith("norm = self.sqrt")
    assert target.describe() == "Cell network._backbone.lm_head (NormHead)"


def test_op_only_target_widens_to_the_reports_cell():
    target = target_from_args(op="Sqrt", report=hand_report())
    assert target.scope == "op" and target.op == "Sqrt"
    wider = target.widened()
    assert wider.scope == "cell" and wider.cell == "network._backbone.lm_head"
    with pytest.raises(UserError, match="cannot widen"):
        Target(op="Sqrt").widened()


def test_cell_type_versus_path():
    assert Target(cell="NormHead").cell_is_type
    assert not Target(cell="lm_head").cell_is_type
    assert not Target(cell="network._backbone.lm_head").cell_is_type


def test_path_suffix_matching_across_roots():
    # the report's path starts at TrainOneStepCell; the user may hand us the backbone
    assert path_matches("network._backbone.lm_head", "lm_head") == 1
    assert path_matches("network._backbone.lm_head", "network._backbone.lm_head") == 3
    # a sibling layer shares only the last name; find_cells keeps the longest match (layers.0.mlp)
    assert path_matches("network._backbone.layers.0.mlp", "layers.1.mlp") == 1
    assert path_matches("network._backbone.layers.0.mlp", "layers.0.mlp") == 3
    assert path_matches("network._backbone.lm_head", "norm") == 0


def test_clean_report_has_nothing_to_patch(tmp_path, capsys):
    report = {"schema_version": 1, "verdict": "clean", "first": None, "anomalies": [], "warnings": []}
    path = tmp_path / "clean.json"
    path.write_text(json.dumps(report))
    assert cli.main(["patch", "--from", str(path)]) == 0
    assert "nothing to patch" in capsys.readouterr().out
    with pytest.raises(UserError, match="no anomaly"):
        target_from_report(report)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a JSON analysis report"),
    ('{"some": "thing"}', "not an msoverflow analysis report"),
])
def test_bad_report_is_one_line_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "r.json"
    path.write_text(content)
    assert cli.main(["patch", "--from", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err


def test_cli_argument_errors(tmp_path, capsys):
    report = write_report(tmp_path, hand_report())
    assert cli.main(["patch", "--from", str(report), "--verify"]) == 2
    assert "needs a command after '--'" in capsys.readouterr().err
    assert cli.main(["patch", "--from", str(report), "--", "python", "x.py"]) == 2
    assert "only used with --verify" in capsys.readouterr().err
    assert cli.main(["patch"]) == 2
    assert "nothing to patch" in capsys.readouterr().err
    assert cli.main(["patch", "--cell", "a b"]) == 2
    assert "--cell" in capsys.readouterr().err
    assert cli.main(["patch", "--from", str(report), "--how", "source", "--verify", "--", "python", "x.py"]) == 2
    assert "add --write" in capsys.readouterr().err


def test_verify_reads_loss_and_parameter_finiteness_from_common_log_lines():
    import math

    from msoverflow.job import OutputWatch
    watch = OutputWatch()
    for line in ("step 0: loss 226.9761 params finite: True",          # msoverflow.demo.train
                 "epoch: 1 step: 1, loss is 2.302585",                  # mindspore.train.LossMonitor
                 "loss: [nan]",
                 "step 2: scaled loss inf grads finite: False",
                 "lossy 5",
                 "step 3: loss 1.0 params finite: False"):
        watch.feed(line)
    losses, finite = watch.loss_values, watch.params_finite
    assert losses[:2] == [226.9761, 2.302585] and math.isnan(losses[2]) and losses[3] == math.inf
    assert losses[4:] == [1.0]
    assert finite == [True, False]
    assert [loss.step for loss in watch.losses] == [0, 1, None, 2, 3]
    assert watch.first_nonfinite.line == "loss: [nan]"


@pytest.mark.parametrize("role", ["flagged", "propagator"])
def test_unproven_first_finding_is_not_patched_unless_named(role):
    """A hardware flag alone, or the first place a bad value was seen, is not a proven origin: patching there
    could miss the real one. An explicit --cell/--op still works."""
    report = hand_report()
    report["first"]["role"] = role
    with pytest.raises(UserError, match="not a proven origin"):
        target_from_report(report)
    assert target_from_args(cell="network._backbone.lm_head", report=report).cell == "network._backbone.lm_head"
