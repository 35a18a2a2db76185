"""The controller's plan-item log lines: every action each tick, a verdict only when it is new or changed."""

from __future__ import annotations

from gpuscale.controller import PlanItemLog
from gpuscale.engine.plan import Plan, PodVerdict, Removal, ScaleUp
from gpuscale.engine.reasons import Reason, ReasonCode


def _pending(code: ReasonCode) -> PodVerdict:
    return PodVerdict(pod="ml/train-0", reasons=(Reason(code, "why", {"gpus": 8}),))


def test_actions_every_tick_verdicts_when_they_change() -> None:
    up = ScaleUp(pool="a100", nodes=2, pods=("ml/train-0",), reasons=(Reason(ReasonCode.SCALE_UP, "2 nodes",
                                                                             {"nodes": 2}),))
    log = PlanItemLog()
    first = log.lines(Plan(scale_up=(up,), unplaceable=(_pending(ReasonCode.NO_POOL_FITS),)), 100.0)
    assert [(i["kind"], i.get("pool"), i.get("pod")) for i in first] == [("scale_up", "a100", None),
                                                                        ("unplaceable", None, "ml/train-0")]
    assert first[0] | {"reasons": None} == {
        "msg": "plan item", "now": 100.0, "kind": "scale_up", "pool": "a100", "nodes": 2, "pods": ["ml/train-0"],
        "codes": ["ScaleUp"], "reasons": None}
    assert first[1]["reasons"] == [{"code": "NoPoolFits", "message": "why", "numbers": {"gpus": 8}}]
    again = log.lines(Plan(scale_up=(up,), unplaceable=(_pending(ReasonCode.NO_POOL_FITS),)), 110.0)
    assert [i["kind"] for i in again] == ["scale_up"]  # the same verdict is not repeated
    changed = log.lines(Plan(unplaceable=(_pending(ReasonCode.LIMIT_REACHED),)), 120.0)
    assert [i["codes"] for i in changed] == [["LimitReached"]]
    assert log.lines(Plan(), 130.0) == []
    back = log.lines(Plan(unplaceable=(_pending(ReasonCode.LIMIT_REACHED),)), 140.0)
    assert len(back) == 1  # gone for a tick and back: new again


def test_a_removal_names_node_pool_and_evictions() -> None:
    removal = Removal(node="t4-1", pool="t4", evict=("web/a",), reasons=(Reason(ReasonCode.UNDERUTILIZED, "low"),))
    (line,) = PlanItemLog().lines(Plan(scale_down=(removal,)), 5.0)
    assert (line["kind"], line["node"], line["pool"], line["evict"], line["codes"]) == (
        "scale_down", "t4-1", "t4", ["web/a"], ["Underutilized"])
