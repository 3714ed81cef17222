"""`msoverflow mcp` as installed without the 'agent' extra, `--help` without the SDK, the skill shipped as package
data, and the catalog's schemas read off the CLI (no MindSpore, no server)."""
import subprocess
import sys
import zipfile

import pytest

# sys.modules['mcp'] = None is how Python spells "this package is not installed" to importlib.
WITHOUT_SDK = """
import sys
sys.modules['mcp'] = None
from msoverflow.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
print('MCP', sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))))
sys.exit(code)
"""


def _run(argv, block_sdk=True):
    script = WITHOUT_SDK if block_sdk else WITHOUT_SDK.replace("sys.modules['mcp'] = None", "")
    return subprocess.run([sys.executable, "-c", script.format(argv=argv)], capture_output=True, text=True,
                          timeout=120)


def test_mcp_without_the_extra_names_the_extra_in_one_line():
    proc = _run(["mcp"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == "msoverflow: error: msoverflow mcp needs the 'agent' extra: " \
                                  "pip install 'msoverflow[agent]'"


@pytest.mark.parametrize("argv", [["--help"], ["mcp", "--help"], ["analyze", "--help"]])
def test_help_never_imports_the_sdk(argv):
    proc = _run(argv, block_sdk=False)
    assert proc.returncode == 0, proc.stderr
    assert "MCP []" in proc.stdout


def test_the_skill_prints_without_the_extra():
    proc = _run(["mcp", "--print-skill"])
    assert proc.returncode == 0, proc.stderr
    for step in ("## 1. Config", "## 3. Analyze", "## 5. Decide: patch or not", "**device**", "**data**",
                 "**dynamics**", "patch_preview", "--verify", "## 7. Compare"):
        assert step in proc.stdout, step


def test_bad_roots_are_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "mcp", "--root", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a directory" in proc.stderr


@pytest.mark.slow
def test_the_wheel_ships_the_skill_and_needs_mcp_only_for_the_extra(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(tmp_path), "."], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(tmp_path.glob("msoverflow-*.whl"))
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "msoverflow/agent/SKILL.md" in names and "msoverflow/agent/server.py" in names
    needs = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "mcp" in line]
    assert needs and all('extra == "agent"' in line for line in needs), needs
    assert "Provides-Extra: agent" in metadata


def test_input_schemas_follow_the_cli_parsers():
    from msoverflow.agent import catalog
    from msoverflow.cli import build_parser
    tools = catalog.by_name()
    config = build_parser(["config"])._subparsers._group_actions[0].choices["config"]
    device = next(a for a in config._actions if a.dest == "device")
    assert tools["config"].input_schema["properties"]["device"]["enum"] \
        == list(device.choices)
    patch = build_parser(["patch"])._subparsers._group_actions[0].choices["patch"]
    dtype = next(a for a in patch._actions if a.dest == "dtype")
    assert tools["patch_preview"].input_schema["properties"]["dtype"]["enum"] == list(dtype.choices)
    for tool in tools.values():
        assert tool.input_schema["type"] == "object" and tool.output_schema["type"] == "object"
        assert "next" in tool.output_schema["properties"]


def test_docs_show_the_shipped_skill_and_the_registration():
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "agents.md").read_text()
    skill = (root / "msoverflow" / "agent" / "SKILL.md").read_text().rstrip()
    assert skill in page                                        # the page shows the skill as shipped, whole
    for client in ("claude mcp add", "mcpServers", "\"servers\"", "[mcp_servers.msoverflow]"):
        assert client in page
    assert ">>> tools/call analyze" in page and ">>> tools/call patch_preview" in page
