"""The stage chain and its selections on the command line (architecture-review.md appendix A, issue 28 C1): the
CLI hands the Selection it parsed to the plans of both dumps unexpanded, its errors speak `--ranks`, and `-v` shows
each stage's time. Dumps are SYNTHETIC MindSpore-layout npy dumps (tests/support/synth_dump.py)."""
import tracemalloc

import numpy as np
import pytest

import msoverflow
from msoverflow import layout
from msoverflow.cli import main
from msoverflow.selection import Selection, SelectionError, parse
from tests.support.synth_dump import SynthDump, same_run_pair

ONES = np.ones(4, np.float32)


def _peak(call):
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_compare_of_two_million_ranks_carries_the_selection_unexpanded(tmp_path, monkeypatch):
    """Appendix A: `--ranks 0-2000000` made compare take 6.4 s and 585 MB against analyze's 0.09 s: the Selection
    now reaches both plans as the ranges the user wrote, and compare's peak memory stays within 2x analyze's
    (tracemalloc peaks, in-process; the wall-time ratio is a paired benchmark)."""
    a, b = same_run_pair(str(tmp_path))
    selected = parse("0-2000000", "--ranks")
    planned = []
    real_plan = layout.Dump.plan

    def plan(dump, ranks=None, steps=None):
        planned.append(ranks)
        return real_plan(dump, ranks, steps)

    monkeypatch.setattr(layout.Dump, "plan", plan)
    assert main(["compare", a, b, "--ranks", "0-2000000", "--format", "json", "-o", str(tmp_path / "c.json")]) == 0
    assert planned == [selected, selected] and all(type(p) is Selection and len(p.ranges) == 1 for p in planned)
    from msoverflow.analysis import analyze
    from msoverflow.comparison import compare
    analyze_peak = _peak(lambda: analyze(a, ranks=selected, jobs=1))
    compare_peak = _peak(lambda: compare(a, b, ranks=selected))
    assert compare_peak <= 2 * analyze_peak, (compare_peak, analyze_peak)


def test_selection_errors_speak_the_api_words_in_the_api_and_the_options_on_the_command_line(tmp_path, capsys):
    with pytest.raises(SelectionError, match=r"^ranks='0-x': expected numbers like"):
        msoverflow.compare(str(tmp_path), str(tmp_path), ranks="0-x")
    with pytest.raises(SelectionError, match=r"^steps='3-1': the range 3-1 runs backwards"):
        msoverflow.analyze(str(tmp_path), steps="3-1")
    with pytest.raises(SystemExit) as caught:
        main(["analyze", str(tmp_path), "--ranks", "0-x"])
    assert caught.value.code == 2 and "--ranks" in capsys.readouterr().err


def test_verbose_shows_the_timings_of_every_stage_and_of_the_render(tmp_path, capsys):
    SynthDump(str(tmp_path / "dump"), rank=0).op(0, "Exp", "Default_Exp-op1", [ONES], [ONES])
    assert main(["-v", "analyze", str(tmp_path / "dump"), "--no-save"]) == 0
    err = capsys.readouterr().err
    assert [line.split()[2] for line in err.splitlines() if line.startswith("msoverflow: timing: ")] == [
        "discover", "plan", "walk", "harmless", "decide", "settle", "explain", "ranks", "assemble", "judge", "render"]   # clean: no diagnose
