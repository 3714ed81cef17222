"""Verdicts that never overstate (issue 8): a hardware flag narrows the search, only inputs prove an origin;
every rank is accounted for; nothing unread or not understood is ever called clean; the order of ranks never
depends on their clocks.

The pipeline-parallel fixtures are SPEC-BUILT (tests/support/ascend_fixtures.py, from the documented formats, not
recorded on Ascend): the seed's own shape, 8 ranks, PP=2, MindSpore 2.2 async layout with old-style Opdebug JSON and
binary dumps, NormHead's SqrtGrad overflowing on rank 5 (stage 1), ClipGradNorm's Sqrt and Mul flagged on every
rank with +inf inputs, stage 0's clock 400 s behind.
"""
import json
import os
import random

import numpy as np
import pytest

from msoverflow.analysis import analyze
from msoverflow.cli import main
from msoverflow.render import render
from msoverflow.report_dict import report_dict
from tests.support.ascend_fixtures import build_pp_seed_case, build_seed_scenario, write_opdebug_json
from tests.support.synth_dump import SynthDump

SCHEMA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema", "report.schema.json")


def _statuses(report):
    return {row.rank: (row.status, row.op_type) for row in report.rank_status}


def _answer(report):
    """Everything a user acts on: the first origin, the later ones, the undecided flags, every rank's status."""
    first = report.first
    return ((first.rank, first.iteration, first.op_type, first.role) if first else None,
            [(a.rank, a.iteration, a.op_name) for a in report.anomalies],
            sorted((a.rank, a.iteration, a.op_name) for a in report.flagged),
            [(r.rank, r.status, r.iteration, r.op_name, r.via) for r in report.rank_status])


# ---- flags narrow, inputs decide ---------------------------------------------------------------------------

def test_pp_seed_shape_names_rank5_sqrtgrad_and_no_propagator_as_an_origin(tmp_path):
    desc = build_pp_seed_case(str(tmp_path / "dump"))
    assert desc["label"].startswith("spec-built")
    report = analyze(desc["root"], progress=False)
    f = report.first
    assert (f.rank, f.iteration, f.op_type, f.role, f.cell_type) == (5, 1, "SqrtGrad", "origin", "NormHead")
    assert desc["raw_earliest"]["rank"] < 4            # a raw-clock sort would have picked stage 0
    # ClipGradNorm's flagged Sqrt/Mul had +inf inputs, rank 2's flagged MatMul a NaN input: propagators.
    assert [(a.rank, a.op_type) for a in report.anomalies] == [(5, "SqrtGrad")]
    assert report.flagged == []
    assert report.coverage == []        # every op was dumped: not an overflow-only dump
    assert _statuses(report) == {r: tuple(v) for r, v in desc["expected_ranks"].items()}
    received = {row.rank: row for row in report.rank_status}
    assert received[0].via.startswith("Receive") and received[6].via.startswith("AllReduce")


def test_pp_seed_shape_text_json_markdown_carry_the_rank_table(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    report = analyze(build_pp_seed_case(str(tmp_path / "dump"))["root"], progress=False)
    doc = report_dict(report)
    jsonschema.validate(doc, json.load(open(SCHEMA)))
    assert [r["status"] for r in doc["ranks"]] == ["received"] * 5 + ["origin"] + ["received"] * 2
    assert doc["ranks"][5] == {"rank": 5, "status": "origin", "iteration": 1, "op_name": report.first.op_name,
                               "op_type": "SqrtGrad", "via": None, "note": "", "present": None, "expected": None,
                               "coords": {"pp": 1}}   # stage inferred from the ranks' execution orders
    assert doc["summary"]["ranks"] == list(range(8))
    text = render(report, "text")
    table = text[text.index("Ranks"):]
    assert all(f"\n{r} " in table for r in range(8)) and "via Receive" in table and "origin" in table
    assert "Later origins" not in text
    markdown = render(report, "markdown")
    assert "| rank | status | step |" in markdown and "| 5 | origin | 1 |" in markdown


def test_overflow_only_dump_reads_only_flagged_inputs(tmp_path):
    """op_debug_mode 3 keeps only the flagged ops: their inputs still decide, and the ranks that only hold
    propagators are `flagged` (nothing dumped says where their bad value came from)."""
    report = analyze(build_pp_seed_case(str(tmp_path / "dump"), overflow_only=True)["root"], progress=False)
    assert (report.first.rank, report.first.op_type, report.first.role) == (5, "SqrtGrad", "origin")
    assert [a.rank for a in report.anomalies] == [5] and report.flagged == []
    statuses = _statuses(report)
    assert statuses[5] == ("origin", "SqrtGrad")
    assert all(statuses[r][0] == "flagged" for r in (0, 1, 2, 3, 4, 6, 7))
    assert any("overflow-only" in c for c in report.coverage)


def test_flagged_ops_without_inputs_are_ordered_by_evidence_not_called_origins(tmp_path, capsys):
    """Inputs not dumped: every flagged op is undecided. Collectives (Receive/AllReduce delivered a bad value
    before the flag) and op knowledge (ClipGradNorm consumes every gradient) leave rank 5's SqrtGrad first."""
    desc = build_pp_seed_case(str(tmp_path / "dump"), inputs_dumped=False)
    report = analyze(desc["root"], progress=False)
    f = report.first
    assert (f.rank, f.iteration, f.op_type, f.role, f.kind) == (5, 1, "SqrtGrad", "flagged", "flagged")
    assert "inputs were not dumped" in f.detail
    assert report.anomalies == [f]                      # no undecided op is listed as a later origin
    flagged = {(a.rank, a.op_type) for a in report.flagged}
    assert (0, "Sqrt") in flagged and (0, "Mul") in flagged and (2, "MatMul") in flagged
    assert all(a.role == "flagged" for a in report.flagged)
    statuses = _statuses(report)
    assert statuses[5] == ("flagged", "SqrtGrad")
    assert statuses[0] == ("received", "Receive") and statuses[7] == ("received", "AllReduce")
    assert main(["analyze", desc["root"], "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("ANOMALY: the hardware flagged SqrtGrad") and "Flagged by the hardware, not decided" in out
    jsonschema = pytest.importorskip("jsonschema")
    doc = report_dict(report)
    jsonschema.validate(doc, json.load(open(SCHEMA)))
    assert doc["first"]["role"] == "flagged" and len(doc["flagged"]) == len(report.flagged)


# ---- clocks ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", [{}, {"overflow_only": True}, {"inputs_dumped": False}])
def test_answer_does_not_depend_on_the_ranks_clocks(tmp_path, variant):
    baseline = _answer(analyze(build_pp_seed_case(str(tmp_path / "base"), **variant)["root"], progress=False))
    rng = random.Random(8)
    for trial in range(3):
        offsets = {r: rng.randint(-6 * 3600, 6 * 3600) * 1_000_000 for r in range(8)}
        desc = build_pp_seed_case(str(tmp_path / f"shift{trial}"), clock_offsets_us=offsets, **variant)
        assert _answer(analyze(desc["root"], progress=False)) == baseline, offsets


# ---- Opdebug records that name no dumped op ----------------------------------------------------------------

def test_an_opdebug_record_matching_no_dumped_op_is_a_flagged_anomaly(tmp_path, capsys):
    desc = build_seed_scenario(str(tmp_path / "dump"), formats=("opdebug", "bin"), layout="async22",
                               iterations=(0,), overflow_iteration=5)      # clean: the overflow step is not dumped
    assert analyze(desc["root"], progress=False).verdict == "clean"
    record = write_opdebug_json(str(tmp_path / "dump" / "rank_3" / "debug_files" / "0" /
                                    "Opdebug.Node_OpDebug.7.1.1700000000000900.output.0.json"),
                                [{"unit": "AI Core", "task_id": 999, "stream_id": 4, "status": 0x20}])
    report = analyze(desc["root"], progress=False)
    assert report.verdict == "anomaly"
    f = report.first
    assert (f.rank, f.kind, f.role) == (3, "flagged", "flagged")
    for part in ("task 999", "stream 4", "AI Core", record):
        assert part in f.detail
    rows = {row.rank: row for row in report.rank_status}
    assert rows[3].status == "flagged" and rows[3].op_name == "task 999 stream 4"
    assert rows[0].status == "clean"
    assert main(["analyze", desc["root"], "--no-progress"]) == 1


# ---- never a false clean ----------------------------------------------------------------------------------

def test_unrecognised_file_names_are_inconclusive_never_clean(tmp_path, capsys):
    (tmp_path / "dump" / "sub").mkdir(parents=True)
    np.save(tmp_path / "dump" / "sub" / "loss.npy", np.array([np.inf], np.float32))
    assert main(["analyze", str(tmp_path / "dump"), "--no-progress"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("INCONCLUSIVE") and "loss.npy" in out.splitlines()[0]
    assert main(["analyze", str(tmp_path / "dump"), "--format", "json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "inconclusive" and "no file was understood" in doc["inconclusive"][0]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.load(open(SCHEMA)))


def test_files_of_no_known_kind_are_inconclusive(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tensor_dump.bin").write_bytes(b"\x00" * 64)
    assert main(["analyze", str(tmp_path / "run"), "--no-progress"]) == 3
    assert "no file was understood" in capsys.readouterr().out


def _clean_dump(root):
    d = SynthDump(str(root))
    d.op(0, "Add", "Default_Add-op0", [np.ones(2, np.float32)], [np.ones(2, np.float32)])
    d.op(0, "Mul", "Default_Mul-op0", [np.ones(2, np.float32)], [np.ones(2, np.float32)])
    return d


def test_a_clean_dump_with_an_unknown_tensor_file_is_inconclusive(tmp_path, capsys):
    d = _clean_dump(tmp_path)
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 0
    capsys.readouterr()
    np.save(os.path.join(d.dir(0), "grad_norm.npy"), np.array([np.nan], np.float32))
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 3
    assert "grad_norm.npy" in capsys.readouterr().out.splitlines()[0]


def test_a_clean_dump_with_an_unreadable_tensor_is_inconclusive(tmp_path, capsys):
    d = _clean_dump(tmp_path)
    bad = os.path.join(d.dir(0), "Exp.Default_Exp-op0.0.0.99.output.0.DefaultFormat.Float32.npy")
    with open(bad, "wb") as fh:
        fh.write(b"\x93NUMPY garbage")
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 3
    assert "could not be read" in capsys.readouterr().out


def test_a_crash_exits_4_naming_the_file_never_1(tmp_path, monkeypatch, capsys):
    _clean_dump(tmp_path)
    from msoverflow import stats

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("boom")
    monkeypatch.setattr(stats, "scan", broken)
    monkeypatch.setattr(stats, "scan_rows", broken)      # the batch check of small tensors (msoverflow/walk.py)
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 4
    err = capsys.readouterr().err
    assert "internal error while reading" in err and ".npy" in err and "ZeroDivisionError" in err
    assert len(err.strip().splitlines()) == 1


# ---- every rank accounted for -------------------------------------------------------------------------------

def _rank_dump(root, ranks, bad_rank=None):
    for rank in ranks:
        d = SynthDump(str(root), rank=rank)
        out = np.array([np.inf, 1], np.float32) if rank == bad_rank else np.ones(2, np.float32)
        d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [out])


def test_missing_and_empty_rank_directories_are_not_dumped_and_block_a_clean(tmp_path, capsys):
    _rank_dump(tmp_path, [0, 1, 3])
    (tmp_path / "rank_4").mkdir()
    report = analyze(str(tmp_path), progress=False)
    rows = {row.rank: row for row in report.rank_status}
    assert [rows[r].status for r in range(5)] == ["clean", "clean", "not dumped", "clean", "not dumped"]
    assert "missing between" in rows[2].note and "holds no file" in rows[4].note
    assert report.verdict == "inconclusive" and "2, 4" in report.inconclusive[0]
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 3
    # --rank selects: the others are not "expected"
    assert [row.rank for row in analyze(str(tmp_path), ranks=[1], progress=False).rank_status] == [1]
    # a step that only some ranks hold: the others are named, with the step
    SynthDump(str(tmp_path), rank=0).op(7, "Add", "Default_Add-op0", [np.ones(2, np.float32)],
                                        [np.ones(2, np.float32)])
    rows = {row.rank: row for row in analyze(str(tmp_path), steps=[7], progress=False).rank_status}
    assert rows[0].status == "clean" and rows[1].status == "not dumped" and "no file of step 7" in rows[1].note
    # pointing inside one rank does not expect its siblings
    assert analyze(str(tmp_path / "rank_3"), progress=False).verdict == "clean"


def test_a_rank_with_an_origin_and_a_clean_rank(tmp_path):
    _rank_dump(tmp_path, [0, 1], bad_rank=1)
    report = analyze(str(tmp_path), progress=False)
    assert _statuses(report) == {0: ("clean", None), 1: ("origin", "Exp")}


# ---- coverage caveats on clean ----------------------------------------------------------------------------

def _metadata(root, rank=0, **settings):
    folder = root / f"rank_{rank}" / ".dump_metadata"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"device_target": "CPU", "ms_version": "2.10.0"}))
    common = {"dump_mode": 0, "path": "/x", "net_name": "Net", "iteration": "all", "saved_data": "tensor",
              "input_output": 0, "kernels": [], "support_device": [0], "op_debug_mode": 0, **settings}
    (folder / "data_dump.json").write_text(json.dumps({"common_dump_settings": common}))


@pytest.mark.parametrize("settings, words", [
    ({"input_output": 1}, "inputs only"),
    ({"dump_mode": 1, "kernels": ["Default/network-Net/Add-op0"]}, "kernel filter"),
    ({"iteration": "0"}, "selected steps"),
])
def test_clean_carries_the_limits_of_the_dump_config(tmp_path, capsys, settings, words):
    _clean_dump(tmp_path)
    _metadata(tmp_path, **settings)
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CLEAN") and f"caveat: {words}" in out.splitlines()[1]
    main(["analyze", str(tmp_path), "--format", "json"])
    assert any(words in c for c in json.loads(capsys.readouterr().out)["coverage"])


def test_parameter_only_files_are_a_caveat(tmp_path, capsys):
    d = SynthDump(str(tmp_path))
    d.op(0, "Parameter", "weight", [], [np.ones(2, np.float32)])
    _metadata(tmp_path, op_debug_mode=4)
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 0
    assert "caveat: Parameter-only files (op_debug_mode 4)" in capsys.readouterr().out


def test_pynative_jit_graphs_without_cell_scopes_are_a_caveat(tmp_path, capsys):
    d = SynthDump(str(tmp_path))
    for i, op in enumerate(("Add", "Mul", "Sqrt", "Exp", "Neg")):
        d.op(0, op, f"Default_{op}-op{i}", [np.ones(2, np.float32)], [np.ones(2, np.float32)])
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 0
    assert "caveat: PyNative run" in capsys.readouterr().out


def test_bad_values_whose_origin_was_not_dumped_are_an_anomaly_not_clean(tmp_path, capsys):
    """A kernel-filtered dump holding only an op whose input is already NaN: nothing dumped created it, but a bad
    value was seen, so exit 1 naming where it was first seen (never CLEAN)."""
    d = SynthDump(str(tmp_path))
    d.op(0, "Add", "Default_network-Net_Add-op0", [np.array([np.nan, 1], np.float32)],
         [np.array([np.nan, 2], np.float32)])
    _metadata(tmp_path, dump_mode=1, kernels=["Add"])
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("ANOMALY: NaN first seen in Add") and "kernel filter" in out
    report = analyze(str(tmp_path), progress=False)
    assert report.first.role == "propagator" and any("not dumped" in e for e in report.first.evidence)


def test_a_rank_table_beside_the_dump_names_ranks_that_left_no_directory(tmp_path):
    _rank_dump(tmp_path, [0, 1])
    table = {"server_count": "1", "server_list": [{"server_id": "10.0.0.1", "device": [
        {"device_id": str(d), "device_ip": f"192.168.1.{d}", "rank_id": str(d)} for d in range(4)]}]}
    (tmp_path / "rank_table_4p.json").write_text(json.dumps(table))
    rows = {row.rank: row for row in analyze(str(tmp_path), progress=False).rank_status}
    assert [rows[r].status for r in range(4)] == ["clean", "clean", "not dumped", "not dumped"]
    assert "rank_table_4p.json" in rows[3].note


def test_flagged_ops_on_one_rank_follow_the_graph_order_not_their_file_times(tmp_path):
    """Two flagged ops with no inputs dumped on one rank: the one the execution-order file runs first comes first,
    even when its file carries the later timestamp (CANN: a file's time is when it was written)."""
    from tests.support.ascend_fixtures import npy_name
    step = tmp_path / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    ops = [("Exp", "Default/network-Net/Exp-op0", 21, 500), ("Mul", "Default/network-Net/Mul-op0", 22, 100)]
    for op_type, full, task, ts in ops:
        name = full.replace("/", "_")
        np.save(step / npy_name(op_type, name, task, 2, 1_700_000_000_000_000 + ts, "output", 0, "ND",
                                np.dtype(np.float16)), np.array([np.inf], np.float16))
        write_opdebug_json(str(step / f"Opdebug.Node_OpDebug.{task}.1.{1_700_000_000_000_000 + ts + 9}.output.0.json"),
                           [{"unit": "AI Core", "task_id": task, "stream_id": 2, "status": 0x20}])
    order = tmp_path / "rank_0" / "execution_order"
    order.mkdir()
    (order / "ms_execution_order_graph_0.csv").write_text(
        "NodeExecutionOrder-FullNameWithScope\nDefault/network-Net/Exp-op0\nDefault/network-Net/Mul-op0\n")
    report = analyze(str(tmp_path), progress=False)
    assert (report.first.op_type, report.first.role) == ("Exp", "flagged")
    assert [f.op_type for f in report.flagged] == ["Mul"]
    (order / "ms_execution_order_graph_0.csv").unlink()
    assert analyze(str(tmp_path), progress=False).first.op_type == "Mul"     # without it: file times


def test_a_flagged_op_fed_by_an_op_that_went_bad_comes_after_it(tmp_path):
    """No inputs dumped, no execution order, file times reversed: the saved graph (.ir) says Mul consumes Exp's
    output, and Exp went bad, so Exp comes first."""
    from tests.support.ascend_fixtures import npy_name
    step = tmp_path / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    for op_type, full, task, ts in (("Exp", "Default/network-Net/Exp-op0", 21, 500),
                                    ("Mul", "Default/network-Net/Mul-op0", 22, 100)):
        np.save(step / npy_name(op_type, full.replace("/", "_"), task, 2, 1_700_000_000_000_000 + ts, "output", 0,
                                "ND", np.dtype(np.float16)), np.array([np.inf], np.float16))
        write_opdebug_json(str(step / f"Opdebug.Node_OpDebug.{task}.1.{1_700_000_000_000_000 + ts + 9}.output.0.json"),
                           [{"unit": "AI Core", "task_id": task, "stream_id": 2, "status": 0x20}])
    graphs = tmp_path / "rank_0" / "graphs"
    graphs.mkdir()
    (graphs / "ms_output_trace_code_graph_0.ir").write_text(
        "# IR entry: @kernel_graph0\n%para1_x: <Tensor[Float16], (1)>\n\nsubgraph @kernel_graph0() {\n"
        "  %0(CNode_1) = Exp(%para1_x)\n      : (<Tensor[Float16], (1)>) -> (<Tensor[Float16], (1)>)\n"
        "      # Fullname with scope: (Default/network-Net/Exp-op0)\n"
        "  %1(CNode_2) = Mul(%0, %para1_x)\n      : (<Tensor[Float16], (1)>) -> (<Tensor[Float16], (1)>)\n"
        "      # Fullname with scope: (Default/network-Net/Mul-op0)\n"
        "  Return(%1)\n}\n")
    report = analyze(str(tmp_path), progress=False)
    assert (report.first.op_type, [f.op_type for f in report.flagged]) == ("Exp", ["Mul"])
    (graphs / "ms_output_trace_code_graph_0.ir").unlink()
    assert analyze(str(tmp_path), progress=False).first.op_type == "Mul"     # without it: file times
