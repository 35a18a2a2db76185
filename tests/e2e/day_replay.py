"""A compressed demand day replayed on the real control plane, measured from the API objects, and replayed again in
the twin with the same pools, jobs and boot delays (issue 28). Used by `bench/replay.py` (a day, ≤ 20 min) and
`tests/e2e/test_replay.py` (a few minutes of it).

Workload: the bundled `default` scenario's jobs for a seed (training: 1-GPU T4 jobs and A100 jobs, ≥ 8 GPUs as gangs
of 8-GPU pods; batch: CPU jobs), its chat service left out. `day_jobs` keeps a pod budget: GPU jobs take 85 % of it,
CPU jobs the rest, each picked evenly over the day; submission times and run times are divided by `compress`. Images,
checkpoints and priorities are dropped (kwok pulls nothing; a job without checkpoints is protected from scale-down,
D38). Each job is a `batch/v1` Job (`parallelism = completions = pods`) whose pods run for `gpuscale.io/run-for` once
Ready. The harness has no gang scheduler: the pods of an A100 "gang" are placed and run one by one (`job_body`), and
the twin replays them so (`per_pod`).

Measured (`measure`), only from what the API serves — objects and watch events of them:
- a node's creation (`creationTimestamp`), Ready (the Ready condition's `lastTransitionTime`), GPUs registered (the
  first watch event with `nvidia.com/gpu` in allocatable: no field records it) and deletion (the DELETED event);
- a pod's creation, bind (`PodScheduled` True), running (the first Ready=True condition), end (its container's
  `terminated.finishedAt`, or the DELETED event when it was removed before finishing);
- cost and provisioned GPU-hours: each node from creation to deletion (or the end of the run), at its pool's price —
  the twin's count too (it charges from capacity acquired, which is the Node's creation on kwok); allocated
  GPU-hours: each pod's GPUs from bind until it ends; idle = provisioned − allocated;
- pending→running = running − creation; a pod "needed a new node" when it ran on a node the controller added that
  was not yet usable (GPUs registered; Ready for a CPU pool) when the pod was created — what the twin calls a pod
  that waited for a node the autoscaler added.
Timestamps the API stores have whole seconds, so each difference of two carries up to ±1 s.

The twin replay (`twin_replay`) takes the jobs at their measured submission offsets (requests and constraints read
back from a real pod through `pod_from_k8s`), the measured per-pool node start-up samples (created → Ready, Ready →
GPUs) and pod start samples (bind → Ready) as `Empirical` profiles, kube-scheduler's default scoring, the run's
policy and scan interval, and the run's length.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness import wait_for
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from gpuscale.config import Config
from gpuscale.controller import build_controller, run_loop
from gpuscale.kube.convert import pod_from_k8s
from gpuscale.kube.tracer import parse_time
from gpuscale.lifecycle.phases import percentile
from gpuscale.loop.tick import LoopSettings
from gpuscale.model.node import POOL_LABEL
from gpuscale.model.pool import NodePool
from gpuscale.model.resources import NVIDIA_GPU
from gpuscale.providers.kwok import MANAGED_BY, MANAGED_BY_LABEL, KwokProfile, KwokProvider, KwokSettings
from gpuscale.sim.cloud import CloudPool, StartupProfile
from gpuscale.sim.distributions import Empirical, LogNormal
from gpuscale.sim.result import SimResult
from gpuscale.sim.run import TwinPolicy, TwinSetup, simulate
from gpuscale.sim.scenario import load_scenario
from gpuscale.sim.scheduler import Scoring
from gpuscale.sim.workloads import JobSpec

GPU_SHARE = 0.85
"""Of the pod budget, what GPU jobs may take (the rest: CPU jobs)."""
RUN_FOR = "gpuscale.io/run-for"
JOB_LABEL = "gpuscale.io/replay-job"
ZERO = LogNormal(median=0.0, sigma=0.0)


# ------------------------------------------------------------------------------------------------------- workload
def _evenly(jobs: Sequence[JobSpec], budget: int) -> list[JobSpec]:
    """The most jobs, spread evenly over `jobs` (in submission order), whose pods fit `budget`."""
    for count in range(len(jobs), 0, -1):
        picked = [jobs[math.floor(i * len(jobs) / count)] for i in range(count)]
        if sum(j.pods for j in picked) <= budget:
            return picked
    return []


def day_jobs(seed: int, pods: int, compress: float) -> list[JobSpec]:
    """The default scenario's jobs for `seed` within a budget of `pods` pods, times divided by `compress`."""
    setup, _ = load_scenario("default", seed)
    ordered = sorted(setup.jobs, key=lambda j: (j.submit_s, j.name))
    gpu = _evenly([j for j in ordered if j.kind == "training"], round(pods * GPU_SHARE))
    cpu = _evenly([j for j in ordered if j.kind != "training"], pods - sum(j.pods for j in gpu))
    return sorted((replace(j, submit_s=round(j.submit_s / compress, 3), duration_s=max(round(j.duration_s / compress,
                                                                                              3), 1.0),
                           image_bytes=0, checkpoint_s=0.0, priority=0) for j in gpu + cpu),
                  key=lambda j: (j.submit_s, j.name))


def replay_config(unneeded_s: float, *, nominate_pods: bool = True) -> tuple[Config, dict[str, int]]:
    """The default scenario's pools and policy (the `gpuscale` preset keeps them as they are) with every unneeded
    time and the delay after a scale-up at `unneeded_s`, and nominations as `nominate_pods` says; and its initial
    nodes."""
    setup, config = load_scenario("default")
    policy = replace(config.policy, scale_down_unneeded_time_s=unneeded_s, scale_down_gpu_unneeded_time_s=unneeded_s,
                     scale_down_delay_after_add_s=unneeded_s, nominate_pods=nominate_pods)
    return replace(config, policy=policy), dict(setup.initial_nodes)


def _pod_spec(job: JobSpec) -> dict[str, Any]:
    c = job.constraints
    if c.node_name or c.affinity.required_terms or c.pod_affinity or c.pod_anti_affinity or c.topology_spread:
        raise ValueError(f"job {job.name}: only a nodeSelector and tolerations can be replayed")
    requests = {name: (f"{amount}m" if name == "cpu" else str(amount)) for name, amount in job.requests.items}
    tolerations = [{k: v for k, v in (("key", t.key), ("operator", str(t.operator)), ("value", t.value),
                                      ("effect", str(t.effect) if t.effect else "")) if v}
                   for t in c.tolerations]
    limits = {NVIDIA_GPU: requests[NVIDIA_GPU]} if NVIDIA_GPU in requests else {}
    return {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "nodeSelector": dict(c.affinity.node_selector), "tolerations": tolerations,
            "containers": [{"name": "work", "image": f"{job.kind}:replay",
                            "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]}


def job_body(job: JobSpec, namespace: str) -> dict[str, Any]:
    """The `batch/v1` Job that plays `job`: its pods run `duration_s` once Ready (kwok's pod-complete stage). The
    harness has no gang scheduler, so a multi-pod job's pods are placed and run one by one; they carry no pod-group
    label, or the autoscaler would plan all-or-nothing for pods the scheduler places one at a time."""
    labels = {JOB_LABEL: job.name}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job.name, "namespace": namespace, "labels": labels},
            "spec": {"parallelism": job.pods, "completions": job.pods, "backoffLimit": 100,
                     "template": {"metadata": {"labels": labels,
                                               "annotations": {RUN_FOR: f"{job.duration_s:g}s"}},
                                  "spec": _pod_spec(job)}}}


# ------------------------------------------------------------------------------------------------------- recorder
@dataclass
class NodeSeen:
    name: str
    pool: str
    created_s: float
    ready_s: float | None = None
    gpus_s: float | None = None
    deleted_s: float | None = None


@dataclass
class PodSeen:
    key: str
    job: str
    gpus: float
    created_s: float
    node: str | None = None
    bound_s: float | None = None
    running_s: float | None = None
    ended_s: float | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


def _condition_time(obj: Mapping[str, Any], kind: str) -> float | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def _finished(obj: Mapping[str, Any]) -> float | None:
    times = [parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
             for s in (obj.get("status") or {}).get("containerStatuses") or ()]
    return max((t for t in times if t is not None), default=None)


class Recorder:
    """Watches the kwok-managed Nodes and the replay's Pods; keeps per object the milestones above."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.nodes: dict[str, NodeSeen] = {}
        self.pods: dict[str, PodSeen] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        self.threads = [
            threading.Thread(target=self._follow, args=(self.core.list_node, {"label_selector": selector}, self._node),
                             daemon=True),
            threading.Thread(target=self._follow, args=(self.core.list_namespaced_pod, {"namespace": namespace},
                                                        self._pod), daemon=True)]
        self.synced = threading.Barrier(len(self.threads) + 1)

    def start(self) -> Recorder:
        for thread in self.threads:
            thread.start()
        self.synced.wait(60)
        return self

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)

    def _follow(self, lister: Callable[..., Any], kwargs: Mapping[str, Any],
                on: Callable[[str, Mapping[str, Any]], None]) -> None:
        """List, then watch from the list's resourceVersion, resuming where the last watch ended (a new list only
        after 410 Gone), so no DELETED event is missed between two watches."""
        first = True
        while not self.stop.is_set():
            doc = json.loads(lister(**kwargs, _preload_content=False).data)
            for obj in doc.get("items") or ():
                on("ADDED", obj)
            if first:
                self.synced.wait(60)
                first = False
            version = doc["metadata"]["resourceVersion"]
            try:
                while not self.stop.is_set():
                    w = watch.Watch()
                    for event in w.stream(lister, **kwargs, resource_version=version, timeout_seconds=10):
                        on(event["type"], event["raw_object"])
                        if self.stop.is_set():
                            return
                    version = w.resource_version or version
            except ApiException as err:
                if err.status != 410:
                    raise

    def _node(self, kind: str, obj: Mapping[str, Any]) -> None:
        now = time.time()
        meta = obj["metadata"]
        with self.lock:
            seen = self.nodes.get(meta["name"])
            if seen is None:
                created = parse_time(meta.get("creationTimestamp"))
                seen = self.nodes[meta["name"]] = NodeSeen(name=meta["name"],
                                                           pool=(meta.get("labels") or {}).get(POOL_LABEL, ""),
                                                           created_s=created or now)
            if seen.ready_s is None:
                seen.ready_s = _condition_time(obj, "Ready")
            gpus = ((obj.get("status") or {}).get("allocatable") or {}).get(NVIDIA_GPU)
            if seen.gpus_s is None and gpus not in (None, "0"):
                seen.gpus_s = now
            if kind == "DELETED" and seen.deleted_s is None:
                seen.deleted_s = now

    def _pod(self, kind: str, obj: Mapping[str, Any]) -> None:
        now = time.time()
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        with self.lock:
            seen = self.pods.get(key)
            if seen is None:
                requests = ((obj["spec"]["containers"][0].get("resources") or {}).get("requests") or {})
                seen = self.pods[key] = PodSeen(key=key, job=meta.get("labels", {}).get(JOB_LABEL, ""),
                                                gpus=float(requests.get(NVIDIA_GPU, 0)),
                                                created_s=parse_time(meta.get("creationTimestamp")) or now, raw=obj)
            seen.node = obj["spec"].get("nodeName") or seen.node
            seen.bound_s = seen.bound_s or _condition_time(obj, "PodScheduled")
            seen.running_s = seen.running_s or _condition_time(obj, "Ready")
            if seen.ended_s is None:
                seen.ended_s = _finished(obj) if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed") \
                    else None
            if kind == "DELETED" and seen.ended_s is None:
                seen.ended_s = now


# ------------------------------------------------------------------------------------------------------- the run
@dataclass(frozen=True, slots=True, kw_only=True)
class RealRun:
    """What one run on the control plane did: the inputs the twin needs and the recorded objects."""

    jobs: tuple[JobSpec, ...]
    """As replayed: submission offsets measured (seconds after `t0`), requests and constraints read from a pod."""
    t0: float
    end_s: float
    """Seconds after `t0` when the last job had finished."""
    nodes: tuple[NodeSeen, ...]
    pods: tuple[PodSeen, ...]
    initial_nodes: Mapping[str, int]
    preloaded: tuple[str, ...] = ()
    """The initial nodes' names (created and Ready before `t0`)."""

    def created(self) -> list[NodeSeen]:
        """The nodes the controller created."""
        return [n for n in self.nodes if n.name not in self.preloaded]


def _jobs_done(batch: client.BatchV1Api, namespace: str, jobs: Sequence[JobSpec]) -> bool:
    done = {j.metadata.name for j in batch.list_namespaced_job(namespace).items
            if (j.status.succeeded or 0) >= (j.spec.completions or 1)}
    return all(j.name in done for j in jobs)


def _raw(call: Callable[..., Any], *args: Any) -> dict[str, Any]:
    return json.loads(call(*args, _preload_content=False).data)  # type: ignore[no-any-return]


def _preload(api_client: client.ApiClient, config: Config, initial: Mapping[str, int]) -> tuple[str, ...]:
    """The run's initial nodes, Ready before it starts (the twin preloads them started)."""
    provider = KwokProvider(api_client, config.pools,
                            KwokSettings(default=KwokProfile(ready_after_s=0.0, gpu_register_after_s=0.0)))
    core = client.CoreV1Api(api_client)
    names = [n for pool, count in sorted(initial.items()) for n in provider.increase(pool, count)]
    wait_for(lambda: all(_condition_time(_raw(core.read_node, n), "Ready") for n in names), 60,
             desc="the initial nodes Ready")
    return tuple(names)


def _wait_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.5))


def run_real(api_client: client.ApiClient, config: Config, jobs: Sequence[JobSpec], *, kwok: KwokSettings,
             initial: Mapping[str, int], namespace: str, timeout_s: float, tail_s: float,
             progress: Callable[[str], None] = lambda line: None) -> RealRun:
    """Replays `jobs` (submission offsets from the start) with the controller running as `gpuscale run` runs it
    (its loop in a thread: scans, the watch trigger and the batch window), until every job has finished and every
    node it added is gone again, or `tail_s` after the last job: the run's cost covers whole node lifetimes."""
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(lambda: any(s.metadata.name == "default" for s in core.list_namespaced_service_account(namespace).items),
             60, desc=f"ServiceAccount {namespace}/default")
    preloaded = _preload(api_client, config, initial)
    recorder = Recorder(api_client, namespace).start()
    controller = build_controller(api_client, config, kwok=kwok, settings=LoopSettings.from_config(config))
    stop, lines = threading.Event(), []
    loop = threading.Thread(target=run_loop, args=(controller,), kwargs={"stop": stop, "emit": lines.append},
                            daemon=True)
    try:
        if not controller.wait_synced(60):
            raise RuntimeError(f"the controller's cache did not sync: {controller.cache.status()}")
        t0 = time.time()
        loop.start()
        submitted = []
        for i, job in enumerate(jobs):
            _wait_until(t0 + job.submit_s)
            batch.create_namespaced_job(namespace, job_body(job, namespace))
            submitted.append(replace(job, submit_s=round(time.time() - t0, 3), team=namespace))
            if i % 10 == 9:
                progress(f"{time.time() - t0:6.0f} s: {i + 1}/{len(jobs)} jobs submitted, "
                         f"{len(recorder.nodes)} nodes seen")
        wait_for(lambda: _jobs_done(batch, namespace, jobs), timeout_s, interval_s=1.0, desc="every job finished")
        progress(f"{time.time() - t0:6.0f} s: every job finished; waiting up to {tail_s:g} s for the scale-down")
        with contextlib.suppress(AssertionError):
            wait_for(lambda: all(n.deleted_s for n in recorder.nodes.values() if n.name not in preloaded),
                     tail_s, interval_s=1.0)
        end_s = time.time() - t0
    finally:
        stop.set()
        if loop.is_alive():
            loop.join(30)
        controller.close()
        recorder.close()
    errors = [line for line in lines if line.get("errors")]
    if errors:
        progress(f"controller errors: {errors[:3]}")
    with recorder.lock:
        pods, nodes = tuple(recorder.pods.values()), tuple(recorder.nodes.values())
    by_job = {p.job: p for p in sorted(pods, key=lambda p: p.created_s)}
    replayed = []
    for job in submitted:
        pod = pod_from_k8s(by_job[job.name].raw)
        replayed.append(replace(job, requests=pod.requests, constraints=pod.constraints))
    return RealRun(jobs=tuple(replayed), t0=t0, end_s=end_s, nodes=nodes, pods=pods, initial_nodes=dict(initial),
                   preloaded=preloaded)


def clean_up(api_client: client.ApiClient, namespace: str) -> None:
    """Delete the run's namespace (its Jobs and pods) and every kwok-managed node."""
    core = client.CoreV1Api(api_client)
    try:
        core.delete_namespace(namespace, propagation_policy="Background")
    except ApiException as err:
        if err.status != 404:
            raise
    for node in core.list_node(label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}").items:
        try:
            core.delete_node(node.metadata.name)
        except ApiException as err:
            if err.status != 404:
                raise


# ------------------------------------------------------------------------------------------------------- figures
@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    p50: float
    p95: float
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        return Spread(p50=percentile(values, 50), p95=percentile(values, 95), n=len(values)) if values else \
            Spread(p50=math.nan, p95=math.nan, n=0)

    def __str__(self) -> str:
        return f"p50 {self.p50:.1f} s, p95 {self.p95:.1f} s (n={self.n})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    cost_usd: float
    gpu_hours_provisioned: float
    gpu_hours_allocated: float
    pending_to_running: Spread
    new_node: Spread
    """Pending→running of the pods that needed a new node."""
    nodes_created: int

    @property
    def gpu_hours_idle(self) -> float:
        return self.gpu_hours_provisioned - self.gpu_hours_allocated


@dataclass(frozen=True, slots=True, kw_only=True)
class Chain:
    """Start-up steps of the nodes the run created, and where the new-node pods' waits went."""

    ready: Mapping[str, Spread]
    """Per pool: created → Ready."""
    gpus: Mapping[str, Spread]
    """Per GPU pool: Ready → GPUs in allocatable."""
    usable: Spread
    """created → usable (GPUs registered, or Ready for a CPU pool), of the nodes new-node pods ran on (per pod)."""
    reaction: Spread
    """Pod created → its node created (the autoscaler's share: scheduler attempt, batch window, decision)."""
    after: Spread
    """Node usable → pod running (the scheduler's retry and bind, kwok's pod stages)."""
    pod_start: Mapping[str, Spread]
    """Per pool: bound → Ready."""


def _usable(node: NodeSeen, pool: NodePool | None) -> float | None:
    return node.gpus_s if pool is not None and pool.gpus_per_node else node.ready_s


def measure(run: RealRun, pools: Sequence[NodePool]) -> tuple[Figures, Chain]:
    by_pool = {p.name: p for p in pools}
    t0, end = run.t0, run.t0 + run.end_s
    cost = provisioned = allocated = 0.0
    for node in run.nodes:
        pool = by_pool.get(node.pool)
        held_h = max(min(node.deleted_s or end, end) - max(node.created_s, t0), 0.0) / 3600
        cost += held_h * (pool.usd_per_hour if pool else 0.0)
        provisioned += held_h * (pool.gpus_per_node if pool else 0)
    for pod in run.pods:
        if pod.bound_s is not None:
            allocated += pod.gpus * max(min(pod.ended_s or end, end) - max(pod.bound_s, t0), 0.0) / 3600
    nodes = {n.name: n for n in run.nodes}
    ran = [p for p in run.pods if p.running_s is not None]
    created = run.created()
    usable = {n.name: u for n in created if (u := _usable(n, by_pool.get(n.pool))) is not None}
    fresh = [p for p in ran if p.node in usable and usable[p.node] > p.created_s]
    figures = Figures(cost_usd=cost, gpu_hours_provisioned=provisioned, gpu_hours_allocated=allocated,
                      pending_to_running=Spread.of([p.running_s - p.created_s for p in ran]),  # type: ignore[operator]
                      new_node=Spread.of([p.running_s - p.created_s for p in fresh]),  # type: ignore[operator]
                      nodes_created=len(created))
    chain = Chain(
        ready={pool: Spread.of([n.ready_s - n.created_s for n in created if n.pool == pool and n.ready_s])
               for pool in sorted({n.pool for n in created})},
        gpus={pool: Spread.of([n.gpus_s - n.ready_s for n in created if n.pool == pool and n.gpus_s and n.ready_s])
              for pool in sorted({n.pool for n in created}) if by_pool[pool].gpus_per_node},
        usable=Spread.of([usable[p.node] - nodes[p.node].created_s for p in fresh if p.node in usable]),
        reaction=Spread.of([nodes[p.node].created_s - p.created_s for p in fresh]),  # type: ignore[index]
        after=Spread.of([p.running_s - usable[p.node] for p in fresh if p.node in usable]),  # type: ignore[operator]
        pod_start=_pod_starts(run, nodes))
    return figures, chain


def _pod_starts(run: RealRun, nodes: Mapping[str, NodeSeen]) -> dict[str, Spread]:
    out: dict[str, list[float]] = {}
    for p in run.pods:
        if p.running_s is not None and p.bound_s is not None and p.node in nodes:
            out.setdefault(nodes[p.node].pool, []).append(p.running_s - p.bound_s)  # type: ignore[index]
    return {pool: Spread.of(v) for pool, v in sorted(out.items())}


# ------------------------------------------------------------------------------------------------------- the twin
def measured_profiles(run: RealRun, pools: Sequence[NodePool], kwok: KwokSettings) -> dict[str, StartupProfile]:
    """Per pool, the run's own samples: created → Ready, Ready → GPUs, bound → Ready; a pool the run never scaled
    keeps the kwok settings' constants."""
    nodes = {n.name: n for n in run.nodes}
    out = {}
    for pool in pools:
        created = [n for n in run.created() if n.pool == pool.name]
        ready = [n.ready_s - n.created_s for n in created if n.ready_s is not None]
        gpus = [n.gpus_s - n.ready_s for n in created if n.gpus_s is not None and n.ready_s is not None]
        starts = [p.running_s - p.bound_s for p in run.pods if p.running_s is not None and p.bound_s is not None
                  and p.node in nodes and nodes[p.node].pool == pool.name]
        kwok_profile = kwok.profile(pool.name)
        out[pool.name] = StartupProfile(
            acquire_s=ZERO, boot_s=ZERO, register_s=ZERO,
            ready_s=Empirical.of([max(v, 0.0) for v in ready]) if ready else LogNormal(
                median=kwok_profile.ready_after_s, sigma=0.0),
            gpu_s=(Empirical.of([max(v, 0.0) for v in gpus]) if gpus else LogNormal(
                median=kwok_profile.gpu_register_after_s, sigma=0.0)) if pool.gpus_per_node else None,
            pull_s=None, start_s=Empirical.of([max(v, 0.0) for v in starts]) if starts else ZERO)
    return out


def per_pod(jobs: Sequence[JobSpec]) -> tuple[JobSpec, ...]:
    """A multi-pod job as the harness runs it: one job per pod (no gang scheduler places them together)."""
    return tuple(j if j.pods == 1 else replace(j, name=f"{j.name}-{i}", pods=1) for j in jobs for i in range(j.pods))


def twin_replay(run: RealRun, config: Config, profiles: Mapping[str, StartupProfile], seed: int = 0) -> SimResult:
    """The run in the twin: the same pools, its jobs (one per pod, `per_pod`) at their measured submission times,
    `profiles` (`measured_profiles`), kube-scheduler's default scoring, the run's policy, scan and length."""
    setup = TwinSetup(name="replay", pools=tuple(CloudPool(pool=p, profile=profiles[p.name]) for p in config.pools),
                      jobs=per_pod(run.jobs), initial_nodes=run.initial_nodes, duration_s=run.end_s, seed=seed,
                      sample_s=60.0)
    policy = TwinPolicy(name="replay", policy=config.policy, scoring=Scoring.LEAST_ALLOCATED,
                        settings=LoopSettings(scan_interval_s=config.scan_interval_s,
                                              max_graceful_termination_s=config.max_graceful_termination_s))
    return simulate(setup, policy)


def twin_figures(result: SimResult) -> Figures:
    ran = [p for p in result.pods if p.running_s is not None]
    return Figures(cost_usd=result.cost_usd, gpu_hours_provisioned=result.gpu_hours_provisioned,
                   gpu_hours_allocated=result.gpu_hours_allocated,
                   pending_to_running=Spread.of([p.pending_to_running_s for p in ran]),  # type: ignore[misc]
                   new_node=Spread.of([p.pending_to_running_s for p in ran if p.new_node]),  # type: ignore[misc]
                   nodes_created=sum(result.scale_ups_by_pool.values()))


# ------------------------------------------------------------------------------------------------------- records
def _pod_inputs(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What the twin reads of a pod (its requests and constraints), without the status and managed fields."""
    meta, spec = raw["metadata"], raw["spec"]
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta},
            "spec": {"containers": [{"name": c["name"], "resources": c.get("resources") or {}}
                                    for c in spec["containers"]],
                     **{k: spec[k] for k in ("nodeSelector", "tolerations", "priority") if k in spec}}}


def run_to_json(run: RealRun) -> dict[str, Any]:
    """A run as plain JSON: the jobs (with one trimmed pod each) and what was recorded of every node and pod."""
    first = {p.job: p for p in sorted(run.pods, key=lambda p: p.created_s, reverse=True)}
    return {"t0": run.t0, "end_s": run.end_s, "initial_nodes": dict(run.initial_nodes),
            "preloaded": list(run.preloaded),
            "jobs": [{"name": j.name, "kind": j.kind, "team": j.team, "submit_s": j.submit_s, "pods": j.pods,
                      "duration_s": j.duration_s, "pod": _pod_inputs(first[j.name].raw)} for j in run.jobs],
            "nodes": [{k: v for k, v in vars(n).items()} for n in run.nodes],
            "pods": [{k: v for k, v in vars(p).items() if k != "raw"} for p in run.pods]}


def run_from_json(doc: Mapping[str, Any]) -> RealRun:
    jobs = []
    for j in doc["jobs"]:
        pod = pod_from_k8s(j["pod"])
        jobs.append(JobSpec(name=j["name"], kind=j["kind"], team=j["team"], submit_s=j["submit_s"], pods=j["pods"],
                            duration_s=j["duration_s"], requests=pod.requests, constraints=pod.constraints))
    return RealRun(jobs=tuple(jobs), t0=doc["t0"], end_s=doc["end_s"], initial_nodes=doc["initial_nodes"],
                   preloaded=tuple(doc["preloaded"]), nodes=tuple(NodeSeen(**n) for n in doc["nodes"]),
                   pods=tuple(PodSeen(**p) for p in doc["pods"]))
