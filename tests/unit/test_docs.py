"""The documentation: the docs/ site builds with `mkdocs build --strict` (a broken link, a missing anchor or a page
left out of the nav fails), the README's links point at files that exist, and the README stays a front page."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_LINES = 250


def test_docs_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        message = "mkdocs is not installed (pip install -e '.[test]')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "analyze" / "index.html").is_file()


def _relative_links(text):
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
            yield target.split("#")[0]


def test_readme_links_point_at_files_that_exist():
    links = list(_relative_links(README.read_text()))
    assert len(links) > 10
    missing = [link for link in links if not (REPO / link).exists()]
    assert missing == []


def test_every_docs_page_is_linked_from_the_readme():
    linked = {link for link in _relative_links(README.read_text()) if link.startswith("docs/")}
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    assert pages - linked == set()


def test_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES
