"""Find the installed MindSpore version and the likely device without importing mindspore (3.5 s, 400 MB)."""
from __future__ import annotations

import os
import shutil
from importlib import metadata
from typing import Optional

# Older releases shipped per-device wheels; 2.x ships one `mindspore` wheel (CPU + Ascend plugin).
_DISTRIBUTIONS = {"mindspore": None, "mindspore-ascend": "ascend", "mindspore-gpu": "gpu", "mindspore-cpu": "cpu"}
_ASCEND_HOMES = ("/usr/local/Ascend/ascend-toolkit", "/usr/local/Ascend/latest")


def installed_mindspore() -> tuple[Optional[str], Optional[str]]:
    """(version, device implied by the distribution name or None) of the installed MindSpore, or (None, None)."""
    for name, device in _DISTRIBUTIONS.items():
        try:
            return metadata.version(name), device
        except metadata.PackageNotFoundError:
            continue
    return None, None


def detect_ms_version() -> Optional[str]:
    return installed_mindspore()[0]


def detect_device() -> tuple[str, str]:
    """(device, why). An Ascend toolkit (CANN) on the machine means Ascend; otherwise CPU."""
    _, by_wheel = installed_mindspore()
    if by_wheel:
        return by_wheel, f"installed wheel is mindspore-{by_wheel}"
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if os.environ.get(var):
            return "ascend", f"${var} is set"
    for home in _ASCEND_HOMES:
        if os.path.isdir(home):
            return "ascend", f"{home} exists"
    if shutil.which("npu-smi"):
        return "ascend", "npu-smi is on PATH"
    return "cpu", "no Ascend toolkit (CANN) found on this machine"
