"""Event wording (CA's), pool sizes for it, and the per-pod rate limit."""

from __future__ import annotations

from gpuscale.engine.plan import Snapshot, UpcomingNode
from gpuscale.engine.reasons import Reason, ReasonCode
from gpuscale.loop import events as ev
from gpuscale.model.cluster import Cluster
from tests.fakes import T0, make_pool, node_of

POOL = make_pool("gpu-training-a100", gpus=8)


def test_wording_matches_cluster_autoscaler() -> None:
    change = ev.GroupChange(pool="gpu-training-a100", before=0, after=1, max_size=8)
    assert ev.triggered_scale_up(change) == "pod triggered scale-up: [gpu-training-a100 0->1 (max: 8)]"
    assert ev.scaled_up_group(change) == "Scale-up: setting group gpu-training-a100 size to 1 instead of 0 (max: 8)"
    reasons = (Reason(ReasonCode.NO_POOL_FITS, "1 max node group size reached"),
               Reason(ReasonCode.POOL_BACKOFF, "1 in backoff after failed scale-up"))
    assert ev.not_triggered(reasons) == ("pod didn't trigger scale-up: 1 max node group size reached; "
                                         "1 in backoff after failed scale-up")


def test_pool_sizes_count_registered_and_upcoming_nodes() -> None:
    snapshot = Snapshot(cluster=Cluster(nodes=(node_of(POOL, "a"), node_of(POOL, "b"))),
                        upcoming=(UpcomingNode(pool="gpu-training-a100", request_id="r", requested_s=T0),
                                  UpcomingNode(pool="cpu", request_id="s", requested_s=T0)),
                        node_pools={"b": "renamed"})
    assert ev.pool_sizes(snapshot) == {"gpu-training-a100": 2, "renamed": 1, "cpu": 1}


def test_limiter() -> None:
    limiter = ev.EventLimiter(300)
    assert limiter.allow("a", T0) and not limiter.allow("a", T0 + 299) and limiter.allow("a", T0 + 300)
    assert limiter.allow("b", T0)
    limiter.forget_except(["b"])
    assert len(limiter) == 1 and limiter.allow("a", T0 + 301)
