"""The columnar scan (msoverflow/scan.py) and the map/reduce (msoverflow/parallel.py) give the same report as the
object path (every directory through msoverflow/index.py, in one process): same verdict, findings, propagation,
counts and warnings. Dumps: the Ascend seed scenario in every format (built from the documented format), and
synthetic npy/statistic.csv dumps covering the rules' cases."""
import json

import numpy as np
import pytest

from ascend_fixtures import build_seed_scenario, write_statistic_csv
from synth_dump import SynthDump

from msoverflow import names, scan
from msoverflow.analyze import analyze
from msoverflow.render.json_report import report_dict

F32, F16 = np.float32, np.float16


def _report(root, columnar, **options):
    old = scan.COLUMNAR
    scan.COLUMNAR = columnar
    try:
        report = analyze(str(root), progress=False, **options)
    finally:
        scan.COLUMNAR = old
    data = report_dict(report)
    data["warnings"] = sorted(data.get("warnings", []))
    return json.dumps(data, sort_keys=True, default=str)


def assert_same(root, **options):
    columnar = _report(root, True, **options)
    assert columnar == _report(root, False, **options)
    return json.loads(columnar)


SEED_VARIANTS = [dict(formats=("statistic",)), dict(formats=("npy",), layout="o0"),
                 dict(formats=("npy", "statistic"), layout="o0"), dict(formats=("bin",)),
                 dict(formats=("opdebug", "npy"), layout="acl", opdebug_style="new")]


@pytest.mark.parametrize("variant", SEED_VARIANTS, ids=lambda v: "+".join(v["formats"]))
def test_seed_scenario_same_report(tmp_path, variant):
    desc = build_seed_scenario(str(tmp_path / "dump"), **variant)
    data = assert_same(desc["root"])
    assert data["first"]["op_type"] == "SqrtGrad"


def _rules_dump(root):
    """One rank per rules case, several steps; fp16 names, non-float outputs, loops, saturation, inputs only."""
    fin = np.ones(4, F32)
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
    d.tensor(0, "Sqrt", "Default_Sqrt-op1", "input", 0, np.array([4.0, -1.0], F32))                 # inputs only
    d.tensor(0, "Exp", "Default_Exp-op2", "output", 0, fin)
    d.parameter(1, "weight", np.array([np.nan], F32))
    d = SynthDump(root, rank=3)
    d.op(0, "Div", "Default_Div-op1", [np.zeros(2, F32), np.zeros(2, F32)], [np.array([np.nan] * 2, F32)])
    path = d.tensor(0, "Exp", "Default_Exp-op2", "output", 0, fin)
    with open(path, "r+b") as fh:        # a corrupt file
        fh.truncate(20)
    with open(d.dir(0) + "/Exp.not.a.dump.name.json", "w") as fh:
        fh.write("{}")


@pytest.mark.parametrize("scan_all", [False, True])
def test_rules_cases_same_report(tmp_path, scan_all):
    _rules_dump(str(tmp_path))
    data = assert_same(tmp_path, scan_all=scan_all)
    assert data["verdict"] == "anomaly"


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
def test_statistic_csv_same_report(tmp_path, nan_in_max):
    _statistic_dump(str(tmp_path), nan_in_max=nan_in_max)
    data = assert_same(tmp_path)
    assert data["first"]["op_name"].endswith("Mul-op20") and data["first"]["rank"] == 2


def test_pool_and_in_process_give_the_same_report(tmp_path, monkeypatch):
    from msoverflow import parallel
    _rules_dump(str(tmp_path))
    here = _report(tmp_path, True, jobs=1)
    monkeypatch.setattr(parallel, "POOL_MIN_FILES", 0)
    assert _report(tmp_path, True, jobs=2) == here


TRICKY = ["MatMul.Default_MatMul-op1.0.0.17.input.0.DefaultFormat.Float32.npy",
          "MatMul.Default_MatMul-op1.0.0.17.output.1.DefaultFormat.npy",
          "Add.a.b.c.3.4.17.output.0.NCHW.npy", "Add.a.b.c.3.4.17.output.0.NCHW.Float16.npy",
          "T.1.2.123.output.0.Fmt.Float32.npy", "T.N.1.2.123.output.0.Float32.npy",
          "T.N.x.2.123.output.0.Fmt.npy", "T.N.1.2.12a.input.0.Fmt.npy", ".N.1.2.3.input.0.F.npy",
          "T..1.2.3.input.0.F.npy", "T.N.1.2.3.inout.0.F.npy", "T.N.1.2.3.input.x.F.Int32.npy",
          "a.npy", "statistic.csv", "T.N.1.2.3.input.0.F.Bogus.npy", "T.N.1.2.3.output.0.F.BFloat16.npy",
          "T.N.１.2.3.input.0.F.npy"]


def test_bulk_name_parser_agrees_with_parse():
    bulk = names.parse_many(TRICKY)
    accepted = dict(zip(bulk.rows, range(len(bulk.rows))))
    for i, name in enumerate(TRICKY):
        one = names.parse(name)
        if one is None or one.kind != names.KIND_NPY:
            assert i in bulk.rejected or names.split_prefix(bulk.prefix[accepted[i]]) is None, name
            continue
        k = accepted[i]
        assert bulk.prefix[k] == f"{one.op_type}.{one.op_name}.{one.task_id}.{one.stream_id}", name
        assert (bulk.timestamp[k], bulk.io[k], bulk.slot[k], bulk.fmt[k], bulk.dtype[k]) == (
            one.timestamp, one.io, one.slot, one.fmt, one.dtype), name


def test_bulk_name_parser_columns_of_one_form_agree_with_parse():
    for suffix in (".Float32.npy", ".npy"):
        batch = [f"MatMul.Default_net-Net_MatMul-op{i}.{i}.3.{1000 + i}.{io}.{i % 3}.NCHW{suffix}"
                 for i in range(50) for io in ("input", "output")]
        bulk = names.parse_many(batch)
        assert bulk.rows == list(range(len(batch))) and not bulk.rejected
        for k, name in enumerate(batch):
            one = names.parse(name)
            assert names.split_prefix(bulk.prefix[k]) == (one.op_type, one.op_name, one.task_id, one.stream_id)
            assert (bulk.timestamp[k], bulk.io[k], bulk.slot[k], bulk.fmt[k], bulk.dtype[k]) == (
                one.timestamp, one.io, one.slot, one.fmt, one.dtype)


def test_binary_dump_events_travel_between_processes(tmp_path, monkeypatch):
    """Workers send judged executions back by pickle: binary-dump loaders must survive it."""
    from msoverflow import parallel
    desc = build_seed_scenario(str(tmp_path / "dump"), formats=("bin",))
    here = _report(desc["root"], True, jobs=1)
    monkeypatch.setattr(parallel, "POOL_MIN_FILES", 0)
    assert _report(desc["root"], True, jobs=2) == here


@pytest.mark.mindspore
def test_real_mindspore_dumps_same_report(real_dumps):
    """Every real MindSpore 2.10 CPU case (tests/test_real_dumps_analyze.py) through both paths."""
    from test_real_dumps_analyze import CASES
    for case in CASES:
        assert_same(real_dumps[case])
        assert_same(real_dumps[case], scan_all=True)


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
        assert [(bool(b), bool(p)) for b, p in zip(bad, pinned)] == [scan(r, declared) for r in rows]
    clean = np.ones((4, 3), F32)
    assert not scan_rows(clean, "float32")[0].any()


def test_uniform_columns_only_for_plain_names():
    plain = [f"Add.Default_Add-op{i}.{i}.1.{1000 + i}.output.0.ND.Float32.npy" for i in range(3)]
    assert names.parse_uniform(plain) is not None
    for odd in ("Add.Default_Add-op9.9.1.1700000000000000.3.4.5.6.output.0.ND.Float32.npy",   # FFTS+ ids
                "Add.Default_Add-op9_lxslice2.9.1.1009.output.0.ND.Float32.npy",             # a sliced op
                "Add.Default.7.9.1.1009.output.0.ND.Float32.npy",                            # name ends in a number
                "Add.Default_Add-op9.9.1.1009.output.0.2x3.npy",                             # msaccucmp shape
                "Add.Default_Add-op9.9.1.10\n09.output.0.ND.Float32.npy"):
        assert names.parse_uniform(plain + [odd]) is None, odd


def test_clean_sample_shows_graph_mode_naming(tmp_path):
    """Coverage reads the kept sample, not every op: a Cell-scoped op later in the step must still be in it, or a
    graph-mode dump would get the PyNative caveat."""
    d = SynthDump(str(tmp_path))
    for i in range(12):
        d.op(0, "Assign", f"Default_Assign-op{i}", [np.ones(2, F32)], [np.ones(2, F32)])
    for i in range(12):
        d.op(0, "MatMul", f"Default_network-Net_fc-Dense_MatMul-op{i}", [np.ones(2, F32)], [np.ones(2, F32)])
    data = assert_same(tmp_path)
    assert data["verdict"] == "clean"
    assert not any("PyNative" in line for line in data.get("coverage", []))
