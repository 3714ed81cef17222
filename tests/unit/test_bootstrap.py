"""scripts/bootstrap.sh, as a new user meets it (issue 33, "a new user's first hour"): it checks the interpreter's
version before it makes .venv, and says what it installs (about 3.7 GB, minutes) before pip runs, never minutes of
silence. Run on a copy of the script with stand-in interpreters (nothing is installed)."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _checkout(tmp_path) -> Path:
    """A checkout without .venv: the script, setup.cfg and pyproject.toml (the install stamp hashes them)."""
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "bootstrap.sh", root / "scripts")
    for name in ("setup.cfg", "pyproject.toml"):
        shutil.copy(REPO / name, root)
    return root


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _run(root: Path, python: str):
    """The script's exit status and what it said (stderr goes to a file that a stand-in pip can look at)."""
    env = {**os.environ, "PYTHON": python, "PATH": "/usr/bin:/bin"}
    said = root.parent / "said.txt"
    with open(said, "w") as err:
        proc = subprocess.run(["bash", str(root / "scripts" / "bootstrap.sh")], stdout=subprocess.DEVNULL,
                              stderr=err, env=env, timeout=120)
    return proc.returncode, said.read_text()


def test_an_interpreter_of_another_version_is_refused_before_anything_is_made(tmp_path):
    root = _checkout(tmp_path)
    old = _executable(tmp_path / "python3.8", "#!/bin/sh\necho 3.8\n")
    code, said = _run(root, str(old))
    assert code == 2
    assert "is Python 3.8; MindSpore 2.10 needs Python 3.10 or 3.11" in said
    assert not (root / ".venv").exists()


def test_no_interpreter_is_one_line_naming_it(tmp_path):
    code, said = _run(_checkout(tmp_path), "python3.99-nowhere")
    assert code == 2 and "no 'python3.99-nowhere' on PATH" in said


def test_it_says_what_it_installs_before_pip_runs(tmp_path):
    """A stand-in Python 3.11 whose venv's python, when pip is first called, keeps what the script had said."""
    root = _checkout(tmp_path)
    seen = tmp_path / "said-before-pip.txt"
    venv_python = (f"#!/bin/sh\nif [ \"$2\" = pip ] && [ ! -f {seen} ]; then cp {tmp_path / 'said.txt'} {seen}; fi\n"
                   "exit 0\n")
    fake = _executable(tmp_path / "python3.11", f"""#!/bin/sh
if [ "$1" = "-c" ]; then echo 3.11; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/python" <<'EOS'
{venv_python}EOS
  chmod +x "$3/bin/python"
  exit 0
fi
exit 1
""")
    code, said = _run(root, str(fake))
    assert code == 0, said
    before = seen.read_text()
    assert "creating .venv with" in before and "(Python 3.11)" in before
    assert "installing msoverflow with MindSpore 2.10" in before and "about 3.7 GB" in before
    assert "done: .venv/bin/msoverflow is the tool" in said
    assert (root / ".venv" / ".msoverflow-installed").exists()
