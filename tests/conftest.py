"""Shared pytest set-up: the `mindspore` marker (declared in setup.cfg) and the session-scoped real-run fixtures.

Nothing heavy is imported here: MindSpore runs only in the generator's subprocesses, and only when a test asks
for `real_dumps`.
"""
import importlib.util
import os
import sys

import pytest

# Set to a directory to generate/reuse the real dumps there instead of .fixture-cache/realdumps/<key>/.
OUT_DIR_ENV = "MSOVERFLOW_REAL_DUMPS_DIR"
# `msoverflow analyze DIR` saves ./report.json by default: not from tests run in the repository (the quick-start
# test runs the CLI in an empty directory with the default restored).
os.environ.setdefault("MSOVERFLOW_REPORT_JSON", "")


def mindspore_available() -> bool:
    # find_spec, not import: `import mindspore` costs seconds and hundreds of MB in the test process.
    return importlib.util.find_spec("mindspore") is not None


# The session fixtures below run MindSpore (once per session): a test that asks for one is a `mindspore` test, so
# `-m "not mindspore"` (./scripts/test.sh quick) never starts a real run.
REAL_RUN_FIXTURES = frozenset({"real_dumps", "multirank_dumps", "compare_pairs", "msprobe_dumps", "hunt_runs",
                               "upstream_dumps", "dumpobj_dumps", "compare_precision_pairs", "watch_runs",
                               "watch_multirank", "judge_cases"})


@pytest.hookimpl(tryfirst=True)        # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if REAL_RUN_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.mindspore)
    if mindspore_available():
        return
    skip = pytest.mark.skip(reason="mindspore is not installed (pip install 'msoverflow[mindspore]')")
    for item in items:
        if "mindspore" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def real_dumps():
    """Mapping case name -> Path of that case's `dump` dir, from real MindSpore CPU runs.

    `real_dumps.case(name)` is the case's case.json (command, dump config, expected_* facts, observed);
    `real_dumps.root` the directory holding every case. All cases are generated on first use (about 30 s on
    2 cores) and cached on disk by a key over the generator, the case scripts, msoverflow/demo and the MindSpore
    version. Looking up a case that failed raises CaseFailed with the tail of its run.log.
    """
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_real_dumps as generator
    out_dir = os.environ.get(OUT_DIR_ENV) or None
    # sys.__stderr__ so the one-time ~30 s pause is explained even under pytest's output capture.
    return generator.ensure_cases([case.name for case in generator.CASES], out_dir=out_dir,
                                  progress=lambda msg: print(f"[real dumps] {msg}", file=sys.__stderr__, flush=True))


@pytest.fixture(scope="session")
def upstream_dumps():
    """Real MindSpore CPU dumps of tiny Cells for the upstream-cause and recompute-safety tests, and labelled edited
    copies (tests/support/gen_upstream_dumps.py), cached under .fixture-cache/upstream/<key>/."""
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_upstream_dumps as generator
    return generator.ensure_cases(progress=lambda msg: print(f"[upstream dumps] {msg}", file=sys.__stderr__,
                                                             flush=True))


@pytest.fixture(scope="session")
def judge_cases():
    """Real MindSpore CPU runs for the judgement (tests/support/gen_judge_cases.py: faults a loss scale or a clamp
    used to hide, and the base of a labelled edited copy), cached under .fixture-cache/judge/<key>/."""
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_judge_cases as generator
    return generator.ensure_cases(progress=lambda msg: print(f"[judge cases] {msg}", file=sys.__stderr__,
                                                             flush=True))


@pytest.fixture(scope="session")
def multirank_dumps():
    """Like `real_dumps`, for the real multi-rank cases (gen_real_dumps.MULTI_RANK_CASES: `msrun` with 2 or 4 CPU
    workers, MCCL collectives; about 2.5 min on 2 cores the first time, cached like the others)."""
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_real_dumps as generator
    out_dir = os.environ.get(OUT_DIR_ENV) or None
    return generator.ensure_cases([case.name for case in generator.MULTI_RANK_CASES], out_dir=out_dir, jobs=1,
                                  progress=lambda msg: print(f"[real dumps] {msg}", file=sys.__stderr__, flush=True))


@pytest.fixture(scope="session")
def compare_precision_pairs():
    """Real pairs whose graphs differ (tests/support/gen_compare_precision.py): the demo before/after a source patch
    made by `msoverflow patch`, amp O0/O2 of a small MLP, healthy and with a planted fp16 overflow, one small net in
    jit and in PyNative (mindstudio-probe). Generated once (about 3 min on 2 cores) and cached under .fixture-cache/compare_precision/<key>/."""
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_compare_precision
    if not gen_compare_precision.available():
        pytest.skip("mindstudio-probe is not installed (pip install 'msoverflow[msprobe]')")
    return gen_compare_precision.ensure_pairs()


@pytest.fixture(scope="session")
def compare_pairs():
    """Pairs of real MindSpore CPU runs for `msoverflow compare` (tests/support/gen_compare_pairs.py): pair name ->
    (baseline dump, target dump); `.pair(name).expected` holds the intended answer. Generated once (about 3 min
    on 2 cores, msrun and mindstudio-probe runs included) and cached under .fixture-cache/compare/<key>/."""
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_compare_pairs
    if not gen_compare_pairs.available(msprobe=True):
        pytest.skip("mindstudio-probe is not installed (pip install 'msoverflow[msprobe]')")
    return gen_compare_pairs.ensure_pairs(
        progress=lambda msg: print(f"[compare pairs] {msg}", file=sys.__stderr__, flush=True))


@pytest.fixture(scope="session")
def msprobe_dumps():
    """Mapping case name -> Path of a real msprobe case (tests/support/gen_msprobe_dumps.py: mindstudio-probe's
    PrecisionDebugger over MindSpore PyNative on CPU), generated once and cached like `real_dumps`."""
    from tests.support import gen_msprobe_dumps
    if not gen_msprobe_dumps.available():
        pytest.skip("mindspore and mindstudio-probe are not installed (pip install 'msoverflow[mindspore,msprobe]')")
    return gen_msprobe_dumps.ensure_cases(
        progress=lambda msg: print(f"[msprobe dumps] {msg}", file=sys.__stderr__, flush=True))


@pytest.fixture(scope="session")
def watch_runs():
    """Real `msoverflow watch` runs of tests/support/watch_cases/train_case.py (tests/support/gen_watch_runs.py):
    case name -> its directory, generated once and cached."""
    from tests.support import gen_watch_runs
    if not mindspore_available():
        pytest.skip("mindspore is not installed")
    return gen_watch_runs.ensure_runs(
        progress=lambda msg: print(f"[watch runs] {msg}", file=sys.__stderr__, flush=True))


@pytest.fixture(scope="session")
def watch_multirank():
    """Real 2-rank `msoverflow watch --on-event stop` runs under msrun (tests/support/gen_watch_multirank.py): case
    name -> its directory."""
    from tests.support import gen_watch_multirank
    if not mindspore_available():
        pytest.skip("mindspore is not installed")
    return gen_watch_multirank.ensure_runs()


@pytest.fixture(scope="session")
def hunt_runs():
    """Real `msoverflow hunt` and `run --two-pass` runs (tests/support/gen_hunt_runs.py): case name -> its directory
    (report.json, run.log, case.json and the hunt's or dump's folder), generated once and cached."""
    from tests.support import gen_hunt_runs
    if not gen_hunt_runs.available():
        pytest.skip("mindspore is not installed")
    return gen_hunt_runs.ensure_cases(
        progress=lambda msg: print(f"[hunt runs] {msg}", file=sys.__stderr__, flush=True))


@pytest.fixture(scope="session")
def dumpobj_dumps():
    """Real PyNative and inputs-only CPU runs for how a dump's files are told (tests/support/gen_dumpobj_dumps.py),
    generated once (about 40 s on 2 cores) and cached under .fixture-cache/dumpobj/<key>/."""
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_dumpobj_dumps
    return gen_dumpobj_dumps.ensure_cases(
        progress=lambda msg: print(f"[dumpobj dumps] {msg}", file=sys.__stderr__, flush=True))
