"""`msoverflow watch [options] -- COMMAND...`: run the training with per-step statistics, warn before it blows up,
and name the root cause (msoverflow/watcher/)."""
from __future__ import annotations

import argparse

from . import add_training_command, training_command
from ._output import Paths, Written, declare_paths

FORMATS = ("text", "json", "html")


def register(subparsers):
    parser = subparsers.add_parser(
        "watch", help="watch a training run step by step: early warnings, and the root cause of a blow-up",
        usage="msoverflow watch [options] -- COMMAND [ARGS...]",
        description="Run COMMAND with a per-step statistics capture of the tracked tensors (the step's inputs and "
                    "loss, every Parameter, each weight's update, and in PyNative each Cell's output; "
                    "docs/watch.md), read each complete step as it lands, print a warning when a tensor's trend "
                    "reaches its dtype's limit within --warn-ahead steps, or a value spikes, and report the root "
                    "cause. Exit code: 0 no event, 1 events, 2 bad usage, 3 nothing captured, 4 internal error.")
    parser.add_argument("--keep", type=int, default=20, metavar="K",
                        help="steps kept on disk (a ring buffer; the steps around an event are kept too); "
                             "default 20")
    parser.add_argument("--warn-ahead", type=int, default=10, metavar="N",
                        help="warn when a tensor's trend projects an overflow within N steps (default 10)")
    parser.add_argument("--on-event", choices=["stop", "dump", "continue"], default="dump",
                        help="stop: end the job cleanly at the first event; dump (default): on a non-finite value, "
                             "stop, re-run with every op's tensors dumped for that step only and analyze it (the "
                             "origin: `first`); continue: only warn")
    parser.add_argument("--full-every", type=int, metavar="N",
                        help="read every tracked tensor (a full step) every N steps; default: as often as 1%% of "
                             "the training's step time allows (the loss is read every step either way)")
    parser.add_argument("--device", choices=["ascend", "gpu", "cpu"], help="device of the dump re-run")
    parser.add_argument("--dump-dir", metavar="DIR",
                        help="fresh directory for the statistics, the event log and the dump of an event step; "
                             "default ./msoverflow_runs/watch_<time>")
    parser.add_argument("--format", choices=FORMATS, help="default: from -o's extension (.html, .json), else text")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of stdout")
    add_training_command(parser)
    parser.set_defaults(run=run)
    declare_paths(parser, lambda args: Paths((), (Written(args.dump_dir, "--dump-dir", True),
                                                  Written(args.output, "the report (-o)"))))
    return parser


def run(args: argparse.Namespace) -> int:
    import sys

    from ..render.watch import render
    from ..watcher.session import watch
    from ._output import format_of, write_output

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    outcome = watch(training_command(args), args.dump_dir, keep=args.keep, warn_ahead=args.warn_ahead,
                    on_event=args.on_event, full_every=args.full_every, device=args.device, say=say,
                    invoked_as=getattr(args, "command_line", None))
    fmt = args.format or format_of(args.output)
    text = render(outcome.report, fmt if fmt in FORMATS else "text")
    if args.output:
        write_output(args.output, text, fmt)
    else:
        print(text, end="", flush=True)
    return outcome.exit_code
