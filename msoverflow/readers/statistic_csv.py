"""statistic.csv (Ascend/GPU O0/O1 and ACL dumps): one row per tensor, read into TensorEvents that carry stats.

Header variants (shared/reference/mindspore-dumps.md "statistic.csv"): 2.1/2.2 write the full list of
categories, 2.3+ only the configured ones, some writers add a `Format` column or a trailing comma, and the
NaN column is spelt "NaN Count" or "Nan Count". Columns are matched by normalised name, never by position.
Reading a row never reads a tensor.
"""
from __future__ import annotations

import csv
import math
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import safeio
from ..dtypes import canonical, dtype_max
from ..model import INPUT, OUTPUT, TensorEvent, TensorStats
from ..names import scope_to_file_name

# normalised header -> field. Normalised = lower case, single spaces.
COLUMNS = {
    "op type": "op_type", "op name": "op_name", "task id": "task_id", "stream id": "stream_id",
    "timestamp": "timestamp", "io": "io", "input/output": "io", "slot": "slot", "data size": "data_size",
    "data type": "dtype", "shape": "shape", "format": "format",
    "max value": "max", "min value": "min", "avg value": "avg", "count": "count",
    "negative zero count": "negative_zero", "positive zero count": "positive_zero", "nan count": "nan",
    "negative inf count": "neginf", "positive inf count": "posinf", "zero count": "zero",
    "l2 value": "l2", "l2norm value": "l2", "l2norm": "l2", "md5": "md5", "md5 value": "md5",
    "index": "slot",      # per-op statistics files (CANN device statistics): Input/Output,Index,...
}
REQUIRED = ("op_type", "op_name", "task_id", "stream_id", "timestamp", "io", "slot")
NULLS = {"", "null", "none", "nil", "n/a", "-"}

_PREFIXES = ("knumbertype", "mstype.", "ms.", "numpy.", "np.")


def normalize_dtype(name: Optional[str]) -> Optional[str]:
    """'DT_FLOAT16', 'float16', 'Float16', 'kNumberTypeFloat16', 'BFloat16', 'FLOAT' -> canonical numpy name;
    a spelling nobody knows comes back lower-cased rather than dropped."""
    if name is None or str(name).strip().lower() in NULLS:
        return None
    key = str(name).strip().lower()
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix):]
    return canonical(key) or key


# ---- parsing helpers -------------------------------------------------------------------------------------

def _norm_header(name: str) -> str:
    return re.sub(r"\s+", " ", name.strip().strip('"').lower())


def parse_shape(text: Optional[str]) -> Optional[Tuple[int, ...]]:
    """'(2,3)', '[2, 3]', '2,3', '()', '[]' -> tuple; '' / 'null' -> None. Raises ValueError on junk."""
    if text is None:
        return None
    body = text.strip().strip('"').strip()
    if body.lower() in NULLS:
        return None
    if body[:1] in "([" and body[-1:] in ")]":
        body = body[1:-1]
    parts = [p for p in re.split(r"[,\s]+", body) if p]
    try:
        return safeio.check_shape([safeio.int_text(p, "dimension", 19) for p in parts])
    except safeio.BadNumber as exc:
        raise ValueError(str(exc)) from None


def _float(text: Optional[str]) -> Optional[float]:
    if text is None or text.strip().lower() in NULLS:
        return None
    return float(text)  # accepts inf, -inf, nan, 1e5


def _int(text: Optional[str]) -> Optional[int]:
    if text is None or text.strip().lower() in NULLS:
        return None
    text = text.strip()
    if len(text) > safeio.MAX_INT_DIGITS:
        raise ValueError(f"{text[:20]}... has {len(text)} characters, not a count or id")
    try:
        return int(text)
    except ValueError:
        value = float(text)  # "12.0", "1e3"
        if not value.is_integer():
            raise ValueError(f"{text!r} is not an integer") from None
        return int(value)


def _rejoin_shape(row: List[str], shape_index: Optional[int], width: int) -> List[str]:
    """An unquoted '(2,3)' splits into several cells; glue them back when the row is too long."""
    if shape_index is None or len(row) <= width or shape_index >= len(row):
        return row
    cell = row[shape_index].strip()
    if cell[:1] not in "([" or cell[-1:] in ")]":
        return row
    for stop in range(shape_index + 1, len(row)):
        if row[stop].strip()[-1:] in ")]":
            return row[:shape_index] + [",".join(row[shape_index:stop + 1])] + row[stop + 1:]
    return row


def read_statistic_csv(path: str, *, rank: int, graph: str, iteration: int,
                       warn: Callable[[str], None],
                       loader_for: Optional[Callable[[TensorEvent], Optional[Callable]]] = None
                       ) -> List[TensorEvent]:
    """Every readable row of a statistic.csv as a TensorEvent with `stats` (and no loader).

    `loader_for(event)` may return a loader for the matching tensor file when the caller knows one.
    Bad rows are reported through `warn` (naming the file and the row) and skipped; an unreadable file
    gives one warning and [].
    `event.note` lists the statistic categories the file did not record (e.g. "not recorded: nan"), so the
    caller knows that a 0 count there means "unknown", not "none".
    """
    path = os.fspath(path)
    try:   # a regular file of bounded size, checked before either parser opens it
        size = safeio.regular_size(path)
        if size > safeio.MAX_READ_BYTES:
            raise safeio.TooLarge(0, f"{size} bytes, over the {safeio.MAX_READ_BYTES}-byte limit", path)
    except OSError as exc:
        warn(f"{path}: cannot read statistic.csv: {exc.strerror or exc}")
        return []
    fast = _read_with_pandas(path, rank, graph, iteration)
    if fast is not None:
        if loader_for is not None:
            for event in fast:
                event.loader = loader_for(event)
        return fast
    try:
        with safeio.open_regular(path, "r", newline="", encoding="utf-8-sig", errors="replace") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        warn(f"{path}: cannot read statistic.csv: {exc.strerror or exc}")
        return []
    except csv.Error as exc:
        warn(f"{path}: not a CSV file: {exc}")
        return []
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        warn(f"{path}: empty statistic.csv")
        return []
    header = [_norm_header(h) for h in rows[0]]
    columns: Dict[str, int] = {}
    unknown = []
    for index, name in enumerate(header):
        if not name:
            continue  # trailing comma
        key = COLUMNS.get(name)
        if key is None:
            unknown.append(rows[0][index].strip())
        elif key not in columns:
            columns[key] = index
    missing = [k for k in REQUIRED if k not in columns]
    if missing:
        warn(f"{path}: statistic.csv header lacks {', '.join(missing)}: file skipped "
             f"(header: {','.join(rows[0])})")
        return []
    width = max(columns.values()) + 1
    not_recorded = [k for k in ("nan", "posinf", "neginf", "max", "min") if k not in columns]
    note = f"not recorded: {', '.join(not_recorded)}" if not_recorded else ""

    events = []
    for line_no, row in enumerate(rows[1:], start=2):
        row = _rejoin_shape(row, columns.get("shape"), len(header))
        cells = {key: (row[i].strip() if i < len(row) else None) for key, i in columns.items()}
        try:
            event = _event(path, cells, rank, graph, iteration, note)
        except (ValueError, OverflowError) as exc:
            warn(f"{path}: row {line_no} skipped: {exc}")
            continue
        if len(row) < width:
            warn(f"{path}: row {line_no} has {len(row)} cells, header has {width}: missing values read as unknown")
        if loader_for is not None:
            event.loader = loader_for(event)
        events.append(event)
    return events


def _read_with_pandas(path: str, rank: int, graph: str, iteration: int) -> Optional[List[TensorEvent]]:
    """The fast path for well-formed files (real dumps hold 10^5 rows per step): pandas' C parser and
    column-wise conversion. Anything unusual (ragged rows, a bad value, a missing column) returns None and the
    row-by-row reader above handles the file, with its per-row warnings."""
    import warnings

    import pandas as pd
    try:
        # index_col=False: a row longer than the header goes to the careful reader (pandas' warning about it is
        # made an error), never into a thousands-level index that takes pandas minutes to build
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig",
                                skipinitialspace=True, index_col=False)
    except Exception:     # pandas raises many kinds on odd files; the careful reader explains them
        return None
    columns: Dict[str, str] = {}
    for name in frame.columns:
        key = COLUMNS.get(_norm_header(str(name)))
        if key is not None and key not in columns:
            columns[key] = name
    if any(k not in columns for k in REQUIRED) or frame.empty:
        return None
    text = {key: frame[name] for key, name in columns.items()}   # skipinitialspace took leading blanks
    io = text["io"].str.strip().str.lower()
    if not io.isin([INPUT, OUTPUT]).all() or (text["op_type"] == "").any() or (text["op_name"] == "").any():
        return None
    size = len(frame)

    def numbers(key, integer):
        if key not in text:
            return [None] * size
        cells = text[key]
        values = pd.to_numeric(cells, errors="coerce")          # "inf", "-inf", "nan" parse too
        missing = values.isna().to_numpy()
        null = np.zeros(size, dtype=bool)
        if missing.any():                                      # string work only on the few odd cells
            odd = cells[missing].str.strip().str.lower()
            if not (odd.isin(NULLS) | odd.isin({"nan", "-nan"})).all():
                raise ValueError(key)
            null[missing] = odd.isin(NULLS).to_numpy()
        array = values.to_numpy(dtype=float)
        if integer:
            if (array[~null] % 1 != 0).any():
                raise ValueError(key)
            out = array.astype(np.int64, copy=False).tolist() if not missing.any() else [
                None if n else int(v) for v, n in zip(array.tolist(), null.tolist())]
            return out
        out = array.tolist()
        if null.any():
            out = [None if n else v for v, n in zip(out, null.tolist())]
        return out

    try:
        ints = {k: numbers(k, True) for k in ("task_id", "stream_id", "timestamp", "slot")}
        if any(v is None for k in ints for v in ints[k]):
            return None
        counts = {k: numbers(k, True) for k in ("count", "nan", "posinf", "neginf", "zero")}
        extremes = {k: numbers(k, False) for k in ("max", "min")}
        shapes: Dict[str, Optional[Tuple[int, ...]]] = {}
        shape_text = text["shape"].str.strip().tolist() if "shape" in text else [""] * size
        for cell in set(shape_text):
            shapes[cell] = parse_shape(cell)
    except (ValueError, OverflowError):
        return None
    dtypes = {cell: normalize_dtype(cell) for cell in set(text["dtype"].tolist())} if "dtype" in text else {}
    not_recorded = [k for k in ("nan", "posinf", "neginf", "max", "min") if k not in columns]
    note = f"not recorded: {', '.join(not_recorded)}" if not_recorded else ""
    graph = str(graph)
    fmt = text["format"].str.strip().tolist() if "format" in text else [""] * size
    dtype_text = text["dtype"].tolist() if "dtype" in text else [None] * size
    names: Dict[str, str] = {}
    events = []
    for i, (op_type, op_name, io_i) in enumerate(zip(text["op_type"].str.strip().tolist(),
                                                     text["op_name"].str.strip().tolist(), io.tolist())):
        shape = shapes[shape_text[i]]
        dtype = dtypes.get(dtype_text[i])
        name = names.get(op_name)
        if name is None:
            name = names[op_name] = scope_to_file_name(op_name)
        stats = stats_from_numbers(counts["count"][i], counts["nan"][i], counts["posinf"][i],
                                   counts["neginf"][i], extremes["max"][i], extremes["min"][i],
                                   counts["zero"][i], shape, dtype)
        events.append(TensorEvent(
            source=path, rank=rank, graph=graph, iteration=iteration, op_type=op_type, op_name=name,
            task_id=ints["task_id"][i], stream_id=ints["stream_id"][i], timestamp=ints["timestamp"][i],
            io=io_i, slot=ints["slot"][i], fmt=fmt[i], dtype=dtype, shape=shape, stats=stats, note=note))
    return events


def read_op_csv(path: str, parsed, *, rank: int, graph: str, iteration: int,
                warn: Callable[[str], None]) -> List[TensorEvent]:
    """A per-op statistics file `{dump file name}.csv` (CANN's device-side statistics, as msprobe's adump receives
    them): header `Input/Output,Index,Data Size,Data Type,Format,Shape,<statistics...>`, one row per tensor; the
    op's type, name and ids come from the file name (`parsed`, a names.ParsedName). Bad rows warn and are skipped."""
    path = os.fspath(path)
    try:
        with open(path, newline="", encoding="utf-8-sig", errors="replace") as fh:
            rows = [r for r in csv.reader(fh) if any(cell.strip() for cell in r)]
    except OSError as exc:
        warn(f"{path}: cannot read per-op statistics: {exc.strerror or exc}")
        return []
    except csv.Error as exc:
        warn(f"{path}: not a CSV file: {exc}")
        return []
    if not rows:
        warn(f"{path}: empty per-op statistics file")
        return []
    columns: Dict[str, int] = {}
    for index, name in enumerate(rows[0]):
        key = COLUMNS.get(_norm_header(name))
        if key is not None and key not in columns:
            columns[key] = index
    if "io" not in columns or "slot" not in columns:
        warn(f"{path}: per-op statistics header lacks Input/Output or Index: file skipped "
             f"(header: {','.join(rows[0])})")
        return []
    not_recorded = [k for k in ("nan", "posinf", "neginf", "max", "min") if k not in columns]
    note = f"not recorded: {', '.join(not_recorded)}" if not_recorded else ""
    fixed = {"op_type": parsed.op_type, "op_name": parsed.op_name, "task_id": str(parsed.task_id),
             "stream_id": str(parsed.stream_id), "timestamp": str(parsed.timestamp)}
    events = []
    for line_no, row in enumerate(rows[1:], start=2):
        row = _rejoin_shape(row, columns.get("shape"), len(rows[0]))
        cells = dict(fixed, **{key: (row[i].strip() if i < len(row) else None) for key, i in columns.items()})
        try:
            event = _event(path, cells, rank, graph, iteration, note)
        except (ValueError, OverflowError) as exc:
            warn(f"{path}: row {line_no} skipped: {exc}")
            continue
        event.op_name = parsed.op_name          # already a file-name op name
        event.context_id, event.thread_id = parsed.context_id, parsed.thread_id
        events.append(event)
    return events


def _event(path, cells, rank, graph, iteration, note) -> TensorEvent:
    io = (cells["io"] or "").lower()
    if io not in (INPUT, OUTPUT):
        raise ValueError(f"IO is {cells['io']!r}, expected input or output")
    for key in ("op_type", "op_name"):
        if not cells[key]:
            raise ValueError(f"empty {key.replace('_', ' ')}")
    ints = {}
    for key in ("task_id", "stream_id", "timestamp", "slot"):
        try:
            value = _int(cells[key])
        except ValueError:
            value = None
        if value is None:
            raise ValueError(f"{key.replace('_', ' ')} is {cells[key]!r}")
        ints[key] = value
    try:
        shape = parse_shape(cells.get("shape"))
    except ValueError:
        raise ValueError(f"shape {cells.get('shape')!r} is not a list of integers") from None
    dtype = normalize_dtype(cells.get("dtype"))
    stats = _stats(cells, shape, dtype)
    return TensorEvent(
        source=path, rank=rank, graph=str(graph), iteration=iteration,
        op_type=cells["op_type"], op_name=scope_to_file_name(cells["op_name"]),
        task_id=ints["task_id"], stream_id=ints["stream_id"], timestamp=ints["timestamp"],
        io=io, slot=ints["slot"], fmt=cells.get("format") or "", dtype=dtype, shape=shape,
        stats=stats, note=note)


_COLUMN_TITLES = {"count": "Count", "nan": "NaN Count", "posinf": "Positive Inf Count",
                  "neginf": "Negative Inf Count", "max": "Max Value", "min": "Min Value", "zero": "Zero Count"}


def _number(cells, key, parse):
    try:
        return parse(cells.get(key))
    except ValueError:
        raise ValueError(f"{_COLUMN_TITLES.get(key, key)} is {cells.get(key)!r}, not a number") from None


def _stats(cells, shape, dtype) -> TensorStats:
    return stats_from_numbers(_number(cells, "count", _int), _number(cells, "nan", _int),
                              _number(cells, "posinf", _int), _number(cells, "neginf", _int),
                              _number(cells, "max", _float), _number(cells, "min", _float),
                              _number(cells, "zero", _int), shape, dtype)


def stats_from_numbers(count, nan, posinf, neginf, high, low, zero, shape, dtype) -> TensorStats:
    if count is None:
        count = math.prod(shape) if shape is not None else 0
    nan, posinf, neginf = nan or 0, posinf or 0, neginf or 0
    # Some writers put inf/nan into Max/Min instead of (or as well as) the counts: keep the counts honest
    # (at least one) and the extremes finite, as TensorStats promises.
    if high is not None and not math.isfinite(high):
        if math.isnan(high):
            nan = max(nan, 1)
        elif high > 0:
            posinf = max(posinf, 1)
        else:                      # max is -inf: everything is -inf
            neginf = max(neginf, 1)
        high = None
    if low is not None and not math.isfinite(low):
        if math.isnan(low):
            nan = max(nan, 1)
        elif low < 0:
            neginf = max(neginf, 1)
        else:                      # min is +inf: everything is +inf
            posinf = max(posinf, 1)
        low = None
    finite = [abs(v) for v in (high, low) if v is not None]
    max_abs = max(finite) if finite else None
    over_range = at_max = 0
    limit = dtype_max(dtype)
    if limit is not None and max_abs is not None:
        # Lower bounds: the file has extremes, not counts.
        if max_abs > limit:
            over_range = sum(1 for v in (high, low) if v is not None and abs(v) > limit)
        elif max_abs == limit:
            at_max = sum(1 for v in (high, low) if v is not None and abs(v) == limit)
    return TensorStats(count=count, nan=nan, posinf=posinf, neginf=neginf, min=low, max=high,
                       max_abs=max_abs, over_range=over_range, at_max=at_max, zero=zero)
