"""Real MindSpore CPU dumps of issue 33's "told wrongly about sources, names and parameters" class
(tests/support/gen_harden_dumps.py): the source line is the innermost single-line frame, the Cell of an op whose
scope names none comes from the call trace, and "Parameters hit" lists weights only."""
import sys

import pytest

from msoverflow.analysis import analyze


@pytest.fixture(scope="module")
def harden_dumps():
    from tests.conftest import mindspore_available
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_harden_dumps
    return gen_harden_dumps.ensure_cases(
        progress=lambda msg: print(f"[harden dumps] {msg}", file=sys.__stderr__, flush=True))


def _origin(report):
    assert len(report.anomalies) == 1, [(f.op_type, f.role) for f in report.anomalies]
    return report.first


def test_source_is_the_innermost_line_inside_the_if_block(harden_dumps):
    first = _origin(analyze(str(harden_dumps["branch_head_sqrt"])))
    assert first.op_type == "Sqrt"
    assert first.source.code == "norm = self.sqrt(variance)"
    assert (first.cell, first.cell_type) == ("network._backbone.head", "BranchHead")


def test_expanded_op_takes_its_cell_from_the_call_trace(harden_dumps):
    """`variance * 3e38` runs as Expand/_Muls/Mul-op0: the scope names no Cell, `return self.head(x)` does."""
    report = analyze(str(harden_dumps["branch_head_scale_expand"]))
    first = _origin(report)
    assert first.op_type == "Mul" and "Expand/" in (first.full_name or first.op_name)
    assert first.source.code == "return variance * 3e38"
    assert (first.cell, first.cell_type) == ("network._backbone.head", "BranchHead")


def test_parameters_hit_are_weights_only(real_dumps):
    """nan_in_batch: the data batch (graph input `inputs0`, `IsWeight: false` in the saved graph) holds the NaN;
    its Parameter file is bad, but it is no parameter: the weights whose gradients went bad are."""
    report = analyze(str(real_dumps["nan_in_batch"]))
    names = {p.name for p in report.parameters}
    assert names == {"fc.bias", "fc.weight"}, names
