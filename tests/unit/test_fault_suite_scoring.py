"""The fault suite's scorer (benchmarks/faults/suite.py) on hand-made report dicts: no MindSpore run."""
from benchmarks.faults import suite

TRUTH = {"fault": "overflow", "where": "network._backbone.layers.1.attn", "op_type": "BatchMatMul", "rank": 0,
         "step": 1}


def _report(verdict="anomaly", **first):
    base = {"op_type": "BatchMatMul", "cell": "network._backbone.layers.1.attn", "rank": 0, "iteration": 1,
            "cause": "precision"}
    return {"verdict": verdict, "first": {**base, **first} if verdict == "anomaly" else None}


def test_origin_needs_op_cell_rank_and_step():
    assert suite.score_case("overflow", TRUTH, _report())["origin"]
    for wrong in ({"op_type": "Cast"}, {"cell": "network._backbone.layers.0.attn"}, {"rank": 1}, {"iteration": 0}):
        assert not suite.score_case("overflow", TRUTH, _report(**wrong))["origin"], wrong


def test_cause_follows_the_written_mapping():
    assert suite.score_case("overflow", TRUTH, _report())["cause"]
    assert not suite.score_case("overflow", TRUTH, _report(cause="domain"))["cause"]
    assert suite.score_case("lr_blowup", TRUTH, _report(cause="dynamics"))["cause"]
    assert not suite.score_case("bitflip", TRUTH, _report(cause="unknown"))["cause"]


def test_a_missed_fault_scores_nothing_and_a_clean_control_alarms_on_anything_but_clean():
    missed = suite.score_case("overflow", TRUTH, {"verdict": "clean", "first": None})
    assert not missed["origin"] and not missed["cause"]
    assert not suite.score_case("clean", {}, {"verdict": "clean"})["false_alarm"]
    assert suite.score_case("clean", {}, {"verdict": "inconclusive"})["false_alarm"]
    assert suite.score_case("clean", {}, _report())["false_alarm"]


def test_table_counts_per_class():
    rows = [{"fault": "overflow", "origin": True, "cause": False, "false_alarm": False, "said": {"verdict": "anomaly"}},
            {"fault": "overflow", "origin": True, "cause": True, "false_alarm": False, "said": {"verdict": "anomaly"}},
            {"fault": "clean", "origin": None, "cause": None, "false_alarm": True, "said": {"verdict": "anomaly"}}]
    lines = {line["class"]: line for line in suite.table(rows)}
    assert (lines["overflow"]["origin"], lines["overflow"]["cause"]) == (100.0, 50.0)
    assert lines["clean"]["false_alarms"] == 1


def test_every_class_has_an_expected_cause_and_the_ci_subset_names_real_cases():
    assert set(suite.EXPECTED_CAUSES) == set(suite.CLASSES) - {"clean"}
    assert {c.name for c in suite.select(suite.CI_SUBSET)} == set(suite.CI_SUBSET)
    assert {c.fault for c in suite.select(suite.CI_SUBSET)} == set(suite.CLASSES)


def test_ci_bars_fail_a_class_under_95_origin_or_85_cause_and_any_false_alarm():
    def line(fault, **kw):
        return {"class": fault, "cases": 20, "run_failures": 0, "origin": 100.0, "cause": 100.0,
                "false_alarms": None, **kw}
    assert suite.below_bar(line("overflow")) == []
    assert suite.below_bar(line("overflow", origin=95.0, cause=85.0)) == []
    assert suite.below_bar(line("overflow", origin=94.9)) == ["origin right 94.9% < 95%"]
    assert suite.below_bar(line("overflow", cause=84.9)) == ["cause right 84.9% < 85%"]
    assert suite.below_bar(line("overflow", cases=0)) == ["no case was scored"]
    assert suite.below_bar(line("overflow", run_failures=1)) == ["1 run(s) failed"]
    assert suite.below_bar(line("clean", origin=None, cause=None, false_alarms=0)) == []
    assert suite.below_bar(line("clean", origin=None, cause=None, false_alarms=1)) == ["1 false alarm(s)"]
    # from scored rows, as the CI test computes them
    rows = [{"fault": "bitflip", "origin": i < 18, "cause": True, "false_alarm": False,
             "said": {"verdict": "anomaly"}} for i in range(20)]
    assert suite.below_bar(suite.table(rows)[0]) == ["origin right 90.0% < 95%"]
