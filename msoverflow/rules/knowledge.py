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
        self.division_calls = frozenset(table.get("division_calls") or [])
        self.domain = dict(table.get("domain") or {})
        self.state_updates = set(table.get("state_updates") or [])
        self.in_place_views = frozenset(table.get("in_place_views") or [])
        self.writes_inputs = {op: frozenset(slots) for op, slots in (table.get("writes_inputs") or {}).items()}
        self.outputs_not_written = frozenset(table.get("outputs_not_written") or [])
        self.recommendations = dict(table.get("recommendations") or {})
        consumers = table.get("consumers") or {}
        self.consumer_types = set(consumers.get("op_types") or [])
        self.consumer_words = [str(w).lower() for w in consumers.get("scope_words") or []]
        self.absorbers = frozenset(table.get("absorbers") or [])
        plumbing = table.get("graph_plumbing") or {}
        self.plumbing = {kind: frozenset(plumbing.get(kind) or [])
                         for kind in ("pass_all", "pass_first", "no_value", "graph_output")}
        self.loss_scale_parameters = frozenset(table.get("loss_scale_parameters") or [])

    def forward_of(self, op_type: str) -> Optional[str]:
        if op_type in self.backward_to_forward:
            return self.backward_to_forward[op_type]
        for suffix in ("GradV2", "GradExt", "Grad", "Backward"):
            if op_type.endswith(suffix) and len(op_type) > len(suffix):
                return op_type[: -len(suffix)]
        return None

    def written_inputs(self, op_type: str) -> frozenset:
        """The input slots the op writes in place (their dumped values are the op's own results)."""
        return self.writes_inputs.get(op_type, frozenset())

    def updates_weights(self, op_type: str) -> bool:
        """An optimizer update (SGD, Adam, Apply*): it writes weights in place. Not a plain Assign or Scatter,
        which have no learning rate."""
        return op_type in self.writes_inputs and not op_type.startswith(("Assign", "Scatter"))

    def is_plumbing(self, op_type: str) -> bool:
        """A saved-graph node that runs no kernel (Load, Depend, MakeTuple, ...)."""
        return any(op_type in kinds for kinds in self.plumbing.values())

    def is_collective(self, op_type: str) -> bool:
        return op_type in self.collectives

    def is_consumer(self, op_type: str, op_name: str = "") -> bool:
        """A global-norm, loss-scale or optimizer op: it consumes what other ops made."""
        if op_type in self.consumer_types or op_type in self.state_updates:
            return True
        scope = op_name.lower()
        return any(word in scope for word in self.consumer_words)

    def recommend(self, key: str, **values) -> str:
        template = self.recommendations.get(key) or self.recommendations.get("overflow", "")
        try:
            return " ".join(template.split()).format(**values)
        except (KeyError, IndexError):
            return " ".join(template.split())


@functools.lru_cache(maxsize=1)
def knowledge() -> OpKnowledge:
    return OpKnowledge(load_yaml("op_knowledge.yaml"))
