"""A real msprobe dump whose only bad value is one output record (`"Max": Infinity`): every way of making that
record unreadable must leave the verdict inconclusive (or still find the anomaly), never clean (issue 21).

The dump is step 0 of a real mindstudio-probe run (tests/support/gen_msprobe_dumps.py, L1 statistics, clean at step 0);
the test writes Infinity into one forward entry's output, then breaks that record in 19 ways."""
import json
import shutil
import sys

import pytest

from msoverflow.analysis import analyze

pytestmark = pytest.mark.mindspore

ENTRY = "Functional.square.0.forward"


@pytest.fixture(scope="session")
def one_bad_record_dump(tmp_path_factory):
    from tests.support import gen_msprobe_dumps
    if not gen_msprobe_dumps.available():
        pytest.skip("mindspore and mindstudio-probe are not installed (pip install 'msoverflow[mindspore,msprobe]')")
    case = gen_msprobe_dumps.ensure_cases(
        names=["l1_statistics_stepk"],
        progress=lambda msg: print(f"[msprobe dumps] {msg}", file=sys.__stderr__, flush=True))["l1_statistics_stepk"]
    step0 = next((case / "dump" / "step0").iterdir())
    root = tmp_path_factory.mktemp("msprobe_one_bad") / "dump"
    shutil.copytree(step0, root / "step0" / step0.name)
    path = root / "step0" / step0.name / "dump.json"
    doc = json.loads(path.read_text())
    record = doc["data"][ENTRY]["output"][0]
    assert record["type"] == "mindspore.Tensor" and record["Max"] < 1e30   # the real record, finite
    record["Max"] = float("inf")
    path.write_text(json.dumps(doc))
    return root, path


def _set(key, value):
    def mutate(doc):
        doc["data"][ENTRY]["output"][0][key] = value
    return mutate


def _drop(*keys):
    def mutate(doc):
        for key in keys:
            del doc["data"][ENTRY]["output"][0][key]
    return mutate


def _body(change):
    def mutate(doc):
        doc["data"][ENTRY] = change(doc["data"][ENTRY])
    return mutate


def _rename_output(body):
    body["outputs_renamed"] = body.pop("output")
    return body


MUTATIONS = {
    "max_null": _set("Max", None),
    "max_text_na": _set("Max", "n/a"),
    "max_empty_text": _set("Max", ""),
    "max_true": _set("Max", True),
    "max_list": _set("Max", [float("inf")]),
    "max_dict": _set("Max", {"value": float("inf")}),
    "max_and_min_missing": _drop("Max", "Min"),
    "no_shape": _drop("shape"),
    "no_dtype": _drop("dtype"),
    "no_type": _drop("type"),
    "record_is_a_string": lambda doc: doc["data"][ENTRY]["output"].__setitem__(0, "Tensor(Max=inf)"),
    "output_renamed": _body(_rename_output),
    "entry_body_a_list": _body(lambda body: [body]),
    "max_text_infinity": _set("Max", "Infinity"),
    "max_huge_text": _set("Max", "1e999"),
    "shape_of_text": _set("shape", "4,8,16"),
    "dtype_unknown": _set("dtype", "Float13"),
    "type_unknown_with_value": _set("type", "mindspore.Mystery"),
    "record_is_a_number": lambda doc: doc["data"][ENTRY]["output"].__setitem__(0, 12.5),
}


def test_the_unmutated_record_is_found(one_bad_record_dump):
    root, _ = one_bad_record_dump
    report = analyze(str(root), progress=False)
    assert report.verdict == "anomaly" and report.first.op_name == ENTRY


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_an_unreadable_bad_record_is_never_clean(one_bad_record_dump, tmp_path, kind):
    root, path = one_bad_record_dump
    copy = tmp_path / "dump"
    shutil.copytree(root, copy)
    target = copy / path.relative_to(root)
    doc = json.loads(target.read_text())
    MUTATIONS[kind](doc)
    target.write_text(json.dumps(doc))
    report = analyze(str(copy), progress=False)
    assert report.verdict in ("inconclusive", "anomaly"), (kind, report.warnings)
    if report.verdict == "inconclusive":
        assert any("dump.json" in reason for reason in report.inconclusive), report.inconclusive
    else:      # the value was still read: the anomaly is where the Infinity is
        assert report.first.op_name == ENTRY
