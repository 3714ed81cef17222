"""Parameters hit when the step ran no optimizer kernel: a REAL 4-rank msrun data-parallel run (MindSpore 2.10 CPU,
MCCL) under a loss-scale-style cell whose optimizer runs only inside `if every reduced gradient is finite`
(tests/support/gen_real_dumps.py case dp4_skip_on_overflow). The NormHead weight's gradient overflows on rank 2 at
step 1 and reaches every rank through the gradient AllReduce; step 1 runs no SGD at all. The table must still name
lm_head.weight on every rank: made on rank 2, received on the others. (`--parallel pp=4` on the same run:
tests/unit/test_parallel_layout.py, test_pipeline_stages_on_a_data_parallel_run_are_refused.)"""
import glob
import json
import os

import numpy as np
import pytest

from msoverflow.analysis import analyze
from msoverflow.cli import main
from msoverflow.render import render
from msoverflow.report_dict import report_dict

pytestmark = pytest.mark.mindspore
CASE = "dp4_skip_on_overflow"


@pytest.fixture(scope="module")
def dump(multirank_dumps):
    return str(multirank_dumps[CASE])


@pytest.fixture(scope="module")
def report(dump):
    return analyze(dump, progress=False)


def _files(dump, rank, graph, step, pattern):
    return sorted(glob.glob(os.path.join(dump, f"rank_{rank}", "Net", str(graph), str(step), pattern)))


def test_the_bad_step_ran_no_optimizer_kernel_on_any_rank(dump):
    """The premise, from the dump itself: SGD ran at step 0 (graph 2, the branch), never at step 1."""
    for rank in range(4):
        assert _files(dump, rank, 2, 0, "SGD.*.npy")
        assert not glob.glob(os.path.join(dump, f"rank_{rank}", "Net", "*", "1", "SGD.*"))


def test_the_norm_head_weight_is_hit_on_every_rank_made_on_rank_2_received_on_the_others(report):
    rows = {(p.rank, p.name, p.step) for p in report.parameters}
    assert rows == {(rank, "lm_head.weight", 1) for rank in range(4)}, report.parameters
    for hit in report.parameters:
        assert hit.shape == (32, 16)
        assert "grad_reducer" in hit.op_name and hit.op_name.startswith("Default_grad_reducer")
        if hit.rank == 2:
            assert hit.how.startswith("gradient computed on this rank, then through AllReduce ")
        else:
            assert hit.how.startswith("gradient received via AllReduce ")
        assert "update skipped" in hit.how and "not known" not in hit.how


def test_the_named_collective_carries_the_gradient_the_weights_optimizer_call_takes(dump, report):
    """Not the table's own word: at step 0 (the update ran) the lm_head.weight SGD's gradient input holds the
    output of the AllReduce the table names, times 1/4 (gradients_mean), cast to fp16 and back. The lm_head SGD is
    the one writing Float16: lm_head.weight is the graph's only Float16 parameter."""
    ir = open(os.path.join(dump, "rank_0", "graphs", "ms_output_trace_code_graph_0.ir")).read()
    fp16 = [line.split(":")[0] for line in ir.splitlines()
            if line.startswith("%para") and "Ref[Tensor[Float16]]" in line]
    assert fp16 == ["%para1_lm_head.weight"]
    named = {p.rank: p.op_name for p in report.parameters}
    for rank in range(4):
        sgd_fp16 = [p for p in _files(dump, rank, 2, 0, "SGD.*.output.0.*.npy") if ".Float16." in p]
        assert len(sgd_fp16) == 1
        sgd = os.path.basename(sgd_fp16[0]).split(".")[1]
        gradient = np.load(_files(dump, rank, 2, 0, f"SGD.{sgd}.*.input.1.*.npy")[0])
        reduced = np.load(_files(dump, rank, 0, 0, f"AllReduce.{named[rank]}.*.output.0.*.npy")[0])
        expected = (reduced * 0.25).astype(np.float16).astype(np.float32)
        assert np.array_equal(gradient, expected)
        others = [p for p in _files(dump, rank, 0, 0, "AllReduce.*.output.0.*.npy") if f".{named[rank]}." not in p]
        assert others and not any(np.load(p).shape == gradient.shape and np.array_equal(
            (np.load(p) * 0.25).astype(np.float16).astype(np.float32), gradient) for p in others)


def test_the_table_in_every_format(dump, report, capsys):
    assert main(["analyze", dump, "--no-progress", "--no-save"]) == 1
    text = capsys.readouterr().out
    table = text[text.index("Parameters hit (4"):]
    assert table.count("lm_head.weight") == 4 and "computed on this rank" in table
    markdown = render(report, "markdown")
    assert markdown.count("| `lm_head.weight` |") == 4
    doc = report_dict(report)
    assert sorted((p["rank"], p["name"]) for p in doc["parameters"]) == [(r, "lm_head.weight") for r in range(4)]
    json.dumps(doc)
    html = render(report, "html")
    assert "Parameters hit (4)" in html and html.count("lm_head.weight") >= 4



def test_without_the_optimizers_saved_graph_the_row_stays_and_says_why(dump, tmp_path):
    """The branch graph holding the SGD calls removed from every rank: the gradient is still listed, unnamed, with
    the reason; it never disappears."""
    import shutil
    copy = tmp_path / "dump"
    shutil.copytree(dump, copy)
    for path in glob.glob(str(copy / "rank_*" / "graphs" / "ms_output_trace_code_graph_2.*")):
        os.remove(path)
    report = analyze(str(copy), progress=False)
    assert sorted(p.rank for p in report.parameters) == [0, 1, 2, 3]
    for hit in report.parameters:
        assert hit.name.startswith("? (the gradient AllReduce Default_grad_reducer")
        assert hit.how.endswith("the parameter is not known: no saved graph of this rank holds an optimizer call")
