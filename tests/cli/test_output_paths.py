"""Every file a command writes goes through one check against every dump it reads (issue 28 B1, C2): -o, --save,
--log-file, --workdir and directory outputs, against both compare sides, the convert source, the repro and patch
dumps (given, or named by the report), and the dump's root when analyze is given a directory inside it. A refused
path is exit 2, one line, and nothing is created: not the output, not the log file. A FIFO target is written
without blocking (refused at once when nothing reads it)."""
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from msoverflow.cli import main
from tests.support.synth_dump import SynthDump


def _dump(path):
    d = SynthDump(str(path))
    d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    return path


def _digest(root) -> str:
    h = hashlib.sha1()
    for directory, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(directory, name)
            h.update(path.encode())
            with open(path, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


@pytest.fixture
def dumps(tmp_path):
    a, b = _dump(tmp_path / "a"), _dump(tmp_path / "b")
    report = tmp_path / "report.json"
    assert main(["analyze", str(a), "--no-progress", "--format", "json", "-o", str(report)]) == 1
    assert json.loads(report.read_text())["dump_dir"] == str(a)
    return tmp_path, a, b, report


def _cases(tmp_path, a, b, report):
    """(argv, the path it must not create) for each command and each way of naming an output."""
    rank_0 = str(a / "rank_0")          # a directory inside the dump: its root is `a`
    cases = []
    for option in ("--log-file", "-o", "--save"):
        cases.append((["analyze", rank_0, "--no-progress", option, str(a / f"x{option}")], a / f"x{option}"))
    for side in (a, b):
        for option in ("--log-file", "-o"):
            cases.append((["compare", str(a), str(b), option, str(side / "x.out")], side / "x.out"))
    cases.append((["convert", str(a), "-o", str(tmp_path / "npy"), "--log-file", str(a / "x.log")], a / "x.log"))
    cases.append((["convert", rank_0, "-o", str(a / "npy")], a / "npy"))
    cases.append((["repro", "--from", str(report), "--dump", str(b), "--log-file", str(b / "x.log")], b / "x.log"))
    cases.append((["repro", "--from", str(report), "-o", str(a / "repro")], a / "repro"))   # the report's dump
    cases.append((["patch", "--dump", str(a), "--log-file", str(a / "x.log")], a / "x.log"))
    cases.append((["patch", "--dump", str(a), "-o", str(a / "x.json")], a / "x.json"))
    cases.append((["patch", "--from", str(report), "--op", "Exp", "--verify", "--workdir", str(a / "w"), "--",
                   sys.executable, "-c", "pass"], a / "w"))
    cases.append((["config", "--path", str(a), "-o", str(a / "cfg.json"), "--device", "cpu", "--ms-version", "2.10"],
                  a / "cfg.json"))
    return cases


def test_every_output_inside_any_input_dump_is_refused_before_anything_exists(dumps, capsys):
    tmp_path, a, b, report = dumps
    before = (_digest(a), _digest(b))
    for argv, never in _cases(tmp_path, a, b, report):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        errors = [line for line in err.splitlines() if line.startswith("msoverflow: error:")]
        assert len(errors) == 1 and "refusing to write inside" in errors[0], (argv, err)
        assert not os.path.lexists(never), argv
    assert (_digest(a), _digest(b)) == before


def test_the_log_file_is_not_created_when_the_command_fails_on_usage(tmp_path, capsys):
    log = tmp_path / "run.log"
    assert main(["analyze", str(tmp_path / "missing"), "--log-file", str(log)]) == 2
    assert main(["run", "--device", "cpu", "--ms-version", "2.10", "--log-file", str(log)]) == 2
    assert main(["compare", str(tmp_path / "x"), str(tmp_path / "y"), "--log-file", str(log)]) == 2
    assert not log.exists()
    capsys.readouterr()
    _dump(tmp_path / "d")
    assert main(["analyze", str(tmp_path / "d"), "--no-progress", "--log-file", str(log)]) == 1
    assert "analyzed" in log.read_text()


def test_a_run_logs_as_it_goes_once_its_arguments_are_accepted(tmp_path, capsys):
    """A training run can last hours: past its usage checks the --log-file is written as things happen (here it
    holds the plan before the command has ended)."""
    log = tmp_path / "run.log"
    probe = f"import os, sys; sys.exit(0 if 'run: overflow dump' in open({str(log)!r}).read() else 7)"
    code = main(["run", "--device", "cpu", "--ms-version", "2.10", "--dump-dir", str(tmp_path / "d"), "--no-analyze",
                 "--log-file", str(log), "--", sys.executable, "-c", probe])
    assert code == 0, capsys.readouterr().err
    assert "command exited with 0" in log.read_text()


def _msoverflow(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "msoverflow", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, MSOVERFLOW_REPORT_JSON=""))


def test_o_to_a_fifo_nobody_reads_is_refused_at_once(tmp_path):
    _dump(tmp_path / "d")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for argv in (["analyze", tmp_path / "d", "--no-progress", "-o", fifo],
                 ["compare", tmp_path / "d", tmp_path / "d", "-o", fifo]):
        started = time.monotonic()
        proc = _msoverflow(*argv)          # a hang would raise TimeoutExpired
        assert proc.returncode == 2, proc.stderr
        assert "a FIFO that nothing is reading" in proc.stderr and "Traceback" not in proc.stderr
        assert time.monotonic() - started < 25


def test_o_to_a_fifo_with_a_reader_and_to_dev_null(tmp_path):
    _dump(tmp_path / "d")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []

    def read():
        with open(fifo) as fh:
            got.append(fh.read())
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(0.2)      # the reader is blocked in open(), waiting for a writer
    proc = _msoverflow("analyze", tmp_path / "d", "--no-progress", "--format", "json", "-o", fifo)
    reader.join(10)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(got[0])["verdict"] == "anomaly"
    assert _msoverflow("analyze", tmp_path / "d", "--no-progress", "-o", os.devnull).returncode == 1


def test_save_to_a_fifo_or_a_directory_is_refused(tmp_path):
    _dump(tmp_path / "d")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = _msoverflow("analyze", tmp_path / "d", "--no-progress", "--save", fifo)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr
    assert os.path.exists(fifo) and not os.path.isfile(fifo)       # the FIFO was not replaced by a file
    proc = _msoverflow("analyze", tmp_path / "d", "--no-progress", "--save", tmp_path)
    assert proc.returncode == 2 and "it is a directory" in proc.stderr
