"""The README's demo, end to end on real MindSpore CPU: overflow found, patched, re-run, clean."""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mindspore


def test_demo_finds_sqrtgrad_patches_and_verifies(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "msoverflow", "demo", "--workdir", str(tmp_path / "demo")],
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "ANOMALY: overflow first created by SqrtGrad (backward of Sqrt)" in out
    assert "norm = self.sqrt(variance + self.eps)" in out
    assert "+        # msoverflow: precision island" in out           # the planned source diff
    assert "result: FIXED" in out
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    assert report["first"]["cell_type"] == "NormHead"
    page = (tmp_path / "demo" / "report.html").read_text()     # the HTML report beside it (browser-tested elsewhere)
    assert 'id="timeline-svg"' in page and "SqrtGrad" in page and "NormHead" in page
    # the demo never edits the packaged model: the fix was applied at run time
    assert "msoverflow: precision island" not in open(report["first"]["source"]["file"]).read()
