"""`msoverflow demo`: the whole story on an embedded model, on this machine's CPU.

A tiny Baichuan2-like model whose fp16 NormHead overflows in SqrtGrad is trained with dump on, the dump is analysed,
the precision patch is planned (source diff) and applied at run time, and a re-run proves the fix.
"""
from __future__ import annotations

import os
import sys
import time


def register(sub):
    p = sub.add_parser("demo", help="overflow -> dump -> analyze -> patch -> verify, on a tiny real MindSpore model",
                       description=__doc__)
    p.add_argument("--workdir", help="where dumps and reports go (default: ./msoverflow-demo/<time>)")
    p.add_argument("--steps", type=int, default=3, help="training steps of the verification runs (default 3)")
    p.set_defaults(run=run)
    return p


def _title(n: int, text: str):
    print(f"\n=== {n}/4 {text} " + "=" * max(0, 70 - len(text)), flush=True)


def run(args) -> int:
    from ..errors import UserError, require_mindspore
    require_mindspore("msoverflow demo")
    from ..api import analyze
    from ..config.runner import run_and_analyze
    from ..patch import source_patch
    from ..patch.verify import verify
    from ..render import render

    workdir = os.path.abspath(args.workdir or os.path.join("msoverflow-demo", time.strftime("%Y%m%d-%H%M%S")))
    if os.path.isdir(workdir) and os.listdir(workdir):
        raise UserError(f"{workdir}: not empty; give a new --workdir")
    os.makedirs(workdir, exist_ok=True)
    train = [sys.executable, "-m", "msoverflow.demo.train"]

    _title(1, "train the fp16 model with dump on (msoverflow run)")
    outcome = run_and_analyze(train + ["--steps", "1"], os.path.join(workdir, "dump"), device="cpu",
                              analyze=False)
    if outcome.command_exit != 0:
        raise UserError(f"the demo training run failed (exit {outcome.command_exit}); see its output above")

    _title(2, "analyze the dump (msoverflow analyze)")
    report = analyze(str(outcome.dump_dir), command=getattr(args, "command_line", None))
    print(render(report, "text"), end="")
    from ._output import save_json, write_output
    report_path = save_json(report, os.path.join(workdir, "report.json"))
    html_path = os.path.join(workdir, "report.html")
    write_output(html_path, render(report, "html", page_dir=workdir), "html")
    print(f"(reports: {report_path}, and {html_path} to open in a browser)")
    if report.first is None:
        print("The demo run did not overflow: nothing to patch.")
        return 1

    _title(3, "plan the patch (msoverflow patch --from report.json)")
    src = report.first.source
    if src is not None:
        plan = source_patch.plan(src.file, src.line, "float32", code=src.code)
        print(plan.describe())
        print(plan.diff() or "(no source change needed)")
    print("The verification below applies the same region at run time (msoverflow.patch.apply), "
          "without touching the file.")

    _title(4, "re-run with the patch and verify (msoverflow patch --verify)")
    result = verify(report_path, train + ["--steps", str(args.steps)], "float32", os.path.join(workdir, "verify"))
    print(result.render())
    print(f"\nDemo files: {workdir}")
    return result.exit_code
