"""The one grammar for `--steps` and `--ranks` on every command (and the Python API): `0`, `0,7`, `0-3`,
`0|5-8`, `all`. A selection is kept as ranges, never materialised: `--ranks 0-30000000` costs two integers, and
membership is a bisection. Numbers are bounded ASCII digits; where a command needs the values themselves (a dump
config's device list) it asks for them with a cap and refuses more.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Tuple, Union

from .errors import UserError

MAX_ID = (1 << 31) - 1          # steps and rank ids above this are not ids
_PART = re.compile(r"^([0-9]{1,10})(?:-([0-9]{1,10}))?$")
GRAMMAR = "numbers like 0, 0,7, 0-3 or 0|5-8, or all"


class SelectionError(UserError):
    """A selection that does not follow the grammar (a usage error: exit 2)."""


@dataclass(frozen=True, eq=False)
class Selection:
    """Non-negative integers as sorted, disjoint inclusive ranges (adjacent ones stay apart, as written; two
    selections of the same values are equal, and equal to the list of them)."""
    ranges: Tuple[Tuple[int, int], ...]

    def _canonical(self) -> Tuple[Tuple[int, int], ...]:
        merged: List[List[int]] = []
        for low, high in self.ranges:
            if merged and low <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        return tuple((low, high) for low, high in merged)

    def __eq__(self, other) -> bool:
        if isinstance(other, Selection):
            return self._canonical() == other._canonical()
        if isinstance(other, (list, tuple, set, frozenset, range)):
            values = sorted(set(other))
            return len(values) == len(self) and list(self) == values
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._canonical())

    def __contains__(self, value) -> bool:
        try:
            value = int(value)
        except (TypeError, ValueError):
            return False
        i = bisect.bisect_right(self._starts, value) - 1
        return i >= 0 and value <= self.ranges[i][1]

    @property
    def _starts(self) -> List[int]:
        return [low for low, _high in self.ranges]

    def __len__(self) -> int:
        return sum(high - low + 1 for low, high in self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __str__(self) -> str:
        """MindSpore's iteration string form: `0|5-8`."""
        return "|".join(str(low) if low == high else f"{low}-{high}" for low, high in self.ranges)

    def __iter__(self) -> Iterator[int]:
        """The values, in order (only for selections known to be small: see values())."""
        for low, high in self.ranges:
            yield from range(low, high + 1)

    def values(self, limit: int, what: str = "values") -> List[int]:
        """The values themselves, refused (a usage error) when there are more than `limit`."""
        if len(self) > limit:
            raise SelectionError(f"{what} {self}: {len(self)} values, at most {limit} can be listed")
        return list(self)


MAX_LISTED = 1_000_000     # values an iterable selection may list (ranges of step 1 and text are never listed)


def parse(text: Union[None, str, int, Iterable[int], Selection], what: str = "--steps") -> Optional[Selection]:
    """`0|5-8`, `0,7`, `0-3`, `all` (None: no filter), an int, a range, an iterable of ints or a Selection ->
    Selection, kept as ranges (a range or a sorted iterable is never held as a set of its values). `what` names the
    option as the caller's user wrote it: `--ranks` on the command line, `ranks=` in the API. SelectionError
    (exit 2) names it and the grammar; a value of another type is a TypeError."""
    if text is None or isinstance(text, Selection):
        return text
    if isinstance(text, bool) or isinstance(text, (float, bytes)) or not isinstance(text, (int, str, Iterable)):
        name = what.strip("-=")
        raise TypeError(f"{name} must be str, int, an iterable of ints, a Selection or None, not "
                        f"{type(text).__name__}")
    if isinstance(text, int):
        return _of_ranges([(_bounded(text, what, text), _bounded(text, what, text))])
    if isinstance(text, range) and abs(text.step) == 1:
        ends = sorted((text[0], text[-1])) if len(text) else []
        return _of_ranges([(_bounded(ends[0], what, text), _bounded(ends[1], what, text))] if ends else [])
    if not isinstance(text, str):
        runs: List[List[int]] = []      # consecutive values merge as they come: a sorted iterable costs its runs
        for count, value in enumerate(text):
            if count == MAX_LISTED:     # a generator that never ends, a stepped range of billions
                raise SelectionError(f"{_said(what, text)}: more than {MAX_LISTED:,} values; give a range or a "
                                     "text such as 0-3|8")
            if isinstance(value, (bool, float)):
                raise SelectionError(f"{_said(what, text)}: {value!r} is not a step or rank id")
            number = _bounded(value, what, text)
            if runs and number == runs[-1][1] + 1:
                runs[-1][1] = number
            else:
                runs.append([number, number])
        return _of_ranges(runs)
    body = re.sub(r"\s+", "", text)
    if body.lower() == "all":
        return None
    spans = []
    for part in re.split(r"[,|]", body):
        match = _PART.match(part)
        if not match:
            raise SelectionError(f"{_said(what, text)}: expected {GRAMMAR}")
        low = _bounded(match.group(1), what, text)
        high = _bounded(match.group(2), what, text) if match.group(2) is not None else low
        if high < low:
            raise SelectionError(f"{_said(what, text)}: the range {part} runs backwards")
        spans.append((low, high))
    return _of_ranges(spans)


def _said(what: str, text) -> str:
    """The option and its value as the user wrote them: `--ranks '0-x'`, `ranks='0-x'` (a long text or a list of
    millions in a few words: safeio.brief)."""
    from .safeio import brief
    said = repr(text) if isinstance(text, (str, range)) and len(repr(text)) <= 200 else brief(text, 60)
    return f"{what}{said}" if what.endswith("=") else f"{what} {said}"


def _bounded(value, what: str, text) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SelectionError(f"{_said(what, text)}: expected {GRAMMAR}") from None
    if not 0 <= number <= MAX_ID:
        from .safeio import brief  # an int of 5,000 digits does not convert to text
        raise SelectionError(f"{_said(what, text)}: {brief(number)} is not a step or rank id (0 to {MAX_ID})")
    return number


def _of_ranges(spans) -> Selection:
    merged: List[List[int]] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return Selection(tuple((low, high) for low, high in merged))


def argument(what: str):
    """An argparse `type=` for the option `what` (`--steps`, `--ranks`): a usage error exits 2."""
    import argparse

    def convert(text: str) -> Optional[Selection]:
        try:
            return parse(text, what)
        except SelectionError as exc:
            raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None
    convert.__name__ = what.lstrip("-")
    return convert


def not_in_dump(path: str, ranks: Optional[Selection], steps: Optional[Selection], dirs) -> UserError:
    """The error for a selection that matches nothing in the dump (`dirs`: every leaf directory discovered,
    layout.DumpDir, to say what the dump has)."""
    chosen = " ".join(f"--{name} {format_ids(sel)}" for name, sel in (("ranks", ranks), ("steps", steps))
                      if sel is not None)
    held: dict = {}
    for d in dirs:
        held.setdefault(d.rank, set()).add(d.step)
    if not held:
        return UserError(f"{path}: no tensor files for the selected {chosen or 'rank/iteration'}")
    per_rank = "; ".join(f"rank {rank}: steps {format_ids(s)}" for rank, s in sorted(held.items())[:16])
    more = f" (and {len(held) - 16} more ranks)" if len(held) > 16 else ""
    # what the dump holds, in the same grammar, so the answer can be pasted back
    return UserError(f"{path}: the dump has no files for {chosen}; it holds ranks {format_ids(held)} "
                     f"({per_rank}{more})")


def _ranges_of(values) -> List[Tuple[int, int]]:
    """Sorted, merged inclusive runs of a Selection, a range or any iterable of ints (a range is never expanded)."""
    if isinstance(values, Selection):
        return list(values._canonical())
    if isinstance(values, range) and abs(values.step) == 1:
        return [(min(values[0], values[-1]), max(values[0], values[-1]))] if len(values) else []
    spans: List[List[int]] = []
    for value in sorted(set(values)):
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return [(low, high) for low, high in spans]


def format_ids(values, limit: Optional[int] = None) -> str:
    """Steps or ranks as the command line's grammar writes them: `0-3`, `0,2,5`, `0-2,7,9-12` (a run of three or
    more is a range). With `limit`, at most that many parts and how many values there are in all:
    `0,2,4,... (500 in all)`. `values`: a Selection, a range or any iterable of ints; runs are never expanded, so
    an 18-digit step or `range(0, 2**31 - 1)` costs two integers. "" for no values."""
    parts: List[str] = []
    total, left_out = 0, False
    for low, high in _ranges_of(values):
        total += high - low + 1
        pieces = [f"{low}-{high}"] if high - low >= 2 else [str(value) for value in range(low, high + 1)]
        for piece in pieces:
            if limit is not None and len(parts) >= limit:
                left_out = True
            else:
                parts.append(piece)
    return ",".join(parts) + (f",... ({total} in all)" if left_out else "")
