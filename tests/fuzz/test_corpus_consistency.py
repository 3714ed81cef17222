"""Every report the fuzz corpus's cases make agrees with itself (msoverflow/render/consistency.py): each case
runs through its harness target as tests/fuzz/test_corpus.py runs it, and every Report an analysis concludes on
the way is checked. Most corpus cases are reader, config or patch inputs that make no Report; those that analyse
a dump in process (completeness_step today) are checked, and at least those must be."""
import json
from pathlib import Path

import msoverflow.analysis as analysis
from msoverflow.render.consistency import check
from tests.fuzz import harness

CORPUS = Path(__file__).resolve().parent / "corpus"


def test_every_report_of_the_corpus_agrees_with_itself(monkeypatch):
    entries = sorted(json.loads((CORPUS / "CORPUS.json").read_text()).items())
    checked, problems = [], {}
    current = [""]

    def concluding(report):
        concluded = analysis_conclude(report)
        checked.append(current[0])
        found = check(concluded)
        if found:
            problems.setdefault(current[0], []).extend(found)
        return concluded

    analysis_conclude = analysis.conclude
    monkeypatch.setattr(analysis, "conclude", concluding)
    for name, entry in entries:
        current[0] = name
        harness.run_case(entry["target"], (CORPUS / name).read_bytes())
    assert problems == {}
    made = {name for name, entry in entries if entry["target"] == "completeness_step"}
    assert made and made <= set(checked), f"the check ran on {sorted(set(checked))}, not on {sorted(made)}"
