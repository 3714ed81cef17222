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

# Floats whose range a training value can outgrow (fp16's 65504; bf16 keeps fp32's exponent but 8 bits of mantissa).
LOW_PRECISION_FLOATS = ("float16", "bfloat16")

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
    # Sub-byte integers (MindSpore dump docs: int4, uint1; msprobe's DataUtils: INT4, UINT1, INT2, UINT2)
    "int4": "int4", "dt_int4": "int4", "uint1": "uint1", "dt_uint1": "uint1",
    "int2": "int2", "dt_int2": "int2", "uint2": "uint2", "dt_uint2": "uint2",
    # Newer CANN floats numpy has no dtype for: declared, never decoded here
    "complex32": "complex32", "dt_complex32": "complex32", "hifloat8": "hifloat8", "dt_hifloat8": "hifloat8",
    "float8_e5m2": "float8_e5m2", "dt_float8_e5m2": "float8_e5m2",
    "float8_e4m3fn": "float8_e4m3fn", "dt_float8_e4m3fn": "float8_e4m3fn",
    "float8_e8m0": "float8_e8m0", "dt_float8_e8m0": "float8_e8m0",
    "float6_e3m2": "float6_e3m2", "dt_float6_e3m2": "float6_e3m2",
    "float6_e2m3": "float6_e2m3", "dt_float6_e2m3": "float6_e2m3",
    "float4_e2m1": "float4_e2m1", "dt_float4_e2m1": "float4_e2m1",
    "float4_e1m2": "float4_e1m2", "dt_float4_e1m2": "float4_e1m2",
}

# Packed integer dtypes: bits per element (several elements share one byte, lowest bits first).
SUB_BYTE_BITS = {"int4": 4, "uint1": 1, "int2": 2, "uint2": 2}
# Declared float dtypes msoverflow cannot decode: a tensor of these is "undecodable" (never judged clean).
UNDECODABLE_FLOATS = {"complex32", "hifloat8", "float8_e5m2", "float8_e4m3fn", "float8_e8m0", "float6_e3m2",
                      "float6_e2m3", "float4_e2m1", "float4_e1m2"}
# Prefix of TensorEvent.note for a tensor whose bytes cannot be decoded; analysis counts these as not read.
UNDECODABLE = "undecodable"


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
    """numpy dtype for a canonical name; bfloat16 has none (MindSpore saves bf16 as fp32), nor have the packed
    sub-byte integers and the newer small floats."""
    if name is None or name in ("bfloat16", "string") or name in SUB_BYTE_BITS or name in UNDECODABLE_FLOATS:
        return None
    try:
        return np.dtype(name)
    except TypeError:
        return None


def decode_raw(raw: np.ndarray, name: str) -> Optional[np.ndarray]:
    """Raw little-endian bytes (uint8 array) of a tensor numpy has no dtype for -> a numpy array:
    bfloat16 -> float32 (exact), int4/int2 -> int8, uint1/uint2 -> uint8. None when `name` cannot be decoded."""
    if name == "bfloat16":
        half = raw[: raw.size - raw.size % 2].view("<u2")
        return (half.astype("<u4") << 16).view("<f4")
    bits = SUB_BYTE_BITS.get(name)
    if bits is None:
        return None
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    values = ((raw[:, None] >> shifts) & mask).reshape(-1).astype(np.uint8)
    if name.startswith("int"):
        sign = 1 << (bits - 1)
        return np.where(values >= sign, values.astype(np.int16) - (1 << bits), values).astype(np.int8)
    return values
