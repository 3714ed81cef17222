"""The top-level configs/: every file is what `msoverflow config` writes today (no drift from the rules), for every
MindSpore version and jit level its README row names, and passes `config --check`. configs/ is data: never a
Python package, never in the wheel."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_configs", REPO / "scripts" / "gen_configs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_configs"] = module       # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


GEN = _generator()
FILES = GEN.dump_config_files()


def test_configs_dir_matches_the_generator():
    want, have = GEN.expected(), GEN.on_disk()
    assert sorted(have) == sorted(want), "run python scripts/gen_configs.py"
    for name in want:
        assert have[name] == want[name], f"configs/{name} drifted from the rules: run python scripts/gen_configs.py"


def test_the_cases_the_issue_asks_for_are_there():
    rows = {(f.device, f.jit_levels, f.mode, f.purpose, v) for f in FILES for v in f.versions}
    assert ("ascend", (), None, "overflow", "2.2") in rows                        # the seed case
    for v in ("2.3", "2.4", "2.5"):
        assert ("ascend", ("O0", "O1"), None, "overflow", v) in rows
        assert ("ascend", ("O0", "O1"), None, "statistics", v) in rows
    assert ("ascend", ("O2",), None, "overflow", "2.5") in rows                   # ACL
    assert ("ascend", ("O2",), None, "overflow", "2.6") in rows                   # msprobe
    assert ("ascend", (), "pynative", "overflow", "2.6") in rows
    assert ("gpu", (), None, "overflow", "2.10") in rows and ("cpu", (), None, "overflow", "2.10") in rows


@pytest.mark.parametrize("entry", FILES, ids=lambda f: f.name)
def test_each_file_is_what_msoverflow_config_writes_for_every_version_it_names(entry):
    on_disk = (CONFIGS / entry.name).read_text(encoding="utf-8")
    for version in entry.versions:
        for jit in entry.jit_levels or (None,):
            assert GEN.config_text(entry.argv(version, jit, "OUT")) == on_disk, (entry.name, version, jit)


@pytest.mark.parametrize("entry", FILES, ids=lambda f: f.name)
def test_each_file_passes_config_check(entry):
    for version in entry.versions:
        for jit in entry.jit_levels or (None,):
            argv = ["config", "--check", str(CONFIGS / entry.name), "--ms-version", version, "--device", entry.device,
                    "--format", "json"] + (["--jit-level", jit] if jit else [])
            code, out, err = GEN.run_msoverflow(argv)
            problems = json.loads(out)["problems"]
            # msprobe-adump is about this machine's mindstudio-probe install, not about the file
            real = [p for p in problems if p["severity"] in ("error", "warning") and p["id"] != "msprobe-adump"]
            assert not real, (entry.name, version, jit, real)
            assert code in (0, 1) and (code == 0) == (not [p for p in problems if p["severity"] == "error"])


def test_mindformers_overlays_set_fields_of_their_generation():
    from msoverflow.resources import load_yaml
    table = load_yaml("mindformers_precision.yaml")
    overlays = sorted((CONFIGS / "mindformers").glob("*.yaml"))
    assert overlays
    for path in overlays:
        generation = path.name.split("-")[0]
        data = YAML(typ="safe").load(path.read_text())
        fields = data["model"]["model_config"]
        assert fields and set(fields) <= set(table["generations"][generation]["fields"]), path.name
        assert set(fields.values()) == {"float32"}


def test_configs_is_data_not_a_package():
    """Never imported or installed: no Python in it (the wheel's contents are checked in test_install.py)."""
    assert not list(CONFIGS.rglob("*.py"))
