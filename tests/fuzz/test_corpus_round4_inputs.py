"""Regression cases of issue 28 (hardening round 4) for the inputs read beside a dump or named by an option: the
layout YAML, strategy checkpoints, the execution-order csv, msprobe parameter gradients and preset values.

Each class has a case that would fail on the code before the fix. Work is bounded by counts (how many times a
name is compared, how many names are kept, how many fields are decoded), never by a wall-clock limit; the CLI
cases run in a subprocess under the corpus contract (no traceback, expected exit codes, the dump unchanged) and,
where memory was the failure, under an address-space limit the old code exceeds.
"""
import json
import os
import sys
from types import SimpleNamespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_corpus import clean_dump, contract, msoverflow  # noqa: E402
from test_corpus_round3 import msprobe_dump, record, run_limited  # noqa: E402

from msoverflow import safeio  # noqa: E402
from msoverflow.config.presets import load_preset  # noqa: E402
from msoverflow.errors import UserError  # noqa: E402
from msoverflow.readers import msprobe  # noqa: E402

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
    step = SimpleNamespace(path=str(root / "step0" / "rank0"), rank=0, graph="0", iteration=0)   # a DumpDir
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
