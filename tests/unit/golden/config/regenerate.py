"""Regenerate the golden dump configs: `.venv/bin/python tests/unit/golden/config/regenerate.py`, then REVIEW the diff before
committing (each file is what msoverflow promises to write for one MindSpore version / device / jit level).

Inputs are fixed (path /data/dump, config /data/dump_config.json, ranks 0-7) so the files change only when the
rules in msoverflow/data/dump_rules.yaml or the generator change.
"""
import json
from pathlib import Path

from msoverflow.config.generator import ConfigRefused, build
from msoverflow.config.rules import PURPOSES, load_rules

HERE = Path(__file__).resolve().parent

FIXED = {"path": "/data/dump", "config_path": "/data/dump_config.json", "ranks": "0-7"}
KERNELS = {"tensors": ["name-regex(.*NormHead.*)"]}
# Problems about what is installed on the machine generating (is msprobe's adump module there?), not the config.
MACHINE_PROBLEMS = {"msprobe-adump"}


def cases():
    for version in load_rules()["versions"]:
        for jit_level in ("O0", "O1", "O2"):
            yield f"ascend-{version}-{jit_level}", {"ms_version": version, "device": "ascend", "jit_level": jit_level}
        for device in ("gpu", "cpu"):
            yield f"{device}-{version}", {"ms_version": version, "device": device}


def golden_for(platform: dict) -> dict:
    out = {"inputs": {**platform, **FIXED}, "purposes": {}}
    for purpose in PURPOSES:
        try:
            result = build(purpose, kernels=KERNELS.get(purpose), **platform, **FIXED)
        except ConfigRefused as exc:
            out["purposes"][purpose] = {"refused": str(exc)}
            continue
        out["purposes"][purpose] = {"mechanism": result.mechanism, "config": result.config, "env": result.env,
                                    "unset": result.unset,
                                    "problems": [p.id for p in result.problems if p.id not in MACHINE_PROBLEMS]}
    return out


def main():
    for name, platform in cases():
        (HERE / f"{name}.json").write_text(json.dumps(golden_for(platform), indent=2, sort_keys=True) + "\n")
    print(f"wrote golden configs to {HERE}")


if __name__ == "__main__":
    main()
