"""The queueing layer in the twin: jobs suspended until admitted, preemption and waitForPodsReady through the real
workload, scheduler and autoscaler path; the bundled two-team scenario and its report; scenario and CSV input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from gpuscale.cli import app
from gpuscale.engine.policy import Policy
from gpuscale.model.errors import ConfigError
from gpuscale.model.pod import SchedulingConstraints
from gpuscale.model.resources import Resources
from gpuscale.model.selectors import NodeAffinity
from gpuscale.report.html import render_html
from gpuscale.report.twin import print_summary, result_json
from gpuscale.sim.cloud import CloudPool
from gpuscale.sim.profiles import PROFILES
from gpuscale.sim.queue_config import QueuesConfig, QueueSpec, build_queue_spec
from gpuscale.sim.run import TwinPolicy, TwinSetup, simulate
from gpuscale.sim.scenario import load_scenario, parse_scenario, policy_named
from gpuscale.sim.traces import GKE_PLACEMENT, read_jobs, write_jobs
from gpuscale.sim.workloads import JobSpec
from tests.sim.runs import short_run_json
from tests.sim.test_twin import CPU_POOL, GI, TOLERATE, a100_pool

TEAMS_YAML = Path(__file__).parents[2] / "src" / "gpuscale" / "data" / "scenarios" / "teams.yaml"
ON_A100 = SchedulingConstraints(affinity=NodeAffinity(node_selector=(("accelerator", "a100"),)), tolerations=TOLERATE)
POLICY = TwinPolicy(name="gpuscale", policy=Policy())


def queues(*, nominal: int = 16, nlp_nominal: int | None = None, borrowing: int | None = None,
           cohort: str | None = "research", ready: dict[str, Any] | None = None,
           within: str = "LowerPriority", reclaim: str = "Any", max_nodes: int = 8) -> QueueSpec:
    def cq(name: str, gpus: int) -> dict[str, Any]:
        resource: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
        if borrowing is not None:
            resource["borrowingLimit"] = borrowing
        return {"name": name, **({"cohort": cohort} if cohort else {}),
                "preemption": {"withinClusterQueue": within, "reclaimWithinCohort": reclaim},
                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                    "flavors": [{"name": "a100", "resources": [resource]}]}]}
    raw = {"resourceFlavors": [{"name": "a100", "nodeLabels": {"accelerator": "a100"}}],
           "clusterQueues": [cq("vision", nominal), cq("nlp", nominal if nlp_nominal is None else nlp_nominal)],
           "localQueues": [{"name": "vision", "clusterQueue": "vision"}, {"name": "nlp", "clusterQueue": "nlp"}],
           **({"waitForPodsReady": ready} if ready else {})}
    return build_queue_spec(QueuesConfig.model_validate(raw), "queues",
                            [CPU_POOL, replace(a100_pool("a100", "zone-a"), max_size=max_nodes)])


def job(name: str, team: str, submit_s: float, *, pods: int = 1, gpus: int = 8, duration_s: float = 3600,
        priority: int = 0, checkpoint_s: float = 600) -> JobSpec:
    return JobSpec(name=name, team=team, submit_s=submit_s, pods=pods, duration_s=duration_s,
                   checkpoint_s=checkpoint_s, priority=priority, constraints=ON_A100, image_bytes=12 * 10**9,
                   requests=Resources.of({"cpu": 8000, "memory": 60 * GI, "nvidia.com/gpu": gpus}))


def setup(jobs: tuple[JobSpec, ...], spec: QueueSpec | None, *, max_nodes: int = 8, hours: float = 6) -> TwinSetup:
    pools = (CloudPool(pool=CPU_POOL, profile=PROFILES["cpu"], stockout_probability=0.0),
             CloudPool(pool=replace(a100_pool("a100", "zone-a"), max_size=max_nodes), profile=PROFILES["gpu-large"],
                       stockout_probability=0.0))
    return TwinSetup(name="q", pools=pools, jobs=jobs, duration_s=hours * 3600, seed=5, queues=spec)


def test_a_job_over_its_quota_waits_suspended_without_pods_and_runs_when_quota_frees() -> None:
    jobs = (job("first", "vision", 0.0, pods=2), job("second", "vision", 60.0, pods=2))
    result = simulate(setup(jobs, queues(cohort=None, reclaim="Never")), POLICY)
    second = [p for p in result.pods if p.key.startswith("vision/second")]
    first = [p for p in result.pods if p.key.startswith("vision/first")]
    assert len(second) == 2 and len(first) == 2
    first_done = max(p.running_s or 0.0 for p in first) + 3600
    # second's pods were only created once first released its quota: no pods, hence no scale-up, while queued
    assert all(p.created_s >= first_done - 1e-6 for p in second)
    vision = result.teams["vision"]
    assert vision.admissions == 2 and vision.borrowed_admissions == 0
    assert max(vision.queue_wait_s) >= first_done - 60.0 - 1e-6
    # first waited for two new A100 nodes; second reused them (still there when first released its quota), with its
    # image already on them: only the warm container start (at most its cap) stood between admission and running
    assert len(vision.scale_up_wait_s) == 2 and vision.scale_up_wait_s[0] > 300
    assert all(p.new_node for p in first) and not any(p.new_node for p in second)
    assert vision.scale_up_wait_s[1] <= PROFILES["gpu-large"].start(warm=True).cap + 1.0
    held = [max(p.running_s or 0.0 for p in pods) + 3600 - min(p.created_s for p in pods) for pods in (first, second)]
    assert vision.admitted_gpu_hours == pytest.approx(16 * sum(held) / 3600)


def test_a_team_borrows_idle_quota_and_the_lender_reclaims_it_by_preemption() -> None:
    jobs = (job("big", "vision", 0.0, pods=3, duration_s=8 * 3600, checkpoint_s=1800),
            job("mine", "nlp", 2 * 3600, pods=2))
    result = simulate(setup(jobs, queues(), hours=5), POLICY)
    vision, nlp = result.teams["vision"], result.teams["nlp"]
    assert vision.borrowed_admissions >= 1 and vision.preemptions == 1
    assert nlp.preemptions == 0 and nlp.admissions == 1 and nlp.queue_wait_s == (0.0,)
    assert result.lost_gpu_hours > 0  # the work since vision's last checkpoint
    assert any(n.kind == "preempted" and "vision/big" in n.message and "nlp/mine" in n.message
               for n in result.notable)
    # vision comes back only once nlp's hour of work is done: 24 GPUs need 8 of nlp's quota
    assert vision.admissions == 2 and vision.queue_wait_s[0] == 0.0 and vision.queue_wait_s[1] > 3600


def test_pods_not_ready_in_time_are_evicted_and_requeued_with_exponential_backoff() -> None:
    ready = {"timeout": "10m", "requeuingStrategy": {"backoffBaseSeconds": 60, "backoffLimitCount": 2}}
    # Quota admits the 2-node gang but the pool has one node: the pods never all run.
    result = simulate(setup((job("gang", "vision", 0.0, pods=2),), queues(ready=ready, max_nodes=1), max_nodes=1,
                            hours=3), POLICY)
    vision = result.teams["vision"]
    assert vision.requeues == 3 and vision.deactivated == 1 and vision.admissions == 3
    assert vision.scale_up_wait_s == ()
    times = [n.t_s for n in result.notable if n.kind in ("requeued", "deactivated")]
    # admitted at 0, evicted at 600; readmitted after 60 s backoff, evicted 600 s later; then 120 s, 600 s.
    assert times == pytest.approx([600.0, 1260.0, 1980.0])
    assert [n.kind for n in result.notable if n.kind in ("requeued", "deactivated")][-1] == "deactivated"
    assert sorted(vision.queue_wait_s) == pytest.approx([0.0, 60.0, 120.0])


def test_higher_priority_work_preempts_lower_priority_work_of_the_same_queue() -> None:
    jobs = (job("low", "vision", 0.0, pods=2, priority=0, duration_s=4 * 3600),
            job("high", "vision", 3600.0, pods=2, priority=10))
    result = simulate(setup(jobs, queues(cohort=None, reclaim="Never")), POLICY)
    assert result.teams["vision"].preemptions == 1
    high = [p for p in result.pods if p.key.startswith("vision/high")]
    assert high and all(p.running_s is not None for p in high)


def test_teams_without_a_local_queue_are_left_alone() -> None:
    jobs = (job("solo", "other", 0.0, pods=2),)
    with_queues = simulate(setup(jobs, queues()), POLICY)
    without = simulate(setup(jobs, None), POLICY)
    assert with_queues.teams == {}
    assert json.dumps(result_json(with_queues, include_wall=False)) == json.dumps(
        result_json(without, include_wall=False))


def test_the_teams_scenario_reports_queue_and_scale_up_wait_per_team() -> None:
    first = short_run_json("teams", hours=8)
    teams = json.loads(first)["teams"]
    assert sorted(teams) == ["nlp", "vision"]
    for stats in teams.values():
        assert stats["queue_wait_s"]["count"] > 0 and stats["scale_up_wait_s"]["count"] > 0
        assert stats["scale_up_wait_s"]["p50"] > 0 and stats["admitted_gpu_hours"] > 0


def test_the_two_team_acceptance_day_shows_per_team_waits_in_every_report() -> None:
    scenario, config = load_scenario("teams")
    result = simulate(scenario, policy_named("gpuscale", config))
    assert set(result.teams) == {"vision", "nlp"}
    assert sum(t.preemptions for t in result.teams.values()) > 0  # reclaim happened in the day
    assert any(max(t.queue_wait_s) > 0 for t in result.teams.values())  # quota made someone wait
    # nlp's 64-GPU gang exceeds 24 nominal + 16 borrowable: never admitted, and the report says why
    assert result.teams["nlp"].never_admitted == 1
    assert any(n.kind == "queued" and n.message.startswith("nlp/") and "needs 64, 40 available" in n.message
               for n in result.notable)
    console = Console(record=True, width=100)
    print_summary(result, console)
    text = console.export_text()
    assert "queue wait (quota) vs scale-up wait (capacity)" in text
    assert "vision" in text and "nlp" in text
    html = render_html([result], "teams")
    assert "Where each team&#x27;s jobs wait" in html or "Where each team's jobs wait" in html
    assert "<h3>gpuscale: teams</h3>" in html and html.count("<svg") >= 5


def test_simulate_teams_from_the_cli_writes_the_teams_key(tmp_path: Path) -> None:
    raw = yaml.safe_load(TEAMS_YAML.read_text())
    raw["duration"] = "3h"
    path = tmp_path / "teams.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["simulate", str(path), "--quiet", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert set(json.loads(out.read_text())["teams"]) == {"nlp", "vision"}


@pytest.mark.parametrize(("change", "where", "words"), [
    (lambda q: q["clusterQueues"][0]["resourceGroups"][0]["flavors"][0].update(name="h100"),
     "queues.clusterQueues[0].resourceGroups[0].flavors[0].name", "unknown flavor 'h100'"),
    (lambda q: q["localQueues"][0].update(clusterQueue="nope"), "queues.localQueues[0].clusterQueue",
     "unknown ClusterQueue 'nope'"),
    (lambda q: q["resourceFlavors"][0].update(nodeLabels={"x": "y"}), "queues.resourceFlavors[0].nodeLabels",
     "matches no pool"),
    (lambda q: q["clusterQueues"][0].pop("cohort"), "queues.clusterQueues[0].resourceGroups[0].flavors[0].resources[0]",
     "need a cohort"),
    (lambda q: q["clusterQueues"][0]["preemption"].update(withinClusterQueue="Any"),
     "queues.clusterQueues[0].preemption.withinClusterQueue", "expected one of Never, LowerPriority"),
    (lambda q: q["clusterQueues"][0]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota="x"),
     "queues.clusterQueues[0].resourceGroups[0].flavors[0].resources[0].nominalQuota", ""),
    (lambda q: q.update(colour="blue"), "queues.colour", "unknown setting"),
])
def test_bad_queue_settings_name_the_setting(change: Any, where: str, words: str) -> None:
    raw = yaml.safe_load(TEAMS_YAML.read_text())
    change(raw["queues"])
    with pytest.raises(ConfigError) as err:
        parse_scenario(raw, "teams.yaml")
    assert err.value.where == f"teams.yaml: {where}" and words in err.value.problem


def test_the_job_csv_queue_column_picks_a_local_queue(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("name,kind,team,queue,submit_s,duration_s,pods,gpus_per_pod,gpu_milli,gpu_model,cpu_milli,"
                     "memory_mib,priority\n"
                     "a,training,vision,urgent,0,600,1,8,1000,nvidia-tesla-a100,8000,61440,0\n"
                     "b,training,vision,,0,600,1,8,1000,nvidia-tesla-a100,8000,61440,0\n")
    jobs = read_jobs(trace, GKE_PLACEMENT)
    assert [j.queue for j in jobs] == ["urgent", ""]
    again = tmp_path / "again.csv"
    write_jobs(again, jobs)
    assert read_jobs(again, GKE_PLACEMENT) == jobs
    raw = yaml.safe_load(TEAMS_YAML.read_text())
    raw["workload"] = {"trace": str(trace)}
    with pytest.raises(ConfigError) as err:
        parse_scenario(raw, "teams.yaml")
    assert "job a" in err.value.where and "'urgent' is not a LocalQueue of namespace 'vision'" in err.value.problem
    raw["queues"]["localQueues"].append({"name": "urgent", "namespace": "vision", "clusterQueue": "nlp"})
    scenario, _ = parse_scenario(raw, "teams.yaml")
    assert scenario.queues is not None
    assert scenario.queues.cluster_queue_of("vision", "urgent") == "nlp"
    assert scenario.queues.cluster_queue_of("vision", "") == "vision"


def test_cpu_and_memory_quotas_count_in_kubernetes_units_and_hold_back_batch_jobs() -> None:
    raw = {"resourceFlavors": [{"name": "any"}],
           "clusterQueues": [{"name": "etl", "resourceGroups": [{
               "coveredResources": ["cpu", "memory"], "flavors": [{"name": "any", "resources": [
                   {"name": "cpu", "nominalQuota": "12"}, {"name": "memory", "nominalQuota": "64Gi"}]}]}]}],
           "localQueues": [{"name": "etl", "clusterQueue": "etl"}]}
    spec = build_queue_spec(QueuesConfig.model_validate(raw), "queues", [CPU_POOL])
    quota = spec.cluster_queues[0].quota(("any", "cpu")), spec.cluster_queues[0].quota(("any", "memory"))
    assert (quota[0].nominal, quota[1].nominal) == (12_000, 64 * GI)
    batch = tuple(JobSpec(name=f"b{i}", kind="batch", team="etl", submit_s=0.0, duration_s=600.0,
                          requests=Resources.of({"cpu": 4000, "memory": 8 * GI})) for i in range(5))
    result = simulate(setup(batch, spec, hours=1), POLICY)
    etl = result.teams["etl"]
    assert etl.admissions == 5
    assert sorted(etl.queue_wait_s)[:3] == [0.0, 0.0, 0.0] and min(sorted(etl.queue_wait_s)[3:]) >= 600.0
