"""Readers for what only Ascend writes: binary dumps, statistic.csv, Opdebug overflow records.

No Ascend device here: every fixture below is built by tests/support/ascend_fixtures.py FROM THE DOCUMENTED FORMAT
(shared/reference/mindspore-dumps.md), and the protobuf decoder is also checked against bytes serialised by the
real protobuf library.
"""
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from msoverflow import names
from msoverflow.readers import dumpdata_bin as db
from msoverflow.readers import opdebug as od
from msoverflow.readers import statistic_csv as sc
from tests.support import ascend_fixtures as fx

ALL_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "int64",
              "uint32", "uint64", "bool"]


def _array(dtype, shape, seed):
    rng = np.random.RandomState(seed)
    if dtype == "bool":
        return rng.rand(*shape) > 0.5
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.randint(max(info.min, -1000), min(info.max, 1000), size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 100).astype(dtype)


class Warnings(list):
    def __call__(self, message):
        self.append(message)


# ---- binary dump files ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_bin_round_trip_every_dtype(tmp_path, dtype):
    """Fixture built from the documented format: writer -> header reader -> memmap tensors, per dtype."""
    inputs = [_array(dtype, (3, 5), 1), _array(dtype, (7,), 2)]
    outputs = [_array(dtype, (2, 2, 2), 3)]
    path = fx.write_dump_bin(str(tmp_path / f"Add.Default_Add-op1.12.2.{1700000000000000}"), "Default/Add-op1",
                             inputs, outputs, dump_time=1700000000000001)
    header = db.read_dump_header(path)
    assert header.op_name == "Default/Add-op1"
    assert header.dump_time == 1700000000000001
    assert [s.shape for s in header.inputs] == [(3, 5), (7,)]
    assert [s.shape for s in header.outputs] == [(2, 2, 2)]
    assert all(s.dtype == dtype and s.format_name == "ND" and not s.problem for s in header.slots())
    for io, arrays in (("input", inputs), ("output", outputs)):
        for slot, expected in enumerate(arrays):
            got = db.read_tensor(path, io, slot)
            assert isinstance(got, np.memmap), "tensors must be views of the file, not copies"
            assert got.dtype == expected.dtype and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)


def test_bin_header_matches_real_protobuf_library(tmp_path):
    """The decoder reads bytes serialised by google.protobuf from a DumpData schema built at run time
    (field numbers from the documented format), so writer and reader cannot share a wire-format mistake."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="dump_data_test.proto", package="toolkit.dumpdata",
                                               syntax="proto3")

    def message(name, fields):
        m = proto.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = ".toolkit.dumpdata." + type_name
    OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("Shape", [("dim", 1, F.TYPE_UINT64, REP, None)])
    message("OpOutput", [("data_type", 1, F.TYPE_INT32, OPT, None), ("format", 2, F.TYPE_INT32, OPT, None),
                         ("shape", 3, F.TYPE_MESSAGE, OPT, "Shape"), ("data", 5, F.TYPE_BYTES, OPT, None),
                         ("size", 6, F.TYPE_UINT64, OPT, None), ("original_shape", 7, F.TYPE_MESSAGE, OPT, "Shape")])
    message("OpInput", [("data_type", 1, F.TYPE_INT32, OPT, None), ("format", 2, F.TYPE_INT32, OPT, None),
                        ("shape", 3, F.TYPE_MESSAGE, OPT, "Shape"), ("data", 4, F.TYPE_BYTES, OPT, None),
                        ("size", 5, F.TYPE_UINT64, OPT, None)])
    message("DumpData", [("version", 1, F.TYPE_STRING, OPT, None), ("dump_time", 2, F.TYPE_UINT64, OPT, None),
                         ("output", 3, F.TYPE_MESSAGE, REP, "OpOutput"), ("input", 4, F.TYPE_MESSAGE, REP, "OpInput"),
                         ("op_name", 6, F.TYPE_STRING, OPT, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    DumpData = message_factory.GetMessageClass(pool.FindMessageTypeByName("toolkit.dumpdata.DumpData"))

    x = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    y = np.array([[1, -2], [3, 4]], dtype=np.int32)
    msg = DumpData(version="2.0", dump_time=123456789012, op_name="Default/network/Mul-op7")
    inp = msg.input.add(data_type=2, format=2, size=x.nbytes)
    inp.shape.dim.extend(x.shape)
    out = msg.output.add(data_type=7, format=29, size=y.nbytes)
    out.shape.dim.extend(y.shape)
    out.original_shape.dim.extend([2, 2])
    blob = msg.SerializeToString()
    path = tmp_path / "Mul.Default_network_Mul-op7.3.2.123456789012"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + x.tobytes() + y.tobytes())

    header = db.read_dump_header(str(path))
    assert (header.version, header.dump_time, header.op_name) == ("2.0", 123456789012, "Default/network/Mul-op7")
    assert header.inputs[0].shape == (2, 3, 4) and header.inputs[0].dtype == "float16"
    assert header.outputs[0].format_name == "FRACTAL_NZ" and header.outputs[0].original_shape == (2, 2)
    np.testing.assert_array_equal(db.read_tensor(str(path), "input", 0), x)
    # FRACTAL_NZ is a device layout: the values come back flat, with a note saying so.
    np.testing.assert_array_equal(db.read_tensor(str(path), "output", 0), y.ravel())
    assert "FRACTAL_NZ" in db.layout_note(header.outputs[0])

    # And the other direction: our encoder's bytes parse with the real library.
    ours = fx.encode_dump_header("Default/Add-op1", [x], [y], dump_time=5)
    parsed = DumpData.FromString(ours)
    assert parsed.op_name == "Default/Add-op1" and list(parsed.input[0].shape.dim) == [2, 3, 4]
    assert parsed.output[0].size == y.nbytes and parsed.output[0].data_type == 7


def test_bin_inline_data_and_unpacked_dims(tmp_path):
    """Fixture built from the documented format: tensors stored in the protobuf `data` field, dims not packed."""
    a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    b = np.array([True, False, True])
    path = fx.write_dump_bin(str(tmp_path / "Cast.Cast-op2.1.1.10"), "Cast-op2", [a], [b],
                             inline_data=True, packed_shapes=False)
    header = db.read_dump_header(path)
    assert header.inputs[0].inline and header.inputs[0].shape == (2, 3)
    np.testing.assert_array_equal(db.read_tensor(path, "input", 0), a)
    np.testing.assert_array_equal(db.read_tensor(path, "output", 0), b)


def test_tensor_events_read_no_tensor_data(tmp_path, monkeypatch):
    """Fixture built from the documented format. Events come from the header alone; loaders map lazily."""
    big = np.zeros((256, 256), np.float16)
    path = fx.write_dump_bin(str(tmp_path / "SqrtGrad.Grad_SqrtGrad-op0.18.2.1700000000001100"),
                             "Gradients/Default/Grad_Sqrt/SqrtGrad-op0", [big, big], [big])

    def refuse(*args, **kwargs):
        raise AssertionError("tensor data touched while building events")
    monkeypatch.setattr(np, "memmap", refuse)
    warnings = Warnings()
    events = db.tensor_events(path, rank=3, graph="0", iteration=2, warn=warnings)
    assert warnings == []
    assert [(e.io, e.slot) for e in events] == [("input", 0), ("input", 1), ("output", 0)]
    event = events[2]
    assert (event.op_type, event.op_name, event.task_id, event.stream_id, event.timestamp) == (
        "SqrtGrad", "Grad_SqrtGrad-op0", 18, 2, 1700000000001100)
    assert (event.rank, event.graph, event.iteration, event.dtype, event.shape) == (3, "0", 2, "float16", (256, 256))
    assert event.stats is None and event.loader is not None
    monkeypatch.undo()
    assert event.loader().shape == (256, 256)


def test_bin_truncated_header_warns(tmp_path):
    """Malformed file (documented format cut short): too short for the length field."""
    path = tmp_path / "Add.Add-op1.1.1.1"
    path.write_bytes(b"\x10\x00\x00")
    warnings = Warnings()
    assert db.tensor_events(str(path), rank=0, graph="0", iteration=0, warn=warnings) == []
    assert len(warnings) == 1 and str(path) in warnings[0] and "too short" in warnings[0]


def test_bin_header_length_past_end_of_file_warns(tmp_path):
    """Malformed file built from the documented format with a header length larger than the file."""
    path = fx.write_dump_bin(str(tmp_path / "Add.Add-op1.1.1.1"), "Add-op1", [np.ones(4, np.float32)], [],
                             header_length_override=10_000)
    warnings = Warnings()
    assert db.tensor_events(path, rank=0, graph="0", iteration=0, warn=warnings) == []
    assert "runs past the end of the file" in warnings[0] and path in warnings[0]
    with pytest.raises(db.DumpFormatError):
        db.read_dump_header(path)


def test_bin_garbage_header_warns(tmp_path):
    """Malformed: a plausible length followed by bytes that are not a DumpData message."""
    path = tmp_path / "Add.Add-op1.1.1.1"
    path.write_bytes(struct.pack("<Q", 6) + b"\xff\xff\xff\xff\xff\xff" + b"\x00" * 10)
    warnings = Warnings()
    assert db.tensor_events(str(path), rank=0, graph="0", iteration=0, warn=warnings) == []
    assert "not a DumpData message" in warnings[0]


def test_bin_payload_shorter_than_sizes(tmp_path):
    """Fixture built from the documented format with the last bytes cut: earlier tensors stay readable."""
    a, b = np.arange(8, dtype=np.float32), np.arange(8, dtype=np.float32) * 2
    path = fx.write_dump_bin(str(tmp_path / "Mul.Mul-op1.1.1.5"), "Mul-op1", [a], [b], truncate_payload=4)
    warnings = Warnings()
    events = db.tensor_events(path, rank=0, graph="0", iteration=0, warn=warnings)
    assert len(events) == 2
    assert events[0].loader is not None and events[1].loader is None
    assert "payload truncated" in events[1].note
    assert len(warnings) == 1 and "output 0" in warnings[0] and path in warnings[0]
    np.testing.assert_array_equal(events[0].loader(), a)


def test_bin_unknown_data_type_is_reported_not_guessed(tmp_path):
    """Fixture built from the documented format with data_type 99 (in no enum) in the first slot."""
    a = np.arange(6, dtype=np.float16)
    b = np.arange(3, dtype=np.int32)
    path = fx.write_dump_bin(str(tmp_path / "Cast.Cast-op1.1.1.5"), "Cast-op1", [a], [b],
                             data_type_override={("input", 0): 99})
    warnings = Warnings()
    events = db.tensor_events(path, rank=0, graph="0", iteration=0, warn=warnings)
    assert events[0].dtype is None and events[0].loader is None and "data_type 99" in events[0].note
    assert events[0].note.startswith("undecodable")
    assert any("data_type 99" in w for w in warnings)
    # The next tensor's offset still follows from the header's size field.
    np.testing.assert_array_equal(events[1].loader(), b)
    with pytest.raises(db.DumpFormatError):
        db.read_tensor(path, "input", 0)


# ---- statistic.csv ----------------------------------------------------------------------------------

def _stat_rows():
    f16 = np.array([[1.5, -np.inf, np.nan], [np.inf, 60000, -2]], np.float16)
    f32 = np.array([1e5, -3.0, 0.0, 7.0], np.float32)
    ints = np.array([[3, -9], [4, 0]], np.int32)
    flags = np.array([True, False, True])
    all_bad = np.array([np.nan, np.inf], np.float16)
    arrays = [f16, f32, ints, flags, all_bad]
    rows = []
    for i, array in enumerate(arrays):
        rows.append({"op_type": "SqrtGrad" if i == 0 else "Op%d" % i,
                     "op_name": "Gradients/Default/network/Grad_Sqrt/SqrtGrad-op0" if i == 0 else f"Op{i}-op0",
                     "task_id": 10 + i, "stream_id": 2, "timestamp": 1700000000000000 + i, "io": "output",
                     "slot": 0, "array": array})
    return rows, arrays


@pytest.mark.parametrize("variant", ["2.2", "2.3", "format-col", "trailing-comma", "unquoted-shape"])
@pytest.mark.parametrize("dtype_style", ["numpy", "DT", "MindSpore"])
def test_statistic_csv_variants(tmp_path, variant, dtype_style):
    """Fixture built from the documented format: every header variant reads back the same statistics."""
    rows, arrays = _stat_rows()
    path = fx.write_statistic_csv(str(tmp_path / "statistic.csv"), rows, variant, dtype_style=dtype_style)
    warnings = Warnings()
    events = sc.read_statistic_csv(path, rank=1, graph="0", iteration=4, warn=warnings)
    assert warnings == []
    assert len(events) == len(arrays)
    for event, array in zip(events, arrays, strict=True):
        assert event.shape == array.shape
        assert event.dtype == array.dtype.name
        assert event.loader is None and event.io == "output"
        stats = event.stats
        flat = array.astype(np.float64).ravel()
        finite = flat[np.isfinite(flat)]
        assert stats.count == array.size
        assert stats.nan == np.isnan(flat).sum()
        assert stats.posinf == np.isposinf(flat).sum()
        assert stats.neginf == np.isneginf(flat).sum()
        if finite.size:
            assert stats.max == pytest.approx(finite.max()) and stats.min == pytest.approx(finite.min())
            assert stats.max_abs == pytest.approx(np.abs(finite).max())
        else:  # the writer puts `null` when every value is non-finite
            assert stats.max is None and stats.min is None and stats.max_abs is None
    assert events[0].op_name == "Gradients_Default_network_Grad_Sqrt_SqrtGrad-op0"  # joins with file names
    assert (events[0].task_id, events[0].stream_id, events[0].timestamp) == (10, 2, 1700000000000000)


def test_statistic_csv_configured_categories_only(tmp_path):
    """2.3+ with only max/min configured (documented format): missing counts are flagged as unknown."""
    rows, arrays = _stat_rows()
    path = fx.write_statistic_csv(str(tmp_path / "statistic.csv"), rows, "minimal")
    events = sc.read_statistic_csv(path, rank=0, graph="0", iteration=0, warn=Warnings())
    assert "not recorded: nan, posinf, neginf" in events[0].note
    assert events[0].stats.count == arrays[0].size           # from the shape
    assert events[0].stats.max == 60000


def test_statistic_csv_over_range_and_saturation(tmp_path):
    """Declared fp16 holding 70000 (an fp32 payload) is over range; exactly 65504 is at the dtype max."""
    rows = [{"op_type": "SqrtGrad", "op_name": "SqrtGrad-op0", "task_id": 1, "stream_id": 1, "timestamp": 5,
             "io": "output", "slot": 0, "array": np.array([70000.0, 1.0], np.float32), "declared_dtype": "Float16"},
            {"op_type": "Mul", "op_name": "Mul-op0", "task_id": 2, "stream_id": 1, "timestamp": 6,
             "io": "output", "slot": 0, "array": np.array([65504.0, -3.0], np.float16)},
            {"op_type": "Mul", "op_name": "Mul-op1", "task_id": 3, "stream_id": 1, "timestamp": 7,
             "io": "output", "slot": 0, "array": np.array([1000.0, -3.0], np.float16)}]
    path = fx.write_statistic_csv(str(tmp_path / "statistic.csv"), rows, "2.2")
    events = sc.read_statistic_csv(path, rank=0, graph="0", iteration=0, warn=Warnings())
    assert events[0].dtype == "float16" and events[0].stats.over_range >= 1 and events[0].stats.bad
    assert events[1].stats.at_max >= 1 and events[1].stats.over_range == 0
    assert events[2].stats.at_max == 0 and events[2].stats.over_range == 0 and not events[2].stats.bad


def test_statistic_csv_bad_rows_warn_and_skip(tmp_path):
    """Hand-edited statistic.csv (documented header) with broken rows: each is reported and skipped."""
    path = tmp_path / "statistic.csv"
    path.write_text(
        "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
        "NaN Count,Positive Inf Count,\n"
        'Add,Add-op1,1,2,100,output,0,8,float32,"(2)",1.0,-1.0,0,0,\n'
        'Add,Add-op2,1,2,notanumber,output,0,8,float32,"(2)",1.0,-1.0,0,0,\n'
        'Add,Add-op3,1,2,101,sideways,0,8,float32,"(2)",1.0,-1.0,0,0,\n'
        'Add,Add-op4,1,2,102,input,0,8,float32,"(2,x)",1.0,-1.0,0,0,\n'
        'Add,Add-op5,1,2,103,input,1,8,float32,"[3, 4]",null,null,12,0,\n'
        'Add,Add-op6,1,2,104,input,1\n')
    warnings = Warnings()
    events = sc.read_statistic_csv(str(path), rank=0, graph="0", iteration=0, warn=warnings)
    assert [e.op_name for e in events] == ["Add-op1", "Add-op5", "Add-op6"]
    assert events[1].shape == (3, 4) and events[1].stats.nan == 12 and events[1].stats.max is None
    assert sum("skipped" in w for w in warnings) == 3
    assert all(str(path) in w for w in warnings)
    assert any("row 3" in w and "timestamp" in w for w in warnings)


def test_statistic_csv_unusable_files_warn(tmp_path):
    """An empty statistic.csv, one without the documented header, and a missing one: warnings, no crash."""
    warnings = Warnings()
    empty = tmp_path / "empty" / "statistic.csv"
    empty.parent.mkdir()
    empty.write_text("")
    assert sc.read_statistic_csv(str(empty), rank=0, graph="0", iteration=0, warn=warnings) == []
    other = tmp_path / "statistic.csv"
    other.write_text("a,b,c\n1,2,3\n")
    assert sc.read_statistic_csv(str(other), rank=0, graph="0", iteration=0, warn=warnings) == []
    assert len(warnings) == 2 and "lacks" in warnings[1]
    assert sc.read_statistic_csv(str(tmp_path / "missing.csv"), rank=0, graph="0", iteration=0, warn=warnings) == []
    assert len(warnings) == 3


@pytest.mark.parametrize("text,expected", [("DT_FLOAT16", "float16"), ("float16", "float16"),
                                           ("Float16", "float16"), ("DT_FLOAT", "float32"), ("FLOAT", "float32"),
                                           ("BFloat16", "bfloat16"), ("DT_BF16", "bfloat16"), ("bf16", "bfloat16"),
                                           ("kNumberTypeInt32", "int32"), ("DT_DOUBLE", "float64"),
                                           ("Bool", "bool"), ("null", None)])
def test_dtype_spellings(text, expected):
    assert sc.normalize_dtype(text) == expected


@pytest.mark.parametrize("text,expected", [("(2,3)", (2, 3)), ("[2, 3]", (2, 3)), ("()", ()), ("[]", ()),
                                           ("(7)", (7,)), ("4,5", (4, 5)), ("null", None)])
def test_shape_strings(text, expected):
    assert sc.parse_shape(text) == expected


# ---- Opdebug -------------------------------------------------------------------------------------------

def _opdebug_path(tmp_path, task=2, stream=1, ts=1700000000002000, suffix=".output.0.json"):
    return str(tmp_path / f"Opdebug.Node_OpDebug.{task}.{stream}.{ts}{suffix}")


def test_opdebug_old_json(tmp_path):
    """Old-style Opdebug JSON built from the documented format: only the flagged unit becomes a record."""
    path = fx.write_opdebug_json(_opdebug_path(tmp_path), [
        {"unit": "AI Core", "task_id": 18, "stream_id": 2, "status": 0x20 | 0x100, "block_idx": 3}], "old")
    warnings = Warnings()
    records = od.read_opdebug(path, rank=5, graph="0", iteration=1, warn=warnings)
    assert warnings == []
    assert len(records) == 1
    record = records[0]
    assert (record.unit, record.task_id, record.stream_id, record.status) == ("AI Core", 18, 2, 0x120)
    assert record.status_words == ["float overflow", "fp32/int32 to fp16 conversion overflow"]
    assert record.timestamp == 1700000000002000        # from the file name
    assert (record.rank, record.graph, record.iteration) == (5, "0", 1)


def test_opdebug_old_json_atomic_and_string_values(tmp_path):
    """Documented old layout as converters write it: hex strings for addresses, status as a string."""
    doc = {"DHA Atomic Add": {"model_id": 1, "stream_id": "3", "task_id": "40", "task_type": 0,
                              "pc_start": "0x0", "para_base": "0x0", "status": "1"},
           "L2 Atomic Add": {"model_id": 1, "stream_id": 0, "task_id": 0, "status": 0},
           "AI Core": {"model_id": 1, "stream_id": 0, "task_id": 0, "status": "0x0", "kernel_code": "0x0"}}
    path = tmp_path / "Opdebug.Node_OpDebug.1.1.99.output.0.json"
    path.write_text(json.dumps(doc))
    records = od.read_opdebug(str(path), rank=0, graph="0", iteration=0, file_timestamp=123, warn=Warnings())
    assert [(r.unit, r.task_id, r.stream_id, r.status_words, r.timestamp) for r in records] == [
        ("DHA Atomic Add", 40, 3, ["atomic add overflow"], 123)]


@pytest.mark.parametrize("count", [1, 2])
def test_opdebug_new_json(tmp_path, count):
    """New-style (magic/acc_list) JSON built from the documented format, one entry or a list of them."""
    entries = [{"unit": "AIV", "task_id": 18, "stream_id": 2, "status": 0x20, "context_id": 4, "thread_id": 1},
               {"unit": "AIC", "task_id": 30, "stream_id": 2, "status": 0x400, "context_id": 0, "thread_id": 0}]
    path = fx.write_opdebug_json(_opdebug_path(tmp_path), entries[:count], "new")
    records = od.read_opdebug(path, rank=0, graph="0", iteration=0, warn=Warnings())
    assert [(r.unit, r.task_id, r.context_id, r.thread_id, r.status_words) for r in records] == [
        ("AIV", 18, 4, 1, ["float overflow"]), ("AIC", 30, 0, 0, ["cube accumulation overflow"])][:count]


@pytest.mark.parametrize("style", ["old", "new"])
def test_opdebug_binary_record(tmp_path, style):
    """Binary Opdebug file built from the documented format: a DumpData whose output[0] holds the raw
    2048-byte record (old) or the magic 0x5A5A5A5A layout (new)."""
    unit = "AI Core" if style == "old" else "AIV"
    records_in = [{"unit": unit, "task_id": 77, "stream_id": 6, "status": 0x10 | 0x08, "context_id": 2,
                   "thread_id": 9}]
    if style == "new":
        records_in.append({"unit": "SDMA", "task_id": 78, "stream_id": 6, "status": 1})
        records_in.append({"unit": "AICPU", "task_id": 79, "stream_id": 6, "status": 0})
    path = fx.write_opdebug_bin(_opdebug_path(tmp_path, suffix=""), records_in, style, dump_time=42)
    warnings = Warnings()
    records = od.read_opdebug(path, rank=0, graph="0", iteration=0, warn=warnings)
    assert warnings == []
    assert records[0].unit == unit and (records[0].task_id, records[0].stream_id) == (77, 6)
    assert records[0].status_words == ["sign flip of the minimum integer", "integer overflow"]
    if style == "new":
        assert (records[0].context_id, records[0].thread_id) == (2, 9)
        assert [(r.unit, r.task_id, r.status) for r in records[1:]] == [("SDMA", 78, 1)]  # AICPU status 0 dropped
    else:
        assert len(records) == 1


def test_opdebug_status_zero_warns(tmp_path):
    """Documented old JSON with every status 0: no record, one warning."""
    path = fx.write_opdebug_json(_opdebug_path(tmp_path), [], "old")
    warnings = Warnings()
    assert od.read_opdebug(path, rank=0, graph="0", iteration=0, warn=warnings) == []
    assert len(warnings) == 1 and "no overflow flagged" in warnings[0] and path in warnings[0]


@pytest.mark.parametrize("content", ['{"AI Core": {"status": 32', "[1, 2]", '{"version": 1}', "\xff\xfe"])
def test_opdebug_bad_json_warns(tmp_path, content):
    """Opdebug JSON files that break the documented format (cut short, wrong shape, no unit, not UTF-8)."""
    path = tmp_path / "Opdebug.Node_OpDebug.1.1.5.output.0.json"
    path.write_bytes(content.encode("latin-1"))
    warnings = Warnings()
    assert od.read_opdebug(str(path), rank=0, graph="0", iteration=0, warn=warnings) == []
    assert len(warnings) == 1 and str(path) in warnings[0]


def test_opdebug_bad_binary_warns(tmp_path):
    """A binary Opdebug file (documented format) whose record is neither layout."""
    path = fx.write_dump_bin(_opdebug_path(tmp_path, suffix=""), "Node_OpDebug", [], [np.zeros(100, np.uint8)])
    warnings = Warnings()
    assert od.read_opdebug(path, rank=0, graph="0", iteration=0, warn=warnings) == []
    assert "neither the 2048-byte layout" in warnings[0]


def test_decode_status():
    """AI Core status bits from the documented table; atomic units: any status > 0 is an overflow."""
    assert od.decode_status("AI Core", 0) == []
    assert od.decode_status("AIV", 0x20) == ["float overflow"]
    assert od.decode_status("AI Core", 0x80 | 0x400) == ["negative value converted to unsigned",
                                                          "cube accumulation overflow"]
    assert od.decode_status("AI Core", 0x1) == ["unknown status bits 0x1"]
    assert od.decode_status("L2 Atomic Add", 5) == ["atomic add overflow"]


def _record(task=18, stream=2, source="Opdebug.Node_OpDebug.2.1.900.output.0.json", **kw):
    from msoverflow.model import OverflowRecord
    return OverflowRecord(source=source, rank=0, graph="0", step=0, timestamp=900, unit="AI Core",
                          task_id=task, stream_id=stream, status=32, **kw)


def test_match_records_by_ids_inside_record_earliest_first():
    """The record's own task/stream ids pick the op, earliest dump file first; the Opdebug file name's ids
    (the OpDebug node's own, per the documented format) are not used when the record has ids."""
    candidates = [("SqrtGrad", "SqrtGrad-op0", 18, 2, 500), ("SqrtGrad", "SqrtGrad-op0-late", 18, 2, 800),
                  ("SqrtGrad", "SqrtGrad-op0-early", 18, 2, 300),
                  # the ids from the Opdebug FILE NAME (task 2, stream 1): a decoy that must not win
                  ("Cast", "Cast-op9", 2, 1, 100),
                  ("Mul", "Mul-op1", 18, 3, 50)]
    [(record, match)] = od.match_records([_record()], candidates)
    assert match[1] == "SqrtGrad-op0-early" and record.matched_op == "SqrtGrad-op0-early"


def test_match_records_falls_back_to_file_name_ids_and_reports_unmatched():
    """A record without ids falls back to the documented Opdebug file-name ids; an unmatched one comes back
    with None so the caller can report it."""
    candidates = [{"op_type": "Cast", "op_name": "Cast-op9", "task_id": 2, "stream_id": 1, "timestamp": 100}]
    no_ids = _record(task=-1, stream=-1)
    unmatched = _record(task=99, stream=9)
    pairs = od.match_records([no_ids, unmatched], candidates)
    assert pairs[0][1]["op_name"] == "Cast-op9"
    assert pairs[1] == (unmatched, None) and unmatched.matched_op is None


def test_match_records_context_and_thread_ids():
    candidates = [("MatMul", "MatMul-op1", 18, 2, 100, 0, 0), ("MatMul", "MatMul-op2", 18, 2, 200, 4, 1)]
    [(_, match)] = od.match_records([_record(context_id=4, thread_id=1)], candidates)
    assert match[1] == "MatMul-op2"


def test_match_records_against_tensor_events(tmp_path):
    """TensorEvents from a binary dump (documented format) are valid candidates."""
    path = fx.write_dump_bin(str(tmp_path / "SqrtGrad.SqrtGrad-op0.18.2.1000"), "SqrtGrad-op0",
                             [np.ones(2, np.float16)], [np.full(2, np.inf, np.float16)])
    events = db.tensor_events(path, rank=0, graph="0", iteration=0, warn=Warnings())
    [(record, match)] = od.match_records([_record()], events)
    assert match is events[0] and record.matched_op == "SqrtGrad-op0"


# ---- the seed scenario -------------------------------------------------------------------------------

def _all_files(root):
    for current, _, files in os.walk(root):
        for name in files:
            yield os.path.join(current, name)


def test_seed_scenario_opdebug_bin_statistic(tmp_path):
    """Seed case built from the documented formats: 8-rank pipeline-parallel Baichuan2-13B-like dump where
    NormHead's SqrtGrad overflows first on the last stage; the readers alone recover the evidence."""
    d = fx.build_seed_scenario(str(tmp_path / "dump"), formats=("opdebug", "bin", "statistic"), layout="async22")
    origin = d["origin"]
    assert origin["rank"] // d["ranks_per_stage"] == d["stages"] - 1        # last stage
    assert origin["op_type"] == "SqrtGrad" and origin["full_name"] == fx.SQRTGRAD_FULL_NAME
    assert d["raw_earliest"]["rank"] != origin["rank"], "skewed clocks must mislead a raw-clock comparison"
    assert d["true_earliest"]["op_type"] == "SqrtGrad"
    assert sum(os.path.getsize(p) for p in _all_files(d["root"])) < 400_000   # tiny fixtures

    # Opdebug: two records on the origin rank, both matched to SqrtGrad by the ids inside them.
    origin_files = [p for p in d["opdebug_files"] if f"rank_{origin['rank']}" in p]
    assert len(origin_files) == 2 and all("debug_files" in p for p in origin_files)
    events = []
    for path in _all_files(origin["dir"]):
        if names.parse(os.path.basename(path)) and names.parse(os.path.basename(path)).kind == names.KIND_BIN:
            events += db.tensor_events(path, rank=origin["rank"], graph="0", iteration=1, warn=Warnings())
    records = []
    for path in origin_files:
        records += od.read_opdebug(path, rank=origin["rank"], graph="0", iteration=1, warn=Warnings())
    pairs = od.match_records(records, events)
    assert len(pairs) == 2 and all(m is not None and m.op_type == "SqrtGrad" for _, m in pairs)

    # Binary dump: finite fp16 inputs reaching 47580 (47584 in fp16), inf output.
    sqrt_grad = [e for e in events if e.op_type == "SqrtGrad"]
    dy = np.asarray(sqrt_grad[1].loader(), np.float32)
    out = np.asarray(sqrt_grad[2].loader(), np.float32)
    assert np.isfinite(dy).all() and abs(dy.max() - 47580) < 32 and np.isinf(out).any()

    # statistic.csv says the same without reading a tensor.
    stats = sc.read_statistic_csv(os.path.join(origin["dir"], "statistic.csv"), rank=origin["rank"], graph="0",
                                  iteration=1, warn=Warnings())
    rows = {(e.io, e.slot): e.stats for e in stats if e.op_type == "SqrtGrad"}
    assert rows[("input", 1)].max_abs == 47584 and not rows[("input", 1)].bad
    assert rows[("output", 0)].posinf >= 1

    # Distractors: NaN received on stage 0 through Receive, later in true time.
    receive_rank = d["distractors"][0]["rank"]
    stage0 = sc.read_statistic_csv(os.path.join(d["dirs"][receive_rank][1], "statistic.csv"), rank=receive_rank,
                                   graph="0", iteration=1, warn=Warnings())
    received = [e for e in stage0 if e.op_type == "Receive" and e.io == "output" and e.stats.nan]
    assert received
    # The step before is clean everywhere.
    for rank in range(d["ranks"]):
        clean = sc.read_statistic_csv(os.path.join(d["dirs"][rank][0], "statistic.csv"), rank=rank, graph="0",
                                      iteration=0, warn=Warnings())
        assert clean and not any(e.stats.bad for e in clean)


def test_seed_scenario_acl_layout_npy_and_mapping(tmp_path):
    """Seed case, ACL (O2) layout with npy files and new-style Opdebug JSON (documented formats)."""
    d = fx.build_seed_scenario(str(tmp_path / "acl"), formats=("opdebug", "npy", "statistic"), layout="acl",
                               opdebug_style="new")
    origin_dir = Path(d["origin"]["dir"])
    step, time_dir, device, model, model_id, iteration = origin_dir.parts[-6:]
    assert (step, device, model_id, iteration) == ("1", str(d["origin"]["rank"]), "1", "1")
    assert len(time_dir) == 14 and time_dir.isdigit()
    assert (tmp_path / "acl" / "acl_dump_0.json").exists()
    parsed = [names.parse(p.name) for p in origin_dir.iterdir() if p.suffix == ".npy"]
    sqrt = [p for p in parsed if p and p.op_type == "SqrtGrad"]
    assert len(sqrt) == 3 and {p.dtype for p in sqrt} == {"float16"}
    # Long scoped names were replaced and listed in mapping.csv, as MindSpore does past 255 characters.
    mapped = [p for p in Path(d["root"]).rglob("mapping.csv")]
    assert mapped and d["mapping"] and all(len(v) > 255 for v in d["mapping"].values())
    records = [r for p in d["opdebug_files"] for r in od.read_opdebug(p, rank=0, graph="1", iteration=1,
                                                                     warn=Warnings())]
    assert {r.unit for r in records} >= {"AIV"} and len(records) == 3


def test_seed_scenario_bin_only_has_no_opdebug_or_statistics(tmp_path):
    """Seed case built from the documented format with binary dumps only."""
    d = fx.build_seed_scenario(str(tmp_path / "b"), formats=("bin",), layout="o0")
    files = list(_all_files(d["root"]))
    assert not any(os.path.basename(p).startswith("Opdebug") or p.endswith("statistic.csv") for p in files)
    assert d["opdebug_files"] == [] and d["origin"]["op_type"] == "SqrtGrad"


def test_seed_scenario_saturation_mode(tmp_path):
    """Seed case built from the documented formats as saturation mode leaves it: SqrtGrad's output pinned at
    65504 instead of inf, NaN turned to 0; the Opdebug records still name SqrtGrad."""
    d = fx.build_seed_scenario(str(tmp_path / "s"), formats=("opdebug", "bin", "statistic"), layout="o0",
                               saturation=True)
    origin = d["origin"]
    stats = sc.read_statistic_csv(os.path.join(origin["dir"], "statistic.csv"), rank=origin["rank"], graph="0",
                                  iteration=1, warn=Warnings())
    out = [e.stats for e in stats if e.op_type == "SqrtGrad" and e.io == "output"][0]
    assert out.nonfinite == 0 and out.at_max >= 1 and out.max == 65504
    assert not any(e.stats.nonfinite for e in stats), "saturation mode leaves no inf/NaN"
    origin_records = [r for p in d["opdebug_files"] if f"rank_{origin['rank']}" in p
                      for r in od.read_opdebug(p, rank=origin["rank"], graph="0", iteration=1, warn=Warnings())]
    assert len(origin_records) == 2 and all(r.task_id == origin["task_id"] for r in origin_records)
    # NaN arrives as 0 in saturation mode, so stage 0's MatMul has nothing to flag.
    assert len(d["opdebug_files"]) == 2


def test_tensor_events_take_a_parsed_name(tmp_path):
    """Binary dump built from the documented format under a short mapped name: the caller's parsed original
    name (mapping.csv restored) names the events."""
    path = fx.write_dump_bin(str(tmp_path / "3f2a9c"), "Default/Long/MatMul-op5", [np.ones(2, np.float16)], [])
    parsed = names.parse("MatMul.Default_Long_MatMul-op5.14.2.1700000000001900")
    [event] = db.tensor_events(path, parsed, rank=1, graph="0", iteration=2, warn=Warnings())
    assert (event.op_type, event.op_name, event.task_id, event.stream_id, event.timestamp) == (
        "MatMul", "Default_Long_MatMul-op5", 14, 2, 1700000000001900)
    # Without a parsed name, the header's full op name stands in (in file-name form).
    [event] = db.tensor_events(path, rank=1, graph="0", iteration=2, warn=Warnings())
    assert (event.op_type, event.op_name, event.task_id) == ("MatMul", "Default_Long_MatMul-op5", -1)


def test_opdebug_entry_without_ids_takes_file_ids(tmp_path):
    """Old-style JSON (documented format) whose flagged entry carries no ids: the file-name ids are the
    fallback, and ids inside an entry always win."""
    path = tmp_path / "Opdebug.Node_OpDebug.7.3.55.output.0.json"
    path.write_text(json.dumps({"AI Core": {"status": 32}, "L2 Atomic Add": {"task_id": 9, "stream_id": 1,
                                                                             "status": 1}}))
    records = od.read_opdebug(str(path), rank=0, graph="0", iteration=0, file_timestamp=55, file_task_id=7,
                              file_stream_id=3, warn=Warnings())
    assert [(r.unit, r.task_id, r.stream_id) for r in records] == [("AI Core", 7, 3), ("L2 Atomic Add", 9, 1)]
