"""Real MindSpore on CPU (a few seconds per run): the CPU configs msoverflow writes are accepted and dump what the
summary promises; the configs MindSpore refuses on CPU are refused by msoverflow first, with MindSpore's own words;
`msoverflow run` goes from nothing to a verdict on the demo training script."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from msoverflow.config import build, check
from msoverflow.errors import UserError

pytestmark = pytest.mark.mindspore
pytest.importorskip("mindspore")

REPO = Path(__file__).resolve().parents[2]
TINY_NET = """
import numpy as np, mindspore as ms
from mindspore import nn, ops
ms.set_context(mode=ms.GRAPH_MODE); ms.set_device("CPU")
class Net(nn.Cell):
    def construct(self, x):
        return ops.exp(x) * 2
print(Net()(ms.Tensor(np.ones((2, 2), np.float32))).asnumpy().sum())
"""


@pytest.fixture
def work_dir():
    # MindSpore accepts only [A-Za-z0-9_/-] in dump paths: pytest's tmp_path may contain '[' for parametrized tests.
    directory = Path(tempfile.mkdtemp(prefix="msoverflow_cfg_", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run_under(config: dict, work_dir: Path, args) -> subprocess.CompletedProcess:
    config_path = work_dir / "dump_config.json"
    config_path.write_text(json.dumps(config))
    env = dict(os.environ, MINDSPORE_DUMP_CONFIG=str(config_path), GLOG_v="2")
    env.pop("MS_ACL_DUMP_CFG_PATH", None)
    return subprocess.run([sys.executable, *args], cwd=work_dir, env=env, capture_output=True, text=True, timeout=300)


def op_names_in(dump_dir: Path):
    """(op_type, op_name, io) of every op tensor file (Parameter files excluded); names are parsed from the right."""
    found = []
    for path in dump_dir.glob("rank_0/Net/*/*/*.npy"):
        parts = path.name.split(".")
        if parts[0] == "Parameter":
            continue
        # {type}.{name}.{task}.{stream}.{ts}.{input|output}.{slot}.{format}.{dtype}.npy
        found.append((parts[0], ".".join(parts[1:-8]), parts[-5]))
    return found


def test_cpu_overflow_config_is_accepted_and_dumps_every_op_with_graphs(work_dir):
    dump_dir = work_dir / "dump"
    result = build("overflow", device="cpu", path=str(dump_dir), steps="0")
    assert "every op is dumped" in result.summary_text()
    proc = run_under(result.config, work_dir, ["-m", "msoverflow.demo.train", "--steps", "1"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "otherwise there will be no data" not in proc.stderr  # the e2e block is there

    files = op_names_in(dump_dir)
    assert {io for _, _, io in files} == {"input", "output"}
    # Promise: every op of the executed graph is dumped. Compared per scope and op type, without the -opN
    # number: MindSpore 2.10 numbers same-type ops in one scope differently in file names and in the csv (observed).
    order = (dump_dir / "rank_0/execution_order/ms_execution_order_graph_0.csv").read_text().split()[1:]
    unnumbered = lambda name: re.sub(r"-op\d+$", "", re.sub(r"[/\\. ]", "_", name))  # noqa: E731
    executed = Counter(unnumbered(name) for name in order)
    dumped = Counter(unnumbered(name) for name in {name for _, name, io in files if io == "output"})
    assert executed and executed == dumped
    # Promise: the final execution graph with source lines, for the analysis.
    ir_text = "".join(p.read_text(errors="replace") for p in dump_dir.glob("rank_0/graphs/*.ir"))
    assert "# In file" in ir_text and "model.py" in ir_text
    # Promise: only the chosen step ("0").
    assert {p.name for p in dump_dir.glob("rank_0/Net/*/*")} == {"0"}


def test_cpu_tensors_config_dumps_only_listed_kernels_and_outputs(work_dir):
    dump_dir = work_dir / "dump"
    result = build("tensors", device="cpu", path=str(dump_dir), outputs=True,
                   kernels=["SqrtGrad", "name-regex(.*lm_head-NormHead.*)"])
    assert result.config["common_dump_settings"]["dump_mode"] == 1
    assert result.config["common_dump_settings"]["input_output"] == 2
    proc = run_under(result.config, work_dir, ["-m", "msoverflow.demo.train", "--steps", "1"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Unused Kernel" not in proc.stderr
    files = op_names_in(dump_dir)
    assert files
    for op_type, name, io in files:
        assert io == "output", name
        assert "sqrtgrad" in op_type.lower() or "lm_head-NormHead" in name, name
    assert any(op_type == "SqrtGrad" for op_type, _, _ in files)
    assert any(op_type == "MatMul" for op_type, _, _ in files)  # a NormHead op picked by the regex alone


THREE_CALLS = TINY_NET.replace("print(Net()(", "net = Net()\nfor _ in range(3):\n    print(net(")


def test_cpu_config_options_steps_inputs_ranks_are_honoured(work_dir):
    dump_dir = work_dir / "dump"
    result = build("overflow", device="cpu", path=str(dump_dir), inputs=True, steps="0|2", ranks="0")
    assert result.config["common_dump_settings"]["input_output"] == 1
    script = work_dir / "three_calls.py"
    script.write_text(THREE_CALLS)
    proc = run_under(result.config, work_dir, [str(script)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {p.name for p in dump_dir.glob("rank_0/Net/0/*")} == {"0", "2"}  # graph runs 0 and 2 of 0, 1, 2
    files = op_names_in(dump_dir)
    assert files and {io for _, _, io in files} == {"input"}


REFUSED_ON_CPU = [
    # (what the user asks for, how the config differs, checker rule id)
    ("statistics", {"saved_data": "statistic"}, "statistic-on-cpu"),
    ("op_debug_mode 5", {"op_debug_mode": 5}, "op-debug-mode-range"),
    ("set_dump", {"dump_mode": 2}, "set-dump-outside-ascend"),
    ("relative path", {"path": "relative_dump"}, "relative-path"),
]


@pytest.mark.parametrize("label, change, rule_id", REFUSED_ON_CPU, ids=[c[0] for c in REFUSED_ON_CPU])
def test_configs_mindspore_rejects_on_cpu_are_refused_first(label, change, rule_id, work_dir):
    config = build("overflow", device="cpu", path=str(work_dir / "dump")).config
    config["common_dump_settings"].update(change)
    problem = next((p for p in check(config, device="cpu") if p.id == rule_id), None)
    assert problem is not None and problem.severity == "error"
    if label == "statistics":
        with pytest.raises(UserError, match="only supported on GPU and Ascend"):
            build("statistics", device="cpu", path=str(work_dir / "dump"))
    if label == "relative path":
        with pytest.raises(UserError, match="absolute"):
            build("overflow", device="cpu", path="relative_dump")
    # MindSpore itself refuses the same file, in the words msoverflow quotes.
    script = work_dir / "tiny_net.py"  # graph mode needs the source in a file
    script.write_text(TINY_NET)
    proc = run_under(config, work_dir, [str(script)])
    assert proc.returncode != 0
    assert problem.mindspore_says in proc.stderr, proc.stderr[-1500:]


def test_msoverflow_run_end_to_end_on_the_demo(work_dir):
    dump_dir = work_dir / "run"
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "run", "--device", "cpu", "--steps", "0",
                           "--dump-dir", str(dump_dir), "--", sys.executable, "-m", "msoverflow.demo.train",
                           "--steps", "1"], cwd=REPO, capture_output=True, text=True, timeout=600)
    # The training script's own output passes through, and its exit code is reported.
    assert "step 0: loss" in proc.stdout
    assert "command exited with 0" in proc.stderr
    assert (dump_dir / "dump_config.json").exists() and (dump_dir / "rank_0").is_dir()
    # The verdict of `msoverflow analyze`: the demo's fp16 NormHead overflows in SqrtGrad (exit 1 = anomaly).
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "SqrtGrad" in proc.stdout and "NormHead" in proc.stdout
