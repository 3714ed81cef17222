"""`msoverflow compare BASELINE TARGET`: the first operator where two runs part."""
from __future__ import annotations

import os

from ..errors import EXIT_ANOMALY, EXIT_CLEAN, EXIT_CODES_HELP, EXIT_INCONCLUSIVE
from ..selection import argument
from .analyze import _format_of, write_output


def register(sub):
    p = sub.add_parser(
        "compare", help="compare two dumps: the first op where a target run parts from a baseline run",
        description="Read two dumps (any layout analyze reads) of the same model and name the first operator, in "
                    "the baseline's execution order, whose inputs agree and whose outputs do not: op, Cell, source "
                    "line, rank, step, the dtype difference and the metrics (max absolute and relative error, "
                    "cosine similarity, error in ulps). " + EXIT_CODES_HELP,
        epilog="Verdicts: DIVERGED (1) names the first divergence; EQUIVALENT (0) when every matched tensor agrees "
               "within the tolerance; INCONCLUSIVE (3) when too little could be matched or read, or only statistics "
               "were dumped, with the reason. Ops are matched by scope path, op type and occurrence in order per "
               "(rank, step), never by op numbers, task ids or timestamps; ops present on one side only are listed.")
    p.add_argument("baseline", metavar="BASELINE")
    p.add_argument("target", metavar="TARGET")
    p.add_argument("--ranks", "--rank", dest="rank", type=argument("--ranks"), metavar="IDS",
                   help="only these ranks, e.g. 0, 0,7 or 0-3")
    p.add_argument("--steps", "--step", dest="iteration", type=argument("--steps"), metavar="STEPS",
                   help="only these steps (the dump's iteration directories), e.g. 0, 0-3 or 0|5-8")
    p.add_argument("--ulps", type=float, default=None, metavar="N",
                   help="tolerance in ulps of the compared dtype (default 8)")
    p.add_argument("--top", type=int, default=10, help="largest differences to list (default 10)")
    p.add_argument("--format", choices=["text", "json", "markdown", "html"],
                   help="default: from -o's extension (.html, .json, .md), else text")
    p.add_argument("-o", "--output", metavar="FILE", help="write the answer here instead of stdout")
    from ..parallel_layout import add_parallel_option
    add_parallel_option(p)
    p.set_defaults(run=run)
    return p


def run(args) -> int:
    from ..comparison import DEFAULT_ULPS, compare
    from ..errors import UserError
    from ..logs import log
    from ..render.compare import render_comparison
    from ..safeio import refuse_output_inside

    tolerance = DEFAULT_ULPS if args.ulps is None else args.ulps
    if not tolerance >= 0:
        raise UserError(f"--ulps {args.ulps}: expected 0 or more")
    if args.output:     # never inside either dump (resolved through symlinks, against each dump's root)
        refuse_output_inside(args.output, args.baseline)
        refuse_output_inside(args.output, args.target)
    result = compare(args.baseline, args.target, ranks=args.rank, steps=args.iteration, tolerance_ulps=tolerance,
                     top=args.top, warn=lambda message: log.debug("warning: %s", message), parallel=args.parallel)
    fmt = args.format or _format_of(args.output)
    text = render_comparison(result, fmt, os.path.dirname(os.path.abspath(args.output)) if args.output else None)
    if args.output:
        write_output(args.output, text, fmt)
    else:
        print(text, end="")
    return {"diverged": EXIT_ANOMALY, "inconclusive": EXIT_INCONCLUSIVE}.get(result.verdict, EXIT_CLEAN)
