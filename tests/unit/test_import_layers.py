"""House rules as tests (issue 33 item 5): the import layers. Read from the source (every import, at module level or
inside a function; `if TYPE_CHECKING:` blocks left out, they never run):
- no circle among the package's modules, nor among its rooms (a top-level module, or a subpackage as one room);
- the model and the readers are at the bottom: they import nothing above them;
- renderers are above: they read findings, never a dump, and only the commands and the package's own formatter
  registration import them (the notebook display of a Report is a formatter registered with the model, not an
  import of a renderer by the model)."""
import ast
import os
from typing import Dict, List, Set

import msoverflow

PACKAGE = os.path.dirname(msoverflow.__file__)
BOTTOM = {"msoverflow.model": {"msoverflow.values", "msoverflow.dtypes", "msoverflow.errors", "msoverflow.report_dict"},
          "msoverflow.values": {"msoverflow.dtypes"}, "msoverflow.dtypes": set(), "msoverflow.errors": set(),
          "msoverflow.report_dict": set(), "msoverflow.names": {"msoverflow.dtypes"},
          "msoverflow.safeio": {"msoverflow.errors", "msoverflow.names"}}
READERS_MAY_IMPORT = {"msoverflow.model", "msoverflow.names", "msoverflow.safeio", "msoverflow.errors",
                      "msoverflow.dtypes", "msoverflow.values", "msoverflow.logs", "msoverflow.layout"}
# what reads a dump: a renderer imports none of it
DUMP_READING = ("msoverflow.layout", "msoverflow.walk", "msoverflow.readers", "msoverflow.evaluate",
                "msoverflow.analysis", "msoverflow.findings", "msoverflow.completeness", "msoverflow.harmless",
                "msoverflow.parallel", "msoverflow.rank_rows", "msoverflow.assemble", "msoverflow.api",
                "msoverflow.commands", "msoverflow.cli")
RENDER_IMPORTERS = ("msoverflow.commands.", "msoverflow.render", "msoverflow.config.runner", "msoverflow.patch.verify")


def _module(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(path: str, known: Set[str]) -> Set[str]:
    tree = ast.parse(open(path, encoding="utf-8").read())
    module = _module(path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    skipped = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in
               ast.unparse(node.test) for sub in ast.walk(node)}
    found: Set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                target = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "msoverflow" or target.startswith("msoverflow."):
                found |= {f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("msoverflow")}
    return found - {module}


def _graph() -> Dict[str, Set[str]]:
    paths = [os.path.join(d, f) for d, _dirs, files in os.walk(PACKAGE) for f in files if f.endswith(".py")]
    known = {_module(p) for p in paths}
    return {_module(p): _imports(p, known) for p in paths}


def _circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return module
    return ".".join(parts[:2]) if os.path.isdir(os.path.join(PACKAGE, parts[1])) else module


def test_no_circle_among_modules_nor_rooms():
    graph = _graph()
    assert _circles(graph) == []
    rooms: Dict[str, Set[str]] = {}
    for module, deps in graph.items():
        if module == "msoverflow":        # the package's __init__: the top, it registers the formatters
            continue
        rooms.setdefault(_room(module), set()).update(_room(d) for d in deps if _room(d) != _room(module))
    assert _circles(rooms) == []


def test_the_model_and_the_readers_are_at_the_bottom():
    graph = _graph()
    for module, allowed in BOTTOM.items():
        assert graph[module] <= allowed, (module, sorted(graph[module] - allowed))
    for module, deps in graph.items():
        if module.startswith("msoverflow.readers"):
            above = {d for d in deps if not d.startswith("msoverflow.readers") and d not in READERS_MAY_IMPORT}
            assert not above, (module, sorted(above))


def test_renderers_are_above_and_read_no_dump():
    graph = _graph()
    for module, deps in graph.items():
        if module.startswith("msoverflow.render"):
            reading = sorted(d for d in deps if d.startswith(DUMP_READING))
            assert not reading, (module, reading)
        elif module != "msoverflow" and not module.startswith(RENDER_IMPORTERS):
            assert not any(d.startswith("msoverflow.render") for d in deps), module


def test_a_report_shows_itself_through_a_registered_formatter():
    """The circle the notebook display hooks made (model -> render/notebook -> ... -> model) stays closed: the
    model looks its repr and card up among registered formatters; the package registers render/notebook's."""
    from msoverflow import model
    assert not any(d.startswith("msoverflow.render") for d in _graph()["msoverflow.model"])
    assert {("Report", "repr"), ("Report", "html"), ("Comparison", "repr"), ("Comparison", "html")} <= set(
        model._FORMATTERS)
