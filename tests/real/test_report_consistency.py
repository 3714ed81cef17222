"""Every line of a report agrees (msoverflow/render/consistency.py), on every real MindSpore fixture: the
single-rank cases, the multi-rank (msrun) cases, the msprobe cases, the judgement's and the upstream causes' cases;
--strict too. The fuzz corpus's cases are
checked in tests/fuzz/test_corpus_consistency.py."""
import pytest

import msoverflow
from msoverflow.render.consistency import check


def _each(dumps):
    for name in dumps:
        if dumps.case(name).get("ok") if hasattr(dumps, "case") else True:
            yield name, dumps[name]


def test_every_single_rank_fixture_agrees_with_itself(real_dumps):
    problems = {}
    for name, path in _each(real_dumps):
        for strict in (False, True):
            report = msoverflow.analyze(str(path), strict=strict, progress=False)
            found = check(report)
            if found:
                problems[f"{name}{' --strict' if strict else ''}"] = found
    assert problems == {}


@pytest.mark.mindspore          # the fixture is asked for by name below: the conftest hook does not see it
@pytest.mark.parametrize("fixture", ["judge_cases", "upstream_dumps", "dumpobj_dumps"])
def test_every_judgement_upstream_and_dump_files_fixture_agrees_with_itself(request, fixture):
    dumps = request.getfixturevalue(fixture)
    problems = {}
    for name, path in _each(dumps):
        for strict in (False, True):
            found = check(msoverflow.analyze(str(path), strict=strict, progress=False))
            if found:
                problems[f"{name}{' --strict' if strict else ''}"] = found
    assert problems == {}


def test_every_multi_rank_fixture_agrees_with_itself(multirank_dumps):
    problems = {name: check(msoverflow.analyze(str(path), progress=False)) for name, path in _each(multirank_dumps)}
    assert {name: found for name, found in problems.items() if found} == {}


def test_every_msprobe_fixture_agrees_with_itself(msprobe_dumps):
    problems = {}
    for name, path in msprobe_dumps.items():
        dump = path / "dump" if (path / "dump").is_dir() else path
        try:
            report = msoverflow.analyze(str(dump), progress=False)
        except msoverflow.errors.UserError:      # a case that is no dump on its own (a pair's half)
            continue
        found = check(report)
        if found:
            problems[name] = found
    assert problems == {}


@pytest.mark.parametrize("what", ["clean", "nan"])
def test_the_check_can_fail(real_dumps, what):
    """The check is no test that cannot fail: a report edited to contradict itself is caught."""
    import dataclasses
    if what == "clean":
        report = msoverflow.analyze(str(real_dumps["clean_fp32"]), progress=False)
        c = dataclasses.replace(report.conclusion, next_command="msoverflow patch --from {report}")
        assert "a clean report carries a fix, a patch or a next command" in check(dataclasses.replace(report,
                                                                                                     conclusion=c))
    else:
        report = msoverflow.analyze(str(real_dumps["sqrt_negative"]), progress=False)
        c = dataclasses.replace(report.conclusion, kind="invalid")
        assert any("the value is NaN" in p for p in check(dataclasses.replace(report, conclusion=c)))
