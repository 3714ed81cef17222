"""Source patch (libcst) on a copy of the demo model: the diff, --write, idempotence, refusals, bf16 structure.
Running the patched copy is in test_patch_verify.py (real MindSpore)."""
import ast
import os

import pytest

from msoverflow import cli
from msoverflow.patch import source_patch
from tests.support.patch_reports import DEMO_MODEL, NORM_LINE_CODE, demo_norm_line, hand_report, write_report


@pytest.fixture
def model_copy(tmp_path):
    path = tmp_path / "model.py"
    path.write_bytes(DEMO_MODEL.read_bytes())
    return path


def _norm_head_construct(code: str) -> ast.FunctionDef:
    tree = ast.parse(code)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NormHead")
    return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "construct")


def test_patch_island_is_the_normalisation_and_leaves_the_rest_byte_identical(model_copy):
    patch = source_patch.plan(str(model_copy), demo_norm_line(), "float32", code=NORM_LINE_CODE)
    assert patch.function == "NormHead.construct"
    construct = ast.unparse(_norm_head_construct(patch.patched))
    # the culprit, what feeds it (the Parameter read) and its direct consumer are in the island
    assert construct.count("_msoverflow_widen_float32(self.weight)") == 2
    assert "_msoverflow_widen_float32(self.eps)" in construct
    # the value leaving the island goes back to its dtype; the boundary MatMul and its cast are untouched
    assert "norm_weight = _msoverflow_like(norm_weight, self.weight)" in construct
    assert "return self.matmul(self.cast(hidden_states, self.compute_dtype), norm_weight)" in construct
    assert "hidden_states = _msoverflow_widen" not in construct
    # every other class is untouched, byte for byte
    original_lines = model_copy.read_text().splitlines()
    patched_lines = patch.patched.splitlines()
    for name in ("RMSNorm", "MLP", "DecoderLayer", "TinyBaichuan", "CausalLMLoss"):
        start = next(i for i, l in enumerate(original_lines) if l.startswith(f"class {name}("))
        new_start = next(i for i, l in enumerate(patched_lines) if l.startswith(f"class {name}("))
        end = next((i for i in range(start + 1, len(original_lines)) if original_lines[i].startswith("class ")),
                   len(original_lines))
        assert patched_lines[new_start:new_start + end - start] == original_lines[start:end]
    # the diff rewrites the three island lines, each saying why, and adds the exit cast and the helpers
    diff = patch.diff().splitlines()
    removed = [l for l in diff if l.startswith("-") and not l.startswith("---")]
    assert len(removed) == 3 and all("self." in l for l in removed)
    changed = [l for l in diff if l.startswith("+        ") and "=" in l]
    assert len(changed) == 4 and all("# msoverflow:" in l for l in changed)


def test_write_targets_are_never_cast(tmp_path):
    """Assign/AssignAdd/scatter/ops.assign first arguments and set_data objects stay as they are; the value
    written is cast to the target's own dtype."""
    path = tmp_path / "head.py"
    path.write_text(
        "import mindspore as ms\n"
        "from mindspore import nn, ops, Parameter, Tensor\n"
        "from mindspore.ops import operations as P\n\n\n"
        "class Head(nn.Cell):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.weight = Parameter(Tensor([1.0], ms.float16), name='w')\n"
        "        self.moment = Parameter(Tensor([0.0], ms.float16), name='m')\n"
        "        self.assign = P.Assign()\n"
        "        self.acc = P.AssignAdd()\n\n"
        "    def construct(self, x):\n"
        "        norm = ops.sqrt(ops.square(self.weight).sum())\n"
        "        self.assign(self.weight, self.weight / norm)\n"
        "        ops.assign(self.weight, self.weight / norm)\n"
        "        self.acc(self.moment, self.weight / norm)\n"
        "        ops.scatter_update(self.moment, ops.zeros(1, ms.int32), self.weight / norm)\n"
        "        self.weight.set_data(self.weight / norm)\n"
        "        return x * norm\n")
    patch = source_patch.plan(str(path), 15, "float32")
    construct = ast.unparse(next(n for n in ast.parse(patch.patched).body if isinstance(n, ast.ClassDef))
                            .body[1])
    wide = "_msoverflow_widen_float32(self.weight) / norm"
    for call in (f"self.assign(self.weight, _msoverflow_like({wide}, self.weight))",
                 f"ops.assign(self.weight, _msoverflow_like({wide}, self.weight))",
                 f"self.acc(self.moment, _msoverflow_like({wide}, self.moment))",
                 f"ops.scatter_update(self.moment, ops.zeros(1, ms.int32), _msoverflow_like({wide}, self.moment))",
                 f"self.weight.set_data(_msoverflow_like({wide}, self.weight))",
                 "return _msoverflow_like(_msoverflow_widen_float32(x) * norm, x)"):
        assert call in construct, call
    assert "widen_float32(self.moment)" not in construct
    assert "# msoverflow: precision island" in patch.patched and "cast back" not in patch.patched


def test_write_is_atomic_with_backup_and_second_run_is_already_patched(model_copy, tmp_path, capsys):
    report = write_report(tmp_path, hand_report(source_file=str(model_copy)))
    assert cli.main(["patch", "--from", str(report), "--how", "source"]) == 0
    assert model_copy.read_bytes() == DEMO_MODEL.read_bytes(), "without --write only the diff is shown"
    assert "+        # msoverflow: precision island" in capsys.readouterr().out
    os.chmod(model_copy, 0o640)
    assert cli.main(["patch", "--from", str(report), "--write"]) == 0
    backup = tmp_path / "model.py.orig"
    assert backup.read_bytes() == DEMO_MODEL.read_bytes()
    assert oct(os.stat(model_copy).st_mode & 0o777) == oct(0o640)
    patched = model_copy.read_bytes()
    assert not list(tmp_path.glob(".msoverflow-*")), "no temp file left behind"
    capsys.readouterr()
    # The report's line number now points elsewhere in the patched file: still recognised as patched.
    assert cli.main(["patch", "--from", str(report), "--write"]) == 3      # no change reaches the culprit
    out = capsys.readouterr().out
    assert "already patched" in out and "no change made (exit 3)" in out
    assert model_copy.read_bytes() == patched
    assert not (tmp_path / "model.py.orig.1").exists()


def test_moved_line_is_found_again_by_its_code(model_copy):
    text = model_copy.read_text()
    model_copy.write_text("# a new first line\n# and a second\n" + text)
    patch = source_patch.plan(str(model_copy), demo_norm_line(), "float32", code=NORM_LINE_CODE)
    assert patch.line == demo_norm_line() + 2
    assert patch.function == "NormHead.construct"


def test_refuses_files_it_cannot_parse_and_lines_outside_compute(tmp_path, model_copy, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("class NormHead(nn.Cell:\n    def construct(self, x):\n        return x\n")
    assert cli.main(["patch", "--cell", "NormHead", "--source", str(broken), "--line", "3"]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "cannot parse" in err and "Traceback" not in err
    init_line = next(i + 1 for i, l in enumerate(model_copy.read_text().splitlines())
                     if "self.weight = Parameter" in l and i > demo_norm_line() - 20)
    with pytest.raises(source_patch.UserError, match="__init__"):
        source_patch.plan(str(model_copy), init_line, "float32")
    with pytest.raises(source_patch.UserError, match="does not hold"):
        source_patch.plan(str(model_copy), demo_norm_line(), "float32", code="norm = something_else()")


def test_bfloat16_patch_structure(model_copy):
    """bf16 Sqrt/MatMul do not run on CPU: the bf16 patch is checked by its structure only."""
    patch = source_patch.plan(str(model_copy), demo_norm_line(), "bfloat16", code=NORM_LINE_CODE)
    tree = ast.parse(patch.patched)
    helper = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_msoverflow_widen_bfloat16")
    helper_code = ast.unparse(helper)
    assert "x.dtype in (mstype.float16,)" in helper_code      # bf16 and fp32 inputs are left alone, fp16 widened
    assert "ops.cast(x, mstype.bfloat16)" in helper_code and "isinstance(x, Tensor)" in helper_code
    construct = ast.unparse(_norm_head_construct(patch.patched))
    assert "_msoverflow_widen_bfloat16(self.weight)" in construct
    assert "self.cast(hidden_states, self.compute_dtype)" in construct   # boundary op keeps its dtype


def test_casts_to_int_or_float32_are_left_alone(tmp_path):
    path = tmp_path / "cells.py"
    path.write_text(
        "from mindspore import nn, ops\n"
        "from mindspore import dtype as mstype\n\n\n"
        "class Attn(nn.Cell):\n"
        "    def construct(self, scores, mask):\n"
        "        mask = ops.cast(mask, mstype.int32)  # keep\n"
        "        probs = ops.softmax(ops.cast(scores, mstype.float16), -1)\n"
        "        return ops.cast(probs, mstype.float32) * mask\n")
    patch = source_patch.plan(str(path), 8, "float32")
    assert "ops.cast(mask, mstype.int32)  # keep" in patch.patched
    assert "ops.softmax(ops.cast(scores, mstype.float32), -1)" in patch.patched     # the script's own names
    assert "import mindspore\n" not in patch.patched
    assert "return ops.cast(probs, mstype.float32) * mask" in patch.patched
    compile(patch.patched, str(path), "exec")


def _top_level(patched):
    """(kind, name) of each top-level statement: ("import", line) / ("def", name) / ("class", name) / ("other", ...)."""
    out = []
    for node in ast.parse(patched).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(("import", ast.unparse(node)))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(("def" if isinstance(node, ast.FunctionDef) else "class", node.name))
        else:
            out.append(("other", ast.unparse(node)[:40]))
    return out


CELL = ("class Head(nn.Cell):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.weight = Parameter(Tensor(np.ones((4, 4)), {dtype}.float16), name='w')\n\n"
        "    def construct(self, x):\n"
        "        norm = ops.sqrt(ops.reduce_sum(self.weight * self.weight))\n"
        "        return x / norm\n")


@pytest.mark.parametrize("header,names", [
    # MindFormers' style: no `import mindspore`, an import-only try block in the middle of the imports
    ("import numpy as np\nimport mindspore.common.dtype as mstype\ntry:\n    from mindspore._checkparam import "
     "Validator\nexcept ImportError:\n    import mindspore._checkparam as Validator\nfrom mindspore import Tensor, "
     "nn, ops\nfrom mindspore.common.parameter import Parameter\n", ("Tensor", "ops.cast", "mstype")),
    # a user script: `ms`, imported after a sys.path line
    ("import sys\nsys.path.append('.')\nimport numpy as np\nimport mindspore as ms\nfrom mindspore import nn, "
     "Parameter\nops = ms.ops\n", ("ms.Tensor", "ms.ops.cast", "ms")),
])
def test_helpers_follow_the_scripts_imports_and_use_its_names(tmp_path, header, names):
    """Issue 27: the helpers went above the script's own MindSpore import and `import mindspore` was added beside
    `import mindspore as ms` / MindFormers' `mstype`, `Tensor`, `ops`. They go after the last import (before the
    first definition) and use the script's names; nothing is imported."""
    tensor, cast, dtype = names
    path = tmp_path / "head.py"
    path.write_text(header + "\n\n" + CELL.format(dtype=dtype))
    line = path.read_text().splitlines().index("        norm = ops.sqrt(ops.reduce_sum(self.weight * self.weight))") + 1
    patch = source_patch.plan(str(path), line, "float32")
    assert not any("import mindspore added" in c for c in patch.changes), patch.changes
    assert patch.patched.count("import mindspore\n") == header.count("import mindspore\n")
    layout = _top_level(patch.patched)
    helpers = [i for i, (kind, name) in enumerate(layout) if kind == "def" and name.startswith("_msoverflow")]
    last_import = max(i for i, (kind, _) in enumerate(layout) if kind == "import")
    first_class = next(i for i, (kind, _) in enumerate(layout) if kind == "class")
    assert helpers and last_import < min(helpers) and max(helpers) < first_class, layout
    helper = ast.unparse(next(n for n in ast.parse(patch.patched).body if isinstance(n, ast.FunctionDef)))
    assert f"isinstance(x, {tensor})" in helper and f"{cast}(x, {dtype}.float32)" in helper, helper
    assert f"{dtype}.float16" in helper
    compile(patch.patched, str(path), "exec")


def test_import_mindspore_is_added_after_the_imports_when_no_name_serves(tmp_path):
    path = tmp_path / "head.py"
    path.write_text("import numpy as np\nimport mindspore.nn as nn\nfrom mindspore.common.parameter import Parameter"
                    "\nfrom mindspore.common.tensor import Tensor\nfrom mindspore.ops import operations as P\n\n\n"
                    + CELL.format(dtype="mindspore").replace("ops.", "P."))
    line = next(i + 1 for i, text in enumerate(path.read_text().splitlines()) if "P.sqrt" in text)
    patch = source_patch.plan(str(path), line, "float32")
    layout = _top_level(patch.patched)
    assert [entry for entry in layout if entry[0] == "import"][-1] == ("import", "import mindspore"), layout
    helper = ast.unparse(next(n for n in ast.parse(patch.patched).body if isinstance(n, ast.FunctionDef)))
    assert "isinstance(x, mindspore.Tensor)" in helper and "mindspore.ops.cast(x, mindspore.float32)" in helper
