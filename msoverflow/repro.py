"""`msoverflow repro`: a standalone script that re-runs the report's origin op alone, from its own dumped inputs.

The origin's input tensors are found again in the dump (same rank, step and op name), copied out of it into the
output directory (the dump is never written to), and a script is written next to them. The script re-runs the op
itself (a forward op), or, for a backward kernel, its forward op's gradient (SqrtGrad through Sqrt's vjp), once
in the dumped dtype and once in float32 (and bfloat16 where the device has it), and prints max |x| and the inf/NaN
counts of each output. No MindSpore import here: only the written script imports it.
"""
from __future__ import annotations

import json
import os
import pprint
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from .errors import UserError, reading

# Backward kernels re-run through their forward op's gradient: how the forward input is rebuilt from the
# kernel's inputs (y = forward output, dy = incoming gradient), by a named rule of the written script (its REBUILD
# table; "x" says it in words). Others run as the kernel primitive itself.
VJP_FORMS = {
    "SqrtGrad": {"forward": "Sqrt", "rebuild": "square", "x": "y * y", "y": 0, "dy": 1},
    "RsqrtGrad": {"forward": "Rsqrt", "rebuild": "reciprocal_square", "x": "1.0 / (y * y)", "y": 0, "dy": 1},
}


@dataclass
class Repro:
    out_dir: str
    script: str
    inputs: List[str] = field(default_factory=list)
    op_type: str = ""
    how: str = ""
    cause: str = ""                                        # the analysis' cause of the origin, with its reason
    samples: List[dict] = field(default_factory=list)      # bad elements: dumped beside recomputed values

    def describe(self) -> str:
        lines = [f"repro of {self.op_type} ({self.how}) in {self.out_dir}",
                 f"  script: {self.script}"]
        lines += [f"  input : {p}" for p in self.inputs]
        if self.cause:
            lines.append(f"  cause : {self.cause}")
        if self.samples:
            lines.append("  the bad values, dumped and recomputed from these inputs (msoverflow's reference kernels):")
            lines += [f"    {text}" for text in sample_lines(self.samples)]
        lines.append(f"  run it: python {self.script} [--device CPU|Ascend|GPU]")
        return "\n".join(lines)


def sample_lines(samples: List[dict]) -> List[str]:
    """One line per bad element: its index, the dumped value and the recomputed one per precision."""
    lines = []
    for sample in samples:
        values = ", ".join(f"{dtype} {value}" for dtype, value in (sample.get("recomputed") or {}).items())
        lines.append(f"at {tuple(sample.get('index') or ())}: dumped {sample.get('dumped')}; recomputed {values}")
    return lines


def _samples(first: dict, execution) -> tuple:
    """The report's cause and samples of the origin (an older report without them: recomputed here)."""
    diagnosis = first.get("diagnosis") if isinstance(first.get("diagnosis"), dict) else None
    if diagnosis is not None and isinstance(diagnosis.get("samples"), list):
        return first.get("cause"), diagnosis.get("reason") or "", diagnosis["samples"], diagnosis.get("output_slot")
    from .cause.cause import diagnose
    from .evaluate import TensorAccess
    from .report_dict import cause_dict
    cause = diagnose(execution, TensorAccess(lambda message: None), mindspore=False)
    return cause.cause, cause.reason, cause_dict(cause)["samples"], cause.output_slot


def find_origin_inputs(report: dict, dump_dir: Optional[str] = None):
    """The origin's execution in the dump: its input events in slot order, and the output events."""
    from . import walk
    first = report.get("first") or {}
    if report.get("verdict") == "clean" or not first:
        raise UserError("the report has no origin: nothing to reproduce")
    root = dump_root_of(report, dump_dir)
    rank, step = _origin_int(first, "rank"), _origin_int(first, "iteration")
    notes: List[str] = []
    executions = [ex for unit in walk.units(root, [rank], [step], notes.append)
                  for ex in walk.unit_executions(unit, notes.append)]
    candidates = [ex for ex in executions
                  if ex.op_name == first.get("op_name") and str(ex.graph) == str(first.get("graph"))]
    if not candidates:
        candidates = [ex for ex in executions if ex.op_name == first.get("op_name")]
    if not candidates:
        raise UserError(f"{root}: no dump files of {first.get('op_name')} at rank {rank} step {step}")
    stamp = first.get("timestamp")
    execution = min(candidates, key=lambda ex: abs(ex.time - stamp) if isinstance(stamp, int) else 0)
    if not execution.inputs:
        raise UserError(f"{root}: the dump holds no input tensors of {first.get('op_name')} (dump inputs too: "
                        f"msoverflow config --inputs)")
    return execution


def dump_root_of(report: dict, dump_dir: Optional[str] = None) -> str:
    """The dump directory to read (--dump, else the report's dump_dir): an existing directory, or a clear error."""
    root = dump_dir or report.get("dump_dir")
    if not isinstance(root, str) or not root or "\0" in root:
        shown = "(no dump_dir in the report)" if not root else f"the report's dump_dir {str(root)[:80]!r}"
        raise UserError(f"{shown}: not a directory name; give --dump DIR")
    if not os.path.isdir(root):
        raise UserError(f"{root}: the dump directory is not there; give --dump DIR")
    return root


def _origin_int(first: dict, key: str) -> int:
    value = first.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"the report's origin has no {key} (first.{key} is {str(value)[:40]}): cannot find it in "
                        "the dump; analyze again and repro from that report")
    return value


def _declared_inputs(first: dict) -> dict:
    """slot -> declared dtype of the origin's inputs in the report (records without an integer slot are skipped)."""
    declared = {}
    for record in first.get("inputs") or []:
        slot = record.get("slot") if isinstance(record, dict) else None
        if isinstance(slot, int) and not isinstance(slot, bool):
            declared[slot] = record.get("dtype") if isinstance(record.get("dtype"), str) else None
    return declared


def _output_dir(out_dir: str) -> None:
    """Create the output directory; a path that is a file, or under one, or not creatable is one line (exit 2)."""
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise UserError(f"{out_dir}: exists and is not a directory; give -o a new or empty directory")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot create the output directory ({exc.strerror or exc})") from None


def write(report: dict, out_dir: str, device: str = "CPU", dump_dir: Optional[str] = None) -> Repro:
    from .evaluate import TensorAccess
    from .readers import npy
    first = report["first"] if report.get("first") else {}
    root = dump_root_of(report, dump_dir) if report.get("verdict") != "clean" and first else ""
    if root:   # resolved through symlinks and judged from the dump's root (msoverflow.safeio)
        from .safeio import refuse_output_inside
        refuse_output_inside(out_dir, root)
    execution = find_origin_inputs(report, dump_dir)
    _output_dir(out_dir)
    access = TensorAccess(lambda message: None)
    declared_in = _declared_inputs(first)
    declared_out = [t.get("dtype") for t in first.get("outputs") or [] if isinstance(t.get("dtype"), str)]
    inputs, meta = [], []
    for event in execution.inputs:
        with reading(event.source):
            array = access.array(event)
        if array is None:
            raise UserError(f"{event.source}: cannot read this input of the origin ({event.note})")
        path = os.path.join(out_dir, f"input_{event.slot}.npy")
        try:     # copied in chunks: the dump file is only read, and a large input never sits in memory
            with reading(event.source):
                npy.save(path, array)
        except OSError as exc:
            raise UserError(f"{exc.filename or path}: cannot copy the input ({exc.strerror or exc})") from None
        inputs.append(path)
        meta.append({"slot": event.slot, "file": os.path.basename(path), "from": event.source,
                     "dtype": declared_in.get(event.slot) or event.dtype, "shape": list(np.shape(array))})
    op_type = first.get("op_type") or execution.op_type
    forward = first.get("forward_op")
    float_out = [d for d in declared_out if d and "float" in d]
    dumped = float_out[0] if float_out else next((m["dtype"] for m in meta if m["dtype"] and "float" in m["dtype"]),
                                                 "float16")
    form = VJP_FORMS.get(op_type)
    how = (f"through {form['forward']}'s gradient" if form else
           "the backward kernel itself" if op_type.endswith("Grad") else "the op itself")
    cause, reason, samples, slot = _samples(first, execution)
    spec = {"op_type": op_type, "forward_op": forward, "full_name": first.get("full_name"),
            "rank": first.get("rank"), "iteration": first.get("iteration"), "kind": first.get("kind"),
            "dumped_dtype": dumped, "inputs": meta, "vjp": form, "device": device,
            "samples": [{"index": s.get("index"), "dumped": s.get("dumped")} for s in samples],
            "sample_output": slot or 0}
    script = os.path.join(out_dir, "repro.py")
    try:
        with open(os.path.join(out_dir, "repro.json"), "w", encoding="utf-8") as fh:
            json.dump(spec, fh, indent=2)
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(SCRIPT.replace("__SPEC__", pprint.pformat(spec, indent=4, width=110))
                     .replace("__DEVICE__", device))
    except OSError as exc:
        raise UserError(f"{exc.filename or out_dir}: cannot write ({exc.strerror or exc})") from None
    return Repro(out_dir=out_dir, script=script, inputs=inputs, op_type=op_type, how=how,
                 cause=f"{cause}: {reason}" if cause else "", samples=samples)


SCRIPT = '''\
"""Re-run one op of a MindSpore dump alone (written by `msoverflow repro`; needs numpy and mindspore only).

Runs the origin once in the dtype the dump declared and once in float32 (and bfloat16 where the device has it)
from the input tensors next to this file, and prints max |x| and the inf/NaN counts of every output.
    python repro.py [--device CPU|Ascend|GPU]
"""
import argparse
import os
import sys

import numpy as np

SPEC = __SPEC__
HERE = os.path.dirname(os.path.abspath(__file__))
# The forward input x rebuilt from the forward output y (SPEC["vjp"]["rebuild"] names the rule).
REBUILD = {"square": lambda y: y * y, "reciprocal_square": lambda y: 1.0 / (y * y)}


def load_inputs():
    return [np.load(os.path.join(HERE, item["file"])) for item in SPEC["inputs"]]


def run(ms, dtype_name, arrays):
    from mindspore import Tensor, ops
    from mindspore.ops import operations as P
    dtype = getattr(ms, dtype_name)

    def tensor(array, declared):
        if declared and "float" in declared:
            return Tensor(array.astype(np.float32), ms.float32).astype(dtype)
        return Tensor(array)
    tensors = [tensor(a, item["dtype"]) for a, item in zip(arrays, SPEC["inputs"])]
    vjp = SPEC["vjp"]
    if vjp:
        y, dy = tensors[vjp["y"]], tensors[vjp["dy"]]
        if vjp["rebuild"] not in REBUILD:
            raise SystemExit(f"{vjp['rebuild']}: no rule to rebuild {vjp['forward']}'s input")
        x = REBUILD[vjp["rebuild"]](y)          # the forward input, e.g. y * y for Sqrt (vjp["x"])
        primitive = getattr(P, vjp["forward"])()
        _, backward = ms.vjp(lambda t: primitive(t), x)
        outputs = backward(dy)
    else:
        name = SPEC["op_type"]
        primitive = getattr(P, name, None)
        if primitive is None:
            from mindspore.ops.operations import _grad_ops
            primitive = getattr(_grad_ops, name, None)
        if primitive is None:
            raise SystemExit(f"{name}: no MindSpore primitive of that name to re-run")
        outputs = primitive()(*tensors)
    if not isinstance(outputs, (tuple, list)):
        outputs = [outputs]
    return [o.astype(ms.float32).asnumpy().astype(np.float64) for o in outputs]


def sampled(outputs, slot):
    """The output's values at the dumped bad positions (the shapes may differ: then by flat position)."""
    if slot >= len(outputs):
        return ["-"] * len(SPEC["samples"])
    values = outputs[slot]
    found = []
    for sample in SPEC["samples"]:
        index = tuple(sample["index"])
        try:
            found.append(f"{float(values[index] if len(index) == values.ndim else values.reshape(-1)[0]):.6g}")
        except (IndexError, ValueError):
            found.append("-")
    return found


def error_text(exc):
    """The error in one line: its first line that says something (MindSpore's can start with blank or ----- lines),
    else where it was raised. Never cut mid-word."""
    import traceback
    lines = [line.strip() for line in str(exc).splitlines()]
    text = next((line for line in lines if line.strip("-=* ")), "")
    if not text:
        frames = traceback.extract_tb(exc.__traceback__)
        text = (f"no message; raised in {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} "
                f"({frames[-1].name})" if frames else "no message")
    if len(text) > 300:
        text = text[:300].rsplit(" ", 1)[0] + " ..."
    return f"{type(exc).__name__}: {text}"


def describe(values):
    finite = values[np.isfinite(values)]
    return {"max_abs": float(np.abs(finite).max()) if finite.size else float("nan"),
            "inf": int(np.isinf(values).sum()), "nan": int(np.isnan(values).sum())}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="__DEVICE__", choices=["CPU", "Ascend", "GPU"])
    args = parser.parse_args()
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device(args.device)
    arrays = load_inputs()
    print(f"{SPEC['op_type']} (rank {SPEC['rank']}, step {SPEC['iteration']}): {SPEC['full_name']}")
    for array, item in zip(arrays, SPEC["inputs"]):
        stats = describe(array.astype(np.float64))
        print(f"  input {item['slot']}: {item['dtype']} {tuple(array.shape)} max|x| {stats['max_abs']:.6g} "
              f"inf {stats['inf']} nan {stats['nan']}")
    dtypes = [SPEC["dumped_dtype"]] + [d for d in ("float32", "bfloat16") if d != SPEC["dumped_dtype"]]
    bad = {}
    at_samples = {}
    for name in dtypes:
        try:
            outputs = run(ms, name, arrays)
        except Exception as exc:  # bf16 kernels are missing on some devices
            print(f"  {name:<9}: not run on {args.device} ({error_text(exc)})")
            continue
        at_samples[name] = sampled(outputs, SPEC["sample_output"])
        bad[name] = False
        for slot, values in enumerate(outputs):
            stats = describe(values)
            bad[name] = bad[name] or stats["inf"] > 0 or stats["nan"] > 0
            print(f"  {name:<9}: output {slot} max|x| {stats['max_abs']:.6g} inf {stats['inf']} nan {stats['nan']}")
    if SPEC["samples"]:
        print(f"  the bad values of output {SPEC['sample_output']}, as dumped and as re-run here:")
        for i, sample in enumerate(SPEC["samples"]):
            values = ", ".join(f"{name} {found[i]}" for name, found in at_samples.items())
            print(f"    at {tuple(sample['index'])}: dumped {sample['dumped']}; {values}")
    dumped = SPEC["dumped_dtype"]
    wide = [n for n in ("float32", "bfloat16") if n in bad and n != dumped]
    if bad.get(dumped) and wide and not any(bad[n] for n in wide):
        print(f"REPRODUCED: non-finite in {dumped}, finite in {', '.join(wide)}: a wider dtype fixes this op")
    elif bad.get(dumped) and all(bad[n] for n in wide):
        print(f"REPRODUCED: non-finite in every dtype tried ({', '.join(bad)}): not a precision problem "
              f"(e.g. 0/0 or sqrt of a negative); a dtype change will not fix it")
    elif dumped not in bad:
        print(f"NOT RUN: the op could not be re-run in {dumped} on {args.device}")
        return 1
    else:
        print(f"NOT REPRODUCED: the op alone gives finite outputs in {dumped} from these inputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
