"""Issue 33 item 1: a recompute never runs code from the dump or the working directory, and its memory is bounded
by the shapes it will compute. Real MindSpore 2.10 CPU dumps (tests/support/gen_upstream_dumps.py); the edited
copies say what was edited in their case.json."""
import os
import re
import shutil
import stat

import pytest

from msoverflow.analysis import analyze

pytestmark = pytest.mark.mindspore


def test_a_custom_op_is_never_recomputed(upstream_dumps):
    report = analyze(str(upstream_dumps["custom_pyfunc"]), progress=False)
    assert report.first.op_type.startswith("Custom")
    assert report.cause.cause == "unknown" and report.cause.by == ""
    assert "runs code of its own" in report.cause.reason and "would run that code" in report.cause.reason


def _fake_compilers(directory, marker):
    directory.mkdir()
    for name in ("g++", "gcc", "c++", "cc", "clang++"):
        tool = directory / name
        tool.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def test_a_custom_aot_payload_named_by_the_dump_is_never_compiled(upstream_dumps, tmp_path, monkeypatch):
    record = upstream_dumps.case("custom_aot_payload")
    assert record["edited"] and "func_type 'aot'" in record["edit"]
    dump = tmp_path / "dump"
    shutil.copytree(upstream_dumps["custom_aot_payload"], dump)
    graphs = dump / "rank_0" / "graphs"
    ir = next(graphs.glob("*.ir"))
    ir.write_text(re.sub(r'func: "[^"]*"', f'func: "{graphs / "payload.cc"}:Fn"', ir.read_text()))
    compiled = tmp_path / "COMPILER_RAN"
    _fake_compilers(tmp_path / "bin", compiled)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    report = analyze(str(dump), progress=False)
    assert report.first.op_type.startswith("Custom")
    assert report.cause.cause == "unknown" and "would run that code" in report.cause.reason
    assert not compiled.exists() and not (cwd / "PAYLOAD_RAN").exists()
    assert list(cwd.iterdir()) == []                  # no custom_kernel_meta/, nothing written into cwd


def test_the_mindspore_worker_ignores_the_working_directory_and_pythonpath(upstream_dumps, tmp_path, monkeypatch):
    record = upstream_dumps.case("tile_output_inf")
    assert record["edited"]
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "EVIL_RAN"
    for name in ("numpy.py", "json.py", "mindspore.py"):
        (evil / name).write_text(f"open({str(marker)!r}, 'a').write({name!r})\nraise SystemExit(7)\n")
    monkeypatch.chdir(evil)
    monkeypatch.setenv("PYTHONPATH", str(evil))
    report = analyze(str(upstream_dumps["tile_output_inf"]), progress=False)
    assert not marker.exists()
    assert report.first.op_type == "Tile"
    # MindSpore recomputed the Tile in its worker: finite, where the dump holds inf
    assert report.cause.by == "mindspore" and report.cause.cause == "device"
    assert sorted(p.name for p in evil.iterdir()) == ["json.py", "mindspore.py", "numpy.py"]


def test_the_mindspore_fallback_counts_the_shape_it_would_produce(upstream_dumps):
    record = upstream_dumps.case("tile_multiples_huge")
    assert record["edited"] and "(4000, 4000)" in record["edit"]
    report = analyze(str(upstream_dumps["tile_multiples_huge"]), progress=False)
    assert report.first.op_type == "Tile"
    assert report.cause.cause == "unknown" and report.cause.by == ""
    # 8000 x 8000 results in float32 and float64: over the budget before any process starts
    assert "results 64,000,000 x 2 precisions" in report.cause.reason
    assert "more than the 16,777,216 recomputed in memory" in report.cause.reason


def test_the_numpy_recompute_counts_the_product_not_the_dumped_output(upstream_dumps):
    record = upstream_dumps.case("matmul_wide_inputs")
    assert record["edited"] and "12000x12000" in record["edit"]
    report = analyze(str(upstream_dumps["matmul_wide_inputs"]), progress=False)
    assert report.first.op_type == "MatMul"
    assert report.cause.cause == "unknown"
    assert "MatMul would compute" in report.cause.reason and "16,777,216" in report.cause.reason
    assert "144,384,000" in report.cause.reason       # 12000 x 12000 and both operands, not the dumped 8 x 8


# ---- the worker's limits, in effect: a real subprocess under small limits; the report is still made ------------

def _limited_report(dump):
    report = analyze(str(dump), progress=False)
    assert report.first.op_type == "Tile"          # the origin, found whatever the recompute did
    assert report.cause.cause == "unknown" and report.cause.by == ""      # never a false cause
    assert report.cause.reason.startswith("not recomputed: ")
    return report.cause.reason


def test_the_workers_memory_limit_stops_mindspore_and_the_report_says_so(upstream_dumps, monkeypatch):
    """The real worker under a 300 MiB address-space limit: MindSpore cannot even map its libraries."""
    from msoverflow.cause import mindspore_kernel
    monkeypatch.setattr(mindspore_kernel, "memory_limit", lambda elements: 300 << 20)
    reason = _limited_report(upstream_dumps["tile_output_inf"])
    assert "MindSpore could not recompute Tile" in reason and "its memory limit of 300 MiB ended it" in reason


@pytest.mark.parametrize("limit", ["memory", "cpu", "wall"])
def test_a_worker_that_exceeds_its_limit_is_stopped_and_the_report_says_so(upstream_dumps, tmp_path, monkeypatch,
                                                                          limit):
    """A worker (a stand-in for mindspore_worker.py, started the same way: `python -I` under the same limits)
    that allocates 2 GiB, spins, or sleeps: the limit stops it, the origin keeps its place, the cause is unknown
    with the limit named."""
    from msoverflow.cause import mindspore_kernel
    body = {"memory": "held = bytearray(2 << 30)\n",
            "cpu": "while True:\n    pass\n",
            "wall": "import time\ntime.sleep(60)\n"}[limit]
    worker = tmp_path / "worker.py"
    worker.write_text(body)
    monkeypatch.setattr(mindspore_kernel, "WORKER", str(worker))
    monkeypatch.setattr(mindspore_kernel, "memory_limit", lambda elements: 512 << 20)
    monkeypatch.setattr(mindspore_kernel, "CPU_SECONDS", 1)
    monkeypatch.setattr(mindspore_kernel, "TIMEOUT_S", 3 if limit == "wall" else 60)
    reason = _limited_report(upstream_dumps["tile_output_inf"])
    assert {"memory": "MemoryError (its memory limit of 512 MiB ended it)",
            "cpu": "its CPU-time limit of 1 s ended it",
            "wall": "MindSpore did not recompute Tile within 3 s"}[limit] in reason, reason


def test_a_recompute_over_the_budget_starts_no_process(upstream_dumps, monkeypatch):
    """Counted from the shapes it will produce (Tile's multiples [4000, 4000]) before anything starts."""
    import subprocess
    started = []
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: started.append(args) or 1 / 0)
    reason = _limited_report(upstream_dumps["tile_multiples_huge"])
    assert "results 64,000,000 x 2 precisions" in reason and not started
