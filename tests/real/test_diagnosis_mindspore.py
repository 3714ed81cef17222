"""Ops without a numpy reference kernel are recomputed by MindSpore (PyNative CPU) in a subprocess with a bounded
time (msoverflow/cause/mindspore_kernel.py), on real dumps; the analyzing process never imports MindSpore."""
import shutil
import subprocess
import sys

import numpy as np
import pytest

from msoverflow.analysis import analyze
from msoverflow.cause import mindspore_kernel, recompute
from msoverflow.cause.cause import reproduce
from msoverflow.cause.recompute import RecomputeError, disagreement
from msoverflow.evaluate import TensorAccess
from msoverflow.readers.ir_graph import graph_files, load_ir
from msoverflow.walk import read_unit, units

pytestmark = pytest.mark.mindspore


def _first(dump, op_type):
    unit = units(str(dump))[0]
    read = read_unit(unit)
    ex = next(e for e in read.executions if e.op_type == op_type and e.outputs)
    graph = load_ir(graph_files(read.rank_roots[(ex.rank, ex.graph)], ex.graph)[0])
    return ex, graph.find(ex.op_name)


@pytest.mark.parametrize("op_type", ["Transpose", "StridedSlice"])   # StridedSlice: masks go to its constructor
def test_mindspore_recomputes_what_it_wrote(real_dumps, op_type):
    assert not recompute.supported(op_type)
    ex, node = _first(real_dumps["kernel_zoo"], op_type)
    access = TensorAccess(lambda message: None)
    out = ex.outputs[0]
    dumped = np.asarray(access.array(out))
    results, by, _inputs = reproduce(ex, access, ["float32"], node=node, out_shape=dumped.shape)
    assert by == "mindspore"
    assert not disagreement(results["float32"][0], dumped, "float32", out.dtype).any()


def test_a_nan_mindspore_does_not_make_is_a_device_fault(real_dumps, tmp_path):
    """A copy of the real kernel_zoo dump with one Transpose output value turned into NaN by flipping exponent bits
    (made here, labelled: an edited dump)."""
    dump = tmp_path / "edited"
    shutil.copytree(real_dumps["kernel_zoo"], dump)
    path = next(dump.rglob("Transpose.*.output.0.*.npy"))
    values = np.load(path)
    bits = values.reshape(-1).view(np.uint32)
    zeros = np.array([8 - bin(int(b >> 23) & 0xFF).count("1") for b in bits])
    index = int(np.flatnonzero(zeros <= 2)[0])      # a value two exponent bits from all ones: a NaN by a 2-bit flip
    bits[index] |= np.uint32(0x7F800000)
    np.save(path, values)
    report = analyze(str(dump), progress=False)
    assert report.first.op_type == "Transpose"
    cause = report.first.cause
    assert (cause.cause, cause.by) == ("device", "mindspore"), cause
    assert cause.pattern == "bit flip" and cause.where.startswith("1 of 64 values")
    # the analysing process itself never imported MindSpore: the recompute ran in a subprocess
    script = ("import sys; from msoverflow.analysis import analyze; "
              f"r = analyze({str(dump)!r}, progress=False); print(r.cause.by, 'mindspore' in sys.modules)")
    probe = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert probe.stdout.split() == ["mindspore", "False"], probe.stderr[-2000:]


def test_mindspore_is_given_a_bounded_time(real_dumps, monkeypatch):
    ex, node = _first(real_dumps["kernel_zoo"], "Transpose")
    monkeypatch.setattr(mindspore_kernel, "TIMEOUT_S", 0.01)
    access = TensorAccess(lambda message: None)
    with pytest.raises(RecomputeError, match="did not recompute Transpose within"):
        reproduce(ex, access, ["float32"], node=node, out_shape=np.asarray(access.array(ex.outputs[0])).shape)


def test_an_op_mindspore_does_not_have_is_said(tmp_path):
    with pytest.raises(RecomputeError, match="MindSpore could not recompute NoSuchOp.*no primitive NoSuchOp"):
        mindspore_kernel.run_in_subprocess("NoSuchOp", {0: np.ones(2, np.float32)}, None, ["float32"])
