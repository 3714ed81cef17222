"""Op knowledge from msoverflow/data/op_knowledge.yaml."""
from __future__ import annotations

import functools
from typing import Optional

from ..resources import load_yaml


class OpKnowledge:
    def __init__(self, table: dict):
        self.backward_to_forward = dict(table.get("backward_to_forward") or {})
        self.collectives = set(table.get("collectives") or [])
        self.division = dict(table.get("division") or {})
        self.domain = dict(table.get("domain") or {})
        self.state_updates = set(table.get("state_updates") or [])
        self.recommendations = dict(table.get("recommendations") or {})

    def forward_of(self, op_type: str) -> Optional[str]:
        if op_type in self.backward_to_forward:
            return self.backward_to_forward[op_type]
        for suffix in ("GradV2", "GradExt", "Grad", "Backward"):
            if op_type.endswith(suffix) and len(op_type) > len(suffix):
                return op_type[: -len(suffix)]
        return None

    def is_collective(self, op_type: str) -> bool:
        return op_type in self.collectives

    def recommend(self, key: str, **values) -> str:
        template = self.recommendations.get(key) or self.recommendations.get("overflow", "")
        try:
            return " ".join(template.split()).format(**values)
        except (KeyError, IndexError):
            return " ".join(template.split())


@functools.lru_cache(maxsize=1)
def knowledge() -> OpKnowledge:
    return OpKnowledge(load_yaml("op_knowledge.yaml"))
