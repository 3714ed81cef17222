"""`msoverflow hunt` (PyNative, live) and `msoverflow run --two-pass` (graph mode) on real MindSpore CPU runs of the
demo TinyBaichuan: the right op, step, Cell and source line; the repro written from a hunt report; a run that does
not reproduce is inconclusive. The runs are made once (tests/support/gen_hunt_runs.py) and cached."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mindspore


def _case(hunt_runs, name):
    root = hunt_runs[name]
    case = json.loads((root / "case.json").read_text())
    log = (root / "run.log").read_text(errors="replace")
    assert (root / "report.json").exists(), log[-3000:]
    return root, case, json.loads((root / "report.json").read_text()), log


def _valid(report):
    from importlib import resources

    import jsonschema
    schema = json.loads(resources.files("msoverflow").joinpath("schema/report.schema.json").read_text())
    jsonschema.validate(report, schema)


def _env():
    from tests.support import gen_hunt_runs
    return dict(os.environ, PYTHONPATH=str(gen_hunt_runs.REPO), GLOG_v="3", MSOVERFLOW_REPORT_JSON="")


def _assert_names(report, expected):
    first = report["first"]
    assert report["verdict"] == expected["verdict"]
    for key in ("op_type", "forward_op", "kind", "cell", "cell_type", "iteration", "rank"):
        assert first[key] == expected[key], (key, first[key])
    assert expected["source_contains"] in first["source"]["code"]
    assert first["source"]["file"].endswith("demo/model.py")


def test_hunt_names_sqrt_backward_at_a_later_step(hunt_runs):
    root, case, report, log = _case(hunt_runs, "hunt_pynative_step2")
    assert case["exit"] == 1, log[-3000:]
    _assert_names(report, case["expected"])
    assert report["first"]["iteration"] > 0          # not the first step: earlier steps were watched and clean
    assert report["first"]["graph"] == "pynative"
    evidence = " ".join(report["first"]["evidence"])
    assert "counted as optimizer updates" in evidence and "backward of Sqrt" in evidence
    # The op's inputs were checked finite, its output is not: an origin, by analyze's own rules.
    assert all(t["nan"] == 0 and t["posinf"] == 0 and t["neginf"] == 0 for t in report["first"]["inputs"])
    assert any(t["posinf"] or t["neginf"] for t in report["first"]["outputs"])
    assert report["first"]["inputs"][0]["dtype"] == "float16"
    assert [r["status"] for r in report["ranks"]] == ["origin"]
    assert "first bad value at step 2" in log
    _valid(report)
    assert report["provenance"]["command"][:3] == ["msoverflow", "hunt", "--"]
    # One step of tensors saved (the origin's), nothing from the clean steps.
    steps = {p.name for p in (root / "hunt" / "rank_0" / "hunt" / "0").iterdir()}
    assert steps == {"2"}


def test_hunt_under_msrun_watches_each_rank(hunt_runs):
    """2 CPU workers, data parallel: rank 1 makes the overflow, rank 0 gets it through the gradient AllReduce
    (inside DistributedGradReducer's @jit construct: named by its collective, so it is received, not made)."""
    _, case, report, log = _case(hunt_runs, "hunt_msrun_dp2")
    assert case["exit"] == 1, log[-3000:]
    _assert_names(report, case["expected"])
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert ranks[1]["status"] == "origin" and ranks[1]["op_type"] == "SqrtGrad"
    assert ranks[0]["status"] == "received" and ranks[0]["op_type"] == "AllReduce" and ranks[0]["iteration"] == 2
    assert "rank 0: 3 optimizer updates" in log and "rank 1: 3 optimizer updates" in log


def test_hunt_of_a_finite_run_is_clean_and_says_what_it_watched(hunt_runs):
    root, case, report, log = _case(hunt_runs, "hunt_pynative_clean")
    assert case["exit"] == 0, log[-3000:]
    assert report["verdict"] == "clean" and report["first"] is None
    assert [(r["rank"], r["status"], r["iteration"], r["note"]) for r in report["ranks"]] == \
        [(0, "clean", None, "watched 2 steps")]
    assert any("counted as optimizer updates" in c for c in report["coverage"])
    _valid(report)
    assert "2 optimizer updates" in log
    # nothing found: no "tensors of the first bad op in ...", and no folder left holding nothing
    assert "tensors of the first bad op" not in log and "no bad value, so no tensors were kept" in log
    assert not (root / "hunt").exists()


def test_repro_from_a_hunt_report_overflows_in_fp16_and_not_in_fp32(hunt_runs, tmp_path):
    root, _, report, _ = _case(hunt_runs, "hunt_pynative_step2")
    out = tmp_path / "repro"
    made = subprocess.run([sys.executable, "-m", "msoverflow", "repro", "--from", str(root / "report.json"),
                           "--dump", str(root / "hunt"), "-o", str(out)], env=_env(), capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert "through Sqrt's gradient" in made.stdout
    ran = subprocess.run([sys.executable, str(out / "repro.py")], env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "REPRODUCED: non-finite in float16, finite in float32" in ran.stdout, ran.stdout
    float32 = [line for line in ran.stdout.splitlines() if line.strip().startswith("float32")]
    assert float32 and "inf 0 nan 0" in float32[0]


def test_two_pass_names_a_late_step_in_graph_mode(hunt_runs):
    root, case, report, log = _case(hunt_runs, "two_pass_graph_step25")
    assert case["exit"] == 1, log[-3000:]
    _assert_names(report, case["expected"])
    assert "first bad step 25 on rank(s) 0" in log
    _valid(report)
    passes = report["provenance"]["two_pass"]["passes"]
    assert [p["pass"] for p in passes] == ["pass1", "pass2"] and all(p["bytes"] > 0 for p in passes)
    assert "pass 1 wrote" in log and "pass 2 wrote" in log and "sizes: pass1" in log
    pass1 = root / "dump" / "pass1" / "rank_0" / "Net"
    pass2 = root / "dump" / "pass2" / "rank_0" / "Net"
    steps1 = {p.name for g in pass1.iterdir() for p in g.iterdir()}
    steps2 = {p.name for g in pass2.iterdir() for p in g.iterdir()}
    assert steps1 == {str(s) for s in range(30)} and steps2 == {"25"}
    # Pass 1 holds only the optimizer's kernel; pass 2 every op of the one step.
    assert {f.name.split(".")[0] for f in (pass1 / "0" / "3").iterdir()} == {"SGD"}
    assert len({f.name.split(".")[0] for f in (pass2 / "0" / "25").iterdir()}) > 10


def test_two_pass_that_does_not_reproduce_is_inconclusive(hunt_runs):
    _, case, report, log = _case(hunt_runs, "two_pass_not_reproduced")
    assert case["exit"] == 3, log[-3000:]
    assert report["verdict"] == "inconclusive" and report["first"] is None
    assert report["inconclusive"][0].startswith("not reproduced: the run is not deterministic")
    assert "first bad step 1" in log


def test_run_does_not_call_a_job_clean_when_it_blew_up_after_the_dumped_step(hunt_runs):
    """Issue 26.5 (the field note: run's default step-0 dump of a job whose loss went inf at step 1 said CLEAN):
    the dump holds no bad value, the job's own output does: INCONCLUSIVE (exit 3), with what to run instead."""
    root, case, report, log = _case(hunt_runs, "run_blowup_after_dumped_step")
    assert case["exit"] == 3, log[-3000:]
    assert report["verdict"] == "inconclusive" and report["first"] is None
    assert report["summary"]["iterations"] == {"0": case["expected"]["dumped_steps"]}
    assert "params finite: False" in log          # the script's own line, passed through
    reason = next(r for r in report["inconclusive"] if "the job's own output reported" in r)
    assert f"step {case['expected']['blowup_step']}" in reason and "this dump (steps 0) holds no bad value" in reason
    assert "re-run with --two-pass (or --steps 1" in reason
    _valid(report)


def test_hunt_refuses_graph_mode_and_points_to_two_pass(tmp_path):
    from tests.support import gen_hunt_runs
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "hunt", "--out-dir", str(tmp_path / "h"), "--",
                           sys.executable, str(gen_hunt_runs.CASE_SCRIPT), "--mode", "graph", "--steps", "1"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("msoverflow: error:")]
    assert len(errors) == 1 and "cannot hook compiled graphs" in errors[0] and "run --two-pass" in errors[0]
    assert proc.stderr.count("graph mode") == 1, proc.stderr[-2000:]      # said once, not by each process too
    assert not Path(tmp_path / "report.json").exists() and not (tmp_path / "h").exists()


JIT_SCRIPT = '''
import numpy as np, mindspore as ms
from mindspore import nn, ops, Tensor, mint
ms.set_context(mode=ms.PYNATIVE_MODE); ms.set_device("CPU")

@ms.jit
def helper(x):
    return ops.sqrt(x) * 2 + x.sum() + mint.mean(x) + (x / 3).astype(ms.float16).astype(ms.float32)

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(Tensor(np.ones(4, np.float32)), name="w")
    def construct(self, x):
        return helper(x * self.w).sum() + ops.sqrt(x).sum() * 2
net = Net()
train = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), 0.1))
for i in range(2):
    print("loss", float(train(Tensor(np.ones(4, np.float32))).asnumpy()))
'''


def test_hunt_leaves_jit_functions_compilable(tmp_path):
    """A @jit function called under a gradient, with watched tensors flowing in: graph compilation must see
    MindSpore's own Tensor methods and no Python hook function (it refuses the wrappers' code)."""
    script = tmp_path / "jit_train.py"
    script.write_text(JIT_SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "hunt", "--out-dir", str(tmp_path / "h"),
                           "--format", "json", "-o", str(tmp_path / "r.json"), "--", sys.executable, str(script)],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("loss") == 2
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "clean"
    assert "2 optimizer updates" in proc.stderr


def test_run_takes_format_and_output_as_analyze_does(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "run", "--device", "cpu", "--dump-dir",
                           str(tmp_path / "dump"), "--format", "markdown", "-o", str(tmp_path / "r.md"), "--",
                           sys.executable, "-m", "msoverflow.demo.train"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    text = (tmp_path / "r.md").read_text()
    assert "SqrtGrad" in text and "NormHead" in text and text.lstrip().startswith("#")
    assert "SqrtGrad" not in proc.stdout          # the report went to the file
