"""Dtype names and limits. Dump files spell dtypes many ways (Float16, FLOAT, DT_FLOAT16, float16, F16)."""
from __future__ import annotations

from typing import Optional

import numpy as np

# Largest finite value of each float dtype a dump can declare.
FLOAT_MAX = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
}

_ALIASES = {
    "float16": "float16", "half": "float16", "fp16": "float16", "f16": "float16", "dt_float16": "float16",
    "float32": "float32", "float": "float32", "fp32": "float32", "f32": "float32", "dt_float": "float32",
    "dt_float32": "float32", "single": "float32",
    "float64": "float64", "double": "float64", "fp64": "float64", "f64": "float64", "dt_double": "float64",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "dt_bf16": "bfloat16", "dt_bfloat16": "bfloat16",
    "int8": "int8", "dt_int8": "int8", "uint8": "uint8", "dt_uint8": "uint8",
    "int16": "int16", "dt_int16": "int16", "uint16": "uint16", "dt_uint16": "uint16",
    "int32": "int32", "int": "int32", "dt_int32": "int32", "uint32": "uint32", "dt_uint32": "uint32",
    "int64": "int64", "dt_int64": "int64", "uint64": "uint64", "dt_uint64": "uint64",
    "bool": "bool", "bool_": "bool", "dt_bool": "bool",
    "complex64": "complex64", "complex128": "complex128", "string": "string", "dt_string": "string",
}


def canonical(name: Optional[str]) -> Optional[str]:
    """'Float16' / 'FLOAT' / 'DT_FLOAT16' / 'F16' -> 'float16'; unknown spellings -> None."""
    if not name:
        return None
    return _ALIASES.get(name.strip().lower())


def dtype_max(name: Optional[str]) -> Optional[float]:
    return FLOAT_MAX.get(name or "")


def is_float(name: Optional[str]) -> bool:
    return name in FLOAT_MAX


def numpy_dtype(name: Optional[str]) -> Optional[np.dtype]:
    """numpy dtype for a canonical name; bfloat16 has none (MindSpore saves bf16 as fp32)."""
    if name is None or name in ("bfloat16", "string"):
        return None
    try:
        return np.dtype(name)
    except TypeError:
        return None
