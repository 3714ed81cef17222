"""Writers for the files only Ascend produces, built FROM THE DOCUMENTED FORMAT (shared/reference/mindspore-dumps.md),
not recorded from a device: binary dump files, statistic.csv, Opdebug overflow records, and a seed scenario
that reproduces the field case (8-rank pipeline-parallel Baichuan2-13B whose NormHead SqrtGrad overflows first).

Importable as tests.support.ascend_fixtures and runnable from the repository root:
    python -m tests.support.ascend_fixtures OUTDIR [--layout o0|async22|acl] [--formats opdebug,bin,statistic,npy]
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import struct
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from msoverflow.readers import _protobuf as pb
from msoverflow.readers.dumpdata_bin import DATA_TYPES, FORMATS, MINDSPORE_DTYPE_WORDS

DATA_TYPE_ENUM = {dtype: number for number, dtype in DATA_TYPES.items()}
FORMAT_ENUM = {name: number for number, name in FORMATS.items()}
OPDEBUG_MAGIC = 0x5A5A5A5A
MAX_FILE_NAME = 255


# ---- binary dump files --------------------------------------------------------------------------------

def _format_number(fmt) -> int:
    return fmt if isinstance(fmt, int) else FORMAT_ENUM[fmt]


def _shape_message(shape: Sequence[int], packed: bool) -> bytes:
    if packed:
        return pb.field_packed_varints(1, shape) if len(shape) else b""
    return b"".join(pb.field_varint(1, d) for d in shape)


def encode_dump_header(op_name: str, inputs: Sequence[np.ndarray] = (), outputs: Sequence[np.ndarray] = (), *,
                       formats=None, data_type_override: Optional[Dict] = None, dump_time: int = 0,
                       version: str = "2.0", inline_data: bool = False, packed_shapes: bool = True,
                       original_shapes: Optional[Dict] = None) -> bytes:
    """The DumpData protobuf: version=1, dump_time=2, output=3, input=4, op_name=6.
    `formats`: one format (name or enum) for all tensors, or a dict {(io, slot): format}.
    `data_type_override`: {(io, slot): enum number} to write a data_type the arrays do not have."""
    overrides = data_type_override or {}
    message = pb.field_bytes(1, version) + pb.field_varint(2, dump_time)

    def tensor(io, slot, array):
        array = np.ascontiguousarray(array)
        fmt = formats.get((io, slot), "ND") if isinstance(formats, dict) else (formats or "ND")
        data_type = overrides.get((io, slot), DATA_TYPE_ENUM[array.dtype.name])
        data_no, size_no, orig_no = (5, 6, 7) if io == "output" else (4, 5, 6)
        body = pb.field_varint(1, data_type) + pb.field_varint(2, _format_number(fmt))
        body += pb.field_bytes(3, _shape_message(array.shape, packed_shapes))
        if inline_data:
            body += pb.field_bytes(data_no, array.tobytes())
        body += pb.field_varint(size_no, array.nbytes)
        if original_shapes and (io, slot) in original_shapes:
            body += pb.field_bytes(orig_no, _shape_message(original_shapes[(io, slot)], packed_shapes))
        return body

    for slot, array in enumerate(outputs):
        message += pb.field_bytes(3, tensor("output", slot, array))
    for slot, array in enumerate(inputs):
        message += pb.field_bytes(4, tensor("input", slot, array))
    message += pb.field_bytes(6, op_name)
    return message


def write_dump_bin(path: str, op_name: str, inputs: Sequence[np.ndarray] = (), outputs: Sequence[np.ndarray] = (),
                   *, formats=None, data_type_override: Optional[Dict] = None, dump_time: int = 0,
                   inline_data: bool = False, packed_shapes: bool = True, original_shapes: Optional[Dict] = None,
                   header_length_override: Optional[int] = None, truncate_payload: int = 0) -> str:
    """`[uint64 LE header length][DumpData][raw bytes of inputs, then outputs]` (documented format).
    Malformed variants for tests: `header_length_override` writes a wrong length, `truncate_payload` drops
    that many bytes from the end."""
    header = encode_dump_header(op_name, inputs, outputs, formats=formats, data_type_override=data_type_override,
                                dump_time=dump_time, inline_data=inline_data, packed_shapes=packed_shapes,
                                original_shapes=original_shapes)
    payload = b"" if inline_data else b"".join(np.ascontiguousarray(a).tobytes() for a in list(inputs) + list(outputs))
    length = len(header) if header_length_override is None else header_length_override
    blob = struct.pack("<Q", length) + header + payload
    if truncate_payload:
        blob = blob[:-truncate_payload]
    _write(path, blob)
    return path


def _write(path: str, data) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if isinstance(data, bytes):
        with open(path, "wb") as fh:
            fh.write(data)
    else:
        with open(path, "w", newline="") as fh:
            fh.write(data)


# ---- statistic.csv ----------------------------------------------------------------------------------

PREFIX = ["Op Type", "Op Name", "Task ID", "Stream ID", "Timestamp", "IO", "Slot", "Data Size", "Data Type", "Shape"]
FULL_22 = ["Max Value", "Min Value", "Avg Value", "Count", "Negative Zero Count", "Positive Zero Count",
           "NaN Count", "Negative Inf Count", "Positive Inf Count", "Zero Count", "L2 Value", "MD5"]
DEFAULT_23 = ["Max Value", "Min Value", "Avg Value", "Count", "Nan Count", "Negative Inf Count",
              "Positive Inf Count", "Zero Count", "L2Norm Value"]
VARIANTS = ("2.1", "2.2", "2.3", "format-col", "trailing-comma", "unquoted-shape", "minimal")


def _stat_cells(array: np.ndarray) -> Dict[str, str]:
    values = np.asarray(array)
    flat = values.astype(np.float64).ravel() if values.dtype.kind in "fiub" else np.zeros(0)
    finite = flat[np.isfinite(flat)]
    null = "null"

    def num(v):
        return repr(float(v)) if values.dtype.kind == "f" else str(int(v))
    cells = {
        "max value": num(finite.max()) if finite.size else null,
        "min value": num(finite.min()) if finite.size else null,
        "avg value": repr(float(finite.mean())) if finite.size else null,
        "count": str(values.size),
        "negative zero count": str(int(np.count_nonzero((flat == 0) & np.signbit(flat)))),
        "positive zero count": str(int(np.count_nonzero((flat == 0) & ~np.signbit(flat)))),
        "nan count": str(int(np.count_nonzero(np.isnan(flat)))),
        "negative inf count": str(int(np.count_nonzero(np.isneginf(flat)))),
        "positive inf count": str(int(np.count_nonzero(np.isposinf(flat)))),
        "zero count": str(int(np.count_nonzero(flat == 0))),
        "l2 value": repr(float(np.sqrt((finite ** 2).sum()))) if finite.size else null,
        "md5": hashlib.md5(values.tobytes()).hexdigest(),
    }
    cells["l2norm value"] = cells["l2 value"]
    return cells


def _dtype_word(dtype: np.dtype, style: str) -> str:
    if style == "DT":
        return {"float32": "DT_FLOAT", "float64": "DT_DOUBLE"}.get(dtype.name, "DT_" + dtype.name.upper())
    if style == "MindSpore":
        return MINDSPORE_DTYPE_WORDS[dtype.name]
    return dtype.name


def write_statistic_csv(path: str, rows: Iterable[dict], variant: str = "2.2", *,
                        categories: Optional[Sequence[str]] = None, dtype_style: str = "numpy") -> str:
    """statistic.csv in one of the documented header variants (documented format):
    "2.2" full list ("NaN Count", "L2 Value"); "2.3" configured categories only ("Nan Count", "L2Norm Value",
    `categories` picks them); "format-col" = 2.3 plus a Format column; "trailing-comma" = 2.2 with a comma
    ending every line; "unquoted-shape" = 2.2 with Shape written bare (so "(2,3)" spans cells);
    "minimal" = the prefix plus Max/Min only.
    Each row: op_type, op_name, task_id, stream_id, timestamp, io, slot, array (stats are computed from it),
    optional "declared_dtype" (a different dtype to write), "format", and "override" {header: text}."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown statistic.csv variant {variant!r}; one of {VARIANTS}")
    if variant in ("2.1", "2.2", "trailing-comma", "unquoted-shape"):
        stats_columns = list(FULL_22)
    elif variant == "minimal":
        stats_columns = ["Max Value", "Min Value"]
    else:
        stats_columns = list(categories or DEFAULT_23)
    header = PREFIX[:9] + (["Format"] if variant == "format-col" else []) + ["Shape"] + stats_columns
    lines = []
    for row in rows:
        array = np.asarray(row["array"])
        stats = _stat_cells(array)
        shape = "(" + ",".join(str(d) for d in array.shape) + ")"
        base = {"op type": row["op_type"], "op name": row["op_name"], "task id": str(row["task_id"]),
                "stream id": str(row["stream_id"]), "timestamp": str(row["timestamp"]), "io": row["io"],
                "slot": str(row["slot"]), "data size": str(array.nbytes),
                "data type": row.get("declared_dtype") or _dtype_word(array.dtype, dtype_style),
                "format": row.get("format", "ND"), "shape": shape}
        base.update(stats)
        for key, text in (row.get("override") or {}).items():
            base[key.lower()] = text
        lines.append([base[h.lower()] for h in header])
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as fh:
        if variant == "unquoted-shape":
            for cells in [header] + lines:
                fh.write(",".join(cells) + "\n")
        else:
            writer = csv.writer(fh, lineterminator="\n")
            for cells in [header] + lines:
                writer.writerow(cells + ([""] if variant == "trailing-comma" else []))
    return path


def statistics_form(dump_root: str, keep=None, load=None) -> None:
    """A real npy dump turned into its statistic.csv form (saved_data "statistic") in place: each step directory's
    tensors become the rows of one statistic.csv (2.2 header) computed from their real values, in the order they
    were written, and the npy files go. keep(step, rows) may cut a step's rows; load(path) -> (declared dtype,
    array) reads a tensor (default np.load; MindSpore CPU writes fp32 bytes under fp16 headers: pass a loader that
    knows, and the row keeps the declared dtype)."""
    from msoverflow import names

    for root, _dirs, files in sorted(os.walk(dump_root)):
        tensors = sorted((name for name in files if name.endswith(".npy")), key=lambda n: names.parse(n).timestamp)
        if not tensors:
            continue
        rows = []
        for name in tensors:
            path = os.path.join(root, name)
            declared, array = load(Path(path)) if load else (None, np.load(path))
            parsed = names.parse(name)
            rows.append({"op_type": parsed.op_type, "op_name": parsed.op_name, "task_id": parsed.task_id,
                         "stream_id": parsed.stream_id, "timestamp": parsed.timestamp, "io": parsed.io,
                         "slot": parsed.slot, "array": array,
                         **({"declared_dtype": str(declared)} if declared is not None else {})})
            os.remove(path)
        step = int(os.path.basename(root)) if os.path.basename(root).isdigit() else None
        write_statistic_csv(os.path.join(root, "statistic.csv"), keep(step, rows) if keep else rows)


# ---- Opdebug records ------------------------------------------------------------------------------

def _info(record: dict) -> dict:
    return {"model_id": record.get("model_id", 1), "stream_id": record.get("stream_id", 0),
            "task_id": record.get("task_id", 0), "task_type": record.get("task_type", 0),
            "pc_start": record.get("pc_start", "0x124080000000"),
            "para_base": record.get("para_base", "0x124100000000")}


def opdebug_json_doc(records: Sequence[dict], style: str = "old") -> dict:
    """records: {"unit": "AI Core"|"DHA Atomic Add"|"L2 Atomic Add" (old) or "AIC"|"AIV"|"AICPU"|"SDMA" (new),
    "task_id", "stream_id", "status", optional "context_id", "thread_id", "block_idx", "model_id"}."""
    if style == "old":
        doc = {}
        for unit in ("DHA Atomic Add", "L2 Atomic Add", "AI Core"):
            doc[unit] = dict(_info({}), status=0)
            if unit == "AI Core":
                doc[unit].update(kernel_code="0x0", block_idx=0)
        for record in records:
            entry = dict(_info(record), status=record["status"])
            if record["unit"] == "AI Core":
                entry.update(kernel_code=record.get("kernel_code", "0x124080001000"),
                             block_idx=record.get("block_idx", 0))
            doc[record["unit"]] = entry
        return doc
    if style == "new":
        acc = []
        for record in records:
            data = dict(_info(record), context_id=record.get("context_id", 0), thread_id=record.get("thread_id", 0),
                        core_id=record.get("core_id", 0), block_id=record.get("block_idx", 0), status=record["status"])
            acc.append({"valid": 1, "acc_type": record["unit"], "rsv": 0, "data_len": 88, "data": data})
        return {"magic": hex(OPDEBUG_MAGIC), "version": 1, "acc_list": acc[0] if len(acc) == 1 else acc}
    raise ValueError(f"unknown Opdebug JSON style {style!r}")


def write_opdebug_json(path: str, records: Sequence[dict], style: str = "old") -> str:
    """An Opdebug JSON overflow file, old ("AI Core"/"DHA Atomic Add"/"L2 Atomic Add") or new (magic/acc_list)
    style (documented format)."""
    _write(path, json.dumps(opdebug_json_doc(records, style), indent=2))
    return path


def opdebug_raw(records: Sequence[dict], style: str = "old") -> bytes:
    """The raw record bytes: old 2048-byte layout or the new magic 0x5A5A5A5A layout (documented format)."""
    if style == "old":
        raw = bytearray(2048)
        by_unit = {r["unit"]: r for r in records}

        def info(offset, record):
            fields = _info(record)
            values = [fields[k] if not isinstance(fields[k], str) else int(fields[k], 16) for k in
                      ("model_id", "stream_id", "task_id", "task_type", "pc_start", "para_base")]
            struct.pack_into("<6Q", raw, offset, *values)
        info(0, by_unit.get("DHA Atomic Add", {}))
        info(128, by_unit.get("L2 Atomic Add", {}))
        info(256, by_unit.get("AI Core", {}))
        struct.pack_into("<Q", raw, 512, by_unit.get("DHA Atomic Add", {}).get("status", 0))
        struct.pack_into("<Q", raw, 768, by_unit.get("L2 Atomic Add", {}).get("status", 0))
        core = by_unit.get("AI Core", {})
        struct.pack_into("<3Q", raw, 1024, 0x124080001000, core.get("block_idx", 0), core.get("status", 0))
        return bytes(raw)
    types = {"AIC": 0, "AIV": 1, "AICPU": 2, "SDMA": 3}
    out = struct.pack("<II", OPDEBUG_MAGIC, 1)
    for record in records:
        unit = record["unit"]
        common = [record.get("model_id", 1), record["stream_id"], record["task_id"], record.get("task_type", 0),
                  record.get("context_id", 0)]
        if unit in ("AIC", "AIV"):
            values = common + [record.get("thread_id", 0), 0x124080000000, 0x124100000000,
                               record.get("core_id", 0), record.get("block_idx", 0), record["status"]]
        elif unit == "AICPU":
            values = common + [0, record.get("thread_id", 0), record["status"]]
        else:
            values = common + [record.get("thread_id", 0), 0, 0, 0, record["status"]]
        out += struct.pack("<4I", 1, types[unit], 0, 8 * len(values)) + struct.pack(f"<{len(values)}Q", *values)
    return out


def write_opdebug_bin(path: str, records: Sequence[dict], style: str = "old", *, dump_time: int = 0) -> str:
    """A binary Opdebug file: a DumpData file whose output[0] (uint8) holds the raw record (documented format)."""
    raw = np.frombuffer(opdebug_raw(records, style), dtype=np.uint8)
    return write_dump_bin(path, "Node_OpDebug", inputs=[], outputs=[raw], dump_time=dump_time)


# ---- npy dump files (MindSpore 2.4+ naming) -------------------------------------------------------------

def npy_name(op_type, op_name, task, stream, ts, io, slot, fmt, dtype: np.dtype) -> str:
    word = MINDSPORE_DTYPE_WORDS[np.dtype(dtype).name]
    return f"{op_type}.{op_name}.{task}.{stream}.{ts}.{io}.{slot}.{fmt}.{word}.npy"


# ---- the seed scenario ----------------------------------------------------------------------------------

SCOPE = "Default/network-MFTrainOneStepCell/network-_VirtualDatasetCell/_backbone-Baichuan13BV2ForCausalLM"
LAYER0 = SCOPE + "/model-Baichuan13BV2Model/layers-CellList/0-Baichuan13BDecodeLayer/attention-Baichuan13BAttention"
HEAD = SCOPE + "/lm_head-NormHead"
SQRTGRAD_FULL_NAME = "Gradients/" + HEAD + "/Grad_Sqrt/SqrtGrad-op0"
BASE_TIME_US = 1_700_000_000_000_000
ITERATION_US = 1_000_000
COMPUTE_STREAM, COMM_STREAM = 2, 5


def file_op_name(full_name: str) -> str:
    return full_name.replace("/", "_").replace("\\", "_").replace(" ", "_")


OPTIMIZER = "Default/optimizer-AdamWeightDecay/AdamWeightDecay-op"
# the parameter each stage's optimizer op updates (named in the saved graph the seed writes with optimizer_ops)
OPTIMIZED_PARAMETERS = {"first": "model.layers.0.attention.wq.weight", "last": "lm_head.weight"}


def _ops_for(stage: int, last: bool, overflow: bool, origin: bool, rng: np.random.RandomState,
             clip_ops: bool = False, optimizer_ops: bool = False):
    """(rel_time_us, op_type, full_name, inputs, outputs, stream, note) for one rank and one iteration."""
    f16 = np.float16

    def act(scale=1.0):
        return (rng.standard_normal((4, 8)) * scale).astype(f16)
    nan = np.full((4, 8), np.nan, f16)
    ops = []
    if not last:
        x = act()
        ops.append((100, "MatMul", LAYER0 + "/wq-Linear/MatMul-op0", [x, act(0.02)], [act()], COMPUTE_STREAM, ""))
        ops.append((300, "Send", SCOPE + "/Send-op0", [act()], [], COMM_STREAM, ""))
    else:
        weight = (rng.standard_normal((4, 8)) * 0.02).astype(f16)
        weight[3, :] = f16(0.002)               # one vocabulary row almost zero: tiny norm
        weight[3, 0] = f16(0.0)
        square = (weight.astype(np.float32) ** 2).astype(f16)
        norm = np.sqrt((weight.astype(np.float32) ** 2).sum(axis=1, keepdims=True)).astype(f16)
        ops.append((400, "Receive", SCOPE + "/Receive-op0", [], [act()], COMM_STREAM, ""))
        ops.append((450, "Square", HEAD + "/Square-op0", [weight], [square], COMPUTE_STREAM, ""))
        ops.append((500, "ReduceSum", HEAD + "/ReduceSum-op0", [square], [norm ** 2], COMPUTE_STREAM, ""))
        ops.append((550, "Sqrt", HEAD + "/Sqrt-op0", [norm ** 2], [norm], COMPUTE_STREAM, ""))
        ops.append((600, "RealDiv", HEAD + "/RealDiv-op0", [weight, norm], [(weight / norm).astype(f16)],
                    COMPUTE_STREAM, ""))
        ops.append((700, "MatMul", HEAD + "/MatMul-op1", [act(), (weight / norm).astype(f16)], [act(4.0)],
                    COMPUTE_STREAM, "weight input stored FRACTAL_NZ"))
        dy = (rng.standard_normal((4, 1)) * 4).astype(f16)
        dy[3, 0] = f16(47580.0) if (overflow and origin) else f16(20.0)   # fp16 gradient near its max
        ops.append((1000, "RealDiv", "Gradients/" + HEAD + "/Grad_RealDiv/RealDiv-op1", [act(), norm], [dy],
                    COMPUTE_STREAM, ""))
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            grad = (dy.astype(np.float32) / (2 * norm.astype(np.float32))).astype(f16)  # 47580/(2*0.0008) -> inf
            spread = np.broadcast_to(grad, (4, 8)).astype(f16)
            wgrad = (2 * weight.astype(np.float32) * spread.astype(np.float32)).astype(f16)  # inf * 0 -> NaN
        ops.append((1100, "SqrtGrad", SQRTGRAD_FULL_NAME, [norm, dy], [grad], COMPUTE_STREAM,
                    "origin" if overflow and origin else ""))
        ops.append((1200, "BroadcastTo", "Gradients/" + HEAD + "/Grad_ReduceSum/BroadcastTo-op0", [grad], [spread],
                    COMPUTE_STREAM, ""))
        ops.append((1300, "Mul", "Gradients/" + HEAD + "/Grad_Square/Mul-op3", [weight, spread], [wgrad],
                    COMPUTE_STREAM, ""))
        reduced = nan.copy() if overflow else (wgrad.astype(np.float32) * 4).astype(f16)
        ops.append((1500, "AllReduce", SCOPE + "/AllReduce-op0", [wgrad], [reduced], COMM_STREAM,
                    "" if origin or not overflow else "distractor: NaN received from the origin rank"))
        ops.append((1700, "Send", SCOPE + "/Send-op1", [reduced], [], COMM_STREAM, ""))
    gradient = reduced if last else None
    if not last:
        received = nan.copy() if overflow else act()
        ops.append((1800, "Receive", SCOPE + "/Receive-op1", [], [received], COMM_STREAM,
                    "distractor: NaN received from the last stage" if overflow else ""))
        with np.errstate(invalid="ignore"):
            out = (received.astype(np.float32) @ act(0.02).astype(np.float32).T @ act(0.1).astype(np.float32)
                   ).astype(f16)
        ops.append((1900, "MatMul", "Gradients/" + LAYER0 + "/wq-Linear/Grad_MatMul/MatMul-op5",
                    [received, act(0.1)], [out], COMPUTE_STREAM, "propagator" if overflow else ""))
        gradient = out
    norm_in = np.array([np.nan if overflow else 3.5], np.float32)
    norm_out = np.array([np.nan if overflow else 14.0], np.float32)
    if clip_ops:
        # ClipGradNorm: the squared norms meet over the pipeline group; on the bad step they arrive as +inf, and
        # the hardware flags Sqrt and Mul, whose inputs are already +inf (propagators, not origins).
        norm_in = np.array([np.inf if overflow else 3.5], np.float32)
        norm_out = np.array([np.inf if overflow else 14.0], np.float32)
    ops.append((2500, "AllReduce", SCOPE + "/clip_grad_norm-ClipGradNorm/AllReduce-op1", [norm_in], [norm_out],
                COMM_STREAM, "distractor: global grad norm is NaN" if overflow else ""))
    if clip_ops:
        with np.errstate(over="ignore", invalid="ignore"):
            global_norm = np.sqrt(norm_out).astype(np.float32)
            scaled = (global_norm * np.float32(1e38)).astype(np.float32)
        ops.append((2600, "Sqrt", SCOPE + "/clip_grad_norm-ClipGradNorm/Sqrt-op2", [norm_out], [global_norm],
                    COMPUTE_STREAM, "clip-flagged" if overflow else ""))
        ops.append((2700, "Mul", SCOPE + "/clip_grad_norm-ClipGradNorm/Mul-op3",
                    [global_norm, np.array([1e38], np.float32)], [scaled], COMPUTE_STREAM,
                    "clip-flagged" if overflow else ""))
    if optimizer_ops:
        # AdamWeightDecay(var, m, v, lr, beta1, beta2, epsilon, decay, gradient): the weight update of the step
        weight = act(0.02)
        scalars = [np.array([v], np.float32) for v in (1e-4, 0.9, 0.95, 1e-8, 0.01)]
        with np.errstate(invalid="ignore", over="ignore"):     # the updated weight: NaN where the gradient is
            updated = (weight.astype(np.float32) - 1e-4 * gradient.astype(np.float32)).astype(f16)
        ops.append((2800, "AdamWeightDecay", OPTIMIZER + ("0" if last else "1"),
                    [weight, np.zeros_like(weight), np.zeros_like(weight)] + scalars[:4] + scalars[4:] + [gradient],
                    [updated], COMPUTE_STREAM, ""))
    return ops


def build_seed_scenario(out_dir: str, *, formats: Sequence[str] = ("opdebug", "bin", "statistic"),
                        layout: str = "async22", ranks: int = 8, stages: int = 2, iterations: Sequence[int] = (0, 1),
                        overflow_iteration: int = 1, origin_rank: Optional[int] = None,
                        opdebug_style: str = "old", opdebug_encoding: str = "json",
                        statistic_variant: str = "2.2", clock_offsets_us: Optional[Dict[int, int]] = None,
                        net: str = "Baichuan13BV2", graph: int = 0, saturation: bool = False,
                        distractor_opdebug: Optional[bool] = None, clip_ops: bool = False,
                        overflow_only: bool = False, inputs_dumped: bool = True, optimizer_ops: bool = False) -> dict:
    """Write the seed case (documented formats, not a device recording) and describe it.

    8 ranks, `stages` pipeline stages (ranks 0..3 stage 0, 4..7 stage 1 by default). In `overflow_iteration`
    NormHead's SqrtGrad on `origin_rank` (last stage) gets an fp16 input of 47580 and writes inf; two Opdebug
    records name it. Later in true time: the DP AllReduce on the other last-stage ranks and the Receive/global
    norm AllReduce on stage 0 turn NaN (distractors), and one distractor Opdebug record flags stage 0's MatMul.
    Clocks: the origin rank runs 10 s ahead and rank 2 runs 3 s behind, so the rank with the smallest raw
    timestamp is a distractor (`raw_earliest` in the description), never the origin.

    formats: any of "opdebug", "bin", "statistic", "npy". layout: "o0" (rank_{r}/{net}/{graph}/{iter}, also
    2.2 async's task-sink layout, Opdebug files beside the op files),
    "async22" (the same, Opdebug files under rank_{r}/debug_files/{iter}), "acl"
    ({step}/{time}/{device}/{model}/{model_id}/{iter} + mapping.csv + acl_dump_{device}.json).
    saturation=True writes what Ascend's saturation mode leaves: inf pinned at +-dtype max, NaN as 0, so only
    the pinned values and the Opdebug records show the overflow.
    distractor_opdebug: write the stage-0 MatMul Opdebug record (default: yes, except in saturation mode,
    where that MatMul is fed zeros instead of NaN and would not overflow).
    clip_ops: every rank runs ClipGradNorm's Sqrt and Mul after the global-norm AllReduce; on the bad step their
    inputs are +inf and the hardware flags both on every rank (propagators the flag alone would call origins).
    overflow_only: write only the flagged ops' files (what op_debug_mode 3 keeps). inputs_dumped=False: write
    no input tensors (input_output 2), so a flagged op's inputs cannot decide.
    optimizer_ops: every rank ends its step with the AdamWeightDecay update of one weight (OPTIMIZED_PARAMETERS)
    and saves a graph (.ir) naming that weight; on the bad step its gradient input is NaN.
    """
    if distractor_opdebug is None:
        distractor_opdebug = not saturation
    if layout not in ("o0", "async22", "acl"):
        raise ValueError(f"unknown layout {layout!r}")
    unknown = set(formats) - {"opdebug", "bin", "statistic", "npy"}
    if unknown:
        raise ValueError(f"unknown formats {sorted(unknown)}")
    ranks_per_stage = ranks // stages
    last_stage = stages - 1
    origin_rank = ranks_per_stage * last_stage + 1 if origin_rank is None else origin_rank
    offsets = {r: 0 for r in range(ranks)}
    offsets.update({origin_rank: 10_000_000, 2 % ranks: -3_000_000} if clock_offsets_us is None else clock_offsets_us)
    root = os.path.abspath(out_dir)
    description = {"root": root, "layout": layout, "formats": list(formats), "ranks": ranks, "stages": stages,
                   "saturation": saturation,
                   "ranks_per_stage": ranks_per_stage, "iterations": list(iterations),
                   "overflow_iteration": overflow_iteration, "clock_offsets_us": offsets, "dirs": {},
                   "opdebug_files": [], "distractors": [], "files": 0, "mapping": {}, "label":
                   "built from the documented formats (shared/reference/mindspore-dumps.md), not recorded on Ascend"}
    bad_events = []   # (raw ts, true ts, rank, op_type, op_name, kind) of non-finite outputs and Opdebug records
    for rank in range(ranks):
        stage = rank // ranks_per_stage
        rng = np.random.RandomState(1000 + rank)
        order_names: List[str] = []
        for iteration in iterations:
            overflow = iteration == overflow_iteration
            directory, debug_dir = _dirs(root, layout, rank, iteration, net, graph)
            description["dirs"].setdefault(rank, {})[iteration] = directory
            base = BASE_TIME_US + iteration * ITERATION_US + rank * 3 + offsets[rank]
            true_base = BASE_TIME_US + iteration * ITERATION_US + rank * 3
            stat_rows = []
            mapping_rows = []
            ops = _ops_for(stage, stage == last_stage, overflow, rank == origin_rank, rng, clip_ops, optimizer_ops)
            if saturation:
                ops = [op[:3] + ([_saturate(a) for a in op[3]], [_saturate(a) for a in op[4]]) + op[5:] for op in ops]
            for task, (rel, op_type, full_name, inputs, outputs, stream, note) in enumerate(ops, start=11):
                if full_name not in order_names:
                    order_names.append(full_name)
                name = file_op_name(full_name)
                ts_in, ts_out = base + rel, base + rel + 7       # each file carries its own timestamp
                stream_id = stream
                flagged = overflow and (note in ("origin", "clip-flagged") or (
                    note == "propagator" and rank == 2 % ranks and distractor_opdebug))
                if overflow_only and not flagged:
                    continue
                if not inputs_dumped:
                    inputs = []
                    if not outputs:
                        continue
                formats_map = {("input", 1): "FRACTAL_NZ"} if "FRACTAL_NZ" in note else None
                if "bin" in formats:
                    file_name = f"{op_type}.{name}.{task}.{stream_id}.{ts_in}"
                    target = _long_name(file_name, mapping_rows)
                    write_dump_bin(os.path.join(directory, target), full_name, inputs, outputs,
                                   formats=formats_map, dump_time=ts_in)
                    description["files"] += 1
                if "npy" in formats:
                    for io, arrays, ts in (("input", inputs, ts_in), ("output", outputs, ts_out)):
                        for slot, array in enumerate(arrays):
                            fmt = (formats_map or {}).get((io, slot), "DefaultFormat")
                            file_name = npy_name(op_type, name, task, stream_id, ts, io, slot, fmt, array.dtype)
                            target = _long_name(file_name, mapping_rows)
                            os.makedirs(directory, exist_ok=True)
                            np.save(os.path.join(directory, target), array)
                            description["files"] += 1
                # A binary dump file holds the whole op under one timestamp; npy files carry one each.
                stat_out_ts = ts_in if "bin" in formats else ts_out
                for io, arrays, ts in (("input", inputs, ts_in), ("output", outputs, stat_out_ts)):
                    for slot, array in enumerate(arrays):
                        stat_rows.append({"op_type": op_type, "op_name": name, "task_id": task,
                                          "stream_id": stream_id, "timestamp": ts, "io": io, "slot": slot,
                                          "array": array, "format": (formats_map or {}).get((io, slot), "ND")})
                if overflow and outputs and _looks_bad(outputs[0]):
                    bad_events.append((ts_out, true_base + rel + 7, rank, op_type, name, "tensor"))
                if overflow and note.startswith("distractor"):
                    description["distractors"].append({"rank": rank, "op_type": op_type, "op_name": name,
                                                       "timestamp": ts_out, "why": note})
                if overflow and note == "origin":
                    description["origin"] = {
                        "rank": rank, "iteration": iteration, "op_type": op_type, "op_name": name,
                        "full_name": full_name, "task_id": task, "stream_id": stream_id,
                        "input_timestamp": ts_in, "output_timestamp": ts_out, "true_time": true_base + rel,
                        "input_max": float(np.abs(inputs[1].astype(np.float32)).max()) if inputs else None,
                        "dir": directory}
                    if "opdebug" in formats:
                        for k, delay in enumerate((40, 90)):     # two records name the same SqrtGrad
                            path = _write_opdebug(debug_dir, opdebug_encoding, opdebug_style, ts_out + delay,
                                                  file_task=2 + k, unit="AIV" if opdebug_style == "new" else "AI Core",
                                                  task=task, stream=stream_id, status=0x20, block=3 + k)
                            description["opdebug_files"].append(path)
                            bad_events.append((ts_out + delay, true_base + rel + 7 + delay, rank, "Opdebug", name,
                                               "opdebug"))
                if overflow and note == "clip-flagged" and "opdebug" in formats:
                    path = _write_opdebug(debug_dir, opdebug_encoding, opdebug_style, ts_out + 30,
                                          file_task=5 + task, unit="AIC" if opdebug_style == "new" else "AI Core",
                                          task=task, stream=stream_id, status=0x20, block=1)
                    description["opdebug_files"].append(path)
                    description["distractors"].append({"rank": rank, "op_type": op_type, "op_name": name,
                                                       "timestamp": ts_out + 30,
                                                       "why": "flagged ClipGradNorm op whose input is already +inf"})
                    bad_events.append((ts_out + 30, true_base + rel + 37, rank, "Opdebug", name, "opdebug"))
                if (overflow and note == "propagator" and rank == 2 % ranks and "opdebug" in formats
                        and distractor_opdebug):
                    path = _write_opdebug(debug_dir, opdebug_encoding, opdebug_style, ts_out + 50, file_task=4,
                                          unit="AIC" if opdebug_style == "new" else "AI Core", task=task,
                                          stream=stream_id, status=0x20, block=0)
                    description["opdebug_files"].append(path)
                    description["distractors"].append({"rank": rank, "op_type": "Opdebug", "op_name": name,
                                                       "timestamp": ts_out + 50,
                                                       "why": "distractor Opdebug: MatMul fed NaN from Receive"})
                    bad_events.append((ts_out + 50, true_base + rel + 57, rank, "Opdebug", name, "opdebug"))
            if "statistic" in formats:
                write_statistic_csv(os.path.join(directory, "statistic.csv"), stat_rows, statistic_variant)
                description["files"] += 1
            if mapping_rows:
                with open(os.path.join(directory, "mapping.csv"), "w", newline="") as fh:
                    csv.writer(fh, lineterminator="\n").writerows(mapping_rows)
                description["mapping"].update({r[0]: r[1] for r in mapping_rows})
        _rank_extras(root, layout, rank, net, graph, order_names, iterations,
                     OPTIMIZED_PARAMETERS["last" if stage == last_stage else "first"] if optimizer_ops else None)
    if layout == "acl":
        for device in range(ranks):
            _write(os.path.join(root, f"acl_dump_{device}.json"), json.dumps(
                {"dump": {"dump_path": root, "dump_mode": "all", "dump_op_switch": "on", "dump_debug": "on",
                          "dump_list": []}}, indent=2))
    if bad_events:      # none when the overflow step is not among the dumped iterations (a clean dump)
        raw = min(bad_events)
        true = min(bad_events, key=lambda e: e[1])
        description["raw_earliest"] = {"rank": raw[2], "op_type": raw[3], "op_name": raw[4], "timestamp": raw[0],
                                       "kind": raw[5]}
        description["true_earliest"] = {"rank": true[2], "op_type": true[3], "op_name": true[4],
                                        "timestamp": true[0]}
    return description


STAGE0_CLOCK_BEHIND_US = 400_000_000


def build_pp_seed_case(out_dir: str, *, overflow_only: bool = False, inputs_dumped: bool = True,
                       clock_offsets_us: Optional[Dict[int, int]] = None, optimizer_ops: bool = False) -> dict:
    """The seed's own shape (built from the documented formats, not recorded on Ascend): 8 ranks, PP=2,
    MindSpore 2.2 async layout with old-style Opdebug JSON and binary dumps (no statistic.csv), the lm head on
    stage 1 (ranks 4-7) where rank 5's NormHead SqrtGrad overflows at step 1; ClipGradNorm's Sqrt and Mul
    flagged on every rank with +inf inputs; stage 0's node clock 400 s behind."""
    offsets = {r: (-STAGE0_CLOCK_BEHIND_US if r < 4 else 0) for r in range(8)}
    offsets.update(clock_offsets_us or {})
    description = build_seed_scenario(out_dir, formats=("opdebug", "bin"), layout="async22", ranks=8, stages=2,
                                      opdebug_style="old", opdebug_encoding="json", clock_offsets_us=offsets,
                                      clip_ops=True, overflow_only=overflow_only, inputs_dumped=inputs_dumped,
                                      optimizer_ops=optimizer_ops)
    description["label"] = "spec-built: " + description["label"]
    description["expected_ranks"] = {
        r: ("origin", "SqrtGrad") if r == 5 else (("received", "AllReduce") if r >= 4 else ("received", "Receive"))
        for r in range(8)}
    return description


def _saturate(array: np.ndarray) -> np.ndarray:
    """Saturation mode: +-inf becomes +-dtype max, NaN becomes 0."""
    if array.dtype.kind != "f":
        return array
    top = np.finfo(array.dtype).max
    return np.nan_to_num(array, nan=0.0, posinf=top, neginf=-top).astype(array.dtype)


def _looks_bad(array: np.ndarray) -> bool:
    if array.dtype.kind != "f":
        return False
    values = array.astype(np.float64)
    return bool((~np.isfinite(values)).any() or (np.abs(values) >= float(np.finfo(array.dtype).max)).any())


def _dirs(root, layout, rank, iteration, net, graph):
    if layout == "acl":
        directory = os.path.join(root, str(iteration), "20231120111111", str(rank), "kernel_graph_1", "1",
                                 str(iteration))
        return directory, directory
    directory = os.path.join(root, f"rank_{rank}", net, str(graph), str(iteration))
    if layout == "async22":
        return directory, os.path.join(root, f"rank_{rank}", "debug_files", str(iteration))
    return directory, directory


def _long_name(file_name: str, mapping_rows: list) -> str:
    """Names over 255 characters are replaced by a short one listed in mapping.csv (as MindSpore does)."""
    if len(file_name) <= MAX_FILE_NAME:
        return file_name
    short = hashlib.sha1(file_name.encode()).hexdigest()[:24] + (".npy" if file_name.endswith(".npy") else "")
    mapping_rows.append([short, file_name])
    return short


def _write_opdebug(directory, encoding, style, ts, *, file_task, unit, task, stream, status, block):
    record = {"unit": unit, "task_id": task, "stream_id": stream, "status": status, "block_idx": block}
    if encoding == "bin":
        return write_opdebug_bin(os.path.join(directory, f"Opdebug.Node_OpDebug.{file_task}.1.{ts}"), [record],
                                 style, dump_time=ts)
    return write_opdebug_json(os.path.join(directory, f"Opdebug.Node_OpDebug.{file_task}.1.{ts}.output.0.json"),
                              [record], style)


def _rank_extras(root, layout, rank, net, graph, order_names, iterations, optimized: Optional[str] = None):
    """The per-rank execution-order files O0/O1 dumps carry (graph order, not the real run order), and with
    `optimized` a saved graph whose optimizer node names the parameter it updates (MindSpore's .ir text form)."""
    if layout == "acl":
        return
    rank_root = os.path.join(root, f"rank_{rank}")
    if optimized:
        from tests.support.synth_dump import ir_node
        optimizer = next(n for n in order_names if n.startswith(OPTIMIZER))
        _write(os.path.join(rank_root, "graphs", f"ms_output_trace_code_graph_{graph}.ir"),
               f"%para1_{optimized}: <Ref[Tensor[Float16]], (4, 8), ref_key={optimized}, is_parameter>\n"
               + ir_node(1, "AdamWeightDecay", optimizer, [f"%para1_{optimized}", "%para2_m", "%para3_v"]))
    _write(os.path.join(rank_root, "execution_order", f"ms_execution_order_graph_{graph}.csv"),
           "NodeExecutionOrder-FullNameWithScope\n" + "".join(n + "\n" for n in order_names))
    _write(os.path.join(rank_root, "execution_order", f"ms_global_execution_order_graph_{graph}.csv"),
           "".join(f"{i}\n" for i in iterations))


# ---- forms found in the wild (issue 10) ---------------------------------------------------------------
# Each form below is built from the named vendor source, not recorded from a device:
#   msprobe resource/dump_data.proto + AclDumpMsg.proto (DT_BF16=27 ...), msprobe msaccucmp file_utils.py /
#   dump_utils.py / dump_data_parser.py (FFTS+, Opdebug, _lxslice and converted names), Ascend/tools
#   precision_tool util.py (names without a stream id, converted npy with shape), msprobe AclDumpDataProcessor.cpp
#   (rank_{r}/{timestamp}/step_{k} layout, raw files for dtypes numpy lacks, per-op statistics csv and statistic.csv
#   columns), MindSpore debug_services.cc CheckOpOverflow (Opdebug record at 321 in a zero-header file).
WILD_FORMS = ("bf16_bin", "ffts_bin", "lxslice_bin", "msaccucmp_npy", "msaccucmp_bin", "no_stream_bin",
              "per_op_csv", "msprobe_kernel_statistic", "msprobe_raw_bf16", "opdebug_zero_header",
              "undecodable_bin")
WILD_TS = 1705388945730000        # microseconds: a 16-digit clock, as devices write
FFTS_TAIL = (4, 1, 0, 0)          # the four numbers after the timestamp: {a}.{context_id}.{thread_id}.{b}


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even; inf and NaN kept."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(values, np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def wild_ops(dtype=np.float16):
    """Three ops of one step: Add (clean), SqrtGrad (finite inputs up to 47580, an inf output: the origin),
    Cast (propagates it). [(op_type, op_name, inputs, outputs)] in execution order."""
    rs = np.random.RandomState(3)
    a = rs.uniform(-1, 1, (4, 8)).astype(dtype)
    y = np.full((4, 8), 1e-3, dtype)
    dy = rs.uniform(-1, 1, (4, 8)).astype(dtype)
    dy[0, 0] = 47580
    with np.errstate(over="ignore"):        # the point: 47580 * 0.5 / 1e-3 leaves fp16's range
        out = (dy.astype(np.float32) * 0.5 / y.astype(np.float32)).astype(dtype)
    cast_out = out.astype(np.float32)
    return [("Add", "Default_net_Add-op0", [a, a], [(a + a).astype(dtype)]),
            ("SqrtGrad", "Gradients_Default_net_lm_head-NormHead_Grad_Sqrt_SqrtGrad-op0", [y, dy], [out]),
            ("Cast", "Gradients_Default_net_lm_head-NormHead_Cast-op1", [out], [cast_out])]


def _core(op_type, op_name, task, stream, ts, tail=()):
    parts = [op_type, op_name, str(task)] + ([] if stream is None else [str(stream)]) + [str(ts)]
    return ".".join(parts + [str(t) for t in tail])


def build_wild_form(out_dir: str, form: str) -> dict:
    """A one-step dump in `form` whose first overflow is SqrtGrad. Returns {"root", "dir", "iteration",
    "origin_op", "expect" (verdict)}."""
    iteration = 3 if form.startswith("msprobe") else 1
    if form.startswith("msprobe"):
        directory = os.path.join(out_dir, "rank_0", "20240116153025", f"step_{iteration}")
        _write(os.path.join(out_dir, "acl_dump_0.json"), json.dumps({"dump": {"dump_path": out_dir}}))
    else:
        directory = os.path.join(out_dir, "1", "20240116153025", "0", "Baichuan", "1", str(iteration))
    os.makedirs(directory, exist_ok=True)
    ops = wild_ops()
    result = {"root": out_dir, "dir": directory, "iteration": iteration, "origin_op": "SqrtGrad",
              "expect": "anomaly"}
    for index, (op_type, op_name, ins, outs) in enumerate(ops):
        task, stream, ts = 10 + index, 2, WILD_TS + 100 * index
        if form == "bf16_bin":
            bf_in = [to_bf16_bits(a.astype(np.float32)) for a in ins]
            bf_out = [to_bf16_bits(np.where(np.isinf(o.astype(np.float32)), np.inf, o.astype(np.float32)))
                      for o in outs]
            override = {(io, i): 27 for io, group in (("input", bf_in), ("output", bf_out)) for i in range(len(group))}
            write_dump_bin(os.path.join(directory, _core(op_type, op_name, task, stream, ts)), op_name, bf_in, bf_out,
                           data_type_override=override, dump_time=ts)
        elif form in ("ffts_bin", "lxslice_bin"):
            name = op_name + ("_lxslice0" if form == "lxslice_bin" else "")
            tail = (FFTS_TAIL[0], index + 1, 0, FFTS_TAIL[3])     # context id differs per op
            write_dump_bin(os.path.join(directory, _core(op_type, name, 7, stream, ts, tail)), op_name, ins, outs,
                           dump_time=ts)
            if op_type == "SqrtGrad":      # same task and stream for every op: only the context id tells them apart
                write_opdebug_json(os.path.join(directory, _core("Opdebug", "Node_OpDebug", 0, stream, ts + 50,
                                                                 FFTS_TAIL) + ".output.0.json"),
                                   [{"unit": "AIV", "task_id": 7, "stream_id": stream, "context_id": index + 1,
                                     "thread_id": 0, "status": 0x20}], style="new")
        elif form == "msaccucmp_npy":
            core = _core(op_type, op_name, task, stream, ts)
            for io, group in (("input", ins), ("output", outs)):
                for i, array in enumerate(group):
                    shape = "x".join(str(d) for d in array.shape)
                    name = f"{core}.{io}.{i}.{shape}.npy" if i % 2 else f"{core}.{io}.{i}.npy"
                    np.save(os.path.join(directory, name), array)
        elif form == "msaccucmp_bin":
            core = _core(op_type, op_name, task, stream, ts)
            for io, group in (("input", ins), ("output", outs)):
                for i, array in enumerate(group):
                    shape = "_".join(str(d) for d in array.shape)
                    _write(os.path.join(directory, f"{core}.{io}.{i}.{shape}.{array.dtype.name}.ND.bin"),
                           np.ascontiguousarray(array).tobytes())
        elif form == "no_stream_bin":
            write_dump_bin(os.path.join(directory, _core(op_type, op_name, task, None, ts)), op_name, ins, outs,
                           dump_time=ts)
        elif form == "per_op_csv":
            header = ["Input/Output", "Index", "Data Size", "Data Type", "Format", "Shape", "Max Value",
                      "Min Value", "Avg Value", "L2Norm Value", "NaN Count", "Negative Inf Count",
                      "Positive Inf Count"]
            lines = [",".join(header)]
            for io, group in (("input", ins), ("output", outs)):
                for i, array in enumerate(group):
                    c = _stat_cells(array)
                    shape = '"(' + ",".join(str(d) for d in array.shape) + ')"'
                    lines.append(",".join([io, str(i), str(array.nbytes), "DT_" + array.dtype.name.upper(), "ND",
                                           shape, c["max value"], c["min value"], c["avg value"],
                                           c["l2 value"], c["nan count"], c["negative inf count"],
                                           c["positive inf count"]]))
            _write(os.path.join(directory, _core(op_type, op_name, task, stream, ts) + ".csv"), "\n".join(lines) + "\n")
        elif form == "msprobe_kernel_statistic":
            header = ["Op Type", "Op Name", "Task ID", "Stream ID", "Timestamp", "Input/Output", "Slot",
                      "Data Size", "Data Type", "Format", "Shape", "Max Value", "Min Value", "Avg Value",
                      "L2Norm Value", "NaN Count", "Negative Inf Count", "Positive Inf Count", "MD5 Value"]
            path = os.path.join(directory, "statistic.csv")
            rows = [] if os.path.exists(path) else [",".join(header)]
            for io, group in (("input", ins), ("output", outs)):
                for i, array in enumerate(group):
                    c = _stat_cells(array)
                    shape = '"(' + ",".join(str(d) for d in array.shape) + ')"'
                    word = {"float16": "FLOAT16", "float32": "FLOAT"}[array.dtype.name]
                    rows.append(",".join([op_type, op_name, str(task), str(stream), str(ts), io, str(i),
                                          str(array.nbytes), word, "ND", shape, c["max value"], c["min value"],
                                          c["avg value"], c["l2 value"], c["nan count"], c["negative inf count"],
                                          c["positive inf count"], c["md5"]]))
            with open(path, "a") as fh:
                fh.write("\n".join(rows) + "\n")
        elif form == "msprobe_raw_bf16":
            core = _core(op_type, op_name, task, stream, ts)
            for io, group in (("input", ins), ("output", outs)):
                for i, array in enumerate(group):
                    as32 = array.astype(np.float32)
                    if op_type == "SqrtGrad":      # bf16 op: numpy has no bf16, so adump writes the raw bytes
                        _write(os.path.join(directory, f"{core}.{io}.{i}.ND.BF16"), to_bf16_bits(as32).tobytes())
                    else:
                        np.save(os.path.join(directory, f"{core}.{io}.{i}.ND.FLOAT.npy"), as32)
        elif form == "opdebug_zero_header":
            write_dump_bin(os.path.join(directory, _core(op_type, op_name, task, stream, ts)), op_name, ins, outs,
                           dump_time=ts)
            if op_type == "SqrtGrad":
                blob = bytearray(8 + 400)          # header length 0, then the record MindSpore's debugger reads
                struct.pack_into("<Q", blob, 321 + 16, stream)
                struct.pack_into("<Q", blob, 321 + 24, task)
                _write(os.path.join(directory, _core("Opdebug", "Node_OpDebug", 1, stream, ts + 50)), bytes(blob))
        elif form == "undecodable_bin":
            override = {("output", 0): 33} if op_type == "SqrtGrad" else None   # DT_HIFLOAT8
            outs_written = [np.zeros(o.size, np.uint8) for o in outs] if override else outs
            if override:
                outs_written = [np.zeros(o.shape, np.uint8) for o in outs]
                ins = [np.clip(a, -1, 1).astype(a.dtype) for a in ins]     # nothing bad anywhere readable
            write_dump_bin(os.path.join(directory, _core(op_type, op_name, task, stream, ts)), op_name, ins,
                           outs_written, data_type_override=override, dump_time=ts)
            result["expect"] = "inconclusive"
        else:
            raise ValueError(f"unknown form {form!r}")
    if form == "undecodable_bin":     # the Cast reads a finite copy: nothing readable is bad
        for name in os.listdir(directory):
            if name.startswith("Cast."):
                os.remove(os.path.join(directory, name))
    return result


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--layout", default="async22", choices=["o0", "async22", "acl"])
    parser.add_argument("--formats", default="opdebug,bin,statistic")
    parser.add_argument("--opdebug-style", default="old", choices=["old", "new"])
    parser.add_argument("--opdebug-encoding", default="json", choices=["json", "bin"])
    parser.add_argument("--saturation", action="store_true", help="inf pinned at the dtype max, NaN as 0")
    args = parser.parse_args(argv)
    description = build_seed_scenario(args.out_dir, formats=args.formats.split(","), layout=args.layout,
                                      opdebug_style=args.opdebug_style, opdebug_encoding=args.opdebug_encoding,
                                      saturation=args.saturation)
    summary = {k: v for k, v in description.items() if k not in ("dirs", "mapping", "distractors")}
    summary["distractors"] = len(description["distractors"])
    summary["mapped_names"] = len(description["mapping"])
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
