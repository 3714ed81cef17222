"""readers/torch_pt.py: the torch.save files of a recorded real PyTorch msprobe dump
(tests/support/recorded/torch_msprobe/, PROVENANCE.md there) read without torch, and what is not a plain tensor
refused without running it."""
import io
import json
import math
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from msoverflow.errors import READ_ERRORS, FormatError
from msoverflow.readers import torch_pt

RECORDED = Path(__file__).resolve().parents[1] / "support" / "recorded" / "torch_msprobe" / "healthy"


def _records():
    """(record, .pt path) of every tensor record of the recorded dump.json that names a file."""
    (dump_json,) = RECORDED.glob("step0/*/dump.json")
    found = []

    def walk(value):
        if isinstance(value, dict):
            if isinstance(value.get("data_name"), str):
                found.append((value, dump_json.parent / "dump_tensor_data" / value["data_name"]))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    walk(json.loads(dump_json.read_text())["data"])
    return found


def test_every_recorded_tensor_reads_as_msprobe_described_it():
    records = _records()
    assert len(records) > 40
    for record, path in records:
        array = torch_pt.load(str(path))
        assert list(array.shape) == record["shape"], path.name
        assert str(array.dtype) == record["dtype"].replace("torch.", ""), path.name
        # msprobe computed Max, Min and Norm with torch from the same tensor when it saved it
        assert math.isclose(float(array.max()), record["Max"], rel_tol=1e-6, abs_tol=1e-12), path.name
        assert math.isclose(float(array.min()), record["Min"], rel_tol=1e-6, abs_tol=1e-12), path.name
        norm = float(np.linalg.norm(array.astype(np.float64).ravel()))
        assert math.isclose(norm, record["Norm"], rel_tol=1e-5, abs_tol=1e-9), path.name


def _saved(pickled: bytes, storage: bytes = b"") -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("t/data.pkl", pickled)
        archive.writestr("t/byteorder", "little")
        archive.writestr("t/data/0", storage)
    return out.getvalue()


class _Call:
    def __reduce__(self):
        import os
        return (os.system, ("echo unsafe",))


@pytest.mark.parametrize("content", [
    b"not a zip",
    _saved(pickle.dumps(_Call(), protocol=2)),             # a global that runs code: never resolved
    _saved(pickle.dumps({"a": 1}, protocol=2)),            # a pickle, but no tensor
    _saved(b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(X\x01\x00\x00\x00xK\x00K\x02\x85K\x01\x85\x89tR."),
])
def test_what_is_not_a_plain_saved_tensor_is_a_format_error(tmp_path, content):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(READ_ERRORS) as caught:
        torch_pt.load(str(path))
    assert isinstance(caught.value, FormatError)


def test_a_stride_reaching_past_the_storage_is_refused(tmp_path):
    recorded = next(path for record, path in _records() if record["shape"] == [2, 8, 16])
    with zipfile.ZipFile(recorded) as archive:
        root = next(n for n in archive.namelist() if n.endswith("data.pkl"))[:-len("data.pkl")]
        pickled = archive.read(root + "data.pkl")
        storage = archive.read(root + "data/0")
    path = tmp_path / "cut.pt"
    path.write_bytes(_saved(pickled, storage[:len(storage) // 2]))   # half the elements its record says
    with pytest.raises(FormatError):
        torch_pt.load(str(path))
