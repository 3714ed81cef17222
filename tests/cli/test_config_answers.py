"""Config answers that agree with themselves (issue 17): the summary states exactly the steps written; `-o` never
overwrites a config silently; GPU overflow dumps statistics with nan/inf counts; the msprobe kernel-level (L2)
recipe says what to install, and `config --check` / `run` verify it is there."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from msoverflow.config import ConfigRefused, build, check
from msoverflow.config import msprobe as msprobe_config
from msoverflow.config.rules import PURPOSES, load_rules

REPO = Path(__file__).resolve().parents[2]


def _cli(*args, cwd=None, env=None):
    full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run([sys.executable, "-m", "msoverflow", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=120)


def _platforms():
    for version in load_rules()["versions"]:
        for jit in ("O0", "O1", "O2"):
            yield {"ms_version": version, "device": "ascend", "jit_level": jit}
        yield {"ms_version": version, "device": "gpu"}
        yield {"ms_version": version, "device": "cpu"}


@pytest.mark.parametrize("steps", [None, "1195-1205", "0|5-8", "all"])
def test_the_summary_states_exactly_the_steps_written(steps):
    checked = 0
    for platform in _platforms():
        for purpose in PURPOSES:
            try:
                result = build(purpose, path="/data/dump", steps=steps, **platform)
            except ConfigRefused:
                continue
            checked += 1
            text = "\n".join(result.summary)
            step_lines = [line for line in result.summary if line.startswith("Steps:")]
            assert len(step_lines) == 1, text
            if result.mechanism == "msprobe":
                written = result.config["step"]
                assert ("every step" in step_lines[0]) == (not written), (platform, purpose, text)
                continue
            written = result.config["common_dump_settings"]["iteration"]
            ignored = [p for p in result.problems if p.key == "common_dump_settings.iteration"]
            if written == "all":
                assert "every step" in step_lines[0] and not ignored, (platform, purpose, text)
            else:
                assert f'iteration "{written}"' in step_lines[0], (platform, purpose, text)
                # "every step" only where MindSpore ignores the written steps, and then the line says so
                assert ("every step" in text) == bool(ignored), (platform, purpose, text)
                if ignored:
                    assert "does not follow it" in step_lines[0]
            if steps not in (None, "all"):
                assert written == steps.replace(",", "|") or ignored or written == "all", (platform, purpose)
    assert checked > 100


def test_the_seed_case_2_2_ascend_overflow_with_steps():
    """The case from the field: 2.2 Ascend async overflow, steps 1195-1205."""
    result = build("overflow", ms_version="2.2", device="ascend", path="/data/dump", steps="1195-1205")
    assert result.config["common_dump_settings"]["iteration"] == "1195-1205"
    assert "every step" not in "\n".join(result.summary)
    assert 'Steps: iteration "1195-1205".' in "\n".join(result.summary)


def test_o_onto_an_existing_file_refuses_without_force(tmp_path):
    config = tmp_path / "dump_config.json"
    config.write_text('{"hand": "edited"}\n')
    args = ["config", "overflow", "--ms-version", "2.4", "--device", "cpu", "--path", tmp_path / "dump", "-o", config]
    refused = _cli(*args)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "exists" in refused.stderr and "--force" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert config.read_text() == '{"hand": "edited"}\n'
    forced = _cli(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "replaced" in forced.stdout
    assert json.loads(config.read_text())["common_dump_settings"]["path"] == str(tmp_path / "dump")
    fresh = _cli(*args[:-1], tmp_path / "new.json")
    assert fresh.returncode == 0 and "replaced" not in fresh.stdout


@pytest.mark.parametrize("version", load_rules()["versions"])
def test_gpu_overflow_dumps_statistics_with_nan_and_inf_counts(version):
    result = build("overflow", ms_version=version, device="gpu", path="/data/dump")
    common = result.config["common_dump_settings"]
    assert common["saved_data"] == "statistic" and common["op_debug_mode"] == 0
    if version == "2.2":      # 2.2 writes its fixed columns, NaN/inf counts included; the key arrived in 2.3
        assert "statistic_category" not in common
    else:
        assert {"nan count", "positive inf count", "negative inf count"} <= set(common["statistic_category"])
    assert not [p for p in check(result.config, ms_version=version, device="gpu") if p.severity != "info"]
    assert "one statistic.csv" in "\n".join(result.summary)


def test_cpu_overflow_still_dumps_tensors():
    """CPU has no statistics dump (MindSpore refuses it): the overflow config keeps tensors there."""
    result = build("overflow", ms_version="2.10", device="cpu", path="/data/dump")
    assert result.config["common_dump_settings"]["saved_data"] == "tensor"


@pytest.mark.parametrize("version", ["2.6", "2.10"])
def test_msprobe_o2_recipe_names_what_to_install(version):
    result = build("overflow", ms_version=version, device="ascend", jit_level="O2", path="/data/dump")
    assert result.mechanism == "msprobe" and result.level == "L2"
    needs = [line for line in result.summary if line.startswith("Needs:")]
    assert needs and "--include-mod=adump" in needs[0] and "--jit-level O0" in needs[0]
    assert "pip install mindstudio-probe)" not in result.shell_snippet()
    pynative = build("overflow", ms_version=version, device="ascend", mode="pynative", path="/data/dump")
    assert not [line for line in pynative.summary if line.startswith("Needs:")]


def test_config_check_and_run_verify_the_kernel_dump_extension(tmp_path):
    if msprobe_config.installed_msprobe() is None:
        pytest.skip("mindstudio-probe is not installed here")
    result = build("overflow", ms_version="2.7", device="ascend", jit_level="O2", path=str(tmp_path / "dump"))
    config = Path(result.write(tmp_path / "config.json"))
    has_it = msprobe_config.kernel_dump_extension() is not None
    checked = _cli("config", "--check", config, "--ms-version", "2.7", "--device", "ascend", "--jit-level", "O2")
    ran = _cli("run", "--ms-version", "2.7", "--device", "ascend", "--jit-level", "O2", "--dump-dir",
               tmp_path / "run", "--", sys.executable, "-c", "pass")
    if has_it:
        assert "msprobe-adump" not in checked.stdout
    else:     # the PyPI wheel (mindstudio-probe 26.2.0 here): a warning with the fix, and run refuses to start
        # a warning (about this machine's install, not the file): exit 0 unless --strict
        assert checked.returncode == 0 and "adump" in checked.stdout and "--include-mod=adump" in checked.stdout
        strict = _cli("config", "--check", config, "--strict", "--ms-version", "2.7", "--device", "ascend",
                      "--jit-level", "O2")
        assert strict.returncode == 1 and "adump" in strict.stdout
        assert ran.returncode == 2 and "not running" in ran.stderr and "--jit-level O0" in ran.stderr
        assert not (tmp_path / "run").exists()


def test_kernel_dump_extension_is_found_by_file(tmp_path):
    """An msprobe built with adump carries msprobe/lib/_msprobe_c*.so; found without importing msprobe."""
    fake = tmp_path / "site" / "msprobe"
    (fake / "lib").mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit('msprobe must not be imported')\n")
    (fake / "lib" / "_msprobe_c.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    code = "from msoverflow.config.msprobe import kernel_dump_extension as k; print(k())"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("_msprobe_c.cpython-311-x86_64-linux-gnu.so")
