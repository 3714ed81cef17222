"""`msoverflow compare` on pairs of real MindSpore 2.10 CPU runs (tests/support/gen_compare_pairs.py: same seed,
weights and data, one change): every pair gives its intended verdict and first divergence, in all four formats."""
import html
import json

import pytest

from msoverflow.cli import main
from tests.support import gen_compare_pairs

pytestmark = pytest.mark.mindspore
EXIT = {"diverged": 1, "equivalent": 0, "inconclusive": 3}


@pytest.fixture(scope="module")
def answers(compare_pairs, tmp_path_factory):
    """pair -> {format: (exit code, output)} from the command line, each format its own run."""
    out = {}
    folder = tmp_path_factory.mktemp("compare_answers")
    for pair in gen_compare_pairs.PAIRS:
        baseline, target = compare_pairs[pair.name]
        out[pair.name] = {}
        for fmt, ext in (("json", "json"), ("text", "txt"), ("markdown", "md"), ("html", "html")):
            path = folder / f"{pair.name}.{ext}"
            code = main(["compare", str(baseline), str(target), "--format", fmt, "-o", str(path)])
            out[pair.name][fmt] = (code, path.read_text())
    return out


@pytest.mark.parametrize("name", [p.name for p in gen_compare_pairs.PAIRS])
def test_pair_verdict_and_first_divergence(answers, name):
    expected = gen_compare_pairs.PAIRS_BY_NAME[name].expected
    code, text = answers[name]["json"]
    answer = json.loads(text)
    jsonschema = pytest.importorskip("jsonschema")
    from importlib import resources
    jsonschema.validate(answer, json.loads(resources.files("msoverflow.schema").joinpath("compare.schema.json")
                                           .read_text()))
    assert answer["verdict"] == expected["verdict"], answer["inconclusive"]
    assert code == EXIT[expected["verdict"]]
    first = answer["first_divergence"]
    if expected["verdict"] == "inconclusive":      # not comparable (or not decidable): no divergence is named
        assert first is None and answer["worst"] == []
        assert answer["inconclusive"][0].startswith(expected["reason"]), answer["inconclusive"]
        return
    if expected["verdict"] == "equivalent":
        assert first is None and answer["worst"] == []
        assert answer["summary"]["matched_ops"] == answer["summary"]["baseline_ops"] > 0
        return
    assert first["role"] == "origin", first
    assert (first["rank"], first["iteration"]) == (expected["rank"], expected["iteration"])
    if "op_type" in expected:
        assert first["op_type"] == expected["op_type"]
    if "cell_type" in expected:
        assert first["cell_type"] == expected["cell_type"]
    if "cell" in expected:
        assert first["cell"].split(".")[-1] == expected["cell"]
    if "source_contains" in expected:
        assert expected["source_contains"] in first["source"]["code"]
    if "dtype" in expected:
        assert f"in {expected['dtype']}" in first["dtype_change"]
    agreeing_inputs = [t for t in first["inputs"] if t["agree"]]
    assert len(agreeing_inputs) == len(first["inputs"]) or "constant" in first["note"]
    assert any(t["agree"] is False and t["error_ulps"] > t["tolerance_ulps"] for t in first["outputs"])
    assert all(t["baseline_file"] and t["target_file"] for t in first["outputs"])


@pytest.mark.parametrize("name", [p.name for p in gen_compare_pairs.PAIRS])
def test_every_format_says_the_same(answers, name):
    code, text = answers[name]["json"]
    answer = json.loads(text)
    first = answer["first_divergence"]
    for fmt in ("text", "markdown", "html"):
        fmt_code, body = answers[name][fmt]
        assert fmt_code == code
        if fmt == "html":
            body = html.unescape(body)
            assert "<svg" in body or first is None
        assert answer["verdict"].upper() in body.upper()
        for reason in answer["inconclusive"]:       # every format gives every reason
            assert reason in body.replace("\\_", "_"), (fmt, reason)
        provenance = answer["provenance"]
        assert provenance["command"].startswith("msoverflow compare ") and provenance["msoverflow_version"] in body
        if first is not None:
            assert first["op_type"] in body and first["op_name"] in body
            assert f"rank {first['rank']}" in body.lower() or f"{first['rank']}, {first['iteration']}" in body
            if first["dtype_change"]:
                assert first["dtype_change"] in body
            if first["source"]:
                assert first["source"]["code"] in body


@pytest.mark.parametrize("name", [p.name for p in gen_compare_pairs.PAIRS])
def test_every_format_prints_the_numbers_unrounded(answers, name):
    """Each tensor of the first divergence with its cosine as cosine_text writes it (the real Softmax pairs hold
    cosines under 1 that 6 digits printed as `1`), "exact match" for equal tensors, and the largest differences
    with their absolute and relative errors, in the JSON's order."""
    from msoverflow.render.compare import cosine_text
    answer = json.loads(answers[name]["json"][1])
    first = answer["first_divergence"]
    bodies = {fmt: html.unescape(answers[name][fmt][1]) for fmt in ("text", "markdown", "html")}
    for fmt, body in bodies.items():
        assert "ulps of exact" not in body and "(exact)" not in body, fmt
        if first is None:
            continue
        for t in first["inputs"] + first["outputs"]:
            if t["cosine"] is not None and not (t["agree"] and t["max_abs_error"] == 0):
                assert cosine_text(t["cosine"]) in body, (fmt, t["io"], t["slot"], t["cosine"])
        if any(t["max_abs_error"] == 0 for t in first["inputs"]):
            assert "exact match" in body, fmt
        worst = body[body.index("Largest differences"):]
        assert "max abs err" in worst and "max rel err" in worst, fmt
        rows = [worst.index(op["op_name"]) for op in answer["worst"][:3] if worst.count(op["op_name"]) == 1]
        assert rows == sorted(rows), fmt
    if name in ("softmax_fp16", "dp2_softmax_fp16"):
        assert any(t["cosine"] is not None and f"{t['cosine']:.6g}" == "1" and t["cosine"] < 1
                   for t in first["inputs"] + first["outputs"])


def test_cast_inserted_on_one_side_is_reported_not_fatal(answers):
    answer = json.loads(answers["softmax_fp16"]["json"][1])
    assert answer["unmatched"]["baseline"] == 0 and answer["unmatched"]["target"] > 0
    assert {u["op_type"] for u in answer["unmatched"]["ops"]} == {"Cast"}


def test_other_rank_receives_through_the_allreduce(compare_pairs):
    import msoverflow
    result = msoverflow.compare(*compare_pairs["dp2_softmax_fp16"])
    assert result.first_divergence.rank == 1
    rank0 = [op for op in result.worst + [result.first_divergence] if op.rank == 0]
    assert all(op.role in ("received", "propagator") for op in rank0)
    assert result.to_dict()["first_divergence"]["op_type"] == "Softmax"


def test_python_api_returns_what_the_cli_renders(compare_pairs, answers):
    import msoverflow
    result = msoverflow.compare(*compare_pairs["layernorm_eps"])
    cli = json.loads(answers["layernorm_eps"]["json"][1])
    assert result.to_dict()["first_divergence"] == cli["first_divergence"]
    assert "input 5 (a constant in the graph) differs" in result.first_divergence.note


def _move_op_last(dump_dir, op_number_name):
    """Rename one op run's files so that it runs after every other op of its step (a later compilation may
    schedule the backward differently): its files keep their names but for the timestamp field."""
    import os
    folder = os.path.join(dump_dir, "rank_0", "Net", "0", "0")
    names = os.listdir(folder)
    latest = max(int(n.split(".")[-6]) for n in names if n.endswith(".npy"))
    mine = sorted(n for n in names if f"{op_number_name}." in n)
    assert mine, op_number_name
    for i, name in enumerate(mine):
        parts = name.split(".")
        parts[-6] = str(latest + 10 + i)
        os.rename(os.path.join(folder, name), os.path.join(folder, ".".join(parts)))


def test_backward_ops_pair_through_their_forward_op(compare_pairs, tmp_path):
    """Real re-run whose backward BatchMatMul-op0 (gradient of the forward BatchMatMul-op1) is moved last: paired by
    occurrence alone it would meet the gradient of another forward op; through the saved graph's forward names
    it meets its own, and the runs stay equivalent. Without the saved graphs the order alignment first meets the
    gradient of another forward op: their outputs' shapes differ, which is no verdict (issue 34: a gap in the
    alignment); those runs are paired again by output shape, meet their own, and the runs stay equivalent with
    nothing left unpaired (before issue 34 this was inconclusive: "the op runs do not pair up")."""
    import shutil

    import msoverflow
    baseline, target = compare_pairs["identical_rerun"]
    moved = tmp_path / "moved"
    shutil.copytree(target, moved)
    _move_op_last(moved, "Attention_Grad_BatchMatMul_BatchMatMul-op0")
    assert msoverflow.compare(str(baseline), str(moved), steps=[0]).verdict == "equivalent"
    plain_base, plain_target = tmp_path / "plain_base", tmp_path / "plain_target"
    shutil.copytree(baseline, plain_base)
    shutil.copytree(moved, plain_target)
    for d in (plain_base, plain_target):
        shutil.rmtree(d / "rank_0" / "graphs")
    plain = msoverflow.compare(str(plain_base), str(plain_target), steps=[0])
    assert plain.verdict == "equivalent" and plain.first_divergence is None, plain.reasons
    assert plain.unmatched_counts == {"baseline": 0, "target": 0}
    assert plain.matched_ops == plain.baseline_ops


@pytest.fixture(scope="module")
def dp2_answers(compare_pairs, tmp_path_factory):
    """The 2-rank msrun pair compared with `--parallel dp=2`: format -> (exit code, output)."""
    folder = tmp_path_factory.mktemp("compare_parallel")
    out = {}
    for fmt, ext in (("json", "json"), ("text", "txt"), ("markdown", "md"), ("html", "html")):
        path = folder / f"dp2.{ext}"
        code = main(["compare", *map(str, compare_pairs["dp2_softmax_fp16"]), "--parallel", "dp=2",
                     "--format", fmt, "-o", str(path)])
        out[fmt] = (code, path.read_text())
    return out


def test_parallel_layout_places_every_rank_the_report_lists(dp2_answers):
    code, text = dp2_answers["json"]
    answer = json.loads(text)
    jsonschema = pytest.importorskip("jsonschema")
    from importlib import resources
    jsonschema.validate(answer, json.loads(resources.files("msoverflow.schema").joinpath("compare.schema.json")
                                           .read_text()))
    assert code == 1
    assert (answer["parallel"]["dp"], answer["parallel"]["tp"], answer["parallel"]["pp"]) == (2, 1, 1)
    assert answer["parallel"]["source"] == "--parallel dp=2"
    first = answer["first_divergence"]
    assert first["rank"] == 1 and first["coords"] == {"dp": 1, "tp": 0, "pp": 0}
    listed = answer["worst"] + answer["unmatched"]["ops"] + answer["summary"]["units"]
    assert {row["rank"] for row in listed} == {0, 1}
    assert all(row["coords"] == {"dp": row["rank"], "tp": 0, "pp": 0} for row in listed)
    for fmt in ("text", "markdown", "html"):
        fmt_code, body = dp2_answers[fmt]
        body = html.unescape(body)
        assert fmt_code == code
        assert "rank 1 (pp 0, dp 1, tp 0)" in body and "rank 0 (pp 0, dp 0, tp 0)" in body
        assert "pp=1, dp=2, tp=1 (--parallel dp=2)" in body


def test_without_a_layout_compare_lists_bare_ranks(answers):
    answer = json.loads(answers["dp2_softmax_fp16"]["json"][1])
    assert answer["parallel"] is None and answer["first_divergence"]["coords"] is None
    assert "pipeline stage" not in answers["dp2_softmax_fp16"]["text"][1]


@pytest.mark.parametrize("spec", ["dp=x", "dq=2", "tp=3"])
def test_bad_parallel_spec_is_a_one_line_usage_error(compare_pairs, spec, capsys):
    """A malformed spec is refused by the option; one that does not fit the job's 2 ranks (dp = 2 / 3) by the
    layout: both exit 2 with one line naming --parallel and the problem."""
    try:
        code = main(["compare", *map(str, compare_pairs["dp2_softmax_fp16"]), "--parallel", spec])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith((" ", "usage:"))]
    assert len(lines) == 1 and spec in lines[0], err


@pytest.mark.parametrize("name,words", [
    ("different_models", "the runs are not the same model: "),
    ("different_rank_counts", "the runs are not the same job: the baseline holds ranks 0, the target ranks 0,1")])
def test_runs_that_are_not_comparable_are_inconclusive_never_diverged(answers, name, words):
    """Issue 26: two different models, or one job on 1 rank against the same network on 2, gave DIVERGED with an
    invented first divergence. Exit 3, the reason first, in every format."""
    for fmt in ("json", "text", "markdown", "html"):
        code, body = answers[name][fmt]
        assert code == 3, (fmt, code)
        body = html.unescape(body).replace("\\_", "_")
        assert words in body and "DIVERGED" not in body.upper().replace("DIVERGED_OPS", ""), fmt
    answer = json.loads(answers[name]["json"][1])
    assert answer["verdict"] == "inconclusive" and answer["first_divergence"] is None
    if name == "different_models":
        summary = answer["summary"]
        larger = max(summary["baseline_ops"], summary["target_ops"])
        assert answer["inconclusive"][0].startswith(
            f"the runs are not the same model: {summary['matched_ops']} of {larger} op runs matched")
        assert summary["matched_ops"] < larger / 2


def test_a_statistics_dump_is_compared_by_max_and_min_against_a_tensor_dump(answers):
    """The same msprobe run dumped with tensors and with statistics only: every matched tensor is compared by Max
    and Min (the tensor side's own), they agree, and the answer says the errors are lower bounds."""
    answer = json.loads(answers["msprobe_statistics_vs_tensors"]["json"][1])
    summary = answer["summary"]
    assert summary["tensors_compared"] > 0 and summary["statistics_only"] is True
    assert summary["matched_ops"] == summary["baseline_ops"] == summary["target_ops"]
    assert any("lower bounds" in c for c in answer["caveats"])
    assert not any("no tensor could be compared" in r for r in answer["inconclusive"])


def test_a_step_the_dumps_do_not_hold_lists_what_they_hold(compare_pairs, capsys):
    baseline, target = compare_pairs["identical_rerun"]
    assert main(["compare", str(baseline), str(target), "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert "the dump has no files for --steps 5; it holds ranks 0 (rank 0: steps 0,1)" in err
