"""The analyze command as a user meets it: exit codes, one-line errors, outputs, start-up cost."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from msoverflow.cli import main
from tests.support.synth_dump import SynthDump


def _snapshot(root):
    return sorted((p, os.stat(os.path.join(p, f)).st_mtime_ns, f) for p, _, files in os.walk(root) for f in files)


@pytest.fixture
def dump(tmp_path):
    d = SynthDump(str(tmp_path / "dump"))
    d.op(0, "Add", "Default_Add-op0", [np.ones(2, np.float32)], [np.ones(2, np.float32)])
    d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    return tmp_path / "dump"


def test_exit_1_on_anomaly_and_json_to_file(dump, tmp_path, capsys):
    before = _snapshot(dump)
    out = tmp_path / "report.json"
    assert main(["analyze", str(dump), "--format", "json", "-o", str(out)]) == 1
    assert json.loads(out.read_text())["first"]["op_type"] == "Exp"
    assert _snapshot(dump) == before          # nothing written into the dump


def test_exit_0_when_clean(tmp_path, capsys):
    d = SynthDump(str(tmp_path))
    d.op(0, "Add", "Default_Add-op0", [np.ones(2, np.float32)], [np.ones(2, np.float32)])
    assert main(["analyze", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("CLEAN")


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "no such file"),
    (lambda p: (p / "f").write_text("x") and p / "f", "not a directory"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "no dump files found"),
])
def test_bad_input_is_one_line_exit_2_without_traceback(tmp_path, make, message):
    target = make(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "analyze", str(target)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and str(target) in proc.stderr


def test_only_corrupt_files_is_inconclusive_naming_them(tmp_path):
    """Corrupt files inside a dump are warnings, never fatal; when nothing could be read the verdict is
    inconclusive (exit 3) with the files named, and the rank's step is incomplete by the one rule of unread files
    (the same as a truncated one's): never clean."""
    folder = tmp_path / "dump" / "rank_0" / "Net" / "0" / "0"
    folder.mkdir(parents=True)
    (folder / "Add.Default_Add-op0.0.0.1.output.0.DefaultFormat.Float32.npy").write_bytes(b"\x93NUMPY garbage")
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "analyze", str(tmp_path / "dump"), "--no-save"],
                          capture_output=True, text=True)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stdout.startswith("INCONCLUSIVE") and "could not be read" in proc.stdout
    assert "not a valid npy" in proc.stdout and "1 of 1 files cannot be read" in proc.stdout
    assert "incomplete" in proc.stdout and " clean " not in proc.stdout


def test_refuses_to_write_the_report_into_the_dump(dump):
    assert main(["analyze", str(dump), "-o", str(dump / "r.txt")]) == 2
    assert not (dump / "r.txt").exists()


def test_rank_and_iteration_filters(tmp_path, capsys):
    for rank in (0, 1):
        d = SynthDump(str(tmp_path), rank=rank)
        d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    main(["analyze", str(tmp_path), "--rank", "1", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["ranks"] == [1] and report["first"]["rank"] == 1
    assert main(["analyze", str(tmp_path), "--iteration", "5"]) == 2


def test_help_starts_without_importing_mindspore_or_numpy():
    code = ("import sys, msoverflow.cli as c; c.build_parser(); "
            "print(sorted(m for m in ('mindspore', 'numpy', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for argv in (["--help"], ["analyze", "--help"]):
        proc = subprocess.run([sys.executable, "-m", "msoverflow", *argv], capture_output=True, text=True)
        assert proc.returncode == 0 and "usage" in proc.stdout


def test_progress_bar_goes_to_stderr_never_into_the_report(tmp_path, capsys):
    from msoverflow.analysis import analyze
    from msoverflow.render import render
    d = SynthDump(str(tmp_path))
    for i in range(2100):                      # long enough for the bar
        d.tensor(0, "Add", f"Default_Add-op{i}", "output", 0, np.ones(2, np.float32))
    report = analyze(str(tmp_path), progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert render(report, "text").startswith("CLEAN")


def test_unrecognised_dump_is_inconclusive_and_its_parent_is_guarded(tmp_path, monkeypatch):
    """A directory of files msoverflow cannot name is never clean, and since the dump's root is then unknown, -o
    next to DUMP_DIR (in the directory holding it) is refused unless that is where the user stands."""
    sub = tmp_path / "d" / "sub"
    sub.mkdir(parents=True)
    np.save(sub / "loss.npy", np.array([np.inf], np.float32))
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(sub), "--no-progress", "--no-save"]) == 3
    assert main(["analyze", str(sub), "-o", str(tmp_path / "d" / "report.json"), "--no-progress"]) == 2
    assert not (tmp_path / "d" / "report.json").exists()
    monkeypatch.chdir(tmp_path / "d")
    assert main(["analyze", "sub", "-o", "report.json", "--no-progress"]) == 3
    assert (tmp_path / "d" / "report.json").exists()


def test_a_statistic_csv_that_cannot_be_read_is_never_clean(tmp_path):
    """Step 0 holds only a statistic.csv that is refused (a header of thousands of columns); step 1 is fine. The
    refused file could hold the origin, so the verdict is inconclusive, naming it."""
    step0 = tmp_path / "dump" / "rank_0" / "Net" / "0" / "0"
    step1 = tmp_path / "dump" / "rank_0" / "Net" / "0" / "1"
    step0.mkdir(parents=True)
    step1.mkdir(parents=True)
    (step0 / "statistic.csv").write_text("Op Type,Op Name" + "," * 5000 + "\nAdd,Default_Add-op0\n")
    np.save(step1 / "Add.Default_Add-op0.0.0.1.output.0.DefaultFormat.float32.npy", np.ones(3, np.float32))
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "analyze", str(tmp_path / "dump"), "--no-save"],
                          capture_output=True, text=True)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("INCONCLUSIVE") and "statistic.csv" in proc.stdout
