"""`msoverflow compare`: matching across recompilation, metrics, verdicts, exit codes, -o guard (synthetic dumps
built by tests/support/synth_dump.py, labelled SYNTHETIC there; the real run pairs are in test_compare_real.py)."""
import json
import os

import numpy as np
import pytest

from msoverflow.cli import main
from msoverflow.comparison import compare, compare_arrays
from tests.support.synth_dump import SynthDump

X = np.linspace(-2, 2, 64, dtype=np.float32)


def _net(root, *, softmax_dtype=np.float32, op_base=0, extra_cast=False, clock=1_700_000_000_000_000, steps=(0,)):
    """A three-op chain: Mul -> Softmax -> Add (op numbers from op_base, as a recompilation renumbers them)."""
    d = SynthDump(str(root), clock=clock)
    for step in steps:
        y = X * 2
        d.op(step, "Mul", f"Default_net-Net_Mul-op{op_base}", [X, np.float32(2) * np.ones(1, np.float32)], [y])
        z = y
        if extra_cast:
            z16 = y.astype(softmax_dtype)
            d.op(step, "Cast", f"Default_net-Net_Cast-op{op_base + 7}", [y], [z16])
            z = z16
        e = np.exp(z - z.max())
        s = (e / e.sum()).astype(softmax_dtype)
        d.op(step, "Softmax", f"Default_net-Net_attention-Attention_Softmax-op{op_base + 1}", [z], [s])
        out = s.astype(np.float32) + 1
        d.op(step, "Add", f"Default_net-Net_Add-op{op_base + 2}", [s.astype(np.float32), np.ones(64, np.float32)],
             [out])
    return str(root)


def test_identical_dumps_are_equivalent_despite_renumbered_ops_and_clocks(tmp_path):
    a = _net(tmp_path / "a", steps=(0, 1))
    b = _net(tmp_path / "b", op_base=40, clock=1_800_000_000_000_000, steps=(0, 1))
    result = compare(a, b)
    assert result.verdict == "equivalent", result.reasons
    assert result.matched_ops == result.baseline_ops == 6
    assert result.unmatched_counts == {"baseline": 0, "target": 0}


def test_fp16_softmax_is_the_first_divergence_and_the_cast_is_unmatched(tmp_path):
    a = _net(tmp_path / "a")
    b = _net(tmp_path / "b", softmax_dtype=np.float16, extra_cast=True, op_base=3)
    result = compare(a, b)
    assert result.verdict == "diverged"
    f = result.first_divergence
    assert (f.op_type, f.role, f.rank, f.iteration) == ("Softmax", "origin", 0, 0)
    assert f.cell_type == "Attention"
    assert f.dtype_change == "target computed Softmax in float16 (baseline float32)"
    out = f.outputs[0]
    assert out.agree is False and out.ulp_dtype == "float32" and out.error_ulps > 8
    assert f.inputs[0].agree is True and f.inputs[0].ulp_dtype == "float16"
    assert 0.99 < out.cosine <= 1.0 and 0 < out.max_rel_error < 1e-2
    assert [(u.side, u.op_type) for u in result.unmatched] == [("target", "Cast")]
    # the Add after it only propagates (its input already differs)
    assert [op.role for op in result.worst if op.op_type == "Add"] == ["propagator"]


def test_exit_codes_and_all_formats(tmp_path, capsys):
    a = _net(tmp_path / "a")
    b = _net(tmp_path / "b", softmax_dtype=np.float16, extra_cast=True)
    assert main(["compare", a, a]) == 0
    capsys.readouterr()
    assert main(["compare", a, b, "--format", "json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["verdict"] == "diverged" and answer["first_divergence"]["op_type"] == "Softmax"
    for fmt, marker in (("text", "First divergence: Softmax"), ("markdown", "## First divergence"),
                        ("html", "<svg")):
        assert main(["compare", a, b, "--format", fmt]) == 1
        assert marker in capsys.readouterr().out
    assert main(["compare", a, str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def test_json_answer_follows_the_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from importlib import resources
    schema = json.loads(resources.files("msoverflow.schema").joinpath("compare.schema.json").read_text())
    a = _net(tmp_path / "a")
    for b in (_net(tmp_path / "b", softmax_dtype=np.float16, extra_cast=True), a):
        jsonschema.validate(compare(a, b).to_dict(), schema)


def test_output_inside_either_dump_is_refused(tmp_path, capsys):
    a = _net(tmp_path / "a")
    b = _net(tmp_path / "b")
    for inside in (os.path.join(a, "x.json"), os.path.join(b, "rank_0", "x.json")):
        assert main(["compare", a, b, "-o", inside]) == 2
        assert "inside" in capsys.readouterr().err
        assert not os.path.exists(inside)
    out = tmp_path / "answer.md"
    assert main(["compare", a, b, "-o", str(out)]) == 0 and out.read_text().startswith("# msoverflow compare")


def test_too_little_matched_is_inconclusive(tmp_path):
    a = _net(tmp_path / "a")
    d = SynthDump(str(tmp_path / "b"))
    d.op(0, "Relu", "Default_other-Other_Relu-op0", [X], [np.maximum(X, 0)])
    result = compare(a, str(tmp_path / "b"))
    assert result.verdict == "inconclusive"
    assert any("matched" in r for r in result.reasons)
    assert main(["compare", a, str(tmp_path / "b")]) == 3


def test_step_missing_on_one_side_is_inconclusive_and_selection_narrows(tmp_path):
    a = _net(tmp_path / "a", steps=(0, 1))
    b = _net(tmp_path / "b", steps=(0,))
    result = compare(a, b)
    assert result.verdict == "inconclusive" and any("step 1" in r for r in result.reasons)
    assert compare(a, b, steps=[0]).verdict == "equivalent"


def _statistics_dump(root, softmax_max):
    """statistic.csv only (the documented 2.2 header variant, written by tests/support/ascend_fixtures.py)."""
    from tests.support.ascend_fixtures import write_statistic_csv
    softmax = np.full(8, 0.125, np.float32)
    softmax[0] = softmax_max
    rows = [dict(op_type=t, op_name=f"Default_net-Net_{t}-op{i}", task_id=i, stream_id=0, timestamp=10 + 2 * i + k,
                 io=io, slot=0, array=arr)
            for i, (t, arrays) in enumerate((("Mul", (X[:8], X[:8] * 2)), ("Softmax", (X[:8] * 2, softmax))))
            for k, (io, arr) in enumerate(zip(("input", "output"), arrays, strict=True))]
    path = os.path.join(str(root), "rank_0", "Net", "0", "0", "statistic.csv")
    write_statistic_csv(path, rows)
    return str(root)


def test_statistics_only_dumps_compare_statistics_and_say_so(tmp_path):
    a = _statistics_dump(tmp_path / "a", 0.125)
    same = compare(a, _statistics_dump(tmp_path / "b", 0.125))
    assert same.verdict == "inconclusive" and same.statistics_only
    assert any("only statistics" in r for r in same.reasons)
    differ = compare(a, _statistics_dump(tmp_path / "c", 0.13))
    assert differ.verdict == "diverged" and differ.first_divergence.op_type == "Softmax"
    assert differ.first_divergence.outputs[0].statistics_only
    assert any("statistics only" in c for c in differ.caveats)


def test_metrics_of_arrays():
    a = np.array([1.0, 2.0, 0.0, np.nan], np.float32)
    same = compare_arrays(a, a.copy(), "float32", 8)
    assert same["agree"] and same["error_ulps"] == 0 and same["cosine"] == pytest.approx(1.0)
    one_ulp = a.copy()
    one_ulp[1] = np.nextafter(np.float32(2.0), np.float32(3.0))
    near = compare_arrays(a, one_ulp, "float32", 8)
    assert near["agree"] and near["error_ulps"] == pytest.approx(1.0)
    nan_lost = a.copy()
    nan_lost[3] = 0.0
    assert compare_arrays(a, nan_lost, "float32", 8)["agree"] is False
    ints = compare_arrays(np.array([1, 2]), np.array([1, 3]), None, 8)
    assert ints["agree"] is False and ints["max_abs_error"] == 1


def test_compare_imports_no_other_command_nor_mindspore(tmp_path):
    from tests.cli.test_cli_imports import _modules
    a = _net(tmp_path / "a")
    proc, modules = _modules(["compare", a, a, "--format", "json"])
    assert json.loads(proc.stdout[:proc.stdout.rindex("MODULES")])["verdict"] == "equivalent"
    # the command and the output module every command shares (not analyze's code)
    assert {m for m in modules if m.startswith("msoverflow.commands.")} == {"msoverflow.commands.compare",
                                                                            "msoverflow.commands._output"}
    assert not {m for m in modules if m.startswith(("msoverflow.config", "msoverflow.patch"))}, modules
    assert "mindspore" not in modules
    _proc, help_modules = _modules(["compare", "--help"])
    assert "msoverflow.comparison" not in help_modules and "msoverflow.index" not in help_modules


def test_chunked_metrics_match_whole_tensor_metrics(monkeypatch):
    """Large tensors are compared a chunk at a time (and Fortran order meets C order element by element): the
    metrics equal those of one pass over the whole tensor."""
    import msoverflow.comparison.metrics as comparison
    import msoverflow.stats as stats
    rng = np.random.default_rng(1)
    a = rng.normal(size=(60, 50)).astype(np.float32)
    b = (a + rng.normal(scale=1e-5, size=a.shape)).astype(np.float32)
    whole = compare_arrays(a, b, "float32", 8)
    monkeypatch.setattr(comparison, "CHUNK", 7)
    monkeypatch.setattr(stats, "CHUNK", 11)       # chunks of the two tensors of different lengths
    assert compare_arrays(a, b, "float32", 8) == pytest.approx(whole)
    assert compare_arrays(np.asfortranarray(a), b, "float32", 8) == pytest.approx(whole)


def test_bfloat16_tensor_compared_through_its_decoder(tmp_path):
    """A bf16 payload (numpy has no bf16) is decoded chunk by chunk (readers.raw.DecodedTensor) and compared."""
    from msoverflow.readers.raw import DecodedTensor
    values = np.linspace(-3, 3, 100, dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    path = tmp_path / "t.bin"
    path.write_bytes(bits.tobytes())
    decoded = DecodedTensor(str(path), "bfloat16", 0, bits.nbytes)
    found = compare_arrays(decoded, np.asarray(decoded), "bfloat16", 8)
    assert found["agree"] and found["error_ulps"] == 0
    shifted = np.asarray(decoded) * np.float32(1.01)
    assert compare_arrays(decoded, shifted, "bfloat16", 0.5)["agree"] is False


def test_corrupt_tensor_is_a_warning_and_the_verdict_inconclusive(tmp_path, capsys):
    a = _net(tmp_path / "a")
    b = _net(tmp_path / "b")
    folder = os.path.join(b, "rank_0", "Net", "0", "0")
    victim = next(n for n in sorted(os.listdir(folder)) if n.startswith("Add.") and ".output." in n)
    with open(os.path.join(folder, victim), "r+b") as fh:
        fh.truncate(60)
    result = compare(a, b)
    assert result.verdict == "inconclusive"
    assert any("could not be read" in r for r in result.reasons)
    assert any(victim in w for w in result.warnings)
    assert main(["compare", a, b]) == 3
    assert main(["compare", a, b, "--ulps", "-1"]) == 2
    assert "--ulps" in capsys.readouterr().err


def test_names_from_the_dump_never_render_as_markup_or_terminal_codes(tmp_path, capsys):
    hostile = "Default_net-Net_<img src=x onerror=alert(1)>\x1b[31m-Cell_Exp-op0"
    for side, scale in (("a", 1.0), ("b", 1.5)):
        SynthDump(str(tmp_path / side)).op(0, "Exp", hostile, [X], [np.exp(X) * np.float32(scale)])
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for fmt in ("text", "markdown", "html"):
        assert main(["compare", a, b, "--format", fmt]) == 1
        out = capsys.readouterr().out
        assert "\x1b" not in out, fmt
        if fmt == "html":
            assert "<img" not in out
        if fmt == "markdown":       # raw HTML only inside code spans, where it is shown, not rendered
            import re
            assert "<img" in out and "<img" not in re.sub(r"(`+).*?\1", "", out)


def _run_view(ex):
    tensors = [(e.io, e.slot, e.source, e.dtype) for e in ex.inputs + ex.outputs]
    return ex.op_type, ex.op_name, ex.time, ex.order, tensors


def test_columnar_unit_read_gives_the_object_read_runs_and_tensors(tmp_path):
    """walk.read_unit_runs keeps a plain npy unit as columns and a unit with a repeated run as objects; both give
    the runs, order and tensors read_unit() gives."""
    from msoverflow import walk
    root = _net(tmp_path / "a", steps=(0, 1))
    d = SynthDump(root, clock=1_900_000_000_000_000)
    d.op(1, "Mul", "Default_net-Net_Mul-op0", [X, X], [X * X])      # Mul runs again in step 1: objects
    for unit in walk.units(root):
        runs, _read = walk.read_unit_runs(unit)
        assert all(run._execution is None for run in runs) == (unit.iteration == 0)   # columns until asked
        executions = walk.read_unit(unit).executions
        assert [_run_view(run.execution()) for run in runs] == [_run_view(ex) for ex in executions]
        assert [(r.op_name, r.time, r.n_outputs, [p for _s, p, _d in r.npy_outputs]) for r in runs] == \
            [(ex.op_name, ex.time, len(ex.outputs), [e.source for e in ex.outputs]) for ex in executions]


def test_repeated_run_that_differs_is_found_through_the_object_read(tmp_path):
    a, b = _net(tmp_path / "a"), _net(tmp_path / "b")
    for root, bump in ((a, 0), (b, 1)):
        SynthDump(root, clock=1_900_000_000_000_000).op(0, "Mul", "Default_net-Net_Mul-op0", [X, X],
                                                           [X * X + np.float32(bump)])
    result = compare(a, b)
    assert result.verdict == "diverged"
    assert (result.first_divergence.op_type, result.first_divergence.position) == ("Mul", 3)
