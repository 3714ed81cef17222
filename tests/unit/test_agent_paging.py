"""explain() pages any part of a report within the context budget, losing nothing: a long list by items, one
large object by its JSON text. The report here is a hand-built dict with the report schema's part names (a real
dump's parts are all small: the server tests in tests/real/test_mcp_server.py page those)."""
import json

import pytest

from msoverflow.agent.confine import ToolError
from msoverflow.agent.tools import MAX_CHARS, dumps, explain


def _report(n_items: int, blob_chars: int) -> dict:
    item = {"rank": 0, "iteration": 0, "op_type": "MatMul", "op_name": "x" * 300, "kind": "overflow"}
    return {"verdict": "anomaly", "first": {"evidence": ["e"], "cause": "precision"},
            "propagation": [dict(item, rank=i) for i in range(n_items)],
            "summary": {"layout": "mindspore", "note": "y" * blob_chars}}


def test_a_long_list_is_paged_in_budget_and_adds_up():
    report = _report(2000, 10)
    seen, page, per_page = [], 1, 100
    while True:
        answer = explain(report, "r1", "propagation", page, per_page)
        assert len(dumps(answer)) <= MAX_CHARS
        seen += answer["items"]
        nxt = [c for c in answer["next"] if c["args"].get("part") == "propagation"]
        if not nxt:
            break
        page, per_page = nxt[0]["args"]["page"], nxt[0]["args"]["per_page"]
    assert [i["rank"] for i in seen] == list(range(2000))


def test_one_large_object_is_paged_as_json_text_that_reassembles():
    report = _report(1, 100_000)
    first = explain(report, "r1", "summary", 1, 20)
    pages = first["pages"]
    texts = [explain(report, "r1", "summary", p, 20)["json_text"] for p in range(1, pages + 1)]
    assert all(len(dumps(explain(report, "r1", "summary", p, 20))) <= MAX_CHARS for p in range(1, pages + 1))
    assert json.loads("".join(texts)) == report["summary"]
    with pytest.raises(ToolError, match="past the end"):
        explain(report, "r1", "summary", pages + 1, 20)


def test_a_part_the_report_does_not_hold_lists_what_it_holds():
    with pytest.raises(ToolError, match="it holds: evidence"):
        explain(_report(1, 1), "r1", "worst", 1, 20)
