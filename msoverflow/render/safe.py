"""Nothing a dump wrote reaches a reader unescaped. Op names, Cell paths, file names and source lines come from
files anyone can write: the terminal must not run their escape sequences, a markdown viewer must not render their
HTML, a plot must not parse them as mathtext, and none may stop a page from being written as UTF-8.

One function per output: `plain` (text, and the base of the others), `md` / `md_code` (markdown), `plot_label`
(matplotlib). The HTML escapes with `html.escape(plain(...))` (render/html/page.py `esc`).
"""
from __future__ import annotations

import re

# C0 controls except tab and newline, DEL and C1 controls (ESC starts a terminal sequence, CR overwrites a line),
# zero-width and bidirectional overrides (text that reads other than it is), and lone surrogates (file names that
# were not UTF-8: os.fsdecode's surrogateescape; they cannot be written as UTF-8).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")


def _escape(match: "re.Match") -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(text) -> str:
    """Text safe for a terminal: control, invisible and undecodable characters shown as `\\x1b`, `\\u202e` ..."""
    return _UNSAFE.sub(_escape, "" if text is None else str(text))


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>&|])")


# A code span on one line: msoverflow's own prose quotes commands so (`msoverflow patch --from report.json`); inside
# one, markdown shows every character as it is (no HTML, link or emphasis), so it is kept, not escaped.
_MD_CODE_SPAN = re.compile(r"`([^`]+)`")


def _md_prose(flat: str) -> str:
    # `>` is markup only where a line starts (a quote); mid-line it is shown as it is, so it stays readable
    return _MD_SPECIAL.sub(lambda m: "&lt;" if m.group(1) == "<" else "&amp;" if m.group(1) == "&"
                           else ">" if m.group(1) == ">" else "\\" + m.group(1), flat)


def md(text) -> str:
    """Markdown prose from a dump: HTML as text (`<b>` -> `&lt;b>`), no links or emphasis, no table cell breaks,
    one line; a `code span` stays one (its characters are shown as they are), and `>` is written as it is except
    at the start (a quote)."""
    flat = plain(text).replace("\r", " ").replace("\n", " ")
    out, at = [], 0
    for span in _MD_CODE_SPAN.finditer(flat):
        out.append(_md_prose(flat[at:span.start()]))
        out.append("`" + span.group(1).replace("|", "\\|") + "`")
        at = span.end()
    out.append(_md_prose(flat[at:]))
    joined = "".join(out)
    return "\\" + joined if joined.startswith(">") else joined


def md_code(text, table: bool = False) -> str:
    """A markdown code span around dump text: raw HTML inside a code span is shown, not rendered; the fence is
    longer than any backtick run inside. In a table cell `|` is escaped (GFM splits cells before code spans)."""
    flat = plain(text).replace("\r", " ").replace("\n", " ")
    if table:
        flat = flat.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def plot_label(text, width: int = 60) -> str:
    """A plot label: safe characters, one line, at most `width` characters (mathtext is off for every plot:
    render/html/plots.py draws under `text.parse_math: False`)."""
    flat = plain(text).replace("\n", " ")
    return flat if len(flat) <= width else flat[: width - 1] + "…"
