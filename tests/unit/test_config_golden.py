"""Golden dump configs per (MindSpore version, device, jit level): what msoverflow writes for the Ascend rules, which
this machine cannot run. The files were generated once by tests/unit/golden/config/regenerate.py and reviewed; a rule
change that alters them must regenerate and re-review them."""
import json
from pathlib import Path

import pytest

from msoverflow.config.rules import load_rules

GOLDEN = Path(__file__).parent / "golden" / "config"


def _regenerate_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("regenerate_golden", GOLDEN / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGEN = _regenerate_module()
CASES = dict(REGEN.cases())


def test_every_version_device_and_jit_level_has_a_golden_file():
    names = {p.stem for p in GOLDEN.glob("*.json")}
    assert names == set(CASES)
    assert len(load_rules()["versions"]) * 5 == len(names)  # 3 Ascend jit levels + GPU + CPU per version


@pytest.mark.parametrize("name", sorted(CASES))
def test_generator_matches_golden(name):
    expected = json.loads((GOLDEN / f"{name}.json").read_text())
    actual = json.loads(json.dumps(REGEN.golden_for(CASES[name]), sort_keys=True))
    assert actual == expected


def _purpose(name, purpose):
    return json.loads((GOLDEN / f"{name}.json").read_text())["purposes"][purpose]


def test_golden_overflow_o0_uses_mode_3_with_e2e_block_and_unsets_acl_config():
    # 2.4 O0/O1: overflow-only dump needs op_debug_mode 3 and the e2e block (ms_backend dumps nothing without it).
    golden = _purpose("ascend-2.4-O0", "overflow")
    assert golden["config"]["common_dump_settings"]["op_debug_mode"] == 3
    assert golden["config"]["common_dump_settings"]["overflow_number"] == 0
    assert golden["config"]["e2e_dump_settings"]["enable"] is True
    assert "MS_ACL_DUMP_CFG_PATH" in golden["unset"]
    assert golden["env"]["HCCL_EXEC_TIMEOUT"] == "1800"


def test_golden_overflow_number_only_from_2_4():
    assert "overflow_number" not in _purpose("ascend-2.3-O0", "overflow")["config"]["common_dump_settings"]


def test_golden_2_2_ascend_is_async_without_e2e_block():
    golden = _purpose("ascend-2.2-O0", "overflow")
    assert golden["mechanism"] == "async"
    assert "e2e_dump_settings" not in golden["config"]
    assert golden["config"]["common_dump_settings"]["op_debug_mode"] == 3


def test_golden_o2_2_3_to_2_5_is_acl_dump_with_npy_and_graph_saving():
    for version in ("2.3", "2.4", "2.5"):
        golden = _purpose(f"ascend-{version}-O2", "overflow")
        assert golden["mechanism"] == "acl"
        assert golden["config"]["common_dump_settings"]["file_format"] == "npy"
        assert golden["env"]["MS_DEV_SAVE_GRAPHS"] == "1"
        assert "e2e_dump_settings" not in golden["config"]


def test_golden_o2_from_2_6_writes_msprobe_config():
    # MindSpore 2.6+ ignores MINDSPORE_DUMP_CONFIG at O2: msprobe's config.json, level L2, INF/NAN mode.
    tasks = {"overflow": "statistics", "statistics": "statistics", "tensors": "tensor", "exception": "exception_dump"}
    for version in ("2.6", "2.7", "2.10"):
        for purpose, task in tasks.items():
            golden = _purpose(f"ascend-{version}-O2", purpose)
            assert golden["mechanism"] == "msprobe"
            assert golden["config"]["task"] == task and golden["config"]["level"] == "L2"
            assert golden["config"]["dump_path"] == "/data/dump" and golden["config"]["rank"] == ["0-7"]
            assert golden["env"]["INF_NAN_MODE_ENABLE"] == "1"
            assert golden["env"]["MS_ASCEND_CHECK_OVERFLOW_MODE"] == "INFNAN_MODE"
            assert "MINDSPORE_DUMP_CONFIG" in golden["unset"]


def test_golden_cpu_never_statistics_nor_overflow_filter():
    for version in load_rules()["versions"]:
        assert "GPU and Ascend" in _purpose(f"cpu-{version}", "statistics")["refused"]
        assert _purpose(f"cpu-{version}", "overflow")["config"]["common_dump_settings"]["op_debug_mode"] == 0
