"""`msoverflow analyze DUMP_DIR`: name the first op that created a bad value."""
from __future__ import annotations

import argparse
import os
import time

from ..errors import EXIT_ANOMALY, EXIT_CLEAN, EXIT_CODES_HELP, EXIT_INCONCLUSIVE
from ..selection import argument


def add_report_options(p) -> None:
    """--format, -o, --save, --no-save: the same on every command that ends in a Report (analyze, run, hunt)."""
    p.add_argument("--format", choices=["text", "json", "markdown", "html"],
                   help="default: from -o's extension (.html, .json, .md), else text; html: one self-contained page "
                        "with plots, viewable offline")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the report here instead of stdout (then no report.json is saved)")
    p.add_argument("--save", metavar="FILE", default=None,
                   help="without -o, also save the JSON report here for `msoverflow patch/repro --from` "
                        "(default: report.json in the current directory, never inside the dump; "
                        "$MSOVERFLOW_REPORT_JSON overrides, empty disables)")
    p.add_argument("--no-save", action="store_true", help="without -o, do not save report.json")


def register(sub):
    p = sub.add_parser("analyze", help="find the first op that created inf/NaN/out-of-range values in a dump",
                       description="Read a MindSpore dump directory (any layout, any level inside it) and name the "
                                   "first operator that created a non-finite or out-of-range value: op, forward op, "
                                   "Cell, source line, rank, step, kind of fault and what to do. "
                                   + EXIT_CODES_HELP,
                       epilog="Verdicts: CLEAN (0) only when every file that could hold an origin was understood "
                              "and read (caveat lines name what the dump config could not show); ANOMALY (1) names "
                              "the op that created the first bad value (a hardware flag alone never proves it: "
                              "flagged ops whose inputs were not dumped are reported as 'flagged'); INCONCLUSIVE "
                              "(3) when files were not understood or not read, an expected rank has no files, or "
                              "a (rank, step) is incomplete (job killed, dump still being written), with the "
                              "reason. Every report ends with a per-rank table: origin, received (via which "
                              "collective), flagged, clean, incomplete or not dumped. Ranks are ordered by steps, "
                              "collectives and op knowledge, never by their clocks.")
    p.add_argument("dump_dir", metavar="DUMP_DIR")
    p.add_argument("--ranks", "--rank", dest="rank", type=argument("--ranks"), metavar="IDS",
                   help="only these ranks, e.g. 0, 0,7 or 0-3")
    p.add_argument("--steps", "--step", "--iteration", "--iterations", dest="iteration", type=argument("--steps"),
                   metavar="STEPS", help="only these steps (the dump's iteration directories), e.g. 0, 0-3 or 0|5-8")
    p.add_argument("--top", type=int, default=10, help="later origins to list (default 10)")
    p.add_argument("--all", dest="scan_all", action="store_true",
                   help="scan every step (default: stop after the step holding the first origin)")
    add_report_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="worker processes for the per-rank scans (default: one per CPU on large dumps, on 3+ CPUs; "
                        "1: none)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the per-rank scans on this Dask distributed scheduler (tcp://host:8786; default "
                        "$MSOVERFLOW_SCHEDULER); every worker must see the dump at the same path")
    p.add_argument("--finished", action="store_true",
                   help="the job that wrote the dump has ended: files written seconds ago are complete, not a dump "
                        "still being written (msoverflow run and patch --verify say so themselves)")
    from ..parallel_layout import add_parallel_option
    add_parallel_option(p)
    p.set_defaults(run=run)
    return p


def parse(argv) -> argparse.Namespace:
    """analyze's own options from a list (`run --analyze-arg ...`), checked by the same parser; a bad one is a
    UserError (one line, exit 2), never argparse's exit."""
    from ..errors import UserError
    options = " ".join(map(str, list(argv)[1:]))

    class Refusing(argparse.ArgumentParser):
        def error(self, message):
            raise UserError(f"analyze options '{options}': {message}")

    parser = Refusing(prog="msoverflow", add_help=False)
    register(parser.add_subparsers())
    return parser.parse_args(["analyze", *argv])


def run(args) -> int:
    from ..api import analyze
    from ..errors import UserError

    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: expected 1 or more")
    if args.scheduler:     # checked before any scan: a bad address is one line, at once
        from ..parallel import check_scheduler_address
        check_scheduler_address(args.scheduler)
    from ..logs import log
    from ..safeio import refuse_output_inside
    if args.output:   # resolved through symlinks, judged against the dump's root, not only DUMP_DIR
        refuse_output_inside(args.output, args.dump_dir)
    started = time.monotonic()
    report = analyze(args.dump_dir, ranks=args.rank, steps=args.iteration, scan_all=args.scan_all,
                     progress=False if (args.no_progress or getattr(args, "quiet", False)) else None,
                     warn=lambda message: log.debug("warning: %s", message), jobs=args.jobs,
                     scheduler=args.scheduler, parallel=args.parallel, finished=args.finished,
                     command=getattr(args, "command_line", None))
    log.debug("analyzed %s in %.1f s: %s, %d files, %d tensors read", args.dump_dir, time.monotonic() - started,
              report.verdict, report.files, report.tensors_read)
    return deliver(args, report)


def deliver(args, report) -> int:
    """Print or write the report in the chosen form, save report.json; the exit code of its verdict."""
    from ..render import render
    from ..safeio import refuse_output_inside
    fmt = args.format or _format_of(args.output)
    page_dir = os.path.dirname(os.path.abspath(args.output)) if args.output else None   # HTML links from there
    text = render(report, fmt, args.top, page_dir=page_dir)
    if args.output and not report.files:
        # No file was understood, so where the dump begins is unknown: DUMP_DIR may be a subdirectory of it.
        # Its parent is guarded too (unless that is where the user stands).
        parent = os.path.dirname(os.path.realpath(args.dump_dir))
        if parent != os.path.realpath(os.getcwd()):
            refuse_output_inside(args.output, parent, what="the directory holding an unrecognised dump")
    if args.output:
        write_output(args.output, text, fmt)
    else:
        print(text, end="")
        _save_json(args, report)
    return {"anomaly": EXIT_ANOMALY, "inconclusive": EXIT_INCONCLUSIVE}.get(report.verdict, EXIT_CLEAN)


def write_output(path: str, text: str, fmt: str) -> None:
    """-o FILE: the rendered report written there (the caller has refused paths inside a dump)."""
    from ..errors import UserError
    from ..logs import log
    try:
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
    except OSError as exc:
        raise UserError(f"{path}: cannot write report ({exc.strerror})")
    log.info("wrote %s (%s, %s)", os.path.abspath(path), fmt, _size(os.path.getsize(path)))


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB" if n >= 1e3 else f"{n} bytes"


def _format_of(output) -> str:
    extension = os.path.splitext(output or "")[1].lower()
    return {".html": "html", ".htm": "html", ".json": "json", ".md": "markdown"}.get(extension, "text")


def _save_json(args, report) -> None:
    """The quick start's second command (`patch --from report.json`) needs the JSON report on disk."""
    from ..errors import UserError
    from ..logs import log
    from ..render import render
    path = args.save if args.save is not None else os.environ.get("MSOVERFLOW_REPORT_JSON", "report.json")
    if args.no_save or not path:
        return
    from ..safeio import dump_root, inside
    out_abs = os.path.realpath(path)
    if inside(out_abs, args.dump_dir) or inside(out_abs, dump_root(args.dump_dir)):   # the dump's root too
        log.warning("not saving %s: it is inside the dump directory %s (run from elsewhere, or give --save FILE)",
                    path, dump_root(args.dump_dir))
        return
    tmp = out_abs + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(render(report, "json"))
        os.replace(tmp, out_abs)
    except OSError as exc:
        raise UserError(f"{path}: cannot save the JSON report ({exc.strerror}); give --save FILE or --no-save")
    log.info("JSON report saved to %s (next: msoverflow patch --from %s)", path, path)
