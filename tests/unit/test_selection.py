"""The one grammar for --steps/--ranks (msoverflow/selection.py): every command and the API read selections the
same way, keep them as ranges (a huge range costs nothing), and refuse what is not a selection with exit 2."""
import time

import numpy as np
import pytest

from msoverflow import selection
from msoverflow.cli import main
from msoverflow.config.generator import parse_ranks, parse_steps
from tests.support.synth_dump import SynthDump


def test_grammar_forms():
    assert list(selection.parse("0|5-8")) == [0, 5, 6, 7, 8]
    assert selection.parse("0,7") == [0, 7] and selection.parse(" 0 - 3 ") == [0, 1, 2, 3]
    assert selection.parse("all") is None and selection.parse(None) is None
    assert selection.parse([3, 1, 3]) == [1, 3] and selection.parse(2) == [2]
    assert str(selection.parse("5-6,0")) == "0|5-6"
    for bad in ("1-", "a", "3-1", "1;2", "99999999999", "-1", "0x3"):
        with pytest.raises(selection.SelectionError):
            selection.parse(bad, "--steps")


def test_huge_ranges_stay_ranges():
    started = time.process_time()
    chosen = selection.parse("0-30000000", "--ranks")
    assert 29_999_999 in chosen and 30_000_001 not in chosen and len(chosen) == 30_000_001
    assert time.process_time() - started < 0.5
    with pytest.raises(selection.SelectionError, match="at most 4096"):
        parse_ranks("0-30000000")
    assert parse_steps("0|5-8") == "0|5-8" and parse_steps("all") == "all"


def test_every_command_uses_it(tmp_path, capsys):
    d = SynthDump(str(tmp_path / "dump"), rank=0)
    d.op(0, "Exp", "Default_Exp-op1", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    started = time.process_time()
    code = main(["analyze", str(tmp_path / "dump"), "--ranks", "0-30000000", "--steps", "0-2000000000",
                 "--no-save"])
    assert code == 1 and time.process_time() - started < 30
    capsys.readouterr()
    for command in (["analyze", str(tmp_path / "dump")], ["compare", str(tmp_path / "dump"), str(tmp_path / "dump")]):
        with pytest.raises(SystemExit) as stop:
            main(command + ["--steps", "3-1"])
        assert stop.value.code == 2
        assert "runs backwards" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path / "dump"), "--steps", "7", "--no-save"]) == 2
    assert "steps 7" in capsys.readouterr().err
