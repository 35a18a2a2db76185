"""Consolidation onto cheaper nodes (`Policy.scale_down_replace_with_cheaper`, D48): the removal simulation takes the
dearest pools' candidates first, so a small GPU job on a big node moves to an empty node of a cheaper pool, which is
kept, instead of that empty node going first and the big node staying for the job."""

from __future__ import annotations

from gpuscale.engine.policy import Policy
from gpuscale.engine.reasons import ReasonCode
from gpuscale.model.pool import NodePool
from tests.engine.test_scaledown import codes, node, pod, removed, run

BIG = node("a100-8g-1", cpu="96", memory="680Gi", gpus=8, pool="a100-8g")
SMALL = node("a100-1g-1", cpu="12", memory="85Gi", gpus=1, pool="a100-1g")
JOB = pod("infer-1", "a100-8g-1", cpu="4", memory="16Gi", gpus=1)
POOLS = {"a100-8g": NodePool(name="a100-8g", allocatable=BIG.allocatable, gpus_per_node=8, usd_per_hour=29.39),
         "a100-1g": NodePool(name="a100-1g", allocatable=SMALL.allocatable, gpus_per_node=1, usd_per_hour=3.67)}


def test_a_small_job_on_a_big_node_moves_to_the_empty_cheaper_node_which_stays() -> None:
    result = run([BIG, SMALL], [JOB], pools=POOLS)
    assert removed(result) == ["a100-8g-1"]
    (removal,) = result.removals
    assert removal.evict == ("default/infer-1",)
    assert ReasonCode.NO_PLACE_TO_MOVE in codes(result.blocked, "a100-1g-1")  # it now holds the moved job


def test_without_the_option_the_empty_node_goes_first_as_in_cluster_autoscaler() -> None:
    result = run([BIG, SMALL], [JOB], pools=POOLS, policy=Policy(scale_down_replace_with_cheaper=False))
    assert removed(result) == ["a100-1g-1"]
    assert ReasonCode.NO_PLACE_TO_MOVE in codes(result.blocked, "a100-8g-1")


def test_pools_of_one_price_keep_the_usual_order() -> None:
    same = {name: NodePool(name=name, allocatable=p.allocatable, gpus_per_node=p.gpus_per_node, usd_per_hour=5.0)
            for name, p in POOLS.items()}
    assert removed(run([BIG, SMALL], [JOB], pools=same)) == ["a100-1g-1"]
