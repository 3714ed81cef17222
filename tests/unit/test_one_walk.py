"""The one walk (msoverflow/walk.py): every layout and format through the same (rank, step) unit and the same
reduce gives the expected answer, and the facts a unit hands over are counted over every op run (step spans,
scanned steps, arrivals, what was dumped), never inferred from a sample. Dumps: the Ascend seed scenario in every
format (built from the documented formats), synthetic npy/statistic.csv dumps covering the rules' cases, and the
real MindSpore 2.10 CPU cases."""
import numpy as np
import pytest

from msoverflow import names, walk
from msoverflow.analysis import analyze
from msoverflow.report_dict import report_dict
from tests.support.ascend_fixtures import build_seed_scenario, write_statistic_csv
from tests.support.synth_dump import SynthDump

F32, F16 = np.float32, np.float16
fin = np.ones(4, F32)

SEED_VARIANTS = [dict(formats=("statistic",)), dict(formats=("npy",), layout="o0"),
                 dict(formats=("npy", "statistic"), layout="o0"), dict(formats=("bin",)),
                 dict(formats=("opdebug", "npy"), layout="acl", opdebug_style="new")]


@pytest.mark.parametrize("variant", SEED_VARIANTS, ids=lambda v: "+".join(v["formats"]))
def test_seed_scenario_in_every_format_finds_the_origin(tmp_path, variant):
    desc = build_seed_scenario(str(tmp_path / "dump"), **variant)
    report = analyze(desc["root"], progress=False)
    assert (report.first.op_type, report.first.rank, report.first.iteration) == (
        "SqrtGrad", desc["origin"]["rank"], desc["origin"]["iteration"])
    assert report.scanned_steps and all(steps for steps in report.scanned_steps.values())


def _rules_dump(root):
    """One rank per rules case, several steps; fp16 names, non-float outputs, loops, saturation, inputs only."""
    d = SynthDump(root, rank=0)
    d.op(0, "MatMul", "Default_MatMul-op1", [fin, fin], [fin])
    d.op(0, "Cast", "Default_Cast-op2", [np.array([1e5, 1], F32)], [np.array([np.inf, 1], F16)])
    d.op(0, "Add", "Default_Add-op3", [np.array([np.inf, 1], F16)], [np.array([np.inf, 1], F16)])
    d.op(0, "ArgMax", "Default_ArgMax-op4", [fin], [np.array([1, 2], np.int32)])
    for step in (1, 2):
        d.op(step, "MatMul", "Default_MatMul-op1", [fin, fin], [fin])
    d = SynthDump(root, rank=1)
    for step in (0, 1):
        d.op(step, "Mul", "Default_Mul-op1", [np.array([3.0], F16)], [np.array([65504.0], F16)])   # saturation
        for _ in range(3):                                                                          # a loop
            d.op(step, "Add", "Default_Add-loop", [fin], [fin])
    d = SynthDump(root, rank=2, with_dtype_suffix=False)
    d.tensor(0, "Sqrt", "Default_Sqrt-op1", "input", 0, np.array([4.0, -1.0], F32))   # inputs only, finite
    d.tensor(0, "Exp", "Default_Exp-op2", "output", 0, fin)
    d.parameter(1, "weight", np.array([np.nan], F32))
    d = SynthDump(root, rank=3)
    d.op(0, "Div", "Default_Div-op1", [np.zeros(2, F32), np.zeros(2, F32)], [np.array([np.nan] * 2, F32)])
    path = d.tensor(0, "Exp", "Default_Exp-op2", "output", 0, fin)
    with open(path, "r+b") as fh:        # a corrupt file
        fh.truncate(20)
    with open(d.dir(0) + "/Exp.not.a.dump.name.json", "w") as fh:
        fh.write("{}")


def test_rules_cases_each_rank_gets_its_answer(tmp_path):
    _rules_dump(str(tmp_path))
    report = analyze(str(tmp_path), progress=False)
    rows = {row.rank: (row.status, row.iteration, row.op_type) for row in report.rank_status}
    assert rows == {0: ("origin", 0, "Cast"), 1: ("origin", 0, "Mul"), 2: ("origin", 1, "Parameter"),
                    3: ("origin", 0, "Div")}
    kinds = {f.rank: f.kind for f in report.anomalies}
    assert kinds[0] == "overflow" and kinds[1] == "saturation" and kinds[3] == "invalid"
    assert any("Exp.not.a.dump.name.json" in w for w in report.warnings)     # named, not silently skipped
    assert report.scanned_steps == {0: [0], 1: [0], 2: [0, 1], 3: [0]}       # stopped after each origin's step
    assert report.iterations[0] == [0, 1, 2]                                 # the later steps are still seen
    full = analyze(str(tmp_path), progress=False, scan_all=True)
    assert full.scanned_steps == {0: [0, 1, 2], 1: [0, 1], 2: [0, 1], 3: [0]}


def test_pool_and_in_process_give_the_same_report(tmp_path, monkeypatch):
    from msoverflow import parallel
    _rules_dump(str(tmp_path))
    here = report_dict(analyze(str(tmp_path), progress=False, jobs=1))
    monkeypatch.setattr(parallel, "POOL_MIN_FILES", 0)
    there = report_dict(analyze(str(tmp_path), progress=False, jobs=2))
    for data in (here, there):
        data["warnings"] = sorted(data["warnings"])
    assert there == here


def _statistic_dump(root, ranks=3, ops=40, nan_in_max=False):
    """statistic.csv per step (documented 2.2 layout), an overflow on the last rank's second step."""
    rng = np.random.default_rng(1)
    for rank in range(ranks):
        for step in range(2):
            rows = []
            folder = SynthDump(root, rank=rank).dir(step)
            for op in range(ops):
                x = rng.normal(size=8).astype(F16)
                y = x.copy()
                if (rank, step, op) == (ranks - 1, 1, ops // 2):
                    y[3] = np.nan if nan_in_max else np.inf
                for io, slot, a in (("input", 0, x), ("output", 0, y)):
                    rows.append({"op_type": "Mul", "op_name": f"Default/net-Net/Mul-op{op}", "task_id": op,
                                 "stream_id": 2, "timestamp": 1000 + 10 * op + step * 100000, "io": io,
                                 "slot": slot, "array": a})
            write_statistic_csv(folder + "/statistic.csv", rows)


@pytest.mark.parametrize("nan_in_max", [False, True])
def test_statistic_csv_step_span_is_every_op_not_a_sample(tmp_path, nan_in_max):
    _statistic_dump(str(tmp_path), nan_in_max=nan_in_max)
    report = analyze(str(tmp_path), progress=False)
    assert report.first.op_name.endswith("Mul-op20") and report.first.rank == 2
    # every op of every scanned step: the first op at 1000 (+ step), the 40th at 1390
    for rank, steps in report.scanned_steps.items():
        for step in steps:
            assert report.step_times[rank][step] == (1000 + step * 100000, 1390 + step * 100000)


def test_npy_step_span_and_facts_count_every_op(tmp_path):
    d = SynthDump(str(tmp_path), rank=0)
    for i in range(30):
        d.op(0, "Mul", f"Default_network-Net_Mul-op{i}", [fin], [fin])
    unit = walk.units(str(tmp_path))[0]
    summary = walk.scan_unit(unit, __import__("msoverflow.rules.knowledge", fromlist=["k"]).knowledge())
    times = [ex.time for ex in walk.unit_executions(unit)]
    assert summary.span == (min(times), max(times)) and len(times) == 30
    assert (summary.facts.runs, summary.facts.with_inputs, summary.facts.with_outputs) == (30, 30, 30)
    assert summary.facts.scoped >= 1 and summary.judged == []


def test_every_arrival_is_reported_with_its_offset(tmp_path):
    """Rank 0 receives a bad value through AllReduce at step 0 and creates its own at step 1: both are facts of
    the report; rank 1 is the origin at step 0."""
    d0 = SynthDump(str(tmp_path), rank=0)
    d0.op(0, "MatMul", "Default_MatMul-op1", [fin, fin], [fin])
    d0.op(0, "AllReduce", "Default_AllReduce-op2", [fin], [np.array([np.inf, 1], F32)])
    d0.op(1, "Div", "Default_Div-op3", [np.zeros(2, F32), np.zeros(2, F32)], [np.array([np.nan] * 2, F32)])
    d1 = SynthDump(str(tmp_path), rank=1, clock=5_000_000_000_000_000)     # another clock: offsets cancel
    d1.op(0, "Exp", "Default_Exp-op1", [fin], [np.array([np.inf, 1], F32)])
    report = analyze(str(tmp_path), progress=False)
    # the AllReduce's first file comes after MatMul's 3 files (7 us apart)
    assert [(a.rank, a.iteration, a.op_type, a.offset_us) for a in report.arrivals] == [(0, 0, "AllReduce", 3 * 7)]
    rows = {row.rank: (row.status, row.iteration) for row in report.rank_status}
    assert rows == {0: ("origin", 1), 1: ("origin", 0)}
    assert report.first.rank == 1
    assert report.scanned_steps == {0: [0, 1], 1: [0]}


def test_propagation_edges_follow_the_saved_graph(tmp_path):
    from tests.support.synth_dump import ir_node
    d = SynthDump(str(tmp_path), rank=0)
    d.op(0, "Exp", "Default_network-Net_Exp-op1", [fin], [np.array([np.inf, 1], F32)])
    d.op(0, "Mul", "Default_network-Net_Mul-op2", [np.array([np.inf, 1], F32)], [np.array([np.inf, 1], F32)])
    d.write_ir("\n".join([ir_node(1, "Exp", "Default/network-Net/Exp-op1"),
                          ir_node(2, "Mul", "Default/network-Net/Mul-op2", ["%1"])]))
    report = analyze(str(tmp_path), progress=False)
    assert report.first.op_type == "Exp" and [p.op_type for p in report.propagation] == ["Mul"]
    origin, spread = report.first, report.propagation[0]
    assert report.edges == [(origin.full_name or origin.op_name, spread.full_name or spread.op_name)]
    assert origin.full_name == "Default/network-Net/Exp-op1"


TRICKY = ["MatMul.Default_MatMul-op1.0.0.17.input.0.DefaultFormat.Float32.npy",
          "MatMul.Default_MatMul-op1.0.0.17.output.1.DefaultFormat.npy",
          "Add.a.b.c.3.4.17.output.0.NCHW.npy", "Add.a.b.c.3.4.17.output.0.NCHW.Float16.npy",
          "T.1.2.123.output.0.Fmt.Float32.npy", "T.N.1.2.123.output.0.Float32.npy",
          "T.N.x.2.123.output.0.Fmt.npy", "T.N.1.2.12a.input.0.Fmt.npy", ".N.1.2.3.input.0.F.npy",
          "T..1.2.3.input.0.F.npy", "T.N.1.2.3.inout.0.F.npy", "T.N.1.2.3.input.x.F.Int32.npy",
          "a.npy", "statistic.csv", "T.N.1.2.3.input.0.F.Bogus.npy", "T.N.1.2.3.output.0.F.BFloat16.npy",
          "T.N.１.2.3.input.0.F.npy", "Add.Default_Add-op9.9.1.1700000000000000.3.4.5.6.output.0.ND.Float32.npy",
          "Add.Default_Add-op9_lxslice2.9.1.1009.output.0.ND.Float32.npy", "Add.Default.7.9.1009.output.0.ND.npy"]


@pytest.mark.parametrize("batch", [TRICKY, [n for n in TRICKY if n.endswith(".Float32.npy")][:1] * 3])
def test_bulk_name_grammar_agrees_with_parse(batch):
    bulk = names.parse_many(batch)
    accepted = dict(zip(bulk.rows, range(len(bulk.rows)), strict=True))
    for i, name in enumerate(batch):
        one = names.parse(name)
        if one is None or one.kind != names.KIND_NPY:
            assert i in bulk.rejected, name
            continue
        k = accepted[i]
        assert names.split_prefix(bulk.prefix[k]) == (one.op_type, one.op_name, one.task_id, one.stream_id), name
        assert (bulk.timestamp[k], bulk.io[k], bulk.slot[k], bulk.fmt[k], bulk.dtype[k]) == (
            one.timestamp, one.io, one.slot, one.fmt, one.dtype), name
        if one.context_id is not None or one.lxslice is not None:
            assert bulk.odd[k] == one


def test_binary_dump_events_travel_between_processes(tmp_path, monkeypatch):
    """Workers send judged executions back by pickle: binary-dump loaders must survive it."""
    from msoverflow import parallel
    desc = build_seed_scenario(str(tmp_path / "dump"), formats=("bin",))
    here = report_dict(analyze(desc["root"], progress=False, jobs=1))
    monkeypatch.setattr(parallel, "POOL_MIN_FILES", 0)
    assert report_dict(analyze(desc["root"], progress=False, jobs=2))["first"] == here["first"]


def test_vectorised_row_check_agrees_with_scan():
    from msoverflow.stats import scan, scan_rows
    rng = np.random.default_rng(3)
    for dtype, declared in ((F32, "float32"), (F32, "float16"), (F16, "float16"), (np.float64, "float32")):
        rows = rng.normal(size=(40, 16)).astype(dtype)
        rows[3, 2] = np.inf
        rows[5, 0] = np.nan
        rows[7, 7] = 65504.0
        rows[9, 1] = -65504.0
        rows[11, 4] = 1e6 if dtype != F16 else np.inf
        rows[13, 5] = 3.4028235e38 if dtype != F16 else 1.0
        bad, pinned = scan_rows(rows, declared)
        assert [(bool(b), bool(p)) for b, p in zip(bad, pinned, strict=True)] == [scan(r, declared) for r in rows]
    clean = np.ones((4, 3), F32)
    assert not scan_rows(clean, "float32")[0].any()




def test_a_statistic_csv_cut_inside_its_last_row_is_never_clean(tmp_path):
    """Fuzz find (docs/robustness.md): a statistic.csv cut inside its last row's last field kept its row count and a
    number that still parses (335 -> 33), so the step read as clean. Every writer ends each row with a line end."""
    folder = tmp_path / "rank_0" / "Net" / "0" / "0"
    folder.mkdir(parents=True)
    rows = [{"op_type": "Mul", "op_name": f"Default/net-Net/Mul-op{op}", "task_id": op, "stream_id": 2,
             "timestamp": 1000 + 10 * op, "io": io, "slot": 0, "array": fin}
            for op in range(4) for io in ("input", "output")]
    write_statistic_csv(str(folder / "statistic.csv"), rows)
    whole = analyze(str(tmp_path), progress=False)
    assert whole.verdict == "clean"
    text = (folder / "statistic.csv").read_bytes()
    assert text.endswith(b"\n")
    (folder / "statistic.csv").write_bytes(text[:-2])        # the line end and the last field's last character
    cut = analyze(str(tmp_path), progress=False)
    assert cut.verdict == "inconclusive"
    assert sum("statistic.csv: cut short" in w for w in cut.warnings) == 1
