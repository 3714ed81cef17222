"""Non-finite values that are no fault, on REAL MindSpore 2.10 CPU runs (tests/support/cases/realdump/):
  - causal_mask_softmax: ops.masked_fill(scores, causal, -inf) before Softmax, fp32, two steps -> CLEAN, contained;
  - loss_scale_calibration_fp16: a dynamic loss scale from 2^24 whose steps 0-7 overflow in the backward and are
    skipped -> CLEAN, handled, the scale read from the dump;
  - loss_scale_then_forward_overflow: the same loop with a forward overflow at step 10 -> ANOMALY at step 10, the
    calibration listed, not blamed;
  - lr_warmup_divergence: weights growing for 27 steps before an fp16 MatMul overflows -> since when: the growth.
Copies of those dumps edited here (labelled: files removed as a narrower dump config or a shorter run leaves them,
or turned into their statistic.csv form; never edited by hand) show what the evidence must be: without the
absorber's files, the saved graph or a recovering step the answer is not clean; without the optimizer's kernels
the unchanged weights show the skipped updates; without the scale in the dump it is inferred, and said so."""
import html
import json
import os
import re
import shutil

import pytest

import msoverflow
from msoverflow.cli import main
from msoverflow.commands import analyze as analyze_command
from msoverflow.render import render
from tests.support import gen_real_dumps as gen
from tests.support.ascend_fixtures import statistics_form
from tests.support.fixture_runs import copy_dump

pytestmark = pytest.mark.mindspore
SCHEMA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema", "report.schema.json")
MASK = "MaskedFill in network._backbone.attn (CausalSelfAttention): -inf, absorbed by Softmax"
CALIBRATING = "steps 0-7: the dynamic loss scale calibrating (2^24 -> 2^16); updates skipped; not a fault"
FORMATS = ("text", "markdown", "json", "html")


def _rendered(report) -> dict:
    """Every format, as a reader sees it (markdown's and HTML's escapes undone), and the JSON checked against the
    schema."""
    import jsonschema
    out = {fmt: render(report, fmt) for fmt in FORMATS}
    out["markdown"] = out["markdown"].replace("\\_", "_").replace("\\|", "|").replace("&gt;", ">")
    out["html"] = html.unescape(out["html"])
    jsonschema.validate(json.loads(out["json"]), json.load(open(SCHEMA)))
    return out


def _cli(dump, *options) -> int:
    return main(["analyze", str(dump), "--no-progress", "--no-save", *options])


# ---- the three cases of the issue ----------------------------------------------------------------------------

def test_a_causal_mask_is_clean_with_a_contained_section(real_dumps, capsys):
    dump = real_dumps["causal_mask_softmax"]
    report = msoverflow.analyze(str(dump))
    assert (report.verdict, report.first, report.anomalies) == ("clean", None, [])
    [contained] = report.contained
    assert (contained.op_type, contained.value, contained.absorbed_by, contained.steps) == (
        "MaskedFill", "-inf", ["Softmax"], [0, 1])
    assert contained.cell_type == "CausalSelfAttention" and contained.cell.endswith(".attn")
    assert 'masked_fill(scores, self.causal, float("-inf"))' in contained.source.code
    assert "input 2 of MaskedFill is a constant of the program" in contained.evidence
    assert [row.status for row in report.rank_status] == ["clean"]
    out = _rendered(report)
    for fmt in ("text", "markdown", "html"):
        assert MASK in out[fmt], fmt
        assert "no fault in" in out[fmt] and "no inf, NaN" not in out[fmt], fmt
    assert json.loads(out["json"])["contained"][0]["absorbed_by"] == ["Softmax"]
    assert _cli(dump) == 0
    headline = capsys.readouterr().out.splitlines()[0]
    assert headline.startswith("CLEAN: no fault in the outputs of ") and "read from 402 file(s)" in headline, headline


def test_a_loss_scale_calibrating_is_clean_with_the_steps_and_the_scale_it_read(real_dumps):
    dump = real_dumps["loss_scale_calibration_fp16"]
    report = msoverflow.analyze(str(dump))
    assert (report.verdict, report.first) == ("clean", None)
    assert report.scanned_steps == {0: list(range(12))}      # the walk read on past the overflowing steps
    [handled] = report.handled
    assert (handled.ranks, handled.steps, handled.recovered_at) == ([0], list(range(8)), 8)
    assert (handled.scale_from, handled.scale_to, handled.scale_how) == (2.0 ** 24, 2.0 ** 16, "read")
    assert handled.scale_evidence.startswith("the scale_sense Parameter as ")
    assert handled.skipped_how == "the optimizer's kernels did not run (they ran in steps 8-11)"
    assert handled.ops[0] == "Cast"
    out = _rendered(report)
    for fmt in ("text", "markdown", "html"):
        assert CALIBRATING + " (rank 0)" in out[fmt], fmt
        assert "scale read from the scale_sense Parameter" in out[fmt], fmt
    [data] = json.loads(out["json"])["handled"]
    assert (data["steps"], data["scale_from"], data["scale_to"], data["scale_how"]) == (
        list(range(8)), 2.0 ** 24, 2.0 ** 16, "read")
    assert _cli(dump) == 0


def test_a_forward_overflow_after_the_calibration_is_the_first_harmful_origin(real_dumps, capsys):
    dump = real_dumps["loss_scale_then_forward_overflow"]
    report = msoverflow.analyze(str(dump))
    first = report.first
    assert (report.verdict, first.op_type, first.step, first.role) == ("anomaly", "MatMul", 10, "origin")
    assert "fc1-Dense" in first.full_name and first.cell_type == "Dense"
    assert all(f.step >= 10 for f in report.anomalies)      # the calibration is listed, never blamed
    assert report.scanned_steps == {0: list(range(11))}         # read past the calibration, stopped after step 10
    [handled] = report.handled
    assert (handled.steps, handled.scale_from, handled.scale_to) == (list(range(8)), 2.0 ** 24, 2.0 ** 16)
    history = first.history
    assert "jumped at this step" in history.summary and not history.earlier_cause
    data = {s.name: s for s in history.series}
    assert (data["inputs0"].kind, data["inputs0"].trend, data["inputs0"].since) == ("graph input", "jump", 10)
    assert (data["fc1.weight"].kind, data["fc1.weight"].trend) == ("parameter", "steady")
    out = _rendered(report)
    assert out["text"].startswith("ANOMALY: overflow first created by MatMul in network._backbone.fc1 (Dense)")
    for fmt in ("text", "markdown", "html"):
        assert CALIBRATING in out[fmt] and "Since when" in out[fmt], fmt
    data = json.loads(out["json"])
    assert (data["first"]["op_type"], data["first"]["iteration"], data["handled"][0]["steps"]) == (
        "MatMul", 10, list(range(8)))
    assert data["first"]["history"]["series"]
    assert _cli(dump) == 1
    capsys.readouterr()


def test_strict_reports_contained_and_handled_values_as_anomalies(real_dumps, capsys):
    mask, calibration = real_dumps["causal_mask_softmax"], real_dumps["loss_scale_calibration_fp16"]
    strict_mask = msoverflow.analyze(str(mask), strict=True)
    assert (strict_mask.verdict, strict_mask.first.op_type, strict_mask.strict) == ("anomaly", "MaskedFill", True)
    assert [c.op_type for c in strict_mask.contained] == ["MaskedFill"]     # still said what it is
    assert "Contained (1: absorbed with finite outputs" in render(strict_mask, "text")
    assert "(reported as findings: --strict)" in render(strict_mask, "text")
    assert json.loads(render(strict_mask, "json"))["strict"] is True
    strict_calibration = msoverflow.analyze(str(calibration), strict=True)
    assert (strict_calibration.verdict, strict_calibration.first.op_type, strict_calibration.first.step) == (
        "anomaly", "Cast", 0)
    assert _cli(mask, "--strict") == 1 and _cli(calibration, "--strict") == 1
    assert _cli(mask) == 0
    capsys.readouterr()
    # run hands --strict (its own, or analyze's through --analyze-arg) to its analysis
    from msoverflow.commands.run import _with_analysis_args
    for options, strict in ((["--strict"], True), ([], False), (["--analyze-arg=--strict"], True)):
        assert analyze_command.options(_with_analysis_args(_run_args(*options))[1]).strict is strict, options


# ---- data parallel: a rank that only receives a handled overflow ---------------------------------------------

def test_a_rank_that_only_receives_a_handled_overflow_through_the_allreduce_is_handled(multirank_dumps, capsys):
    """msrun, 2 ranks, data parallel, a dynamic loss scale from 2^24; rank 1's gradients are 64x larger, so steps
    8-11 overflow on rank 1 only and rank 0 receives them through the gradient AllReduce. Every rank skips steps
    0-11 and recovers at step 12: clean on every rank, rank 0's received steps named."""
    dump = multirank_dumps["dp2_loss_scale_calibrating"]
    report = msoverflow.analyze(str(dump))
    assert (report.verdict, report.first, report.anomalies) == ("clean", None, [])
    [handled] = report.handled
    assert (handled.ranks, handled.steps, handled.recovered_at) == ([0, 1], list(range(12)), 12)
    assert (handled.scale_from, handled.scale_to, handled.scale_how) == (2.0 ** 24, 2.0 ** 12, "read")
    assert handled.received == {0: [8, 9, 10, 11]}
    assert "rank 0 only received the overflow of steps 8-11 through AllReduce, from rank 1, where it is handled" \
        in handled.evidence
    assert report.scanned_steps == {0: list(range(16)), 1: list(range(16))}
    out = _rendered(report)
    for fmt in ("text", "markdown", "html"):
        assert "steps 0-11: the dynamic loss scale calibrating (2^24 -> 2^12); updates skipped; not a fault " \
               "(ranks 0,1)" in out[fmt], fmt
        assert "rank 0 only received the overflow of steps 8-11 through a collective" in out[fmt], fmt
    assert json.loads(out["json"])["handled"][0]["received"] == {"0": [8, 9, 10, 11]}
    assert _cli(dump) == 0
    # --strict: every overflow is a finding again, rank 0's received steps among them
    strict = msoverflow.analyze(str(dump), strict=True)
    assert (strict.verdict, strict.first.step, strict.first.op_type) == ("anomaly", 0, "Cast")
    assert {f.rank for f in strict.anomalies} == {0, 1}
    capsys.readouterr()


def test_a_received_overflow_whose_sender_was_not_dumped_is_not_called_handled(multirank_dumps, tmp_path):
    """The same run with rank 1's files gone: rank 0's steps 8-11 came through the AllReduce from a rank the dump
    does not hold, so nothing confirms a loss scale handled them; the finding stays and says why."""
    dump = copy_dump(multirank_dumps["dp2_loss_scale_calibrating"], tmp_path)
    shutil.rmtree(dump / "rank_1")
    report = msoverflow.analyze(str(dump), finished=True)
    assert (report.verdict, report.first.rank, report.handled) == ("anomaly", 0, [])
    assert any(e.startswith("the bad values of steps 8-11 arrived through AllReduce from another rank whose "
                            "overflow there is not confirmed handled") for e in report.first.evidence)


def _run_args(*options):
    import argparse

    from msoverflow.commands import run
    parser = argparse.ArgumentParser()
    run.register(parser.add_subparsers())
    return parser.parse_args(["run", *options, "--", "true"])


def test_since_when_names_the_growing_weights_as_training_dynamics(real_dumps):
    report = msoverflow.analyze(str(real_dumps["lr_warmup_divergence"]))
    first = report.first
    assert (first.op_type, first.step) == ("MatMul", 37)
    history = first.history
    assert history.earlier_cause
    assert re.match(r"fc\.weight max \|w\| 0\.\d+ at step 0 -> 3\.1e\+04 at step 37, growing from step 1[01]: "
                    r"training dynamics \(learning rate, clipping\), not this op's precision$", history.summary)
    weight = next(s for s in history.series if s.name == "fc.weight")
    assert (weight.kind, weight.trend) == ("parameter", "growing") and weight.steps == list(range(38))
    out = _rendered(report)
    for fmt in ("text", "markdown", "html"):
        assert history.summary in out[fmt], fmt
    svg = re.search(r'<svg id="history-svg".*?</svg>', render(report, "html"), re.S).group(0)
    assert "fc.weight (parameter)" in svg and "mathdefault" not in svg and ">10000<" in svg
    assert json.loads(out["json"])["first"]["history"]["earlier_cause"] is True


# ---- what the evidence must be: edited copies of the real dumps ----------------------------------------------

def _remove(dump, wanted) -> int:
    """Remove the files whose name `wanted(name)` picks, in every step; how many went."""
    gone = 0
    for root, _dirs, files in os.walk(dump):
        for name in files:
            if wanted(name):
                os.remove(os.path.join(root, name))
                gone += 1
    return gone


def test_without_the_absorbers_outputs_the_mask_is_not_contained(real_dumps, tmp_path):
    dump = copy_dump(real_dumps["causal_mask_softmax"], tmp_path)
    assert _remove(dump, lambda name: name.startswith("Softmax.") and ".output." in name) == 2
    report = msoverflow.analyze(str(dump), finished=True)
    assert report.verdict != "clean" and report.contained == []


def test_without_a_saved_graph_the_mask_is_not_contained(real_dumps, tmp_path):
    dump = copy_dump(real_dumps["causal_mask_softmax"], tmp_path)
    shutil.rmtree(dump / "rank_0" / "graphs")
    report = msoverflow.analyze(str(dump), finished=True)
    assert report.verdict == "anomaly" and report.first.op_type == "MaskedFill" and report.contained == []


def test_a_calibration_the_dump_ends_in_is_not_called_handled(real_dumps, tmp_path):
    """Steps 0-3 only (a run stopped early): the overflows look like a loss scale calibrating, but no step shows
    it recovering, so they stay findings and say why."""
    dump = copy_dump(real_dumps["loss_scale_calibration_fp16"], tmp_path)
    for graph in (dump / "rank_0" / "Net").iterdir():
        for step in graph.iterdir():
            if int(step.name) > 3:
                shutil.rmtree(step)
    report = msoverflow.analyze(str(dump), finished=True)
    assert (report.verdict, report.first.op_type, report.first.step, report.handled) == (
        "anomaly", "Cast", 0, [])
    assert any("no later dumped step recovers: dump later steps to tell calibration from a fault" in e
               for e in report.first.evidence)


def test_without_the_optimizers_kernels_unchanged_weights_show_the_skipped_updates(real_dumps, tmp_path):
    """The optimizer's graph not dumped (a kernel list without it): the weights as the step's ops read them and as
    dumped after it are equal in the skipped steps."""
    dump = copy_dump(real_dumps["loss_scale_calibration_fp16"], tmp_path)
    shutil.rmtree(dump / "rank_0" / "Net" / "2")
    report = msoverflow.analyze(str(dump), finished=True)
    assert report.verdict == "clean"
    [handled] = report.handled
    assert handled.steps == list(range(8)) and handled.scale_how == "read"
    assert handled.skipped_how.startswith("the weights and optimizer state are unchanged by the step")


def test_a_scale_the_dump_does_not_hold_is_inferred_and_said_so(real_dumps, tmp_path):
    """The loss-scale cell's kernels, the scale Parameter and the ops reading it left out (as a kernel list that
    names the network and the optimizer only): the scale is inferred from magnitudes that shrink step by step."""
    dump = copy_dump(real_dumps["loss_scale_calibration_fp16"], tmp_path)
    readers = ("loss_scaling_manager", "Default_Reciprocal-op0", "Grad_ReduceMean_Reshape", "Parameter.scale_sense.")
    assert _remove(dump, lambda name: any(word in name for word in readers))
    report = msoverflow.analyze(str(dump), finished=True)
    assert report.verdict == "clean"
    [handled] = report.handled
    assert (handled.steps, handled.scale_how, handled.scale_from) == (list(range(8)), "inferred", None)
    assert handled.scale_evidence.startswith("inferred, not read: the inputs of Cast shrink by a median x0.")
    text = render(report, "text")
    assert "steps 0-7: the dynamic loss scale calibrating (its value is not in the dump); updates skipped" in text
    assert "scale inferred, not read" in text


@pytest.mark.parametrize("case", ["causal_mask_softmax", "loss_scale_calibration_fp16",
                                  "loss_scale_then_forward_overflow"])
def test_statistics_dumps_decide_the_same(real_dumps, tmp_path, case):
    """The same runs in their statistic.csv form (saved_data "statistic": per-tensor max, min and counts, no
    values): the absorber's finite output, the skipped updates and the scale are all in the statistics."""
    dump = copy_dump(real_dumps[case], tmp_path)
    statistics_form(str(dump / "rank_0" / "Net"), load=gen.load_tensor)
    assert not list(dump.rglob("*.npy"))
    report = msoverflow.analyze(str(dump), finished=True)
    expected = real_dumps.case(case)
    assert report.verdict == expected["expected_verdict"]
    if case == "causal_mask_softmax":
        assert [(c.op_type, c.absorbed_by) for c in report.contained] == [("MaskedFill", ["Softmax"])]
    else:
        [handled] = report.handled
        assert (handled.steps, handled.scale_from, handled.scale_to) == (list(range(8)), 2.0 ** 24, 2.0 ** 16)
    if expected["expected_verdict"] == "anomaly":
        assert (report.first.op_type, report.first.step) == ("MatMul", 10)


# ---- the saved graph as the dump files name its kernels ------------------------------------------------------

_OUTPUT_SHAPE = re.compile(r"->\s*\(<Tensor\[\w+\], \(([\d, ]*)\)")
SHAPE_KEEPING = ("Reshape", "ExpandDims")      # CPU dumps write their output with their input's shape


@pytest.mark.parametrize("case", ["loss_scale_calibration_fp16", "jit_value_and_grad_three_graphs"])
def test_saved_graph_nodes_are_found_by_the_names_dump_files_give_them(real_dumps, case):
    """Dump files number `-opN` per scope and op type across the session's graphs, not as the .ir does
    (fc1-Dense/Cast-op3 in the .ir is fc1-Dense_Cast-op1 in the files): every output file's node, found by the
    file's name, declares the file's shape."""
    import numpy as np

    from msoverflow.readers.ir_graph import load_saved_graphs
    from msoverflow.rules.knowledge import knowledge
    rank = real_dumps[case] / "rank_0"
    plumbing = knowledge().is_plumbing
    graphs = load_saved_graphs(str(rank), lambda op_type: not plumbing(op_type), lambda message: None)
    assert sorted(graphs) == ["0", "1", "2"]
    checked, renamed = 0, 0
    for graph_id, graph in graphs.items():
        lines = open(graph.path).read().splitlines()
        step = min((rank / "Net" / graph_id).iterdir(), key=lambda p: int(p.name))
        for path in step.glob("*.output.0.*.npy"):
            name = path.name.split(".")[1]
            if path.name.startswith("Parameter."):
                continue
            node = graph.find(name)
            assert node is not None, name
            renamed += node.full_name.replace("/", "_") != name
            if node.op_type in SHAPE_KEEPING:
                continue
            declared = next((m for line in lines[node.ir_line:node.ir_line + 4]
                             if (m := _OUTPUT_SHAPE.search(line)) and line.strip().startswith(":")), None)
            if declared is None:        # a tuple or a scalar type: no shape to hold it to
                continue
            shape = tuple(int(d) for d in declared.group(1).replace(" ", "").split(",") if d)
            assert np.load(path, mmap_mode="r").shape == shape, (name, node.full_name)
            checked += 1
    assert checked > 20 and renamed > 5
