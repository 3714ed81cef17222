"""`msoverflow --help` and `analyze` import only what they run (checked in a fresh interpreter's sys.modules)."""
import json
import subprocess
import sys

import numpy as np

from tests.support.synth_dump import SynthDump

PROBE = """
import sys
from msoverflow.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
print('MODULES', sorted(m for m in sys.modules if m.startswith('msoverflow.') or m in ('mindspore', 'libcst')))
"""


def _modules(argv):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("MODULES ")][-1]
    return proc, set(eval(line[len("MODULES "):]))   # a list literal we printed ourselves


def test_help_imports_no_command_module():
    proc, modules = _modules(["--help"])
    assert "analyze" in proc.stdout and "config" in proc.stdout and "patch" in proc.stdout
    assert not {m for m in modules if m.startswith("msoverflow.commands.")}, modules
    assert not {m for m in modules if m.startswith(("msoverflow.config", "msoverflow.patch"))}, modules


def test_command_help_imports_only_that_command():
    proc, modules = _modules(["config", "--help"])
    assert "--check" in proc.stdout
    assert {m for m in modules if m.startswith("msoverflow.commands.")} == {"msoverflow.commands.config",
                                                                           "msoverflow.commands._output"}


def test_analyze_imports_no_config_patch_or_other_command(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    proc, modules = _modules(["analyze", str(tmp_path), "--format", "json", "--no-progress"])
    report = json.loads(proc.stdout[:proc.stdout.rindex("MODULES")])
    assert report["first"]["op_type"] == "Exp"
    # the command and the output module every command shares, nothing of another command
    assert {m for m in modules if m.startswith("msoverflow.commands.")} == {"msoverflow.commands.analyze",
                                                                           "msoverflow.commands._output"}
    assert not {m for m in modules if m.startswith(("msoverflow.config", "msoverflow.patch"))}, modules
    assert "mindspore" not in modules and "libcst" not in modules


def test_every_command_registers_with_its_table_help():
    import argparse
    import importlib

    from msoverflow.cli import COMMANDS, MODULES
    for name, help_text in COMMANDS.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(MODULES.get(name, f".commands.{name}"), "msoverflow").register(sub)
        registered = {a.dest: a.help for a in sub._choices_actions}
        assert registered[name] == help_text, name


def test_analysis_works_without_dask_and_scheduler_says_what_to_install(tmp_path):
    """dask.distributed is an optional extra: without it analyze runs, and --scheduler is a usage error."""
    d = SynthDump(str(tmp_path))
    d.op(0, "Exp", "Default_Exp-op0", [np.ones(2, np.float32)], [np.array([np.inf, 1], np.float32)])
    code = ("import sys; sys.modules['distributed'] = None; sys.modules['dask'] = None\n"
            "from msoverflow.cli import main\n"
            f"print('CODES', main(['analyze', {str(tmp_path)!r}, '--no-progress', '--format', 'json']), "
            f"main(['analyze', {str(tmp_path)!r}, '--no-progress', '--scheduler', 'tcp://127.0.0.1:8786']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip().splitlines()[-1] == "CODES 1 2", proc.stdout + proc.stderr
    assert "pip install 'msoverflow[dask]'" in proc.stderr
