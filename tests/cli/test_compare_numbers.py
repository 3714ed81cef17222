"""compare's numbers in every format (issue 27, item 3): the cosine to 7 digits or as 1 - (1 - cosine), never a
rounded `1`; `-` for a single value's cosine; "exact match", not "0 ulps of exact"; the largest differences ranked
by inf/NaN mismatches, then by the error for the values' size (not by ulps alone), each shown with its absolute and
relative error. Synthetic dumps (tests/support/synth_dump.py, labelled SYNTHETIC there)."""
import html
import json
import re

import numpy as np
import pytest

from msoverflow.cli import main
from msoverflow.comparison import compare
from msoverflow.render.compare import cosine_text, error_text
from tests.support.synth_dump import SynthDump

X = np.linspace(0.5, 2.5, 64, dtype=np.float32)
SIGN = np.where(np.arange(64) % 2, 1, -1).astype(np.float32)


def _pair(root):
    """Three ops whose inputs agree and whose outputs differ, in this order:
    Mul (float32, relative error 2.8e-4: thousands of float32 ulps, cosine just under 1; its second input a single
    value), Softmax (float16 on both sides, relative error 5e-2: tens of float16 ulps, the larger error for its
    size), Exp (one element inf in the target only)."""
    scale = np.full(1, 2.0, np.float32)
    mul = X * 2
    half = (X / 4).astype(np.float16)
    exp = np.exp(X)
    exp_inf = exp.copy()
    exp_inf[5] = np.inf
    for side, (mul_out, half_out, exp_out) in (
            ("a", (mul, half, exp)),
            ("b", ((mul * (1 + SIGN * np.float32(2.8e-4))).astype(np.float32),
                   (half * (1 + SIGN * np.float16(0.05))).astype(np.float16), exp_inf))):
        d = SynthDump(str(root / side))
        d.op(0, "Mul", "Default_net-Net_Mul-op0", [X, scale], [mul_out])
        d.op(0, "Softmax", "Default_net-Net_Softmax-op1", [half], [half_out])
        d.op(0, "Exp", "Default_net-Net_Exp-op2", [X], [exp_out])
    return str(root / "a"), str(root / "b")


@pytest.fixture
def pair(tmp_path):
    return _pair(tmp_path)


@pytest.fixture
def outputs(pair, capsys):
    out = {}
    for fmt in ("json", "text", "markdown", "html"):
        assert main(["compare", *pair, "--format", fmt]) == 1
        out[fmt] = capsys.readouterr().out
    out["html"] = html.unescape(out["html"])
    return out


@pytest.mark.parametrize("value, text", [(0.9999999564, "1 - 4.4e-08"), (0.99999, "0.99999"),
                                         (0.123456789, "0.1234568"), (0.9999995, "0.9999995"),
                                         (1.0, "1"), (-0.99999999, "-1 + 1e-08"), (None, "-")])
def test_cosine_is_never_rounded_to_one(value, text):
    assert cosine_text(value) == text


def test_error_says_exact_match_and_how_far_an_integer_is():
    assert error_text(0.0, "float32", 0.0) == "exact match"
    assert error_text(0.0, None, 0.0) == "exact match"                   # an integer tensor, equal
    assert error_text(3.0, None, 3.0) == "differs by 3 (compared exactly)"
    assert error_text(12.0, "float16", 0.01) == "12 ulps of float16"
    assert error_text(0.0, "float32", 0.0, nonfinite_differ=2) == "2 inf/NaN differ; the rest an exact match"


def test_largest_differences_are_ranked_by_inf_nan_then_error_for_size_not_ulps(pair):
    c = compare(*pair)
    assert c.verdict == "diverged" and c.first_divergence.op_type == "Mul"
    by_type = {op.op_type: op for op in c.worst}
    # ulps alone would put Mul (thousands of float32 ulps) above Softmax (tens of float16 ulps)
    assert by_type["Mul"].error_ulps > 10 * by_type["Softmax"].error_ulps
    assert by_type["Softmax"].scaled_error > 10 * by_type["Mul"].scaled_error
    assert by_type["Exp"].nonfinite_differ == 1
    assert [op.op_type for op in c.worst] == ["Exp", "Softmax", "Mul"]


def test_every_format_ranks_and_shows_abs_and_rel_error(pair, outputs):
    answer = json.loads(outputs["json"])
    assert [op["op_type"] for op in answer["worst"]] == ["Exp", "Softmax", "Mul"]
    assert answer["worst"][0]["outputs"][0]["nonfinite_differ"] == 1
    c = compare(*pair)
    for fmt in ("text", "markdown", "html"):
        body = outputs[fmt]
        section = body[body.index("Largest differences"):]
        assert "max abs err" in section and "max rel err" in section, fmt
        assert "inf/NaN mismatches first" in section, fmt
        positions = [section.index(f"Net_{t}-op") for t in ("Exp", "Softmax", "Mul")]
        assert positions == sorted(positions), fmt
        for op in c.worst:             # each row holds its op's abs and rel error as printed (4 digits)
            row = next(line for line in re.split(r"\n|</tr>", section) if f"Net_{op.op_type}-op" in line)
            assert f"{op.max_abs_error:.4g}" in row and f"{op.max_rel_error:.4g}" in row, (fmt, row)
        assert "1 inf/NaN differ" in section and "ulps of float16" in section, fmt


def test_every_format_prints_the_cosine_unrounded_and_a_dash_for_a_single_value(pair, outputs):
    answer = json.loads(outputs["json"])
    first = answer["first_divergence"]
    out = first["outputs"][0]
    assert 1 - 1e-6 < out["cosine"] < 1.0           # rounds to 1 at 6 digits: what the old output printed
    scalar = first["inputs"][1]
    assert scalar["cosine"] is None and scalar["agree"] is True
    shown = cosine_text(out["cosine"])
    assert shown.startswith("1 - ")
    assert f"cosine {shown}" in outputs["text"] and "cosine 1," not in outputs["text"]
    # the tables: the output's cosine, and "-" in the single value's row
    md_rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[1:-1]]
               for line in outputs["markdown"].splitlines() if line.startswith("| input") or line.startswith("| output")}
    assert md_rows["output 0"][5] == shown and md_rows["input 1"][5] == "-"
    html_rows = re.findall(r"<tr><td>(input|output) (\d)</td>(.*?)</tr>", outputs["html"])
    cells = {f"{io} {slot}": re.findall(r"<td[^>]*>(.*?)</td>", rest) for io, slot, rest in html_rows}
    assert cells["output 0"][4] == shown and cells["input 1"][4] == "-"


def test_equal_tensors_say_exact_match_in_every_format(outputs):
    for fmt in ("text", "markdown", "html"):
        assert "exact match" in outputs[fmt], fmt
        assert "ulps of exact" not in outputs[fmt] and "(exact)" not in outputs[fmt], fmt
