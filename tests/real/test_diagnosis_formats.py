"""The cause of the first origin in all four formats and through the API, and the commands that follow it (patch,
repro), on the real fixtures of each cause (tests/support/gen_real_dumps.py; sdc_gradient_nan is an edited real
dump)."""
import json
from importlib import resources

import pytest

from msoverflow import cli
from msoverflow.analysis import analyze
from msoverflow.render import render

pytestmark = pytest.mark.mindspore

CASES = {"normhead_fp16_overflow": "precision", "sqrt_negative": "domain", "zero_token_mask_weights": "data",
         "nan_in_batch": "data", "sdc_gradient_nan": "device"}


@pytest.mark.parametrize("case,cause", sorted(CASES.items()))
def test_the_cause_in_every_format_and_the_api(real_dumps, case, cause):
    import jsonschema
    report = analyze(str(real_dumps[case]), progress=False)
    assert report.cause is not None and report.cause.cause == cause == real_dumps.case(case)["expected_cause"]
    text = render(report, "text")
    assert f"  cause : {cause}: {report.cause.reason}" in text
    markdown = render(report, "markdown")
    assert f"- cause: **{cause}**" in markdown
    html = render(report, "html")
    assert f'<strong class="cause">{cause}</strong>' in html and f"<strong>cause: {cause}</strong>" in html
    doc = json.loads(render(report, "json"))
    schema = json.loads(resources.files("msoverflow").joinpath("schema/report.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["first"]["cause"] == cause
    assert doc["first"]["diagnosis"]["reason"] == report.cause.reason
    if report.cause.recompute:
        assert [r["dtype"] for r in doc["first"]["recompute"]] == [r.dtype for r in report.cause.recompute]
        assert "agrees with the dump" in text and "agrees with the dump" in markdown and "agrees with the dump" in html


def test_the_device_fault_is_shown_with_its_values_and_advice(real_dumps):
    report = analyze(str(real_dumps["sdc_gradient_nan"]), progress=False)
    text = render(report, "text")
    assert "the pattern of a bit flip, not of an overflow" in text
    assert "at row 0, column 3: dumped nan; recomputed float32 0.115598, float64 0.115598" in text
    assert "fix   : Re-run this step on the same device and on another" in text    # not "compute in float32"
    doc = json.loads(render(report, "json"))
    assert doc["first"]["diagnosis"]["samples"][0]["dumped"] == "nan"
    assert all(r["finite"] and r["agrees"] is False for r in doc["first"]["recompute"])


def _report_file(real_dumps, case, tmp_path):
    path = tmp_path / f"{case}.json"
    path.write_text(render(analyze(str(real_dumps[case]), progress=False), "json"))
    return path


def test_patch_refuses_a_device_fault_and_says_what_to_do(real_dumps, tmp_path, capsys):
    path = _report_file(real_dumps, "sdc_gradient_nan", tmp_path)
    assert cli.main(["patch", "--from", str(path)]) == 3
    out = capsys.readouterr().out
    assert "no patch: the cause is 'device'" in out and "Re-run this step on the same device" in out
    assert "--cell or --op" in out


def test_patch_refuses_a_domain_fault_outside_a_division(real_dumps, tmp_path, capsys):
    path = _report_file(real_dumps, "sqrt_negative", tmp_path)
    assert cli.main(["patch", "--from", str(path)]) == 3
    assert "no patch: the cause is 'domain'" in capsys.readouterr().out


def test_patch_gives_a_zero_token_count_the_guard_and_a_precision_fault_the_precision_patch(real_dumps, tmp_path,
                                                                                              capsys):
    zero = _report_file(real_dumps, "zero_token_mask_weights", tmp_path)
    assert cli.main(["patch", "--from", str(zero)]) == 0
    assert "zero-token guard" in capsys.readouterr().out
    precision = _report_file(real_dumps, "normhead_fp16_overflow", tmp_path)
    assert cli.main(["patch", "--from", str(precision)]) == 0
    out = capsys.readouterr().out
    assert "no patch" not in out and "float32" in out


def test_patch_refuses_a_bad_batch(real_dumps, tmp_path, capsys):
    path = _report_file(real_dumps, "nan_in_batch", tmp_path)
    code = cli.main(["patch", "--from", str(path)])
    out, err = capsys.readouterr()
    # the first finding of a bad batch is where it was first seen, not a proven origin: patch refuses either way
    assert code in (2, 3) and ("the cause is 'data'" in out or "not a proven origin" in err)


def test_repro_prints_the_recomputed_values_beside_the_dumped_ones(real_dumps, tmp_path, capsys):
    path = _report_file(real_dumps, "sdc_gradient_nan", tmp_path)
    assert cli.main(["repro", "--from", str(path), "-o", str(tmp_path / "repro")]) == 0
    out = capsys.readouterr().out
    assert "cause : device" in out
    assert "at (0, 3): dumped nan; recomputed float32 0.1155984" in out
    spec = json.loads((tmp_path / "repro" / "repro.json").read_text())
    assert spec["samples"] == [{"index": [0, 3], "dumped": "nan"}] and spec["sample_output"] == 0
