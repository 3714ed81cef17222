"""`msoverflow analyze DUMP_DIR`: name the first op that created a bad value."""
from __future__ import annotations

import argparse
import os

from ..errors import EXIT_ANOMALY, EXIT_CLEAN, EXIT_CODES_HELP, EXIT_INCONCLUSIVE


def _int_list(text: str):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or comma-separated numbers, got {text!r}")


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
                              "(3) when files were not understood or not read, or an expected rank has no files, "
                              "with the reason. Every report ends with a per-rank table: origin, received (via "
                              "which collective), flagged, clean or not dumped. Ranks are ordered by steps, "
                              "collectives and op knowledge, never by their clocks.")
    p.add_argument("dump_dir", metavar="DUMP_DIR")
    p.add_argument("--rank", type=_int_list, help="only these ranks (e.g. 0 or 0,7)")
    p.add_argument("--iteration", type=_int_list, help="only these iterations/steps")
    p.add_argument("--top", type=int, default=10, help="later origins to list (default 10)")
    p.add_argument("--all", dest="scan_all", action="store_true",
                   help="scan every step (default: stop after the step holding the first origin)")
    p.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    p.add_argument("-o", "--output", help="write the report here instead of stdout (then no report.json is saved)")
    p.add_argument("--save", metavar="FILE", default=None,
                   help="without -o, also save the JSON report here for `msoverflow patch/repro --from` "
                        "(default: report.json in the current directory, never inside the dump; "
                        "$MSOVERFLOW_REPORT_JSON overrides, empty disables)")
    p.add_argument("--no-save", action="store_true", help="without -o, do not save report.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)
    return p


def run(args) -> int:
    from ..analyze import analyze
    from ..errors import UserError
    from ..render import render

    from ..safeio import refuse_output_inside
    if args.output:   # resolved through symlinks, judged against the dump's root, not only DUMP_DIR
        refuse_output_inside(args.output, args.dump_dir)
    report = analyze(args.dump_dir, ranks=args.rank, iterations=args.iteration, scan_all=args.scan_all,
                     progress=False if args.no_progress else None)
    text = render(report, args.format, args.top)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(text)
        except OSError as exc:
            raise UserError(f"{args.output}: cannot write report ({exc.strerror})")
    else:
        print(text, end="")
        _save_json(args, report)
    return {"anomaly": EXIT_ANOMALY, "inconclusive": EXIT_INCONCLUSIVE}.get(report.verdict, EXIT_CLEAN)


def _save_json(args, report) -> None:
    """The quick start's second command (`patch --from report.json`) needs the JSON report on disk."""
    import sys
    from ..errors import UserError
    from ..render import render
    path = args.save if args.save is not None else os.environ.get("MSOVERFLOW_REPORT_JSON", "report.json")
    if args.no_save or not path:
        return
    from ..safeio import dump_root, inside
    out_abs = os.path.realpath(path)
    if inside(out_abs, args.dump_dir) or inside(out_abs, dump_root(args.dump_dir)):   # the dump's root too
        print(f"msoverflow: not saving {path}: it is inside the dump directory {dump_root(args.dump_dir)} "
              f"(run from elsewhere, or give --save FILE)", file=sys.stderr)
        return
    tmp = out_abs + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(render(report, "json"))
        os.replace(tmp, out_abs)
    except OSError as exc:
        raise UserError(f"{path}: cannot save the JSON report ({exc.strerror}); give --save FILE or --no-save")
    print(f"msoverflow: JSON report saved to {path} (next: msoverflow patch --from {path})", file=sys.stderr)
