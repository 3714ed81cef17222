"""`msoverflow compare BASELINE TARGET`: the first operator where two runs part."""
from __future__ import annotations

from ..errors import EXIT_CODES_HELP
from ..selection import argument
from ._output import FORMATS, Paths, Written, declare_paths


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
    p.add_argument("--ranks", "--rank", dest="ranks", type=argument("--ranks"), metavar="IDS",
                   help="only these ranks, e.g. 0, 0,7 or 0-3")
    p.add_argument("--steps", "--step", dest="steps", type=argument("--steps"), metavar="STEPS",
                   help="only these steps (the dump's iteration directories), e.g. 0, 0-3 or 0|5-8")
    p.add_argument("--ulps", type=float, default=None, metavar="N",
                   help="tolerance in ulps of the compared dtype (default 8)")
    p.add_argument("--map", dest="name_map", metavar="FILE",
                   help="YAML of names that pair across modes or frameworks (baseline name or glob pattern: target "
                        "name), or a mindstudio-probe mapping file as it is (api_mapping, cell_mapping, "
                        "data_mapping); a built-in API map pairs common ops (Functional.softmax with Softmax)")
    p.add_argument("--top", type=int, default=10, help="largest differences to list (default 10)")
    p.add_argument("--format", choices=list(FORMATS),
                   help="default: from -o's extension (.html, .json, .md), else text")
    p.add_argument("-o", "--output", metavar="FILE", help="write the answer here instead of stdout")
    from ..parallel_layout import add_parallel_option
    add_parallel_option(p)
    p.set_defaults(run=run)
    declare_paths(p, lambda args: Paths((args.baseline, args.target) + ((args.name_map,) if args.name_map else ()),
                                        (Written(args.output, "the answer (-o)"),)))
    return p


def run(args) -> int:
    from ..api import compare
    from ..comparison import DEFAULT_ULPS
    from ..errors import UserError
    from ..logs import log
    from ._output import deliver_comparison

    tolerance = DEFAULT_ULPS if args.ulps is None else args.ulps
    if not tolerance >= 0:
        raise UserError(f"--ulps {args.ulps}: expected 0 or more")
    result = compare(args.baseline, args.target, ranks=args.ranks, steps=args.steps, tolerance_ulps=tolerance,
                     top=args.top, warn=lambda message: log.debug("warning: %s", message), parallel=args.parallel,
                     command=getattr(args, "command_line", None), name_map=args.name_map)
    return deliver_comparison(args, result)
