"""Carries one installer into an unmodified training process through a generated `sitecustomize.py`.

`patch --verify` (msoverflow/patch/hook.py: the runtime precision patch) and `hunt` (msoverflow/hunt/instrument.py:
the live watch) both reach the user's script this way. The caller writes the hook naming its own installer module;
Python runs sitecustomize at start-up, which imports that module and calls its `install()`. The installer reads
its spec with `read_spec()` and usually waits for `mindspore.nn.cell` with `when_cell_module_loads()`, so nothing
is compiled before it is in place. This module sits below both callers: neither imports the other.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from typing import Callable, Optional

SPEC_ENV = "MSOVERFLOW_PATCH_SPEC"

_SITECUSTOMIZE = '''\
# Written by msoverflow (`patch --verify` / `hunt`): loads @INSTALLER@ into this Python process.
import os as _os
import sys as _sys
try:
    from @INSTALLER@ import install as _msoverflow_install
    _msoverflow_install()
except Exception as _exc:  # the training must still start; msoverflow reports what did not happen
    _sys.stderr.write("msoverflow: could not install the hook: %r\\n" % (_exc,))
# Run the sitecustomize this file shadows, if there is one.
_here = _os.path.dirname(_os.path.abspath(__file__))
try:
    import importlib.machinery as _machinery
    _spec = _machinery.PathFinder.find_spec(
        "sitecustomize", [p for p in _sys.path if _os.path.abspath(p or ".") != _here])
    if _spec is not None and _spec.loader is not None:
        _module = type(_os)("_shadowed_sitecustomize")
        _module.__file__ = _spec.origin
        _spec.loader.exec_module(_module)
except Exception as _exc:
    _sys.stderr.write("msoverflow: the original sitecustomize failed: %r\\n" % (_exc,))
'''


def write_hook(hook_dir: str, spec: dict, spec_path: str, installer: str) -> dict:
    """Write sitecustomize (calling `installer`.install()) and the spec; return the environment variables that
    activate them in a child process."""
    if not installer.replace(".", "").replace("_", "").isalnum():
        raise ValueError(f"not a module name: {installer!r}")
    os.makedirs(hook_dir, exist_ok=True)
    with open(os.path.join(hook_dir, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(_SITECUSTOMIZE.replace("@INSTALLER@", installer))
    with open(spec_path, "w", encoding="utf-8") as fh:
        json.dump(spec, fh, indent=2)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [hook_dir, package_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {SPEC_ENV: spec_path, "PYTHONPATH": os.pathsep.join(paths)}


_spec_taken = False


def read_spec() -> Optional[dict]:
    """The spec named by $MSOVERFLOW_PATCH_SPEC, handed out once per process (None when unset or already taken:
    an installer must not run twice)."""
    global _spec_taken
    spec_path = os.environ.get(SPEC_ENV)
    if not spec_path or _spec_taken:
        return None
    _spec_taken = True
    with open(spec_path, encoding="utf-8") as fh:
        return json.load(fh)


def when_cell_module_loads(callback: Callable) -> None:
    """Call `callback(mindspore.nn.cell)` now if that module is loaded, else right after it loads."""
    module = sys.modules.get("mindspore.nn.cell")
    if module is not None:
        callback(module)
    else:
        sys.meta_path.insert(0, _CellModuleWatcher(callback))


class _CellModuleWatcher(importlib.abc.MetaPathFinder):
    """Lets `mindspore.nn.cell` load normally, then hands it to the callback."""

    def __init__(self, callback: Callable):
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != "mindspore.nn.cell":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            self.callback(module)

        spec.loader.exec_module = exec_module
        sys.meta_path.remove(self)
        return spec
