"""The config options shared by `msoverflow config` and `msoverflow run` (argparse only, no heavy imports)."""
from __future__ import annotations

import argparse

PURPOSE_HELP = ("overflow: first-overflow hunt; statistics: per-tensor stats with nan/inf counts; "
                "tensors: full tensors of chosen kernels; exception: inputs of the op that raised (Ascend)")


def add_config_options(parser: argparse.ArgumentParser, *, dump_path: bool = True) -> None:
    """dump_path=False: the command chooses the dump directory itself (`run --dump-dir`), so --path is not offered."""
    group = parser.add_argument_group("dump config options")
    group.add_argument("--preset", metavar="NAME|FILE",
                       help="start from a preset in msoverflow/data/presets/ (or a copied YAML file); flags override it")
    group.add_argument("--ms-version", metavar="V",
                       help="MindSpore version, e.g. 2.4 (default: the installed mindspore package)")
    group.add_argument("--device", choices=["ascend", "gpu", "cpu"],
                       help="default: ascend when an Ascend toolkit is installed here, else cpu")
    group.add_argument("--jit-level", choices=["O0", "O1", "O2"], help="needed on Ascend with MindSpore 2.3+")
    group.add_argument("--mode", choices=["graph", "pynative"],
                       help="pynative: write msprobe's config.json (PrecisionDebugger) instead of a MindSpore dump "
                            "config; Ascend O2 from MindSpore 2.6 gets msprobe's too")
    group.add_argument("--msprobe-level", choices=["L0", "L1", "mix", "L2"],
                       help="msprobe dump level: L0 Cells, L1 APIs (PyNative default), mix both, L2 kernels (graph)")
    if dump_path:
        group.add_argument("--path", metavar="DIR", help="absolute dump directory (MindSpore refuses relative paths)")
    group.add_argument("--net-name", metavar="NAME", help="dump sub-directory name (default Net)")
    group.add_argument("--steps", "--step", "--iteration", "--iterations", dest="steps", metavar="STEPS", help="steps to dump: \"all\" or like 0|5-8 (default 0; "
                                                        "Ascend overflow: all)")
    group.add_argument("--ranks", "--rank", "--devices", dest="ranks", metavar="IDS",
                       help="device ids to dump, e.g. 0,1 or 0-7 (default 0-7)")
    group.add_argument("--multi-rank", action="store_true", default=None,
                       help="the run spans several ranks (adds HCCL_EXEC_TIMEOUT on Ascend)")
    group.add_argument("--inputs", action="store_true", default=None, help="dump op inputs only")
    group.add_argument("--outputs", action="store_true", default=None, help="dump op outputs only")
    group.add_argument("--kernels", nargs="+", metavar="K",
                       help="kernels to dump: full names, op types (e.g. SqrtGrad) or \"name-regex(...)\"")
    group.add_argument("--stat-category", dest="statistic_category", nargs="+", metavar="C",
                       help="statistic categories (2.3+), e.g. max min \"nan count\"")
    group.add_argument("--overflow-number", type=int, metavar="N",
                       help="stop after N overflow dumps (2.4+, op_debug_mode 3 only)")


_OPTION_NAMES = ("ms_version", "device", "jit_level", "mode", "msprobe_level", "path", "net_name", "steps", "ranks", "multi_rank", "inputs",
                 "outputs", "kernels", "statistic_category", "overflow_number")


def options_from_args(args: argparse.Namespace, purpose_default: str = "overflow") -> tuple[str, dict]:
    """(purpose, build keyword arguments): preset values first, command-line flags over them."""
    options: dict = {}
    if getattr(args, "preset", None):
        from .presets import load_preset

        options.update(load_preset(args.preset))
        options.pop("description", None)
    purpose = getattr(args, "purpose", None) or options.pop("purpose", None) or purpose_default
    options.pop("purpose", None)
    for name in _OPTION_NAMES:
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    for name in ("ms_version", "steps", "ranks"):
        if isinstance(options.get(name), (int, float)) and not isinstance(options.get(name), bool):
            value = options[name]
            options[name] = str(value) if not isinstance(value, int) or abs(value) < 10 ** 30 else "(huge number)"
    return purpose, options
