"""msprobe details, on dumps built from the writers' own code (labelled per test):
- the user's source line skips msprobe's own frames wherever msprobe is installed (stack.json written by msprobe's
  own formatter, `msprobe.core.common.utils.analyze_api_call_stack`, called from a source checkout);
- a PyTorch backward op's Cell is its forward Module (construct.json built by replaying msprobe's PyTorch
  `ModuleProcessor` stack rules: pytorch/dump/module_dump/module_processor.py);
- a Module entry wrapping the same computation is not a later origin; msprobe op-level dumps get no PyNative caveat
  (real mindstudio-probe dumps, test_msprobe_real.py's fixture);
- counts from msprobe statistics (Max/Min only) are lower bounds in every report."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from msoverflow.analysis import analyze
from msoverflow.readers import msprobe as mp
from msoverflow.render import render

INF = float("inf")


def _tensor(dtype, shape, high, low):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": high, "Min": low, "Mean": 0.0,
            "Norm": 1.0, "requires_grad": True}


def _write(directory, data, stack=None, construct=None, framework="pytorch", level="mix"):
    os.makedirs(directory, exist_ok=True)
    doc = {"task": "statistics", "level": level, "framework": framework, "dump_data_dir": None, "data": data}
    with open(os.path.join(directory, "dump.json"), "w") as fh:
        fh.write(json.dumps(doc, indent=1))           # Infinity written bare, as msprobe does
    with open(os.path.join(directory, "stack.json"), "w") as fh:
        json.dump(stack or {}, fh)
    with open(os.path.join(directory, "construct.json"), "w") as fh:
        json.dump(construct or {}, fh)


# ---- construct.json as msprobe's PyTorch ModuleProcessor writes it ---------------------------------------------

class ModuleStack:
    """The rules of msprobe's ModuleProcessor (set_construct_info_in_pre_hook / set_construct_info_in_hook):
    a Module's pre-hook records the top of the stack as its parent and pushes itself; its hook pops it; an API
    entry's parent is the top of the stack. A Module whose backward hook never fires (its inputs need no gradient,
    or a Module called again before its backward ran) stays on the stack."""

    def __init__(self):
        self.stack, self.parents = [], {}

    def enter(self, name):
        self.parents[name] = self.stack[-1] if self.stack else None
        self.stack.append(name)

    def leave(self, name):
        assert self.stack[-1] == name
        self.stack.pop()

    def api(self, name):
        self.parents[name] = self.stack[-1] if self.stack else None


def test_a_pytorch_backward_op_is_in_its_forward_module(tmp_path):
    modules = ["Module.layer2.Sequential", "Module.layer2.2.Bottleneck", "Module.layer2.2.conv3.Conv2d"]
    s = ModuleStack()
    for m in modules:
        s.enter(f"{m}.forward.0")
    s.api("Torch.conv2d.5.forward")
    for m in reversed(modules):
        s.leave(f"{m}.forward.0")
    s.enter("Module.layer4.Sequential.forward.0")
    s.enter("Module.layer4.2.Bottleneck.forward.0")
    for i in range(3):     # ResNet calls one ReLU three times per block
        s.enter(f"Module.layer4.2.relu.ReLU.forward.{i}")
        s.leave(f"Module.layer4.2.relu.ReLU.forward.{i}")
    s.leave("Module.layer4.2.Bottleneck.forward.0")
    s.leave("Module.layer4.Sequential.forward.0")
    # backward: the ReLU's backward pre-hooks fire, its backward hooks never do: left on the stack
    for i in (2, 1, 0):
        s.enter(f"Module.layer4.2.relu.ReLU.backward.{i}")
    for m in modules:
        s.enter(f"{m}.backward.0")
    s.api("Torch.conv2d.5.backward")
    chain = mp.cell_chain("Torch.conv2d.5.backward", s.parents)
    assert "layer4" not in ".".join(a for a, _ in chain)       # siblings left on the stack are not ancestors

    data = {"Torch.conv2d.5.forward": {"input_args": [_tensor("torch.float16", [2, 8], 3.0, -3.0)],
                                       "input_kwargs": {}, "output": [_tensor("torch.float16", [2, 8], 9.0, -9.0)]},
            "Torch.conv2d.5.backward": {"input": [_tensor("torch.float16", [2, 8], 100.0, -100.0)],
                                        "output": [_tensor("torch.float16", [2, 8], INF, -1.0)]}}
    _write(str(tmp_path / "dump" / "step0" / "rank0"), data, construct=s.parents)
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert report.first.op_name == "Torch.conv2d.5.backward"
    assert (report.first.cell, report.first.cell_type) == ("layer2.2.conv3", "Conv2d")


def test_a_module_entry_wrapping_the_origin_is_not_a_later_origin(tmp_path):
    s = ModuleStack()
    s.enter("Module.head.NormHead.backward.0")
    s.api("Torch.sqrt.0.backward")
    s.leave("Module.head.NormHead.backward.0")
    data = {"Torch.sqrt.0.backward": {"input": [_tensor("torch.float16", [4], 47580.0, 1.0)],
                                      "output": [_tensor("torch.float16", [4], INF, 1.0)]},
            "Module.head.NormHead.backward.0": {"input": [_tensor("torch.float16", [4], 2.0, -2.0)],
                                                "output": [_tensor("torch.float16", [4], INF, -2.0)]}}
    _write(str(tmp_path / "dump" / "step0" / "rank0"), data, construct=s.parents)
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert [f.op_name for f in report.anomalies] == ["Torch.sqrt.0.backward"]
    assert "Module.head.NormHead.backward.0" in [f.op_name for f in report.propagation]
    assert not any("PyNative" in c for c in report.coverage)


@pytest.mark.parametrize("construct", ["absent", "empty"])
def test_a_module_entry_equal_to_an_api_call_inside_it_is_one_origin_without_construct_json(tmp_path, construct):
    """PyTorch mix level (L0 Modules + L1 APIs) as msprobe's PyTorch collector writes it: an API entry when the call
    returns, a Module's forward entry (its input_args, input_kwargs, output) in its forward hook, after the APIs it
    ran. No construct.json chain: the Module's scope does not hold `Torch.sqrt.0.forward`; its output is that
    call's output (same shape, same statistics), so the run has one origin."""
    nan = float("nan")         # msprobe writes the Max and Min of a tensor holding NaN as NaN
    data = {"Torch.sqrt.0.forward": {"input_args": [_tensor("torch.float16", [32, 1], 1.0, -4.0)],
                                     "input_kwargs": {}, "output": [_tensor("torch.float16", [32, 1], nan, nan)]},
            "Tensor.__truediv__.0.forward": {"input_args": [_tensor("torch.float16", [32, 16], 2.0, -2.0),
                                                            _tensor("torch.float16", [32, 1], nan, nan)],
                                             "input_kwargs": {}, "output": [_tensor("torch.float16", [32, 16], nan, nan)]},
            "Module.lm_head.NormHead.forward.0": {"input_args": [_tensor("torch.float16", [4, 16], 2.0, -2.0)],
                                                  "input_kwargs": {},
                                                  "output": [_tensor("torch.float16", [32, 16], nan, nan)]}}
    folder = str(tmp_path / "dump" / "step0" / "rank0")
    _write(folder, data)
    if construct == "absent":
        os.remove(os.path.join(folder, "construct.json"))
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert [f.op_name for f in report.anomalies] == ["Torch.sqrt.0.forward"], [f.op_name for f in report.anomalies]
    module = [f for f in report.propagation if f.op_name == "Module.lm_head.NormHead.forward.0"]
    assert module and any("is the output of Tensor.__truediv__.0.forward" in e for e in module[0].evidence)


def test_a_module_entry_whose_output_no_api_call_made_stays_an_origin(tmp_path):
    """The rule needs the same value: a Module whose bad output differs from every API output (another Max) is
    still an origin of its own."""
    data = {"Torch.sqrt.0.forward": {"input_args": [_tensor("torch.float16", [4], 1.0, -4.0)], "input_kwargs": {},
                                     "output": [_tensor("torch.float16", [4], INF, 0.0)]},
            "Module.other.Head.forward.0": {"input_args": [_tensor("torch.float16", [4], 2.0, -2.0)],
                                            "input_kwargs": {}, "output": [_tensor("torch.float16", [8], INF, 0.0)]}}
    _write(str(tmp_path / "dump" / "step0" / "rank0"), data)
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert [f.op_name for f in report.anomalies] == ["Torch.sqrt.0.forward", "Module.other.Head.forward.0"]


def test_module_entries_of_different_scopes_stay_origins(tmp_path):
    """Two Modules that each made a bad value from finite inputs are two origins (the wrapper rule needs the
    earlier origin inside the Module's own scope)."""
    data = {"Module.a.Head.forward.0": {"input_args": [_tensor("torch.float16", [4], 2.0, -2.0)], "input_kwargs": {},
                                        "output": [_tensor("torch.float16", [4], INF, -2.0)]},
            "Module.b.Head.forward.0": {"input_args": [_tensor("torch.float16", [4], 2.0, -2.0)], "input_kwargs": {},
                                        "output": [_tensor("torch.float16", [4], INF, -2.0)]}}
    _write(str(tmp_path / "dump" / "step0" / "rank0"), data, level="L0")
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert [f.op_name for f in report.anomalies] == ["Module.a.Head.forward.0", "Module.b.Head.forward.0"]


# ---- stack.json written by msprobe's own formatter, msprobe run from a source checkout -------------------------

def test_msprobe_frames_are_skipped_wherever_msprobe_lives(tmp_path):
    pytest.importorskip("msprobe.core.common.utils")
    checkout = tmp_path / "mstt" / "debug" / "accuracy_tools" / "msprobe" / "mindspore" / "dump" / "hook_cell"
    checkout.mkdir(parents=True)
    (checkout / "hook_cell.py").write_text(textwrap.dedent("""\
        from msprobe.core.common.utils import analyze_api_call_stack


        def collect(name):
            return analyze_api_call_stack(name)


        def hook_call(name):
            return collect(name)
        """))
    user = tmp_path / "train.py"
    user.write_text(textwrap.dedent("""\
        import json
        import hook_cell


        def forward():
            return hook_cell.hook_call("Functional.sqrt.0.forward")


        print(json.dumps(forward()))
        """))
    # the checkout is on the user's PYTHONPATH, as when msprobe runs from its sources
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, str(user)], capture_output=True, text=True, timeout=120, check=True, env=env)
    stack = json.loads(out.stdout.strip().splitlines()[-1])
    assert "accuracy_tools/msprobe/mindspore/dump/hook_cell/hook_cell.py" in stack    # msprobe's frame first
    frame = mp.user_frame(stack)
    assert frame is not None and frame[0] == str(user) and "hook_cell.hook_call" in frame[2]

    data = {"Functional.sqrt.0.forward": {"input_args": [_tensor("Float16", [4], 9.0, -1.0)], "input_kwargs": {},
                                          "output": [_tensor("Float16", [4], 3.0, float("nan"))]}}
    _write(str(tmp_path / "dump" / "step0" / "rank0"), data, framework="mindspore", level="L1",
           stack={"0": [["Functional.sqrt.0.forward"], stack]})
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert report.first.source is not None and report.first.source.file == str(user)


# ---- honest numbers from msprobe statistics ----------------------------------------------------------------------

def test_counts_from_msprobe_statistics_are_lower_bounds_in_every_report(tmp_path):
    data = {"Torch.exp.0.forward": {"input_args": [_tensor("torch.float16", [6422528], 20.0, -20.0)],
                                    "input_kwargs": {},
                                    "output": [_tensor("torch.float16", [6422528], INF, -INF)]}}
    _write(str(tmp_path / "dump" / "step0" / "rank0"), data, level="L1")
    report = analyze(str(tmp_path / "dump"), progress=False)
    out = report.first.outputs[0].stats
    assert out.counts_exact is False
    text = render(report, "text")
    assert "≥1 +inf" in report.first.detail and "≥1 -inf" in report.first.detail
    assert "1 +inf of" not in text.replace("≥1 +inf of", "")
    for fmt in ("text", "markdown", "html"):
        assert "≥1" in render(report, fmt) and "lower bound" in render(report, fmt), fmt
    doc = json.loads(render(report, "json"))
    tensor = doc["first"]["outputs"][0]
    assert (tensor["posinf"], tensor["neginf"], tensor["nan"]) == (None, None, None)
    assert (tensor["posinf_at_least"], tensor["neginf_at_least"], tensor["counts_exact"]) == (1, 1, False)


def test_msprobe_order_is_not_a_clock(tmp_path):
    """dump.json keeps the order of its entries, not when they ran: an arrival on a msprobe dump has no time into
    its step, and the HTML draws no timeline (every marker would sit at 0 ms) and says why."""
    for rank, bad_here in ((0, True), (1, False)):
        data = {"Torch.sqrt.0.backward": {"input": [_tensor("torch.float16", [4], 47580.0, 1.0)],
                                          "output": [_tensor("torch.float16", [4], INF if bad_here else 60.0, 1.0)]},
                "Distributed.all_reduce.0.forward": {
                    "input_args": [_tensor("torch.float16", [4], INF if bad_here else 1.0, -1.0)],
                    "input_kwargs": {}, "output": [_tensor("torch.float16", [4], INF, -1.0)]}}
        _write(str(tmp_path / "dump" / "step0" / f"rank{rank}"), data, level="L1")
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert [(a.rank, a.iteration, a.offset_us) for a in report.arrivals] == [(1, 0, None)]
    assert report.step_times == {}
    assert "ms into" not in render(report, "text")
    assert "no timeline drawn: the report holds no time within a step" in render(report, "html")


def test_a_module_entry_equal_to_an_api_call_is_one_origin_in_tensor_mode_without_construct_json(tmp_path):
    """msprobe task "tensor" (dump.json as msprobe's PyTorch collector writes it: each tensor's statistics null and
    its data_name naming an npy file in dump_tensor_data/), no construct.json: the Module's output is the npy of
    the Functional call inside it; read, the two are the same value, so the run has one origin."""
    import numpy as np
    folder = tmp_path / "dump" / "step0" / "rank0"
    tensors = folder / "dump_tensor_data"
    tensors.mkdir(parents=True)

    def record(name, array):
        np.save(tensors / f"{name}.npy", array)
        return {"type": "torch.Tensor", "dtype": "torch.float16", "shape": list(array.shape), "Max": None,
                "Min": None, "Mean": None, "Norm": None, "requires_grad": True, "data_name": f"{name}.npy"}

    x, w = np.ones((2, 3, 8, 8), np.float16), np.full((4, 3, 3, 3), 3000.0, np.float16)
    y = np.full((2, 4, 6, 6), np.inf, np.float16)
    conv, module = "Functional.conv2d.5.forward", "Module.layer1.1.conv1.Conv2d.forward.0"
    data = {conv: {"input_args": [record(f"{conv}.input.0", x), record(f"{conv}.input.1", w)], "input_kwargs": {},
                   "output": [record(f"{conv}.output.0", y)]},
            module: {"input_args": [record(f"{module}.input.0", x)], "input_kwargs": {},
                     "output": [record(f"{module}.output.0", y)]}}
    (folder / "dump.json").write_text(json.dumps({"task": "tensor", "level": "mix", "framework": "pytorch",
                                                  "dump_data_dir": str(tensors), "data": data}))
    (folder / "stack.json").write_text("{}")
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert [f.op_name for f in report.anomalies] == [conv], [f.op_name for f in report.anomalies]
    wrapper = [f for f in report.propagation if f.op_name == module]
    assert wrapper and any(f"is the output of {conv}" in e for e in wrapper[0].evidence)
