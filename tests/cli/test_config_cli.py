"""`msoverflow config`, `config --check`, presets and `msoverflow run` from the command line (no MindSpore needed)."""
import json
import os
import subprocess
import sys

import pytest

from msoverflow import cli
from msoverflow.config import build
from msoverflow.config.presets import list_presets, load_preset
from msoverflow.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(args, capsys):
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_config_writes_json_snippet_and_summary(tmp_path, capsys):
    target = tmp_path / "dump_config.json"
    code, out, _ = run_cli(["config", "overflow", "--ms-version", "2.10", "--device", "cpu", "--path", "/data/dump",
                            "--steps", "0|3", "--output", str(target)], capsys)
    assert code == 0
    written = json.loads(target.read_text())
    expected = build("overflow", ms_version="2.10", device="cpu", path="/data/dump", steps="0|3").config
    assert written == expected
    assert f"export MINDSPORE_DUMP_CONFIG={target}" in out
    assert "unset MS_ACL_DUMP_CFG_PATH" in out
    assert "every op is dumped" in out and 'iteration "0|3"' in out


def test_config_to_stdout_is_pure_json(capsys):
    code, out, err = run_cli(["config", "tensors", "--ms-version", "2.4", "--device", "ascend", "--jit-level", "O0",
                              "--path", "/d", "--kernels", "SqrtGrad", "--output", "-"], capsys)
    assert code == 0
    config = json.loads(out)
    assert config["common_dump_settings"]["kernels"] == ["SqrtGrad"] and "export MINDSPORE_DUMP_CONFIG" in err


def test_config_json_result(capsys):
    code, out, _ = run_cli(["config", "overflow", "--ms-version", "2.4", "--device", "ascend", "--jit-level", "O2",
                            "--path", "/d", "--output", "-", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["mechanism"] == "acl" and result["env"]["MS_DEV_SAVE_GRAPHS"] == "1"


def test_config_refusal_is_one_line_exit_2(capsys):
    code, out, err = run_cli(["config", "statistics", "--ms-version", "2.10", "--device", "cpu", "--path", "/d",
                              "--output", "-"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "only supported on GPU and Ascend" in err


def test_o2_from_2_6_writes_msprobe_config_and_snippet(capsys):
    code, out, err = run_cli(["config", "overflow", "--ms-version", "2.6", "--device", "ascend", "--jit-level", "O2",
                              "--path", "/d", "--output", "-"], capsys)
    config = json.loads(out)
    assert code == 0 and config["task"] == "statistics" and config["level"] == "L2" and config["dump_path"] == "/d"
    assert "from msprobe.mindspore import PrecisionDebugger" in err and "debugger.step()" in err
    assert "export INF_NAN_MODE_ENABLE=1" in err and "MS_ASCEND_CHECK_OVERFLOW_MODE=INFNAN_MODE" in err


def test_pynative_writes_msprobe_config_with_levels(capsys):
    code, out, _ = run_cli(["config", "tensors", "--mode", "pynative", "--msprobe-level", "L0", "--ms-version",
                            "2.10", "--device", "cpu", "--path", "/d", "--steps", "3,5-6", "--ranks", "0,1",
                            "--kernels", "Functional.sqrt", "--output", "-"], capsys)
    config = json.loads(out)
    assert code == 0 and (config["task"], config["level"]) == ("tensor", "L0")
    assert config["step"] == [3, "5-6"] and config["rank"] == [0, 1]
    assert config["tensor"]["list"] == ["Functional.sqrt"] and config["extra_info"] is True
    code, _, err = run_cli(["config", "overflow", "--mode", "pynative", "--msprobe-level", "L2", "--ms-version",
                            "2.10", "--device", "cpu", "--path", "/d", "--output", "-"], capsys)
    assert code == 2 and "PyNative" in err


def test_check_msprobe_config_files(tmp_path, capsys):
    good = tmp_path / "msprobe.json"
    good.write_text(json.dumps({"task": "statistics", "dump_path": "/d", "rank": [], "step": [0, "2-4"],
                                "level": "L1", "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                                              "summary_mode": "statistics"}}))
    code, out, _ = run_cli(["config", "--check", str(good), "--ms-version", "2.10", "--device", "cpu"], capsys)
    assert code == 0 and out.strip().endswith("ok")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"task": "tensor", "dump_path": "", "step": ["two"], "level": "L3",
                               "tensor": {"data_mode": ["fwd"], "file_format": "h5", "scoop": []}}))
    code, out, _ = run_cli(["config", "--check", str(bad), "--ms-version", "2.10", "--device", "cpu"], capsys)
    assert code == 1
    for fragment in ("dump_path is required", "step must be a list", "level \"L3\"", "data_mode must be",
                     "file_format must be", "does not read 'scoop'"):
        assert fragment.replace("\\", "") in out.replace("\\", ""), fragment
    o2 = tmp_path / "o2.json"
    o2.write_text(json.dumps({"task": "statistics", "dump_path": "/d", "level": "L1"}))
    code, out, _ = run_cli(["config", "--check", str(o2), "--ms-version", "2.7", "--device", "ascend",
                            "--jit-level", "O2"], capsys)
    assert code == 1 and "O2 runs as a static graph" in out
    ms = tmp_path / "ms.json"
    ms.write_text(json.dumps({"common_dump_settings": {"dump_mode": 0, "path": "/d", "net_name": "Net",
                                                       "iteration": "0", "input_output": 0, "kernels": [],
                                                       "support_device": [0], "op_debug_mode": 3}}))
    code, out, _ = run_cli(["config", "--check", str(ms), "--ms-version", "2.7", "--device", "ascend",
                            "--jit-level", "O2"], capsys)
    assert code == 1 and "msprobe" in out


def test_check_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(build("overflow", ms_version="2.10", device="cpu", path="/data/dump").to_json())
    code, out, _ = run_cli(["config", "--check", str(good), "--ms-version", "2.10", "--device", "cpu"], capsys)
    assert code == 0 and out.strip().endswith("ok")

    bad = tmp_path / "bad.json"
    config = json.loads(good.read_text())
    config["common_dump_settings"].update(op_debug_mode=0, overflow_number=5, path="dump")
    bad.write_text(json.dumps(config))
    code, out, _ = run_cli(["config", "--check", str(bad), "--ms-version", "2.4", "--device", "ascend",
                            "--jit-level", "O0"], capsys)
    assert code == 1
    assert "overflow_number only need to be set when op_debug_mode is 3" in out  # MindSpore's own words
    assert "absolute" in out and "2 error(s)" in out

    warn = tmp_path / "warn.json"
    config = json.loads(good.read_text())
    config["common_dump_settings"]["op_debug_mode"] = 2
    warn.write_text(json.dumps(config))
    code, out, _ = run_cli(["config", "--check", str(warn), "--ms-version", "2.4", "--device", "ascend",
                            "--jit-level", "O1"], capsys)
    # a warning alone does not fail the check; --strict makes it fail (CI)
    assert code == 0 and "silently uses 3" in out and "ok with 0 error(s), 1 warning(s)" in out
    code, out, _ = run_cli(["config", "--check", str(warn), "--strict", "--ms-version", "2.4", "--device", "ascend",
                            "--jit-level", "O1"], capsys)
    assert code == 1 and out.strip().endswith("0 error(s), 1 warning(s)")
    code, out, _ = run_cli(["config", "--check", str(warn), "--strict", "--format", "json", "--ms-version", "2.4",
                            "--device", "ascend", "--jit-level", "O1"], capsys)
    assert code == 1 and json.loads(out)["ok"] is False and json.loads(out)["warnings"] == 1
    code, _, err = run_cli(["config", "--strict"], capsys)
    assert code == 2 and "--check" in err


def test_check_unreadable_is_exit_2_without_traceback(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{\"common_dump_settings\": ")
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "config", "--check", str(broken)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "broken.json" in proc.stderr and "Traceback" not in proc.stderr


def test_check_json_output(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"common_dump_settings": {"dump_mode": 2}}))
    code, out, _ = run_cli(["config", "--check", str(path), "--ms-version", "2.10", "--device", "cpu", "--json"], capsys)
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert {"set-dump-outside-ascend", "missing-key"} <= {p["id"] for p in report["problems"]}


def test_every_shipped_preset_builds(capsys):
    presets = list_presets()
    assert {"cpu-overflow", "ascend-o0-overflow", "ascend-o2-overflow", "tensors-normhead"} <= set(presets)
    for name in presets:
        options = load_preset(name)
        assert options.get("description"), name
        code, out, err = run_cli(["config", "--preset", name, "--ms-version", options.get("ms_version", "2.4"),
                                  "--path", "/data/dump", "--output", "-"], capsys)
        assert code == 0, (name, err)
        json.loads(out)


def test_flags_override_preset(capsys):
    code, out, _ = run_cli(["config", "--preset", "cpu-overflow", "--ms-version", "2.10", "--path", "/d",
                            "--steps", "4", "--output", "-"], capsys)
    assert code == 0 and json.loads(out)["common_dump_settings"]["iteration"] == "4"
    code, out, _ = run_cli(["config", "--preset", "cpu-overflow", "--ms-version", "2.10", "--path", "/d",
                            "--output", "-"], capsys)
    assert json.loads(out)["common_dump_settings"]["iteration"] == "0-1"


def test_copied_preset_with_unquoted_version_is_refused(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("purpose: overflow\ndevice: cpu\nms_version: 2.10\n")
    with pytest.raises(UserError, match="mine.yaml.*quoted"):
        load_preset(preset)
    preset.write_text("purpose: overflow\ndevise: cpu\n")
    with pytest.raises(UserError, match="unknown preset keys devise"):
        load_preset(preset)


def test_list_presets(capsys):
    code, out, _ = run_cli(["config", "--list-presets"], capsys)
    assert code == 0 and "cpu-overflow" in out and "ascend-o0-overflow" in out


def test_run_refuses_non_empty_dump_dir(tmp_path, capsys):
    (tmp_path / "old.npy").write_text("x")
    code, _, err = run_cli(["run", "--device", "cpu", "--ms-version", "2.10", "--dump-dir", str(tmp_path), "--",
                            sys.executable, "-c", "pass"], capsys)
    assert code == 2 and "not empty" in err


def test_run_keeps_and_reports_the_command_exit_code(tmp_path, capsys):
    dump_dir = tmp_path / "fresh"
    code, _, err = run_cli(["run", "--device", "cpu", "--ms-version", "2.10", "--dump-dir", str(dump_dir),
                            "--no-analyze", "--", sys.executable, "-c", "import sys; sys.exit(3)"], capsys)
    assert code == 3 and "command exited with 3" in err
    assert json.loads((dump_dir / "dump_config.json").read_text())["common_dump_settings"]["path"] == str(dump_dir)


def test_run_passes_the_dump_env_to_the_command(tmp_path):
    from msoverflow.config.runner import run_and_analyze

    dump_dir = tmp_path / "envcheck"
    probe = ("import os, sys; sys.exit(0 if os.environ['MINDSPORE_DUMP_CONFIG'].endswith('dump_config.json') "
             "and 'MS_ACL_DUMP_CFG_PATH' not in os.environ else 5)")
    os.environ["MS_ACL_DUMP_CFG_PATH"] = "/stale/acl.json"
    try:
        outcome = run_and_analyze([sys.executable, "-c", probe], dump_dir, device="cpu", ms_version="2.10")
    finally:
        del os.environ["MS_ACL_DUMP_CFG_PATH"]
    assert outcome.command_exit == 0
    assert outcome.files_written == 0 and outcome.analysis_exit == 2  # nothing dumped: not "clean"


def test_run_refused_config_leaves_no_directory(tmp_path, capsys):
    dump_dir = tmp_path / "never"
    code, _, err = run_cli(["run", "--purpose", "statistics", "--device", "cpu", "--ms-version", "2.10",
                            "--dump-dir", str(dump_dir), "--", sys.executable, "-c", "pass"], capsys)
    assert code == 2 and not dump_dir.exists()


def test_run_without_command(capsys):
    code, _, err = run_cli(["run", "--device", "cpu", "--ms-version", "2.10"], capsys)
    assert code == 2 and "needs a command" in err


def test_command_modules_stay_light():
    code = ("import sys; import msoverflow.commands.config, msoverflow.commands.run;"
            "print(any(m.startswith(('ruamel', 'mindspore', 'numpy')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
