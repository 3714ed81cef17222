"""The judgement's rule table (msoverflow/judgement/): the docs show it as it is, each rule names its evidence,
and the order decides."""
import os

from msoverflow.judgement import RULES, Evidence, judge
from msoverflow.judgement.table import USES, table_markdown
from msoverflow.model import (
    INVALID,
    ORIGIN,
    OVERFLOW,
    Cause,
    Finding,
    History,
    Series,
    TensorStats,
    TensorSummary,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_docs_show_the_rule_table_in_order():
    with open(os.path.join(ROOT, "docs", "how-analyze-decides.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("<!-- rule table:")
    body = text[text.index("\n", start) + 1:text.index("<!-- end of rule table -->")].strip()
    assert body == table_markdown()


def test_every_rule_names_the_evidence_it_reads():
    fields = set(Evidence.__dataclass_fields__)
    for fn in RULES:
        assert USES.get(fn.__name__), fn.__name__
        assert set(USES[fn.__name__]) <= fields, fn.__name__


def _finding(kind=OVERFLOW, nan=0, posinf=1, op_type="MatMul", forward_op=None):
    out = TensorSummary(slot=0, io="output", dtype="float16", shape=(2,),
                        stats=TensorStats(count=2, nan=nan, posinf=posinf))
    return Finding(rank=0, graph="0", step=3, op_type=op_type, op_name="Default/MatMul-op0", role=ORIGIN, kind=kind,
                   detail="", timestamp=0, outputs=[out], recommendation="Compute the region in float32.",
                   advice="overflow", forward_op=forward_op)


def test_an_earlier_onset_makes_the_cause_dynamics_over_the_recompute_and_no_patch():
    grow = Series(name="fc.weight", kind="parameter", steps=[0, 1, 2, 3], max_abs=[0.2, 3.0, 300.0, 3e4],
                  trend="growing", since=1)
    e = Evidence(verdict="anomaly", origin=_finding(), cause=Cause("precision", "overflows float16"),
                 history=History(rank=0, step=3, series=[grow], summary="fc.weight growing", earlier_cause=True))
    c = judge(e)
    assert (c.rule, c.cause, c.patch, c.next_command) == ("dynamics", "dynamics", "", "")
    assert "learning rate" in c.fix[0] and "float32" not in c.fix[0]
    assert c.used == ["origin", "history", "cause"]


def test_an_applied_update_names_the_skip_beside_the_precision_fix():
    e = Evidence(verdict="anomaly", origin=_finding(), cause=Cause("precision", "overflows float16"),
                 update_applied=True, updated=["fc.weight"])
    c = judge(e)
    assert c.rule == "update_applied" and c.cause == "precision" and c.patch == "precision"
    assert "skip" in c.fix[0] and "float32" in c.fix[1]


def test_nan_is_called_nan_and_clean_has_no_next_command():
    c = judge(Evidence(verdict="anomaly", origin=_finding(kind=INVALID, nan=2, posinf=0),
                       cause=Cause("device", "recomputed finite")))
    assert c.kind == "NaN" and c.rule == "cause_device" and not c.patch_may_act
    clean = judge(Evidence(verdict="clean", origin=None))
    assert clean.rule == "clean" and clean.next_command == "" and clean.fix == [] and clean.harmful is False


def test_a_forward_input_that_jumps_at_the_step_is_data():
    jump = Series(name="input 0 of MatMul", kind="input", steps=[0, 1, 2, 3], max_abs=[2.3, 2.2, 2.4, 6.5e4],
                  trend="jump", since=3)
    e = Evidence(verdict="anomaly", origin=_finding(), cause=Cause("precision", "overflows float16"),
                 history=History(rank=0, step=3, series=[jump], summary="jumped", earlier_cause=False))
    assert judge(e).rule == "data_jump"
    backward = Evidence(verdict="anomaly", origin=_finding(forward_op="MatMul"),
                        cause=Cause("precision", "overflows float16"),
                        history=History(rank=0, step=3, series=[jump], summary="jumped", earlier_cause=False))
    assert judge(backward).rule == "cause_precision"
