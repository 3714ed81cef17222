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
from test_corpus_round3 import msprobe_dump, record  # noqa: E402

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
