"""The graph probe of `run --two-pass` (msoverflow/config/graph_probe.py) without MindSpore: which kernels it reads
from a saved graph, and that it stops the whole process tree of the command once the graph is on disk.

The stand-in command is a launcher like msrun: it starts a worker in a session of its own (msrun's workers outlive
a signal to msrun's process group), the worker reads MINDSPORE_DUMP_CONFIG, writes rank_0/graphs/*.ir in
MindSpore's text format (the node lines of a real 2.10 CPU graph: scope, op and inputs), and then trains forever.
The real runs are in tests/real/test_hunt_real.py (the two-pass fixture) and tests/real/test_guard.py."""
import json
import os
import sys
import time

from msoverflow.config import graph_probe
from msoverflow.config.graph_probe import loss_kernel, probe, weight_updates
from msoverflow.readers.ir_graph import parse_ir

GRAPH = """# IR entry: @kernel_graph0
%para1_w: <Ref[Tensor[Float32]], (2, 2), ref_key=w, is_parameter>  :  has_default
%para2_accum.w: <Ref[Tensor[Float32]], (2, 2), ref_key=accum.w, is_parameter>  :  has_default
%para3_x: <Tensor[Float32], (2, 2)> : [2, 2]

subgraph attr:
subgraph @kernel_graph0() {
  %0(CNode_1) = MatMul(%para3_x, %para1_w) primitive_attrs: {}
      : (<Tensor[Float32], (2, 2)>, <Tensor[Float32], (2, 2)>) -> (<Tensor[Float32], (2, 2)>)
      # Fullname with scope: (Default/network-Loss/_backbone-Net/MatMul-op0)
  %1(CNode_2) = ReduceMean(%0) primitive_attrs: {}
      : (<Tensor[Float32], (2, 2)>) -> (<Tensor[Float32], ()>)
      # Fullname with scope: (Default/network-Loss/ReduceMean-op0)
  %2(CNode_3) = MatMul(%para3_x, %0) primitive_attrs: {}
      : (<Tensor[Float32], (2, 2)>, <Tensor[Float32], (2, 2)>) -> (<Tensor[Float32], (2, 2)>)
      # Fullname with scope: (Gradients/Default/network-Loss/_backbone-Net/gradMatMul/MatMul-op1)
  %3(CNode_4) = UpdateState(%para1_w, %2) primitive_attrs: {}
      : (<UMonad, NoShape>, <Tensor[Float32], (2, 2)>) -> (<UMonad, NoShape>)
      # Fullname with scope: (Default/network-Loss/UpdateState-op0)
  %4(CNode_5) = {OPTIMIZER}(%para1_w, %para2_accum.w, %2) primitive_attrs: {side_effect_mem: Bool(1)}
      : (<Tensor[Float32], (2, 2)>, <Tensor[Float32], (2, 2)>, <Tensor[Float32], (2, 2)>) -> (<Tensor[Float32], (2, 2)>)
      # Fullname with scope: (Default/optimizer-{CELL}/{OPTIMIZER}-op0)
  %5(CNode_6) = Depend(%1, %4) primitive_attrs: {}
      : (<Tensor[Float32], ()>, <Tensor[Float32], (2, 2)>) -> (<Tensor[Float32], ()>)
      # Fullname with scope: (Default/Depend-op0)
  Return(%5)
      : (<Tensor[Float32], ()>)
      # Fullname with scope: (Default/Return-op0)
}
"""

STAND_IN = """import json, os, subprocess, sys, time
if sys.argv[1:] == ["worker"]:
    config = json.load(open(os.environ["MINDSPORE_DUMP_CONFIG"]))["common_dump_settings"]
    graphs = os.path.join(config["path"], "rank_0", "graphs")
    os.makedirs(graphs)
    with open(os.path.join(graphs, "ms_output_trace_code_graph_0.ir"), "w") as fh:
        fh.write(os.environ["GRAPH_TEXT"])
    print("compiled; iteration", config["iteration"], flush=True)
    time.sleep(600)
else:
    worker = subprocess.Popen([sys.executable, __file__, "worker"], start_new_session=True)
    open(os.environ["PIDS_FILE"], "w").write(f"{os.getpid()} {worker.pid}")
    worker.wait()
"""


def graph(optimizer="SGD", cell="SGD"):
    return parse_ir(GRAPH.replace("{OPTIMIZER}", optimizer).replace("{CELL}", cell).splitlines())


def test_update_kernels_are_the_optimizer_kernels_the_graph_has():
    assert weight_updates(graph("SGD")) == ["SGD"]
    assert weight_updates(graph("ApplyMomentum", "Momentum")) == ["ApplyMomentum"]
    # an optimizer built from plain writes (MindFormers' AdamW assigns its results): its Assigns, in its scope
    assert weight_updates(graph("Assign", "AdamW")) == ["Assign"]
    # an Assign outside an optimizer Cell (a loss-scale update, a guard's bookkeeping) is not an update
    assert weight_updates(parse_ir(GRAPH.replace("{OPTIMIZER}", "Assign").replace("optimizer-{CELL}/", "")
                                   .splitlines())) == []


def test_the_loss_is_the_last_forward_kernel_of_the_graph_with_the_backward():
    assert loss_kernel([graph()]) == "Default/network-Loss/ReduceMean-op0"
    forward_only = parse_ir([line for line in GRAPH.splitlines() if "Gradients/" not in line])
    assert loss_kernel([forward_only]) is None


def test_the_probe_reads_the_graph_then_stops_the_launcher_and_its_worker(tmp_path):
    script = tmp_path / "launch.py"
    script.write_text(STAND_IN)
    pids_file = tmp_path / "pids"
    env = {"PIDS_FILE": str(pids_file), "GRAPH_TEXT": GRAPH.replace("{OPTIMIZER}", "SGD").replace("{CELL}", "SGD")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        started = time.monotonic()
        found = probe([sys.executable, str(script)], tmp_path / "probe", device="cpu",
                      ms_version="2.10")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert time.monotonic() - started < 60
    assert found.stopped and found.update_kernels == ["SGD"]
    assert found.loss_kernel == "Default/network-Loss/ReduceMean-op0"
    assert found.kernels() == ["SGD", "Default/network-Loss/ReduceMean-op0"]
    assert found.graphs == ["rank_0/graphs/ms_output_trace_code_graph_0.ir"]
    config = json.loads((tmp_path / "probe" / "dump_config.json").read_text())["common_dump_settings"]
    assert config["iteration"] == str(graph_probe.GRAPHS_ONLY_STEP) and config["dump_mode"] == 0
    assert f"iteration {graph_probe.GRAPHS_ONLY_STEP}" in (tmp_path / "probe" / graph_probe.LOG_NAME).read_text()
    for pid in map(int, pids_file.read_text().split()):
        assert not graph_probe._alive(pid), f"process {pid} still runs after the probe"


def test_a_command_that_compiles_nothing_runs_to_its_end(tmp_path):
    found = probe([sys.executable, "-c", "print('pynative: no graph')"], tmp_path / "probe",
                  device="cpu", ms_version="2.10")
    assert not found.stopped and found.command_exit == 0 and found.graphs == [] and found.kernels() == []
    assert "pynative: no graph" in graph_probe.log_tail(tmp_path / "probe")
