"""The JSON report as text: the dict msoverflow/report_dict.py builds, written out."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ..report_dict import report_dict
from ..safeio import json_safe

if TYPE_CHECKING:
    from ..model import Report


def render_json(report: Report) -> str:
    # json_safe: a NaN anywhere (a version, a value from a dump) never breaks the report
    return json.dumps(json_safe(report_dict(report)), indent=2, allow_nan=False) + "\n"
