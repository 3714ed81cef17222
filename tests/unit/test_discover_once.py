"""The dump is listed once (msoverflow/layout.py Dump.open): each leaf directory carries its files and its
mapping.csv, and one predicate (names.is_dump_file) says what a dump file is, for the listing, the readers and
completeness alike. SYNTHETIC MindSpore-layout dumps (tests/support/synth_dump.py); the reproductions of
architecture-review.md appendices B and D."""
import os

import numpy as np

from msoverflow import layout, names
from msoverflow.analysis import analyze
from tests.support.synth_dump import SynthDump

ONES = np.ones(4, np.float32)


def _one_step(root, steps=(0,), rank=0):
    d = SynthDump(str(root), rank=rank)
    for step in steps:
        d.op(step, "Add", "Default_network-Net_Add-op1", [ONES], [ONES])
    return d


def test_a_stray_file_alone_in_a_step_is_one_file_not_understood_not_an_incomplete_step(tmp_path):
    """Appendix B: a step directory holding only a file with three dots that the grammar cannot read."""
    stray = "Add.Default_Add-op1.output.x"
    _one_step(tmp_path)
    step1 = tmp_path / "rank_0" / "Net" / "0" / "1"
    step1.mkdir()
    (step1 / stray).write_bytes(b"\0" * 16)
    assert names.is_dump_file(stray) and not names.understood(stray)
    warnings = []
    report = analyze(str(tmp_path), warn=warnings.append)
    assert report.completeness == [] and report.verdict == "inconclusive"
    assert report.inconclusive == [f"1 file(s) not understood (e.g. {step1 / stray}); they could hold the origin"]
    assert [w for w in warnings if stray in w] == [f"{step1 / stray}: file name not understood, skipped"]
    assert [(row.rank, row.status) for row in report.rank_status] == [(0, "clean")]
    assert not any("job died" in reason for reason in report.inconclusive + report.warnings)


def test_a_checkpoint_left_beside_tensors_is_a_note_and_the_step_stays_clean(tmp_path):
    """Issue 33: a stray net.step.100.ckpt in a clean step is no dump file (no dump writer makes one): CLEAN with a
    note naming it, never exit 3; and the last step is not 2 of 3 files."""
    _one_step(tmp_path, steps=(0, 1))
    ckpt = tmp_path / "rank_0" / "Net" / "0" / "0" / "net.step.100.ckpt"
    ckpt.write_bytes(b"\0" * 16)
    assert not names.is_dump_file(ckpt.name)
    report = analyze(str(tmp_path))
    assert report.completeness == [] and report.inconclusive == [] and report.verdict == "clean"
    assert f"{ckpt}: a MindSpore checkpoint, not a dump file: skipped" in report.warnings


def test_a_file_that_does_not_look_like_a_dump_file_is_not_a_step_and_the_verdict_is_clean(tmp_path):
    _one_step(tmp_path)
    step1 = tmp_path / "rank_0" / "Net" / "0" / "1"
    step1.mkdir()
    (step1 / "notes.txt").write_text("not a tensor")
    report = analyze(str(tmp_path))
    assert report.verdict == "clean" and report.iterations == {0: [0]}


def test_each_leaf_directory_is_listed_once_and_mapping_csv_read_once(tmp_path, monkeypatch):
    """Appendix D: count the listings of every leaf directory during one analysis (jobs=1): the one listing."""
    for rank in (0, 1):
        d = _one_step(tmp_path, steps=(0, 1), rank=rank)
        for step in (0, 1):        # every step of a graph runs the same kernels (completeness compares them)
            d.op(step, "Mul", "Default_network-Net_Mul-op2", [ONES], [ONES])
    d.tensor(0, "Mul", "Default_network-Net_Mul-op3", "output", 0, ONES)    # rank 1: its step 1 file is shortened
    leaf = tmp_path / "rank_1" / "Net" / "0" / "1"
    short = "Mul.a8f3e0c2.0.0.1700000000000099.output.0.DefaultFormat.Float32.npy"
    np.save(leaf / short, ONES)
    (leaf / "mapping.csv").write_text(f"{short},Mul.Default_network-Net_Mul-op3.0.0.1700000000000099.output.0."
                                      "DefaultFormat.Float32.npy\n")
    leaves = {str(tmp_path / f"rank_{r}" / "Net" / "0" / str(s)) for r in (0, 1) for s in (0, 1)}
    listed = []
    real_scandir, real_listdir = os.scandir, os.listdir

    def scandir(path="."):
        listed.append(os.path.realpath(path))
        return real_scandir(path)

    def listdir(path="."):
        listed.append(os.path.realpath(path))
        return real_listdir(path)

    mappings = []
    real_mapping = layout.read_mapping
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(layout, "read_mapping", lambda path, warn: mappings.append(path) or real_mapping(path, warn))
    report = analyze(str(tmp_path), jobs=1)
    assert report.verdict == "clean" and report.files == 18
    assert {leaf: listed.count(leaf) for leaf in leaves} == {leaf: 1 for leaf in leaves}
    assert mappings == [str(leaf / "mapping.csv")]


def test_empty_rank_directories_come_from_the_one_listing(tmp_path):
    _one_step(tmp_path)
    (tmp_path / "rank_1").mkdir()
    (tmp_path / "rank_2" / "graphs").mkdir(parents=True)
    (tmp_path / "rank_2" / "graphs" / "ms_output_trace_code_graph_0.ir").write_text("")
    dump = layout.Dump.open(str(tmp_path), print)
    assert {rank: d.holds_files for rank, d in dump.rank_dirs.items()} == {0: True, 1: False, 2: True}
    notes = {row.rank: row.note for row in analyze(str(tmp_path)).rank_status}
    assert "rank_1/ is present but holds no file" in notes[1]
    assert "rank_2/ is present but none of its files is a tensor file" in notes[2]


def test_a_finished_dump_costs_no_stat_per_file(tmp_path, monkeypatch):
    """Completeness reuses the listing and what the walk's header reads found cut: in a dump whose directories were
    last written to an hour ago no file is stat'ed (issue 24: 48,000 stat calls on the 96,000-file benchmark)."""
    import time
    for rank in (0, 1):
        _one_step(tmp_path, steps=(0, 1), rank=rank)
    then = time.time() - 3600
    for folder, dirs, files in os.walk(tmp_path):
        for name in dirs + files:
            os.utime(os.path.join(folder, name), (then, then))
    leaves = {str(tmp_path / f"rank_{r}" / "Net" / "0" / str(s)) for r in (0, 1) for s in (0, 1)}
    stats = []
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if os.path.dirname(os.fspath(path)) in leaves:
            stats.append(path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    report = analyze(str(tmp_path), jobs=1)
    assert report.verdict == "clean" and report.completeness == [] and stats == []
