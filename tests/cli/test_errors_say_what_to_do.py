"""Errors that say what to do (issue 17): a report made on another machine, selections the dump lacks, and
`run --help` showing only what `run` accepts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
OP = "Default_network-Net_Square-op1"


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(REPO), MSOVERFLOW_REPORT_JSON="")
    return subprocess.run([sys.executable, "-m", "msoverflow", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def _report(tmp_path, source_file) -> Path:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"verdict": "anomaly", "first": {
        "rank": 0, "graph": 0, "iteration": 0, "op_type": "SqrtGrad", "op_name": "x", "kind": "overflow",
        "forward_op": "Sqrt", "cell": "network._backbone.lm_head", "cell_type": "NormHead",
        "source": {"file": str(source_file), "line": 3, "code": "norm = self.sqrt(variance + self.eps)"}}}))
    return report


def test_patch_names_source_and_runtime_when_the_report_source_is_elsewhere(tmp_path):
    """The report was made where the job ran: its source path does not exist here."""
    report = _report(tmp_path, "/home/ma-user/work/model/baichuan2_13b.py")
    for how in ("source", "guard"):
        proc = _cli("patch", "--from", report, "--how", how)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "not on this machine" in proc.stderr and "--source FILE" in proc.stderr
        assert "--how runtime" in proc.stderr and "baichuan2_13b.py" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    shown = _cli("patch", "--from", report)      # no --how: say so, then show the runtime patch
    assert shown.returncode == 0, shown.stderr
    assert "--source FILE" in shown.stdout and "runtime patch:" in shown.stdout
    # with a copy given by --source, the patch is planned on that copy
    copy = tmp_path / "baichuan2_13b.py"
    copy.write_text("class NormHead:\n    def construct(self, variance):\n"
                    "        norm = self.sqrt(variance + self.eps)\n        return norm\n")
    planned = _cli("patch", "--from", report, "--how", "source", "--source", copy)
    assert planned.returncode == 0, planned.stderr
    assert "not on this machine" not in planned.stdout + planned.stderr


def _two_rank_dump(root: Path) -> Path:
    for rank, steps in ((0, (0, 1, 2)), (1, (0, 2))):
        for step in steps:
            d = root / f"rank_{rank}" / "Net" / "0" / str(step)
            d.mkdir(parents=True)
            np.save(d / f"Square.{OP}.1.0.{100 + step}.output.0.DefaultFormat.Float16.npy", np.ones(2, np.float16))
    return root


def test_selections_the_dump_lacks_list_what_it_has(tmp_path):
    dump = _two_rank_dump(tmp_path / "dump")
    for selection, asked in ((["--steps", "7"], "--steps 7"), (["--ranks", "5"], "--ranks 5"),
                             (["--ranks", "1", "--steps", "1"], "--ranks 1 --steps 1")):
        proc = _cli("analyze", dump, *selection, "--no-progress")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert asked in proc.stderr
        assert "ranks 0,1 (rank 0: steps 0-2; rank 1: steps 0,2)" in proc.stderr, proc.stderr   # selection.format_ids
    assert _cli("analyze", dump, "--ranks", "1", "--steps", "2", "--no-progress").returncode == 0


def test_run_help_shows_only_what_run_accepts():
    text = _cli("run", "--help").stdout
    assert "--dump-dir" in text and "--ms-version" in text
    assert "--path" not in text
    assert "--path" in _cli("config", "--help").stdout
    refused = _cli("run", "--path", "/tmp/x", "--", "true")
    assert refused.returncode == 2 and "--path" in refused.stderr
