"""`msoverflow hunt [options] -- python train.py`: watch a PyNative run live, no dump config needed."""
from __future__ import annotations

import argparse

from ..errors import EXIT_CODES_HELP
from ..selection import argument
from . import add_training_command, training_command
from ._output import Paths, add_report_options, declare_paths, report_outputs

MAX_WATCHED_STEPS = 100_000


def register(subparsers):
    parser = subparsers.add_parser(
        "hunt", help="watch a PyNative training run live and name the op that made the first bad value",
        usage="msoverflow hunt [options] -- COMMAND [ARGS...]",
        description="Run COMMAND (an unmodified PyNative training script) with every Cell, Primitive and "
                    "Tensor arithmetic method watched, forward and backward, "
                    "and the parameter gradients given to the optimizer (mindspore.ops/mint functions are watched "
                    "at the Primitive they call). Each tensor is checked on the device "
                    "(one flag per tensor, reduced once per step). The first value made non-finite from finite "
                    "inputs is reported like `msoverflow analyze` does (rank, step counted as optimizer updates, "
                    "Cell path and class, op, forward or backward, source line), and that op's tensors are saved so "
                    "`msoverflow repro --from report.json` re-runs it. Under msrun each rank watches itself. "
                    "Graph mode cannot be hooked: use `msoverflow run --two-pass`. " + EXIT_CODES_HELP)
    parser.add_argument("--steps", "--step", dest="steps", type=argument("--steps"), metavar="STEPS",
                        help="watch only these steps (optimizer updates, from 0), e.g. 0-3 or 5|9; default all")
    parser.add_argument("--out-dir", metavar="DIR",
                        help="fresh directory for the records and the first bad op's tensors "
                             "(default ./msoverflow_runs/hunt_<time>)")
    add_report_options(parser)
    from ..parallel_layout import add_parallel_option
    add_parallel_option(parser)
    add_training_command(parser)
    parser.set_defaults(run=run, top=10)
    declare_paths(parser, lambda args: Paths((args.out_dir,), report_outputs(args)))
    return parser


def run(args: argparse.Namespace) -> int:
    from .. import logs
    from ..hunt.session import hunt
    from ._output import deliver
    command = training_command(args)
    # the watched processes get the steps as a list: bounded here (a selection is otherwise kept as ranges)
    steps = args.steps.values(MAX_WATCHED_STEPS, "--steps") if args.steps is not None else None
    outcome = hunt(command, args.out_dir, steps, on_start=logs.started)
    say_summary(outcome)
    if args.parallel is not None:        # rank coordinates, as analyze gives them (msoverflow/parallel_layout.py)
        from ..parallel_layout import label_ranks
        outcome.report.parallel = label_ranks(args.parallel, outcome.out_dir, outcome.report.rank_status, {},
                                              outcome.report.warnings.append)
    return deliver(args, outcome.report)


def say_summary(outcome) -> None:
    """What each process watched, and where the first bad op's tensors were kept (only when there was one)."""
    from ..logs import log
    for record in outcome.records:
        if record.get("unreadable"):
            continue
        counts = record.get("counts") or {}
        log.info("hunt: rank %s: %s optimizer updates, %s ops, %s Cell calls, %s gradients, %s parameter gradients "
                 "watched%s", record["rank"], record["steps_seen"], counts.get("ops", 0), counts.get("cells", 0),
                 counts.get("grads", 0), counts.get("parameter_grads", 0),
                 f"; first bad value at step {record['found']['step']}" if record.get("found") else "")
    log.info("hunt: command exited with %d after %.1f s; %s", outcome.command_exit, outcome.seconds,
             f"tensors of the first bad op in {outcome.tensors_dir}" if outcome.tensors_dir
             else "no bad value, so no tensors were kept")
