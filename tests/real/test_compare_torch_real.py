"""`msoverflow compare` of a real MindSpore PyNative msprobe dump (compare_net.py, made in the suite by
tests/support/gen_compare_pairs.py: run msprobe_fp32) against a RECORDED real PyTorch msprobe dump of its PyTorch
twin with the same weights and data (tests/support/recorded/torch_msprobe/, made by
tests/support/gen_torch_msprobe_dump.py with torch 2.13.0 and mindstudio-probe 26.2.0; CI has no torch).

The two frameworks name no op alike (`Primitive.layer_norm.LayerNorm` against `Functional.layer_norm`,
`Primitive.matmul.MatMul` against `Functional.linear`, `Primitive.softmax.Softmax` against `Torch.softmax`), and
PyTorch's tensors are torch.save files, read without torch."""
import html
import json
from pathlib import Path

import pytest

from msoverflow.cli import main

RECORDED = Path(__file__).resolve().parents[1] / "support" / "recorded" / "torch_msprobe"
MSPROBE_MAP = "msprobe/core/compare/ms_to_pt_api.yaml"      # mindstudio-probe's own MindSpore -> PyTorch table
EXIT = {"diverged": 1, "equivalent": 0, "inconclusive": 3}


@pytest.fixture(scope="module")
def mindspore_dump(compare_pairs):
    """The MindSpore PyNative msprobe run of compare_net.py (the baseline of the msprobe_softmax_fp16 pair)."""
    baseline, _target = compare_pairs["msprobe_softmax_fp16"]
    assert baseline == compare_pairs.root / "msprobe_fp32" / "dump"
    return baseline


def _answer(baseline, target, tmp_path, fmt="json", *extra):
    out = tmp_path / f"answer.{fmt}"
    code = main(["compare", str(baseline), str(target), "--format", fmt, "-o", str(out), *extra])
    return code, out.read_text()


def test_the_recorded_dump_is_what_its_provenance_says():
    provenance = json.loads((RECORDED / "provenance.json").read_text())
    assert provenance["recorded"] == "real PyTorch msprobe dump"
    assert provenance["torch"].startswith("2.13.0") and provenance["mindstudio-probe"] == "26.2.0"
    for variant in ("healthy", "ln_eps"):
        (dump_json,) = RECORDED.glob(f"{variant}/step0/*/dump.json")
        doc = json.loads(dump_json.read_text())
        assert (doc["framework"], doc["task"], doc["level"]) == ("pytorch", "tensor", "L1")
        assert list(dump_json.parent.glob("dump_tensor_data/*.pt"))
    assert sum(f.stat().st_size for f in RECORDED.rglob("*") if f.is_file()) < 400_000


def test_healthy_pair_is_equivalent_within_precision(mindspore_dump, tmp_path):
    code, text = _answer(mindspore_dump, RECORDED / "healthy", tmp_path)
    answer = json.loads(text)
    assert answer["verdict"] == "equivalent", (answer["inconclusive"], answer["first_divergence"])
    assert code == EXIT["equivalent"]
    summary = answer["summary"]
    # the forward calls that compute a tensor pair: 4 dense layers, the LayerNorm, 2 matmuls, the scale, Softmax
    assert summary["matched_ops"] >= 9 and summary["within_precision_ops"] > 0
    assert any("across frameworks (mindspore's API calls against pytorch's)" in c for c in answer["caveats"])
    code, text = _answer(mindspore_dump, RECORDED / "healthy", tmp_path, "text")
    assert text.startswith("EQUIVALENT within precision: ")


def test_ops_pair_by_the_api_map_and_what_stays_unpaired_is_counted(mindspore_dump):
    import msoverflow
    from msoverflow.comparison import pairing, sides
    from msoverflow.logs import Notes

    note = Notes(None)
    found = sides.discover(str(mindspore_dump), str(RECORDED / "healthy"), None, None, None, note)
    (unit,) = list(found.read_units(note))
    paired = pairing.pair_unit(unit)
    assert paired.frameworks == ("mindspore", "pytorch")
    names = {(run.op_name.rsplit(".", 2)[0], target.op_name.rsplit(".", 2)[0]) for run, target in paired.pairs}
    assert {("Primitive.layer_norm.LayerNorm", "Functional.layer_norm"), ("Primitive.matmul.MatMul",
            "Functional.linear"), ("Primitive.softmax.Softmax", "Torch.softmax"),
            ("Primitive.batch_matmul.BatchMatMul", "Torch.matmul"), ("Tensor.__mul__", "Tensor.__mul__")} <= names
    # in the order of the forward pass: the n-th dense layer of one side is the n-th of the other
    dense = [(run.op_name, target.op_name) for run, target in paired.pairs if target.op_name.startswith("Functional.linear")]
    assert [int(b.split(".")[-2]) for _a, b in dense] == [int(a.split(".")[-2]) for a, _b in dense] == [0, 1, 2, 3]

    result = msoverflow.compare(str(mindspore_dump), str(RECORDED / "healthy"))
    counts = result.to_dict()["unmatched"]
    listed = {side: sum(1 for u in result.unmatched if u.side == side) for side in ("baseline", "target")}
    assert (counts["baseline"], counts["target"]) == (listed["baseline"], listed["target"]) == (
        len(unit.base_runs) - len(paired.pairs), len(unit.target_runs) - len(paired.pairs))
    target_only = {u.op_name.rsplit(".", 2)[0] for u in result.unmatched if u.side == "target"}
    assert "Functional.mse_loss" in target_only       # MindSpore's MSELoss records Sub and Square instead
    assert {u.op_type for u in result.unmatched if u.side == "baseline"} >= {"Reshape", "Tensor.to"}


@pytest.mark.parametrize("fmt", ["json", "text", "markdown", "html"])
def test_planted_eps_diverges_at_the_layernorm(mindspore_dump, tmp_path, fmt):
    code, text = _answer(mindspore_dump, RECORDED / "ln_eps", tmp_path, fmt)
    assert code == EXIT["diverged"]
    if fmt != "json":
        body = html.unescape(text)
        assert "DIVERGED" in body and "Primitive.layer_norm.LayerNorm.0.forward" in body
        assert "Functional.layer_norm" in body or fmt == "text"
        return
    first = json.loads(text)["first_divergence"]
    assert (first["role"], first["op_type"], first["target_op_name"]) == ("origin", "LayerNorm",
                                                                           "Functional.layer_norm.0.forward")
    assert all(t["agree"] and t["max_abs_error"] == 0 for t in first["inputs"])   # same input, weight and bias
    assert first["outputs"][0]["agree"] is False and first["outputs"][0]["target_file"].endswith(".pt")
    assert "self.norm(" in first["source"]["code"]


def test_python_api_answers_as_the_cli(mindspore_dump, tmp_path):
    import msoverflow
    for variant, verdict in (("healthy", "equivalent"), ("ln_eps", "diverged")):
        result = msoverflow.compare(str(mindspore_dump), str(RECORDED / variant))
        assert result.verdict == verdict
        cli = json.loads(_answer(mindspore_dump, RECORDED / variant, tmp_path)[1])
        assert result.to_dict()["first_divergence"] == cli["first_divergence"]


def test_msprobes_own_mapping_file_gives_the_same_answers(mindspore_dump, tmp_path):
    """--map with mindstudio-probe's ms_to_pt_api.yaml, read as it is: its hundreds of entries whose other name is
    not in these dumps take no op from its pair."""
    import importlib.util
    spec = importlib.util.find_spec("msprobe")
    assert spec is not None and spec.submodule_search_locations
    table = Path(list(spec.submodule_search_locations)[0]).parent / MSPROBE_MAP
    for variant, verdict in (("healthy", "equivalent"), ("ln_eps", "diverged")):
        code, text = _answer(mindspore_dump, RECORDED / variant, tmp_path, "json", "--map", str(table))
        answer = json.loads(text)
        assert (answer["verdict"], code) == (verdict, EXIT[verdict]), answer["inconclusive"]
        assert answer["summary"]["matched_ops"] >= 9
