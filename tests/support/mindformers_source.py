"""Real MindFormers source for the patch tests, kept as a fixture in tests/support/mindformers/ (unmodified
copies with their Apache-2.0 license header; PROVENANCE.md names repository, commit and path of each).

MindFormers' release wheels on PyPI (0.8.0 ... 2.1.0, checked) ship `mindformers/` and `configs/` only: the
`research/` tree that holds Baichuan2's NormHead is in none of them, and PyPI has no sdist. So the files are kept
here; when a git copy of MindFormers is present ($MSOVERFLOW_MINDFORMERS_GIT, a clone or bare repository, else a
local mirror), `from_git` reads the same file at the pinned commit, and a test checks that the fixture equals it.

The two NormHead versions, pinned by commit:
  - fp16: tag v1.3.2 (same code from v1.0.0 to 1.4): weight and eps hard-coded float16, `use_past` and training
    branches, `self.assign(self.weight, norm_weight)`;
  - fp32: branch r0.8: weight and eps hard-coded float32, training branch only.
"""
import os
import subprocess
from pathlib import Path
from typing import Optional

import pytest

GIT_ENV = "MSOVERFLOW_MINDFORMERS_GIT"
MIRRORS = ["/work/.mirror/mindspore-lab+mindformers/repo"]
BAICHUAN2_13B = "research/baichuan2/baichuan2_13b.py"
VERSIONS = {
    "fp16-v1.3.2": "024279c21923e555f7366940aed9017d13256052",
    "fp32-r0.8": "d578c60e7ceebbd8050f16e05d6a45f64dadc547",
}


def _git_dir() -> Optional[str]:
    for candidate in [os.environ.get(GIT_ENV)] + MIRRORS:
        if candidate and Path(candidate).exists():
            return candidate
    return None


FIXTURE_DIR = Path(__file__).resolve().parent / "mindformers"


def fixture_path(version: str, path: str = BAICHUAN2_13B) -> Path:
    return FIXTURE_DIR / f"{version}_{Path(path).name}.txt"


def read(version: str, path: str = BAICHUAN2_13B) -> str:
    """The file at the pinned commit of `version`, from the fixture kept in this repository."""
    VERSIONS[version]        # a known version only
    return fixture_path(version, path).read_text(encoding="utf-8")


def from_git(version: str, path: str = BAICHUAN2_13B) -> str:
    """The same file read from a git copy of MindFormers; skips the test when none is here."""
    where = _git_dir()
    if where is None:
        pytest.skip(f"no git copy of MindFormers (set {GIT_ENV}) to check the fixture against")
    commit = VERSIONS[version]
    proc = subprocess.run(["git", "-C", where, "show", f"{commit}:{path}"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"{where} does not hold MindFormers commit {commit[:10]} ({proc.stderr.strip()[:120]})")
    return proc.stdout
