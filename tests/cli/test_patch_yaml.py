"""MindFormers YAML patch on real configuration files from MindFormers release wheels, fetched at test time.

The wheels are downloaded with `pip download --no-deps` into a temp dir (never committed); the tests skip with the
reason when PyPI is unreachable or a wheel ships no configs/.
"""
import difflib
import subprocess
import sys
import zipfile

import pytest
from ruamel.yaml import YAML

from msoverflow import cli
from msoverflow.patch import yaml_patch
from msoverflow.patch.targets import Target, target_from_report
from tests.support.patch_reports import DEMO_MODEL, hand_report, write_report


def _wheel_configs(tmp_path_factory, version: str, prefix: str):
    where = tmp_path_factory.mktemp(f"mindformers-{version}")
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", f"mindformers=={version}", "--no-deps",
                               "--disable-pip-version-check", "-q", "-d", str(where)],
                              capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip download mindformers=={version} timed out (PyPI unreachable?)")
    wheels = list(where.glob("mindformers-*.whl"))
    if proc.returncode != 0 or not wheels:
        pytest.skip(f"cannot download mindformers=={version} from PyPI: {(proc.stderr or '').strip()[-200:]}")
    with zipfile.ZipFile(wheels[0]) as zf:
        names = [n for n in zf.namelist() if n.startswith(prefix) and n.endswith(".yaml")]
        if not names:
            pytest.skip(f"mindformers {version} wheel has no {prefix}*.yaml")
        out = where / "configs"
        for name in names:
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
    return sorted(out / n for n in names)


@pytest.fixture(scope="session")
def llama2_configs(tmp_path_factory):
    return _wheel_configs(tmp_path_factory, "1.3.2", "configs/llama2/")


@pytest.fixture(scope="session")
def mf2_configs(tmp_path_factory):
    return _wheel_configs(tmp_path_factory, "2.1.0", "configs/")


def _safe(text):
    return YAML(typ="safe").load(text)


def _model_config(data):
    return (data.get("model") or {}).get("model_config") or {}


def _assert_only_fields_changed(original: str, patched: str, fields):
    """Byte-for-byte equal except lines that set one of `fields` (changed in place or inserted)."""
    a, b = original.splitlines(True), patched.splitlines(True)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        assert tag in ("replace", "insert"), (tag, a[i1:i2], b[j1:j2])
        for line in b[j1:j2]:
            assert line.strip().split(":")[0] in fields, line
        for old, new in zip(a[i1:i2], b[j1:j2], strict=False):
            # the key, its indentation, quoting and trailing comment survive: only the value differs
            assert old.split(":")[0] == new.split(":")[0]
            assert old.count('"') == new.count('"') and old.count("#") == new.count("#")


def _softmax_target():
    return Target(cell="network.model.layers.3.attention",
                  origin={"op_type": "SoftmaxBackward", "forward_op": "Softmax"})


def _without_flash_attention(path, tmp_path):
    """The real config as a user with flash attention off has it (every 1.3.2 llama2 config turns it on)."""
    text = path.read_bytes().decode("utf-8")
    copy = tmp_path / path.name
    copy.write_bytes(text.replace("use_flash_attention: True", "use_flash_attention: False").encode("utf-8"))
    return copy


def test_softmax_origin_edits_only_softmax_compute_type_in_every_llama2_config(llama2_configs, tmp_path):
    patched_any = 0
    for real in llama2_configs:
        # as shipped (flash attention on), softmax_compute_type does not reach a Softmax: nothing is edited
        shipped = yaml_patch.plan(str(real), _softmax_target(), "float32")
        if "use_flash_attention: True" in real.read_text():
            assert not shipped.changed and "use_flash_attention" in (shipped.uncovered or ""), real.name
        path = _without_flash_attention(real, tmp_path)
        original = path.read_bytes().decode("utf-8")
        config = _model_config(_safe(original))
        patch = yaml_patch.plan(str(path), _softmax_target(), "float32")
        assert patch.generation == "1.x"
        assert patch.rule == "softmax"
        if config.get("softmax_compute_type") == "float32":
            assert not patch.changed, path.name
            continue
        _assert_only_fields_changed(original, patch.patched, {"softmax_compute_type"})
        new = _safe(patch.patched)
        assert _model_config(new)["softmax_compute_type"] == "float32"
        _model_config(new)["softmax_compute_type"] = config.get("softmax_compute_type")
        if "softmax_compute_type" not in config:
            del _model_config(new)["softmax_compute_type"]
        assert new == _safe(original), path.name
        patched_any += 1
    assert patched_any >= 5, "llama2 configs with an fp16 softmax are what this test is about"


def test_written_yaml_is_idempotent_and_keeps_a_backup(llama2_configs, tmp_path, capsys):
    real = next(p for p in llama2_configs if p.name == "finetune_llama2_7b.yaml")
    (tmp_path / "src").mkdir()
    source = _without_flash_attention(real, tmp_path / "src")
    config = tmp_path / source.name
    config.write_bytes(source.read_bytes())
    model_copy = tmp_path / "model.py"
    model_copy.write_bytes(DEMO_MODEL.read_bytes())
    report = write_report(tmp_path, hand_report(cell="network.model.layers.0.attention", cell_type="LLamaAttention",
                                                op_type="SoftmaxBackward", forward_op="Softmax",
                                                source_file=str(model_copy)))
    assert cli.main(["patch", "--from", str(report), "--yaml", str(config), "--write"]) == 0
    assert (tmp_path / (source.name + ".orig")).read_bytes() == source.read_bytes()
    _assert_only_fields_changed(source.read_text(), config.read_text(), {"softmax_compute_type"})
    once = config.read_bytes()
    capsys.readouterr()
    assert cli.main(["patch", "--from", str(report), "--yaml", str(config), "--write"]) == 3
    assert "no change made (exit 3)" in capsys.readouterr().out
    assert config.read_bytes() == once
    assert not (tmp_path / (source.name + ".orig.1")).exists()
    assert model_copy.read_bytes() == DEMO_MODEL.read_bytes()


def test_missing_field_is_inserted_next_to_its_siblings(llama2_configs, tmp_path):
    source = next(p for p in llama2_configs if "residual_dtype" not in _model_config(_safe(p.read_text())))
    residual = Target(cell="network.model.layers.1", cell_type="LLamaDecodeLayer",
                      origin={"op_type": "Add", "cell_type": "LLamaDecodeLayer"})
    patch = yaml_patch.plan(str(source), residual, "float32")
    assert patch.changes == [("residual_dtype", None, "float32")]
    original = source.read_text()
    assert len(patch.patched.splitlines()) == len(original.splitlines()) + 1
    _assert_only_fields_changed(original, patch.patched, {"residual_dtype"})
    inserted = [l for l in patch.patched.splitlines() if l.strip().startswith("residual_dtype")][0]
    sibling = [l for l in original.splitlines() if l.strip().startswith("compute_dtype")][0]
    assert len(inserted) - len(inserted.lstrip()) == len(sibling) - len(sibling.lstrip())


def test_norm_head_has_no_field_and_falls_back_to_a_source_patch(llama2_configs, tmp_path, capsys):
    source = next(p for p in llama2_configs if p.name == "finetune_llama2_7b.yaml")
    model_copy = tmp_path / "model.py"
    model_copy.write_bytes(DEMO_MODEL.read_bytes())
    report = write_report(tmp_path, hand_report(source_file=str(model_copy)))
    before = source.read_bytes()
    patch = yaml_patch.plan(str(source), target_from_report(_load(report)), "float32")
    assert patch.uncovered and "NormHead" in patch.uncovered
    assert not patch.changed
    # the reach table (MindFormers' own source) says neither compute_dtype nor param_init_type reaches it
    assert patch.global_option == {} and "baichuan2_13b.py:874" in patch.uncovered
    assert cli.main(["patch", "--from", str(report), "--yaml", str(source)]) == 0
    out = capsys.readouterr().out
    assert "no model_config field covers it" in out
    assert "+        # msoverflow: precision island" in out       # the source diff that replaces it
    assert source.read_bytes() == before and model_copy.read_bytes() == DEMO_MODEL.read_bytes()  # diff only


def test_allow_global_switches_whole_model_fields_only_when_asked(llama2_configs):
    source = next(p for p in llama2_configs if _model_config(_safe(p.read_text())).get("compute_dtype")
                  in ("float16", "bfloat16"))
    linear = Target(cell="network.model.layers.0.feed_forward.w1", cell_type="Linear",
                    origin={"op_type": "MatMul", "cell_type": "Linear"})
    assert yaml_patch.plan(str(source), linear, "float32").uncovered       # no per-layer field
    patch = yaml_patch.plan(str(source), linear, "float32", allow_global=True)
    assert patch.uncovered is None
    assert ("compute_dtype", _model_config(_safe(source.read_text()))["compute_dtype"], "float32") in patch.changes
    _assert_only_fields_changed(source.read_text(), patch.patched, {"compute_dtype"})


def test_bfloat16_patch_never_narrows_a_float32_field(llama2_configs, tmp_path):
    source = _without_flash_attention(next(p for p in llama2_configs if p.name == "finetune_llama2_7b.yaml"),
                                      tmp_path)
    config = _model_config(_safe(source.read_text()))
    assert config["layernorm_compute_type"] == "float32" and config["softmax_compute_type"] == "float16"
    layernorm = yaml_patch.plan(str(source), Target(cell="network.model.norm_out", cell_type="LlamaRMSNorm"),
                                "bfloat16")
    assert layernorm.rule == "layernorm" and not layernorm.changed
    softmax = yaml_patch.plan(str(source), _softmax_target(), "bfloat16")
    assert softmax.changes == [("softmax_compute_type", "float16", "bfloat16")]
    assert _model_config(_safe(softmax.patched))["softmax_compute_type"] == "bfloat16"


def test_mindformers_2x_configs_get_2x_field_names(mf2_configs):
    with_narrow_layernorm = [p for p in mf2_configs if _model_config(_safe(p.read_text())).get(
        "layernorm_compute_dtype") in ("bfloat16", "float16")]
    assert with_narrow_layernorm, "2.1.0 ships predict configs with a bf16 layernorm"
    for path in with_narrow_layernorm:
        patch = yaml_patch.plan(str(path), Target(cell="RMSNorm"), "float32")
        assert patch.generation == "2.x", path.name
        assert [c[0] for c in patch.changes] == ["layernorm_compute_dtype"]
        _assert_only_fields_changed(path.read_text(), patch.patched, {"layernorm_compute_dtype"})


def test_unparsable_yaml_is_refused_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  model_config: {compute_dtype: float16\n")
    assert cli.main(["patch", "--cell", "RMSNorm", "--yaml", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not valid YAML" in err and "Traceback" not in err


def _load(path):
    import json
    with open(path) as fh:
        return json.load(fh)
