"""The tests of tests/unit/test_provenance.py that read a real MindSpore dump (moved here: tests/unit holds no MindSpore run;
the helpers stay in tests/unit/test_provenance.py)."""
import json

import pytest

from msoverflow.api import analyze


@pytest.mark.mindspore
def test_mindspore_version_of_a_real_dump(real_dumps):
    """The real MindSpore 2.10 CPU dump records its version in rank_0/.dump_metadata/config.json."""
    dump = real_dumps["normhead_fp16_overflow"]
    written = json.loads((dump / "rank_0" / ".dump_metadata" / "config.json").read_text())["ms_version"]
    assert written.startswith("2.10")
    report = analyze(str(dump))
    assert report.provenance["mindspore_version"] == written
