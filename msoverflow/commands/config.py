"""`msoverflow config`: write a dump config (JSON + shell snippet + what it captures), or --check one."""
from __future__ import annotations

import argparse
import sys

from ..config.options import PURPOSE_HELP, add_config_options

EXIT_OK, EXIT_PROBLEMS, EXIT_ERROR = 0, 1, 2


def register(subparsers):
    parser = subparsers.add_parser(
        "config", help="write or check a MindSpore dump config",
        description="Write the MINDSPORE_DUMP_CONFIG JSON for a purpose on your MindSpore version, device and jit "
                    "level, with the shell variables to set and a summary of what it will and will not capture. "
                    "With --check FILE, explain what is wrong with an existing config (exit 0 ok or warnings "
                    "only, 1 errors (--strict: or warnings), 2 unreadable).")
    parser.add_argument("purpose", nargs="?", choices=["overflow", "statistics", "tensors", "exception"],
                        help=PURPOSE_HELP + " (default: overflow, or the preset's)")
    add_config_options(parser)
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="where to write the JSON (default ./dump_config.json; '-' prints it instead)")
    parser.add_argument("--force", action="store_true",
                        help="replace the -o file when it exists (without it an existing config is never overwritten)")
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="json: print the whole result (config, env, summary, or --check's problems) as JSON")
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="the same as --format json (old spelling)")
    parser.add_argument("--check", metavar="FILE", help="validate an existing dump config and explain each problem")
    parser.add_argument("--strict", action="store_true",
                        help="with --check: warnings fail too (exit 1), e.g. in CI; without it only errors do")
    parser.add_argument("--list-presets", action="store_true", help="list the presets in msoverflow/data/presets/")
    parser.set_defaults(run=run)
    from ._output import Paths, Written, declare_paths
    # the config never lands inside the dump it configures (--path; a preset's path is checked by build)
    declare_paths(parser, lambda args: Paths((args.path,), (Written(args.output, "the config (-o)"),)))
    return parser


def run(args: argparse.Namespace) -> int:
    if args.strict and not args.check:
        from ..errors import UserError
        raise UserError("--strict is an option of --check FILE")
    if args.list_presets:
        from ..config.presets import list_presets, presets_dir

        for name, description in list_presets().items():
            print(f"{name:28s} {description}")
        print(f"(copy one from {presets_dir()} and pass --preset FILE)")
        return EXIT_OK
    if args.check:
        return _check(args)
    return _generate(args)


def _check(args) -> int:
    import json

    from ..config.checker import check

    problems = check(args.check, ms_version=args.ms_version, device=args.device, jit_level=args.jit_level)
    errors = sum(p.severity == "error" for p in problems)
    warnings = sum(p.severity == "warning" for p in problems)
    failed = bool(errors or (args.strict and warnings))
    if args.format == "json":
        print(json.dumps({"file": args.check, "ok": not failed, "errors": errors, "warnings": warnings,
                          "strict": args.strict, "problems": [p.to_dict() for p in problems]}, indent=2))
    else:
        for problem in problems:
            print(f"{args.check}: {problem}")
        counts = f"{errors} error(s), {warnings} warning(s)"
        print(f"{args.check}: " + ("ok" if not (errors or warnings) else
                                   counts if failed else f"ok with {counts} (--strict fails on warnings)"))
    return EXIT_PROBLEMS if failed else EXIT_OK


def _generate(args) -> int:
    import json
    import os

    from ..config.generator import DEFAULT_CONFIG_NAME, build
    from ..config.options import options_from_args
    from ..errors import UserError

    purpose, options = options_from_args(args)
    to_stdout = args.output == "-"
    config_path = None if to_stdout else os.path.abspath(args.output or DEFAULT_CONFIG_NAME)
    result = build(purpose, config_path=config_path, **options)
    replaced = config_path is not None and os.path.lexists(config_path)
    if replaced and not args.force:   # a hand-edited config is never lost silently
        raise UserError(f"{config_path}: exists; not overwriting it (pass --force to replace it, or -o another file)")
    if config_path:
        result.write(config_path)
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2))
        return EXIT_OK
    if to_stdout:
        sys.stdout.write(result.to_json())
        out = sys.stderr  # keep stdout pure JSON for redirection
    else:
        out = sys.stdout
        print(f"wrote {config_path}" + (" (replaced the file that was there: --force)" if replaced else ""), file=out)
    print("", file=out)
    out.write(result.shell_snippet())
    print("", file=out)
    out.write(result.summary_text())
    for warning in result.warnings:
        print(f"note: {warning}", file=out)
    return EXIT_OK
