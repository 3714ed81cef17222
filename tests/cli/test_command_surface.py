"""What the commands say and return at their edges (issues 27 and 28 D2-D3), without MindSpore runs: a training
command that cannot run, a directory that cannot be made, a hunt whose script is missing, run --two-pass without
a command, the `analyse` spelling, lower-case devices, `patch --from DIR`, a version/device mismatch, steps
written as text, per-rank verify lines, and run's check of the job's own output against its dump."""
import os
import stat
import sys

import numpy as np
import pytest

from msoverflow.cli import main
from tests.support.synth_dump import SynthDump

RUN = ["run", "--device", "cpu", "--ms-version", "2.10"]


def _one_error(err: str) -> str:
    errors = [line for line in err.splitlines() if line.startswith("msoverflow: error:")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.fixture
def not_runnable(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)          # no execute bit
    return {"a directory": (str(tmp_path), "it is a directory"),
            "not executable": (str(script), "not executable"),
            "missing": (str(tmp_path / "nope.py"), "no such file"),
            "not on PATH": ("no-such-program-msoverflow", "not found on PATH")}


@pytest.mark.parametrize("kind", ["a directory", "not executable", "missing", "not on PATH"])
def test_a_training_command_that_cannot_run_is_exit_2_naming_it(kind, not_runnable, tmp_path, capsys):
    program, says = not_runnable[kind]
    for argv, made in ((RUN + ["--dump-dir", str(tmp_path / "d"), "--"], tmp_path / "d"),
                       (RUN + ["--two-pass", "--dump-dir", str(tmp_path / "t"), "--"], tmp_path / "t"),
                       (["hunt", "--out-dir", str(tmp_path / "h"), "--"], tmp_path / "h")):
        assert main(argv + [program]) == 2, argv
        line = _one_error(capsys.readouterr().err)
        assert program in line and says in line, line
        assert not made.exists(), argv          # checked before any directory was made


def test_patch_verify_with_a_command_that_cannot_run(tmp_path, capsys):
    from tests.support.patch_reports import hand_report, write_report
    report = write_report(tmp_path, hand_report())
    assert main(["patch", "--from", str(report), "--verify", "--workdir", str(tmp_path / "w"), "--",
                 str(tmp_path)]) == 2
    assert "it is a directory" in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("where", ["under a file", "in /proc", "name too long"])
def test_a_directory_that_cannot_be_created_is_exit_2_naming_it(where, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    path = {"under a file": str(tmp_path / "file" / "dump"), "in /proc": "/proc/msoverflow_dump",
            "name too long": str(tmp_path / ("x" * 300))}[where]
    for argv in (RUN + ["--dump-dir", path, "--", sys.executable, "-c", "pass"],
                 ["hunt", "--out-dir", path, "--", sys.executable, "-c", "pass"]):
        assert main(argv) == 2, argv
        assert path in _one_error(capsys.readouterr().err)


def test_hunt_of_a_script_that_does_not_exist_says_the_command_failed(tmp_path, capsys):
    assert main(["hunt", "--out-dir", str(tmp_path / "h"), "--", sys.executable, str(tmp_path / "nope.py")]) == 2
    line = _one_error(capsys.readouterr().err)
    assert "the command failed (exit 2) before any network ran" in line
    assert not (tmp_path / "h").exists()          # nothing was kept: no empty folder


def test_run_two_pass_without_a_command_prints_no_plan(tmp_path, capsys):
    assert main(RUN + ["--two-pass", "--dump-dir", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "needs a command after '--'" in _one_error(err)
    assert "pass 1" not in err and not (tmp_path / "t").exists()


def test_analyse_is_analyze(tmp_path, capsys):
    d = SynthDump(str(tmp_path / "d"))
    d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    assert main(["analyse", str(tmp_path / "d"), "--no-progress"]) == 1
    assert capsys.readouterr().out.startswith("ANOMALY")


def test_repro_devices_are_lower_case_and_any_case_is_accepted(capsys):
    from msoverflow.cli import build_parser
    for spelling in ("cpu", "CPU", "Ascend", "gpu"):
        args = build_parser(["repro"]).parse_args(["repro", "--from", "r.json", "--device", spelling])
        assert args.device == spelling.lower()
    with pytest.raises(SystemExit):
        build_parser(["repro"]).parse_args(["repro", "--help"])
    assert "{cpu,ascend,gpu}" in capsys.readouterr().out


def test_patch_from_a_directory_asks_did_you_mean_dump(tmp_path, capsys):
    assert main(["patch", "--from", str(tmp_path)]) == 2
    assert f"did you mean --dump {tmp_path}?" in _one_error(capsys.readouterr().err)


def test_run_warns_when_the_version_asked_for_is_not_the_installed_one(tmp_path, capsys):
    from msoverflow.config.detect import installed_mindspore
    installed, _ = installed_mindspore()
    asked = "2.4" if not (installed or "").startswith("2.4") else "2.5"
    assert main(["run", "--device", "cpu", "--ms-version", asked, "--dump-dir", str(tmp_path / "d"),
                 "--no-analyze", "--", sys.executable, "-c", "pass"]) == 0
    err = capsys.readouterr().err
    if installed:
        assert f"warning: --ms-version {asked}, but MindSpore {installed} is installed here" in err
    else:
        assert "warning: --ms-version" not in err     # nothing installed to disagree with
    assert main(["run", "--device", "cpu", "--ms-version", (installed or "2.10")[:4], "--dump-dir",
                 str(tmp_path / "e"), "--no-analyze", "--", sys.executable, "-c", "pass"]) == 0
    assert "warning:" not in capsys.readouterr().err


def test_config_says_steps_as_text_not_a_python_list(capsys):
    assert main(["config", "--mode", "pynative", "--ms-version", "2.10", "--device", "cpu", "--path", "/d",
                 "--steps", "0|1195-1205", "-o", "-"]) == 0
    err = capsys.readouterr().err
    assert "Steps: steps 0, 1195-1205 (msprobe counts" in err and "['" not in err


def test_verify_under_msrun_gives_each_rank_its_own_loss_line():
    """Golden output: two ranks' losses are never joined into one first-to-last line."""
    from msoverflow.job import OutputWatch
    from msoverflow.patch.targets import Target
    from msoverflow.patch.verify import VerifyResult, VerifyRun
    ranks = {}
    for rank, losses in ((0, ("2.5", "2.4")), (1, ("2.6", "nan"))):
        ranks[rank] = OutputWatch()
        for step, loss in enumerate(losses):
            ranks[rank].feed(f"rank {rank} step {step}: loss {loss} params finite: {loss != 'nan'}")
    combined = OutputWatch()
    for rank in (0, 1):
        for line in (f"rank {rank} step 0: loss 1", ):
            combined.feed(line)
    run = VerifyRun("patched", None, 0, "/w/patched/dump", output=combined, per_rank=ranks,
                    analysis_error="not analysed in this test")
    text = VerifyResult(Target(cell="lm_head"), "float32", ["msrun", "train.py"], None, "/w", [run]).render()
    lines = [line.strip() for line in text.splitlines()]
    assert "exit 0" in lines
    assert "rank 0: 2 step(s), loss 2.5 -> 2.4 (finite); parameters finite" in lines
    assert "rank 1: 2 step(s), loss 2.6 -> nan (NOT finite); parameters NOT finite" in lines
    assert not any(line.startswith("exit 0;") for line in lines)


def _report(steps):
    from msoverflow.model import Report
    return Report(dump_dir="/d", first=None, anomalies=[], propagation=[], warnings=[], ranks=[0],
                  steps={0: list(steps)})


def test_a_clean_dump_of_a_job_whose_output_went_non_finite_is_inconclusive():
    from msoverflow.config.runner import check_output_against
    from msoverflow.job import OutputWatch
    watch = OutputWatch()
    for line in ("step 0: loss 2.31 params finite: True", "step 1: loss 2.30 params finite: False",
                 "step 2: loss nan params finite: False"):
        watch.feed(line)
    report = _report([0])
    check_output_against(report, watch)
    assert report.verdict == "inconclusive" and report.exit_code == 3
    reason = report.inconclusive[-1]
    assert "non-finite parameters" in reason and "step 1: loss 2.30 params finite: False" in reason
    assert "this dump (steps 0) holds no bad value" in reason
    assert "re-run with --two-pass (or --steps 1, the steps its output names)" in reason
    finite = OutputWatch()
    finite.feed("step 0: loss 2.31")
    report = _report([0])
    check_output_against(report, finite)
    assert report.verdict == "clean" and report.exit_code == 0
    later = OutputWatch()
    later.feed("epoch: 1 step: 7, loss is inf")     # LossMonitor's words
    report = _report([0, 1])
    check_output_against(report, later)
    assert "re-run with --two-pass (or --steps 2-7, the steps its output names)" in report.inconclusive[-1]


def test_the_training_output_passes_through_and_is_read(tmp_path, capsys):
    """job.start: the command's stdout and stderr reach ours as they are, and its lines are read for losses."""
    from msoverflow.job import start
    code = "import sys; print('step 0: loss 1.5'); print('oops', file=sys.stderr); print('step 1: loss inf')"
    finished = start([sys.executable, "-c", code], dict(os.environ))
    out, err = capsys.readouterr()
    assert finished.returncode == 0
    assert out == "step 0: loss 1.5\nstep 1: loss inf\n" and err == "oops\n"
    assert finished.output.loss_values[0] == 1.5 and finished.output.loss_finite is False
    assert finished.output.first_nonfinite.step == 1


def test_msrun_worker_logs_are_found_where_msrun_writes_them():
    """msrun puts each worker's output in --log_dir (default: its working directory): run reads them there;
    verify gives each of its runs its own --log_dir so runs do not mix."""
    from msoverflow.job import launcher_log_dir
    plain = ["msrun", "--worker_num=2", "train.py"]
    assert launcher_log_dir(plain) == (plain, ".")
    assert launcher_log_dir(["msrun", "--log_dir", "L", "train.py"]) == (["msrun", "--log_dir", "L", "train.py"], "L")
    assert launcher_log_dir(["msrun", "--log_dir=L", "train.py"], "/w/run") == (
        ["msrun", "--log_dir=/w/run", "train.py"], "/w/run")
    assert launcher_log_dir(plain, "/w/run") == (["msrun", "--log_dir=/w/run", "--worker_num=2", "train.py"], "/w/run")
    assert launcher_log_dir(["python", "train.py"], "/w/run") == (["python", "train.py"], None)
