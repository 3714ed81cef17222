"""Write the top-level configs/ (ready dump configs and MindFormers precision overlays) from msoverflow's own rules.

    python scripts/gen_configs.py            # rewrite configs/ (then review the diff)
    python scripts/gen_configs.py --check    # exit 1 if configs/ differs from what the rules give (drift)

Every dump config is written by `msoverflow config` itself (its command line is in configs/README.md), for the
first MindSpore version of a range; the range is the run of versions whose config is byte-for-byte the same, so
the table never claims a file fits a version it does not. tests/test_configs_dir.py checks each file against
`msoverflow config` for every version and jit level it names, and runs `config --check` on it.
configs/ is data: no Python package, never imported or installed (setup.cfg packages only msoverflow*).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]

CONFIGS = REPO / "configs"
DUMP_PATH = "/path/to/msoverflow_dump"    # MindSpore wants an absolute path: edit it, or regenerate with --path

# (purpose, device, jit levels that share one file, mode, versions, what it is for). One file per run of versions
# with identical output.
CASES = [
    ("overflow", "ascend", (), None, ["2.2"],
     "the seed case: first-overflow hunt with the 2.2 asynchronous dump (op_debug_mode 3, Opdebug files)"),
    ("overflow", "ascend", ("O0", "O1"), None, ["2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10"],
     "first-overflow hunt: only ops that overflowed are written (op_debug_mode 3)"),
    ("statistics", "ascend", ("O0", "O1"), None, ["2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10"],
     "statistic.csv with nan/inf counts for every op around the failing step"),
    ("overflow", "ascend", ("O2",), None, ["2.3", "2.4", "2.5"],
     "first-overflow hunt at O2 (graph sink) through the ACL dump"),
    ("overflow", "ascend", ("O2",), None, ["2.6", "2.7", "2.8", "2.9", "2.10"],
     "msprobe config.json (PrecisionDebugger, level L2 kernels) for O2, which ignores MINDSPORE_DUMP_CONFIG "
     "from 2.6; needs mindstudio-probe built with adump"),
    ("overflow", "ascend", (), "pynative", ["2.6", "2.7", "2.8", "2.9", "2.10"],
     "msprobe config.json (PrecisionDebugger, level L1 APIs) for PyNative runs"),
    ("overflow", "gpu", (), None, ["2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10"],
     "first-overflow hunt on GPU: statistic.csv with nan/inf counts for every op (no overflow-only dump on GPU)"),
    ("overflow", "cpu", (), None, ["2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10"],
     "first-overflow hunt on CPU: every op's tensors (CPU has neither overflow-only nor statistics dumps)"),
]


@dataclass
class DumpConfigFile:
    name: str
    purpose: str
    device: str
    jit_levels: Tuple[str, ...]
    mode: Optional[str]
    versions: List[str]
    use: str

    def argv(self, version: str, jit_level: Optional[str], output: str) -> List[str]:
        """The `msoverflow config` command line that writes this file."""
        argv = ["config", self.purpose, "--ms-version", version, "--device", self.device]
        if jit_level:
            argv += ["--jit-level", jit_level]
        if self.mode:
            argv += ["--mode", self.mode]
        return argv + ["--path", DUMP_PATH, "-o", output]

    @property
    def version_label(self) -> str:
        return self.versions[0] if len(self.versions) == 1 else f"{self.versions[0]}-{self.versions[-1]}"

    def text(self, version: Optional[str] = None, jit_level: Optional[str] = None) -> str:
        return config_text(self.argv(version or self.versions[0],
                                     jit_level or (self.jit_levels[0] if self.jit_levels else None), "OUT"))


def run_msoverflow(argv: List[str]) -> Tuple[int, str, str]:
    from msoverflow import cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def config_text(argv: List[str]) -> str:
    """What `msoverflow config ... -o FILE` writes into FILE ("OUT" in argv stands for FILE)."""
    with tempfile.TemporaryDirectory(prefix="msoverflow-configs-") as tmp:
        out = os.path.join(tmp, "config.json")
        code, stdout, stderr = run_msoverflow([out if word == "OUT" else word for word in argv])
        if code != 0:
            raise RuntimeError(f"msoverflow {' '.join(argv)} exited {code}: {stderr.strip()}")
        return Path(out).read_text(encoding="utf-8")


def dump_config_files() -> List[DumpConfigFile]:
    """One file per run of versions (and the listed jit levels) whose config is the same."""
    files: List[DumpConfigFile] = []
    for purpose, device, jit_levels, mode, versions, use in CASES:
        runs: List[Tuple[List[str], str]] = []
        for version in versions:
            texts = {config_text(DumpConfigFile("", purpose, device, jit_levels, mode, [version], "")
                                 .argv(version, jit, "OUT")) for jit in (jit_levels or (None,))}
            if len(texts) != 1:
                raise RuntimeError(f"{purpose} {device} {jit_levels} {version}: the jit levels differ; list them apart")
            text = texts.pop()
            if runs and runs[-1][1] == text:
                runs[-1][0].append(version)
            else:
                runs.append(([version], text))
        for run_versions, text in runs:
            label = run_versions[0] if len(run_versions) == 1 else f"{run_versions[0]}-{run_versions[-1]}"
            tool = "msprobe" if text.lstrip().startswith('{\n    "task"') else "ms"
            name = "-".join([tool, label, device, *jit_levels, *([mode] if mode else []), purpose]) + ".json"
            files.append(DumpConfigFile(name, purpose, device, tuple(jit_levels), mode, run_versions, use))
    return files


# ---- MindFormers precision overlays ---------------------------------------------------------------------------

def overlays() -> Dict[str, str]:
    """configs/mindformers/<generation>-<rule>-float32.yaml: the model_config fields msoverflow's YAML patch sets
    for an origin of that kind (msoverflow/data/mindformers_precision.yaml), to merge into a run's YAML."""
    from msoverflow.resources import load_yaml
    table = load_yaml("mindformers_precision.yaml")
    out: Dict[str, str] = {}
    for rule in table["rules"]:
        for generation, fields in rule["fields"].items():
            if not fields:
                continue   # no local field reaches such an origin: msoverflow patches the source instead
            why = " ".join(str(rule["why"]).split())
            lines = [f"# MindFormers {generation} precision overlay: {rule['name']} in float32 (or bfloat16).",
                     f"# When: {why}",
                     "# Merge model.model_config below into your run's YAML, or let msoverflow pick and check the",
                     "# field against the origin: msoverflow patch --from report.json --yaml YOUR.yaml --write",
                     "# Generated by scripts/gen_configs.py from msoverflow/data/mindformers_precision.yaml.",
                     "model:", "  model_config:"]
            lines += [f"    {field}: float32" for field in fields]
            out[f"mindformers/{generation}-{rule['name']}-float32.yaml"] = "\n".join(lines) + "\n"
    return out


# ---- README ---------------------------------------------------------------------------------------------------

def readme(files: List[DumpConfigFile], overlay_names: List[str]) -> str:
    rows = []
    for f in files:
        jit = "/".join(f.jit_levels) if f.jit_levels else ("PyNative" if f.mode == "pynative" else "-")
        command = " ".join(f.argv(f.versions[0], f.jit_levels[0] if f.jit_levels else None, f.name))
        rows.append(f"| [`{f.name}`]({f.name}) | {f.version_label} | {f.device} | {jit} | {f.use} | "
                    f"`msoverflow {command}` |")
    overlay_rows = [f"| [`{name}`]({name}) | {name.split('/')[1].split('-')[0]} | "
                    f"{name.split('/')[1].split('-', 1)[1].rsplit('-', 1)[0]} |" for name in overlay_names]
    return "\n".join([
        "# Ready dump configs",
        "",
        "Generated by `python scripts/gen_configs.py` from msoverflow's rules (`msoverflow/data/dump_rules.yaml`),",
        "each file exactly what the `msoverflow config` command in its row writes; `tests/test_configs_dir.py`",
        "checks that for every MindSpore version and jit level in the row, and runs `msoverflow config --check` on",
        "each. Do not edit them here: change the rules and regenerate.",
        "",
        f"Before use: set `path` (here `{DUMP_PATH}`) to an absolute directory, or run the row's command with your",
        "own `--path` (and `--steps`, `--ranks`). That command also prints the environment to set",
        "(`MINDSPORE_DUMP_CONFIG`, and what to unset) and what the dump will and will not capture;",
        "`msoverflow run ... -- python train.py` does all of it for you. msprobe files are PrecisionDebugger's",
        "`config.json`: the script creates `PrecisionDebugger(config_path=...)` (the command prints the lines).",
        "",
        "| file | MindSpore | device | jit level | purpose | written by |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "## MindFormers precision overlays",
        "",
        "`mindformers/`: the `model.model_config` fields that compute one kind of region in float32, per MindFormers",
        "field generation (1.x: `*_compute_type`, 2.x: `*_compute_dtype`), from",
        "`msoverflow/data/mindformers_precision.yaml`. `msoverflow patch --from report.json --yaml YOUR.yaml` picks",
        "the one that reaches the origin (or says why none does) and edits your YAML keeping its comments.",
        "",
        "| file | MindFormers fields | region |",
        "|---|---|---|",
        *overlay_rows,
        "",
    ])


def expected() -> Dict[str, str]:
    """Every file of configs/ (relative name -> text), as the rules give it today."""
    files = dump_config_files()
    texts = {f.name: f.text() for f in files}
    over = overlays()
    texts.update(over)
    texts["README.md"] = readme(files, sorted(over))
    return texts


def on_disk() -> Dict[str, str]:
    return {str(p.relative_to(CONFIGS)): p.read_text(encoding="utf-8")
            for p in sorted(CONFIGS.rglob("*")) if p.is_file()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    want = expected()
    if args.check:
        have = on_disk() if CONFIGS.is_dir() else {}
        drift = sorted(name for name in set(want) | set(have) if want.get(name) != have.get(name))
        for name in drift:
            print(f"configs/{name}: " + ("missing" if name not in have else "not generated by the rules"
                                         if name not in want else "differs from what the rules give"))
        return 1 if drift else 0
    for stale in set(on_disk() if CONFIGS.is_dir() else {}) - set(want):
        (CONFIGS / stale).unlink()
    for name, text in want.items():
        path = CONFIGS / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(want)} files to {CONFIGS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
