"""Dump forms found in the wild (issue 10). Fixtures are built from the vendor sources each test names
(tests/support/ascend_fixtures.py `build_wild_form`, msprobe docs for the PyTorch dump.json), never recorded from a
device; the real msprobe MindSpore dumps are in test_msprobe_real.py."""
import json
import os

import numpy as np
import pytest

from msoverflow import cli, names
from msoverflow import stats as tensor_stats
from msoverflow.analysis import analyze
from msoverflow.dtypes import canonical, decode_raw
from msoverflow.layout import LAYOUT_MSPROBE, LAYOUT_MSPROBE_KERNEL, interpret
from msoverflow.readers import dumpdata_bin as db
from msoverflow.readers import msprobe as mp
from msoverflow.readers import opdebug as od
from msoverflow.readers.ir_graph import parse_ir
from tests.support import ascend_fixtures as fx

# ---- every form analyses to the right op, step and kind ---------------------------------------------------

@pytest.mark.parametrize("form", [f for f in fx.WILD_FORMS if f != "undecodable_bin"])
def test_wild_form_names_the_origin(tmp_path, form):
    built = fx.build_wild_form(str(tmp_path / "dump"), form)
    report = analyze(built["root"], progress=False)
    assert report.verdict == "anomaly", report.warnings
    first = report.first
    assert (first.op_type, first.iteration, first.kind) == ("SqrtGrad", built["iteration"], "overflow")
    assert first.op_name == "Gradients_Default_net_lm_head-NormHead_Grad_Sqrt_SqrtGrad-op0"   # no ids, no slice
    if "Opdebug" not in str(sorted(os.listdir(built["dir"]))):   # with hardware flags only flagged ops are read
        assert [f.op_type for f in report.propagation][:1] == ["Cast"]
    assert not [w for w in report.warnings if "not understood" in w]


def test_undecodable_dtype_is_inconclusive_never_clean(tmp_path, capsys):
    built = fx.build_wild_form(str(tmp_path / "dump"), "undecodable_bin")
    report = analyze(built["root"], progress=False)
    assert report.verdict == "inconclusive" and report.first is None
    assert "DT_HIFLOAT8" in report.inconclusive[0]
    assert cli.main(["analyze", built["root"]]) == 3


def test_ffts_opdebug_record_matches_by_context_id(tmp_path):
    """Every op shares task 7 / stream 2 (FFTS+): only the context id in the record and the name tells them apart."""
    built = fx.build_wild_form(str(tmp_path / "dump"), "ffts_bin")
    report = analyze(built["root"], progress=False)
    assert report.first.flags and report.first.flags[0].context_id == 2
    assert report.first.flags[0].matched_op == report.first.op_name


# ---- names -------------------------------------------------------------------------------------------------

def test_ffts_names_keep_the_ids_out_of_the_op_name():
    # msaccucmp file_utils.py's example names
    p = names.parse("Add.partition0_rank1_new_sub_graph1_sgt_graph_0_Add.0.3.1673383728093446.4.1.0.0")
    assert (p.kind, p.op_type, p.task_id, p.stream_id, p.timestamp, p.context_id, p.thread_id) == (
        names.KIND_BIN, "Add", 0, 3, 1673383728093446, 1, 0)
    assert p.op_name == "partition0_rank1_new_sub_graph1_sgt_graph_0_Add"
    d = names.parse("Opdebug.Node_OpDebug.0.3.1673383728094391.4.1.0.0")
    assert (d.kind, d.task_id, d.stream_id, d.timestamp) == (names.KIND_OPDEBUG, 0, 3, 1673383728094391)
    j = names.parse("Opdebug.Node_OpDebug.0.3.1673383728094391.4.1.0.0.output.0.json")
    assert (j.kind, j.task_id, j.stream_id, j.context_id) == (names.KIND_OPDEBUG, 0, 3, 1)
    assert od.file_name_ids("Opdebug.Node_OpDebug.0.3.1673383728094391.4.1.0.0") == (0, 3, 1673383728094391)


def test_lxslice_is_split_off_the_op_name():
    # dump_utils.py's example
    p = names.parse("Conv2D.partition0_rank2_new_sub_graph15_sgt_graph_0_fp32_vars_conv2d_39_Conv2D_lxslice0."
                    "2.9.1670205071724946.4.487.0.0")
    assert (p.op_name, p.lxslice, p.task_id, p.stream_id, p.context_id) == (
        "partition0_rank2_new_sub_graph15_sgt_graph_0_fp32_vars_conv2d_39_Conv2D", 0, 2, 9, 487)


def test_names_without_a_stream_id():
    p = names.parse("Add.Add-op1.5.1673383728093446")
    assert (p.kind, p.op_name, p.task_id, p.stream_id, p.timestamp) == (names.KIND_BIN, "Add-op1", 5, -1,
                                                                        1673383728093446)
    assert names.parse("Opdebug.Node_OpDebug.5.1673383728093446").stream_id == -1


@pytest.mark.parametrize("name, io, slot, shape, dtype, kind", [
    ("Add.Add-op1.5.3.1673383728093446.output.0.npy", "output", 0, None, None, names.KIND_NPY),
    ("Add.Add-op1.5.3.1673383728093446.input.1.4x8.npy", "input", 1, (4, 8), None, names.KIND_NPY),
    ("Add.Add-op1.5.1673383728093446.input.1.4x8.npy", "input", 1, (4, 8), None, names.KIND_NPY),
    ("Add.Add-op1.5.3.1673383728093446.output.0.4_8.float16.NC1HWC0.bin", "output", 0, (4, 8), "float16",
     names.KIND_RAW),
    ("Sub.Default_network-Net_Sub-op0.10.10.1735011096427368.input.0.ND.BF16", "input", 0, None, "bfloat16",
     names.KIND_RAW),
    ("Sub.Sub-op0.10.10.1735011096427368.input.0.ND.HIFLOAT8", "input", 0, None, "hifloat8", names.KIND_RAW),
    ("Cast.Cast-op0.9.10.1735011096426349.input.0.ND.FLOAT.npy", "input", 0, None, "float32", names.KIND_NPY),
    ("Mm.Mm-op0.9.10.1735011096426349.input.0.ND.INT4.npy", "input", 0, None, "int4", names.KIND_NPY),
])
def test_converted_and_msprobe_tensor_names(name, io, slot, shape, dtype, kind):
    p = names.parse(name)
    assert (p.kind, p.io, p.slot, p.shape, p.dtype) == (kind, io, slot, shape, dtype)
    assert p.op_name.endswith("op0") or p.op_name.endswith("op1")


def test_per_op_statistics_csv_name():
    p = names.parse("SqrtGrad.SqrtGrad-op0.11.2.1705388945730100.csv")
    assert (p.kind, p.op_type, p.task_id) == (names.KIND_OPCSV, "SqrtGrad", 11)
    assert names.parse("statistic.csv") is None and names.parse("mapping.csv") is None


@pytest.mark.parametrize("word, canon", [("INT4", "int4"), ("UINT1", "uint1"), ("INT2", "int2"),
                                         ("UINT2", "uint2"), ("int4", "int4"), ("BF16", "bfloat16"),
                                         ("DT_BF16", "bfloat16"), ("FLOAT", "float32")])
def test_dtype_words(word, canon):
    assert canonical(word) == canon


# ---- dtypes ------------------------------------------------------------------------------------------------

def test_bf16_and_packed_integers_decode():
    values = np.array([1.0, -2.5, np.inf, np.nan, 3.0e38], np.float32)
    decoded = decode_raw(fx.to_bf16_bits(values).view(np.uint8), "bfloat16")
    assert decoded[0] == 1.0 and decoded[1] == -2.5 and np.isposinf(decoded[2]) and np.isnan(decoded[3])
    int4 = decode_raw(np.array([0x7F, 0x18], np.uint8), "int4")      # low nibble first
    assert int4.tolist() == [-1, 7, -8, 1]
    assert decode_raw(np.array([0b10110001], np.uint8), "uint1").tolist() == [1, 0, 0, 0, 1, 1, 0, 1]
    assert decode_raw(np.array([0b11100100], np.uint8), "int2").tolist() == [0, 1, -2, -1]


def test_bin_dump_decodes_every_new_dtype(tmp_path):
    """DT_BF16=27, DT_INT4=28, DT_UINT1=29, DT_INT2=30, DT_UINT2=31 (msprobe resource/dump_data.proto)."""
    bf = fx.to_bf16_bits(np.array([[1.0, np.inf]], np.float32))
    packed = np.array([0x21, 0x43], np.uint8)
    path = fx.write_dump_bin(str(tmp_path / "X.X-op0.1.2.1705388945730000"), "X-op0", [bf, packed, packed],
                             [packed, packed], data_type_override={("input", 0): 27, ("input", 1): 28,
                                                                   ("input", 2): 29, ("output", 0): 30,
                                                                   ("output", 1): 31})
    events = db.tensor_events(path, rank=0, graph="0", iteration=0)
    assert [e.dtype for e in events] == ["bfloat16", "int4", "uint1", "int2", "uint2"]
    first = np.asarray(events[0].loader())                  # decoded on demand (readers.raw.DecodedTensor)
    assert first.dtype == np.float32 and first[0, 0] == 1.0 and np.isposinf(first[0, 1])
    assert np.asarray(events[1].loader()).tolist() == [1, 2]   # the header's shape (2,) = 2 int4 values, low nibble first
    assert np.asarray(events[2].loader()).tolist() == [1, 0]   # uint1: bits, lowest first, cut to the shape
    stats = tensor_stats.compute(events[0].loader(), "bfloat16")   # chunked decode: the same values
    assert (stats.posinf, stats.max) == (1, 1.0)


# ---- layouts -----------------------------------------------------------------------------------------------

def test_msprobe_kernel_layout_step_is_the_iteration(tmp_path):
    d = interpret(str(tmp_path / "rank_5" / "20241224114456" / "step_7"))
    assert (d.layout, d.rank, d.iteration) == (LAYOUT_MSPROBE_KERNEL, 5, 7)
    f = interpret(str(tmp_path / "step3" / "rank2"))
    assert (f.layout, f.rank, f.iteration, f.graph) == (LAYOUT_MSPROBE, 2, 3, "pynative")
    g = interpret(str(tmp_path / "graph" / "step0" / "proc4242"))
    assert (g.layout, g.rank, g.iteration, g.graph) == (LAYOUT_MSPROBE, 0, 0, "graph")


# ---- Opdebug: MindSpore's own test fixture form -----------------------------------------------------------

def test_opdebug_zero_header_record_at_321(tmp_path):
    """mindspore debug_services.cc CheckOpOverflow: header length 0, stream id at 321+16, task id at 321+24."""
    blob = bytearray(8 + 400)
    blob[321 + 16:321 + 24] = (9).to_bytes(8, "little")
    blob[321 + 24:321 + 32] = (1234).to_bytes(8, "little")
    path = tmp_path / "Opdebug.Node_OpDebug.1.9.1705388945730050"
    path.write_bytes(bytes(blob))
    records = od.read_opdebug(str(path), rank=0, graph="1", iteration=0)
    assert [(r.task_id, r.stream_id) for r in records] == [(1234, 9)]
    short = tmp_path / "Opdebug.Node_OpDebug.1.9.1705388945730051"
    short.write_bytes(bytes(8 + 100))
    warnings = []
    assert od.read_opdebug(str(short), rank=0, graph="1", iteration=0, warn=warnings.append) == []
    assert "shorter than" in warnings[0]


# ---- .ir quirks --------------------------------------------------------------------------------------------

SHARED = "<~~This line of code can be shared by multiple nodes, and may be duplicated."


def test_ir_prefers_the_unshared_source_line_and_strips_the_marker():
    ir = [
        "  %5(CNode_12) = PrimFunc_Sqrt(%4) {instance name: sqrt}\n",
        "      : (<Tensor[Float16], (32, 1)>) -> (<Tensor[Float16], (32, 1)>)\n",
        "      : (<Float16xDefaultFormat, [32, 1]>) -> (<Float16xDefaultFormat, [32, 1]>)\n",
        "      # Fullname with scope: (Default/lm_head-NormHead/Sqrt-op0)\n",
        "      # In file /work/model.py:66~70, 4~85/    def construct(self, hidden_states):/\n",
        "      # In file /work/model.py:68, 15~40/        norm = self.sqrt(variance + self.eps)/\n",
        f"      # In file /work/model.py:60, 8~30/        x = self.helper(y)/{SHARED}\n",
        "  %6(CNode_13) = PrimFunc_Exp(%5) {instance name: exp}\n",
        "      : (<Tensor[Float16], (32, 1)>) -> (<Tensor[Float16], (32, 1)>)\n",
        "      # Fullname with scope: (Default/lm_head-NormHead/Exp-op0)\n",
        f"      # In file /work/model.py:60, 8~30/        x = self.helper(y)/{SHARED}\n",
    ]
    graph = parse_ir(ir)
    sqrt, exp = graph.by_full["Default/lm_head-NormHead/Sqrt-op0"], graph.by_full["Default/lm_head-NormHead/Exp-op0"]
    assert (sqrt.source_line, sqrt.source_code) == (68, "norm = self.sqrt(variance + self.eps)")
    assert (exp.source_line, exp.source_code) == (60, "x = self.helper(y)")      # only a shared line: kept, clean


def test_ir_source_is_the_innermost_single_line_never_an_enclosing_block():
    """The frames as MindSpore 2.10 writes them when the op's own line is marked shared: a multi-line `if` block
    (`:66~70`) is an enclosing block, never the op's line, even when it is the only unshared user frame."""
    ir = [
        "  %5(CNode_12) = PrimFunc_Mul(%4, %3)\n",
        "      : (<Tensor[Float16], (32, 1)>) -> (<Tensor[Float16], (32, 1)>)\n",
        "      # Fullname with scope: (Expand/_Muls/Mul-op0)\n",
        "      # In file /work/net.py:35~36, 4~27/    def construct(self, x):/\n",
        "      # In file /work/net.py:36, 15~24/        return self.head(x)/\n",
        "      # In file /work/model.py:64~72, 4~85/    def construct(self, hidden_states):/\n",
        "      # In file /work/model.py:66~70, 8~40/        if self.compute_dtype is not None:/\n",
        f"      # In file /work/model.py:68, 19~46/            norm = self.sqrt(variance + self.eps)/{SHARED}\n",
        "      # In file /site-packages/mindspore/ops/function/math_func.py:80, 4~30/    return mul_op(x, y)/\n",
    ]
    mul = parse_ir(ir).by_full["Expand/_Muls/Mul-op0"]
    assert (mul.source_line, mul.source_code) == (68, "norm = self.sqrt(variance + self.eps)")
    # the scope names no Cell: the call trace does (`self.head(x)` then head's construct)
    assert (mul.trace_cell, mul.trace_cell_at) == ("head", ("/work/model.py", 64))


def test_ir_trace_cell_restarts_after_a_call_that_is_not_an_attribute():
    ir = [
        "  %5(CNode_12) = PrimFunc_Mul(%4, %3)\n",
        "      # Fullname with scope: (Expand/_Muls/Mul-op0)\n",
        "      # In file /work/net.py:10, 15~37/        loss = self.ce(self._backbone(x), y)/\n",
        "      # In file /work/net.py:10, 15~22/        loss = self.ce(self._backbone(x), y)/\n",
        "      # In file /work/net.py:20~22, 4~27/    def construct(self, x):/\n",
        "      # In file /work/net.py:21, 16~30/            x = layer(x, mask)/\n",
        "      # In file /work/net.py:30~33, 4~27/    def construct(self, x, mask):/\n",
        "      # In file /work/net.py:31, 16~25/        x = x + self.attn(self.ln1(x), mask)/\n",
        "      # In file /work/net.py:40~44, 4~27/    def construct(self, x, mask):/\n",
        "      # In file /work/net.py:41, 8~20/        s = x.max(axis=-1)/\n",
    ]
    mul = parse_ir(ir).by_full["Expand/_Muls/Mul-op0"]
    assert (mul.trace_cell, mul.trace_cell_at) == ("attn", ("/work/net.py", 40))


def test_ir_older_dialect_from_the_dump_tutorial():
    """mindspore-ai/docs tutorials/source_en/debug/dump.md: wrapped attributes, `: full_name_with_scope: (...)`,
    `# In file path(175)/code/`."""
    ir = [
        "  %4(Conv2D-op12) = Conv2D(%3, %2) {instance name: conv2d} primitive_attrs: {input_names: [\n",
        "x, w],    pri_format: NC1HWC0, pad: (0, 0, 0, 0), visited: true, pad_mod: same, format: NCHW,  output_used_num:\n",
        "(1), stream_id:     0, stride: (1, 1, 1, 1), group: 1, output_names: [output], IsFeatureMapOutput: true}\n",
        "       : (<Tensor[Float32], (32, 256, 13, 13)>, <Tensor[Float32], (384, 256, 3, 3)>) -> "
        "(<Tensor[Float32], (32, 384, 13, 13)>)\n",
        "       : (<Float16xNC1HWC0[const vector][32, 16, 13, 13, 16]>, <Float16xFracZ[const vector][144, 24, 16, 16]>)"
        " -> (<Float32xNC1HWC0[const vector][32, 24, 13, 13, 16]>)\n",
        "       : full_name_with_scope: (Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op12)\n",
        "       # In file ./tain_alexnet.py(175)/        x = self.conv3(x)/\n",
    ]
    graph = parse_ir(ir)
    node = graph.find("Conv2D-op12")
    assert node.full_name == "Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op12"
    assert (node.source_file, node.source_line, node.source_code) == ("./tain_alexnet.py", 175, "x = self.conv3(x)")
    assert (node.inferred_out, node.kernel_out) == ("Float32", "Float32")


# ---- msprobe framework dumps: PyTorch dump.json (spec-built from msprobe's pytorch_data_dump_instruct.md) ----

def _tensor(dtype, shape, high, low, name=None):
    record = {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": high, "Min": low, "Mean": 0.0,
              "Norm": 1.0, "requires_grad": True}
    if name:
        record["data_name"] = name
    return record


def _write_pytorch_dump(directory, rank, overflow, allreduce_bad=False):
    inf = float("inf")
    data = {
        "Torch.matmul.0.forward": {"input_args": [_tensor("torch.float16", [4, 8], 3.0, -3.0),
                                                  _tensor("torch.float16", [8, 4], 2.0, -2.0)],
                                   "input_kwargs": {}, "output": [_tensor("torch.float16", [4, 4], 9.0, -9.0)]},
        "Torch.sqrt.0.forward": {"input_args": [_tensor("torch.float16", [4, 4], 9.0, 1e-3)], "input_kwargs": {},
                                 "output": [_tensor("torch.float16", [4, 4], 3.0, 0.03)]},
        "Distributed.all_reduce.0.forward": {
            "input_args": [_tensor("torch.float16", [4, 4], 1.0, -1.0)], "input_kwargs": {"op": None},
            "output": [_tensor("torch.float16", [4, 4], inf if allreduce_bad else 2.0, -2.0)]},
        "Torch.sqrt.0.backward": {"input": [_tensor("torch.float16", [4, 4], 47580.0, -1.0)],
                                  "output": [_tensor("torch.float16", [4, 4], inf if overflow else 60.0, -1.0)]},
        "Tensor.__mul__.0.backward": {"input": [_tensor("torch.float16", [4, 4], inf if overflow else 60.0, -1.0)],
                                      "output": [_tensor("torch.float16", [4, 4], inf if overflow else 60.0, -1.0),
                                                 None]},
    }
    os.makedirs(directory, exist_ok=True)
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    with open(os.path.join(directory, "dump.json"), "w") as fh:
        fh.write(json.dumps(doc, indent=1))          # Infinity written bare, as msprobe does
    frames = ["File /usr/lib/python3/site-packages/torch/nn/modules/module.py, line 1501, in _call_impl, \n"
              " return forward_call(*args, **kwargs)",
              "File /home/user/train.py, line 42, in forward, \n norm = torch.sqrt(var + self.eps)",
              "File /home/user/train.py, line 90, in <module>, \n loss = model(x)"]
    stack = {"0": [["Torch.sqrt.0.forward"], frames], "1": [["Torch.matmul.0.forward"], frames[2:]]}
    with open(os.path.join(directory, "stack.json"), "w") as fh:
        json.dump(stack, fh)
    with open(os.path.join(directory, "construct.json"), "w") as fh:
        json.dump({}, fh)


def test_pytorch_msprobe_dump_names_api_step_and_source(tmp_path):
    root = tmp_path / "dump"
    _write_pytorch_dump(str(root / "step0" / "rank0"), 0, overflow=False)
    _write_pytorch_dump(str(root / "step1" / "rank0"), 0, overflow=True)
    assert "Infinity" in (root / "step1" / "rank0" / "dump.json").read_text()
    report = analyze(str(root), progress=False)
    first = report.first
    assert report.verdict == "anomaly" and report.layout == "msprobe"
    assert (first.op_name, first.iteration, first.kind, first.forward_op) == (
        "Torch.sqrt.0.backward", 1, "overflow", "Sqrt")
    assert (first.source.file, first.source.line) == ("/home/user/train.py", 42)
    assert first.source.code == "norm = torch.sqrt(var + self.eps)"
    assert [f.op_name for f in report.propagation] == ["Tensor.__mul__.0.backward"]


def test_msprobe_multi_rank_collective_delivers_not_originates(tmp_path):
    """Rank 0 overflows in Sqrt's backward; rank 1's first bad value arrives through all_reduce."""
    root = tmp_path / "dump"
    _write_pytorch_dump(str(root / "step0" / "rank0"), 0, overflow=True)
    _write_pytorch_dump(str(root / "step0" / "rank1"), 1, overflow=False, allreduce_bad=True)
    report = analyze(str(root), progress=False)
    assert (report.first.rank, report.first.op_name) == (0, "Torch.sqrt.0.backward")
    assert report.ranks == [0, 1]
    assert all(f.rank == 0 for f in report.anomalies)          # rank 1 created nothing: it received
    assert [(a.rank, a.op_name) for a in report.arrivals] == [(1, "Distributed.all_reduce.0.forward")]
    from msoverflow import walk
    rank1 = [ex for unit in walk.units(str(root), ranks=[1]) for ex in walk.unit_executions(unit)
             if ex.op_type == "AllReduce"]
    assert rank1 and rank1[0].op_name == "Distributed.all_reduce.0.forward"


def test_msprobe_entry_names():
    assert mp.forward_of("Functional.sqrt.0.backward") == "Functional.sqrt.0.forward"
    assert mp.forward_of("Cell.lm_head.NormHead.backward.0") == "Cell.lm_head.NormHead.forward.0"
    assert mp.forward_of("Primitive.sqrt.Sqrt.0.forward") is None
    assert mp.entry_op_type("Primitive.real_div.RealDiv.3.forward") == "RealDiv"
    assert mp.entry_op_type("Tensor.__truediv__.0.forward") == "RealDiv"
    assert mp.entry_op_type("Functional.sqrt.0.backward") == "Sqrt.backward"
    assert mp.entry_op_type("Cell.layers.0.mlp.MLP.forward.0") == "MLP"
    assert mp.entry_op_type("Distributed.all_reduce.2.forward") == "AllReduce"
    parents = {"Functional.sqrt.0.forward": "Cell.layers.0.mlp.MLP.forward.0",
               "Cell.layers.0.mlp.MLP.forward.0": "Cell.layers.0.DecoderLayer.forward.0",
               "Cell.layers.0.DecoderLayer.forward.0": None}
    assert mp.cell_chain("Functional.sqrt.0.forward", parents) == [("layers.0", "DecoderLayer"), ("mlp", "MLP")]


def test_msprobe_unreadable_dump_json_is_never_clean(tmp_path):
    root = tmp_path / "dump"
    _write_pytorch_dump(str(root / "step0" / "rank0"), 0, overflow=False)
    broken = root / "step1" / "rank0"
    broken.mkdir(parents=True)
    (broken / "dump.json").write_text("{not json")
    report = analyze(str(root), progress=False)
    assert report.verdict == "inconclusive"
    assert any("step1" in reason and "dump.json" in reason for reason in report.inconclusive)
    only = tmp_path / "only"
    (only / "step0" / "rank0").mkdir(parents=True)
    (only / "step0" / "rank0" / "dump.json").write_text("{not json")
    assert cli.main(["analyze", str(only)]) in (2, 3)


def test_msprobe_raw_file_of_an_undecodable_dtype_is_inconclusive(tmp_path):
    """AclDumpDataProcessor.cpp writes raw bytes for dtypes npy lacks; one msoverflow cannot decode either
    (HIFLOAT8) keeps the verdict from being clean."""
    step = tmp_path / "dump" / "rank_0" / "20241224114456" / "step_0"
    step.mkdir(parents=True)
    core = "MatMul.Default_MatMul-op0.3.2.1735011096427368"
    np.save(step / f"{core}.input.0.ND.FLOAT.npy", np.ones((2, 2), np.float32))
    (step / f"{core}.output.0.ND.HIFLOAT8").write_bytes(bytes(4))
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert report.verdict == "inconclusive" and "HIFLOAT8" in report.inconclusive[0]


def test_msprobe_bf16_npy_keeps_the_declared_dtype(tmp_path):
    """msprobe adump converts BF16 to float32 for npy and keeps BF16 in the name (kDtypeTransMap)."""
    step = tmp_path / "dump" / "rank_0" / "20241224114456" / "step_4"
    step.mkdir(parents=True)
    core = "Mul.Default_Mul-op0.3.2.1735011096427368"
    np.save(step / f"{core}.input.0.ND.BF16.npy", np.full((2, 2), 3.0e38, np.float32))
    np.save(step / f"{core}.output.0.ND.BF16.npy", np.array([[np.inf, 1], [1, 1]], np.float32))
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert (report.first.op_type, report.first.iteration) == ("Mul", 4)
    assert report.first.inputs[0].dtype == "bfloat16" and not report.first.inputs[0].stats.bad
