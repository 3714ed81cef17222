"""Regression cases of issue 28 (hardening round 4) for the inputs read beside a dump or named by an option: the
layout YAML, strategy checkpoints, the execution-order csv, msprobe parameter gradients and preset values.

Each class has a case that would fail on the code before the fix. Work is bounded by counts (how many times a
name is compared, how many names are kept, how many fields are decoded), never by a wall-clock limit; the CLI
cases run in a subprocess under the corpus contract (no traceback, expected exit codes, the dump unchanged) and,
where memory was the failure, under an address-space limit the old code exceeds.
"""
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from msoverflow import safeio
from msoverflow.config.presets import load_preset
from msoverflow.errors import UserError
from msoverflow.readers import msprobe
from tests.fuzz.test_corpus import clean_dump, contract, msoverflow
from tests.fuzz.test_corpus_round3 import msprobe_dump, record, run_limited

INF = float("inf")


# ---- msprobe parameters_grad: linear in the number of gradients -------------------------------------------

class _CountingName(str):
    """An entry name that counts how often it is compared for equality (a list scan compares every name)."""
    compared = 0

    def __eq__(self, other):
        _CountingName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_msprobe_orphan_parameter_gradients_are_looked_up_not_scanned(tmp_path, monkeypatch):
    """Gradients of a Cell whose backward entry was not dumped stand alone; each is found in one look-up (the old
    code scanned the list of orphans once per gradient: 80,000 of them took minutes)."""
    count = 3000
    data = {_CountingName(f"Cell.net.Dense.parameters_grad.{i}"): {"w": record(INF if i == count - 1 else 1.0)}
            for i in range(count)}
    root = msprobe_dump(tmp_path / "d", {"Functional.exp.0.forward": {"input_args": [record()],
                                                                        "output": [record()]}})
    real_load = msprobe.safeio.load_json

    def load(path, **kw):
        doc = real_load(path, **kw)
        if os.path.basename(path) == msprobe.DUMP_JSON:
            doc["data"].update(data)
        return doc

    monkeypatch.setattr(msprobe.safeio, "load_json", load)
    step = SimpleNamespace(path=str(root / "step0" / "rank0"), rank=0, graph="0", step=0)   # a DumpDir
    _CountingName.compared = 0
    events, nodes, _files, why = msprobe.read_step_dir(step, lambda message: None)
    assert why is None
    assert sum(1 for e in events if e.op_name.startswith("Cell.net.Dense.parameters_grad")) == count
    assert _CountingName.compared < 10 * count, _CountingName.compared     # a list scan: ~count**2 / 2


# ---- YAML: alias expansion and nesting bounded before anything is built -------------------------------------

def alias_bomb(levels: int = 9, width: int = 9, where: str = "parallel_config:\n  data_parallel: *a{last}\n") -> str:
    """~600 bytes whose aliases expand to width**levels nodes (a billion): str() or a tree walk never ends."""
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n" + where.replace("{last}", str(levels))


def test_yaml_nodes_count_every_alias_expanded():
    assert safeio.yaml_nodes("a: &x [1, 2]\nb: *x\n") == 1 + 1 + 3 + 1 + 3
    assert safeio.loads_yaml("a: &x [1, 2]\nb: *x\nc: {<<: {k: 1}}\n") == {"a": [1, 2], "b": [1, 2], "c": {"k": 1}}
    with pytest.raises(safeio.YamlError, match="expand to more than"):
        safeio.loads_yaml(alias_bomb())
    with pytest.raises(safeio.YamlError, match="nested more than"):
        safeio.loads_yaml("a: " + "[" * 200 + "]" * 200)
    for text in ("a: [", "*undefined", "x: " + "9" * 5000, "a: !!python/object:os.system x"):
        with pytest.raises(safeio.YamlError):
            safeio.loads_yaml(text)


def test_brief_never_prints_a_whole_value():
    bomb = safeio.loads_yaml(alias_bomb(levels=3))["a3"]       # small enough to load, shared 9 x 9 x 9 x 9
    assert safeio.brief(bomb) == "a list of 9 item(s)"
    assert safeio.brief(10 ** 4000).startswith("an integer of ")
    assert safeio.brief("x" * 100) == repr("x" * 40) + "..."


def test_alias_bomb_beside_the_dump_is_a_warning_not_a_hang(tmp_path):
    """A MindFormers-looking YAML beside the dump is read without --parallel: the bomb is refused by counting."""
    clean_dump(tmp_path / "job" / "dump")
    (tmp_path / "job" / "train.yaml").write_text(alias_bomb())
    proc = run_limited(1024, "analyze", tmp_path / "job" / "dump", "--no-progress", "--no-save")
    contract(proc, {0}, says="an alias bomb")


def test_alias_bomb_as_the_layout_is_exit_2(tmp_path):
    clean_dump(tmp_path / "dump")
    (tmp_path / "bomb.yaml").write_text(alias_bomb())
    contract(run_limited(1024, "analyze", tmp_path / "dump", "--parallel", tmp_path / "bomb.yaml", "--no-save"), {2},
             says="an alias bomb")


@pytest.mark.parametrize("value", ["*a9", "{k: *a9}", "[*a9, 1]", "not-a-number", "99999999999999999999"])
def test_layout_yaml_values_are_named_briefly(tmp_path, value):
    """A wrong parallel_config value is described (type, size), never printed whole."""
    clean_dump(tmp_path / "dump")
    text = alias_bomb(levels=3, where=f"parallel_config:\n  data_parallel: {value.replace('a9', 'a3')}\n")
    (tmp_path / "run.yaml").write_text(text)
    out, err = contract(msoverflow("analyze", tmp_path / "dump", "--parallel", tmp_path / "run.yaml", "--no-save"), {2})
    line = err.strip().splitlines()[-1]
    assert "parallel_config.data_parallel is" in line and len(line) < 400, line


def test_alias_bomb_in_a_preset_and_in_a_patched_config(tmp_path):
    from msoverflow.patch.yaml_patch import _load_rt
    (tmp_path / "bomb.yaml").write_text(alias_bomb(where="description: *a{last}\n"))
    contract(run_limited(1024, "config", "--preset", tmp_path / "bomb.yaml"), {2}, says="an alias bomb")
    with pytest.raises(UserError, match="alias bomb"):
        _load_rt(alias_bomb(where="model:\n  model_config: {compute_dtype: *a{last}}\n"), "run.yaml")


# ---- presets: every value type-checked, exit 2 naming the key and the file ----------------------------------

@pytest.mark.parametrize("line,key", [("jit_level: [O0]", "jit_level"), ("kernels: 5", "kernels"),
                                      ("kernels: SqrtGrad", "kernels"), ("device: {x: 1}", "device"),
                                      ("inputs: yes please", "inputs"), ("overflow_number: -1", "overflow_number"),
                                      ("steps: [1, x]", "steps"), ("statistic_category: max", "statistic_category"),
                                      ("purpose: [overflow]", "purpose"), ("net_name: 7", "net_name"),
                                      ("mode: eager", "mode"), ("ranks: {0: 1}", "ranks")])
def test_preset_value_types_are_checked(tmp_path, line, key):
    preset = tmp_path / "mine.yaml"
    base = [text for name, text in (("device", "device: cpu"), ("ms_version", 'ms_version: "2.10"')) if name != key]
    preset.write_text("\n".join(base + [line]) + "\n")
    with pytest.raises(UserError, match=f"{preset}: {key} is "):
        load_preset(preset)
    out, err = contract(msoverflow("config", "--preset", preset, "--path", tmp_path / "d"), {2})
    assert f"{key} is " in err and str(preset) in err and len(err.strip().splitlines()) == 1, err


def test_preset_choices_in_any_case_become_the_flags_spelling(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("purpose: Overflow\ndevice: CPU\njit_level: o0\nmsprobe_level: l1\nkernels: [SqrtGrad]\n"
                      "steps: [0, 1]\nms_version: 2\n")
    assert load_preset(preset) == {"purpose": "overflow", "device": "cpu", "jit_level": "O0", "msprobe_level": "L1",
                                   "kernels": ["SqrtGrad"], "steps": [0, 1], "ms_version": 2}


# ---- strategy checkpoints: fields and stages bounded as they are decoded ---------------------------------------

def _count_varints(monkeypatch):
    """Count every varint the protobuf decoder reads (the work a strategy file costs)."""
    from msoverflow.readers import _protobuf as pb
    counted = {"varints": 0}
    real = pb.read_varint

    def counting(buf, pos, end):
        counted["varints"] += 1
        return real(buf, pos, end)

    monkeypatch.setattr(pb, "read_varint", counting)
    return counted


def test_strategy_with_millions_of_stage_varints_is_refused_after_a_few_thousand(tmp_path, monkeypatch):
    """Issue 28 C4: 20M stage varints took 20.7 s and 1.29 GB. One operator's strategy holds its stage and one
    strategy per input: past MAX_INPUTS fields it is refused, and a stage past MAX_STAGE at once."""
    from msoverflow.readers import _protobuf as pb
    from msoverflow.strategy_checkpoint import MAX_INPUTS, StrategyError, read_strategy
    path = tmp_path / "ckpt_strategy_rank_0.ckpt"
    strategys = pb.field_varint(1, 1) * 2_000_000
    path.write_bytes(pb.field_bytes(2, pb.field_bytes(1, "op") + pb.field_bytes(2, strategys)))
    counted = _count_varints(monkeypatch)
    with pytest.raises(StrategyError, match=f"more than {MAX_INPUTS} fields"):
        read_strategy(str(path))
    assert counted["varints"] < 4 * MAX_INPUTS, counted
    distinct = b"".join(pb.field_varint(1, stage) for stage in range(1 << 16, (1 << 16) + 1000))
    path.write_bytes(pb.field_bytes(2, pb.field_bytes(2, distinct)))
    counted["varints"] = 0
    with pytest.raises(StrategyError, match="a pipeline stage beyond"):
        read_strategy(str(path))
    assert counted["varints"] < 20, counted


def test_strategy_with_millions_of_operators_is_refused(tmp_path, monkeypatch):
    from msoverflow.readers import _protobuf as pb
    from msoverflow.strategy_checkpoint import MAX_ITEMS, StrategyError, read_strategy
    path = tmp_path / "strategy.ckpt"
    items = 2_000_000        # 8 varints each
    path.write_bytes(pb.field_bytes(2, pb.field_bytes(1, "o") + pb.field_bytes(2, pb.field_varint(1, 0))) * items)
    counted = _count_varints(monkeypatch)
    with pytest.raises(StrategyError, match="more than"):
        read_strategy(str(path))
    assert counted["varints"] < 10 * (2 * MAX_ITEMS + 16) < 8 * items, counted     # stopped at the bound
    big = {"current_stage": 1, "parallel_strategy_item": {f"op{i}": {"stage": 0} for i in range(MAX_ITEMS + 1)}}
    (tmp_path / "strategy.json").write_text(json.dumps(big))
    with pytest.raises(StrategyError, match=f"more than {MAX_ITEMS} operators"):
        read_strategy(str(tmp_path / "strategy.json"))


def test_strategy_files_beside_the_dump_past_the_bounds_are_a_warning(tmp_path):
    from msoverflow.readers import _protobuf as pb
    clean_dump(tmp_path / "job" / "dump")
    (tmp_path / "job" / "strategy").mkdir()
    (tmp_path / "job" / "strategy" / "ckpt_strategy_rank_0.ckpt").write_bytes(
        pb.field_bytes(2, pb.field_bytes(2, pb.field_varint(1, 1) * 20_000_000)))
    contract(run_limited(1024, "analyze", tmp_path / "job" / "dump", "--no-progress", "--no-save"), {0},
             says="not a readable MindSpore strategy checkpoint (more than")
    contract(msoverflow("analyze", tmp_path / "job" / "dump", "--no-save", "--parallel",
                        tmp_path / "job" / "strategy"), {2}, says="more than 4096 fields")


# ---- the execution-order csv: streamed, bounded, read once per version ----------------------------------------

def test_execution_order_past_its_bounds_keeps_no_names_but_its_count(tmp_path):
    """Issue 28 C5: 6M kernel lines took 1.25 GB. Past MAX_KERNELS the names are not kept (a warning), but the
    kernels are still counted, so completeness still measures a step against what its graph lists."""
    from msoverflow.readers import exec_order
    folder = tmp_path / "rank_0" / "execution_order"
    folder.mkdir(parents=True)
    with open(folder / "ms_execution_order_graph_0.csv", "w") as fh:
        fh.write("NodeExecutionOrder-FullNameWithScope\n")
        fh.writelines(f"Default/network-Net/MatMul-op{i}\n" for i in range(exec_order.MAX_KERNELS + 1))
    warnings = []
    order = exec_order.execution_order(str(tmp_path / "rank_0"), "0", warnings.append)
    assert len(order) == 0 and order.listed == exec_order.MAX_KERNELS + 1 and not order.cut
    assert len(warnings) == 1 and "whose order is kept; their order is not used" in warnings[0]
    assert exec_order.execution_order(str(tmp_path / "rank_0"), "0", warnings.append) is order
    assert len(warnings) == 2           # said again to the next reader, from the one cached read
    with open(folder / "ms_execution_order_graph_0.csv", "w") as fh:      # 70 lines of 1 MiB: each name is cut
        fh.write("NodeExecutionOrder-FullNameWithScope\n")
        fh.writelines(f"D/{i}" + "x" * (1 << 20) + "\n" for i in range(70))
    order = exec_order.execution_order(str(tmp_path / "rank_0"), "0", warnings.append)
    assert len(order) == order.listed == 70 and all(len(name) <= exec_order.MAX_NAME_CHARS for name in order)


def test_execution_order_is_read_once_by_every_stage(tmp_path, monkeypatch):
    """The walk, completeness and the layout check share one read of each version of the csv."""
    from msoverflow.readers import exec_order
    root = tmp_path / "dump"
    step = clean_dump(root)
    folder = root / "rank_0" / "execution_order"
    folder.mkdir()
    (folder / "ms_execution_order_graph_0.csv").write_text(
        "NodeExecutionOrder-FullNameWithScope\nDefault/network-Net/fc-Dense/MatMul-op1\n")
    assert step.exists()
    opened = []
    real = exec_order.safeio.open_regular

    def counting(path, *args, **kw):
        if str(path).endswith(".csv"):
            opened.append(path)
        return real(path, *args, **kw)

    monkeypatch.setattr(exec_order.safeio, "open_regular", counting)
    exec_order._read_order.cache_clear()
    from msoverflow.api import analyze
    analyze(str(root), parallel="dp=1")
    analyze(str(root), parallel="dp=1")
    assert len(opened) == 1, opened


def test_execution_order_of_6m_lines_under_a_memory_limit(tmp_path):
    folder = tmp_path / "dump" / "rank_0" / "execution_order"
    clean_dump(tmp_path / "dump")
    folder.mkdir()
    with open(folder / "ms_execution_order_graph_0.csv", "w") as fh:
        fh.write("NodeExecutionOrder-FullNameWithScope\n")
        line = "Default/network-WithLossCell/_backbone-Net/layers-CellList/0-Block/attention-Attention/MatMul-op{}\n"
        for block in range(60):
            fh.writelines(line.format(block * 100_000 + i) for i in range(100_000))
    proc = run_limited(768, "analyze", tmp_path / "dump", "--no-progress", "--no-save", "--format", "json")
    out, _ = contract(proc, {3}, says="whose order is kept")
    assert "1 of 6000000 kernels' files" in out       # the step is measured against the count: never clean


# ---- layouts that declare huge worlds stay a few rows -------------------------------------------------------

def test_a_layout_of_4_billion_ranks_beside_a_one_rank_dump(tmp_path):
    clean_dump(tmp_path / "dump")
    out, _ = contract(run_limited(1024, "analyze", tmp_path / "dump", "--no-progress", "--no-save", "--format",
                                  "json", "--parallel", "dp=65536,tp=65536"), {3})
    doc = json.loads(out)
    assert [(r["rank"], r.get("last_rank"), r["status"]) for r in doc["ranks"]] == [
        (0, None, "clean"), (1, 65536 * 65536 - 1, "not dumped")]


def test_repeated_anchors_print_no_warning_per_repeat(tmp_path):
    """ruamel.yaml warns once per repeated anchor (1,700 ReusedAnchorWarnings, 400 KB on stderr, for the corpus
    case layout_yaml-hang-reused-anchors.bin): msoverflow's loader keeps the document's own warnings quiet."""
    import warnings
    text = (Path(__file__).parent / "corpus" / "layout_yaml-hang-reused-anchors.bin").read_text()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(safeio.YamlError, match="duplicate key"):
            safeio.loads_yaml(text)
    assert caught == []
    clean_dump(tmp_path / "job" / "dump")
    (tmp_path / "job" / "run.yaml").write_text(text)
    out, err = contract(msoverflow("analyze", tmp_path / "job" / "dump", "--no-progress", "--no-save"), {0})
    assert "ReusedAnchorWarning" not in err and len(err) < 2000, err[-2000:]
