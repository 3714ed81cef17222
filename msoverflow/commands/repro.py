"""`msoverflow repro --from report.json`: a standalone script that re-runs the origin op from its dumped inputs."""
from __future__ import annotations

import argparse
import os

# The command line spells devices in lower case, as config, run and patch do (any case is accepted); the script
# it writes calls mindspore.set_device, which takes MindSpore's spelling.
MINDSPORE_DEVICE = {"cpu": "CPU", "ascend": "Ascend", "gpu": "GPU"}


def register(subparsers):
    parser = subparsers.add_parser(
        "repro", help="write a standalone script that re-runs the origin op alone, from its dumped inputs",
        description="Copy the origin's input tensors out of the dump (the dump is never written to) and write a "
                    "script that re-runs the op (a backward kernel through its forward op's gradient) once in the "
                    "dumped dtype and once in float32 (and bfloat16 where the device has it), printing max |x| and "
                    "the inf/NaN counts of each output. Exit codes: 0 written, 2 bad input, 4 internal error.")
    parser.add_argument("--from", dest="report", required=True, metavar="REPORT",
                        help="msoverflow analyze's JSON report (report.json)")
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="where to write the script and inputs (default: ./repro_<op type>; never in the dump)")
    parser.add_argument("--device", default="cpu", choices=list(MINDSPORE_DEVICE), type=str.lower,
                        help="the script's default device (it also takes --device); default cpu")
    parser.add_argument("--dump", metavar="DIR", help="the dump directory, when it moved since the analysis")
    parser.add_argument("--force", action="store_true",
                        help="write into an output directory that already holds files (without it an existing "
                             "repro is never overwritten)")
    parser.set_defaults(run=run)
    from ._output import Paths, Written, declare_paths, report_dump_dir
    declare_paths(parser, lambda args: Paths((args.dump, report_dump_dir(args.report)),
                                             (Written(args.output, "the repro directory (-o)", directory=True),)))
    return parser


def run(args: argparse.Namespace) -> int:
    from ..patch.targets import load_report
    from ..repro import write
    report = load_report(args.report)
    op = ((report.get("first") or {}).get("op_type") or "origin").replace(os.sep, "_")
    out_dir = args.output or os.path.join(os.getcwd(), f"repro_{op}")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not args.force:     # as `config -o`: nothing lost silently
        from ..errors import UserError
        raise UserError(f"{out_dir}: exists and is not empty; not overwriting it (pass --force to write into it, "
                        "or -o another directory)")
    result = write(report, out_dir, device=MINDSPORE_DEVICE[args.device], dump_dir=args.dump)
    print(result.describe())
    return 0
