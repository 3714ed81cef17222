"""msoverflow.config without MindSpore: the version rules, the checker's explanations and the generator's refusals."""
import copy
import os
import subprocess
import sys

import pytest

from msoverflow.config import ConfigRefused, build, check, has_errors
from msoverflow.config.generator import parse_ranks, parse_steps
from msoverflow.config.rules import load_rules, parse_version, version_matches
from msoverflow.errors import UserError

CPU_OK = {
    "common_dump_settings": {"op_debug_mode": 0, "dump_mode": 0, "path": "/tmp/dump", "net_name": "Net",
                             "iteration": "0", "saved_data": "tensor", "input_output": 0, "kernels": [],
                             "support_device": [0, 1, 2, 3, 4, 5, 6, 7]},
    "e2e_dump_settings": {"enable": True, "trans_flag": True},
}


def with_common(**changes):
    config = copy.deepcopy(CPU_OK)
    config["common_dump_settings"].update(changes)
    return config


def ids(problems, severity=None):
    return {p.id for p in problems if severity is None or p.severity == severity}


def test_versions_compare_as_numbers_not_strings():
    assert parse_version("2.10.0") == (2, 10) and parse_version("2.3.0rc1") == (2, 3)
    assert version_matches(">=2.6", (2, 10)) and not version_matches("2.3-2.5", (2, 10))
    assert version_matches("2.3-2.5", (2, 4)) and version_matches("2.2", (2, 2))


def test_unknown_and_too_old_versions():
    with pytest.raises(UserError, match="2.2 to 2.10"):
        build("overflow", ms_version="1.10", device="cpu", path="/tmp/d")
    result = build("overflow", ms_version="2.11.0", device="cpu", path="/tmp/d")
    assert any("newer than the rules" in w for w in result.warnings)


def test_clean_cpu_config_has_no_problems():
    assert ids(check(CPU_OK, "2.10", "cpu"), "error") == set()
    assert ids(check(CPU_OK, "2.10", "cpu"), "warning") == set()


@pytest.mark.parametrize("config, version, device, jit, expected", [
    # the four CPU refusals MindSpore itself raises (observed texts in the reference doc)
    (with_common(saved_data="statistic"), "2.10", "cpu", None, "statistic-on-cpu"),
    (with_common(op_debug_mode=5), "2.10", "cpu", None, "op-debug-mode-range"),
    (with_common(dump_mode=2), "2.10", "cpu", None, "set-dump-outside-ascend"),
    (with_common(path="dump/here"), "2.10", "cpu", None, "relative-path"),
    (with_common(path="/tmp/my dump.v2"), "2.10", "cpu", None, "path-characters"),
    (with_common(net_name="my.net"), "2.10", "cpu", None, "net-name-characters"),
    (with_common(iteration="0 | 5-8"), "2.10", "cpu", None, "iteration-format"),
    (with_common(op_debug_mode=0, overflow_number=3), "2.4", "ascend", "O0", "overflow-number-without-mode-3"),
    (with_common(op_debug_mode=4), "2.2", "ascend", None, "op-debug-mode-range-2-2"),
    (with_common(saved_data="statistic", statistic_category=["max", "nan_count"]), "2.4", "gpu", None,
     "statistic-category-values"),
    ({"common_dump_settings": CPU_OK["common_dump_settings"]}, "2.7", "ascend", "O0", "e2e-block-missing"),
    ({"common_dump_settings": dict(CPU_OK["common_dump_settings"], saved_data="statistic")}, "2.4", "ascend", "O2",
     "statistic-async-needs-npy"),
    (with_common(dump_mode=2), "2.2", "ascend", None, "set-dump-2-2-e2e"),
    # absent op_debug_mode means 0 to MindSpore, so overflow_number is refused there too
    ({"common_dump_settings": dict({k: v for k, v in CPU_OK["common_dump_settings"].items() if k != "op_debug_mode"},
                                   overflow_number=1), "e2e_dump_settings": CPU_OK["e2e_dump_settings"]},
     "2.4", "ascend", "O0", "overflow-number-without-mode-3"),
])
def test_forbidden_combinations_are_errors(config, version, device, jit, expected):
    problems = check(config, version, device, jit)
    assert expected in ids(problems, "error"), [str(p) for p in problems]


@pytest.mark.parametrize("config, version, device, jit, expected", [
    (with_common(op_debug_mode=1), "2.4", "ascend", "O0", "op-debug-mode-1-2-becomes-3"),
    (with_common(op_debug_mode=3), "2.10", "cpu", None, "overflow-mode-on-cpu"),
    (with_common(op_debug_mode=4), "2.10", "cpu", None, "exception-mode-cpu-gpu"),
    (with_common(op_debug_mode=3, input_output=2), "2.4", "ascend", "O0", "overflow-input-output"),
    (with_common(overflow_number=1, op_debug_mode=3), "2.3", "ascend", "O0", "key-too-new"),
    (with_common(op_debug_mode=3), "2.2", "ascend", None, "op-debug-mode-ignored-2-2-e2e"),
    (with_common(kernel=["x"]), "2.10", "cpu", None, "unknown-key"),
    ({"common_dump_settings": CPU_OK["common_dump_settings"]}, "2.10", "cpu", None, "e2e-block-missing-cpu"),
])
def test_silent_changes_are_warnings(config, version, device, jit, expected):
    problems = check(config, version, device, jit)
    assert expected in ids(problems, "warning"), [str(p) for p in problems]
    assert not has_errors(problems)


def test_type_and_required_key_errors_quote_mindspore():
    problems = check(with_common(dump_mode=True), "2.10", "cpu")
    typed = [p for p in problems if p.id == "key-type"]
    assert typed and "unsigned int" in typed[0].mindspore_says
    config = copy.deepcopy(CPU_OK)
    del config["common_dump_settings"]["support_device"]
    missing = [p for p in check(config, "2.10", "cpu") if p.id == "missing-key"]
    assert missing and missing[0].key == "common_dump_settings.support_device"


def test_problem_explains_with_mindspore_text_and_fix():
    problem = next(p for p in check(with_common(saved_data="full"), "2.10", "cpu") if p.id == "statistic-on-cpu")
    text = str(problem)
    assert "'full'" in text and "storing statistic dump is only supported on GPU and Ascend" in text
    assert "tensor" in problem.fix


def test_every_check_rule_fires_somewhere():
    """Dead rules are wrong rules: each check in dump_rules.yaml must be triggered by at least one config."""
    triggers = {
        "relative-path": (with_common(path="rel"), "2.10", "cpu", None),
        "path-characters": (with_common(path="/a b"), "2.10", "cpu", None),
        "empty-path": (with_common(path=""), "2.10", "cpu", None),
        "missing-path": ({"common_dump_settings": {k: v for k, v in CPU_OK["common_dump_settings"].items() if k != "path"},
                          "e2e_dump_settings": CPU_OK["e2e_dump_settings"]}, "2.10", "cpu", None),
        "net-name-characters": (with_common(net_name=""), "2.10", "cpu", None),
        "iteration-format": (with_common(iteration="last"), "2.10", "cpu", None),
        "statistic-on-cpu": (with_common(saved_data="statistic"), "2.10", "cpu", None),
        "set-dump-outside-ascend": (with_common(dump_mode=2), "2.10", "gpu", None),
        "set-dump-2-2-e2e": (with_common(dump_mode=2), "2.2", "ascend", None),
        "set-dump-o2-2-4": (with_common(dump_mode=2), "2.4", "ascend", "O2"),
        "op-debug-mode-range-2-2": (with_common(op_debug_mode=4), "2.2", "gpu", None),
        "op-debug-mode-range": (with_common(op_debug_mode=5), "2.10", "cpu", None),
        "op-debug-mode-1-2-becomes-3": (with_common(op_debug_mode=2), "2.5", "ascend", "O1"),
        "op-debug-mode-ignored-2-2-e2e": (with_common(op_debug_mode=3), "2.2", "gpu", None),
        "overflow-mode-on-cpu": (with_common(op_debug_mode=3), "2.10", "cpu", None),
        "overflow-mode-on-gpu": (with_common(op_debug_mode=3), "2.10", "gpu", None),
        "exception-mode-cpu-gpu": (with_common(op_debug_mode=4), "2.10", "gpu", None),
        "exception-mode-o2-ge": (with_common(op_debug_mode=4), "2.4", "ascend", "O2"),
        "exception-iteration": (with_common(op_debug_mode=4, iteration="3"), "2.4", "ascend", "O0"),
        "overflow-number-without-mode-3": (with_common(overflow_number=1), "2.4", "ascend", "O0"),
        "overflow-number-o2-npy": ({"common_dump_settings": with_common(op_debug_mode=3, overflow_number=1)[
            "common_dump_settings"]}, "2.4", "ascend", "O2"),
        "overflow-input-output": (with_common(op_debug_mode=3, input_output=1), "2.4", "ascend", "O0"),
        "overflow-kernels-ignored": (with_common(op_debug_mode=3, dump_mode=1, kernels=["Add"]), "2.4", "ascend", "O0"),
        "statistic-only-with-mode-0": (with_common(op_debug_mode=3, saved_data="full"), "2.4", "ascend", "O0"),
        "statistic-async-needs-npy": (with_common(saved_data="statistic", file_format="bin"), "2.4", "ascend", "O2"),
        "statistic-ascend-sync-2-2": (with_common(saved_data="statistic"), "2.2", "ascend", None),
        "statistic-category-values": (with_common(saved_data="statistic", statistic_category=["hash"]), "2.4", "gpu", None),
        "statistic-category-values-2-6": (with_common(saved_data="statistic", statistic_category=["mean"]), "2.6", "gpu", None),
        "statistic-category-device": (
            dict(with_common(saved_data="statistic", statistic_category=["nan count"]),
                 e2e_dump_settings={"enable": True, "trans_flag": True, "stat_calc_mode": "device"}),
            "2.4", "ascend", "O0"),
        "stat-calc-device-not-ascend": (dict(CPU_OK, e2e_dump_settings={"enable": True, "stat_calc_mode": "device"}),
                                        "2.4", "gpu", None),
        "stat-calc-device-with-tensor": (dict(CPU_OK, e2e_dump_settings={"enable": True, "stat_calc_mode": "device"}),
                                         "2.4", "ascend", "O0"),
        "file-format-ignored": (with_common(file_format="npy"), "2.10", "cpu", None),
        "e2e-block-missing": ({"common_dump_settings": CPU_OK["common_dump_settings"]}, "2.6", "ascend", "O1"),
        "e2e-block-missing-async": ({"common_dump_settings": CPU_OK["common_dump_settings"]}, "2.4", "ascend", "O0"),
        "e2e-block-missing-cpu": ({"common_dump_settings": CPU_OK["common_dump_settings"]}, "2.10", "cpu", None),
        "e2e-disabled-cpu-gpu": (dict(CPU_OK, e2e_dump_settings={"enable": False, "trans_flag": True}), "2.10", "cpu", None),
        "e2e-disabled-ascend-kbk": (dict(CPU_OK, e2e_dump_settings={"enable": False, "trans_flag": True}),
                                    "2.4", "ascend", "O0"),
        "e2e-block-under-o2": (CPU_OK, "2.4", "ascend", "O2"),
        "acl-iteration-only-mode-0": (with_common(op_debug_mode=3, iteration="0"), "2.4", "ascend", "O2"),
        "op-debug-mode-required": ({"common_dump_settings": {k: v for k, v in CPU_OK["common_dump_settings"].items()
                                                             if k != "op_debug_mode"}}, "2.4", "ascend", "O2"),
        "sample-mode-with-debug": (dict(with_common(op_debug_mode=3),
                                        e2e_dump_settings={"enable": True, "sample_mode": 1}), "2.4", "ascend", "O0"),
        "kernels-unused": (with_common(kernels=["Add"]), "2.10", "cpu", None),
        "kernels-empty-mode-1": (with_common(dump_mode=1), "2.10", "cpu", None),
        "kernels-overlapping-types": (with_common(dump_mode=1, kernels=["Sqrt", "SqrtGrad"]), "2.10", "cpu", None),
        "kernels-regex-before-2-3": (with_common(dump_mode=1, kernels=["name-regex(.*)"]), "2.2", "gpu", None),
        "kernels-o2-types": (with_common(dump_mode=1, kernels=["Add"]), "2.4", "ascend", "O2"),
        "sync-deprecated-2-2": (CPU_OK, "2.2", "ascend", None),
        "support-device-empty": (with_common(support_device=[]), "2.10", "gpu", None),
    }
    rule_ids = [rule["id"] for rule in load_rules()["checks"]]
    assert sorted(triggers) == sorted(rule_ids), "add a trigger for every new rule"
    for rule_id, (config, version, device, jit) in triggers.items():
        assert rule_id in ids(check(config, version, device, jit)), rule_id


def test_generated_configs_are_clean_for_every_platform():
    for version in load_rules()["versions"]:
        for device, jit in (("cpu", None), ("gpu", None), ("ascend", "O0"), ("ascend", "O1"), ("ascend", "O2")):
            for purpose in ("overflow", "statistics", "tensors", "exception"):
                try:
                    result = build(purpose, ms_version=version, device=device, jit_level=jit, path="/data/dump",
                                   kernels=["SqrtGrad"] if purpose == "tensors" else None)
                except ConfigRefused:
                    continue
                assert not has_errors(check(result.config, version, device, jit)), (version, device, jit, purpose)


@pytest.mark.parametrize("options, message", [
    (dict(purpose="statistics", device="cpu"), "only supported on GPU and Ascend"),
    (dict(purpose="exception", device="cpu"), "Ascend-only"),
    (dict(purpose="exception", device="ascend", ms_version="2.2"), "arrived in MindSpore 2.3"),
    (dict(purpose="overflow", device="ascend", ms_version="2.7", jit_level="O2", msprobe_level="L1"), "PyNative"),
    (dict(purpose="overflow", device="ascend", ms_version="2.4"), "--jit-level"),
    (dict(purpose="overflow", device="cpu", path="relative/dump"), "absolute"),
    (dict(purpose="overflow", device="cpu", path="/tmp/has space"), "letters, digits"),
    (dict(purpose="tensors", device="cpu", net_name="a.b"), "net_name"),
    (dict(purpose="overflow", device="ascend", ms_version="2.4", jit_level="O0", overflow_number=-1), "unsigned"),
])
def test_generator_refuses_what_cannot_work(options, message):
    options.setdefault("ms_version", "2.10")
    options.setdefault("path", "/tmp/dump")
    purpose = options.pop("purpose")
    with pytest.raises(UserError, match=message):
        build(purpose, **options)


def test_cpu_overflow_config_and_promise():
    result = build("overflow", ms_version="2.10", device="cpu", path="/tmp/dump", steps="0|5-8", config_path="/tmp/c.json")
    common = result.config["common_dump_settings"]
    assert common["op_debug_mode"] == 0 and common["saved_data"] == "tensor" and common["iteration"] == "0|5-8"
    assert result.config["e2e_dump_settings"] == {"enable": True, "trans_flag": True}
    summary = result.summary_text()
    assert "overflow-only filtering is not available, every op is dumped" in summary and "files per op per dumped step" in summary
    snippet = result.shell_snippet()
    assert "export MINDSPORE_DUMP_CONFIG=/tmp/c.json" in snippet and "unset MS_ACL_DUMP_CFG_PATH" in snippet


def test_options_map_onto_keys():
    result = build("tensors", ms_version="2.4", device="ascend", jit_level="O1", path="/d", ranks="0,2-3",
                   inputs=True, kernels=["Conv2D", "name-regex(Default/.+)"], net_name="ResNet50")
    common = result.config["common_dump_settings"]
    assert common["support_device"] == [0, 2, 3] and common["input_output"] == 1
    assert common["dump_mode"] == 1 and common["kernels"] == ["Conv2D", "name-regex(Default/.+)"]
    assert common["net_name"] == "ResNet50" and result.env["HCCL_EXEC_TIMEOUT"] == "1800"
    single = build("overflow", ms_version="2.4", device="ascend", jit_level="O1", path="/d", ranks="3")
    assert "HCCL_EXEC_TIMEOUT" not in single.env and any("HCCL_EXEC_TIMEOUT" in h for h in single.hints)


def test_steps_and_ranks_parsing():
    assert parse_steps("0, 5-8") == "0|5-8" and parse_steps(None) == "0" and parse_steps([1, 3]) == "1|3"
    assert parse_steps("all") == "all"
    with pytest.raises(UserError):
        parse_steps("5-")
    assert parse_ranks("0-3,6") == [0, 1, 2, 3, 6] and parse_ranks(None) is None
    with pytest.raises(UserError):
        parse_ranks("a")


def test_check_reads_files_and_rejects_unreadable(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="bad.json"):
        check(bad, "2.10", "cpu")
    with pytest.raises(UserError, match="missing.json"):
        check(tmp_path / "missing.json", "2.10", "cpu")


def test_version_detection_never_imports_mindspore():
    code = ("import sys; from msoverflow.config import build; from msoverflow.config.detect import detect_ms_version;"
            "detect_ms_version(); build('overflow', device='cpu', path='/tmp/x', ms_version=detect_ms_version() or '2.10');"
            "print('mindspore' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.stdout.strip() == "False"


def test_detected_version_comes_from_package_metadata():
    from importlib import metadata

    from msoverflow.config.detect import detect_ms_version

    try:
        installed = metadata.version("mindspore")
    except metadata.PackageNotFoundError:
        pytest.skip("mindspore not installed")
    assert detect_ms_version() == installed
    assert build("overflow", device="cpu", path="/tmp/x").ms_version == ".".join(installed.split(".")[:2])


def test_check_infers_the_dump_machinery_when_jit_level_is_unknown():
    ascend = dict(CPU_OK, common_dump_settings=dict(CPU_OK["common_dump_settings"], op_debug_mode=3))
    assert "jit-level-assumed" in ids(check(ascend, "2.4", "ascend"), "info")
    assert not has_errors(check(ascend, "2.4", "ascend"))
    no_e2e = {"common_dump_settings": ascend["common_dump_settings"]}
    assert "no-e2e-block" in ids(check(no_e2e, "2.6", "ascend"), "error")
    # 2.4 without e2e block: read as an O2 (ACL) dump, where overflow needs no e2e block
    assert not has_errors(check(no_e2e, "2.4", "ascend"))


def test_check_o2_from_2_6_says_the_file_is_ignored():
    problems = check({"common_dump_settings": CPU_OK["common_dump_settings"]}, "2.7", "ascend", "O2")
    unsupported = [p for p in problems if p.id == "msprobe-needed"]
    assert unsupported and unsupported[0].severity == "error" and "msprobe" in unsupported[0].message


def test_shell_snippet_says_how_graphs_are_saved():
    e2e = build("overflow", ms_version="2.10", device="cpu", path="/d").shell_snippet()
    assert "rank_N/graphs/ms_output_trace_code_graph_*.ir itself" in e2e
    acl = build("overflow", ms_version="2.5", device="ascend", jit_level="O2", path="/d").shell_snippet()
    assert "export MS_DEV_SAVE_GRAPHS=1" in acl and "export MS_DEV_SAVE_GRAPHS_PATH=/d/graphs" in acl
