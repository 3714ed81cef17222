"""Installs that coexist: the built wheel in a fresh venv next to a real MindFormers wheel (which puts a top-level
`configs/` into site-packages), and with `pip install --target DIR`; `analyze` and `config` run there.

Dependencies (numpy, pandas, rich, ruamel.yaml, libcst) come from this test run's own environment through a
.pth line, so nothing but msoverflow and MindFormers (--no-deps) is installed: the tests take seconds, and the
msoverflow that runs is the installed wheel, never this checkout (checked).
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
MINDFORMERS = "mindformers==1.3.2"     # every MindFormers wheel (1.0 to 2.1) ships a top-level configs/

pytestmark = pytest.mark.slow


def _pip(python, *args, cwd=None):
    return subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _deps_dir() -> str:
    """The site-packages holding this environment's numpy and friends."""
    return str(Path(np.__file__).resolve().parents[1])


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    build = _pip(sys.executable, "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO))
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    log = build.stdout + build.stderr
    # setuptools' warnings: data directories that are not packages, or packages left out.
    for bad in ("Package would be ignored", "is importable", "not in the packages list", "SetuptoolsDeprecationWarning"):
        assert bad not in log, f"setuptools warns: {bad}"
    wheels = list(out.glob("msoverflow-*.whl"))
    assert len(wheels) == 1
    import zipfile
    with zipfile.ZipFile(wheels[0]) as whl:      # the top-level configs/ is the repository's data, not installed
        assert not [n for n in whl.namelist() if n.startswith("configs/")]
    return wheels[0]


@pytest.fixture(scope="session")
def mindformers_wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("mindformers")
    got = _pip(sys.executable, "download", "--no-deps", MINDFORMERS, "-d", str(out))
    if got.returncode != 0:
        pytest.skip(f"cannot download {MINDFORMERS}: {got.stderr.strip()[-300:]}")
    return next(out.glob("mindformers-*.whl"))


@pytest.fixture(scope="session")
def dump(tmp_path_factory):
    from tests.support.synth_dump import SynthDump
    root = tmp_path_factory.mktemp("install-dump") / "dump"
    d = SynthDump(str(root))
    x = np.array([1.0, 60000.0], dtype=np.float16)
    d.op(0, "Square", "Default_network-Net_Square-op1", inputs=[x], outputs=[np.array([1.0, np.inf], np.float16)])
    return root


def _run(env_python, args, env=None, cwd=None):
    return subprocess.run([str(env_python), "-m", "msoverflow", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def _dev_env_intact(work):
    """Installing elsewhere must not uninstall the msoverflow of the environment running the tests."""
    here = subprocess.run([sys.executable, "-c", "import msoverflow"], cwd=work, capture_output=True, text=True)
    assert here.returncode == 0, here.stderr


def _check_commands(python, dump, work, env=None):
    """analyze finds the overflow; config writes a config and checks it, with the installed data tables."""
    where = subprocess.run([str(python), "-c", "import msoverflow, msoverflow.resources as r; "
                                               "print(msoverflow.__file__); print(r.config_dir())"],
                           capture_output=True, text=True, env=env, cwd=work)
    assert where.returncode == 0, where.stderr
    module_file, data_dir = where.stdout.split()
    assert not module_file.startswith(str(REPO)), f"the checkout was imported, not the install: {module_file}"
    assert data_dir.startswith(str(Path(module_file).parent)), data_dir   # never another package's configs/
    report = work / "report.json"
    analyzed = _run(python, ["analyze", str(dump), "--format", "json", "-o", str(report), "--no-progress"],
                    env=env, cwd=work)
    assert analyzed.returncode == 1, analyzed.stderr            # anomaly found
    assert "Traceback" not in analyzed.stderr
    assert '"op_type": "Square"' in report.read_text()
    config = work / "dump_config.json"
    made = _run(python, ["config", "overflow", "--ms-version", "2.4", "--device", "ascend", "--jit-level", "O0",
                         "--path", str(work / "dumps"), "-o", str(config)], env=env, cwd=work)
    assert made.returncode == 0, made.stderr
    checked = _run(python, ["config", "--check", str(config), "--ms-version", "2.4", "--device", "ascend",
                            "--jit-level", "O0"], env=env, cwd=work)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    presets = _run(python, ["config", "--list-presets"], env=env, cwd=work)
    assert presets.returncode == 0 and "cpu-overflow" in presets.stdout, presets.stderr


def test_wheel_beside_mindformers_in_a_fresh_venv(tmp_path, wheel, mindformers_wheel, dump):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # pip from this environment installs into the venv (--prefix); the venv needs no pip of its own.
    for whl in (mindformers_wheel, wheel):
        got = _pip(sys.executable, "install", "--no-deps", "--no-compile", "--ignore-installed", "--prefix", str(venv),
                   str(whl))
        assert got.returncode == 0, got.stderr[-1500:]
    assert (Path(purelib) / "configs").is_dir(), "MindFormers' top-level configs/ should be installed beside us"
    Path(purelib, "zz_deps.pth").write_text(_deps_dir() + "\n")
    _check_commands(python, dump, tmp_path)
    _dev_env_intact(tmp_path)


def test_pip_install_target_dir(tmp_path, wheel, mindformers_wheel, dump):
    target = tmp_path / "target"
    for whl in (mindformers_wheel, wheel):
        got = _pip(sys.executable, "install", "--no-deps", "--no-compile", "--ignore-installed", "--target",
                   str(target), str(whl))
        assert got.returncode == 0, got.stderr[-1500:]
    assert (target / "msoverflow" / "data" / "dump_rules.yaml").is_file()
    assert (target / "configs").is_dir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MSOVERFLOW_CONFIGS_DIR")}
    env["PYTHONPATH"] = os.pathsep.join([str(target), _deps_dir()])
    # A plain interpreter with no site-packages of its own: only DIR and the dependencies are importable.
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = base if base.exists() else Path(sys.executable)
    _check_commands(python, dump, tmp_path, env=env)
    _dev_env_intact(tmp_path)


# ---- the install a MindSpore user does: pip picks a pyarrow that imports beside NumPy 1.x ----------------------

STAT_HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
               "Avg Value,Count,Negative Zero Count,Positive Zero Count,NaN Count,Negative Inf Count,"
               "Positive Inf Count,Zero Count")


def _statistic_dump(root: Path) -> Path:
    step = root / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    rows = [STAT_HEADER,
            "Square,Default_network-Net_Square-op1,1,0,100,input,0,4,float16,2,60000,1,30000,2,0,0,0,0,0,0",
            "Square,Default_network-Net_Square-op1,1,0,100,output,0,4,float16,2,inf,1,inf,2,0,0,0,0,1,0"]
    (step / "statistic.csv").write_text("\n".join(rows) + "\n")
    return root


_PROBE = ("import numpy, pyarrow, msoverflow; from msoverflow.readers import statistic_csv as s; "
          "print(numpy.__version__, pyarrow.__version__, s.fast_parser(), msoverflow.__file__)")


@pytest.mark.mindspore      # installs MindSpore itself
def test_wheel_beside_mindspore_and_numpy1_keeps_the_fast_parser(tmp_path, wheel):
    """What a MindSpore user runs: `pip install msoverflow` into an environment with mindspore==2.10.0 and
    numpy<2, letting pip resolve msoverflow's own requirements. The pyarrow pip picks must import there, so
    statistic.csv goes through pyarrow (pyarrow 26 refuses NumPy 1.x and silently cost 14x before the bound)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # pip from this environment resolves into the fresh venv; --ignore-installed: nothing is taken from here.
    got = _pip(sys.executable, "install", "--no-compile", "--ignore-installed", "--prefix", str(venv),
               str(wheel), "mindspore==2.10.0", "numpy<2")
    if got.returncode != 0 and "No matching distribution" in got.stderr:
        pytest.skip(f"the package index is not reachable: {got.stderr.strip()[-300:]}")
    assert got.returncode == 0, got.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MSOVERFLOW_CONFIGS_DIR")}
    probe = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-1500:]
    numpy_version, pyarrow_version, parser, module_file = probe.stdout.split()
    assert numpy_version.startswith("1."), numpy_version
    assert parser == "pyarrow", (pyarrow_version, probe.stderr)
    assert not module_file.startswith(str(REPO)), module_file
    dump = _statistic_dump(tmp_path / "dump")
    analyzed = _run(python, ["analyze", str(dump), "--no-progress", "--no-save"], env=env, cwd=tmp_path)
    assert analyzed.returncode == 1, analyzed.stdout + analyzed.stderr
    assert "Square" in analyzed.stdout and "pyarrow cannot be imported" not in analyzed.stderr


def test_a_pyarrow_that_cannot_import_is_said_once_with_the_fix(tmp_path):
    """Where pyarrow is broken anyway (installed with --no-deps, or pinned by something else), the fallback
    parser still answers, and msoverflow says once why it is slower and what to install."""
    dump = _statistic_dump(tmp_path / "dump")
    for step in (1, 2):     # two statistic.csv files: still one warning
        copy = dump / "rank_0" / "Net" / "0" / str(step)
        copy.mkdir()
        (copy / "statistic.csv").write_text((dump / "rank_0" / "Net" / "0" / "0" / "statistic.csv").read_text()
                                            .replace(",inf,1,inf,2,0,0,0,0,1,0", ",4,1,2,2,0,0,0,0,0,0"))
    code = ("import sys; sys.modules['pyarrow'] = None; from msoverflow.cli import main; "
            f"sys.exit(main(['analyze', {str(dump)!r}, '--no-progress', '--no-save', '--all']))")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Square" in proc.stdout
    assert proc.stderr.count("pyarrow cannot be imported") == 1, proc.stderr
    assert "pip install 'pyarrow>=14,<26'" in proc.stderr
