"""`msoverflow run [options] -- COMMAND...`: dump a run into a fresh directory, then analyze it."""
from __future__ import annotations

import argparse

from ..config.options import PURPOSE_HELP, add_config_options
from . import add_training_command, training_command


def register(subparsers):
    parser = subparsers.add_parser(
        "run", help="run a training command under a dump, then analyze it",
        usage="msoverflow run [options] -- COMMAND [ARGS...]",
        description="Write a dump config into a fresh directory, run COMMAND with MINDSPORE_DUMP_CONFIG set (its "
                    "output passes through, its exit code is reported), then run `msoverflow analyze` on the dump. "
                    "Exit code: the analysis' (0 clean, 1 anomaly, 2 bad input, 3 inconclusive, 4 internal error; a "
                    "failed command with a clean dump gives 2), or the command's own when the analysis is skipped.")
    parser.add_argument("--purpose", choices=["overflow", "statistics", "tensors", "exception"],
                        help=PURPOSE_HELP + " (default: overflow)")
    add_config_options(parser, dump_path=False)
    parser.add_argument("--dump-dir", metavar="DIR",
                        help="fresh (absent or empty) directory for the dump; default ./msoverflow_runs/run_<time>")
    parser.add_argument("--no-analyze", action="store_true", help="only run and dump")
    parser.add_argument("--analyze-arg", dest="analyze_args", action="append", default=[], metavar="ARG",
                        help="extra argument for msoverflow analyze (repeatable)")
    parser.add_argument("--strict", action="store_true",
                        help="the analysis reports contained values and overflows a loss scale handled as anomalies "
                             "too (analyze --strict)")
    parser.add_argument("--two-pass", action="store_true",
                        help="pass 1 watches every step cheaply (Ascend: overflow-only dump; CPU/GPU: the optimizer "
                             "update kernels' inputs, or --kernels) to find the first bad step and ranks; pass 2 "
                             "re-runs with every op dumped for that step only, and must see it again "
                             "(msoverflow/config/two_pass.py)")
    from .analyze import add_report_options
    add_report_options(parser)
    add_training_command(parser)
    parser.set_defaults(run=run, top=10)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..config.options import options_from_args
    from ..config.runner import run_and_analyze

    command = training_command(args)
    purpose, options = options_from_args(args)
    import time

    from ..logs import log
    started = time.monotonic()
    if args.two_pass:
        return _two_pass(args, command, options)
    args.analyze_args += _report_args(args)
    log.debug("run: %s (purpose %s)", " ".join(command), purpose)
    outcome = run_and_analyze(command, args.dump_dir, purpose=purpose, analyze=not args.no_analyze,
                              analyze_args=args.analyze_args,
                              invoked_as=getattr(args, "command_line", None), **options)
    log.debug("run: command exit %s, %d dump files in %s, analysis exit %s, %.1f s", outcome.command_exit,
              outcome.files_written, outcome.dump_dir, outcome.analysis_exit, time.monotonic() - started)
    return outcome.exit_code


def _report_args(args) -> list:
    """run's --format/-o/--save/--no-save and --strict, handed to its analysis."""
    return ([f"--format={args.format}"] if args.format else []) + ([f"--output={args.output}"] if args.output else []) \
        + ([f"--save={args.save}"] if args.save is not None else []) + (["--no-save"] if args.no_save else []) \
        + (["--strict"] if args.strict else [])


def _two_pass(args, command, options) -> int:
    import sys

    from ..config.two_pass import run_two_pass
    from .analyze import deliver
    outcome = run_two_pass(command, args.dump_dir, log=sys.stderr, invoked_as=getattr(args, "command_line", None),
                           **options)
    args.dump_dir = str(outcome.passes[-1].dump_dir)
    code = deliver(args, outcome.report)
    return 2 if code == 0 and outcome.command_exit else code
