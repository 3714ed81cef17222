"""Run (or reuse) the fault suite's real runs, analyze each dump, score, print the table.

    python -m benchmarks.faults                      # every case; writes the table into docs/robustness.md
    python -m benchmarks.faults --class bitflip      # a subset (docs untouched unless --write-docs)
    python -m benchmarks.faults --ci --json out.json # the CI subset, every case's scores as JSON
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.faults import suite

DOC = suite.REPO / "docs" / "robustness.md"
START, END = "<!-- fault-suite-table:start -->", "<!-- fault-suite-table:end -->"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0f}%"


def markdown_table(lines) -> str:
    out = ["| fault class | cases | origin right | cause right | false alarms (clean) | called clean (missed) |",
           "|---|---:|---:|---:|---:|---:|"]
    for line in lines:
        runs = f"{line['cases']}" + (f" (+{line['run_failures']} runs failed)" if line["run_failures"] else "")
        out.append(f"| {line['class']} | {runs} | {_pct(line['origin'])} | {_pct(line['cause'])} | "
                   f"{'-' if line['false_alarms'] is None else line['false_alarms']} | "
                   f"{'-' if line['missed'] is None else line['missed']} |")
    return "\n".join(out)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=suite.REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def write_docs(lines, rows, command: str = "python -m benchmarks.faults") -> None:
    said = {}
    for row in rows:
        if "said" in row and row["fault"] != "clean" and not (row["origin"] and row["cause"]):
            s = row["said"]
            said.setdefault(row["fault"], f"`{row['name']}`: {s['verdict']}, {s['op_type']} in `{s['cell']}` "
                                          f"(rank {s['rank']}, step {s['step']}), cause {s['cause']}")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    block = [START, "", f"Scored {when} on commit `{_commit()}` by `{command}`, with MindSpore "
             f"{suite.base.mindspore_version()} (CPU), {sum(line['cases'] for line in lines)} real runs:", "",
             markdown_table(lines), ""]
    if said:
        block += ["What the report says on the first case each class got wrong:", ""]
        block += [f"- {fault}: {text}" for fault, text in said.items()]
        block.append("")
    block.append(END)
    text = DOC.read_text()
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + "\n".join(block) + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"
    DOC.write_text(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", default=[], help="a case name (repeatable)")
    parser.add_argument("--class", dest="classes", action="append", default=[], choices=suite.CLASSES)
    parser.add_argument("--model", action="append", default=[], choices=["demo", "transformer"])
    parser.add_argument("--ci", action="store_true", help="only the CI subset")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--out", type=Path, help="the run cache (default .fixture-cache/faults/<key>)")
    parser.add_argument("--json", type=Path, help="write every case's score here")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/robustness.md "
                                                                  "(the default when every case runs)")
    args = parser.parse_args(argv)
    if suite.base.mindspore_version() is None:
        print("benchmarks.faults: MindSpore is not installed", file=sys.stderr)
        return 2
    try:
        cases = suite.select(list(suite.CI_SUBSET) if args.ci else args.case, args.classes, args.model)
    except ValueError as exc:
        print(f"benchmarks.faults: {exc}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    records = suite.ensure_runs(cases, args.out, progress)
    rows = suite.score(records, args.out, progress)
    for row in rows:
        if "error" in row:
            print(f"{row['name']}: {row['error']}")
            continue
        s = row["said"]
        mark = ("FALSE ALARM" if row["false_alarm"] else "ok") if row["fault"] == "clean" else \
            f"origin {'ok' if row['origin'] else 'WRONG'}, cause {'ok' if row['cause'] else 'WRONG'}"
        print(f"{row['name']}: {mark}: {s['verdict']} {s['op_type']} in {s['cell']} rank {s['rank']} "
              f"step {s['step']} cause {s['cause']}")
    lines = suite.table(rows)
    print(markdown_table(lines))
    if args.json:
        args.json.write_text(json.dumps({"table": lines, "cases": rows}, indent=2))
    if args.write_docs or not (args.ci or args.case or args.classes or args.model):
        write_docs(lines, rows, " ".join(["python -m benchmarks.faults", *(argv if argv is not None else sys.argv[1:])]))
        print(f"wrote the table into {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
