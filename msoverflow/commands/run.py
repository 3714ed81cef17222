"""`msoverflow run [options] -- COMMAND...`: dump a run into a fresh directory, then analyze it."""
from __future__ import annotations

import argparse

from ..config.options import PURPOSE_HELP, add_config_options
from . import add_training_command, training_command
from ._output import Paths, add_report_options, declare_paths, report_outputs


def register(subparsers):
    parser = subparsers.add_parser(
        "run", help="run a training command under a dump, then analyze it",
        usage="msoverflow run [options] -- COMMAND [ARGS...]",
        description="Write a dump config into a fresh directory, run COMMAND with MINDSPORE_DUMP_CONFIG set (its "
                    "output passes through, its exit code is reported), then run `msoverflow analyze` on the dump. "
                    "Exit code: the analysis' (0 clean, 1 anomaly, 2 bad input, 3 inconclusive, 4 internal error; a "
                    "failed command with a clean dump gives 2, and a clean dump of a job whose own output reported "
                    "a non-finite loss gives 3), or the command's own when the analysis is skipped.")
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
    add_report_options(parser)
    add_training_command(parser)
    parser.set_defaults(run=run, top=10)
    # the dump run makes is read by its analysis: the report never goes inside it
    declare_paths(parser, lambda args: Paths((args.dump_dir,), report_outputs(_with_analysis_args(args)[0])))
    return parser


def run(args: argparse.Namespace) -> int:
    from .. import logs
    from ..config.options import options_from_args
    from ..config.runner import execute, plan_run
    from .analyze import check, options

    command = training_command(args)
    purpose, config_options = options_from_args(args)
    # analyze's options are checked before hours of training, not after
    args, analysis = _with_analysis_args(args)
    check(analysis)
    analysis = options(analysis, **({"progress": False} if getattr(args, "quiet", False) else {}))
    if args.two_pass:
        return _two_pass(args, command, config_options, analysis)
    plan = plan_run(command, args.dump_dir, purpose=purpose, **config_options)
    say_plan("run", plan)
    logs.started()
    outcome = execute(plan, analysis, analyze=not args.no_analyze,
                      invoked_as=getattr(args, "command_line", None))
    if outcome.report is not None:
        from ._output import deliver
        deliver(args, outcome.report)
    elif outcome.analysis_error:
        from ..logs import log
        log.error("run: %s", outcome.analysis_error)
    return outcome.exit_code


def _with_analysis_args(args):
    """(run's arguments with --analyze-arg's report options filled in where run's own are not given, analyze's
    parsed arguments): `--analyze-arg=--format=json` shapes the report as `--format json` does; run's --strict is
    analyze's."""
    from .analyze import parse
    if getattr(args, "analysis_args", None) is None:
        analysis = parse(["DUMP", *args.analyze_args])
        for name in ("format", "output", "save"):
            if getattr(args, name) is None:
                setattr(args, name, getattr(analysis, name))
        args.no_save = args.no_save or analysis.no_save
        args.top = analysis.top
        analysis.strict = analysis.strict or getattr(args, "strict", False)
        args.analysis_args = analysis
    return args, args.analysis_args


def say_plan(who: str, plan) -> None:
    """What will be dumped, where, and what the user should know, before the training starts (stderr and the
    --log-file; -q keeps it quiet)."""
    from ..logs import log
    result = plan.config
    lines = [f"{who}: {result.purpose} dump, MindSpore {result.ms_version}, {result.device}"
             + (f" {result.jit_level}" if result.jit_level else "") + f" -> {plan.dump_dir}"]
    lines += [f"  {line}" for line in result.summary]
    lines += [f"  note: {warning}" for warning in result.warnings]
    lines += [f"  warning: {note}" for note in plan.notes]
    if result.mechanism == "msprobe":     # msprobe dumps only what a PrecisionDebugger in the script asks for
        lines.append("  the script must hold msprobe's PrecisionDebugger (run cannot insert it):")
        lines += [f"    {line}" for line in getattr(result, "python", [])]
    log.info("%s", "\n".join(lines))


def _two_pass(args, command, config_options, analysis) -> int:
    from .. import logs
    from ..config.two_pass import run_two_pass
    from ._output import deliver
    outcome = run_two_pass(command, args.dump_dir, options=analysis, invoked_as=getattr(args, "command_line", None),
                           on_plan=lambda label, plan: say_plan(f"run --two-pass: {label}", plan),
                           on_start=logs.started, **config_options)
    deliver(args, outcome.report)
    return outcome.exit_code
