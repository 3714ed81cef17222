"""The reach table (msoverflow/data/mindformers_reach.yaml) against the real MindFormers source: every cited line
is opened in the downloaded release wheel (or, for research/ code that no wheel ships, a MindFormers git copy at
the pinned commit) and must hold the cited code. Then the YAML patch's decisions that rest on it."""
import subprocess
import sys
import zipfile

import pytest
from ruamel.yaml import YAML

from msoverflow import cli
from msoverflow.patch import yaml_patch
from msoverflow.patch.targets import Target
from msoverflow.resources import config_path
from tests.support import mindformers_source

TABLE = YAML(typ="safe").load(open(config_path("mindformers_reach.yaml"), encoding="utf-8"))


def _entries():
    for family, versions in TABLE["families"].items():
        for version, body in versions.items():
            for field, entry in (body.get("fields") or {}).items():
                yield family, version, body["origin"], field, entry
            for entry in body.get("unreached") or []:
                yield family, version, body["origin"], entry["name"], entry


@pytest.fixture(scope="session")
def wheels(tmp_path_factory):
    cache = {}

    def open_wheel(spec):
        if spec not in cache:
            where = tmp_path_factory.mktemp("reach-wheel")
            proc = subprocess.run([sys.executable, "-m", "pip", "download", spec, "--no-deps", "-q",
                                   "--disable-pip-version-check", "-d", str(where)],
                                  capture_output=True, text=True, timeout=300)
            found = list(where.glob("*.whl"))
            if proc.returncode != 0 or not found:
                pytest.skip(f"cannot download {spec} from PyPI: {proc.stderr.strip()[-200:]}")
            cache[spec] = zipfile.ZipFile(found[0])
        return cache[spec]
    return open_wheel


@pytest.mark.parametrize("family,version,origin,name,entry", list(_entries()),
                         ids=[f"{f}-{v}-{n}" for f, v, _, n, _ in _entries()])
def test_every_cited_line_holds_the_cited_code(family, version, origin, name, entry, wheels):
    assert entry["cites"], f"{family} {version} {name}: an entry without a citation"
    for cite in entry["cites"]:
        if "wheel" in origin:
            text = wheels(origin["wheel"]).read(cite["file"]).decode("utf-8")
        else:
            version_key = next(k for k, c in mindformers_source.VERSIONS.items() if c == origin["git"])
            text = mindformers_source.read(version_key, cite["file"])
        lines = text.splitlines()
        assert 0 < cite["line"] <= len(lines), cite
        assert lines[cite["line"] - 1].strip() == cite["code"].strip(), (cite, lines[cite["line"] - 1])
    if "reaches" in entry:
        # a field entry cites a line that reads that very field
        assert any(name in c["code"] or name.replace("_type", "_dtype") in c["code"] for c in entry["cites"]), name


def _llama_yaml(tmp_path, flash: bool):
    path = tmp_path / "llama.yaml"
    path.write_text("model:\n  model_config:\n    type: LlamaConfig\n    compute_dtype: \"float16\"\n"
                    "    layernorm_compute_type: \"float32\"\n    softmax_compute_type: \"float16\"\n"
                    f"    use_flash_attention: {'True' if flash else 'False'}\n")
    return path


def test_flash_attention_grad_is_not_fixed_by_softmax_compute_type(tmp_path):
    target = Target(cell="network.model.layers.3.attention", cell_type="LLamaAttention",
                    origin={"op_type": "FlashAttentionScoreGrad", "forward_op": "FlashAttentionScore"})
    patch = yaml_patch.plan(str(_llama_yaml(tmp_path, True)), target, "float32")
    assert not patch.changed and patch.uncovered
    assert "llama_transformer.py:506" in patch.uncovered and "FlashAttentionScore" in patch.uncovered
    softmax = Target(cell="network.model.layers.3.attention", cell_type="LLamaAttention",
                     origin={"op_type": "SoftmaxBackward", "forward_op": "Softmax"})
    patch = yaml_patch.plan(str(_llama_yaml(tmp_path, False)), softmax, "float32")
    assert patch.changes == [("softmax_compute_type", "float16", "float32")]
    patch = yaml_patch.plan(str(_llama_yaml(tmp_path, True)), softmax, "float32")
    assert patch.uncovered and "use_flash_attention" in patch.uncovered


def test_norm_head_global_fields_are_refused_and_patch_exits_3(tmp_path, capsys):
    from tests.support.patch_reports import hand_report, write_report
    config = tmp_path / "baichuan2.yaml"
    config.write_text("model:\n  model_config:\n    type: LlamaConfig\n    compute_dtype: \"float16\"\n"
                      "    param_init_type: \"float16\"\n    layernorm_compute_type: \"float32\"\n")
    report_data = hand_report()
    report_data["first"]["source"] = None          # no source line known: nothing to fall back to
    report = write_report(tmp_path, report_data)
    target = Target(cell="network._backbone.lm_head", cell_type="NormHead",
                    origin={"op_type": "SqrtGrad", "forward_op": "Sqrt"})
    patch = yaml_patch.plan(str(config), target, "float32", allow_global=True)
    assert not patch.changed and patch.uncovered and "baichuan2_13b.py:874" in patch.uncovered
    # no field reaches it and there is no source file to fall back to: exit 3, the YAML untouched
    before = config.read_text()
    code = cli.main(["patch", "--from", str(report), "--yaml", str(config), "--allow-global", "--how", "yaml",
                     "--write"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert config.read_text() == before and "no model_config field" in out
