"""The tests of tests/unit/test_strategy_checkpoint.py that read a real MindSpore dump (moved here: tests/unit holds no MindSpore run;
the helpers stay in tests/unit/test_strategy_checkpoint.py)."""
import json
import shutil

import pytest

from msoverflow.api import analyze
from msoverflow.render import render
from tests.unit.test_strategy_checkpoint import write_json, write_protobuf


@pytest.mark.mindspore
@pytest.mark.parametrize("form", ["json", "protobuf"])
def test_strategy_declaring_ranks_4_to_7_beside_a_dump_of_0_to_3(multirank_dumps, tmp_path, form):
    """A 2-stage job of 4 devices per stage, of which only stage 0 (ranks 0-3, the real msrun dump) was dumped:
    0-3 get stage 0, and 4-7 are listed as declared, not dumped (rank table, JSON), never silently dropped."""
    job = tmp_path / "job"
    shutil.copytree(multirank_dumps["dp4_two_origins"], job / "dump")
    if form == "json":       # one whole-network file: ops of both stages, 4 devices per stage
        write_json(job / "strategy.json", {"Default/MatMul-op0": 0, "Default/MatMul-op9": 1}, dev_matrix=[4, 1])
    else:                    # MindFormers' per-rank files, output/strategy/ckpt_strategy_rank_N.ckpt
        for rank in range(8):
            write_protobuf(str(job / "strategy" / f"ckpt_strategy_rank_{rank}.ckpt"), stage=rank // 4,
                           dev_matrix=[4, 1])
    report = analyze(str(job / "dump"))
    assert [row.coords for row in report.rank_status[:4]] == [{"pp": 0}] * 4
    last = report.rank_status[-1]
    assert (last.rank_label, last.status) == ("4-7", "not dumped") and last.note.startswith("declared by strategy")
    assert report.parallel["stages"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    assert report.parallel["declared_not_dumped"] == [[4, 7]]
    assert not any("not used" in w for w in report.warnings)
    doc = json.loads(render(report, "json"))
    assert [(r["rank"], r.get("last_rank"), r["status"]) for r in doc["ranks"]][-1] == (4, 7, "not dumped")
    text = render(report, "text")
    assert "4-7   not dumped  -             declared by strategy checkpoint" in text


@pytest.mark.mindspore
def test_strategy_that_the_execution_orders_contradict_is_refused(multirank_dumps, tmp_path):
    """2 devices per stage would put ranks 0-1 and 2-3 in different stages; they run the same kernels."""
    write_json(tmp_path / "strategy.json", {"Default/MatMul-op0": 0, "Default/MatMul-op9": 1}, dev_matrix=[2, 1])
    report = analyze(str(multirank_dumps["dp4_two_origins"]), parallel=str(tmp_path / "strategy.json"))
    refused = [w for w in report.warnings if w.startswith("strategy checkpoint strategy.json: not used")]
    assert len(refused) == 1 and "AllReduce over mccl_world_group spans them all" in refused[0], report.warnings
    assert report.parallel is None and all(row.coords is None for row in report.rank_status)
    assert all(row.status != "not dumped" for row in report.rank_status)     # a refused layout declares nothing
