"""`msoverflow repro` on real MindSpore CPU dumps (tests/conftest.py's real_dumps): the inputs are copied out of
the dump (which stays byte-for-byte as it was), and the written script, run as a user would, reproduces the
overflow in the dumped fp16 and not in fp32; an invalid 0/0 origin is non-finite in every dtype."""
import hashlib
import os
import subprocess
import sys

import pytest

from msoverflow import cli

pytestmark = pytest.mark.mindspore


def _snapshot(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[path] = hashlib.sha1(fh.read()).hexdigest()
    return out


def _repro(real_dumps, case, tmp_path):
    dump = real_dumps[case]
    report = tmp_path / "report.json"
    assert cli.main(["analyze", str(dump), "--format", "json", "-o", str(report), "--no-progress"]) == 1
    before = _snapshot(dump)
    out_dir = tmp_path / "repro"
    assert cli.main(["repro", "--from", str(report), "-o", str(out_dir)]) == 0
    assert _snapshot(dump) == before, "repro never writes into the dump"
    assert sorted(p.name for p in out_dir.iterdir() if p.name.startswith("input_"))
    proc = subprocess.run([sys.executable, str(out_dir / "repro.py"), "--device", "CPU"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    lines = [l for l in (proc.stdout + proc.stderr).splitlines() if "[WARNING]" not in l]
    return proc.returncode, lines


@pytest.mark.parametrize("case", ["normhead_fp16_overflow", "overflow_last_of_three_steps"])
def test_sqrtgrad_overflow_reproduces_in_fp16_not_fp32(real_dumps, case, tmp_path):
    code, lines = _repro(real_dumps, case, tmp_path)
    text = "\n".join(lines)
    assert code == 0, text
    fp16 = next(l for l in lines if l.strip().startswith("float16") and "output 0" in l)
    fp32 = next(l for l in lines if l.strip().startswith("float32") and "output 0" in l)
    assert " inf 0 " not in fp16 + " ", fp16          # the dumped dtype overflows
    assert fp32.endswith("inf 0 nan 0"), fp32
    assert "REPRODUCED: non-finite in float16, finite in float32" in text
    assert "SqrtGrad" in lines[0]


def test_masked_mean_zero_division_is_non_finite_in_every_dtype(real_dumps, tmp_path):
    code, lines = _repro(real_dumps, "zero_token_loss_division", tmp_path)
    text = "\n".join(lines)
    assert code == 0, text
    assert "not a precision problem" in text and "float32" in text


def test_refuses_an_output_dir_inside_the_dump(real_dumps, tmp_path, capsys):
    dump = real_dumps["normhead_fp16_overflow"]
    report = tmp_path / "report.json"
    cli.main(["analyze", str(dump), "--format", "json", "-o", str(report), "--no-progress"])
    before = _snapshot(dump)
    assert cli.main(["repro", "--from", str(report), "-o", str(dump / "repro")]) == 2
    assert "inside the dump" in capsys.readouterr().err
    assert _snapshot(dump) == before


def _calls(path, names):
    import ast
    tree = ast.parse(open(path).read())
    return [node.func.id for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names]


def test_script_has_no_eval_and_says_why_bf16_did_not_run(real_dumps, tmp_path):
    """Issue 27: the written script used eval() to rebuild SqrtGrad's forward input, and printed an empty
    `TypeError: ` when bf16 has no CPU kernel. The rule is a named function now, and the error its real text."""
    code, lines = _repro(real_dumps, "normhead_fp16_overflow", tmp_path)
    assert code == 0
    assert _calls(tmp_path / "repro" / "repro.py", {"eval", "exec", "compile"}) == []
    bf16 = next(line for line in lines if line.strip().startswith("bfloat16"))
    assert "not run on CPU (TypeError: Select CPU operator[Sqrt] fail! Unsupported data type!)" in bf16, bf16


def test_refuses_to_overwrite_an_existing_repro_without_force(real_dumps, tmp_path, monkeypatch, capsys):
    """As `config -o`: the default ./repro_SqrtGrad/ made by an earlier run (perhaps edited since) is never
    overwritten silently; --force writes into it."""
    report = tmp_path / "report.json"
    cli.main(["analyze", str(real_dumps["normhead_fp16_overflow"]), "--format", "json", "-o", str(report),
              "--no-progress"])
    monkeypatch.chdir(tmp_path)
    assert cli.main(["repro", "--from", str(report)]) == 0
    script = tmp_path / "repro_SqrtGrad" / "repro.py"
    script.write_text(script.read_text() + "# my edit\n")
    capsys.readouterr()
    assert cli.main(["repro", "--from", str(report)]) == 2
    err = capsys.readouterr().err
    assert "repro_SqrtGrad" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert script.read_text().endswith("# my edit\n")
    assert cli.main(["repro", "--from", str(report), "--force"]) == 0
    assert not script.read_text().endswith("# my edit\n")
