"""Without a browser the HTML tests skip loudly on a developer's machine and fail under CI: never a silent pass."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("ci, expect_rc", [("true", 1), ("", 0)])
def test_missing_chromium_fails_in_ci_and_skips_loudly_elsewhere(ci, expect_rc, tmp_path):
    env = {**os.environ, "MSOVERFLOW_CHROMIUM": str(tmp_path / "no-chromium"), "CI": ci}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           str(HERE / "test_html_report.py"), "-k", "multi_rank"],
                          capture_output=True, text=True, env=env, cwd=HERE.parents[1], timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == expect_rc, output[-2000:]
    assert "BROWSER TESTS NOT RUN" in output
    assert ("1 error" in output or "1 failed" in output) if ci else "1 skipped" in output
