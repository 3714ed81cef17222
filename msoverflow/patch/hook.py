"""The runtime precision patch inside a user's unmodified training script (`msoverflow patch --verify -- python
train.py`).

The verifier writes the start-up hook (msoverflow/startup_hook.py) naming this module; Python runs it at start-up and
it calls `install()`, which waits for MindSpore's `mindspore.nn.cell` module to load and then hooks two moments,
both before anything is compiled:
  - an Optimizer is being constructed: the networks built so far are complete, and patching them now means the
    optimizer clones its states from the already widened Parameters. This is the only moment a script that
    calls its network solely inside `@ms.jit` functions (value_and_grad training) offers;
  - a Cell is called from outside any other Cell (a TrainOneStepCell, a Model's train network, a bare network).
What happened is written to the spec's log file at exit, including "never found".
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import weakref
from typing import Optional, Set

from ..startup_hook import read_spec, when_cell_module_loads, write_hook

INSTALLER = __name__


def write_patch_hook(hook_dir: str, spec: dict, spec_path: str) -> dict:
    """The start-up hook that installs this module's runtime patch; the environment that activates it."""
    return write_hook(hook_dir, spec, spec_path, INSTALLER)


class _State:
    def __init__(self, spec: dict):
        from .targets import Target
        self.spec = spec
        self.target = Target.from_dict(spec["target"])
        self.dtype = spec.get("dtype", "float32")
        self.log = {"target": spec["target"], "dtype": self.dtype, "applied": [], "searched": [], "errors": [],
                    "hooked": False}
        self.visited: Set[int] = set()
        self.local = threading.local()
        self.cells: list = []    # weak references to every Cell constructed, to find the roots later

    def write_log(self):
        path = self.spec.get("log")
        if not path:
            return
        self.log["found"] = bool(self.log["applied"])
        if not self.log["applied"] and self.log["hooked"]:
            sys.stderr.write(f"msoverflow: the precision patch target ({self.target.describe()}) was never found "
                             f"in any network this run called; searched: "
                             f"{', '.join(s['root'] for s in self.log['searched']) or 'no Cell was ever called'}\n")
        # one log per process: a launcher (msrun) and each of its workers all run this hook
        with open(f"{path}.{os.getpid()}", "w", encoding="utf-8") as fh:
            json.dump(self.log, fh, indent=2)


_state: Optional[_State] = None


def install() -> None:
    """Activate the runtime patch $MSOVERFLOW_PATCH_SPEC describes in this process (no-op when it is unset)."""
    global _state
    spec = read_spec()
    if spec is None:
        return
    _state = _State(spec)
    atexit.register(_state.write_log)
    when_cell_module_loads(_wrap_cell_call)


def _wrap_cell_call(module) -> None:
    assert _state is not None           # install() made it before asking for this
    cell_class = module.Cell
    original_call = cell_class.__call__
    original_init = cell_class.__init__

    def __init__(self, *args, **kwargs):
        if any(k.__name__ == "Optimizer" for k in type(self).__mro__):
            _patch_built_roots()
        original_init(self, *args, **kwargs)
        _state.cells.append(weakref.ref(self))

    def __call__(self, *args, **kwargs):
        local = _state.local
        depth = getattr(local, "depth", 0)
        if depth == 0 and id(self) not in _state.visited:
            _state.visited.add(id(self))
            _patch_root(self)
        local.depth = depth + 1
        try:
            return original_call(self, *args, **kwargs)
        finally:
            local.depth = depth

    cell_class.__init__ = __init__
    cell_class.__call__ = __call__
    _state.log["hooked"] = True


def _patch_built_roots() -> None:
    """Patch every Cell built so far that is nobody's child (the networks), once each."""
    assert _state is not None           # called from the Cell hooks install() set
    alive = [c for c in (ref() for ref in _state.cells) if c is not None]
    _state.cells = [weakref.ref(c) for c in alive]
    children: Set[int] = set()
    for cell in alive:
        children.update(id(child) for child in vars(cell).get("_cells", {}).values() if child is not None)
    for cell in alive:
        if id(cell) in children or id(cell) in _state.visited or not vars(cell).get("_cells"):
            continue
        _state.visited.add(id(cell))
        _patch_root(cell)


def _patch_root(root) -> None:
    assert _state is not None           # called from the Cell hooks install() set
    from .runtime import TargetNotFound, apply
    name = type(root).__name__
    try:
        result = apply(root, _state.target, _state.dtype)
    except TargetNotFound as exc:
        _state.log["searched"].append({"root": name, "message": str(exc)})
        return
    except Exception as exc:  # reported by the verifier; the run goes on unpatched
        _state.log["errors"].append({"root": name, "message": f"{type(exc).__name__}: {exc}"})
        sys.stderr.write(f"msoverflow: applying the precision patch to {name} failed: {exc}\n")
        return
    entry = {"root": name, **result.to_dict()}
    _state.log["applied"].append(entry)
    if not _state.spec.get("log"):     # with a log, the verifier shows what was applied, once
        sys.stderr.write(f"msoverflow: {result.describe()}\n")
