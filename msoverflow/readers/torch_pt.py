"""One tensor saved by torch.save (the `.pt` files a PyTorch msprobe dump writes in dump_tensor_data/), read
without torch: the file is a zip holding `<name>/data.pkl` (a pickle that rebuilds the tensor from a storage, an
offset, a size and a stride) and the storage's raw little-endian bytes in `<name>/data/<key>`.

The pickle is never run as it is: only the globals a saved plain tensor uses are resolved (torch._utils'
_rebuild_tensor_v2, the typed storage classes, collections.OrderedDict for its empty backward hooks), each to a
stand-in of ours; any other global (a module, a subclass, arbitrary code) is a format error.
"""
from __future__ import annotations

import io
import math
import pickle
import zipfile
import zlib
from typing import Dict, Tuple

import numpy as np

from .. import safeio
from ..dtypes import decode_raw
from ..errors import FormatError

# torch's typed storage classes as torch.save names them -> the dtype of their elements
STORAGE_DTYPES: Dict[str, str] = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool",
}
MAX_PICKLE_BYTES = 1 << 20     # a plain tensor's data.pkl is a few hundred bytes


class _Storage:
    def __init__(self, dtype: str):
        self.dtype = dtype


class _Rebuilt:
    """What _rebuild_tensor_v2 was called with."""

    def __init__(self, storage, offset, size, stride, *unused):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


def _ordered_dict(*args):
    return dict(*args)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.storages: Dict[str, Tuple[str, int]] = {}     # key -> (dtype, elements)

    def find_class(self, module, name):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _Rebuilt
        if module == "torch" and name in STORAGE_DTYPES:
            return _Storage(STORAGE_DTYPES[name])
        if module == "collections" and name == "OrderedDict":
            return _ordered_dict
        raise pickle.UnpicklingError(f"not a plain tensor: it needs {module}.{name}")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _Storage)):
            raise pickle.UnpicklingError(f"unknown storage reference {pid!r:.80}")
        _tag, storage, key, _location, elements = pid
        self.storages[str(key)] = (storage.dtype, int(elements))
        return (str(key), storage.dtype)


def load(path: str) -> np.ndarray:
    """The tensor of one torch.save file as a numpy array (bfloat16 widened to float32, exactly). FormatError
    (a ValueError) when the file is not one plain saved tensor; OSError when it cannot be read."""
    blob = safeio.read_bytes(path)
    try:
        return _load(blob)
    except (zipfile.BadZipFile, KeyError, NotImplementedError, EOFError, zlib.error) as exc:
        raise FormatError(f"not a torch.save file ({exc})") from None


def _load(blob: bytes) -> np.ndarray:
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        names = archive.namelist()
        pickles = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            raise FormatError("not a torch.save file (no single data.pkl)")
        root = pickles[0][:-len("data.pkl")]
        info = archive.getinfo(pickles[0])
        if info.file_size > MAX_PICKLE_BYTES:
            raise FormatError(f"data.pkl of {info.file_size} bytes: not one plain tensor")
        unpickler = _Unpickler(archive.read(pickles[0]))
        try:
            rebuilt = unpickler.load()
        except (pickle.UnpicklingError, TypeError, AttributeError, IndexError) as exc:
            raise FormatError(f"not a saved plain tensor ({exc})") from None
        if not isinstance(rebuilt, _Rebuilt) or not isinstance(rebuilt.storage, tuple):
            raise FormatError("not a saved plain tensor")
        key, dtype = rebuilt.storage
        raw = np.frombuffer(archive.read(f"{root}data/{key}"), dtype=np.uint8)
        order = archive.read(root + "byteorder").decode("ascii", "replace").strip() \
            if root + "byteorder" in names else "little"
    if order != "little":
        raise FormatError(f"{order}-endian storage is not read")
    item = np.dtype("<u2" if dtype == "bfloat16" else dtype).itemsize
    if raw.size % item:
        raise FormatError(f"a storage of {raw.size} bytes does not hold {dtype} elements")
    decoded = decode_raw(raw, "bfloat16") if dtype == "bfloat16" else None
    flat = decoded if decoded is not None else raw.view(np.dtype(dtype).newbyteorder("<"))
    return _view(flat, rebuilt, unpickler.storages.get(key, (dtype, flat.size))[1])


def _view(flat: np.ndarray, rebuilt: _Rebuilt, elements: int) -> np.ndarray:
    """The tensor's elements: its size, stride and offset over the storage's flat elements, copied."""
    size, stride, offset = rebuilt.size, rebuilt.stride, int(rebuilt.offset)
    if len(size) != len(stride) or any(not isinstance(v, int) or v < 0 for v in (*size, *stride, offset)):
        raise FormatError(f"size {size} and stride {stride} do not describe a tensor")
    if flat.size < elements:
        raise FormatError(f"storage holds {flat.size} elements, its record says {elements}")
    count = math.prod(size)
    if count == 0:
        return np.zeros(size, flat.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= flat.size:
        raise FormatError(f"size {size}, stride {stride} at offset {offset} reach past the storage's "
                          f"{flat.size} elements")
    item = flat.dtype.itemsize
    return np.lib.stride_tricks.as_strided(flat[offset:], shape=size, strides=[s * item for s in stride]).copy()
