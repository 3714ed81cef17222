"""The README's quick start, run exactly as written (the lines between the quickstart markers), in order, in an
empty directory, with the demo model on MindSpore CPU. The `fix:` line of the text report must name a command
that works there."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mindspore

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart_commands():
    text = README.read_text()
    block = re.search(r"<!-- quickstart.*?-->\s*```\n(.*?)```\s*<!-- /quickstart -->", text, re.S)
    assert block, "README.md has no quickstart block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_quick_start_runs_as_written(tmp_path):
    commands = quickstart_commands()
    assert len(commands) == 3
    env = dict(os.environ)
    env.pop("MSOVERFLOW_REPORT_JSON", None)            # the documented default: ./report.json
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    outputs = []
    for command in commands:
        proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        outputs.append((command, proc.returncode, proc.stdout + proc.stderr))
    (run_cmd, run_rc, _), (an_cmd, an_rc, an_out), (patch_cmd, patch_rc, patch_out) = outputs
    assert run_rc == 0, outputs[0]
    assert an_rc == 1 and "ANOMALY" in an_out and "SqrtGrad" in an_out, an_out[-2000:]
    assert (tmp_path / "report.json").is_file() and not list((tmp_path / "dump").rglob("report.json"))
    fix = next(l for l in an_out.splitlines() if l.strip().startswith("fix"))
    named = re.search(r"`(msoverflow [^`]+)`", fix)
    assert named, fix
    assert named.group(1) in patch_cmd, "the fix line names the quick start's next command"
    assert patch_rc == 0 and "FIXED" in patch_out, patch_out[-2000:]
    # the command the fix line names works on its own, too (without --verify: shows the patch)
    proc = subprocess.run(["bash", "-c", named.group(1)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "source patch: NormHead.construct" in proc.stdout, proc.stdout + proc.stderr
