"""The README's quick start, run exactly as written (the lines between the quickstart markers), in order, from
a checkout's root, with the demo model on MindSpore CPU: its own first line activates the checkout's .venv (the test
takes the venv off PATH, as a new user's shell has it). The `fix:` line of the text report must name a command
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
    """As a user's script would run it: the block, in order, under `set -euo pipefail` (analyze's exit 1 for an
    anomaly must not stop it before the patch)."""
    commands = quickstart_commands()
    assert len(commands) == 5 and commands[0] == "source .venv/bin/activate"
    venv = Path(sys.prefix)
    checkout = tmp_path / "checkout"            # what the quick start needs of a checkout: its .venv
    checkout.mkdir()
    (checkout / ".venv").symlink_to(venv, target_is_directory=True)
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home))
    env.pop("MSOVERFLOW_REPORT_JSON", None)            # the documented default: ./report.json
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != (venv / "bin").resolve())
    markers = [f"=== quickstart line {i} ===" for i in range(len(commands))]
    script = "set -euo pipefail\n" + "".join(f"echo '{m}'\n{c}\n" for m, c in zip(markers, commands, strict=True))
    proc = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=1200)
    output = proc.stdout + proc.stderr
    tmp_path = home / "msoverflow-try"                 # where the block went: the rest is checked there
    assert proc.returncode == 0, output[-3000:]
    _, an_out, patch_out = re.split("|".join(map(re.escape, markers[3:])), proc.stdout)
    assert "ANOMALY" in an_out and "SqrtGrad" in an_out, an_out[-2000:]
    assert "FIXED" in patch_out, patch_out[-2000:]
    assert (tmp_path / "report.json").is_file() and not list((tmp_path / "dump").rglob("report.json"))
    # analyze's own exit code is the anomaly's (the `|| true` is only for scripts)
    analyzed = subprocess.run(["bash", "-c", f"source {checkout}/.venv/bin/activate && msoverflow analyze dump "
                               "--no-save"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert analyzed.returncode == 1, analyzed.stderr[-2000:]
    # the fix lines (the demo's update also went through with the overflow: the skip-the-update line comes first)
    fixes = [l for l in an_out.splitlines() if l.strip().startswith("fix")]
    named = next((m for m in (re.search(r"`(msoverflow [^`]+)`", fix) for fix in fixes) if m), None)
    assert named, fixes
    assert named.group(1) in commands[4], "the fix line names the quick start's next command"
    # the command the fix line names works on its own, too (without --verify: shows the patch)
    proc = subprocess.run(["bash", "-c", f"source {checkout}/.venv/bin/activate && {named.group(1)}"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "source patch: NormHead.construct" in proc.stdout, proc.stdout + proc.stderr
