"""The zero-token guard (msoverflow/guard.py, `patch --how guard`).

The decision rules are checked with recorded collectives (as the Megatron PR's regression tests do): PP=1 does
not broadcast; PP>1 broadcasts from the pipeline group's last member by its GLOBAL rank. The whole route is
checked on a real 2-rank msrun run (MCCL on CPU, DATA_PARALLEL): rank 1 has an empty loss mask at step 1 and
every rank at step 2; `msoverflow patch --write --verify -- msrun ...` must report both ranks clean, the skipped
step, and loss and parameters finite on every rank.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from msoverflow import guard as guard_module
from msoverflow.guard import Topology, global_token_count, topology_from_context
from msoverflow.patch import guard_patch

REPO = Path(__file__).resolve().parents[2]
CASE = REPO / "tests" / "support" / "cases" / "guard" / "train_zero_token_dp.py"
INGRAPH_CASE = REPO / "tests" / "support" / "cases" / "guard" / "train_guard_ingraph.py"


class Recorded:
    def __init__(self, reduced=None):
        self.calls = []
        self.reduced = reduced

    def all_reduce(self, value, group):
        self.calls.append(("all_reduce", group))
        return self.reduced if self.reduced is not None else value

    def broadcast(self, value, src, group):
        self.calls.append(("broadcast", src, group))
        return value


def test_pipeline_size_1_all_reduces_over_data_parallel_and_never_broadcasts():
    comm = Recorded(reduced=0.0)
    count = global_token_count(3.0, Topology(dp_size=4), comm, lambda: 0.0)
    assert count == 0.0 and comm.calls == [("all_reduce", None)]
    comm = Recorded()
    assert global_token_count(3.0, Topology(dp_size=1), comm, lambda: 0.0) == 3.0 and comm.calls == []


def test_pipeline_last_stage_decides_and_broadcasts_by_global_rank():
    # this pipeline group holds global ranks 2 and 6 (stage 0 and 1); the stage index of the last stage is 1
    last = Recorded(reduced=5.0)
    topo = Topology(dp_group="dp", dp_size=2, pp_group="pp-2-6", pp_size=2, pp_ranks=(2, 6), is_last_stage=True)
    assert global_token_count(1.0, topo, last, lambda: 0.0) == 5.0
    assert last.calls == [("all_reduce", "dp"), ("broadcast", 6, "pp-2-6")]
    first = Recorded()
    topo = Topology(dp_group="dp", dp_size=2, pp_group="pp-2-6", pp_size=2, pp_ranks=(2, 6), is_last_stage=False)
    global_token_count(1.0, topo, first, lambda: 0.0)
    assert first.calls == [("broadcast", 6, "pp-2-6")], "a non-last stage only joins the broadcast"
    with pytest.raises(ValueError):
        global_token_count(1.0, Topology(pp_size=2), Recorded(), lambda: 0.0)


def test_pipeline_topology_comes_from_the_auto_parallel_context():
    """8 ranks, pipeline_stages=2 (MindSpore numbering: stage = rank // 4). Rank 6 (stage 1, the last) all-reduces
    over its stage and broadcasts from global rank 6; rank 2 (stage 0) only joins that broadcast: recorded
    collectives, no multi-stage pipeline run (MindSpore's pipeline parallel needs Ascend/GPU, not CPU)."""
    context = {"pipeline_stages": 2}.get
    last = topology_from_context(context, rank=6, size=8)
    assert (last.pp_ranks, tuple(last.dp_ranks), last.is_last_stage, last.dp_size) == ((2, 6), (4, 5, 6, 7), True, 4)
    comm = Recorded(reduced=0.0)
    assert global_token_count(3.0, last, comm, lambda: 0.0) == 0.0
    assert comm.calls == [("all_reduce", last.dp_group), ("broadcast", 6, last.pp_group)]
    first = topology_from_context(context, rank=2, size=8)
    assert (first.pp_ranks, first.is_last_stage, first.pp_group == last.pp_group) == ((2, 6), False, True)
    comm = Recorded()
    global_token_count(3.0, first, comm, lambda: 0.0)
    assert comm.calls == [("broadcast", 6, first.pp_group)]
    flat = topology_from_context({"pipeline_stages": 1}.get, rank=1, size=2)
    assert (flat.dp_group, flat.dp_size, flat.pp_size, flat.is_last_stage) == (None, 2, 1, True)
    with pytest.raises(ValueError):
        topology_from_context({"pipeline_stages": 3}.get, rank=0, size=8)


def test_the_decision_is_inside_the_compiled_step():
    """No host synchronisation per step: construct reads no tensor on the host (no asnumpy, no float(), no
    item()); the count's collectives and the optimizer branch are graph ops."""
    import inspect
    source = inspect.getsource(guard_module._guarded_class)
    construct = source[source.index("def construct"):]
    assert not any(word in construct for word in (".asnumpy(", "float(", ".item(", "print("))
    assert "self.count_all_reduce(count)" in construct and "self.optimizer(grads)" in construct


def _ingraph_runs(out_dir: Path):
    rows = []
    for log in sorted(out_dir.glob("worker_*.log")):
        rows += [json.loads(l[l.index("{"):]) for l in log.read_text(errors="replace").splitlines()
                 if l.lstrip().startswith('{"rank"') or ' {"rank"' in l]
    return rows


@pytest.mark.mindspore
def test_ingraph_guard_on_a_real_two_rank_msrun(tmp_path):
    """Rank 1's mask is empty at step 1 (the global count is still > 0: an ordinary update everywhere); every
    rank's at step 2 (skipped): weights, global_step and the next LR stay as they were on both ranks, the status is
    `skipped` (not updated), the grad norm 0.0, the loss 0; step 3 updates again. Each skip is printed at exit."""
    if shutil.which("msrun", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("msrun is not installed next to this Python")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(["msrun", "--worker_num=2", "--local_worker_num=2", f"--master_port={_free_port()}",
                           "--join=True", f"--log_dir={tmp_path}/logs", str(INGRAPH_CASE)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    logs = "".join(p.read_text(errors="replace") for p in sorted((tmp_path / "logs").glob("worker_*.log")))
    assert proc.returncode == 0, (proc.stdout + logs)[-3000:]
    rows = {(r["rank"], r["step"]): r for r in _ingraph_runs(tmp_path / "logs")}
    assert sorted(rows) == [(r, s) for r in (0, 1) for s in range(4)], logs[-2000:]
    for rank in (0, 1):
        before, during, after = rows[(rank, 1)], rows[(rank, 2)], rows[(rank, 3)]
        assert rows[(rank, 0)]["status"] == "updated" and before["status"] == "updated"
        assert before["weights"] != rows[(rank, 0)]["weights"] and before["global_step"] == 2
        assert during["tokens"] == 0 and during["status"] == "skipped" and during["grad_norm"] == 0.0
        assert during["loss"] == 0.0
        assert (during["weights"], during["global_step"], during["next_lr"]) == (
            before["weights"], before["global_step"], before["next_lr"])
        assert after["status"] == "updated" and after["global_step"] == 3 and after["weights"] != during["weights"]
        assert after["grad_norm"] > 0
        assert f"msoverflow guard: step 2 skipped on rank {rank}" in logs
    assert rows[(1, 1)]["tokens"] == 0 and rows[(1, 1)]["status"] == "updated"
    assert all(rows[(0, s)]["status"] == rows[(1, s)]["status"] for s in range(4)), "every rank decides alike"


@pytest.mark.mindspore
def test_a_reducer_mismatch_fails_fast_in_the_compiled_step(tmp_path):
    """The guard counts an empty mask while the loss averages over its own non-empty one: a zero denominator with
    a non-zero numerator is an error raised inside the step, never a silent skip."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(INGRAPH_CASE), "--mismatch", "--steps", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and guard_module.MISMATCH in proc.stderr, proc.stderr[-2000:]
    assert '"status"' not in proc.stdout


def test_source_form_guards_the_division_and_the_train_step(tmp_path):
    path = tmp_path / "train.py"
    shutil.copy(CASE, path)
    line = next(i + 1 for i, l in enumerate(path.read_text().splitlines()) if "/ token_count" in l)
    patch = guard_patch.plan(str(path), line, count_input=2)
    assert "/ mindspore.ops.maximum(token_count, 1)" in patch.patched
    assert "_msoverflow_guard(nn.TrainOneStepCell(" in patch.patched and "count_input=2)" in patch.patched
    assert patch.patched.index("def _msoverflow_guard(") < patch.patched.index("_msoverflow_guard(nn.")
    changed = [l for l in patch.diff().splitlines() if l.startswith("+ ") or l.startswith("+    ")]
    edited = [l for l in changed if ("=" in l or "return" in l) and l[1:] not in guard_patch._HELPER_SOURCE]
    assert edited and all("# msoverflow: zero-token guard" in l for l in edited)
    path.write_text(patch.patched)
    assert guard_patch.plan(str(path), line).already
    with pytest.raises(guard_patch.UserError, match="no division"):
        guard_patch.plan(str(CASE), 1)


LATE_IMPORT_SCRIPT = '''"""A training script whose imports do not all come first (issue 21)."""


class nn:   # stands in for mindspore.nn: the patch keys on the TrainOneStepCell name
    @staticmethod
    def TrainOneStepCell(network, optimizer):
        return (network, optimizer)


def masked_mean(total, token_count):
    return total / token_count


step = nn.TrainOneStepCell("network", "optimizer")
import os  # noqa: E402 - an import after the TrainOneStepCell line
print("script ran to the end", step, os.sep)
'''


def run_without_msoverflow(path):
    """Run a patched script where msoverflow is not installed (mindspore is a stub: the guard patch's
    `import mindspore` must only bind before its first use)."""
    runner = ("import runpy, sys, types; sys.modules['msoverflow'] = None; "
              "ms = sys.modules['mindspore'] = types.ModuleType('mindspore'); ms.Tensor = type('Tensor', (), {}); runpy.run_path(sys.argv[1], run_name='__main__')")
    return subprocess.run([sys.executable, "-c", runner, str(path)], capture_output=True, text=True, timeout=60)


def test_guard_patch_puts_its_helper_and_import_above_a_late_import_and_the_script_runs(tmp_path):
    """The field case: `import msoverflow.guard` landed after a late import, below its first use (NameError).
    Now the helper and `import mindspore` go above the first use, and the patched script runs, also without
    msoverflow installed (the helper says the guard is off)."""
    path = tmp_path / "train.py"
    path.write_text(LATE_IMPORT_SCRIPT)
    line = next(i + 1 for i, l in enumerate(LATE_IMPORT_SCRIPT.splitlines()) if "/ token_count" in l)
    patch = guard_patch.plan(str(path), line)
    text = patch.patched
    assert text.index("import mindspore") < text.index("mindspore.ops.maximum")
    assert text.index("def _msoverflow_guard(") < text.index("step = _msoverflow_guard(") < text.index("import os")
    path.write_text(text)
    ran = run_without_msoverflow(path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "script ran to the end" in ran.stdout
    assert "msoverflow is not installed: the zero-token guard is off" in ran.stderr


def test_source_patch_puts_its_helper_above_a_module_level_call_before_a_late_import(tmp_path):
    from msoverflow.patch import source_patch
    path = tmp_path / "model.py"
    path.write_text("def compute(x):\n    y = x * 2\n    return y\n\n\nresult = compute(3)\n"
                    "import os  # noqa: E402\nprint('ran', result, os.sep)\n")
    patch = source_patch.plan(str(path), 2, "float32")
    text = patch.patched
    assert text.index("import mindspore") < text.index("def _msoverflow_widen_float32(") < text.index("result =")
    path.write_text(text)
    ran = run_without_msoverflow(path)   # a stub mindspore: the helper only needs the name bound
    assert ran.returncode == 0 and "ran 6" in ran.stdout, ran.stderr[-2000:]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.mindspore
def test_guard_turns_the_real_two_rank_zero_token_run_clean_under_verify(tmp_path):
    if shutil.which("msrun", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("msrun is not installed next to this Python")
    shutil.copy(CASE, tmp_path / "train.py")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("MSOVERFLOW_REPORT_JSON", None)

    def msrun():
        return (f"msrun --worker_num=2 --local_worker_num=2 --master_port={_free_port()} --join=True "
                f"--log_dir={tmp_path}/logs train.py")

    def sh(command, timeout=600):
        return subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=timeout)
    base = sh(f"msoverflow run --device cpu --steps all --dump-dir {tmp_path}/dump --no-analyze -- {msrun()}")
    assert base.returncode == 0, base.stdout[-2000:] + base.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "dump").iterdir() if p.name.startswith("rank_")) == ["rank_0", "rank_1"]
    analysis = sh("msoverflow analyze dump")
    assert analysis.returncode == 1, analysis.stdout[-2000:]
    fix = " ".join(l.strip() for l in analysis.stdout.splitlines() if l.strip())
    assert "`msoverflow patch --from report.json`" in fix, "the fix line names the command that writes the guard"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["first"]["kind"] == "invalid" and report["first"]["rank"] == 1
    assert report["first"]["iteration"] == 1 and "Div" in report["first"]["op_type"]
    fixed = sh(f"msoverflow patch --from report.json --count-input 2 --write --verify -- {msrun()}", timeout=900)
    out = fixed.stdout + fixed.stderr
    assert fixed.returncode == 0, out[-3000:]
    assert "FIXED" in out and "no anomaly on ranks 0, 1" in out
    assert "zero-token guard skipped: step 2 on rank 0, step 2 on rank 1" in out
    for rank in (0, 1):
        line = next(l for l in out.splitlines() if l.strip().startswith(f"rank {rank}:"))
        assert "4 step(s)" in line and "(finite)" in line and "parameters finite" in line, line
    assert (tmp_path / "train.py.orig").read_bytes() == CASE.read_bytes()
    # The runtime hook reaches every msrun worker: a runtime precision patch verified on the guarded script is
    # applied in both worker processes (one log per process, merged).
    again = sh(f"msoverflow patch --from report.json --cell TinyLM --how runtime --json verify.json --verify -- "
               f"{msrun()}", timeout=900)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    patched_run = json.loads((tmp_path / "verify.json").read_text())["verify"]["runs"][-1]
    assert patched_run["patch_log"]["processes"] == 2, patched_run["patch_log"]
    assert {entry["root"] for entry in patched_run["patch_log"]["applied"]} >= {"TokenAveragedLoss"}
    assert sorted(patched_run["per_rank"]) == ["0", "1"] or sorted(patched_run["per_rank"]) == [0, 1]


def test_source_form_on_the_real_mindformers_masked_mean(tmp_path):
    """MindFormers 1.3.2's MSELoss (MAE pretraining) divides the masked loss sum by the mask sum with no guard:
    the guard rewrites exactly that division (an op attribute, `self.divide1 = P.RealDiv()`) and nothing else.
    The file comes from the real wheel, downloaded at test time."""
    import zipfile
    where = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "mindformers==1.3.2", "--no-deps", "-q",
                           "--disable-pip-version-check", "-d", str(where)], capture_output=True, text=True,
                          timeout=300)
    wheels = list(where.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        pytest.skip(f"cannot download mindformers==1.3.2 from PyPI: {proc.stderr.strip()[-200:]}")
    path = tmp_path / "loss.py"
    path.write_bytes(zipfile.ZipFile(wheels[0]).read("mindformers/core/loss/loss.py"))
    original = path.read_text()
    code = "loss = self.divide1(loss_sum, mask_sum)"
    line = next(i + 1 for i, l in enumerate(original.splitlines()) if l.strip() == code)
    patch = guard_patch.plan(str(path), line, code=code)
    assert "loss = self.divide1(loss_sum, mindspore.ops.maximum(mask_sum, 1))  # msoverflow: zero-token guard" \
        in patch.patched
    removed = [l for l in patch.diff().splitlines() if l.startswith("-") and not l.startswith("---")]
    assert [l.strip("- ") for l in removed] == [code]
    assert "return self.div2(numerator, denominator)" in patch.patched      # the eps-guarded CE loss: untouched
    compile(patch.patched, str(path), "exec")
