"""What the commands deliver, in one place: a report printed or written (-o), the JSON report saved (--save), and
the one check of every path a command writes against every dump it reads, made before anything is created.

Library code (msoverflow.api, config/runner.py, config/two_pass.py, patch/verify.py, hunt/session.py) returns
Reports and outcomes; analyze, run, hunt and compare hand them to `deliver` / `deliver_comparison` here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from ..errors import EXIT_ANOMALY, EXIT_CLEAN, EXIT_INCONCLUSIVE

FORMATS = ("text", "json", "markdown", "html")


def add_report_options(p) -> None:
    """--format, -o, --save, --no-save: the same on every command that ends in a Report (analyze, run, hunt)."""
    p.add_argument("--format", choices=list(FORMATS),
                   help="default: from -o's extension (.html, .json, .md), else text; html: one self-contained page "
                        "with plots, viewable offline")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the report here instead of stdout (then no report.json is saved)")
    p.add_argument("--save", metavar="FILE", default=None,
                   help="without -o, also save the JSON report here for `msoverflow patch/repro --from` "
                        "(default: report.json in the current directory, never inside the dump; "
                        "$MSOVERFLOW_REPORT_JSON overrides, empty disables)")
    p.add_argument("--no-save", action="store_true", help="without -o, do not save report.json")


# ---- the one check of output paths ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Written:
    """A path a command will write: what it is for ("the report (-o)"), and whether it is a directory the
    command makes."""
    path: Optional[str]
    what: str
    directory: bool = False


@dataclass(frozen=True)
class Paths:
    """What a command reads (dumps: nothing may be written inside them) and what it writes."""
    inputs: Tuple[str, ...] = ()
    outputs: Tuple[Written, ...] = ()


def declare_paths(parser, paths: Callable[[object], Paths]) -> None:
    """A command says which dumps it reads and which paths it writes, from its parsed arguments."""
    parser.set_defaults(paths=paths)


def report_outputs(args) -> Tuple[Written, ...]:
    """The paths add_report_options names."""
    return (Written(getattr(args, "output", None), "the report (-o)"),
            Written(getattr(args, "save", None), "the JSON report (--save)"))


def check_paths(args) -> None:
    """Every path the command writes (its own outputs and --log-file), refused (UserError, exit 2) inside any
    dump it reads, resolved through symlinks and widened to each dump's root. Called by cli.main before logging
    starts, so a refused --log-file is never created."""
    from ..safeio import check_output
    declared = getattr(args, "paths", None)
    paths = declared(args) if declared else Paths()
    inputs = tuple(str(p) for p in paths.inputs if p)
    outputs = list(paths.outputs) + [Written(getattr(args, "log_file", None), "the log file (--log-file)")]
    for written in outputs:
        if written.path and written.path != "-":
            check_output(written.path, inputs, what=written.what, directory=written.directory)


def report_dump_dir(report_path: Optional[str]) -> Optional[str]:
    """The dump a JSON report was made from (repro/patch --from REPORT read it), or None when it cannot be told;
    a report that cannot be read is the command's own error to give."""
    if not report_path:
        return None
    from ..safeio import load_json
    try:
        report = load_json(report_path)
    except (OSError, ValueError):
        return None
    dump_dir = report.get("dump_dir") if isinstance(report, dict) else None
    return dump_dir if isinstance(dump_dir, str) and dump_dir and "\0" not in dump_dir else None


# ---- delivering a Report --------------------------------------------------------------------------------------

def _page_dir(output: Optional[str]) -> Optional[str]:
    """Where a written page is read from: its links to dump files are relative to it."""
    return os.path.dirname(os.path.abspath(output)) if output else None


def format_of(output: Optional[str]) -> str:
    extension = os.path.splitext(output or "")[1].lower()
    return {".html": "html", ".htm": "html", ".json": "json", ".md": "markdown"}.get(extension, "text")


def deliver(args, report) -> int:
    """Print the report (or write it to -o) in the chosen form, save report.json; the exit code of its verdict."""
    from ..logs import timed
    from ..render import render
    from ..safeio import refuse_output_inside
    fmt = args.format or format_of(args.output)
    with timed("render"):
        text = render(report, fmt, getattr(args, "top", 10), page_dir=_page_dir(args.output))
    if args.output and not report.files and report.layout != "hunt":
        # No file was understood, so where the dump begins is unknown: DUMP_DIR may be a subdirectory of it.
        # Its parent is guarded too (unless that is where the user stands).
        parent = os.path.dirname(os.path.realpath(report.dump_dir))
        if parent != os.path.realpath(os.getcwd()):
            refuse_output_inside(args.output, parent, what="the directory holding an unrecognised dump")
    if args.output:
        write_output(args.output, text, fmt)
    else:
        print(text, end="", flush=True)
        _save_default_json(args, report)
    return report.exit_code


def write_output(path: str, text: str, fmt: str) -> None:
    """-o FILE: the rendered answer written there (check_paths has refused paths inside a dump). A FIFO or
    device is written without waiting on it."""
    from ..logs import log
    from ..safeio import open_output
    with open_output(path, what=f"the {fmt} report") as fh:
        fh.write(text)
    try:
        size = f", {_size(os.path.getsize(path))}" if os.path.isfile(path) else ""
    except OSError:
        size = ""
    log.info("wrote %s (%s%s)", os.path.abspath(path), fmt, size)


def save_json(report, path: str) -> str:
    """The JSON report written whole to `path` (atomically); its absolute path."""
    from ..logs import log
    from ..render import render
    from ..safeio import write_atomic
    write_atomic(path, render(report, "json"), what="the JSON report")
    log.info("wrote %s (json, %s)", os.path.abspath(path), _size(os.path.getsize(path)))
    return os.path.abspath(path)


def _save_default_json(args, report) -> None:
    """The quick start's second command (`patch --from report.json`) needs the JSON report on disk. An explicit
    --save was checked with the other outputs; the default (./report.json) is skipped, with a word, when the
    current directory is inside the dump."""
    from ..errors import UserError
    from ..logs import log
    from ..safeio import dump_root, inside
    explicit = getattr(args, "save", None)
    path = explicit if explicit is not None else os.environ.get("MSOVERFLOW_REPORT_JSON", "report.json")
    if getattr(args, "no_save", False) or not path:
        return
    if explicit is None:
        root = dump_root(report.dump_dir)
        if inside(path, report.dump_dir) or inside(path, root):
            log.warning("not saving %s: it is inside the dump directory %s (run from elsewhere, or give --save "
                        "FILE)", path, root)
            return
    try:
        save_json(report, path)
    except UserError as exc:
        raise UserError(f"{exc}; give --save FILE or --no-save") from None
    from ..judgement import conclusion_of
    command = conclusion_of(report).next_command     # the conclusion says what comes next (nothing on CLEAN)
    if command:
        log.info("next: %s", command.format(report=path))


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB" if n >= 1e3 else f"{n} bytes"


# ---- delivering a Comparison -----------------------------------------------------------------------------------

def deliver_comparison(args, result) -> int:
    from ..logs import timed
    from ..render.compare import render_comparison
    fmt = args.format or format_of(args.output)
    with timed("render"):
        text = render_comparison(result, fmt, _page_dir(args.output))
    if args.output:
        write_output(args.output, text, fmt)
    else:
        print(text, end="", flush=True)
    return {"diverged": EXIT_ANOMALY, "inconclusive": EXIT_INCONCLUSIVE}.get(result.verdict, EXIT_CLEAN)
