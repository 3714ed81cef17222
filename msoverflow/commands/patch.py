"""`msoverflow patch`: compute the overflow's region in float32/bfloat16 (runtime, MindFormers YAML or source) and
optionally prove it by re-running the training with dump on (`--verify -- python train.py ...`)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from ..errors import EXIT_INCONCLUSIVE
from . import add_training_command, training_command

# `patch` made no change that reaches the culprit: already patched, or nothing it knows how to change reaches it.
EXIT_NO_CHANGE = EXIT_INCONCLUSIVE


def register(subparsers):
    parser = subparsers.add_parser(
        "patch", help="patch the precision where the overflow was born, and verify by re-running",
        usage="msoverflow patch (--from REPORT | --dump DIR | --cell PATH_OR_TYPE | --op TYPE) [options] "
              "[--verify -- COMMAND ...]",
        description="Compute the region where the first overflow was born in float32 (or bfloat16). The region is "
                    "the owning Cell of the culprit op, with its Parameters, constants and explicit casts. "
                    "Ways: runtime (msoverflow.patch.apply, injected into an unmodified script by --verify), "
                    "a MindFormers YAML (--yaml CONFIG; only fields that reach the culprit), the model's source "
                    "(--how source, diff by default, --write to apply), or, for a 0/0 at a masked mean, the "
                    "zero-token guard (--how guard). The patch follows the cause the analysis found: a device fault, "
                    "a value no dtype holds (domain) or a bad batch (data) gets no precision patch (exit 3, with what "
                    "to do instead; --cell/--op patches anyway). Exit codes: 0 patch shown/written/fixed, 1 verify "
                    "shows it is not fixed, 2 bad input, 4 internal error, 3 no change that reaches the culprit was "
                    "made (already patched, or no field/patch reaches it, or the cause is not a precision problem: "
                    "the output says why and what to do instead).")
    what = parser.add_argument_group("what to patch")
    what.add_argument("--from", dest="report", metavar="REPORT", help="msoverflow analyze --format json output")
    what.add_argument("--dump", metavar="DIR", help="a dump directory: analyse it first")
    what.add_argument("--cell", metavar="PATH_OR_TYPE",
                      help="a Cell by attribute path (network._backbone.lm_head) or class name (NormHead)")
    what.add_argument("--op", metavar="TYPE", help="only this forward op type (e.g. Sqrt); verify widens it if needed")
    what.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                      help="island dtype (default float32; bfloat16 keeps fp32's range at half the memory)")
    how = parser.add_argument_group("how")
    how.add_argument("--how", choices=["runtime", "yaml", "source", "guard"],
                     help="default: yaml with --yaml, source with --source/--write, else runtime with --verify, "
                          "else show the source diff; guard (the default for an invalid 0/0 or x/0 at a masked mean): "
                          "divide by max(count, 1) and skip the optimizer when the global token count is 0")
    how.add_argument("--count-input", type=int, default=-1, metavar="N",
                     help="guard: which input of the train step holds the loss mask (default: the last)")
    how.add_argument("--yaml", metavar="CONFIG", help="MindFormers YAML to patch (model.model_config)")
    how.add_argument("--allow-global", action="store_true",
                     help="YAML: allow whole-model fields (compute_dtype, param_init_type) when no field covers "
                          "the culprit alone")
    how.add_argument("--mf-generation", choices=["1.x", "2.x"], help="YAML field names (default: detected)")
    how.add_argument("--source", metavar="FILE", help="model source to patch (default: the report's source file)")
    how.add_argument("--line", type=int, help="culprit line in --source (default: the report's)")
    how.add_argument("--write", action="store_true",
                     help="write the YAML/source patch (atomic, keeps FILE.orig); default: show the diff")
    check = parser.add_argument_group("verify")
    check.add_argument("--verify", action="store_true",
                       help="re-run COMMAND (after --) with dump on and the patch in place; compare before/after")
    check.add_argument("--workdir", metavar="DIR",
                       help="where verify keeps dumps and reports (default: a temp dir, removed when verify ends)")
    check.add_argument("--keep-workdir", action="store_true",
                       help="keep the default temp dir of dumps and reports (its path is printed)")
    check.add_argument("--device", choices=["ascend", "gpu", "cpu"], help="device of the re-run (default: detected)")
    check.add_argument("--jit-level", choices=["O0", "O1", "O2"], help="jit level of the re-run (Ascend 2.3+)")
    check.add_argument("--ms-version", help="MindSpore version of the re-run (default: the installed one)")
    check.add_argument("--no-widen", action="store_true",
                       help="verify: do not widen an op-only patch to its Cell when it falls short")
    parser.add_argument("-o", "--output", "--json", dest="json_out", metavar="FILE",
                        help="also write the result (target, patch, verification) as JSON here (--json: old spelling)")
    add_training_command(parser)
    parser.set_defaults(run=run)
    from ._output import declare_paths
    declare_paths(parser, _paths)
    return parser


def _paths(args):
    from ._output import Paths, Written, report_dump_dir
    return Paths((args.dump, report_dump_dir(args.report)),
                 (Written(args.json_out, "the result (-o)"), Written(args.workdir, "the --workdir", directory=True)))


def _report_from_dump(dump_dir: str) -> dict:
    from ..errors import UserError
    from ..logs import log
    from ..patch.verify import analyse
    from ._output import save_json
    if not os.path.isdir(dump_dir):
        raise UserError(f"{dump_dir}: not a directory")
    report, error = analyse(dump_dir)
    if report is None:
        raise UserError(f"{dump_dir}: analysis failed: {error}")
    out = save_json(report, os.path.join(tempfile.mkdtemp(prefix="msoverflow-patch-"), "report.json"))
    log.info("analysed %s -> %s", dump_dir, out)
    return report.to_dict()


def run(args: argparse.Namespace) -> int:
    from ..errors import UserError
    from ..patch.targets import load_report, target_from_args, target_from_report

    command = training_command(args)
    if command and not args.verify:
        raise UserError("a command after '--' is only used with --verify")
    if args.verify:
        from ..job import check_command
        check_command(command, "msoverflow patch --verify")
    if args.report and os.path.isdir(args.report):
        raise UserError(f"{args.report}: --from takes a JSON report and this is a directory; did you mean "
                        f"--dump {args.report}?")
    report = None
    if args.report and args.dump:
        raise UserError("give either --from REPORT or --dump DIR, not both")
    if args.report:
        report = load_report(args.report)
    elif args.dump:
        report = _report_from_dump(args.dump)
    if report is not None and (report.get("verdict") == "clean" or not report.get("first")) \
            and not (args.cell or args.op):
        print(f"{args.report or args.dump}: the analysis found no anomaly; nothing to patch")
        return 0
    if args.cell or args.op:
        target = target_from_args(args.cell, args.op, report)
    elif report is not None:
        target = target_from_report(report, args.report or args.dump)
        refused = _cause_refuses(report, target, args.report or args.dump)
        if refused:
            print(refused)
            return EXIT_NO_CHANGE
    else:
        raise UserError("nothing to patch: give --from REPORT, --dump DIR, --cell PATH_OR_TYPE or --op TYPE")

    how = args.how or ("guard" if _wants_guard(report, target) and not (args.cell or args.op) else
                       "yaml" if args.yaml else
                       "source" if (args.source or args.write) else "runtime" if args.verify else None)
    result = {"target": target.to_dict(), "dtype": args.dtype, "how": how}
    code = 0
    if how == "guard":
        code = _guard(args, target, result)
    elif how == "yaml":
        code = _yaml(args, target, result)
    elif how == "source":
        code = _source(args, target, result)
    elif how == "runtime" and not args.verify:
        _runtime_hint(args, target)
    elif how is None:
        if target.source and (args.source or os.path.lexists(target.source.file)):
            code = _source(args, target, result)
        elif target.source:
            print(_not_here(target.source.file))
        print()
        _runtime_hint(args, target)
    if args.verify:
        assert how is not None          # --verify alone picks the runtime patch
        if how in ("yaml", "source", "guard") and not args.write:
            raise UserError(f"--verify with --how {how} runs the files on disk: add --write (or verify the runtime "
                            f"patch with --how runtime)")
        from .. import logs
        from ..patch.verify import verify
        from ._output import save_json
        print(f"verifying: re-running with dump on ({'runtime patch' if how == 'runtime' else how + ' patch on disk'})",
              flush=True)
        logs.started()
        import shutil
        import tempfile
        # the default workdir (dumps of every re-run) is the command's own: removed when verify ends
        temporary = None if args.workdir or args.keep_workdir else tempfile.mkdtemp(prefix="msoverflow-verify-")
        try:
            outcome = verify(target, command, args.dtype, args.workdir or temporary,
                             how="runtime" if how == "runtime" else "none",
                             widen=not args.no_widen, baseline=report is None, echo=_echo,
                             dump_options={k: v for k, v in (("device", args.device), ("jit_level", args.jit_level),
                                                             ("ms_version", args.ms_version)) if v},
                             title="zero-token guard (written to the source)" if how == "guard" else None)
            if temporary is None:
                for run_ in outcome.runs:       # each run's report beside its dump, for `patch --from` or a look
                    if run_.report is not None:
                        run_.report_path = save_json(run_.report, os.path.join(os.path.dirname(run_.dump_dir),
                                                                               "report.json"))
            else:
                outcome.notes.append("the re-runs' dumps were in a temporary directory, removed now "
                                     "(--keep-workdir or --workdir DIR keeps them)")
            print(outcome.render())
            result["verify"] = outcome.to_dict()
            code = outcome.exit_code
        finally:
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
    if args.json_out:
        from ._output import write_output
        write_output(args.json_out, json.dumps(result, indent=2, default=str) + "\n", "json")
    return code


def _echo(line: str) -> None:
    """The training's own output during --verify, indented under the run it belongs to."""
    if "[WARNING]" not in line and "[INFO]" not in line:
        print("    | " + line, flush=True)


_DIVISION_OPS = {"Div", "RealDiv", "DivNoNan", "Divide", "DivExt"}


def _cause_refuses(report: dict, target, where: str) -> str:
    """The patch follows the report's conclusion (`conclusion.patch`, msoverflow/judgement): `precision` or `guard`
    goes on; otherwise no patch, and the text says why and the conclusion's fix ('' to go on). A report written
    before conclusions existed is read by its cause as it was then."""
    conclusion = report.get("conclusion")
    if isinstance(conclusion, dict) and "patch" in conclusion:
        return _conclusion_refuses(conclusion, where)
    first = report.get("first") or {}
    cause = first.get("cause")
    diagnosis = first.get("diagnosis")
    diagnosis = diagnosis if isinstance(diagnosis, dict) else {}
    reason, advice = str(diagnosis.get("reason") or ""), str(diagnosis.get("advice") or "")
    if cause == "unknown":
        print(f"note: the cause could not be established ({reason}); the patch below assumes a precision problem")
    if cause not in ("device", "domain", "data") or (cause != "device" and _is_masked_division(target)):
        return ""
    instead = {"device": "re-run the step on the same device and on another",
               "domain": "fix the value at its source (clamp, offset or guard the input)",
               "data": "check the data pipeline for the rows named"}[cause]
    return (f"{where}: no patch: the cause is {cause!r}: {reason}. {advice or instead}\n"
            f"A precision patch would not fix it (no change made, exit {EXIT_NO_CHANGE}); to patch anyway, name "
            "the target with --cell or --op.")


def _conclusion_refuses(conclusion: dict, where: str) -> str:
    cause, reason = str(conclusion.get("cause") or ""), str(conclusion.get("reason") or "")
    if conclusion.get("patch"):
        if cause in ("unknown", ""):
            print(f"note: the cause could not be established ({reason or 'no recompute'}); the patch below assumes "
                  "a precision problem")
        return ""
    fixes = [str(f) for f in conclusion.get("fix") or [] if f]
    return (f"{where}: no patch: the cause is {cause or 'not a precision problem'!r}: {reason}. "
            f"{' '.join(fixes)}\n"
            f"A precision patch would not fix it (no change made, exit {EXIT_NO_CHANGE}); to patch anyway, name "
            "the target with --cell or --op.")


def _wants_guard(report, target) -> bool:
    """The zero-token guard: what the conclusion says (a report without one: an invalid value born in a division)."""
    conclusion = (report or {}).get("conclusion")
    if isinstance(conclusion, dict) and "patch" in conclusion:
        return conclusion.get("patch") == "guard"
    return _is_masked_division(target)


def _is_masked_division(target) -> bool:
    """An invalid value (0/0, x/0) born in a division: a zero-signal step, not a precision problem."""
    origin = target.origin or {}
    return origin.get("kind") == "invalid" and bool({origin.get("op_type"), origin.get("forward_op")} & _DIVISION_OPS)


def _not_here(path: str) -> str:
    return (f"{path}: the report's source file is not on this machine (the report was made where the job ran): "
            f"give --source FILE (your copy of {os.path.basename(path)}), or --how runtime to patch the running "
            "model without editing a file")


def _report_source_here(args, path: str) -> None:
    """A source path taken from the report must exist here; otherwise say what to give instead."""
    from ..errors import UserError
    if not args.source and path and not os.path.lexists(path):
        raise UserError(_not_here(path))


def _guard(args, target, result: dict) -> int:
    from ..errors import UserError
    from ..patch import guard_patch
    path, line, code = args.source, args.line, ""
    if target.source and not line:
        path, line, code = path or target.source.file, target.source.line, target.source.code
    _report_source_here(args, path)
    if not path or not line:
        raise UserError("the zero-token guard needs the division's source line: give --source FILE --line N")
    patch = guard_patch.plan(path, line, code=code, count_input=args.count_input)
    print(guard_patch.describe(patch))
    print("  runtime form instead of the TrainOneStepCell edit: msoverflow.guard.guard(train_step, "
          f"count_input={args.count_input})")
    result["guard"] = {"path": path, "line": patch.line, "already": patch.already, "changes": patch.changes}
    if patch.already:
        print(f"no change made (exit {EXIT_NO_CHANGE}): the guard is already in place")
        return EXIT_NO_CHANGE
    _write_or_show(args, path, patch, result["guard"])
    return 0


def _runtime_hint(args, target) -> None:
    where = target.cell or target.op
    kind = "cell" if target.scope == "cell" else "op"
    print(f"runtime patch: {target.describe()} in {args.dtype}")
    print("  in your script, before the first step:")
    print("    from msoverflow.patch import apply, Target")
    print(f"    apply(train_network, Target({kind}={where!r}), {args.dtype!r})   # result.undo() reverts it")
    source = f"--from {args.report}" if args.report else (f"--dump {args.dump}" if args.dump else f"--{kind} {where}")
    print(f"  or, without editing the script: msoverflow patch {source} --verify -- python train.py ...")


def _source(args, target, result: dict) -> int:
    from ..errors import UserError
    from ..patch import source_patch

    path, line, code = args.source, args.line, ""
    if target.source and not line:
        # Another path (e.g. a copy of the model file) keeps the report's line; its code text re-finds the
        # line if it moved and refuses a file that does not hold it.
        path = path or target.source.file
        line = target.source.line
        code = target.source.code
    if not path:
        raise UserError("no source location: the report has none; give --source FILE --line N")
    _report_source_here(args, path)
    if not line:
        raise UserError(f"{path}: which line? give --line N (the culprit's line)")
    patch = source_patch.plan(path, line, args.dtype, code=code)
    print(patch.describe())
    result["source"] = {"path": path, "line": patch.line, "function": patch.function, "already": patch.already,
                        "changes": patch.changes}
    if patch.already:
        print(f"no change made (exit {EXIT_NO_CHANGE}): the culprit's region is already patched")
        return EXIT_NO_CHANGE
    _write_or_show(args, path, patch, result["source"])
    return 0


def _write_or_show(args, path: str, patch, entry: dict):
    """--write: atomic write with a backup; otherwise the dry-run diff."""
    from ..patch.textfile import write_atomic
    if args.write:
        entry["backup"] = write_atomic(path, patch.patched)
        print(f"wrote {path} (backup: {entry['backup']})")
    else:
        sys.stdout.write(patch.diff())
        print(f"(diff only: add --write to apply it; {path}.orig keeps the original)")


def _yaml(args, target, result: dict) -> int:
    from ..errors import UserError
    from ..patch import yaml_patch

    if not args.yaml:
        raise UserError("--how yaml needs --yaml CONFIG (the MindFormers YAML to patch)")
    patch = yaml_patch.plan(args.yaml, target, args.dtype, allow_global=args.allow_global,
                            generation=args.mf_generation)
    print(patch.describe())
    result["yaml"] = {"path": args.yaml, "rule": patch.rule, "generation": patch.generation,
                      "changes": patch.changes, "uncovered": patch.uncovered}
    if patch.uncovered:
        if target.source or (args.source and args.line):
            print()
            return _source(args, target, result)
        print("no source location known for the fallback: give --source FILE --line N, or use the runtime patch")
        _runtime_hint(args, target)
        print(f"no change made (exit {EXIT_NO_CHANGE}): no YAML field reaches the culprit")
        return EXIT_NO_CHANGE
    if patch.changed:
        _write_or_show(args, args.yaml, patch, result["yaml"])
        return 0
    print(f"no change made (exit {EXIT_NO_CHANGE}): the YAML already sets the fields that reach the culprit")
    return EXIT_NO_CHANGE
