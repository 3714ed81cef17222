"""Pipeline stages from MindSpore strategy checkpoints (issue 20: "read from ... a MindSpore strategy checkpoint").

MindSpore on CPU refuses the semi-auto-parallel mode that writes these files, so the protobuf files here are written
by MindSpore's own generated message classes (`mindspore/train/node_strategy_pb2.py` from the installed wheel,
loaded without importing MindSpore) and the JSON ones follow the writer's `to_json`
(strategy_checkpoint_info.cc): built from the writer's code, not recorded on Ascend."""
import importlib.util
import json
import os

import pytest

from msoverflow.api import analyze
from msoverflow.cli import main
from msoverflow.errors import UserError
from msoverflow.parallel_layout import parse_spec
from msoverflow.readers import _protobuf as pb
from msoverflow.render import render
from msoverflow.strategy_checkpoint import StrategyError, read_strategy
from tests.support import ascend_fixtures as af


def vendor_pb2():
    """MindSpore's generated node_strategy_pb2, straight from the wheel (needs google.protobuf, a MindSpore dep)."""
    spec = importlib.util.find_spec("mindspore")
    if spec is None or importlib.util.find_spec("google.protobuf") is None:
        pytest.skip("mindspore (and its protobuf) are not installed (pip install 'msoverflow[mindspore]')")
    path = os.path.join(list(spec.submodule_search_locations)[0], "train", "node_strategy_pb2.py")
    module_spec = importlib.util.spec_from_file_location("vendor_node_strategy_pb2", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def write_protobuf(path, stage, dev_matrix, ops=("Default/network-Net/MatMul-op0",), save_count=1):
    pb2 = vendor_pb2()
    doc = pb2.ParallelStrategyMap()
    doc.current_stage = save_count          # a save counter in MindSpore's writer, not a pipeline stage
    for name in ops:
        item = doc.parallel_strategy_item.add()
        item.node_name = name
        item.parallel_strategys.stage = stage
        item.parallel_strategys.parallel_strategy.add().dim.extend([dev_matrix[0], 1])
    layout = doc.parallel_layout_item.add()
    layout.param_name = "model.layers.0.attention.wq.weight"
    layouts = layout.parallel_layouts
    layouts.dev_matrix.add().dim.extend(dev_matrix)
    layouts.tensor_map.add().dim.extend([-1, 0])
    layouts.param_split_shape.add()
    layouts.indices_offset.add()
    layouts.field, layouts.opt_weight_shard_step, layouts.opt_weight_shard_size = 0, 0, 0
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(doc.SerializeToString())


def write_json(path, stages_by_op, dev_matrix):
    doc = {"current_stage": 1,
           "parallel_strategy_item": {op: {"stage": stage, "parallel_strategy": [[dev_matrix[0], 1]]}
                                      for op, stage in stages_by_op.items()},
           "parallel_layout_item": {"lm_head.weight": {"dev_matrix": dev_matrix, "tensor_map": [-1, 0],
                                                       "tensor_shape": [8, 4], "field": 0,
                                                       "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}
    with open(path, "w") as fh:
        json.dump(doc, fh)


@pytest.fixture(scope="module")
def pp_job(tmp_path_factory):
    """The spec-built 8-rank PP=2 seed, with MindFormers' output/strategy/ckpt_strategy_rank_N.ckpt beside it."""
    job = tmp_path_factory.mktemp("ppjob")
    af.build_pp_seed_case(str(job / "dump"), optimizer_ops=True)
    for rank in range(8):
        write_protobuf(str(job / "strategy" / f"ckpt_strategy_rank_{rank}.ckpt"), stage=rank // 4, dev_matrix=[4, 1])
    return job


def test_the_writers_protobuf_read_back(pp_job):
    facts = read_strategy(str(pp_job / "strategy" / "ckpt_strategy_rank_5.ckpt"))
    assert (facts.stages, facts.stage_devices, facts.rank) == ({1}, 4, 5)


def test_strategy_files_beside_the_dump_give_every_rank_its_stage(pp_job):
    report = analyze(str(pp_job / "dump"))
    assert report.parallel["source"] == "strategy checkpoint 8 files in " + str(pp_job / "strategy")
    assert report.parallel["stages"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    assert [row.coords for row in report.rank_status] == [{"pp": 0}] * 4 + [{"pp": 1}] * 4
    assert not any("not used" in w for w in report.warnings)     # agrees with the graphs
    text = render(report, "text")
    assert "rank 5 (pp 1), step 1" in text
    assert "strategy checkpoint" in render(report, "markdown") and "strategy checkpoint" in render(report, "html")


def test_a_rank_file_that_contradicts_the_graphs_is_not_used(pp_job, tmp_path):
    """Rank 1's file claims the last stage, but rank 1 runs the kernels of ranks 0, 2 and 3: the files are refused
    with a warning, and the stages the graphs show are used (rank 1 is never said to be in stage 1)."""
    folder = tmp_path / "strategy"
    for rank in range(8):
        write_protobuf(str(folder / f"ckpt_strategy_rank_{rank}.ckpt"), stage=1 if rank in (1, 4, 5, 6, 7) else 0,
                       dev_matrix=[4, 1])
    report = analyze(str(pp_job / "dump"), parallel=str(folder))
    assert [row.coords for row in report.rank_status] == [{"pp": 0}] * 4 + [{"pp": 1}] * 4
    assert report.parallel["source"] == "inferred from the graphs"
    assert any("rank(s) 1 hold the ops of another stage" in w for w in report.warnings)
    refused = [w for w in report.warnings if "not used: the saved execution orders contradict" in w]
    assert len(refused) == 1 and "ranks 0-3 run the same kernels but are put in stages 0, 1" in refused[0], refused
    assert refused[0] in report.parallel["notes"]


def test_one_json_strategy_file_stage_from_the_device_matrix(tmp_path):
    """A whole network's file (ops of both stages, no rank in its name): stage = rank // devices per stage."""
    path = tmp_path / "strategy.json"
    write_json(path, {"Default/MatMul-op0": 0, "Default/MatMul-op9": 1}, dev_matrix=[2, 2])
    root = tmp_path / "dump"
    af.build_pp_seed_case(str(root))
    report = analyze(str(root), parallel=str(path))
    assert report.parallel["stages"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    assert report.parallel["pp"] == 2 and "dp and tp" in report.parallel["notes"][0]


def test_packed_and_unknown_fields_are_read_like_the_writers(tmp_path):
    """Hand-encoded wire format: packed dims, a fixed32 field the reader does not know, field order reversed."""
    dev = pb.field_bytes(1, pb.field_packed_varints(1, [2, 4]))        # DevMatrix, packed dims [2, 4]
    layout = pb.field_bytes(3, pb.field_bytes(1, "w") + pb.field_bytes(2, dev + pb.field_varint(5, 0)))
    strategy = pb.field_bytes(2, pb.field_bytes(2, pb.field_varint(1, 3)) + pb.field_bytes(1, "Default/Add-op1"))
    data = pb.encode_varint(9 << 3 | 5) + b"\0\0\0\0" + layout + strategy + pb.field_varint(1, 7)
    path = tmp_path / "ckpt_strategy_rank_12.ckpt"
    path.write_bytes(data)
    facts = read_strategy(str(path))
    assert (facts.stages, facts.stage_devices, facts.rank) == ({3}, 8, 12)


@pytest.mark.parametrize("content", [b"", b"\xff" * 20, b"\x12\x7fshort", b"\x0b\x00", b"\x0a\x03abc"])
def test_broken_strategy_files(tmp_path, content):
    """Empty, a runaway number, a length past the end, a group wire type, no strategies or layouts at all."""
    path = tmp_path / "ckpt_strategy_rank_0.ckpt"
    path.write_bytes(content)
    with pytest.raises(StrategyError):
        read_strategy(str(path))
    with pytest.raises(UserError):      # named with --parallel: a usage error
        parse_spec(str(path))
    job = tmp_path / "job"
    af.build_pp_seed_case(str(job / "dump"))
    (job / "strategy").mkdir()
    (job / "strategy" / "ckpt_strategy_rank_0.ckpt").write_bytes(content)
    report = analyze(str(job / "dump"))     # found beside the dump: a warning, and the graphs are used
    assert report.parallel["source"] == "inferred from the graphs"
    assert any("not a readable MindSpore strategy checkpoint" in w for w in report.warnings)


def test_named_on_the_command_line_a_broken_file_is_exit_2(tmp_path, capsys):
    path = tmp_path / "strategy.ckpt"
    path.write_bytes(b"\xff" * 20)
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(tmp_path), "--parallel", str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and "strategy checkpoint" in err


def test_model_weights_checkpoint_beside_the_dump_is_not_read(tmp_path):
    """A model's own .ckpt (weights) sits in the same output folder: only names that say strategy are read."""
    root = tmp_path / "dump"
    af.build_pp_seed_case(str(root))
    (tmp_path / "model.ckpt").write_bytes(b"\x0a\x03abc" * 10)
    report = analyze(str(root))
    assert report.parallel["source"] == "inferred from the graphs"
    assert not any("strategy" in w for w in report.warnings)


# ---- checked against the real msrun data-parallel dump (issue 26 item 2) ---------------------------------------

