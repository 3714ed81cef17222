"""statistic.csv (Ascend/GPU O0/O1 and ACL dumps): one row per tensor, read into TensorEvents that carry stats.

Header variants (shared/reference/mindspore-dumps.md "statistic.csv"): 2.1/2.2 write the full list of
categories, 2.3+ only the configured ones, some writers add a `Format` column or a trailing comma, and the
NaN column is spelt "NaN Count" or "Nan Count". Columns are matched by normalised name, never by position.
Reading a row never reads a tensor.
"""
from __future__ import annotations

import csv
import functools
import math
import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import safeio
from ..dtypes import canonical, dtype_max
from ..model import INPUT, OUTPUT, TensorEvent, TensorStats
from ..names import KIND_OPCSV, scope_to_file_name
from ..values import bad_extremes, limit_of, pinned_extremes
from .reader import Reader

# normalised header -> field. Normalised = lower case, single spaces.
COLUMNS = {
    "op type": "op_type", "op name": "op_name", "task id": "task_id", "stream id": "stream_id",
    "timestamp": "timestamp", "io": "io", "input/output": "io", "slot": "slot", "data size": "data_size",
    "data type": "dtype", "shape": "shape", "format": "format",
    "max value": "max", "min value": "min", "avg value": "avg", "count": "count",
    "negative zero count": "negative_zero", "positive zero count": "positive_zero", "nan count": "nan",
    "negative inf count": "neginf", "positive inf count": "posinf", "zero count": "zero",
    "l2 value": "l2", "l2norm value": "l2", "l2norm": "l2", "md5": "md5", "md5 value": "md5",
    "mean abs value": "mean_abs",     # mean |x|: the watch's capture writes it (msoverflow/watcher/capture.py)
    "step": "step",       # the watch's capture: one file holds the rows of several steps
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


_DEVICE_SHAPE = re.compile(r"^[0-9]{1,19}(?:x[0-9]{1,19}){1,63}$")


def parse_shape(text: Optional[str]) -> Optional[Tuple[int, ...]]:
    """'(2,3)', '[2, 3]', '2,3', '2x3', '()', '[]' -> tuple; '' / 'null' / '-' -> None. ValueError on junk."""
    if text is None:
        return None
    body = text.strip().strip('"').strip()
    if body.lower() in NULLS:
        return None
    if body[:1] in "([" and body[-1:] in ")]":
        body = body[1:-1]
    # CANN's device-side statistics (and msprobe copying them) write `100x20x40`
    separators = r"[,\sx]+" if _DEVICE_SHAPE.match(body) else r"[,\s]+"
    parts = [p for p in re.split(separators, body) if p]
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
        number = int(text)
    except ValueError:
        value = float(text)  # "12.0", "1e3"
        if not value.is_integer():
            raise ValueError(f"{text!r} is not an integer") from None
        number = int(value)
    if not _INT64_MIN <= number <= _INT64_MAX:      # the columns are int64 (as pyarrow reads them)
        raise ValueError(f"{text[:20]} is out of range for a count or id")
    return number


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


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


MAX_COLUMNS = 256


def read_statistic_csv(path: str, *, rank: int, graph: str, iteration: int,
                       warn: Callable[[str], None]) -> List[TensorEvent]:
    """Every readable row of a statistic.csv as a TensorEvent with `stats` (read_table(), all rows as objects).
    `event.note` lists the statistic categories the file did not record (e.g. "not recorded: nan"), so the
    caller knows that a 0 count there means "unknown", not "none"."""
    table = read_table(path, warn)
    if table is None:
        return []
    return table.events(np.arange(table.size), rank, graph, iteration)


def read_table(path: str, warn: Callable[[str], None], fixed: Optional[Dict[str, str]] = None,
               what: str = "statistic.csv", threads: bool = True) -> Optional["StatTable"]:
    """The one statistics CSV parser: a file as numpy columns (StatTable). Well-formed files go through pyarrow's
    CSV reader (only the needed columns, typed); anything it refuses (ragged rows, a bad value, odd headers) is
    read row by row with the csv module, each bad row named in a warning and skipped. None (with a warning
    naming why) when the file is refused as a whole. `fixed`: values every row shares (a per-op statistics file
    names its op in its file name). threads=False: pyarrow parses in the calling thread (a caller that runs at
    a low priority keeps its work there; a small file parses as fast)."""
    path = os.fspath(path)
    try:   # a regular file of bounded size, checked before either parser opens it
        size = safeio.regular_size(path)
        if size > safeio.MAX_READ_BYTES:
            raise safeio.TooLarge(0, f"{size} bytes, over the {safeio.MAX_READ_BYTES}-byte limit", path)
        with safeio.open_regular(path, "rb") as fh:
            width = fh.readline(safeio.MAX_LINE_CHARS).count(b",") + 1
            fh.seek(max(size - 1, 0))
            cut = size > 0 and fh.read(1) not in (b"\n", b"\r")
    except OSError as exc:
        warn(f"{path}: cannot read {what}: {exc.strerror or exc}")
        return None
    if width > MAX_COLUMNS:   # every writer has a few dozen; a huge header makes the parsers crawl
        warn(f"{path}: not a {what}: its header has {width} columns (at most {MAX_COLUMNS} expected)")
        return None
    if cut:
        # Every writer ends each row with a line end: a last row without one was cut inside (a copy or a disk that
        # stopped, a writer still at work), and a number cut short still parses (335 -> 33). Never read it.
        warn(f"{path}: cut short: its last row has no line end; that row is not read")
        return _careful_table(path, warn, fixed or {}, what, drop_last=True)
    table = _arrow_table(path, threads) if fixed is None else None
    return table if table is not None else _careful_table(path, warn, fixed or {}, what)


def _careful_table(path: str, warn, fixed: Dict[str, str], what: str,
                   drop_last: bool = False) -> Optional["StatTable"]:
    """Row by row: every cell checked, a bad row named and skipped, the good ones kept as columns. drop_last: the
    file's last row was cut inside (read_table named it)."""
    try:
        with safeio.open_regular(path, "r", newline="", encoding="utf-8-sig", errors="replace") as fh:
            rows = [r for r in csv.reader(fh) if any(cell.strip() for cell in r)]
        if drop_last:
            rows = rows[:-1]
    except OSError as exc:
        warn(f"{path}: cannot read {what}: {exc.strerror or exc}")
        return None
    except csv.Error as exc:
        warn(f"{path}: not a CSV file: {exc}")
        return None
    if not rows:
        warn(f"{path}: empty {what}")
        return None
    header = [_norm_header(h) for h in rows[0]]
    columns: Dict[str, int] = {}
    for index, name in enumerate(header):
        key = COLUMNS.get(name) if name else None     # (an empty name: a trailing comma)
        if key is not None and key not in columns:
            columns[key] = index
    missing = [k for k in REQUIRED if k not in columns and k not in fixed]
    if missing:
        warn(f"{path}: {what} header lacks {', '.join(missing)}: file skipped (header: {','.join(rows[0])})")
        return None
    width = max(columns.values()) + 1
    present = set(columns) | set(fixed)
    values: Dict[str, list] = {key: [] for key in _ALL_FIELDS if key in present or key in _TEXT_FIELDS}
    for line_no, row in enumerate(rows[1:], start=2):
        row = _rejoin_shape(row, columns.get("shape"), len(header))
        cells = dict(fixed, **{key: (row[i].strip() if i < len(row) else None) for key, i in columns.items()})
        try:
            parsed = _row(cells)
        except (ValueError, OverflowError) as exc:
            warn(f"{path}: row {line_no} skipped: {exc}")
            continue
        if len(row) < width:
            warn(f"{path}: row {line_no} has {len(row)} cells, header has {width}: missing values read as unknown")
        for key, column in values.items():
            column.append(parsed[key])
    return _table_of_values(path, values, _not_recorded(present))


def _row(cells) -> Dict[str, object]:
    """One row's cells, checked and converted (ValueError names the bad cell)."""
    io = (cells.get("io") or "").lower()
    if io not in (INPUT, OUTPUT):
        raise ValueError(f"Input/Output is {cells.get('io')!r}, expected input or output")
    out: Dict[str, object] = {"io": io}
    for key in ("op_type", "op_name"):
        if not cells.get(key):
            raise ValueError(f"empty {key.replace('_', ' ')}")
        out[key] = cells[key]
    for key in ("task_id", "stream_id", "timestamp", "slot"):
        try:
            value = _int(cells.get(key))
        except ValueError:
            value = None
        if value is None:
            raise ValueError(f"{key.replace('_', ' ')} is {cells.get(key)!r}")
        out[key] = value
    try:
        parse_shape(cells.get("shape"))
    except ValueError:
        raise ValueError(f"shape {cells.get('shape')!r} is not a list of integers") from None
    out["shape"] = cells.get("shape") or ""
    out["dtype"] = cells.get("dtype") or ""
    out["format"] = cells.get("format") or ""
    for key in _INT_FIELDS[4:]:
        out[key] = _number(cells, key, _int)
    for key in _FLOAT_FIELDS + _MEAN_FIELDS:
        out[key] = _number(cells, key, _float)
    return out


def _not_recorded(present) -> str:
    missing = [k for k in ("nan", "posinf", "neginf", "max", "min") if k not in present]
    return f"not recorded: {', '.join(missing)}" if missing else ""


def read_op_csv(path: str, parsed, *, rank: int, graph: str, iteration: int,
                warn: Callable[[str], None]) -> List[TensorEvent]:
    """A per-op statistics file `{dump file name}.csv` (CANN's device-side statistics, as msprobe's adump receives
    them): header `Input/Output,Index,Data Size,Data Type,Format,Shape,<statistics...>`, one row per tensor; the
    op's type, name and ids come from the file name (`parsed`, a names.ParsedName). Bad rows warn and are skipped."""
    fixed = {"op_type": parsed.op_type, "op_name": parsed.op_name, "task_id": str(parsed.task_id),
             "stream_id": str(parsed.stream_id), "timestamp": str(parsed.timestamp)}
    table = read_table(path, warn, fixed, what="per-op statistics file")
    if table is None:
        return []
    events = table.events(np.arange(table.size), rank, graph, iteration, file_names=True)
    for event in events:
        event.context_id, event.thread_id = parsed.context_id, parsed.thread_id
    return events


def _read_dir_files(content, batch) -> None:
    """The registry's call: `statistic.csv` (a name) or per-op statistics files [(file name, names.ParsedName)]."""
    d = content.d
    for item in batch:
        complaints: List[str] = []

        def note(message: str, complaints=complaints):     # called within this iteration only
            complaints.append(message)
            content.warn(message)

        content.files += 1
        if isinstance(item, str):
            path = content.path(item)
            table = read_table(path, note)
            if table is None:
                content.refused.append(complaints[-1] if complaints else f"{path}: refused")
                continue
            content.table = table
        else:
            path = content.path(item[0])
            rows = read_op_csv(path, item[1], rank=d.rank, graph=d.graph, iteration=d.step, warn=note)
            if not rows and complaints:
                content.refused.append(complaints[-1])
                continue
            content.events.extend(rows)
        if complaints:     # rows that could not be read could hold the bad value: never clean
            content.not_read(path)


_COLUMN_TITLES = {"count": "Count", "nan": "NaN Count", "posinf": "Positive Inf Count",
                  "neginf": "Negative Inf Count", "max": "Max Value", "min": "Min Value", "zero": "Zero Count"}


def _number(cells, key, parse):
    try:
        return parse(cells.get(key))
    except ValueError:
        raise ValueError(f"{_COLUMN_TITLES.get(key, key)} is {cells.get(key)!r}, not a number") from None


def stats_from_numbers(count, nan, posinf, neginf, high, low, zero, shape, dtype) -> TensorStats:
    if count is None:
        count = math.prod(shape) if shape is not None else 0
    # Counts the file does not give are read from Max/Min below: "at least one", never an exact count.
    counts_given = nan is not None and posinf is not None and neginf is not None
    nan, posinf, neginf = nan or 0, posinf or 0, neginf or 0
    before = (nan, posinf, neginf)
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
    inferred = (nan, posinf, neginf) != before or not counts_given or over_range > 0 or at_max > 0
    return TensorStats(count=count, nan=nan, posinf=posinf, neginf=neginf, min=low, max=high,
                       max_abs=max_abs, over_range=over_range, at_max=at_max, zero=zero, counts_exact=not inferred)


# ---- columns (the scan's fast path) ---------------------------------------------------------------------

_NULL_SPELLINGS = sorted({v for n in NULLS for v in (n, n.upper(), n.title())})
_INT_FIELDS = ("task_id", "stream_id", "timestamp", "slot", "count", "nan", "posinf", "neginf", "zero", "step")
_FLOAT_FIELDS = ("max", "min")
_MEAN_FIELDS = ("mean_abs",)          # floats that are not extremes (never read as a bad value)
_TEXT_FIELDS = ("op_type", "op_name", "io", "dtype", "shape", "format")
_ALL_FIELDS = _TEXT_FIELDS + _INT_FIELDS + _FLOAT_FIELDS + _MEAN_FIELDS


class _Text:
    """A text column as distinct values (stripped) and one code per row."""

    def __init__(self, codes, values):
        self.codes, self.values = codes, values

    def value(self, code: int) -> str:
        return self.values[code]


class _ArrowText(_Text):
    """Op names: tens of thousands of distinct values per file, so they stay in Arrow until one is asked for."""

    def __init__(self, codes, dictionary):
        super().__init__(codes, None)
        self.dictionary = dictionary
        self.size = len(dictionary)

    def value(self, code: int) -> str:
        return self.dictionary[code].as_py()


def _combine(codes, values):
    """Dense codes of the pairs (code, value)."""
    values = np.asarray(values, dtype=np.int64)
    if codes.size:
        seen = np.zeros(int(codes.max()) + 1, dtype=np.int64)
        seen[codes] = values
        if (seen[codes] == values).all():         # the value follows from the code (one task per op): as is
            return codes
    low = values.min() if values.size else 0
    span = int(values.max() - low) + 1 if values.size else 1
    if span * (int(codes.max()) + 1 if codes.size else 1) < (1 << 62):
        _, dense = np.unique(codes * span + (values - low), return_inverse=True)
    else:
        _, dense = np.unique(np.stack([codes, values], axis=1), axis=0, return_inverse=True)
    return dense.reshape(-1).astype(np.int64, copy=False)


class StatTable:
    """A statistic.csv as numpy columns (pyarrow's CSV reader, only the needed columns). Rows are never turned
    into objects unless asked for (`events`)."""

    def __init__(self, path: str, columns: Dict[str, Any], size: int, note: str):     # (values, nulls) or _Text
        self.path, self.columns, self.size, self.note = path, columns, size, note

    def _numbers(self, key):
        return self.columns.get(key)          # (values, null mask) or None when the file lacks the column

    def suspicious(self):
        """Rows that may hold a bad or saturated value (a superset of what TensorStats.bad / at_max say)."""
        bad = np.zeros(self.size, dtype=bool)
        for key in ("nan", "posinf", "neginf"):
            column = self._numbers(key)
            if column is not None:
                bad |= (column[0] > 0) & ~column[1]
        extremes = [np.where(c[1], 0.0, c[0]) for c in (self._numbers(k) for k in _FLOAT_FIELDS) if c is not None]
        if not extremes:
            return bad
        high, low = extremes[0], extremes[-1]
        dtype = self.columns.get("dtype")
        limits = [None] if dtype is None else [limit_of(normalize_dtype(v)) for v in dtype.values] or [None]
        codes = dtype.codes if dtype is not None else np.zeros(self.size, dtype=np.int64)
        for code, limit in enumerate(limits):      # one pass per declared dtype of the file
            rows = codes == code
            bad[rows] |= bad_extremes(high[rows], low[rows], limit) | pinned_extremes(high[rows], low[rows], limit)
        return bad

    def group_codes(self):
        """One code per op (op type, op name, task, stream) and how many there are."""
        if getattr(self, "_groups", None) is None:
            codes = self.columns["op_name"].codes * len(self.columns["op_type"].values) \
                + self.columns["op_type"].codes
            for key in ("task_id", "stream_id"):
                codes = _combine(codes, self.columns[key][0])
            codes = np.unique(codes, return_inverse=True)[1].reshape(-1)     # dense: 0 .. groups - 1
            self._groups = (codes, int(codes.max()) + 1 if codes.size else 0)
        return self._groups

    def has_duplicates(self) -> bool:
        """The same tensor twice (the object path reports and drops those)."""
        codes, _ = self.group_codes()
        columns = (self.columns["slot"][0], self.columns["io"].codes, self.columns["timestamp"][0], codes)
        order = np.lexsort(columns)
        same = np.ones(self.size - 1, dtype=bool)
        for column in columns:
            ordered = column[order]
            same &= ordered[1:] == ordered[:-1]
        return bool(same.any())

    def first_row_named_like(self, pattern: str) -> Optional[int]:
        """The first row whose op name matches the regex `pattern`, without turning names into Python strings."""
        column = self.columns["op_name"]
        if pyarrow_problem():      # the fallback parser's columns: the distinct names are Python strings already
            regex = re.compile(pattern)
            matches = np.fromiter((regex.search(name or "") is not None for name in column.values), dtype=bool,
                                  count=len(column.values))
        else:
            import pyarrow as pa
            import pyarrow.compute as pc
            names = column.dictionary if isinstance(column, _ArrowText) else pa.array(column.values, pa.string())
            matches = np.asarray(pc.match_substring_regex(names, pattern).to_numpy(zero_copy_only=False), dtype=bool)
        if not matches.any():
            return None
        rows = np.flatnonzero(matches[column.codes])
        return int(rows[0]) if rows.size else None

    def rows_of_ops(self, wanted: Callable[[str], bool]):
        """The rows whose op name, as file names write it (what events() names), `wanted` takes; each distinct
        name is asked once."""
        column = self.columns["op_name"]
        count = column.size if isinstance(column, _ArrowText) else len(column.values)
        keep = np.fromiter((wanted(scope_to_file_name(column.value(code))) for code in range(count)), dtype=bool,
                           count=count)
        return np.flatnonzero(keep[column.codes]) if count else np.zeros(0, dtype=np.int64)

    def first_timestamp(self) -> Optional[int]:
        return int(self.columns["timestamp"][0].min()) if self.size else None

    def events(self, rows, rank: int, graph: str, iteration: int, file_names: bool = False) -> List[TensorEvent]:
        """TensorEvents for the given rows. file_names: op names are already as file names write them (per-op
        statistics files); otherwise scoped names (`Default/net/Mul-op1`) are turned into that form."""
        c = self.columns
        graph = str(graph)
        op_names: Dict[int, str] = {}
        dtypes = [normalize_dtype(v) for v in c["dtype"].values] if "dtype" in c else None
        shapes = [parse_shape(v) for v in c["shape"].values] if "shape" in c else None
        rows = rows.tolist() if hasattr(rows, "tolist") else list(rows)
        # most of a file's rows asked (the watcher reads whole files): its columns as Python lists once, each
        # element of a NumPy array read one by one costing several times a list's
        whole = len(rows) * 4 >= self.size

        def column_of(array):
            return array.tolist() if whole else array

        numbers = {key: (column_of(c[key][0]), column_of(c[key][1])) for key in
                   ("count", "nan", "posinf", "neginf", "max", "min", "zero", "mean_abs", "task_id", "stream_id",
                    "timestamp", "slot") if key in c}
        codes = {key: column_of(c[key].codes) for key in ("shape", "dtype", "op_type", "io", "format") if key in c}

        def number(key, row, kind):
            column = numbers.get(key)
            if column is None or column[1][row]:
                return None
            return kind(column[0][row])

        events = []
        for row in rows:
            shape = shapes[codes["shape"][row]] if shapes is not None else None
            dtype = dtypes[codes["dtype"][row]] if dtypes is not None else None
            stats = stats_from_numbers(number("count", row, int), number("nan", row, int),
                                       number("posinf", row, int), number("neginf", row, int),
                                       number("max", row, float), number("min", row, float),
                                       number("zero", row, int), shape, dtype)
            stats.mean_abs = number("mean_abs", row, float)
            events.append(TensorEvent(
                source=self.path, rank=rank, graph=graph, step=iteration,
                op_type=c["op_type"].values[codes["op_type"][row]],
                op_name=_cached(op_names, c["op_name"], row, str if file_names else scope_to_file_name),
                task_id=int(numbers["task_id"][0][row]), stream_id=int(numbers["stream_id"][0][row]),
                timestamp=int(numbers["timestamp"][0][row]), io=c["io"].values[codes["io"][row]],
                slot=int(numbers["slot"][0][row]),
                fmt=c["format"].values[codes["format"][row]] if "format" in c else "",
                dtype=dtype, shape=shape, stats=stats, note=self.note))
        return events


def _cached(cache: Dict[int, str], column: "_Text", row: int, convert) -> str:
    code = int(column.codes[row])
    if code not in cache:
        cache[code] = convert(column.value(code))
    return cache[code]


# pyarrow 26+ refuses to import beside NumPy 1.x (every MindSpore wheel needs NumPy < 2); 14 to 25 import with both.
PYARROW_FIX = "pip install 'pyarrow>=14,<26'"


@functools.lru_cache(maxsize=1)
def pyarrow_problem() -> Optional[str]:
    """None when the fast statistic.csv parser (pyarrow) can run here; otherwise why not, with the fix. The first
    call says it once on the `msoverflow` log (a large dump is then read about 10x slower, never silently)."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.compute  # noqa: F401
        from pyarrow import csv as _pa_csv  # noqa: F401
    except Exception as exc:    # noqa: BLE001 - ImportError, or what a broken binary build raises on import
        import numpy
        why = " ".join(str(exc).split())[:200] or type(exc).__name__
        problem = (f"pyarrow cannot be imported here ({why}; NumPy {numpy.__version__}): statistic.csv files are "
                   f"read by the slower fallback parser (about 10x slower on large dumps). Fix: {PYARROW_FIX}")
        from ..logs import log
        log.warning(problem)
        return problem
    return None


def fast_parser() -> str:
    """Which statistic.csv parser runs here: "pyarrow" (the fast path) or "fallback"."""
    return "fallback" if pyarrow_problem() else "pyarrow"


def _table_of_values(path: str, values: Dict[str, list], note: str) -> StatTable:
    """The careful reader's rows (checked Python values, one list per field) as the same columns pyarrow gives."""
    size = len(values["io"])
    columns: Dict[str, Any] = {}          # (values, nulls) or a _Text per key
    for key, column in values.items():
        if key in _TEXT_FIELDS:
            distinct: Dict[str, int] = {}
            codes = np.fromiter((distinct.setdefault(v, len(distinct)) for v in column), dtype=np.int64,
                                count=size)
            columns[key] = _Text(codes, list(distinct))
        else:
            null = np.fromiter((v is None for v in column), dtype=bool, count=size)
            kind = float if key in _FLOAT_FIELDS + _MEAN_FIELDS else np.int64
            columns[key] = (np.asarray([0 if v is None else v for v in column], dtype=kind), null)
    return StatTable(path, columns, size, note)


def warm_up() -> None:
    """Pay the pyarrow route's first-use cost now (its imports and set-up, ~0.3 s of CPU): a caller that reads
    while something else runs (the watcher beside a training) does it before that starts."""
    if pyarrow_problem():
        return
    import tempfile
    with tempfile.TemporaryDirectory(prefix="msoverflow_warm_") as scratch:   # (the system's, never a dump's)
        path = os.path.join(scratch, "statistic.csv")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,"
                     "Min Value,Avg Value,Count,NaN Count,Negative Inf Count,Positive Inf Count\n"
                     'Add,a,0,0,1,output,0,4,float32,"(1,)",1.0,1.0,1.0,1,0,0,0\n')
        _arrow_table(path, threads=False)


def _arrow_table(path: str, threads: bool = True) -> Optional[StatTable]:
    """A well-formed statistic.csv as columns through pyarrow; None for anything unusual (the careful reader
    then explains it row by row) or when pyarrow cannot be imported (said once, see pyarrow_problem)."""
    if pyarrow_problem():
        return None
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyarrow import csv as pa_csv
    try:
        from .. import safeio
        with safeio.open_regular(path, "rb") as fh:      # a FIFO or device: the careful reader says why
            # pyarrow skips a UTF-8 byte-order mark too: the names then match
            header_line = fh.readline(1 << 16).decode("utf-8-sig", errors="replace")
        header = next(csv.reader([header_line]))
    except (OSError, csv.Error, StopIteration):
        return None
    fields: Dict[str, str] = {}
    for name in header:
        key = COLUMNS.get(_norm_header(name))
        if key is not None and key not in fields:
            fields[key] = name
    wanted = {k: v for k, v in fields.items() if k in _ALL_FIELDS}
    if any(k not in fields for k in REQUIRED) or len(set(wanted.values())) != len(wanted) \
            or len(set(header)) != len(header):
        return None
    types = {name: (pa.int64() if k in _INT_FIELDS else pa.float64() if k in _FLOAT_FIELDS + _MEAN_FIELDS
                    else pa.string())
             for k, name in wanted.items()}
    try:
        table = pa_csv.read_csv(path, read_options=pa_csv.ReadOptions(use_threads=threads),
                                convert_options=pa_csv.ConvertOptions(
            include_columns=list(wanted.values()), column_types=types, null_values=_NULL_SPELLINGS,
            strings_can_be_null=False, quoted_strings_can_be_null=False))
    except (pa.ArrowException, OSError, ValueError):
        return None
    size = table.num_rows
    columns: Dict[str, Any] = {}          # (values, nulls) or a _Text per key
    for key, name in wanted.items():
        column = table.column(name)
        if key in _TEXT_FIELDS:
            encoded = column.dictionary_encode().combine_chunks()
            codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            if key == "op_name":
                names = encoded.dictionary
                # read_statistic_csv strips names; a name with blanks around it, or none, takes that path
                if len(names) and (not pc.all(pc.equal(names, pc.utf8_trim_whitespace(names))).as_py()
                                   or pc.min(pc.utf8_length(names)).as_py() == 0):
                    return None
                columns[key] = _ArrowText(codes, names)
                continue
            values = [v.strip() if v is not None else "" for v in encoded.dictionary.to_pylist()]
            if key == "op_type" and any(v != raw for v, raw in zip(values, encoded.dictionary.to_pylist(), strict=True)):
                return None               # blanks around a type: read_statistic_csv groups by the stripped one
            if key == "dtype":         # read_statistic_csv normalises the cell as written
                values = [v if v is not None else "" for v in encoded.dictionary.to_pylist()]
            columns[key] = _Text(codes, values)
            continue
        null = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else np.zeros(size, bool)
        values = column.fill_null(0).to_numpy() if column.null_count else column.to_numpy()
        if key in ("task_id", "stream_id", "timestamp", "slot") and null.any():
            return None
        columns[key] = (np.asarray(values), null)
    io = columns["io"]
    io.values = [v.lower() for v in io.values]
    if any(v not in (INPUT, OUTPUT) for v in io.values):
        return None
    if any(not v for v in columns["op_type"].values):
        return None
    if "shape" in columns:
        try:
            for v in columns["shape"].values:
                parse_shape(v)
        except ValueError:
            return None
    return StatTable(path, columns, size, _not_recorded(fields))


READER = Reader("statistic_csv", _read_dir_files, kinds=(KIND_OPCSV,), file_names=("statistic.csv",))
