"""msoverflow.safeio: the contract every reader and command uses at its edges."""
import os

import pytest

from msoverflow import safeio
from msoverflow.errors import UserError


def test_open_regular_refuses_fifo_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "f.npy")       # nobody writes to it: a plain open() would block forever
    with pytest.raises(safeio.NotRegularFile, match="FIFO"):
        safeio.open_regular(tmp_path / "f.npy")
    os.symlink("/dev/zero", tmp_path / "z.npy")
    with pytest.raises(safeio.NotRegularFile, match="character device"):
        safeio.read_bytes(tmp_path / "z.npy")
    assert isinstance(safeio.NotRegularFile(), OSError)     # readers' `except OSError` turns it into a warning


def test_read_bytes_is_bounded(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 1000)
    assert safeio.read_bytes(tmp_path / "big", 1000) == b"x" * 1000
    with pytest.raises(safeio.TooLarge):
        safeio.read_bytes(tmp_path / "big", 999)


def test_bounded_lines_cut_overlong_lines(tmp_path):
    (tmp_path / "t").write_text("a" * 50 + "\nshort\n" + "b" * 10)
    with open(tmp_path / "t") as fh:
        assert list(safeio.bounded_lines(fh, 20)) == ["a" * 20, "short\n", "b" * 10]


@pytest.mark.parametrize("text,why", [("[" * 100 + "]" * 100, "nested"), ("9" * 50, "digits"), ("NaN", "NaN"),
                                      ('{"a": Infinity}', "Infinity"), ("{", "line 1")])
def test_json_limits(text, why):
    with pytest.raises(safeio.JsonError, match=why):
        safeio.loads_json(text)


def test_json_depth_ignores_brackets_in_strings():
    assert safeio.json_depth('{"a": "[[[[{{{{", "b": [1, [2]]}') == 3
    assert safeio.loads_json('{"a": "[[[["}') == {"a": "[[[["}
    assert safeio.json_safe({"x": [float("nan"), 1.5, float("inf")]}) == {"x": [None, 1.5, None]}


def test_numbers():
    assert safeio.int_text(" 42 ") == 42
    for bad in ("9" * 19, "٣", "1.5", "", "0x10"):
        with pytest.raises(safeio.BadNumber):
            safeio.int_text(bad)
    assert safeio.check_shape([2, 3]) == (2, 3)
    for bad in ([float("inf")], [1j], [None], [-1], [True], [2] * 65, "23"):
        with pytest.raises(safeio.BadNumber):
            safeio.check_shape(bad)


def test_tensor_bytes_checks_against_the_file_without_building_huge_numbers():
    assert safeio.tensor_bytes((2, 3), 4, 24) == 24
    assert safeio.tensor_bytes((0, 1 << 62), 4, 0) == 0
    with pytest.raises(safeio.BadNumber, match="more than its file holds"):
        safeio.tensor_bytes((2, 3), 4, 23)
    with pytest.raises(safeio.BadNumber):
        safeio.tensor_bytes([1 << 63] * 64, 2, 1 << 40)


@pytest.mark.parametrize("inside,root", [
    ("d/rank_0/Net/0/3", "d"),
    ("d/rank_3/debug_files/1", "d"),
    ("d/5/20240101120000/0/Net/1/0", "d"),          # ACL: {step}/{time}/...
    ("d/20240101120000/0/Net/1/0", "d"),            # GE: {time}/...
    ("d/step0/rank0/dump_tensor_data", "d"),        # msprobe
    ("d", "d"),
])
def test_dump_root(tmp_path, inside, root):
    (tmp_path / inside).mkdir(parents=True)
    assert safeio.dump_root(tmp_path / inside) == os.path.realpath(tmp_path / root)


def test_refuse_output_inside_follows_links_and_the_root(tmp_path):
    sub = tmp_path / "dump" / "rank_0" / "Net"
    sub.mkdir(parents=True)
    with pytest.raises(UserError, match="refusing"):
        safeio.refuse_output_inside(tmp_path / "dump" / "r.json", sub)
    (tmp_path / "link").symlink_to(tmp_path / "dump")
    with pytest.raises(UserError, match="refusing"):
        safeio.refuse_output_inside(tmp_path / "link" / "r.json", tmp_path / "dump")
    assert safeio.refuse_output_inside(tmp_path / "r.json", sub) == os.path.realpath(tmp_path / "r.json")


def test_source_nesting_and_printable():
    assert safeio.source_nesting("f((1, [2]))\n") == 3
    assert safeio.source_nesting("def f():\n" + "".join("    " * i + "if x:\n" for i in range(1, 6))) >= 5
    name = b"op\xff.npy".decode("utf-8", "surrogateescape")
    assert safeio.printable(name) == "op\\xff.npy"
    assert safeio.printable("plain") == "plain"


def test_patch_parser_crash_in_the_child_is_a_clear_error(monkeypatch):
    """If the native parser still crashes on some source the depth check lets through, the forked probe turns the
    signal into a UserError and msoverflow itself lives on."""
    import signal

    from msoverflow.patch import source_patch

    def crash(text):
        os.kill(os.getpid(), signal.SIGSEGV)

    monkeypatch.setattr(source_patch.cst, "parse_module", crash)
    with pytest.raises(UserError, match="parser crashed"):
        source_patch.parse_source("x = 1\n", "model.py")
