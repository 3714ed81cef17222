"""A real headless chromium (Debian's package, driven by playwright) for the HTML report tests.

playwright's own browser download cannot run here, so the tests launch /usr/bin/chromium (or
$MSOVERFLOW_CHROMIUM). scripts/test.sh (and so .ci/run) installs it with apt-get when it is missing and runs as
root. Where chromium or playwright is missing, the tests skip with a loud message; under CI (CI=true) they fail
instead, so a missing browser is never silent there.
Screenshots go to test-artifacts/browser/ (gitignored).
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium_path():
    chosen = os.environ.get("MSOVERFLOW_CHROMIUM")     # when set, the only candidate
    for candidate in ([chosen] if chosen else ["/usr/bin/chromium", shutil.which("chromium")]):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _unavailable(reason: str):
    message = (f"BROWSER TESTS NOT RUN: {reason}. Install it with `apt-get update && apt-get install -y chromium` "
               "(as root; scripts/test.sh and .ci/run do this) and `pip install -e '.[test]'`.")
    print(f"\n{'!' * 20} {message}", file=sys.__stderr__, flush=True)
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/browser" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    path = _chromium_path()
    if path is None:
        _unavailable(f"no chromium at {os.environ.get('MSOVERFLOW_CHROMIUM') or '/usr/bin/chromium'}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    profile = tempfile.mkdtemp(prefix="msoverflow-chromium-")
    with sync_playwright() as pw:
        # A persistent context is the only way to hand chromium a fresh --user-data-dir of our own.
        context = pw.chromium.launch_persistent_context(profile, executable_path=path, args=CHROMIUM_ARGS,
                                                        headless=True, viewport={"width": 1280, "height": 900},
                                                        offline=True)
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def artifacts():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
