"""How every answer an agent gets is shaped: compact JSON, cut to a context budget, with suggested next calls.
tools.py and watch.py both answer through these."""
from __future__ import annotations

import json
from typing import Any

# About 8,000 tokens: compact JSON runs 3 to 4 characters a token, so 24,000 characters stay under it.
MAX_CHARS = 24_000


def dumps(value: Any) -> str:
    """The compact JSON every answer is sent as."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def call(tool: str, why: str, **args) -> dict:
    """One suggested next call: the tool, its arguments and why an agent would make it."""
    return {"tool": tool, "args": args, "why": why}


def fit(answer: dict) -> dict:
    """An answer cut to MAX_CHARS: the longest lists are halved (their full length kept beside them) until it fits;
    explain() pages what was cut."""
    rounds = 0
    while len(dumps(answer)) > MAX_CHARS and rounds < 30:
        rounds += 1
        key, longest = _longest_list(answer)
        if key is None:
            break
        holder, name = key
        holder[name] = longest[:max(1, len(longest) // 2)] if len(longest) > 1 else []
        holder.setdefault(f"{name}_cut_from", len(longest))
    if len(dumps(answer)) > MAX_CHARS:
        text = dumps(answer)
        answer = {"truncated_json": text[:MAX_CHARS - 500], "note": "cut to the context budget; ask explain for "
                                                                    "one part, paged", "next": answer.get("next", [])}
    return answer


def _longest_list(node, best=(None, [])):
    key, longest = best
    if isinstance(node, dict):
        for name, value in node.items():
            if name == "next":
                continue
            if isinstance(value, list) and len(dumps(value)) > len(dumps(longest)):
                key, longest = (node, name), value
            found = _longest_list(value, (key, longest))
            key, longest = found
    elif isinstance(node, list):
        for value in node:
            key, longest = _longest_list(value, (key, longest))
    return key, longest
