"""Helpers shared by the tests/*/test_patch_*.py modules (no tests here).

hand_report() is HAND-WRITTEN in the shape of `msoverflow analyze --format json` (schema_version 1), for tests
that must not depend on a MindSpore run; the end-to-end tests use reports from real `msoverflow analyze` runs.
"""
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO_MODEL = REPO / "msoverflow" / "demo" / "model.py"
NORM_LINE_CODE = "norm = self.sqrt(variance + self.eps)"


def demo_norm_line() -> int:
    lines = DEMO_MODEL.read_text().splitlines()
    return next(i + 1 for i, l in enumerate(lines) if l.strip() == NORM_LINE_CODE)


def hand_report(source_file=None, line=None, cell="network._backbone.lm_head", cell_type="NormHead",
                op_type="SqrtGrad", forward_op="Sqrt", code=NORM_LINE_CODE):
    """A report as `msoverflow analyze --format json` writes it, for the demo's fp16 NormHead overflow."""
    finding = {
        "rank": 0, "graph": "0", "iteration": 0, "op_type": op_type,
        "op_name": "Gradients_Default_network-CausalLMLoss__backbone-TinyBaichuan_lm_head-NormHead_Grad_Sqrt_SqrtGrad-op0",
        "full_name": "Gradients/Default/network-CausalLMLoss/_backbone-TinyBaichuan/lm_head-NormHead/Grad_Sqrt/SqrtGrad-op0",
        "role": "origin", "kind": "overflow", "detail": "float16 overflow (hand-written test report)",
        "forward_op": forward_op,
        "forward_full_name": "Default/network-CausalLMLoss/_backbone-TinyBaichuan/lm_head-NormHead/Sqrt-op0",
        "cell": cell, "cell_type": cell_type,
        "source": {"file": str(source_file or DEMO_MODEL), "line": line or demo_norm_line(), "code": code},
        "inputs": [], "outputs": [], "recommendation": "",
    }
    return {"schema_version": 1, "verdict": "anomaly", "first": finding, "anomalies": [finding], "warnings": []}


def write_report(directory, report) -> Path:
    path = Path(directory) / "report.json"
    path.write_text(json.dumps(report))
    return path


def mindspore_on_cpu():
    """mindspore, set to CPU once per process (set_device refuses a second call once kernels have run)."""
    import mindspore as ms
    try:
        ms.set_device("CPU")
    except RuntimeError:
        pass     # another test module of this process already set it and ran kernels
    return ms
