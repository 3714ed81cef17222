"""comparison/ reads one way, like analyze (issue 34 item 6): each stage imports only the stages below it, and the
Comparison model (comparison/model.py) imports nothing else of comparison/ or of the renderers."""
import ast
from pathlib import Path

import msoverflow.comparison

PACKAGE = Path(msoverflow.comparison.__file__).parent
# bottom first: a module may import (inside comparison/) only modules before it
ORDER = ["model", "names", "metrics", "sides", "pairing", "judge", "rank", "assemble", "__init__"]


def _imports(module: str):
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_every_module_is_in_the_order():
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(ORDER)


def test_stages_import_only_what_lies_below_them():
    for i, module in enumerate(ORDER):
        assert _imports(module) <= set(ORDER[:i]), (module, _imports(module) - set(ORDER[:i]))


def test_the_model_is_at_the_bottom():
    tree = ast.parse((PACKAGE / "model.py").read_text())
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    modules = {n.module for n in top_level if isinstance(n, ast.ImportFrom)}
    assert not [m for m in modules if m and m.startswith(("render", "comparison", "walk", "layout"))], modules
    assert _imports("model") == set()
