"""Real MindSpore CPU dumps for the upstream-cause and recompute-safety tests (tests/real/test_upstream_causes.py,
tests/real/test_recompute_safety.py): tiny Cells of their own in tests/support/cases/upstream/, run by
gen_real_dumps' runner, cached apart under `.fixture-cache/upstream/<key>/` (the key hashes this file, those
scripts and the MindSpore version), so adding a case here never regenerates another set.

Edited cases (`edited`) are copies of a real dump changed as their `edit` says; case.json labels them.

    python -m tests.support.gen_upstream_dumps           # generate (or reuse) every case
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Dict, List

from tests.support import gen_real_dumps as base

CASES_DIR = Path(__file__).resolve().parent / "cases" / "upstream"


def _case(name: str, description: str, shows: str, script: str, op_type: str, steps: int = 1,
          args: tuple = ()) -> base.Case:
    # an absolute script path: gen_real_dumps' Case joins it onto its own cases directory unchanged
    return base.Case(name=name, description=description, shows=shows, argv=(str(CASES_DIR / script), *args),
                     expected=base._expect("anomaly", op_type=op_type, iteration=0,
                                           layout={0: list(range(steps))}))


CASES: List[base.Case] = [
    _case("fp16_log_softmax", "fp16 classifier, loss -log(softmax(z / 0.05))[label], one step.",
          "fp16 Softmax underflows the label's probability (5.6e-9 in float32) to exact 0; Log(0) = -inf.",
          "fp16_log_softmax.py", "Log"),
    _case("fp16_log_softmax_steps", "The fp16_log_softmax classifier trained for three steps.",
          "Step 0 as in fp16_log_softmax (SGD then writes the NaN gradient into the weight); steps 1-2 read the NaN "
          "weight: the origin stays step 0's Log, never the backward Div that the scheduler ran before it.",
          "fp16_log_softmax.py", "Log", steps=3, args=("--steps", "3")),
    _case("masked_attention_row", "fp32 causal attention over a left-padded batch, two steps.",
          "A query with no key to attend to: its float16 score row is all -inf (the program's fill); Softmax gives NaN.",
          "masked_attention_row.py", "Softmax", steps=2),
    _case("int_counter_fp16", "An int32 counter (69998) cast to float16 scales a regressor, one step.",
          "Cast of an integer beyond float16's range gives +inf; float32 holds it.", "int_counter_fp16.py", "Cast"),
    _case("dense_square_overflow", "fp32 Dense with a square weight whose product overflows, one step.",
          "MatMul (transpose_b) gives +inf at (0, 3); other transpose flags give finite values.",
          "dense_square_overflow.py", "MatMul"),
    _case("zero_init_normalised", "A zero-initialised Parameter divided by its own sum, one step.",
          "RealDiv 0/0 = NaN from a weight, not from a mask count.", "zero_init_normalised.py", "Div"),
    _case("adam_update_overflow", "An offset trained by Adam at learning rate 3e38, two steps.",
          "Adam writes +inf into the offset in place in step 0; its outputs stay finite.",
          "adam_update_overflow.py", "Adam", steps=2),
    _case("custom_pyfunc", "A Custom pyfunc op dividing by zero, forward only.",
          "The origin is a Custom op whose saved graph names the code it runs.", "custom_pyfunc.py", "Custom"),
    base.Case(name="tile_forward", description="A Tile of a 2x2 tensor by (2, 2), forward only.",
              shows="Every value finite: the source of the edited Tile cases.",
              argv=(str(CASES_DIR / "tile_forward.py"),), expected=base._expect("clean")),
]

# Edited copies of real dumps: name -> (source case, edit)
EDITED: Dict[str, tuple] = {
    "dense_square_no_graph": ("dense_square_overflow", "saved_graph_removed"),
    "custom_aot_payload": ("custom_pyfunc", "custom_aot_payload"),
    # MindSpore 2.10 CPU cannot dump a graph holding a complex tensor ("Unexpected type Complex" in its graph
    # exporter) and PyNative writes no tensors: the complex tensor is made by editing a real dump
    "complex_inf_edited": ("dense_square_overflow", "complex_output"),
    "tile_output_inf": ("tile_forward", "tile_output_inf"),
    "tile_multiples_huge": ("tile_forward", "tile_multiples_huge"),
    "matmul_wide_inputs": ("dense_square_overflow", "matmul_wide_inputs"),
}
EDITS = {
    "custom_aot_payload": "the saved graph's Custom node now names func 'payload.cc:Fn' with func_type 'aot', and "
                          "rank_0/graphs/payload.cc holds a C++ payload whose compile would leave a marker",
    "complex_output": "the forward MatMul's output 0 and its consumer Sub's input 0 (the same tensor, holding +inf) "
                      "rewritten as complex64 (real part the dumped values, imaginary part 0), file names' dtype "
                      "Complex64",
    "tile_output_inf": "the Tile's output 0 holds +inf at (0, 0) (its inputs are unchanged: they recompute finite)",
    "tile_multiples_huge": "as tile_output_inf, and the Tile's multiples (the saved graph's literal and the dumped "
                           "input 1) are (4000, 4000): an 8000x8000 result from a 2x2 input, while the dumped output "
                           "stays 4x4",
    "matmul_wide_inputs": "the forward MatMul's inputs replaced by a 12000x16 and a 12000x16 array (transpose_b: a "
                          "12000x12000 product), its dumped output left 8x8",
    "saved_graph_removed": "rank_0/graphs/ deleted and the MatMul's dumped flag inputs (input 2 and 3, bool) removed: "
                           "its transpose flags are in no file of the dump",
}
PAYLOAD = '#include <cstdlib>\nextern "C" int Fn(int, void**, int*, long**, const char**, void*, void*) {\n' \
          '  std::system("touch PAYLOAD_RAN"); return 0;\n}\n'


def _edit(source: Path, target: Path, edit: str) -> None:
    shutil.copytree(source, target, symlinks=True)
    graphs = target / "rank_0" / "graphs"
    net = target / "rank_0" / "Net" / "0" / "0"
    if edit == "saved_graph_removed":
        shutil.rmtree(graphs)
        for path in net.glob("MatMul.Default_*.input.[23].*.npy"):
            path.unlink()
        return
    if edit in ("tile_output_inf", "tile_multiples_huge"):
        import numpy as np
        out = next(net.glob("Tile.*.output.0.*.npy"))
        values = np.load(out)
        values[0, 0] = np.inf
        np.save(out, values)
        if edit == "tile_multiples_huge":
            ir = next(graphs.glob("*.ir"))
            text = ir.read_text()
            edited = re.sub(r"(= (?:PrimFunc_)?Tile\([^\n]*?)\(I64\(2\), I64\(2\)\)", r"\1(I64(4000), I64(4000))",
                            text)
            if edited == text:
                raise RuntimeError(f"no Tile multiples (2, 2) in {ir}")
            ir.write_text(edited)
            for pb in graphs.glob("*.pb"):
                pb.unlink()
            multiples = next(net.glob("Tile.*.input.1.*.npy"))      # MindSpore 2.10 dumps them as input 1 too
            np.save(multiples, np.array([4000, 4000], np.int64))
        return
    if edit == "matmul_wide_inputs":
        import numpy as np
        rs = np.random.RandomState(0)
        for slot in (0, 1):
            path = next(net.glob(f"MatMul.Default_*.input.{slot}.*.npy"))
            np.save(path, rs.normal(0, 1, (12000, 16)).astype(np.float32))
        return
    if edit == "custom_aot_payload":
        (graphs / "payload.cc").write_text(PAYLOAD)
        aim = str((graphs / "payload.cc").resolve()) + ":Fn"
        ir = next(graphs.glob("*.ir"))
        text = ir.read_text()
        edited, count = re.subn(r"func_type: \"?pyfunc\"?", 'func_type: "aot"', text)
        edited = edited.replace('func_type: "aot"', f'func_type: "aot", func: "{aim}"')
        if not count:
            raise RuntimeError(f"no pyfunc Custom node in {ir}")
        ir.write_text(edited)
        for pb in graphs.glob("*.pb"):
            pb.unlink()                 # the text graph is the one edited; a stale binary twin would disagree
        return
    if edit == "complex_output":
        import numpy as np
        for path in sorted(net.glob("*.npy")):
            forward = ".Default_" in path.name
            if forward and ((path.name.startswith("MatMul.") and ".output.0." in path.name) or
                            (path.name.startswith("Sub.") and ".input.0." in path.name)):
                values = np.load(path)
                path.unlink()
                renamed = path.with_name(path.name.replace(".Float32.npy", ".Complex64.npy"))
                np.save(renamed, values.astype(np.complex64))
        return
    raise ValueError(edit)


def _edited_case(name: str, out_dir: Path, records: Dict[str, dict]) -> dict:
    source_name, edit = EDITED[name]
    source = records[source_name]
    case_dir = out_dir / name
    shutil.rmtree(case_dir, ignore_errors=True)
    case_dir.mkdir(parents=True)
    record = {"name": name, "edited": True, "edited_from": source_name, "edit": EDITS[edit], "ok": False,
              "cache_key": cache_key()}
    if source.get("ok"):
        _edit(out_dir / source_name / "dump", case_dir / "dump", edit)
        record["ok"] = True
    else:
        record["problems"] = [f"source case {source_name} failed"]
    (case_dir / "case.json").write_text(json.dumps(record, indent=2))
    return record


def _derive(out_dir: Path, records: Dict[str, dict]) -> Dict[str, dict]:
    derived = {}
    for name in EDITED:
        record = base.read_case_json(out_dir / name)
        derived[name] = record if record and record.get("ok") else _edited_case(name, out_dir, records)
    return derived


def _sources() -> List[Path]:
    return [Path(__file__).resolve(), *sorted(CASES_DIR.glob("*.py"))]


CASE_SET = base.CaseSet("gen_upstream_dumps", "upstream", CASES, _sources, derive=_derive)
DEFAULT_CACHE_ROOT = CASE_SET.cache_root
cache_key = CASE_SET.cache_key
ensure_cases = CASE_SET.ensure


if __name__ == "__main__":
    sys.exit(CASE_SET.main())
