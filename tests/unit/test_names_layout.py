"""File-name grammar and layout discovery: every variant the reference documents, plus the quirks seen in real runs."""
import os

import numpy as np
import pytest

from msoverflow import names
from msoverflow.errors import UserError
from msoverflow.layout import LAYOUT_ACL, LAYOUT_DEBUG, LAYOUT_GE, LAYOUT_MS, Dump, interpret, read_mapping


def test_full_scope_name_with_dtype_suffix_seen_on_ms_2_10_cpu():
    p = names.parse("SqrtGrad.Gradients_Default_network-WithLossCell__backbone-NormHead_Grad_Sqrt_SqrtGrad-op0"
                    ".0.0.1795961172625618.output.0.DefaultFormat.Float16.npy")
    assert (p.op_type, p.io, p.slot, p.fmt, p.dtype, p.timestamp) == (
        "SqrtGrad", "output", 0, "DefaultFormat", "float16", 1795961172625618)
    assert p.op_name.endswith("Grad_Sqrt_SqrtGrad-op0")


def test_short_name_before_2_4_has_no_dtype_field():
    p = names.parse("Conv2D.Conv2D-op12.3.2.160012.input.1.NCHW.npy")
    assert (p.op_name, p.task_id, p.stream_id, p.io, p.slot, p.fmt, p.dtype) == (
        "Conv2D-op12", 3, 2, "input", 1, "NCHW", None)


def test_nd_float_spelling_and_dotted_old_op_names():
    p = names.parse("Cast.Default.net.Cast-op3.65535.65535.12.output.0.ND.FLOAT.npy")
    assert (p.op_name, p.task_id, p.fmt, p.dtype) == ("Default.net.Cast-op3", 65535, "ND", "float32")


def test_parameter_and_graph_input_files():
    p = names.parse("Parameter.lm_head_weight.0.0.17959.output.0.DefaultFormat.Float16.npy")
    assert (p.op_type, p.op_name, p.dtype) == ("Parameter", "lm_head_weight", "float16")
    assert names.parse("Parameter.inputs0.0.0.5.output.0.DefaultFormat.Int32.npy").dtype == "int32"


def test_opdebug_json_bin_and_acl_binary_names():
    j = names.parse("Opdebug.Node_OpDebug.221.19.1705388945730580.output.0.json")
    b = names.parse("Opdebug.Node_OpDebug.221.19.1705388945730580")
    assert j.kind == b.kind == names.KIND_OPDEBUG and (j.task_id, j.stream_id) == (221, 19)
    acl = names.parse("MatMul.Default_MatMul-op1.4.5.1705388945730580")
    assert (acl.kind, acl.op_type, acl.op_name, acl.task_id) == (names.KIND_BIN, "MatMul", "Default_MatMul-op1", 4)


@pytest.mark.parametrize("bad", ["mapping.csv", "x.npy", "statistic.csv", "a.b.c.npy",
                                 "Add.x.0.0.notatime.output.0.ND.npy", "Add.x.0.0.1.sideways.0.ND.npy"])
def test_unknown_names_are_rejected(bad):
    assert names.parse(bad) is None


def test_mapping_csv_restores_long_names(tmp_path):
    (tmp_path / "mapping.csv").write_text("8472.npy,Add.very_long_name.0.0.7.output.0.ND.Float32.npy\nbroken\n")
    warnings = []
    mapping = read_mapping(str(tmp_path / "mapping.csv"), warnings.append)
    assert names.parse(mapping["8472.npy"]).op_name == "very_long_name"
    assert warnings and "mapping.csv:2" in warnings[0]


@pytest.mark.parametrize("rel, layout, rank, graph, iteration", [
    ("rank_3/Net/1/7", LAYOUT_MS, 3, "1", 7),
    ("rank_2/debug_files/4", LAYOUT_DEBUG, 2, "debug", 4),
    ("5/20240116153025/6/Baichuan/1/5", LAYOUT_ACL, 6, "1", 5),
    ("20240116153025/6/Baichuan/1/5", LAYOUT_GE, 6, "1", 5),
])
def test_leaf_directories_are_interpreted_by_layout(tmp_path, rel, layout, rank, graph, iteration):
    d = interpret(str(tmp_path / rel))
    assert (d.layout, d.rank, d.graph, d.iteration) == (layout, rank, graph, iteration)


def discover(path, warn):
    return Dump.open(path, warn).dirs


def _touch_npy(folder, name="Add.Default_Add-op0.0.0.1.output.0.DefaultFormat.Float32.npy"):
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, name), np.zeros(2, np.float32))


def test_discover_from_any_level_and_several_ranks(tmp_path):
    for r in range(3):
        for it in range(2):
            _touch_npy(tmp_path / f"rank_{r}" / "Net" / "0" / str(it))
    assert len(discover(str(tmp_path), print)) == 6
    inside = discover(str(tmp_path / "rank_1" / "Net"), print)
    assert {(d.rank, d.iteration) for d in inside} == {(1, 0), (1, 1)}
    leaf = discover(str(tmp_path / "rank_2" / "Net" / "0" / "1"), print)
    assert [(d.rank, d.iteration, d.rank_root) for d in leaf] == [(2, 1, str(tmp_path / "rank_2"))]


def test_symlink_loop_is_reported_not_followed_forever(tmp_path):
    _touch_npy(tmp_path / "rank_0" / "Net" / "0" / "0")
    os.symlink(tmp_path / "rank_0", tmp_path / "rank_0" / "Net" / "0" / "loop")
    warnings = []
    found = discover(str(tmp_path), warnings.append)
    assert len(found) == 1
    assert any("visited twice" in w for w in warnings)


def test_missing_path_and_file_path_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        discover(str(tmp_path / "nope"), print)
    f = tmp_path / "f.txt"
    f.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        discover(str(f), print)
