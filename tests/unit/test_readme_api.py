"""The Python API example of the README and of docs/api.md, run as written (the block between the api-example
markers) in a directory whose ./dump is a two-rank dump: rank 1 overflows in Exp, rank 0 receives the bad value
through AllReduce."""
import contextlib
import io
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tests.support.synth_dump import SynthDump

REPO = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/api.md"]


def api_example(page: str) -> str:
    block = re.search(r"<!-- api-example.*?-->\s*```python\n(.*?)```\s*<!-- /api-example -->",
                      (REPO / page).read_text(), re.S)
    assert block, f"{page} has no api-example block"
    return block.group(1)


@pytest.mark.parametrize("page", PAGES)
def test_readme_api_example_runs_as_written(page, tmp_path, monkeypatch):
    ones = np.ones(4, np.float32)
    rank0 = SynthDump(str(tmp_path / "dump"), rank=0)
    rank0.op(0, "MatMul", "Default_network-Net_MatMul-op1", [ones, ones], [ones])
    rank0.op(0, "AllReduce", "Default_network-Net_AllReduce-op2", [ones], [np.array([np.inf, 1], np.float32)])
    rank1 = SynthDump(str(tmp_path / "dump"), rank=1)
    rank1.op(0, "Exp", "Default_network-Net_Exp-op1", [ones], [np.array([np.inf, np.nan], np.float32)])
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    namespace = {}
    with contextlib.redirect_stdout(out):
        exec(compile(api_example(page), f"{page} api-example", "exec"), namespace)
    text = out.getvalue()
    assert text.splitlines()[0] == "anomaly Exp rank 1 step 0"
    assert "arrival: 0 0 AllReduce" in text and "scanned: {0: [0], 1: [0]}" in text
    events = namespace["events"]
    assert len(events) == 7 and set(events["rank"]) == {0, 1}
    assert len(namespace["bad"]) == 2                          # the AllReduce output and Exp's output
    assert namespace["report_json"]["verdict"] == "anomaly"
    assert set(os.listdir(tmp_path / "dump")) == {"rank_0", "rank_1"}      # nothing written into the dump


def test_the_api_function_survives_importing_the_pipeline_module(tmp_path):
    """`import msoverflow.analysis` (the pipeline module, not named like the function) leaves
    `msoverflow.analyze(...)` the API function."""
    import msoverflow
    import msoverflow.analysis  # noqa: F401
    d = SynthDump(str(tmp_path / "dump"), rank=0)
    d.op(0, "Exp", "Default_Exp-op1", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    assert msoverflow.analyze(str(tmp_path / "dump")).first.op_type == "Exp"
