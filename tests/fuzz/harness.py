"""Fuzzing harness: hypothesis mutates valid seeds of every format msoverflow reads, and every case is checked
against the contract (no traceback, no hang, bounded memory, the dump tree unchanged, exit code in 0/1/2/3).

Targets are in-process calls (fast enough for 100k cases): each reader at its public entry point, and the CLI
(`msoverflow.cli.main`) for analyze, convert, config --check and patch --from. Hangs and memory are watched from
outside by tests/fuzz/run_long.py, which runs this module in worker processes (RLIMIT_AS, a per-case heartbeat).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
from hypothesis import strategies as st

from msoverflow import cli
from msoverflow.readers import _protobuf as pb
from tests.support import ascend_fixtures as af  # writers of the documented formats
from tests.support.synth_dump import ir_node

REPO = Path(__file__).resolve().parents[2]

MAX_CASE_BYTES = 4 << 20           # inputs stay small enough that the harness itself never dominates memory
CONTRACT_EXITS = {0, 1, 2, 3}     # 4 (internal error) on hostile input is a bug the harness reports


class CaseFailure(AssertionError):
    """A case broke the contract; the message says how."""


# ---- seeds: one valid file per format ----------------------------------------------------------------------

OP = "Default_network-Net_fc-Dense_MatMul-op1"
FULL = "Default/network-Net/fc-Dense/MatMul-op1"


def _tensor_record(high: float, low: float = -1.0, shape=(4, 8)) -> dict:
    return {"type": "mindspore.Tensor", "dtype": "Float32", "shape": list(shape), "Max": high, "Min": low,
            "Mean": 0.5, "Norm": 3.0}


# A small msprobe L1 statistics dump (the shape of the real ones in tests/support/gen_msprobe_dumps.py): Square's
# output overflows; its Cell chain and user frame come from construct.json and stack.json.
MSPROBE_DUMP = {"task": "statistics", "level": "L1", "framework": "mindspore", "dump_data_dir": None, "data": {
    "Functional.mean.0.forward": {"input_args": [_tensor_record(2.0)], "input_kwargs": {
        "keep_dims": {"type": "bool", "value": True}}, "output": [_tensor_record(1.0, shape=(4, 1))]},
    "Functional.square.0.forward": {"input_args": [_tensor_record(3.0)], "input_kwargs": {},
                                    "output": [_tensor_record(float("inf"))]},
    "Cell.net.head.Dense.forward.0": {"input_args": [_tensor_record(3.0)], "input_kwargs": {},
                                      "output": [_tensor_record(float("inf"))], "parameters": {
                                          "weight": _tensor_record(0.5)}},
    "Cell.net.head.Dense.parameters_grad.0": {"weight": _tensor_record(0.1)},
    "Cell.net.head.Dense.backward.0": {"input": [_tensor_record(1.0)], "output": [_tensor_record(1.0)]},
}}
MSPROBE_CONSTRUCT = {"Functional.mean.0.forward": "Cell.net.head.Dense.forward.0",
                     "Functional.square.0.forward": "Cell.net.head.Dense.forward.0",
                     "Cell.net.head.Dense.forward.0": "Cell.net.Net.forward.0", "Cell.net.Net.forward.0": None}
MSPROBE_STACK = {"0": [["Functional.square.0.forward", "Functional.mean.0.forward"], [
    "File /usr/lib/python3/site-packages/mindspore/ops/function.py, line 10, in square, \n return x * x",
    "File SRC, line 7, in construct, \n return x @ x"]]}
GUARD_SOURCE = (b"import mindspore\nfrom mindspore import nn, ops\n\n\nclass TokenAveragedLoss(nn.Cell):\n"
                b"    def construct(self, logits, labels, mask):\n"
                b"        token_count = mask.sum()\n"
                b"        return (logits * mask).sum() / token_count\n\n\n"
                b"net = TokenAveragedLoss()\n"
                b"train_step = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), 0.01))\n"
                b"import numpy as np\n"
                b"train_step(np.ones(2), np.ones(2), np.ones(2))\n")


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def seeds() -> Dict[str, bytes]:
    with np.errstate(over="ignore"):
        return _seeds()


def _seeds() -> Dict[str, bytes]:
    x = np.array([[1.0, 2.0], [3.0, 65504.0]], dtype=np.float16)   # x * 2 overflows: an anomaly to find
    stat_rows = [dict(op_type="MatMul", op_name=FULL, task_id=1, stream_id=0, timestamp=100 + i, io=io_, slot=0,
                      array=(x if io_ == "input" else x * 2)) for i, io_ in enumerate(("input", "output"))]
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = af.write_statistic_csv(os.path.join(tmp, "statistic.csv"), stat_rows, variant="2.2")
        stat = Path(csv_path).read_bytes()
        bin_path = af.write_dump_bin(os.path.join(tmp, "MatMul.x.1.0.100"), FULL, inputs=[x], outputs=[x * 2])
        dump_bin = Path(bin_path).read_bytes()
        opbin_path = af.write_opdebug_bin(os.path.join(tmp, "Opdebug.Node_OpDebug.9.0.100"),
                                          [{"unit": "AI Core", "task_id": 1, "stream_id": 0, "status": 0x20}])
        opdebug_bin = Path(opbin_path).read_bytes()
    ir = ("%para1_x : <Tensor[Float16], (2, 2)>\n"
          + ir_node(1, "MatMul", FULL, ["%para1", "%para1"], source=("SRC", 5, "return x @ x"))
          + ir_node(2, "Add", "Default/network-Net/Add-op2", ["%1", "%1"], source=("SRC", 6, "return y + y")))
    return {
        "npy": _npy_bytes(x),
        "dumpdata": dump_bin,
        "opdebug_json": json.dumps(af.opdebug_json_doc(
            [{"unit": "AI Core", "task_id": 1, "stream_id": 0, "status": 32}], "old")).encode(),
        "opdebug_json_new": json.dumps(af.opdebug_json_doc(
            [{"unit": "AIC", "task_id": 1, "stream_id": 0, "status": 32}], "new")).encode(),
        "opdebug_bin": opdebug_bin,
        "statistic_csv": stat,
        "mapping_csv": b"abcdef0123.npy,MatMul.Default_net.1.0.100.output.0.DefaultFormat.Float16.npy\n",
        "ir": ir.encode(),
        "dump_metadata": json.dumps({"device_target": "CPU", "ms_version": "2.10.0"}).encode(),
        "exec_order": f"NodeExecutionOrder-0\n{FULL}\nDefault/network-Net/Add-op2\n".encode(),
        "file_name": f"MatMul.{OP}.1.0.100.output.0.DefaultFormat.Float16.npy".encode(),
        "config": json.dumps({"common_dump_settings": {
            "op_debug_mode": 0, "dump_mode": 0, "path": "/tmp/dump", "net_name": "Net", "iteration": "0",
            "saved_data": "statistic", "input_output": 0, "kernels": [], "support_device": [0],
            "statistic_category": ["max", "min", "nan count"]},
            "e2e_dump_settings": {"enable": True, "trans_flag": True}}).encode(),
        "report": json.dumps({"schema_version": 1, "verdict": "anomaly", "first": {
            "op_type": "MatMul", "forward_op": "MatMul", "cell": "network.fc", "cell_type": "Dense",
            "source": {"file": "SRC", "line": 5, "code": "return x @ x"}}}).encode(),
        "source": (b"import mindspore\nfrom mindspore import nn\n\n\nclass Dense(nn.Cell):\n"
                   b"    def construct(self, x):\n        return x @ x\n"),
        "msprobe_dump": json.dumps(MSPROBE_DUMP).encode(),
        "msprobe_construct": json.dumps(MSPROBE_CONSTRUCT).encode(),
        "msprobe_stack": json.dumps(MSPROBE_STACK).encode(),
        "op_name": b"Functional.<b id=fz>$\\frac{a}{b}$\x1b[2J\x07.0.forward",
        "repro_report": json.dumps({"schema_version": 1, "verdict": "anomaly", "dump_dir": "DUMP", "first": {
            "op_name": OP, "op_type": "MatMul", "rank": 0, "iteration": 0, "graph": "0",
            "inputs": [{"slot": 0, "dtype": "float16"}], "outputs": [{"slot": 0, "dtype": "float16"}]}}).encode(),
        "guard_source": GUARD_SOURCE,
        "options": b"0-3,5 1,2-4 2",
        "convert_name": f"MatMul.{OP}.1.0.100".encode(),
        "layout_yaml": (b"model:\n  arch: llama\nparallel_config: &pc\n  data_parallel: 2\n  model_parallel: 1\n"
                        b"  pipeline_stage: 2\nrecompute: {<<: *pc, select: [1, 2]}\n"),
        "preset": (b"description: \"cpu overflow\"\npurpose: overflow\ndevice: cpu\nms_version: \"2.10\"\n"
                   b"jit_level: O0\nsteps: \"0-1\"\nranks: [0, 1]\nkernels: [SqrtGrad]\ninputs: false\n"
                   b"statistic_category: [max, min]\noverflow_number: 5\n"),
        "strategy_ckpt": _strategy_protobuf(),
        "strategy_json": json.dumps({"current_stage": 1, "parallel_strategy_item": {
            "Default/MatMul-op0": {"stage": 1, "parallel_strategy": [[2, 1], [1, 1]]}},
            "parallel_layout_item": {"w": {"dev_matrix": [2, 2], "tensor_map": [-1, 0], "tensor_shape": [4, 4],
                                           "field": 0, "opt_weight_shard_step": 0,
                                           "opt_weight_shard_size": 0}}}).encode(),
    }


def _strategy_protobuf() -> bytes:
    """A ParallelStrategyMap in protobuf wire format (node_strategy.proto): one op of stage 1, one layout [2, 2]."""
    from msoverflow.readers import _protobuf as pb
    strategys = pb.field_varint(1, 1) + pb.field_bytes(2, pb.field_varint(1, 2) + pb.field_varint(1, 1))
    strategy = pb.field_bytes(2, pb.field_bytes(1, "Default/MatMul-op0") + pb.field_bytes(2, strategys))
    layouts = (pb.field_bytes(1, pb.field_varint(1, 2) + pb.field_varint(1, 2))        # DevMatrix [2, 2]
               + pb.field_bytes(2, pb.field_varint(1, 1)))                                # TensorMap
    layout = pb.field_bytes(3, pb.field_bytes(1, "w") + pb.field_bytes(2, layouts))
    return pb.field_varint(1, 1) + strategy + layout


# ---- mutations ---------------------------------------------------------------------------------------------

TOKENS = [b"9" * 5000, b"9" * 25, b"-1", b"NaN", b"Infinity", b"-Infinity", b"1e999", b"nan", b"inf", b"None",
          b"1j", b"'f3'", b"'<f3'", b"[" * 3000, b"{\"a\":" * 2000, b"(" * 400, b"-" * 5000, b"\xff\xfe\xfd",
          b"\x00", b",", b"\"", b"'", b"\n", b"\r\n", b"/", b"..", b"\\", b"%1", b"# In file ",
          b"# Fullname with scope: (", b"\xff" * 10, b"\x80" * 9 + b"\x01", struct.pack("<Q", 1 << 62),
          struct.pack("<Q", 0), b":" + b"9" * 300 + b", 1~2/", b" " * 3000, b"a" * 70000, b"/dev/zero",
          b"statistic.csv", b"Opdebug.Node_OpDebug.", b"true", b"null", b"{}", b"[]"]


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "token", "repeat", "byte"]))
        pos = draw(st.integers(0, len(data))) if data else 0
        if op == "flip" and data:
            pos = min(pos, len(data) - 1)
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and data:
            pos = min(pos, len(data) - 1)
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            data[pos:pos + draw(st.integers(1, 64))] = b""
        elif op == "truncate":
            del data[pos:]
        elif op == "token":
            data[pos:pos] = draw(st.sampled_from(TOKENS))
        elif op == "repeat" and data:
            end = min(len(data), pos + draw(st.integers(1, 64)))
            data[pos:end] = bytes(data[pos:end]) * draw(st.integers(2, 2000))
        if len(data) > MAX_CASE_BYTES:
            del data[MAX_CASE_BYTES:]
    return bytes(data)


# Structured generators for the classes a byte mutation rarely reaches.
DIM = st.one_of(st.integers(0, 8), st.integers(-5, 1 << 70), st.just(10 ** 400), st.floats(), st.complex_numbers(),
                st.none(), st.text(max_size=4), st.booleans())


@st.composite
def npy_header_case(draw) -> bytes:
    descr = draw(st.one_of(st.sampled_from(["<f2", "<f4", "<f8", "|b1", "<i8", "f3", "<f3", "|O", "<U0", "|V0",
                                            "<c8", ">f4", "=f4", "|u1"]), st.text(max_size=6)))
    shape = draw(st.one_of(st.lists(DIM, max_size=6).map(tuple), st.lists(st.integers(1, 3), min_size=60,
                                                                         max_size=200).map(tuple), DIM))
    fortran = draw(st.one_of(st.booleans(), st.none(), st.integers()))
    header = "{" + f"'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, " + "}"
    header = header.ljust(((len(header) + 11) // 64 + 1) * 64 - 11) + "\n"
    encoded = header.encode("latin1", "replace")
    payload = draw(st.binary(max_size=64))
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", min(len(encoded), 0xFFFF)) + encoded + payload


@st.composite
def dumpdata_case(draw) -> bytes:
    """DumpData headers that lie: 100k dims, terabyte sizes, thousands of outputs, wrong wire types."""
    outputs = draw(st.sampled_from([0, 1, 2, 3000]))

    def tensor(io_out: bool):
        ndims = draw(st.sampled_from([0, 1, 2, 8] if outputs > 2 else [0, 1, 2, 8, 65, 1000, 100_000]))
        dims = [draw(st.integers(0, (1 << 64) - 1))] * ndims if ndims > 8 else \
            [draw(st.integers(0, 1 << 40)) for _ in range(ndims)]
        shape = pb.field_packed_varints(1, dims)
        size_no = 6 if io_out else 5
        body = pb.field_varint(1, draw(st.integers(0, 30))) + pb.field_varint(2, draw(st.integers(0, 50)))
        body += pb.field_bytes(3, shape) if draw(st.booleans()) else pb.field_varint(3, 7)   # wrong wire type
        body += pb.field_varint(size_no, draw(st.one_of(st.integers(0, 64), st.integers(0, (1 << 64) - 1))))
        return body
    message = pb.field_bytes(1, "2.0") + pb.field_varint(2, 1)
    one = tensor(True)
    message += pb.field_bytes(3, one) * outputs
    for _ in range(draw(st.integers(0, 2))):
        message += pb.field_bytes(4, tensor(False))
    if draw(st.booleans()):
        message += bytes([0x33])            # a group wire type
    message += pb.field_bytes(6, "Default/network-Net/MatMul-op1")
    length = draw(st.one_of(st.just(len(message)), st.integers(0, (1 << 64) - 1)))
    return struct.pack("<Q", length) + message + draw(st.binary(max_size=64))


@st.composite
def json_case(draw, seed: bytes) -> bytes:
    """JSON whose values have the wrong types, NaN, huge numbers or deep nesting in place of a value."""
    doc = json.loads(seed)
    hostile = st.one_of(st.none(), st.booleans(), st.floats(), st.integers(-(1 << 80), 1 << 80), st.text(max_size=8),
                        st.just([]), st.just({}), st.just([[[]]]), st.just("\udcff"))
    path = []
    node = doc
    while isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        path.append(key)
        node = node[key]
    value = draw(hostile)
    if path:
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
    else:
        doc = value if draw(st.booleans()) else doc
    text = json.dumps(doc, allow_nan=True)
    if draw(st.booleans()):
        depth = draw(st.sampled_from([10, 100, 5000]))
        text = text.replace("null", "[" * depth + "]" * depth, 1) if "null" in text else "[" * depth + text + "]" * depth
    if draw(st.booleans()):
        text = text.replace("1", "1" * draw(st.sampled_from([30, 5000, 100_000])), 1)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def hostile_name(draw) -> bytes:
    """Op names built from markup, escape sequences, mathtext and bytes that are not UTF-8."""
    parts = st.sampled_from(["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "\x1b[2J", "\x1b]8;;x\x07",
                             "\r", "\x9b31m", "$\\frac{" * 60 + "}" * 60 + "$", "${" * 300, "$x^{2}$", "|", "`",
                             "*", "_", "[a](javascript:x)", "&amp;", "\u202e", "\ud800", "a" * 5000, ".", "\n"])
    text = "".join(draw(st.lists(st.one_of(parts, st.text(max_size=6)), min_size=1, max_size=6)))
    return text.encode("utf-8", "surrogateescape" if "\ud800" not in text else "surrogatepass")


@st.composite
def option_words(draw) -> bytes:
    """--ranks/--steps/--jobs values: ranges, huge numbers, reversed ranges, lists, junk."""
    number = st.one_of(st.integers(-3, 40).map(str), st.integers(0, 10 ** 12).map(str), st.just("9" * 5000),
                       st.just("30000000"))
    item = st.one_of(number, st.tuples(number, number).map(lambda t: f"{t[0]}-{t[1]}"),
                     st.sampled_from(["all", "", "-", "0-", "-5", "1e9", "0x10", "nan", "١", "0-30000000"]))
    word = st.lists(item, min_size=1, max_size=4).map(",".join)
    return " ".join(draw(st.lists(word, min_size=3, max_size=3))).encode()


def case_bytes(kind: str, seed_map: Dict[str, bytes]):
    """The strategy for one target's input bytes."""
    if kind in targets_read.STRATEGIES:
        return targets_read.STRATEGIES[kind]()
    if kind in targets_cause.STRATEGIES:
        return targets_cause.STRATEGIES[kind]()
    seed_key = TARGETS[kind][0]
    base = mutated(seed_map[seed_key])
    extra = {"npy": npy_header_case(), "dumpdata": dumpdata_case(),
             "config_check": json_case(seed_map["config"]), "patch_from": json_case(seed_map["report"]),
             "dump_metadata": json_case(seed_map["dump_metadata"]),
             "opdebug_json": json_case(seed_map["opdebug_json"]),
             "cli_msprobe_dump": json_case(seed_map["msprobe_dump"]),
             "cli_msprobe_construct": json_case(seed_map["msprobe_construct"]),
             "cli_msprobe_stack": json_case(seed_map["msprobe_stack"]),
             "cli_render_names": hostile_name(), "cli_repro": json_case(seed_map["repro_report"]),
             "cli_options": option_words(), "patch_guard": st.just(seed_map["guard_source"]),
             "cli_convert_names": st.sampled_from([f"MatMul.{OP}.1.0.100", f"MatMul.{OP}.1.0.100.input.0.ND.BF16",
                                                   f"MatMul.{OP}.1.0.100.output.0.ND.UINT1"]).flatmap(
                 lambda name: mutated(name.encode() + b"." + b"x" * 200))}.get(kind)
    return st.one_of(base, extra) if extra is not None else base


# ---- targets -----------------------------------------------------------------------------------------------

def _warnings() -> List[str]:
    return []


def _read_npy(path: str, work: str):
    from msoverflow import stats
    from msoverflow.readers import npy
    try:
        header, array = npy.load(path)
    except npy.NpyError:
        return
    stats.compute(array, npy.header_dtype_name(header))


def _read_dumpdata(path: str, work: str):
    from msoverflow import stats
    from msoverflow.readers import dumpdata_bin
    events = dumpdata_bin.tensor_events(path, rank=0, graph="0", iteration=0, warn=_warnings().append)
    for event in events[:8]:
        if event.loader is not None:
            stats.compute(event.loader(), event.dtype)


def _read_opdebug(path: str, work: str):
    from msoverflow.readers import opdebug
    opdebug.read_opdebug(path, rank=0, graph="0", iteration=0, warn=_warnings().append)


def _read_statistic(path: str, work: str):
    from msoverflow.readers import statistic_csv
    statistic_csv.read_statistic_csv(path, rank=0, graph="0", iteration=0, warn=_warnings().append)


def _read_mapping(path: str, work: str):
    from msoverflow import layout
    layout.read_mapping(path, _warnings().append)


def _read_ir(path: str, work: str):
    from msoverflow import scope
    from msoverflow.readers import ir_graph
    graph = ir_graph.load_ir(path)
    for node in graph.nodes[:4]:
        if node.source_file:
            scope.enclosing_class(node.source_file, node.source_line or 0)


def _read_metadata(path: str, work: str):
    from msoverflow.readers import exec_order
    root = os.path.join(work, "rank_0")
    os.makedirs(os.path.join(root, ".dump_metadata"), exist_ok=True)
    shutil.copyfile(path, os.path.join(root, ".dump_metadata", "config.json"))
    exec_order.dump_metadata(root, _warnings().append)


def _read_exec_order(path: str, work: str):
    from msoverflow.readers import exec_order
    root = os.path.join(work, "rank_0")
    os.makedirs(os.path.join(root, "execution_order"), exist_ok=True)
    shutil.copyfile(path, os.path.join(root, "execution_order", "ms_execution_order_graph_0.csv"))
    exec_order.execution_order(root, "0", _warnings().append)


def _read_file_name(path: str, work: str):
    from msoverflow import layout, names
    name = Path(path).read_bytes().decode("utf-8", "surrogateescape").replace("/", "_").replace("\0", "_")
    names.parse(name)
    layout.interpret(os.path.join(work, "dump", "rank_0", "Net", "0", name))


# -- CLI targets: a small valid dump with the mutated file in it; main() in-process -------------------------

def _dump_with(work: str, name: str, data: bytes, *, graph_ir: bytes = None, source: bytes = None) -> str:
    root = os.path.join(work, "dump")
    step = os.path.join(root, "rank_0", "Net", "0", "0")
    os.makedirs(step, exist_ok=True)
    x = np.array([1.0, 2.0], dtype=np.float16)
    for io_, arr in (("input", x), ("output", x * 2)):
        np.save(os.path.join(step, f"MatMul.{OP}.1.0.100.{io_}.0.DefaultFormat.Float16.npy"), arr)
    with open(os.path.join(step, name), "wb") as fh:
        fh.write(data)
    if graph_ir is not None:
        os.makedirs(os.path.join(root, "rank_0", "graphs"), exist_ok=True)
        with open(os.path.join(root, "rank_0", "graphs", "ms_output_trace_code_graph_0.ir"), "wb") as fh:
            fh.write(graph_ir)
    return root


def tree_digest(root: str) -> str:
    """Names, kinds, sizes and contents of everything under `root` (links not followed)."""
    h = hashlib.sha256()
    for current, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files) + sorted(dirs):
            path = os.path.join(current, name)
            st_ = os.lstat(path)
            h.update(os.fsencode(os.path.relpath(path, root)) + f"|{st_.st_mode}|{st_.st_size}|".encode())
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def run_cli(argv: List[str]) -> int:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:   # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    text = err.getvalue()
    if "Traceback" in text or code not in CONTRACT_EXITS:
        raise CaseFailure(f"exit {code}: {text.strip()[-600:]}")
    return code


def _cli_analyze(path: str, work: str, name: str = None):
    data = Path(path).read_bytes()
    ir = SEEDS["ir"].replace(b"SRC", os.path.join(work, "model.py").encode())
    Path(work, "model.py").write_bytes(SEEDS["source"])
    if name is None:   # the mutated bytes land in one of the dump's files, picked by the data itself
        choice = data[:1][0] % 4 if data else 0
        name = ["statistic.csv", f"MatMul.{OP}.1.0.101.output.1.DefaultFormat.Float16.npy",
                "Opdebug.Node_OpDebug.9.0.100.output.0.json", "MatMul.x.1.0.100"][choice]
    root = _dump_with(work, name, data, graph_ir=ir)
    before = tree_digest(root)
    for fmt in ("json", "markdown"):
        run_cli(["analyze", os.path.join(root, "rank_0", "Net"), "--no-progress", "--format", fmt,
                 "-o", os.path.join(work, f"report.{fmt}")])
    if tree_digest(root) != before:
        raise CaseFailure("the dump tree changed")


def _cli_analyze_ir(path: str, work: str):
    """The mutated bytes are the saved graph: its source references and lines are hostile."""
    root = _dump_with(work, "x.txt", b"")
    os.makedirs(os.path.join(root, "rank_0", "graphs"), exist_ok=True)
    shutil.copyfile(path, os.path.join(root, "rank_0", "graphs", "ms_output_trace_code_graph_0.ir"))
    before = tree_digest(root)
    run_cli(["analyze", root, "--no-progress", "--format", "json", "-o", os.path.join(work, "r.json")])
    if tree_digest(root) != before:
        raise CaseFailure("the dump tree changed")


def _cli_convert(path: str, work: str):
    root = os.path.join(work, "acl")
    os.makedirs(root)
    shutil.copyfile(path, os.path.join(root, "MatMul.Default_network-Net_MatMul-op1.1.0.100"))
    before = tree_digest(root)
    run_cli(["convert", root, "-o", os.path.join(work, "out"), "-q"])
    if tree_digest(root) != before:
        raise CaseFailure("the dump tree changed")


def _cli_config_check(path: str, work: str):
    run_cli(["config", "--check", path, "--ms-version", "2.10", "--device", "cpu"])
    run_cli(["config", "--check", path, "--ms-version", "2.4", "--device", "ascend", "--json"])


def _cli_patch_from(path: str, work: str):
    src = os.path.join(work, "model.py")
    Path(src).write_bytes(SEEDS["source"])
    text = Path(path).read_bytes().replace(b"SRC", src.encode())
    report = os.path.join(work, "report.json")
    Path(report).write_bytes(text)
    before = tree_digest(work)
    run_cli(["patch", "--from", report])
    if tree_digest(work) != before:
        raise CaseFailure("patch without --write changed a file")


def _cli_patch_source(path: str, work: str):
    """The mutated bytes are the model source a report points at."""
    src = os.path.join(work, "model.py")
    shutil.copyfile(path, src)
    report = os.path.join(work, "report.json")
    Path(report).write_text(SEEDS["report"].decode().replace("SRC", src))
    run_cli(["patch", "--from", report])


# -- issue 21's surfaces: msprobe files, renderers with hostile names, repro, the guard patch, convert output
#    names, option grammars ------------------------------------------------------------------------------------

def _msprobe_dump(work: str, **files: bytes) -> str:
    """An msprobe dump (step0/rank0/) of the seed files, any of them replaced by `files`."""
    root = os.path.join(work, "dump")
    step = os.path.join(root, "step0", "rank0")
    os.makedirs(step, exist_ok=True)
    Path(work, "model.py").write_bytes(SEEDS["source"])
    seeds_of = {"dump.json": SEEDS["msprobe_dump"], "construct.json": SEEDS["msprobe_construct"],
                "stack.json": SEEDS["msprobe_stack"].replace(b"SRC", os.path.join(work, "model.py").encode())}
    for name, data in {**seeds_of, **files}.items():
        Path(step, name).write_bytes(data)
    return root


def _cli_msprobe(path: str, work: str, name: str):
    root = _msprobe_dump(work, **{name: Path(path).read_bytes()})
    before = tree_digest(root)
    for fmt in ("json", "markdown"):
        run_cli(["analyze", root, "--no-progress", "--format", fmt, "-o", os.path.join(work, f"report.{fmt}")])
    if tree_digest(root) != before:
        raise CaseFailure("the dump tree changed")


_MARKER = "<b id=fz>"                                   # a tag that must never reach a report unescaped
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CODE_SPAN = re.compile(r"(?<![`\\])(`+)(?!`)(.*?[^`])\1(?!`)", re.S)  # CommonMark code spans (not \`)


def _render_names(path: str, work: str):
    """Hostile op names (markup, escape sequences, mathtext, bytes that are not UTF-8) through every renderer:
    no exception, no raw HTML in markdown, no control characters in text, everything escaped in HTML."""
    from msoverflow.analysis import analyze
    from msoverflow.render import render
    raw = Path(path).read_bytes()
    name = raw.decode("utf-8", "surrogateescape")
    hostile = _MARKER + name
    doc = json.loads(SEEDS["msprobe_dump"])
    body = doc["data"].pop("Functional.square.0.forward")
    doc["data"][f"Functional.{hostile}.0.forward"] = body
    doc["data"][f"Cell.net.{hostile}.Dense.forward.0"] = doc["data"].pop("Cell.net.head.Dense.forward.0")
    text = json.dumps(doc, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogateescape")
    root = _msprobe_dump(work, **{"dump.json": text})
    report = analyze(root, progress=False)
    formats = ["text", "markdown"] + (["html"] if raw[:1] and raw[0] % 16 == 0 else [])
    for fmt in formats:
        out = render(report, fmt, 10)
        if fmt == "text" and _CONTROL.search(out.replace("\n", "").replace("\t", "")):
            raise CaseFailure(f"text report holds a control character: {_CONTROL.search(out)!r}")
        if fmt == "markdown":      # inside a code span markup is literal text; anywhere else it is HTML
            out = _CODE_SPAN.sub("", out)
        if fmt in ("markdown", "html") and _MARKER in out:
            raise CaseFailure(f"{fmt} report holds the injected tag {_MARKER!r} unescaped")


def _cli_repro(path: str, work: str):
    """A hostile report for repro: nothing written outside -o, the dump unchanged, the script a literal spec."""
    import ast
    root = _dump_with(work, "x.txt", b"")
    os.remove(os.path.join(root, "rank_0", "Net", "0", "0", "x.txt"))
    text = Path(path).read_bytes().replace(b"DUMP", root.encode())
    Path(work, "report.json").write_bytes(text)
    out = os.path.join(work, "out")
    before = tree_digest(root)
    run_cli(["repro", "--from", os.path.join(work, "report.json"), "-o", out])
    if tree_digest(root) != before:
        raise CaseFailure("the dump tree changed")
    outside = set(os.listdir(work)) - {"dump", "out", "report.json", "input"}
    if outside:
        raise CaseFailure(f"repro wrote outside -o: {sorted(outside)}")
    script = os.path.join(out, "repro.py")
    if os.path.isfile(script):
        tree = ast.parse(Path(script).read_text(encoding="utf-8"))
        spec = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SPEC")
        ast.literal_eval(spec.value)        # report text reaches the script only as data


def _patch_guard(path: str, work: str):
    """A hostile training script for the guard patch: dry run and --write; a script that parsed before still
    parses after."""
    import ast
    src = os.path.join(work, "train.py")
    shutil.copyfile(path, src)
    data = Path(src).read_bytes()
    line = next((i + 1 for i, l in enumerate(data.splitlines()) if b"/ token_count" in l), 1)
    argv = ["patch", "--how", "guard", "--op", "RealDiv", "--source", src, "--line", str(line)]
    run_cli(argv)
    try:
        parsed_before = ast.parse(data) is not None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        parsed_before = False
    code = run_cli(argv + ["--write"])
    if code == 0 and parsed_before and Path(src).read_bytes() != data:
        try:
            tree = ast.parse(Path(src).read_bytes())
        except SyntaxError as exc:
            raise CaseFailure(f"the guard patch made a script that does not parse: {exc}") from exc
        # what the patch binds (its helper, `import mindspore`, any msoverflow import) comes before its first use
        # (names the script itself already used before binding them are its own business)
        late = _used_before_bound(ast.parse(data)) if parsed_before else {}
        for name, (used, bound) in _used_before_bound(tree).items():
            if name not in late:
                raise CaseFailure(f"the patched script uses {name} on line {used} before binding it "
                                  f"(line {bound})")


def _used_before_bound(tree, names=("msoverflow", "mindspore", "_msoverflow_guard")) -> Dict[str, tuple]:
    """name -> (first use, binding line) for the names a top-level statement uses above their import/def."""
    import ast
    found = {}
    for name in names:
        bound = min((n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                     and any((a.asname or a.name).split(".")[0] == name for a in n.names)
                     or getattr(n, "name", None) == name), default=None)
        used = min((n.lineno for top in tree.body if getattr(top, "name", None) != name
                    and not isinstance(top, (ast.Import, ast.ImportFrom))
                    for n in ast.walk(top) if isinstance(n, ast.Name) and n.id == name), default=None)
        if used is not None and (bound is None or bound > used):
            found[name] = (used, bound)
    return found


def _cli_convert_names(path: str, work: str):
    """Hostile dump file names (long, not UTF-8, dots, dtype words) for convert: every output inside -o."""
    name = Path(path).read_bytes().replace(b"/", b"_").replace(b"\0", b"_")[:400] or b"x"
    if name in (b".", b".."):
        name = b"x" + name
    root = os.path.join(work, "acl")
    os.makedirs(root)
    data = bytes(range(256)) * 4 if b".ND." in name else SEEDS["dumpdata"]     # raw tensor bytes for raw names
    try:
        with open(os.path.join(os.fsencode(root), name[:255]), "wb") as fh:
            fh.write(data)
    except OSError:
        return
    before = tree_digest(root)
    run_cli(["convert", root, "-o", os.path.join(work, "out"), "-q"])
    if tree_digest(root) != before:
        raise CaseFailure("the dump tree changed")
    outside = set(os.listdir(work)) - {"acl", "out", "input"}
    if outside:
        raise CaseFailure(f"convert wrote outside -o: {sorted(outside)}")


def _cli_options(path: str, work: str):
    """Option grammars with hostile values: --ranks, --steps (analyze and config), --jobs, --top."""
    words = Path(path).read_bytes().decode("utf-8", "surrogateescape").split(" ")
    ranks, steps, other = (words + ["0", "0", "1"])[:3]
    root = _dump_with(work, "x.txt", b"")
    out = os.path.join(work, "r.json")
    run_cli(["analyze", root, "--no-progress", "--ranks", ranks, "--steps", steps, "-o", out])
    run_cli(["analyze", root, "--no-progress", "--jobs", other[:30], "--top", other[:30], "-o", out])
    run_cli(["config", "--device", "cpu", "--ms-version", "2.10", "--ranks", ranks, "--steps", steps,
             "--path", "/tmp/dump", "-o", os.path.join(work, "cfg.json")])


# kind -> (seed, function(path, workdir))
TARGETS: Dict[str, tuple] = {
    "npy": ("npy", _read_npy),
    "file_name": ("file_name", _read_file_name),
    "opdebug_json": ("opdebug_json", _read_opdebug),
    "opdebug_json_new": ("opdebug_json_new", _read_opdebug),
    "opdebug_bin": ("opdebug_bin", _read_opdebug),
    "dumpdata": ("dumpdata", _read_dumpdata),
    "statistic_csv": ("statistic_csv", _read_statistic),
    "mapping_csv": ("mapping_csv", _read_mapping),
    "ir": ("ir", _read_ir),
    "dump_metadata": ("dump_metadata", _read_metadata),
    "exec_order": ("exec_order", _read_exec_order),
    "strategy_ckpt": ("strategy_ckpt", lambda p, w: _read_strategy(p, w, "ckpt_strategy_rank_1.ckpt")),
    "strategy_json": ("strategy_json", lambda p, w: _read_strategy(p, w, "strategy.json")),
    "layout_yaml": ("layout_yaml", lambda p, w: _read_layout_yaml(p, w)),
    "config_preset": ("preset", lambda p, w: _cli_config_preset(p, w)),
    "cli_analyze": ("statistic_csv", _cli_analyze),
    "cli_analyze_npy": ("npy", lambda p, w: _cli_analyze(
        p, w, f"MatMul.{OP}.1.0.101.output.1.DefaultFormat.Float16.npy")),
    "cli_analyze_bin": ("dumpdata", lambda p, w: _cli_analyze(p, w, "MatMul.x.1.0.100")),
    "cli_analyze_ir": ("ir", _cli_analyze_ir),
    "cli_convert": ("dumpdata", _cli_convert),
    "config_check": ("config", _cli_config_check),
    "patch_from": ("report", _cli_patch_from),
    "patch_source": ("source", _cli_patch_source),
    "cli_msprobe_dump": ("msprobe_dump", lambda p, w: _cli_msprobe(p, w, "dump.json")),
    "cli_msprobe_construct": ("msprobe_construct", lambda p, w: _cli_msprobe(p, w, "construct.json")),
    "cli_msprobe_stack": ("msprobe_stack", lambda p, w: _cli_msprobe(p, w, "stack.json")),
    "cli_render_names": ("op_name", _render_names),
    "cli_repro": ("repro_report", _cli_repro),
    "patch_guard": ("guard_source", _patch_guard),
    "cli_convert_names": ("convert_name", _cli_convert_names),
    "cli_options": ("options", _cli_options),
}
# issue 28's targets (tests/fuzz/targets_read.py): compare with cut sides, completeness in any step, API
# arguments, --parallel, output paths of every command. Their inputs are plans hypothesis draws whole.
from tests.fuzz import targets_read  # noqa: E402  (it imports this module's helpers lazily)

TARGETS.update(targets_read.TARGETS)
# issue 33's targets (tests/fuzz/targets_cause.py): the recompute and the harmless stage, plans drawn whole.
from tests.fuzz import targets_cause  # noqa: E402

TARGETS.update(targets_cause.TARGETS)
ROUND4_TARGETS = list(targets_read.TARGETS) + list(targets_cause.TARGETS)
READER_TARGETS = [k for k in TARGETS if not k.startswith(("cli_", "config_", "patch_")) and k not in ROUND4_TARGETS]
CLI_TARGETS = [k for k in TARGETS if k not in READER_TARGETS]

def _read_layout_yaml(path: str, work: str):
    """A MindFormers YAML beside a dump (read without --parallel: only warnings), then named by --parallel."""
    from msoverflow import parallel_layout
    from msoverflow.errors import UserError
    os.makedirs(os.path.join(work, "dump"), exist_ok=True)
    shutil.copyfile(path, os.path.join(work, "run.yaml"))
    parallel_layout.resolve(None, os.path.join(work, "dump"), [0, 1, 2, 3], {}, _warnings().append)
    try:
        parallel_layout.parse_spec(os.path.join(work, "run.yaml"))
    except UserError:
        pass


def _cli_config_preset(path: str, work: str):
    preset = os.path.join(work, "mine.yaml")
    shutil.copyfile(path, preset)
    run_cli(["config", "--preset", preset, "--path", "/tmp/dump", "-o", os.path.join(work, "cfg.json")])


def _read_strategy(path: str, work: str, name: str):
    """A strategy checkpoint found beside a dump, as analyze finds MindFormers' output/strategy/ files."""
    from msoverflow import parallel_layout
    folder = os.path.join(work, "strategy")
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(path, os.path.join(folder, name))
    parallel_layout.resolve(None, os.path.join(work, "dump"), [0, 1, 2, 3], {}, _warnings().append)


SEEDS = seeds()


def run_case(kind: str, data: bytes) -> None:
    """One case in a fresh directory; CaseFailure (or any exception) is a contract break."""
    work = tempfile.mkdtemp(prefix="msoverflow-fuzz-")
    try:
        path = os.path.join(work, "input")
        with open(path, "wb") as fh:
            fh.write(data)
        if kind in READER_TARGETS:
            TARGETS[kind][1](path, work)
        else:
            TARGETS[kind][1](path, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def seed_strategy(kind: str) -> Callable:
    return case_bytes(kind, SEEDS)
