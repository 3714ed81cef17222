"""End to end on real MindSpore CPU: the demo's fp16 NormHead overflows (real dump, real `msoverflow analyze`);
`msoverflow patch --verify` re-runs it with the runtime patch and the new dump is clean; a Sqrt-only patch is
shown to fall short and is widened; the source patch applied to a copy of the model file runs clean.
Each training run is a subprocess of a few seconds."""
import json
import sys
import textwrap

import pytest

from msoverflow import cli
from tests.support.patch_reports import DEMO_MODEL

pytestmark = [pytest.mark.mindspore, pytest.mark.slow]

TRAIN = [sys.executable, "-m", "msoverflow.demo.train"]


@pytest.fixture(scope="module")
def overflow_report(tmp_path_factory):
    """A real dump of the unpatched demo (1 step), analysed by `msoverflow analyze`."""
    pytest.importorskip("mindspore")
    from msoverflow.commands._output import save_json
    from msoverflow.patch.verify import run_once
    workdir = tmp_path_factory.mktemp("baseline")
    run = run_once("baseline", TRAIN + ["--steps", "1"], str(workdir), None, "float32")
    assert run.returncode == 0, run.output_tail
    assert run.report is not None, run.analysis_error
    first = run.first
    assert run.report.verdict == "anomaly" and run.report.exit_code == 1
    assert (first["op_type"], first["cell"], first["cell_type"]) == ("SqrtGrad", "network._backbone.lm_head",
                                                                     "NormHead")
    assert run.params_finite == [False], "the unpatched demo must leave non-finite weights"
    return save_json(run.report, str(workdir / "baseline" / "report.json"))


def test_verify_runtime_patch_turns_the_demo_clean(overflow_report, tmp_path, capsys):
    workdir = tmp_path / "verify"
    out = tmp_path / "result.json"
    code = cli.main(["patch", "--from", overflow_report, "--verify", "--workdir", str(workdir), "--json", str(out),
                     "--", *TRAIN, "--steps", "3"])
    captured = capsys.readouterr()
    text = captured.out
    assert code == 0, text
    assert "FIXED" in text and "the origin is gone" in text
    assert "before: overflow in SqrtGrad" in text
    # the runtime patch is shown once, by the verification (the hook in the training process stays quiet)
    assert "runtime patch: Cell" not in text + captured.err
    assert text.count("patch applied in CausalLMLoss at _backbone.lm_head") == 1
    result = json.loads(out.read_text())["verify"]
    assert result["fixed"] is True
    run = result["runs"][-1]
    assert run["verdict"] == "clean" and run["first"] is None
    assert run["params_finite"] == [True, True, True]          # weights finite over several steps
    assert all(abs(v) < 1e6 for v in run["losses"]) and len(run["losses"]) == 3
    # patched when the optimizer was built (before it cloned its states), seen again in TrainOneStepCell
    applied = run["patch_log"]["applied"]
    assert [a["root"] for a in applied] == ["CausalLMLoss", "TrainOneStepCell"]
    assert applied[0]["cells"] == ["_backbone.lm_head"]
    assert {c["kind"] for c in applied[0]["changes"]} >= {"parameter", "wrap", "flags"}
    assert [c["kind"] for c in applied[1]["changes"]] == ["note"]
    report = json.loads(open(run["report"]).read())
    assert report["summary"]["iterations"]["0"] == [0, 1, 2]    # all three steps were dumped and read


def test_sqrt_only_patch_is_shown_insufficient_then_widened(overflow_report, tmp_path):
    from msoverflow.patch import load_report, target_from_args
    from msoverflow.patch.verify import verify
    target = target_from_args(op="Sqrt", report=load_report(overflow_report))
    result = verify(target, TRAIN + ["--steps", "2"], "float32", str(tmp_path / "w"))
    sqrt_only, widened = result.runs
    assert sqrt_only.label == "patched" and sqrt_only.target.op == "Sqrt"
    first_root, second_root = sqrt_only.patch_log["applied"]
    assert first_root["cells"] == ["_backbone.lm_head.sqrt"]
    assert [c["kind"] for c in second_root["changes"]] == ["note"]     # not wrapped twice
    assert not sqrt_only.healthy
    assert not sqrt_only.clean_dump and sqrt_only.weights_finite is False
    assert widened.label == "widened" and widened.target.cell == "network._backbone.lm_head"
    assert widened.healthy and result.fixed
    text = result.render()
    assert "computing only Sqrt in float32 was not enough" in text
    assert text.strip().endswith("loss and parameters finite")


def test_sqrt_only_without_widening_says_so_and_exits_1(overflow_report, tmp_path, capsys):
    code = cli.main(["patch", "--from", overflow_report, "--op", "Sqrt", "--no-widen", "--verify",
                     "--workdir", str(tmp_path / "w"), "--", *TRAIN, "--steps", "1"])
    text = capsys.readouterr().out
    assert code == 1
    assert "NOT FIXED" in text
    assert "widen the patch to the owning Cell (--cell network._backbone.lm_head)" in text


def test_source_patch_on_a_copy_of_the_model_runs_clean(overflow_report, tmp_path, capsys):
    model_copy = tmp_path / "model_copy.py"
    model_copy.write_bytes(DEMO_MODEL.read_bytes())
    assert cli.main(["patch", "--from", overflow_report, "--source", str(model_copy), "--write"]) == 0
    assert (tmp_path / "model_copy.py.orig").read_bytes() == DEMO_MODEL.read_bytes()
    driver = tmp_path / "train_copy.py"
    driver.write_text(textwrap.dedent("""\
        # The demo's training loop with msoverflow.demo.model replaced by the patched copy given as argv[1].
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("msoverflow.demo.model", sys.argv[1])
        module = importlib.util.module_from_spec(spec)
        sys.modules["msoverflow.demo.model"] = module
        spec.loader.exec_module(module)
        from msoverflow.demo import train
        sys.exit(train.main(sys.argv[2:]))
        """))
    capsys.readouterr()
    code = cli.main(["patch", "--from", overflow_report, "--how", "source", "--source", str(model_copy), "--write",
                     "--verify", "--workdir", str(tmp_path / "w"), "--",
                     sys.executable, str(driver), str(model_copy), "--steps", "3"])
    text = capsys.readouterr().out
    assert "already patched" in text                       # --write again changed nothing
    assert code == 0, text
    assert "FIXED" in text and "3 step(s)" in text


def test_target_never_found_is_reported(overflow_report, tmp_path):
    from msoverflow.patch import Target, load_report
    from msoverflow.patch.verify import verify
    origin = load_report(overflow_report)["first"]
    result = verify(Target(cell="Attention", origin=origin), TRAIN + ["--steps", "1"], "float32",
                    str(tmp_path / "w"))
    assert result.exit_code == 1
    run = result.final
    assert run.patch_applied is False
    assert [s["root"] for s in run.patch_log["searched"]] == ["CausalLMLoss", "TrainOneStepCell"]
    assert "PATCH TARGET NOT FOUND" in result.render()
    assert "the patch target was never found" in result.render()


JIT_TRAIN = '''\
# Functional training: the network is only ever called inside @ms.jit, so no Cell.__call__ reaches Python.
import mindspore as ms
import numpy as np
from mindspore import nn
from msoverflow.demo.model import TinyBaichuan, CausalLMLoss, batches

ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
net = TinyBaichuan()
loss_net = CausalLMLoss(net, 64.0)
optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)


@ms.jit
def train_step(ids, labels):
    loss, grads = grad_fn(ids, labels)
    optimizer(grads)
    return loss


for step, (ids, labels) in enumerate(batches(2)):
    loss = train_step(ids, labels)
    finite = all(bool(np.isfinite(p.asnumpy().astype(np.float32)).all()) for p in net.trainable_params())
    print(f"step {step}: loss {float(loss.asnumpy()):.4f} params finite: {finite}", flush=True)
'''


def test_runtime_patch_reaches_a_network_called_only_inside_jit(overflow_report, tmp_path):
    """The hook patches the built networks when the optimizer is constructed, before its states are cloned."""
    from msoverflow.patch import load_report, target_from_report
    from msoverflow.patch.verify import verify
    script = tmp_path / "jit_train.py"
    script.write_text(JIT_TRAIN)
    result = verify(target_from_report(load_report(overflow_report)), [sys.executable, str(script)], "float32",
                    str(tmp_path / "w"))
    run = result.final
    assert run.patch_log["applied"][0]["root"] == "CausalLMLoss"
    assert run.params_finite == [True, True]
    assert result.fixed, result.render()


def test_patch_from_a_dump_directory_analyses_it_without_writing_into_it(overflow_report, capsys):
    import os
    dump_dir = os.path.join(os.path.dirname(overflow_report), "dump")
    before = sorted(os.path.join(d, f) for d, _, files in os.walk(dump_dir) for f in files)
    assert cli.main(["patch", "--dump", dump_dir]) == 0
    out = capsys.readouterr().out
    assert "source patch: NormHead.construct" in out and "(diff only" in out
    assert "apply(train_network, Target(cell='network._backbone.lm_head'), 'float32')" in out
    after = sorted(os.path.join(d, f) for d, _, files in os.walk(dump_dir) for f in files)
    assert after == before


def test_verify_removes_its_temporary_workdir_unless_kept(overflow_report, tmp_path, monkeypatch, capsys):
    """Without --workdir the re-runs' dumps go to a msoverflow-verify-* temp dir: removed when verify ends (also
    when it exits 1), kept with --keep-workdir."""
    import tempfile
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)      # tempfile caches the temp dir it found first
    code = cli.main(["patch", "--from", overflow_report, "--op", "Sqrt", "--no-widen", "--verify", "--",
                     *TRAIN, "--steps", "1"])
    text = capsys.readouterr().out
    assert code == 1 and "removed now" in text
    assert not list(temp.glob("msoverflow-verify-*"))
    assert cli.main(["patch", "--from", overflow_report, "--verify", "--keep-workdir", "--",
                     *TRAIN, "--steps", "1"]) == 0
    kept = list(temp.glob("msoverflow-verify-*"))
    assert len(kept) == 1 and str(kept[0]) in capsys.readouterr().out
