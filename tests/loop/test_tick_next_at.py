"""When the next tick next matters (`TickReport.next_at_s`): the plan's time while the tick only watched, at once
after a tick that acted or changed the engine state (the next decision reads what it did), and in the controller's
tick log line as `next_at`."""

from __future__ import annotations

from gpuscale.controller import report_fields
from gpuscale.engine.plan import Plan, ScaleUp
from gpuscale.engine.reasons import Reason, ReasonCode
from tests.fakes import T0
from tests.loop.test_tick import world

R = (Reason(ReasonCode.SCALE_UP, "test"),)


def test_a_tick_that_only_watches_says_the_plans_time_and_logs_it() -> None:
    report = world(Plan(next_at_s=T0 + 120)).autoscaler.tick()
    assert report.next_at_s == T0 + 120
    assert report_fields(report)["next_at"] == T0 + 120
    quiet = world(Plan()).autoscaler.tick()
    assert quiet.next_at_s is None and "next_at" not in report_fields(quiet)


def test_a_tick_that_scaled_up_or_backed_a_pool_off_matters_again_at_once() -> None:
    up = Plan(scale_up=(ScaleUp(pool="cpu-general", nodes=1, pods=(), reasons=R),), next_at_s=T0 + 600)
    done = world(up).autoscaler.tick()
    assert done.scaled_up and done.next_at_s == done.now_s
    refused = world(up, stockout_pools={"cpu-general"}).autoscaler.tick()
    assert not refused.scaled_up and refused.errors and refused.next_at_s == refused.now_s


def test_a_tick_that_acted_still_wakes_an_event_driven_runner_at_the_plans_time() -> None:
    """A batch window the plan closes at T0 + 600 must not be lost because the same tick scaled up: the controller
    and the twin wake at `wake_at_s` (they do not tick again at once; their next tick reads what this one did)."""
    up = Plan(scale_up=(ScaleUp(pool="cpu-general", nodes=1, pods=(), reasons=R),), next_at_s=T0 + 600)
    done = world(up).autoscaler.tick()
    assert done.next_at_s == done.now_s and done.wake_at_s == T0 + 600
    assert world(Plan(next_at_s=T0 + 120)).autoscaler.tick().wake_at_s == T0 + 120
    assert world(Plan()).autoscaler.tick().wake_at_s is None


def test_a_tick_that_could_not_read_the_cluster_tries_again_at_once() -> None:
    w = world(Plan(next_at_s=T0 + 600))
    w.cluster.not_synced = True
    report = w.autoscaler.tick()
    assert not report.synced and report.next_at_s == report.now_s
