"""The real-dump fixtures (tests/support/gen_real_dumps.py) have the layout and content each case claims.

Every dump here comes from a real MindSpore CPU run; the assertions read the files themselves, not the
generator's own `observed` summary.
"""
import json
import re
from importlib import metadata
from pathlib import Path

import pytest

from tests.support import gen_real_dumps as gen

CASE_NAMES = [case.name for case in gen.CASES]
ANOMALY_CASES = [c.name for c in gen.CASES if c.expected["expected_verdict"] == "anomaly"]
# clean cases whose files hold no non-finite value at all (a contained or handled one states its first bad tensor)
CLEAN_CASES = [c.name for c in gen.CASES if c.expected["expected_verdict"] == "clean"
               and not c.expected.get("expected_first_bad_tensor")]
# anomalies whose first bad tensor is no fault (an overflow a loss scale handled, steps before the origin)
HARMLESS_FIRST = [c.name for c in gen.CASES if "iteration" in (c.expected.get("expected_first_bad_tensor") or {})]
NORMHEAD_CASES = [c.name for c in gen.CASES if c.expected["expected_cell"] == "NormHead"]


def tensor_files(dump: Path, graph=None, iteration=None):
    files = list(gen.iter_tensor_files(dump))
    return [t for t in files if (graph is None or t.graph == graph) and (iteration is None or t.iteration == iteration)]


def op_files(dump: Path, first: dict, io: str):
    """The files of one op execution: same op name in the same graph/iteration dir."""
    return sorted((t for t in tensor_files(dump, first["graph"], first["iteration"])
                   if t.op_name == first["op_name"] and t.io == io), key=lambda t: t.slot)


# ------------------------------------------------------------------------------------------- layout

@pytest.mark.mindspore
@pytest.mark.parametrize("name", CASE_NAMES)
def test_case_ran_and_recorded(real_dumps, name):
    record = real_dumps.case(name)
    dump = real_dumps[name]  # raises CaseFailed with the log tail if the run failed
    assert record["exit_code"] == 0
    assert record["mindspore_version"] == metadata.version("mindspore")
    assert record["name"] == name and record["description"] and record["shows"]
    case = gen.CASES_BY_NAME[name]
    settings = record["dump_config"]["common_dump_settings"]
    for key, value in case.dump_settings.items():
        assert settings[key] == value
    assert Path(settings["path"]).is_absolute()
    for key in ("expected_verdict", "expected_first_op_type", "expected_iteration", "expected_kind", "expected_layout"):
        assert key in record
    assert (dump.parent / "run.log").stat().st_size > 0
    assert record["self_check"] == [], record["self_check"]


@pytest.mark.mindspore
@pytest.mark.parametrize("name", CASE_NAMES)
def test_documented_layout(real_dumps, name):
    dump, record = real_dumps[name], real_dumps.case(name)
    assert sorted(p.name for p in dump.iterdir()) == ["rank_0"]
    rank = dump / "rank_0"
    assert {"Net", "graphs", "execution_order", ".dump_metadata"} <= {p.name for p in rank.iterdir()}
    layout = {g.name: sorted(int(i.name) for i in g.iterdir()) for g in (rank / "Net").iterdir()}
    assert layout == record["expected_layout"]
    for graph in layout:
        ir = rank / "graphs" / f"ms_output_trace_code_graph_{graph}.ir"
        assert "# Fullname with scope:" in ir.read_text()
        order = (rank / "execution_order" / f"ms_execution_order_graph_{graph}.csv").read_text().splitlines()
        # a graph that only hands parameters back (the loss-scale loop's graph 1) runs no kernel
        kernels = any(not t.op_type == "Parameter" for t in tensor_files(dump, int(graph)))
        assert order[0] == "NodeExecutionOrder-FullNameWithScope" and (len(order) > 1) == kernels
        for iteration in layout[graph]:
            assert any((rank / "Net" / graph / str(iteration)).glob("*.npy"))
    metadata_config = json.loads((rank / ".dump_metadata" / "config.json").read_text())
    assert metadata_config == {"device_target": "CPU", "ms_version": metadata.version("mindspore")}
    assert json.loads((rank / ".dump_metadata" / "data_dump.json").read_text()) == record["dump_config"]


@pytest.mark.mindspore
@pytest.mark.parametrize("name", [c.name for c in gen.CASES if len(c.expected["expected_layout"]) == 1])
def test_global_execution_order_lists_every_iteration_of_a_single_graph_run(real_dumps, name):
    rank = real_dumps[name] / "rank_0"
    listed = gen.read_global_execution_order(rank)
    assert listed == real_dumps.case(name)["expected_layout"]


@pytest.mark.mindspore
def test_jit_case_has_three_graphs_counting_iterations_across_them(real_dumps):
    name = "jit_value_and_grad_three_graphs"
    dump = real_dumps[name]
    op_types = {g: {t.op_type for t in tensor_files(dump, g)} for g in (0, 1, 2)}
    assert {"SqrtGrad", "MatMul"} <= op_types[0]
    assert "IsFinite" in op_types[1] and "SGD" not in op_types[1]
    assert "SGD" in op_types[2] and "SqrtGrad" not in op_types[2]

    def span(graph, iteration):
        stamps = [t.timestamp for t in tensor_files(dump, graph, iteration)]
        return min(stamps), max(stamps)

    # Step s: graph 0 runs as iteration s, then all_finite and SGD of the same step run as iteration s + 1.
    for step in range(3):
        forward_end = span(0, step)[1]
        finite_start, finite_end = span(1, step + 1)
        assert forward_end < finite_start
        if step + 1 <= 2:
            update_start, update_end = span(2, step + 1)
            assert finite_end < update_start
        if step < 2:
            assert max(finite_end, update_end) < span(0, step + 1)[0]
    # The global execution-order csv does not describe this run: don't build on it.
    listed = gen.read_global_execution_order(dump / "rank_0")
    assert listed != real_dumps.case(name)["expected_layout"]


@pytest.mark.mindspore
def test_jit_scopes_carry_no_cell_path_but_the_ir_does(real_dumps):
    dump = real_dumps["jit_value_and_grad_three_graphs"]
    sqrt_grads = [t for t in tensor_files(dump, 0) if t.op_type == "SqrtGrad"]
    assert sqrt_grads and all("NormHead" not in t.op_name for t in sqrt_grads)
    ir = (dump / "rank_0" / "graphs" / "ms_output_trace_code_graph_0.ir").read_text()
    block = ir[ir.index("PrimFunc_SqrtGrad("):][:6000]
    assert gen.NORMHEAD_SQRT_LINE in block


@pytest.mark.mindspore
def test_kernels_filtered_dump_holds_only_the_selected_kernels(real_dumps):
    name = "normhead_kernels_filtered"
    dump, record = real_dumps[name], real_dumps.case(name)
    files = tensor_files(dump)
    kernels = record["dump_config"]["common_dump_settings"]["kernels"]
    full_names = [k.replace("/", "_") for k in kernels if "/" in k]
    op_type_entries = [k.lower() for k in kernels if "/" not in k]
    for tensor in files:
        # Observed: an op-type entry selects every op type containing it, ignoring case ('SqrtGrad' -> RsqrtGrad).
        assert (tensor.op_name in full_names
                or any(entry in tensor.op_type.lower() for entry in op_type_entries)), tensor.path.name
    assert sorted({t.op_type for t in files}) == record["expected_op_types"]
    # The full-name entry selects NormHead's forward RealDiv only, not the RealDivs of its backward.
    assert {t.op_name for t in files if t.op_type == "RealDiv"} == set(full_names)
    assert len(files) < len(tensor_files(real_dumps["normhead_fp16_overflow"])) / 10


@pytest.mark.mindspore
def test_inputs_only_dump_has_no_output_files(real_dumps):
    inputs_only = tensor_files(real_dumps["normhead_inputs_only"])
    assert inputs_only and all(t.io == "input" for t in inputs_only)
    assert not any(".output." in p.name for p in real_dumps["normhead_inputs_only"].rglob("*.npy"))
    both = tensor_files(real_dumps["normhead_fp16_overflow"])
    assert {t.io for t in both} == {"input", "output"}


# ------------------------------------------------------------------------------------------- content

@pytest.mark.mindspore
@pytest.mark.parametrize("name", CLEAN_CASES)
def test_clean_cases_are_finite_and_in_range(real_dumps, name):
    dump = real_dumps[name]
    files = tensor_files(dump)
    assert files
    bad = [t.path.name for t in files if gen.is_bad(gen.tensor_health(t.path))]
    assert bad == []


@pytest.mark.mindspore
@pytest.mark.parametrize("name", ANOMALY_CASES)
def test_first_bad_tensor_is_the_stated_origin(real_dumps, name):
    dump, record = real_dumps[name], real_dumps.case(name)
    found = gen.first_bad_tensors(dump, limit=1)
    assert found, "expected an anomaly, every tensor is finite and in range"
    first = found[0]
    stated = record.get("expected_first_bad_tensor")
    # inputs-only: the origin's output is not dumped, its consumer's input is the first bad tensor; a loss scale
    # calibrating: the first bad tensor is a handled overflow steps before the origin
    assert (first["graph"], first["iteration"]) == (record["expected_graph"],
                                                    (stated or {}).get("iteration", record["expected_iteration"]))
    if stated:
        assert (first["op_type"], first["io"], first["slot"]) == (stated["op_type"], stated["io"], stated["slot"])
        assert stated.get("scope_contains", "") in first["op_name"]
        return
    assert (first["op_type"], first["io"]) == (record["expected_first_op_type"], "output")
    assert record["expected_first_op_scope_contains"] in first["op_name"]
    # An origin: every float input of that op execution is finite and in range.
    inputs = op_files(dump, first, "input")
    assert inputs
    for tensor in inputs:
        assert not gen.is_bad(gen.tensor_health(tensor.path)), tensor.path.name
    # Earlier iterations are completely clean.
    for tensor in tensor_files(dump):
        if tensor.iteration < first["iteration"]:
            assert not gen.is_bad(gen.tensor_health(tensor.path)), tensor.path.name


def ir_node_block(ir_text: str, op_name: str) -> str:
    """The .ir text of the node whose scoped full name, with '/' written as '_', is a dump file's op name."""
    for block in re.split(r"\n(?=  %)", ir_text):
        match = re.search(r"# Fullname with scope: \((.+?)\)", block)
        if match and match.group(1).replace("/", "_") == op_name:
            return block
    raise AssertionError(f"no .ir node named {op_name}")


@pytest.mark.mindspore
@pytest.mark.parametrize("name", [n for n in ANOMALY_CASES if n != "normhead_inputs_only" and n not in HARMLESS_FIRST])
def test_source_line_of_the_origin_is_in_its_ir_node(real_dumps, name):
    dump, record = real_dumps[name], real_dumps.case(name)
    first = gen.first_bad_tensors(dump, limit=1)[0]
    ir = dump / "rank_0" / "graphs" / f"ms_output_trace_code_graph_{first['graph']}.ir"
    block = ir_node_block(ir.read_text(), first["op_name"])
    assert record["expected_source_contains"] in block
    if first["op_name"].startswith("Gradients"):
        assert f'forward_node_name: "{record["expected_forward_op"]}_' in block


@pytest.mark.mindspore
@pytest.mark.parametrize("name", NORMHEAD_CASES)
def test_normhead_overflow_hides_fp32_bytes_behind_an_fp16_header(real_dumps, name):
    """The CPU quirk the reader must handle: SqrtGrad's output says Float16 (name and header) but holds fp32."""
    dump = real_dumps[name]
    first = gen.first_bad_tensors(dump, limit=1)[0]
    assert first["declared_dtype"] == "float16" and first["payload_dtype"] == "float32"
    assert first["nan"] == first["posinf"] == first["neginf"] == 0 and first["max_abs"] > gen.FP16_MAX
    assert first["file"].endswith(".Float16.npy")


@pytest.mark.mindspore
@pytest.mark.parametrize("name", ["zero_token_loss_division", "zero_token_mask_weights"])
def test_zero_token_division_divides_by_a_zero_token_count(real_dumps, name):
    dump, record = real_dumps[name], real_dumps.case(name)
    first = gen.first_bad_tensors(dump, limit=1)[0]
    denominator = op_files(dump, first, "input")[record["expected_zero_denominator_input_slot"]]
    _, values = gen.load_tensor(denominator.path)
    assert values.size == 1 and float(values.reshape(-1)[0]) == 0.0
    later = record.get("expected_later_origin")
    if name == "zero_token_mask_weights":
        assert first["nan"] > 0  # 0/0
    else:
        assert first["posinf"] > 0 and "Grad_Div" in first["op_name"]  # 1/0 in the backward runs first
        forward = [t for t in tensor_files(dump, 0, 1) if t.op_type == "Div" and later["scope_contains"] in t.op_name
                   and t.io == "output"]
        assert len(forward) == 1 and gen.tensor_health(forward[0].path)["nan"] > 0
        assert forward[0].timestamp > first["timestamp"]


@pytest.mark.mindspore
def test_log_case_makes_nan_and_neginf(real_dumps):
    first = gen.first_bad_tensors(real_dumps["log_nonpositive"], limit=1)[0]
    assert first["nan"] == 1 and first["neginf"] == 1


# ------------------------------------------------------------------------------------------- generator mechanics

@pytest.mark.mindspore
def test_second_request_reuses_the_cache(real_dumps):
    logs = {name: (real_dumps.root / name / "run.log").stat().st_mtime_ns for name in real_dumps}
    again = gen.ensure_cases(out_dir=real_dumps.root)
    assert {name: (again.root / name / "run.log").stat().st_mtime_ns for name in again} == logs


def test_failed_case_is_reported_with_its_log_tail(tmp_path):
    failing = gen.Case(name="always_fails", description="exits 3", shows="failure reporting",
                       argv=("-c", "import sys; print('boom: no such kernel'); sys.exit(3)"),
                       expected=gen._expect("clean"))
    record = gen.run_case(failing, tmp_path)
    assert record["ok"] is False and record["exit_code"] == 3
    assert json.loads((tmp_path / "always_fails" / "case.json").read_text())["ok"] is False
    dumps = gen.RealDumps(tmp_path, {"always_fails": record})
    assert dumps.failed() == ["always_fails"]
    with pytest.raises(gen.CaseFailed, match="boom: no such kernel"):
        dumps["always_fails"]


def test_cache_key_changes_with_a_case_script(tmp_path, monkeypatch):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "a.py").write_text("print(1)\n")
    monkeypatch.setattr(gen, "CASES_DIR", cases)
    before = gen.cache_key()
    assert gen.cache_key() == before
    (cases / "a.py").write_text("print(2)\n")
    assert gen.cache_key() != before


def test_unknown_case_name_is_rejected(tmp_path):
    with pytest.raises(KeyError, match="no_such_case"):
        gen.ensure_cases(["no_such_case"], out_dir=tmp_path)


@pytest.mark.mindspore
def test_regenerating_a_case_gives_identical_tensors(real_dumps, tmp_path):
    """Fixtures must not drift between runs (unseeded initialisers once made sqrt_negative differ every run)."""
    def contents(dump):
        # Timestamps differ per run; everything else in the name and every byte must not.
        return {re.sub(r"\.\d+\.(input|output)\.", r".TS.\1.", str(t.path.relative_to(dump))): t.path.read_bytes()
                for t in gen.iter_tensor_files(dump)}

    record = gen.run_case(gen.CASES_BY_NAME["sqrt_negative"], tmp_path)
    assert record["ok"], gen.failure_message(tmp_path / "sqrt_negative", record)
    assert contents(tmp_path / "sqrt_negative" / "dump") == contents(real_dumps["sqrt_negative"])


def test_cases_run_from_a_copy_inside_the_cache_entry(tmp_path):
    """One cache serves several checkouts: the case scripts and the demo package are copied into the entry, so the
    files that the dumps name outlive the checkout that made them."""
    from tests.support import fixture_runs
    src = fixture_runs.staged_sources(tmp_path / "entry")
    assert src == (tmp_path / "entry").resolve() / "src"
    assert (src / "msoverflow" / "demo" / "model.py").read_bytes() == \
        (fixture_runs.REPO / "msoverflow" / "demo" / "model.py").read_bytes()
    script = fixture_runs.SUPPORT / "cases" / "realdump" / "clean_fp32.py"
    assert fixture_runs.in_staged(str(script), src) == str(src / "cases" / "realdump" / "clean_fp32.py")
    assert fixture_runs.in_staged("--steps", src) == "--steps"
    assert fixture_runs.staged_sources(tmp_path / "entry") == src     # made once per entry


@pytest.mark.mindspore
def test_saved_graphs_name_no_file_of_the_checkout_that_made_them(real_dumps):
    entry = real_dumps.root.resolve()
    named = set()
    for ir in (real_dumps["normhead_fp16_overflow"] / "rank_0" / "graphs").glob("*.ir"):
        named |= {f for f in re.findall(r"In file (/[^:\s]+\.py)", ir.read_text(errors="replace"))
                  if "site-packages" not in f}
    assert any(f.endswith("msoverflow/demo/model.py") for f in named), named
    assert all(f.startswith(str(entry) + "/") and Path(f).is_file() for f in named), named
