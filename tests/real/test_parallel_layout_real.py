"""The tests of tests/unit/test_parallel_layout.py that read a real MindSpore dump (moved here: tests/unit holds no MindSpore run;
the helpers stay in tests/unit/test_parallel_layout.py)."""
import json
import shutil

import pytest

from msoverflow.api import analyze
from msoverflow.cli import main
from msoverflow.render import render
from tests.unit.test_parallel_layout import _no_stages_claimed


@pytest.mark.mindspore
def test_real_four_rank_dump_with_dp4(multirank_dumps, capsys):
    dump = str(multirank_dumps["dp4_two_origins"])
    report = analyze(dump, parallel="dp=4")
    assert [row.coords for row in report.rank_status] == [{"pp": 0, "dp": r, "tp": 0} for r in range(4)]
    by_rank = {}
    for hit in report.parameters:
        by_rank.setdefault(hit.rank, {})[hit.name] = hit
    names = {"head.weight", "head.bias", "embed.embedding_table"}
    assert sorted(by_rank) == [0, 1, 2, 3] and all(set(v) == names for v in by_rank.values())
    # rank 1 made the NaN at step 1; ranks 0, 2 and 3 got it through the gradient AllReduce that step
    assert all(h.how.startswith("gradient computed on this rank, then through AllReduce")
               and h.iteration == 1 for h in by_rank[1].values())
    for rank in (0, 2, 3):
        assert all(h.how.startswith("gradient received via AllReduce") and "grad_reducer" in h.how
                   and h.iteration == 1 for h in by_rank[rank].values())
    assert main(["analyze", dump, "--parallel", "dp=4", "--no-progress", "--no-save"]) == 1
    out = capsys.readouterr().out
    assert "where : rank 1 (pp 0, dp 1, tp 0), step 1" in out and "head.weight" in out
    assert analyze(dump).parallel is None     # same kernels on every rank, no file: the layout is unknown


@pytest.mark.mindspore
@pytest.mark.parametrize("case,layout", [("dp4_two_origins", "pp=4"), ("dp4_two_origins", "dp=2,pp=2"),
                                         ("dp2_empty_loss_mask", "pp=2"), ("dp2_normhead_one_rank", "pp=2"),
                                         ("dp4_skip_on_overflow", "pp=4")])
def test_pipeline_stages_on_a_data_parallel_run_are_refused(multirank_dumps, case, layout, capsys):
    """Every rank runs the same kernels and the gradient AllReduce is over the world group: not pipeline stages."""
    dump = str(multirank_dumps[case])
    report = analyze(dump, parallel=layout)
    refused = [w for w in report.warnings if w.startswith(f"--parallel {layout}: not used: every dumped rank")]
    assert len(refused) == 1, report.warnings
    assert "and AllReduce over mccl_world_group spans them all: data parallel" in refused[0]
    headline = render(report, "text").split("\n", 2)[1]
    _no_stages_claimed(report, [headline, render(report, "markdown").split("Ranks:")[0]])
    assert json.loads(render(report, "json"))["parallel"] is None
    assert main(["analyze", dump, "--parallel", layout, "--no-progress", "--no-save"]) == 1
    out = capsys.readouterr().out
    assert "coords" not in out and "not used: every dumped rank" in out


@pytest.mark.mindspore
def test_a_mindformers_yaml_that_contradicts_the_execution_orders_is_refused(multirank_dumps, tmp_path):
    """MindFormers' parallel_config beside the dump (found without --parallel) says 2 stages of 2: the 4 ranks run
    the same kernels, so it is refused, and no rank is given a stage."""
    job = tmp_path / "job"
    shutil.copytree(multirank_dumps["dp4_two_origins"], job / "dump")
    (job / "run_llama.yaml").write_text("parallel_config:\n  data_parallel: 2\n  model_parallel: 1\n"
                                        "  pipeline_stage: 2\n")
    report = analyze(str(job / "dump"))
    assert any(w.startswith("MindFormers YAML run_llama.yaml (parallel_config): not used: every dumped rank (0-3) "
                            "runs the same 28 kernels") for w in report.warnings), report.warnings
    _no_stages_claimed(report, [render(report, "text").split("\n", 2)[1]])
    (job / "run_llama.yaml").write_text("parallel_config:\n  data_parallel: 4\n  model_parallel: 1\n"
                                        "  pipeline_stage: 1\n")
    report = analyze(str(job / "dump"))
    assert [row.coords for row in report.rank_status] == [{"pp": 0, "dp": r, "tp": 0} for r in range(4)]


@pytest.mark.mindspore
def test_ranks_a_layout_declares_beyond_the_dump_are_listed_as_not_dumped(multirank_dumps, capsys):
    dump = str(multirank_dumps["dp4_two_origins"])
    report = analyze(dump, parallel="dp=8")
    assert [(row.rank_label, row.status) for row in report.rank_status][-1] == ("4-7", "not dumped")
    assert report.rank_status[-1].note == "declared by --parallel dp=8"
    assert report.parallel["declared_not_dumped"] == [[4, 7]]
    assert any(r.startswith("ranks 4-7 expected but not dumped (declared by --parallel dp=8)")
               for r in report.inconclusive), report.inconclusive
    doc = json.loads(render(report, "json"))
    assert doc["ranks"][-1]["rank"] == 4 and doc["ranks"][-1]["last_rank"] == 7
    assert doc["ranks"][-1]["status"] == "not dumped"
    assert "4-7   not dumped" in render(report, "text")
    assert analyze(dump, parallel="dp=8", ranks="0-3").parallel.get("declared_not_dumped") is None   # a selection


@pytest.mark.mindspore
def test_one_notation_for_coordinates_in_every_view(multirank_dumps):
    """Headline, rank table, parameter table (text, markdown, HTML) and JSON: pp, dp, tp, in that order."""
    report = analyze(str(multirank_dumps["dp4_two_origins"]), parallel="dp=4")
    phrase = "pp 0, dp 1, tp 0"
    text, markdown, html = (render(report, fmt) for fmt in ("text", "markdown", "html"))
    assert f"where : rank 1 ({phrase}), step 1" in text
    ranks_table = text.split("\nRanks\n", 1)[1].split("\n\n", 1)[0]
    params_table = text.split("Parameters hit", 1)[1].split("\n\n", 1)[0]
    assert f"1     origin    1     {phrase}" in ranks_table and f"1     {phrase}" in params_table
    assert markdown.count(phrase) >= 3 and html.count(phrase) >= 3
    doc = json.loads(render(report, "json"))
    assert all(list(row["coords"]) == ["pp", "dp", "tp"] for row in doc["ranks"])
    assert all(list(p["coords"]) == ["pp", "dp", "tp"] for p in doc["parameters"])
    assert [k for k in doc["parallel"] if k in ("pp", "dp", "tp")] == ["pp", "dp", "tp"]
