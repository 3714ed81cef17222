"""What an op run is called across modes and frameworks: a graph-mode dump names kernels by scope and op type
(`Default/.../attention-Attention/Softmax-op0`), a mindstudio-probe dump (MindSpore PyNative, PyTorch) names API
calls (`Functional.softmax.0.forward`, `Primitive.softmax.Softmax.0.forward`, `Torch.matmul.3.forward`). Both are
brought to one family name through the built-in API map (msoverflow/data/compare_api_map.yaml) and the user's
`--map FILE`: our YAML ({baseline name or glob pattern: target name}) or mindstudio-probe's mapping files as they
are (api_mapping: a list of {ms_api, pt_api, ...}; cell_mapping, data_mapping and its ms_to_pt_api table: a
mapping of one name to the other)."""
from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

_API_RUN = re.compile(r"^(?P<api>.+?)\.(?P<n>\d+)\.(?P<direction>forward|backward)$")
_FIRST_CAP = re.compile(r"(?:^|_)([a-z])")


@functools.lru_cache(maxsize=1)
def _builtin() -> Tuple[Dict[str, Optional[str]], Dict[str, str]]:
    from ..resources import load_yaml
    table = load_yaml("compare_api_map.yaml")
    return dict(table["apis"]), dict(table["graph_families"])


def api_of(op_name: str) -> Optional[Tuple[str, str]]:
    """(API name, forward|backward) of a mindstudio-probe op run's name (`Functional.softmax.0.forward`); None for
    a graph-mode name."""
    found = _API_RUN.match(op_name)
    return (found.group("api"), found.group("direction")) if found else None


# The API prefixes mindstudio-probe gives one framework only (its PyTorch and MindSpore dump docs; its own
# MindSpore-to-PyTorch mapping turns Mint into Torch and MintFunctional into Functional); Functional, Tensor and
# Distributed are both frameworks'.
_FRAMEWORK_OF_PREFIX = {"Torch": "pytorch", "Module": "pytorch", "Aten": "pytorch", "NPU": "pytorch",
                        "VF": "pytorch", "Primitive": "mindspore", "Mint": "mindspore", "MintFunctional": "mindspore",
                        "Cell": "mindspore", "Jit": "mindspore"}


def framework_of(op_names) -> Optional[str]:
    """The framework a mindstudio-probe dump's entries name (`Torch.matmul.0.forward`: pytorch,
    `Primitive.matmul.MatMul.0.forward`: mindspore), by the most of its entries with a prefix only one framework
    uses; None when none has."""
    from collections import Counter
    seen = Counter(_FRAMEWORK_OF_PREFIX.get(name.split(".", 1)[0]) for name in op_names)
    seen.pop(None, None)
    return seen.most_common(1)[0][0] if seen else None


def family(op_type: str, op_name: str) -> Optional[str]:
    """The op family an op run pairs by across modes: the graph op type (BatchMatMul as MatMul) or the API's (the
    built-in map, else its CamelCase); None for an API that computes no tensor (shape, size)."""
    apis, families = _builtin()
    api = api_of(op_name)
    if api is None:
        return families.get(op_type, op_type)
    parts = api[0].split(".")
    if parts[0] == "Primitive" and len(parts) >= 3:
        return families.get(parts[-1], parts[-1])
    last = parts[-1]
    if last in apis:
        return apis[last]
    name = _FIRST_CAP.sub(lambda m: m.group(1).upper(), last.strip("_"))
    return families.get(name, name)


@dataclass
class NameMap:
    """The user's --map: baseline name or glob pattern -> target name. A run whose name (API name, op type, or
    scope without op numbers) matches a key on one side and a run matching its value on the other pair as one."""
    pairs: List[Tuple[str, str]] = field(default_factory=list)
    source: str = ""

    def key_of(self, names: Tuple[str, ...], side: str) -> Optional[str]:
        for i, (pattern, target) in enumerate(self.pairs):
            wanted = pattern if side == "baseline" else target
            if any(name == wanted or fnmatch.fnmatchcase(name, wanted) for name in names if name):
                return f"map{i}"
        return None

    def family_of(self, names: Tuple[str, ...], side: str) -> Optional[str]:
        """Across modes and frameworks: the op family the entry a run matches puts it in, that of the entry's
        baseline API name (`Functional.dense: Functional.linear`: the linear call pairs as dense's MatMul), so an
        entry whose other name is not in the dump (msprobe's table lists hundreds) takes no run from its family;
        an entry of a pattern or a graph name is a family of its own ("map<i>")."""
        key = self.key_of(names, side)
        if key is None:
            return None
        pattern = self.pairs[int(key[3:])][0]
        kind = None if any(c in pattern for c in "*?[") else family("", pattern + ".0.forward")
        return kind if kind and api_of(pattern + ".0.forward") else key

    def __bool__(self) -> bool:
        return bool(self.pairs)


def load_map(path: str) -> NameMap:
    """--map FILE: our YAML or a mindstudio-probe mapping file, read as it is. UserError naming the file when it
    is neither."""
    from .. import safeio
    from ..errors import UserError
    try:
        data = safeio.loads_yaml(safeio.read_text(path, limit=16 << 20))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: --map: {exc}") from None
    pairs: List[Tuple[str, str]] = []
    if isinstance(data, dict):
        pairs = [(str(k), str(v)) for k, v in data.items() if v is not None]
    elif isinstance(data, list) and all(isinstance(x, dict) and "ms_api" in x and "pt_api" in x for x in data):
        pairs = [(str(x["ms_api"]), str(x["pt_api"])) for x in data]      # msprobe's api_mapping
    if not pairs:
        raise UserError(f"{path}: --map: expected a mapping (baseline name or pattern: target name) or "
                        "mindstudio-probe's api_mapping list of {ms_api, pt_api}")
    return NameMap(pairs, path)
