"""Every report says what produced it: msoverflow's version, the command line, when, on which host, and the
MindSpore version that wrote the dump (from its .dump_metadata; null when the dump does not record it)."""
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import msoverflow
from msoverflow.api import analyze

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "msoverflow" / "schema" / "report.schema.json"


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(REPO), MSOVERFLOW_REPORT_JSON="")
    return subprocess.run([sys.executable, "-m", "msoverflow", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def _validate(data):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))


def _small_dump(root: Path) -> Path:
    step = root / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    np.save(step / "Square.Default_network-Net_Square-op1.1.0.100.input.0.DefaultFormat.Float16.npy",
            np.array([1.0, 60000.0], np.float16))
    np.save(step / "Square.Default_network-Net_Square-op1.1.0.100.output.0.DefaultFormat.Float16.npy",
            np.array([1.0, np.inf], np.float16))
    return root


def test_json_report_records_the_command_line_time_host_and_version(tmp_path):
    dump = _small_dump(tmp_path / "dump")
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    proc = _cli("analyze", dump, "--steps", "0", "--format", "json", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    _validate(data)
    prov = data["provenance"]
    assert prov["msoverflow_version"] == msoverflow.__version__
    assert prov["command"] == f"msoverflow analyze {dump} --steps 0 --format json --no-progress"
    assert datetime.datetime.fromisoformat(prov["time"]) >= before
    assert prov["host"] == os.uname().nodename
    assert prov["mindspore_version"] is None      # a hand-made dump has no .dump_metadata: never guessed


def test_python_api_fills_provenance_without_a_command(tmp_path):
    report = analyze(str(_small_dump(tmp_path / "dump")))
    assert report.provenance["command"] is None
    assert report.to_dict()["provenance"] == report.provenance
    _validate(report.to_dict())


def test_msoverflow_analyze_stays_callable(tmp_path):
    """`msoverflow.analyze(...)` twice in a notebook: importing the pipeline module must not shadow the function."""
    dump = str(_small_dump(tmp_path / "dump"))
    assert msoverflow.analyze(dump).verdict == msoverflow.analyze(dump).verdict == "anomaly"
