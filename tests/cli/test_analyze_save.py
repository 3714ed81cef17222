"""`msoverflow analyze DIR` without -o saves the JSON report as ./report.json for the next command (the quick
start), never inside the dump; --save/--no-save and $MSOVERFLOW_REPORT_JSON choose otherwise."""
import json
import os

import numpy as np
import pytest

from msoverflow.cli import main
from tests.support.synth_dump import SynthDump


@pytest.fixture
def dump(tmp_path):
    d = SynthDump(str(tmp_path / "dump"))
    d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    return tmp_path / "dump"


@pytest.fixture
def default_save(monkeypatch):
    monkeypatch.delenv("MSOVERFLOW_REPORT_JSON", raising=False)


def test_saves_report_json_in_the_current_directory(dump, tmp_path, monkeypatch, default_save, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["analyze", str(dump)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("ANOMALY") and "report.json" in err
    assert json.loads((work / "report.json").read_text())["first"]["op_type"] == "Exp"
    assert main(["patch", "--from", "report.json", "--op", "Exp"]) == 0     # the next command can use it


def test_never_inside_the_dump_and_opt_outs(dump, tmp_path, monkeypatch, default_save, capsys):
    monkeypatch.chdir(dump)
    assert main(["analyze", "."]) == 1
    assert "not saving" in capsys.readouterr().err
    assert not (dump / "report.json").exists()
    work = tmp_path / "w2"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["analyze", str(dump), "--no-save"]) == 1
    assert main(["analyze", str(dump), "-o", "out.txt"]) == 1
    assert not (work / "report.json").exists()
    assert main(["analyze", str(dump), "--save", "elsewhere.json"]) == 1
    assert (work / "elsewhere.json").exists()
    monkeypatch.setenv("MSOVERFLOW_REPORT_JSON", "")
    os.remove(work / "elsewhere.json")
    assert main(["analyze", str(dump)]) == 1
    assert not list(work.glob("*.json"))
