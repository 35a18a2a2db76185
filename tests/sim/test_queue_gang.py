"""Property: through the whole twin (queues, scheduler, autoscaler, cloud with stockouts), a gang never runs partially
— no pod of a queued job exists, let alone runs, unless all of the job's pods were admitted together, and it runs only
while that admission holds — and quotas are never exceeded beyond the borrowing and lending limits.

The audit is independent of the quota code under test: it replays the queue manager's admit/release log against the
scenario's quotas, and matches every pod the run recorded to the admission that created it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any, ClassVar
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscale.sim import run as run_module
from gpuscale.sim.cloud import Spell
from gpuscale.sim.queueing import QueueManager
from gpuscale.sim.run import simulate
from tests.sim.test_queue_twin import POLICY, job, queues, setup

TEAMS = ("vision", "nlp", "other")


class RecordingManager(QueueManager):
    made: ClassVar[list[QueueManager]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        RecordingManager.made.append(self)


jobs_strategy = st.lists(st.tuples(st.sampled_from(TEAMS), st.integers(0, 7200), st.sampled_from([1, 2, 4, 8]),
                                   st.integers(1, 3), st.integers(0, 2), st.integers(600, 5400)),
                         min_size=1, max_size=9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=jobs_strategy, nominal=st.sampled_from([8, 16, 24]), nlp_nominal=st.sampled_from([0, 8, 16]),
       borrowing=st.sampled_from([None, 0, 8]), max_nodes=st.integers(1, 4), stockout=st.booleans(),
       timeout=st.sampled_from([None, 600, 1800]))
def test_a_gang_never_runs_partially_and_quotas_hold(specs: list[tuple[str, int, int, int, int, int]], nominal: int,
                                                     nlp_nominal: int, borrowing: int | None, max_nodes: int,
                                                     stockout: bool, timeout: int | None) -> None:
    jobs = tuple(job(f"j{i}", team, float(submit), gpus=gpus, pods=pods if gpus == 8 else 1, priority=priority,
                     duration_s=float(duration))
                 for i, (team, submit, gpus, pods, priority, duration) in enumerate(specs))
    ready = {"timeout": timeout, "requeuingStrategy": {"backoffBaseSeconds": 30}} if timeout else None
    spec = queues(nominal=nominal, nlp_nominal=nlp_nominal, borrowing=borrowing, ready=ready, max_nodes=max_nodes)
    twin = setup(jobs, spec, max_nodes=max_nodes, hours=4)
    if stockout:
        twin = replace(twin, spells=(Spell(pool="a100", start_s=0.0, end_s=1800.0),))
    RecordingManager.made.clear()
    with mock.patch.object(run_module, "QueueManager", RecordingManager):
        result = simulate(twin, POLICY)
    (manager,) = RecordingManager.made
    by_job = {f"{j.team}/{j.name}": j for j in jobs}

    # 1. Replay the quota log: every (queue, flavor, resource) within its limits at every change.
    quota = {(q.name, fq.flavor, r): (q.cohort, qq) for q in spec.cluster_queues for g in q.groups
             for fq in g.flavors for r, qq in fq.quotas.items()}
    used: dict[tuple[str, str, str], int] = defaultdict(int)
    admissions: dict[str, list[list[Any]]] = defaultdict(list)
    for event in manager.log:
        sign = 1 if event.kind == "admit" else -1
        for flavor, resource, amount in event.usage:
            used[(event.cq, flavor, resource)] += sign * amount
        if event.kind == "admit":
            wanted = by_job[event.key]
            assert sum(a for _, _, a in event.usage) == wanted.pods * wanted.requests.gpu_count()
            assert len(event.pods) == wanted.pods  # the whole gang, created in one admission
            admissions[event.key].append([event.t_s, None, set(event.pods)])
        else:
            admissions[event.key][-1][1] = event.t_s
        drawn: dict[tuple[str | None, str, str], int] = defaultdict(int)
        pool: dict[tuple[str | None, str, str], int] = defaultdict(int)
        for (cq, flavor, resource), (cohort, q) in quota.items():
            amount = used[(cq, flavor, resource)]
            assert amount >= 0
            cap = q.nominal if cohort is None else q.nominal + (q.borrowing_limit if q.borrowing_limit is not None
                                                                 else 10**9)
            assert amount <= cap, (event, cq, amount, cap)
            if cohort is not None:
                drawn[(cohort, flavor, resource)] += max(0, amount - (q.nominal - q.lendable))
                pool[(cohort, flavor, resource)] += q.lendable
        assert all(drawn[k] <= pool[k] for k in drawn)

    # 2. Every pod of a queued job was created while an admission of its whole gang held, with all its siblings
    # (the first pods by the admission itself; after a pod loss the job recreates the whole gang under the same
    # admission, as the Job controller does while Kueue keeps the workload admitted), and ran only while it held.
    attempts: dict[tuple[str, str], list[float]] = defaultdict(list)
    for record in result.pods:
        team, name = record.key.split("/", 1)
        owner = next((k for k in by_job if k.startswith(f"{team}/") and name.startswith(k.split("/")[1] + "-")), None)
        assert owner is not None
        attempts[(owner, name.rsplit("-", 1)[0])].append(record.created_s)
        if team == "other":
            assert owner not in admissions  # no LocalQueue: Kueue leaves the job alone
            continue
        holding = [a for a in admissions[owner] if a[0] <= record.created_s and (a[1] is None
                                                                                  or record.created_s < a[1])]
        if not holding:  # admitted and preempted at one instant (a reclaiming queue's turn came next): the pods that
            # admission created lived for no time, and they are its own
            holding = [a for a in admissions[owner] if a[0] == record.created_s == a[1] and record.key in a[2]]
        assert len(holding) == 1, record
        admitted_s, released_s, first_pods = holding[0]
        assert record.created_s > admitted_s or record.key in first_pods
        if record.running_s is not None:
            assert released_s is None or record.running_s <= released_s
    for (owner, _), created in attempts.items():
        assert len(created) == by_job[owner].pods and len(set(created)) == 1  # a gang is created whole, at once
