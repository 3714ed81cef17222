"""Text, markdown, JSON and HTML tell the same story; the CLI speaks one vocabulary on every command."""
import json
import os
import re
from importlib import resources

import numpy as np
import pytest

from msoverflow.analysis import analyze
from msoverflow.cli import build_parser, main
from msoverflow.model import ORIGIN, PROPAGATOR, Finding, RankStatus, Report, TensorStats, TensorSummary
from msoverflow.render import render
from tests.support.synth_dump import SynthDump, ir_node

F32, F16 = np.float32, np.float16
SCOPE = "Default/network-Net/head-Head"


@pytest.fixture
def dump(tmp_path):
    """Add -> Exp (inf from finite inputs) -> Mul (spreads it); later a Log of -1 (NaN): a second origin."""
    d = SynthDump(str(tmp_path / "dump"))
    flat = SCOPE.replace("/", "_")
    d.op(0, "Add", f"{flat}_Add-op0", [np.ones(2, F32)], [np.array([60000, 1], F16)], declared=None)
    d.op(0, "Exp", f"{flat}_Exp-op0", [np.array([60000, 1], F16)], [np.array([np.inf, 2], F16)])
    d.op(0, "Mul", f"{flat}_Mul-op0", [np.array([np.inf, 2], F16), np.ones(2, F16)],
         [np.array([np.inf, 2], F16)])
    d.op(0, "Log", f"{flat}_Log-op0", [np.array([-1, 2], F32)], [np.array([np.nan, 0.7], F32)])
    d.write_ir(ir_node(1, "Add", f"{SCOPE}/Add-op0", ["%0"], out_dtype="Float16")
               + ir_node(2, "Exp", f"{SCOPE}/Exp-op0", ["%1"], ("/model.py", 12, "y = ops.exp(x)"))
               + ir_node(3, "Mul", f"{SCOPE}/Mul-op0", ["%2", "%0"])
               + ir_node(4, "Log", f"{SCOPE}/Log-op0", ["%0"], out_dtype="Float32"))
    return tmp_path / "dump"


def test_json_graph_is_an_integer_with_range_used_and_tensor_files(dump):
    import jsonschema
    report = analyze(str(dump), progress=False)
    doc = json.loads(render(report, "json"))
    schema = json.loads(resources.files("msoverflow").joinpath("schema/report.schema.json").read_text())
    jsonschema.validate(doc, schema)
    first = doc["first"]
    assert first["op_type"] == "Exp" and first["graph"] == 0 and isinstance(first["graph"], int)
    assert all(p["graph"] == 0 for p in doc["propagation"])
    x = first["inputs"][0]
    assert x["range_used"] == pytest.approx(60000 / 65504) and x["headroom"] == x["range_used"]
    for t in first["inputs"] + first["outputs"]:
        assert os.path.isfile(t["file"]) and t["file"].endswith(".npy")
    assert first["ir_file"].endswith("graph_0.ir") and first["ir_line"] > 1
    with open(first["ir_file"]) as fh:
        assert "PrimFunc_Exp" in fh.read().splitlines()[first["ir_line"] - 1]


def test_text_shows_inf_and_names_cells_in_the_spread(dump):
    report = analyze(str(dump), progress=False)
    text = render(report, "text")
    outputs = text.split("outputs", 1)[1].splitlines()[2]
    assert re.search(r"\binf\b", outputs) and "inf" == outputs.split()[3]      # max |x| of [inf, 2] is inf
    cell = ".".join(report.first.cell.split(".")[-2:])
    assert f"Exp[{cell}] -> Mul[{cell}]" in text


def test_markdown_carries_what_text_carries(dump):
    report = analyze(str(dump), progress=False)
    text, markdown = render(report, "text"), render(report, "markdown")
    assert len(report.anomalies) == 2 and len(report.propagation) >= 1
    cell = ".".join(report.first.cell.split(".")[-2:])
    for what in ("Add-op0",                       # the producer of the origin's input
                 f"`Exp[{cell}]` -> `Mul[{cell}]`",   # the spread, with Cells
                 "Later origins (1", "Log",       # later origins
                 "Scanned ", "Steps scanned: 0 on every rank", "range used"):
        assert what in markdown, what
    assert "Later origins (1" in text and "Add-op0" in text


def test_html_is_self_contained_and_the_cli_says_where_it_wrote(dump, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["analyze", str(dump), "--format", "html", "-o", str(out)]) == 1
    assert f"wrote {out}" in capsys.readouterr().err
    page = out.read_text()
    for element in ('id="verdict"', 'id="timeline-svg"', 'id="propagation-svg"', 'id="headroom-svg"'):
        assert element in page
    assert "<script" not in page and "<link" not in page and not re.search(r'src="https?:', page)
    assert "Exp" in page and "Head" in page and "float16 max 65504" in page


def test_the_format_follows_the_output_name_unless_given(dump, tmp_path, capsys):
    assert main(["analyze", str(dump), "-o", str(tmp_path / "r.html")]) == 1
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["analyze", str(dump), "-o", str(tmp_path / "r.json")]) == 1
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "anomaly"
    assert main(["analyze", str(dump), "--format", "markdown", "-o", str(tmp_path / "r.txt")]) == 1
    assert (tmp_path / "r.txt").read_text().startswith("# msoverflow report")


def test_quiet_verbose_and_log_file(dump, tmp_path, capsys):
    log = tmp_path / "run.log"
    out = tmp_path / "r.json"
    assert main(["analyze", str(dump), "-q", "--log-file", str(log), "--format", "json", "-o", str(out)]) == 1
    assert capsys.readouterr().err == ""
    logged = log.read_text()
    assert f"wrote {out}" in logged and "analyzed" in logged and "anomaly" in logged
    assert main(["-v", "analyze", str(dump), "-o", str(out)]) == 1
    assert "analyzed" in capsys.readouterr().err


def test_a_command_run_inside_another_keeps_the_outer_logging(dump, tmp_path, capsys):
    """patch --dump runs analyze inside: the outer -q and --log-file still hold for it."""
    log = tmp_path / "patch.log"
    main(["patch", "--dump", str(dump), "-q", "--log-file", str(log)])
    assert "wrote" not in capsys.readouterr().err
    assert re.search(r"wrote .*report\.json \(json", log.read_text())


def _parse(argv):
    try:
        parser = build_parser(argv)     # where only the named command is registered (fast --help)
    except TypeError:
        parser = build_parser()
    return parser.parse_args(argv)


def test_one_vocabulary_with_the_old_spellings_as_aliases(capsys):
    new = _parse(["analyze", "d", "--steps", "0-2", "--ranks", "0,7"])
    old = _parse(["analyze", "d", "--iteration", "0,1,2", "--rank", "0,7"])
    assert (new.steps, new.ranks) == (old.steps, old.ranks) == ([0, 1, 2], [0, 7])
    assert _parse(["analyze", "d", "--steps", "0|5-6"]).steps == [0, 5, 6]
    assert _parse(["compare", "a", "b", "--step", "1", "--rank", "2"]).steps == [1]
    assert _parse(["config", "--json"]).format == _parse(["config", "--format", "json"]).format == "json"
    assert _parse(["config", "--step", "3", "--rank", "1"]).steps == "3"
    assert _parse(["patch", "--cell", "X", "--json", "f"]).json_out == "f"
    assert _parse(["patch", "--cell", "X", "-o", "f"]).json_out == "f"
    assert _parse(["repro", "--from", "r.json", "--device", "Ascend"]).device == "ascend"     # lower case, as elsewhere
    for name in ("analyze", "convert", "config", "run", "patch", "repro", "demo"):
        with pytest.raises(SystemExit):
            main([name, "--help"])
        usage = capsys.readouterr().out
        for option in ("--verbose", "--quiet", "--log-file"):
            assert option in usage, (name, option)


def _finding(i, role=PROPAGATOR, rank=0):
    stats = TensorStats(count=4, posinf=1 if role == ORIGIN else 0, max_abs=3.0 + i)
    t = TensorSummary(0, "output", "float16", (4,), stats, file=None)
    return Finding(rank=rank, graph="0", step=i // 1000, op_type=f"Op{i % 7}", op_name=f"op{i}", role=role,
                   kind="overflow", detail="d", timestamp=1000 + i, cell=f"net.block{i % 5}",
                   inputs=[t] if role == ORIGIN else [], outputs=[t])


def test_a_large_report_stays_usable():
    """Thousands of findings, ranks and warnings: plots and tables are sampled and say what they left out."""
    ranks = list(range(64))
    origins = [_finding(i * 7, ORIGIN, rank=i % 64) for i in range(400)]
    report = Report(dump_dir="/nonexistent", first=origins[0], anomalies=origins,
                    propagation=[_finding(i) for i in range(5000)], warnings=[f"w{i}" for i in range(3000)],
                    ranks=ranks, steps={r: [0, 1, 2] for r in ranks},
                    rank_status=[RankStatus(r, "received" if r else "origin", 0, "op", "Op", "AllReduce x", time=1500)
                                 for r in ranks],
                    step_times={r: {s: (1000 * s, 1000 * s + 900) for s in range(3)} for r in ranks})
    page = render(report, "html")
    assert len(page) < 1_500_000
    assert page.count("<tr") < 1200
    assert "later op(s) not drawn" in page and "more: see --format json" in page
    assert len(re.findall(r'<tr id="rank-\d+" class="received"', page)) == 63
