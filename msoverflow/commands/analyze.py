"""`msoverflow analyze DUMP_DIR`: name the first op that created a bad value."""
from __future__ import annotations

import argparse
import time

from ..errors import EXIT_CODES_HELP
from ..selection import argument
from ._output import Paths, add_report_options, declare_paths, report_outputs


def register(sub):
    p = sub.add_parser("analyze", aliases=["analyse"],
                       help="find the first op that created inf/NaN/out-of-range values in a dump",
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
    p.add_argument("--ranks", "--rank", dest="ranks", type=argument("--ranks"), metavar="IDS",
                   help="only these ranks, e.g. 0, 0,7 or 0-3")
    p.add_argument("--steps", "--step", "--iteration", "--iterations", dest="steps", type=argument("--steps"),
                   metavar="STEPS", help="only these steps (the dump's iteration directories), e.g. 0, 0-3 or 0|5-8")
    p.add_argument("--top", type=int, default=10, help="later origins to list (default 10)")
    p.add_argument("--all", dest="scan_all", action="store_true",
                   help="scan every step (default: stop after the step holding the first origin)")
    p.add_argument("--strict", action="store_true",
                   help="report contained values (a -inf that Softmax absorbs) and overflows a dynamic loss scale "
                        "handled (skipped updates while it calibrates) as anomalies too; by default they are listed "
                        "and the verdict is clean when they are all there is")
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
    p.add_argument("--history", action="store_true",
                   help="a statistics dump (statistic.csv per step, or `msoverflow watch`'s stats/): the watch's "
                        "early warnings and root cause over its steps instead (docs/watch.md)")
    from ..parallel_layout import add_parallel_option
    add_parallel_option(p)
    p.set_defaults(run=run)
    declare_paths(p, lambda args: Paths((args.dump_dir,), report_outputs(args)))
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


def options(args, **overrides):
    """The api.Options of analyze's parsed arguments (also run's --analyze-arg ones), `overrides` over them."""
    from ..api import Options
    from ..logs import log
    values = dict(ranks=args.ranks, steps=args.steps, scan_all=args.scan_all, strict=args.strict, jobs=args.jobs,
                  scheduler=args.scheduler, finished=args.finished, parallel=args.parallel,
                  progress=False if (args.no_progress or getattr(args, "quiet", False)) else None,
                  warn=lambda message: log.debug("warning: %s", message))
    values.update(overrides)
    return Options(**values)


def check(args) -> None:
    """What analyze's options say that can be refused before any dump is read (or any training is run)."""
    from ..errors import UserError
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: expected 1 or more")
    if args.scheduler:     # checked before any scan: a bad address is one line, at once
        from ..parallel import check_scheduler_address
        check_scheduler_address(args.scheduler)


def run(args) -> int:
    from ..api import analyze_with
    from ..logs import log
    from ._output import deliver
    check(args)
    if getattr(args, "history", False):
        return _history(args)
    started = time.monotonic()
    report = analyze_with(args.dump_dir, options(args), command=getattr(args, "command_line", None))
    log.debug("analyzed %s in %.1f s: %s, %d files, %d tensors read", args.dump_dir, time.monotonic() - started,
              report.verdict, report.files, report.tensors_read)
    return deliver(args, report)


def _history(args) -> int:
    """analyze --history: the watch's detectors and root cause over a finished statistics dump (one code path)."""
    from ..render.watch import render
    from ..watcher.session import from_dump
    from ._output import format_of, write_output
    report = from_dump(args.dump_dir)
    fmt = args.format or format_of(args.output)
    text = render(report, fmt)
    if args.output:
        write_output(args.output, text, fmt)
    else:
        print(text, end="", flush=True)
    return report.exit_code
