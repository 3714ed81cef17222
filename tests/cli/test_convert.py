"""`msoverflow convert`: Ascend binary dumps -> npy named like MindSpore's npy dumps, written only into OUTDIR.

The binary dumps are fixtures built FROM THE DOCUMENTED FORMAT by tests/support/ascend_fixtures.py (no Ascend here).
"""
import os

import numpy as np
import pytest

from msoverflow import cli, names
from msoverflow.layout import read_mapping
from msoverflow.readers import opdebug as od
from tests.support import ascend_fixtures as fx


def _snapshot(root):
    """Every path under root with its size and mtime: the dump must be left exactly as it was."""
    result = {}
    for current, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(current, name)
            st = os.stat(path)
            result[path] = (st.st_size, st.st_mtime_ns)
    return result


@pytest.fixture
def dump(tmp_path):
    """A small two-rank dump in the O0/O1 layout, built from the documented binary format."""
    root = tmp_path / "dump"
    arrays = {}
    for rank in (0, 1):
        d = root / f"rank_{rank}" / "Net" / "0" / "3"
        x = np.arange(6, dtype=np.float16).reshape(2, 3) + rank
        w = np.arange(4, dtype=np.int32) * (rank + 1)
        y = np.array([np.inf, 1.0, np.nan], np.float32)
        name = f"SqrtGrad.Gradients_Default_NormHead_Grad_Sqrt_SqrtGrad-op0.18.2.17000000000011{rank}"
        fx.write_dump_bin(str(d / name), "Gradients/Default/NormHead/Grad_Sqrt/SqrtGrad-op0", [x, w], [y],
                          formats={("input", 1): "NCHW"})
        arrays[rank] = (d, name, x, w, y)
        (d / "statistic.csv").write_text("not touched\n")
    fx.write_opdebug_bin(str(root / "rank_1" / "Net" / "0" / "3" / "Opdebug.Node_OpDebug.2.1.1700000000001200"),
                         [{"unit": "AI Core", "task_id": 18, "stream_id": 2, "status": 0x20}], "old")
    return root, arrays


def test_convert_directory_writes_npy_named_like_mindspore(dump, tmp_path, capsys):
    """Binary dumps built from the documented format become npy files with MindSpore 2.4+ names and the same
    values; the dump directory is untouched."""
    root, arrays = dump
    before = _snapshot(root)
    out = tmp_path / "out"
    assert cli.main(["convert", str(root), "-o", str(out)]) == 0
    assert _snapshot(root) == before
    for _rank, (d, name, x, w, y) in arrays.items():
        target = out / d.relative_to(root)
        stem = name
        files = sorted(p.name for p in target.glob(stem + ".*.npy"))
        assert files == sorted([f"{stem}.input.0.ND.Float16.npy", f"{stem}.input.1.NCHW.Int32.npy",
                                f"{stem}.output.0.ND.Float32.npy"])
        np.testing.assert_array_equal(np.load(target / f"{stem}.input.0.ND.Float16.npy"), x)
        np.testing.assert_array_equal(np.load(target / f"{stem}.input.1.NCHW.Int32.npy"), w)
        np.testing.assert_array_equal(np.load(target / f"{stem}.output.0.ND.Float32.npy"), y)
        parsed = names.parse(f"{stem}.output.0.ND.Float32.npy")
        assert (parsed.op_type, parsed.task_id, parsed.io, parsed.dtype) == ("SqrtGrad", 18, "output", "float32")
    # The binary Opdebug record becomes the JSON that npy-mode dumps write, readable by the Opdebug reader.
    [converted] = list(out.rglob("Opdebug.Node_OpDebug.*.output.0.json"))
    records = od.read_opdebug(str(converted), rank=1, graph="0", iteration=3, warn=lambda m: None)
    assert [(r.unit, r.task_id, r.stream_id, r.status_words) for r in records] == [
        ("AI Core", 18, 2, ["float overflow"])]
    assert "converted 3 file(s)" in capsys.readouterr().out


def test_convert_single_file_to_cwd(dump, tmp_path, monkeypatch):
    """A single binary dump (documented format) converts into the current directory when it is not the dump."""
    root, arrays = dump
    d, name, x, _, _ = arrays[0]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert cli.main(["convert", str(d / name)]) == 0
    np.testing.assert_array_equal(np.load(work / f"{name}.input.0.ND.Float16.npy"), x)


def test_convert_refuses_to_write_into_the_dump(dump, tmp_path, monkeypatch, capsys):
    """Binary dumps built from the documented format: no OUTDIR, an OUTDIR inside the dump, or a cwd that is
    the dump directory -> exit 2 with one line, and the dump is left exactly as it was."""
    root, arrays = dump
    before = _snapshot(root)
    assert cli.main(["convert", str(root)]) == 2                                      # no -o for a directory
    assert cli.main(["convert", str(root), "-o", str(root / "rank_0" / "npy")]) == 2  # OUTDIR inside the dump
    d, name, *_ = arrays[0]
    monkeypatch.chdir(d)
    assert cli.main(["convert", str(d / name)]) == 2                                  # cwd is the dump dir
    err = capsys.readouterr().err
    assert "give -o OUTDIR" in err and "inside the dump directory" in err
    assert "Traceback" not in err
    assert _snapshot(root) == before


def test_convert_unusable_input_exits_2(tmp_path, capsys):
    """Files that are not binary dumps (a truncated one built from the documented format, and junk)."""
    src = tmp_path / "src"
    src.mkdir()
    fx.write_dump_bin(str(src / "Add.Add-op1.1.1.5"), "Add-op1", [np.ones(3, np.float32)], [],
                      header_length_override=999)
    (src / "Mul.Mul-op2.1.1.6").write_bytes(b"junk")
    assert cli.main(["convert", str(src), "-o", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "skipped:" in captured.err and "runs past the end of the file" in captured.err
    assert "no readable binary dump file" in captured.err
    assert cli.main(["convert", str(tmp_path / "nope"), "-o", str(tmp_path / "out")]) == 2


def test_convert_skips_unknown_dtype_but_writes_the_rest(tmp_path, capsys):
    """A binary dump built from the documented format with one tensor of data_type 33 (DT_HIFLOAT8: known,
    not decodable)."""
    src = tmp_path / "src"
    a, b = np.ones(4, np.uint8), np.arange(3, dtype=np.int64)
    fx.write_dump_bin(str(src / "Cast.Cast-op1.7.2.99"), "Cast-op1", [a], [b], data_type_override={("input", 0): 33})
    out = tmp_path / "out"
    assert cli.main(["convert", str(src), "-o", str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["Cast.Cast-op1.7.2.99.output.0.ND.Int64.npy"]
    assert "data_type 33 (DT_HIFLOAT8)" in capsys.readouterr().err


def test_convert_writes_bf16_as_float32_keeping_the_declared_dtype(tmp_path):
    """bf16 binary dump (DT_BF16 = 27, msprobe dump_data.proto): float32 npy, `BFloat16` in the name, exact values."""
    src = tmp_path / "src"
    values = np.array([[1.5, -2.25], [np.inf, 3.0e38]], np.float32)
    bits = fx.to_bf16_bits(values)
    fx.write_dump_bin(str(src / "MatMul.MatMul-op3.4.2.1705388945730000"), "MatMul-op3", [bits], [bits],
                      data_type_override={("input", 0): 27, ("output", 0): 27})
    out = tmp_path / "out"
    assert cli.main(["convert", str(src), "-o", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == ["MatMul.MatMul-op3.4.2.1705388945730000.input.0.ND.BFloat16.npy",
                       "MatMul.MatMul-op3.4.2.1705388945730000.output.0.ND.BFloat16.npy"]
    array = np.load(out / written[1])
    assert array.dtype == np.float32 and array.shape == (2, 2)
    assert array[0, 0] == 1.5 and array[0, 1] == -2.25 and np.isposinf(array[1, 0])
    assert abs(array[1, 1] - 3.0e38) / 3.0e38 < 1e-2          # bf16 keeps fp32's range
    parsed = names.parse(written[1])
    assert parsed.dtype == "bfloat16" and parsed.io == "output"


def test_convert_restores_mapped_names_and_maps_long_outputs(tmp_path):
    """Documented mapping.csv: a short random file name stands for a name over 255 characters; the npy
    names would be too long as well, so they get short names and a mapping.csv in OUTDIR."""
    src = tmp_path / "src"
    long_op = "Gradients_" + "_".join(f"layer{i}-DecoderLayer" for i in range(14)) + "_MatMul-op5"
    original = f"MatMul.{long_op}.14.2.1700000000001900"
    assert len(original) > 255
    fx.write_dump_bin(str(src / "3f2a9c"), long_op, [np.ones(2, np.float16)], [np.ones(2, np.float16)])
    (src / "mapping.csv").write_text(f"3f2a9c,{original}\n")
    out = tmp_path / "out"
    assert cli.main(["convert", str(src), "-o", str(out)]) == 0
    mapping = read_mapping(str(out / "mapping.csv"), lambda m: None)
    assert sorted(mapping.values()) == [f"{original}.input.0.ND.Float16.npy", f"{original}.output.0.ND.Float16.npy"]
    assert all((out / short).exists() and len(short) <= 255 for short in mapping)


def test_convert_keeps_ffts_ids_and_slices_in_the_output_names(tmp_path):
    """FFTS+ name (msprobe msaccucmp file_utils.py form): the four numbers after the timestamp survive."""
    src = tmp_path / "src"
    a = np.ones((2, 2), np.float16)
    core = "Add.Default_Add-op0_lxslice1.3.2.1705388945730000.4.7.0.0"
    fx.write_dump_bin(str(src / core), "Default/Add-op0", [a], [a])
    out = tmp_path / "out"
    assert cli.main(["convert", str(src), "-o", str(out)]) == 0
    parsed = [names.parse(p.name) for p in sorted(out.iterdir())]
    assert [(p.io, p.task_id, p.stream_id, p.context_id, p.lxslice, p.op_name) for p in parsed] == [
        ("input", 3, 2, 7, 1, "Default_Add-op0"), ("output", 3, 2, 7, 1, "Default_Add-op0")]


def test_convert_msprobe_raw_bf16_and_msaccucmp_bin(tmp_path):
    """Raw tensors: msprobe adump's `{core}.{io}.{slot}.{format}.BF16` (AclDumpDataProcessor.cpp) and msaccucmp's
    `{core}.{io}.{slot}.{A_B_C}.{dtype}.{format}.bin` (dump_data_parser.py) become npy with the dtype in the name."""
    src = tmp_path / "src"
    src.mkdir()
    core = "Sub.Default_Sub-op0.10.10.1735011096427368"
    (src / f"{core}.input.0.ND.BF16").write_bytes(fx.to_bf16_bits(np.array([1.5, np.inf], np.float32)).tobytes())
    (src / f"{core}.output.0.2_2.float16.NC1HWC0.bin").write_bytes(np.arange(4, dtype=np.float16).tobytes())
    out = tmp_path / "out"
    assert cli.main(["convert", str(src), "-o", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == [f"{core}.input.0.ND.BFloat16.npy", f"{core}.output.0.NC1HWC0.Float16.npy"]
    bf = np.load(out / written[0])
    assert bf.dtype == np.float32 and bf[0] == 1.5 and np.isposinf(bf[1])
    assert np.load(out / written[1]).shape == (2, 2)
    assert names.parse(written[0]).dtype == "bfloat16"
