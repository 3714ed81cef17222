"""Rank coordinates (--parallel, MindFormers YAML, rank tables, msrun worker logs, stages inferred from the
graphs) and the parameters that were hit (issue 20), on the real 4-rank msrun dump and the spec-built 8-rank
pipeline-parallel seed (tests/support/ascend_fixtures.py, built from the documented formats, not recorded on Ascend)."""
import json
import os

import pytest

from msoverflow.api import analyze
from msoverflow.cli import main
from msoverflow.errors import UserError
from msoverflow.parallel_layout import ParallelLayout, parse_spec
from msoverflow.render import render
from tests.support import ascend_fixtures as af

SCHEMA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema", "report.schema.json")


def test_mindspore_rank_order_pipeline_major_tp_fastest():
    layout = ParallelLayout(dp=2, tp=2, pp=2, source="test")
    assert layout.coords(5) == {"pp": 1, "dp": 0, "tp": 1}       # the "rank 5 (pipeline stage 1, tp 1, dp 0)"
    assert list(layout.coords(5)) == ["pp", "dp", "tp"]           # the order ranks are numbered in, as text shows it
    assert [layout.coords(r)["pp"] for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [layout.coords(r)["tp"] for r in range(4)] == [0, 1, 0, 1]
    assert layout.coords(8) is None


@pytest.mark.parametrize("text,expected", [("dp=4,tp=2,pp=2", (4, 2, 2)), ("pp=2, mp=2", (None, 2, 2)),
                                           ("DP=8", (8, None, None))])
def test_spec_grammar(text, expected):
    spec = parse_spec(text)
    assert (spec.dp, spec.tp, spec.pp) == expected


@pytest.mark.parametrize("text", ["dp=0", "dp=x", "dq=2", "dp=2,dp=2", "dp=" + "9" * 5000, "nosuchfile.yaml"])
def test_bad_specs_are_one_line_usage_errors(text, capsys, tmp_path):
    with pytest.raises(UserError):
        parse_spec(text)
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(tmp_path), "--parallel", text])
    assert exit_.value.code == 2 and "Traceback" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def pp_seed(tmp_path_factory):
    root = tmp_path_factory.mktemp("pp") / "dump"
    description = af.build_pp_seed_case(str(root), optimizer_ops=True)
    return root, description


def test_pp_seed_with_layout_every_rank_its_coordinates_and_the_parameters_hit(pp_seed):
    root, description = pp_seed
    report = analyze(str(root), parallel="dp=4,pp=2")
    assert (report.first.rank, report.first.op_type) == (5, "SqrtGrad")
    for row in report.rank_status:
        assert row.coords == {"pp": row.rank // 4, "dp": row.rank % 4, "tp": 0}, row
        assert (row.status, row.op_type) == tuple(description["expected_ranks"][row.rank])
    assert report.parallel["dp"] == 4 and report.parallel["pp"] == 2 and report.parallel["tp"] == 1
    hits = {h.rank: h for h in report.parameters}
    assert sorted(hits) == list(range(8))
    for rank, hit in hits.items():
        stage = "last" if rank >= 4 else "first"
        assert hit.name == af.OPTIMIZED_PARAMETERS[stage] and hit.shape == (4, 8) and hit.iteration == 1
        assert hit.coords == report.rank_status[rank].coords
    assert hits[5].how.startswith("gradient computed on this rank")
    assert all(hits[r].how.startswith("gradient received via AllReduce") for r in (4, 6, 7))
    assert all(hits[r].how.startswith("gradient received via Receive") for r in range(4))
    text = render(report, "text")
    assert "where : rank 5 (pp 1, dp 1, tp 0), step 1" in text
    assert "Parameters hit (8" in text and "lm_head.weight" in text
    markdown = render(report, "markdown")
    assert "on rank 5 (pp 1, dp 1, tp 0)" in markdown and "| `lm_head.weight` |" in markdown
    html = render(report, "html")
    assert 'id="parameter-table"' in html and "pp 1, dp 1, tp 0" in html
    doc = json.loads(render(report, "json"))
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.load(open(SCHEMA)))
    assert doc["ranks"][5]["coords"] == {"dp": 1, "tp": 0, "pp": 1}
    assert {p["name"] for p in doc["parameters"]} == set(af.OPTIMIZED_PARAMETERS.values())


def test_pp_seed_without_layout_infers_the_stages_from_the_graphs(pp_seed):
    root, _ = pp_seed
    report = analyze(str(root))
    assert report.parallel["stages"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    assert [row.coords for row in report.rank_status] == [{"pp": 0}] * 4 + [{"pp": 1}] * 4
    assert "rank 5 (pp 1), step 1" in render(report, "text")


def test_layout_splitting_a_stage_is_refused_for_the_graphs_stages(pp_seed):
    """dp=2,pp=4 puts ranks 0-3, which run the same kernels, in stages 0 and 1: not used; the graphs' 2 stages are."""
    root, _ = pp_seed
    report = analyze(str(root), parallel="dp=2,pp=4")
    refused = [w for w in report.warnings if w.startswith("--parallel dp=2,pp=4: not used: the saved execution "
                                                             "orders contradict its pipeline stages")]
    assert len(refused) == 1 and "ranks 0-3 run the same kernels but are put in stages 0, 1" in refused[0], refused
    assert report.parallel["stages"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    assert [row.coords for row in report.rank_status] == [{"pp": 0}] * 4 + [{"pp": 1}] * 4


def test_mindformers_yaml_and_msrun_worker_logs_beside_the_dump(tmp_path):
    root = tmp_path / "job" / "dump"
    af.build_pp_seed_case(str(root))
    (tmp_path / "job" / "run.yaml").write_text("model:\n  arch: x\nparallel_config:\n  data_parallel: 4\n"
                                               "  model_parallel: 1\n  pipeline_stage: 2\n")
    report = analyze(str(root))
    assert report.parallel["source"].startswith("MindFormers YAML run.yaml")
    assert report.rank_status[5].coords == {"pp": 1, "dp": 1, "tp": 0}
    os.remove(tmp_path / "job" / "run.yaml")
    for worker in range(8):
        (tmp_path / "job" / f"worker_{worker}.log").write_text("")
    report = analyze(str(root), parallel="pp=2")      # dp from the world size: msrun's 8 workers
    assert (report.parallel["dp"], report.parallel["pp"]) == (4, 2)


def test_rank_table_file_as_the_layout(tmp_path, pp_seed):
    root, _ = pp_seed
    table = tmp_path / "rank_table_8.json"
    table.write_text(json.dumps({"server_list": [{"device": [{"rank_id": str(r)} for r in range(8)]}]}))
    report = analyze(str(root), parallel=str(table))
    assert report.parallel["dp"] == 8 and report.rank_status[5].coords == {"pp": 0, "dp": 5, "tp": 0}


def test_label_ranks_without_rank_directories_as_hunt_calls_it(tmp_path):
    """`msoverflow hunt --parallel` labels its own rank rows (no rank_N directories, no saved graphs)."""
    from msoverflow.model import RankStatus
    from msoverflow.parallel_layout import label_ranks
    rows = [RankStatus(rank, "clean") for rank in range(4)]
    warnings = []
    layout = label_ranks(parse_spec("tp=2"), str(tmp_path), rows, {}, warnings.append)
    assert layout["dp"] == 2 and [r.coords for r in rows] == [
        {"dp": 0, "tp": 0, "pp": 0}, {"dp": 0, "tp": 1, "pp": 0}, {"dp": 1, "tp": 0, "pp": 0}, {"dp": 1, "tp": 1, "pp": 0}]
    assert label_ranks(None, str(tmp_path), rows, {}, warnings.append) is None and warnings == []


# ---- the layout checked against the dump (issue 26 item 2), on the real msrun data-parallel dumps --------------

def _no_stages_claimed(report, fmt_texts):
    assert report.parallel is None and all(row.coords is None for row in report.rank_status)
    assert all("pp " not in body and "pipeline stage" not in body for body in fmt_texts), fmt_texts


def test_a_layout_path_that_does_not_exist_says_so(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(tmp_path), "--parallel", str(tmp_path / "nonexistent.yaml")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{tmp_path / 'nonexistent.yaml'}: no such file" in err
    assert "expected sizes like" not in err and "Traceback" not in err
    with pytest.raises(UserError, match="expected sizes like dp=4"):
        parse_spec("dp4")


def test_parameter_table_keeps_whole_sentences():
    """The text table's `how` column wraps between words; it never cuts a sentence (issue 27: "th...istributed")."""
    from msoverflow.model import Finding, ParameterHit, Report
    how = ("gradient computed on this rank, then through AllReduce "
           "Default_grad_reducer-DistributedGradReducer_AllReduce-op2 to every rank of the data-parallel group, "
           "which applied it in the same step")
    first = Finding(rank=1, graph="0", step=1, op_type="Div", op_name="Div-op0", full_name=None, kind="invalid",
                    detail="0/0", timestamp=0, role="origin")
    hits = [ParameterHit(name=f"layers.{i}.attention.wq.weight", rank=1, step=1, shape=(4096, 4096), how=how,
                         coords={"pp": 0, "dp": 1, "tp": 0}) for i in range(3)]
    report = Report(dump_dir="/d", first=first, anomalies=[first], propagation=[], warnings=[], ranks=[1],
                    steps={1: [1]}, files=1, scanned_steps={1: [1]}, parameters=hits)
    table = render(report, "text").split("Parameters hit", 1)[1].split("\n\n", 1)[0]
    assert "..." not in table
    words = table.split()
    wanted = how.split()
    starts = [i for i in range(len(words)) if words[i:i + len(wanted)] == wanted]
    assert len(starts) == 3, table


def test_a_yaml_beside_the_dump_that_does_not_fit_is_a_warning_not_exit_2(tmp_path):
    """The user did not name it: model_parallel 3 on 8 ranks is said and the file not used; named, it is exit 2."""
    root = tmp_path / "job" / "dump"
    af.build_pp_seed_case(str(root))
    (tmp_path / "job" / "run.yaml").write_text("parallel_config:\n  model_parallel: 3\n")
    report = analyze(str(root))
    assert any("not a multiple of tp*pp = 3; give dp too; not used" in w for w in report.warnings), report.warnings
    assert report.parallel["source"] == "inferred from the graphs"
    with pytest.raises(UserError, match="not a multiple of tp\\*pp = 3"):
        analyze(str(root), parallel=str(tmp_path / "job" / "run.yaml"))
