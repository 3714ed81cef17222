#!/usr/bin/env python
"""Record real PyTorch mindstudio-probe dumps of compare_net.py's PyTorch twin, for `msoverflow compare` of a
MindSpore dump against a PyTorch one. CI has no torch: the dumps are committed under
tests/support/recorded/torch_msprobe/ (PROVENANCE.md there says how and with which versions they were made).

The twin is tests/support/cases/compare/compare_net.py written in PyTorch: Linear -> LayerNorm -> attention
(matmul, * 0.25, softmax) -> Linear, MSE loss, SGD(0.01), one step, batch 2 x 8 x 16. Its weights are written
first to weights/*.npy by compare_net.py's recipe (np.random.RandomState(seed).normal(0, 0.3, shape), seeds 1-4,
float32, shape (out, in) as both frameworks store a dense weight) and the model loads them from there; the data
is compare_net.py's too (RandomState(5): x, then y). The dumps are mindstudio-probe's PrecisionDebugger, task
tensor, level L1 (every API call's inputs and outputs as npy files, forward and backward):
- healthy/: the same model and data as the MindSpore run (LayerNorm eps 1e-5);
- ln_eps/:  the LayerNorm's eps 1e-2 on this side only (a planted difference).

Run with a venv holding torch and mindstudio-probe (never the project's .venv):

    python3 -m venv /work/torchenv
    /work/torchenv/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 'numpy<2'
    /work/torchenv/bin/python tests/support/gen_torch_msprobe_dump.py [--out tests/support/recorded/torch_msprobe]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np

HIDDEN, SEQ, BATCH = 16, 8, 2      # compare_net.py's
WEIGHTS = {"embed": ((HIDDEN, HIDDEN), 1), "query": ((HIDDEN, HIDDEN), 2), "key": ((HIDDEN, HIDDEN), 3),
           "out": ((1, HIDDEN), 4)}
VARIANTS = {"healthy": 1e-5, "ln_eps": 1e-2}
DEFAULT_OUT = Path(__file__).resolve().parent / "recorded" / "torch_msprobe"


def write_weights(folder: Path) -> None:
    """compare_net.py's weights (its weight(shape, seed)) as one npy file each."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, (shape, seed) in WEIGHTS.items():
        np.save(folder / f"{name}.npy", np.random.RandomState(seed).normal(0.0, 0.3, shape).astype(np.float32))


def build(torch, weights: Path, ln_eps: float):
    nn = torch.nn

    def dense(name):
        array = np.load(weights / f"{name}.npy")
        layer = nn.Linear(array.shape[1], array.shape[0], bias=False)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(array))
        return layer

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key = dense("query"), dense("key")

        def forward(self, x):
            scores = torch.matmul(self.query(x), self.key(x).transpose(1, 2)) * 0.25
            probs = torch.softmax(scores.to(torch.float32), -1).to(torch.float32)
            return torch.matmul(probs, x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = dense("embed")
            self.norm = nn.LayerNorm(HIDDEN, eps=ln_eps)
            self.attention = Attention()
            self.out = dense("out")

        def forward(self, x):
            return self.out(self.attention(self.norm(self.embed(x))))

    return Net()


def record(variant: str, ln_eps: float, weights: Path, out: Path) -> None:
    import torch
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    net = build(torch, weights, ln_eps)
    with tempfile.TemporaryDirectory(prefix=f"torch_msprobe_{variant}_") as tmp:
        dump = Path(tmp) / "dump"
        config = {"task": "tensor", "dump_path": str(dump), "rank": [], "step": [], "level": "L1",
                  "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config, indent=2))
        debugger = PrecisionDebugger(config_path=str(config_path))
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
        data = np.random.RandomState(5)
        x = torch.from_numpy(data.normal(0, 1, (BATCH, SEQ, HIDDEN)).astype(np.float32))
        y = torch.from_numpy(data.normal(0, 1, (BATCH, SEQ, 1)).astype(np.float32))
        debugger.start(net)
        loss = torch.nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        debugger.stop()       # the forward and backward pass; the optimizer's in-place updates are left out
        debugger.step()
        optimizer.step()
        print(f"{variant}: loss {float(loss.detach()):.6f}", flush=True)
        target = out / variant
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(dump), str(target))
        config["dump_path"] = "<temporary directory>/dump"
        (out / f"{variant}.config.json").write_text(json.dumps(config, indent=2) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="record this one only (in this process)")
    args = parser.parse_args(argv)
    out: Path = args.out
    if args.variant:
        record(args.variant, VARIANTS[args.variant], out / "weights", out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    write_weights(out / "weights")
    for variant in VARIANTS:       # one process each: msprobe's PrecisionDebugger is one per process
        subprocess.run([sys.executable, __file__, "--out", str(out), "--variant", variant], check=True)
    provenance = {"made_by": "tests/support/gen_torch_msprobe_dump.py", "recorded": "real PyTorch msprobe dump",
                  "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                  "python": platform.python_version(), "machine": platform.machine(),
                  "torch": version("torch"), "mindstudio-probe": version("mindstudio-probe"),
                  "numpy": version("numpy"), "variants": {v: {"layer_norm_eps": e} for v, e in VARIANTS.items()},
                  "command": " ".join([os.path.basename(sys.executable), *sys.argv])}
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
