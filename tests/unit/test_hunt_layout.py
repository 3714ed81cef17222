"""What `msoverflow hunt` writes is read back by the dump readers (names, scope -> Cell), and the two-pass plans
(no MindSpore needed)."""
import json

import numpy as np

from msoverflow import names, scope
from msoverflow.config.two_pass import OPTIMIZER_KERNELS, pass1_plan
from msoverflow.hunt.layout import npy_name, scoped_name, step_dir
from msoverflow.hunt.session import build_report


def test_saved_tensor_names_parse_as_a_mindspore_dump():
    full = scoped_name([("network", "CausalLMLoss"), ("_backbone", "TinyBaichuan"), ("lm_head", "NormHead")],
                       "SqrtGrad", 128, True, "Sqrt")
    assert full == "Gradients/Default/network-CausalLMLoss/_backbone-TinyBaichuan/lm_head-NormHead/Grad_Sqrt/SqrtGrad-op128"
    parsed = names.parse(npy_name("SqrtGrad", full, 128, 1796096685751498, "input", 1, "Float16"))
    assert (parsed.op_type, parsed.io, parsed.slot, parsed.dtype) == ("SqrtGrad", "input", 1, "float16")
    assert parsed.op_name == names.scope_to_file_name(full)
    assert scope.cell_of(full) == ("network._backbone.lm_head", "NormHead")
    assert scoped_name([], "Mul", 3, False, "Mul") == "Default/Mul-op3"


def _record(tmp_path, rank, found=None, steps=3):
    path = tmp_path / f"hunt_rank{rank}_pid{100 + rank}.json"
    path.write_text(json.dumps({"rank": rank, "pid": 100 + rank, "steps_seen": steps, "found": found,
                                "steps_checked": None, "counts": {"tensors": 40}}))


def test_report_of_a_clean_hunt_accounts_for_every_rank(tmp_path):
    from msoverflow.hunt.session import load_records
    _record(tmp_path, 0)
    _record(tmp_path, 1)
    report = build_report(str(tmp_path), load_records(str(tmp_path)), 0)
    assert report.verdict == "clean"
    assert [(r.rank, r.status) for r in report.rank_status] == [(0, "clean"), (1, "clean")]
    assert report.iterations == {0: [0, 1, 2], 1: [0, 1, 2]} and report.tensors_read == 80
    failed = build_report(str(tmp_path), load_records(str(tmp_path)), 1)
    assert failed.verdict == "inconclusive"
    assert build_report(str(tmp_path / "none"), [], 0).verdict == "inconclusive"


def test_report_of_an_origin_is_judged_by_the_dump_rules(tmp_path):
    """The origin's saved tensors go through analyze: finite inputs, an inf output -> origin; the live facts
    (Cell path, class, source line, direction) are added to that finding; the clean rank stays in the table."""
    from msoverflow.hunt.session import load_records
    full = scoped_name([("lm_head", "NormHead")], "SqrtGrad", 7, True, "Sqrt")
    directory = tmp_path / step_dir("", 1, 2).lstrip("/")
    directory.mkdir(parents=True)
    files = []
    for io, slot, array in (("input", 0, np.array([1e-3, 1.0], np.float16)),
                            ("input", 1, np.array([200.0, 1.0], np.float16)),
                            ("output", 0, np.array([np.inf, 0.5], np.float16))):
        name = npy_name("SqrtGrad", full, 7, 1000, io, slot, "Float16")
        np.save(directory / name, array)
        files.append(name)
    found = {"rank": 1, "step": 2, "kind": "backward", "direction": "backward", "op_type": "SqrtGrad",
             "forward_op": "Sqrt", "full_name": full, "cell": "lm_head", "cell_type": "NormHead", "is_cell": False,
             "source": {"file": "model.py", "line": 68, "code": "norm = self.sqrt(variance + self.eps)"},
             "files": files, "parameter": None, "other_consumers": [], "note": ""}
    _record(tmp_path, 0)
    _record(tmp_path, 1, found)
    report = build_report(str(tmp_path), load_records(str(tmp_path)), 0)
    f = report.first
    assert report.verdict == "anomaly"
    assert (f.rank, f.iteration, f.op_type, f.forward_op, f.role) == (1, 2, "SqrtGrad", "Sqrt", "origin")
    assert (f.cell, f.cell_type, f.source.line, f.graph) == ("lm_head", "NormHead", 68, "pynative")
    assert "counted as optimizer updates" in f.evidence[0]
    assert {(r.rank, r.status) for r in report.rank_status} == {(0, "clean"), (1, "origin")}


def test_two_pass_first_pass_is_cheap_on_every_device():
    purpose, options, _ = pass1_plan("ascend", None)
    assert purpose == "overflow" and options == {"steps": "all"}
    purpose, options, what = pass1_plan("cpu", None)
    assert purpose == "tensors" and options["kernels"] == list(OPTIMIZER_KERNELS) and options["inputs"]
    assert "SGD" in what
    assert pass1_plan("gpu", ["MyAdam"])[1]["kernels"] == ["MyAdam"]


def test_a_cut_record_is_skipped_with_a_warning_and_its_rank_is_not_clean(tmp_path, caplog):
    """A rank killed while writing its record (28 D4): the others still count, that rank is incomplete, and with
    nothing found anywhere the verdict is inconclusive, never clean."""
    from msoverflow.hunt.session import load_records
    _record(tmp_path, 0)
    (tmp_path / "hunt_rank1_pid101.json").write_text('{"rank": 1, "pid": 101, "steps_se')     # cut mid-write
    records = load_records(str(tmp_path))
    assert [(r["rank"], bool(r.get("unreadable"))) for r in records] == [(0, False), (1, True)]
    assert any("hunt_rank1_pid101.json is cut or unreadable" in m for m in caplog.messages)
    report = build_report(str(tmp_path), records, 0)
    assert report.verdict == "inconclusive" and report.exit_code == 3
    assert [(r.rank, r.status) for r in report.rank_status] == [(0, "clean"), (1, "incomplete")]
    assert any("rank 1: hunt_rank1_pid101.json is cut" in reason for reason in report.inconclusive)


def test_the_records_are_written_whole(tmp_path, monkeypatch):
    """The watched process writes its record through a temporary file and a rename: a crash in the middle of
    the write leaves no record file (only the temporary one, which load_records never reads)."""
    from msoverflow.hunt import instrument
    from msoverflow.hunt.session import load_records
    hunt = instrument.Hunt.__new__(instrument.Hunt)
    hunt.out_dir = str(tmp_path)

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("os.replace", crash)
    hunt.save_record({"rank": 0, "pid": 1, "steps_seen": 2})
    assert load_records(str(tmp_path)) == []
    monkeypatch.undo()
    hunt.save_record({"rank": 0, "pid": 1, "steps_seen": 2})
    assert [r["steps_seen"] for r in load_records(str(tmp_path))] == [2]


def test_a_clean_live_run_says_tensors_checked_not_files(tmp_path):
    from msoverflow.hunt.session import load_records
    from msoverflow.render import render
    _record(tmp_path, 0)
    text = render(build_report(str(tmp_path), load_records(str(tmp_path)), 0), "text")
    assert "CLEAN: no inf, NaN or out-of-range value in 40 tensors checked live (ranks 0; steps 0-2)" in text
    assert "0 files" not in text and "Checked 40 tensors live (hunt, no dump files)" in text
    for fmt in ("markdown", "html"):
        page = render(build_report(str(tmp_path), load_records(str(tmp_path)), 0), fmt)
        assert "0 files" not in page and "40 tensors checked live" in page, fmt
