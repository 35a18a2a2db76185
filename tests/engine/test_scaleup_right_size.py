"""Least-waste counting GPUs routes single GPU pods to the smallest open pool of their GPU model (`_RightSized`)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.config import preset_policy
from gpuscale.engine.policy import Policy
from gpuscale.engine.state import EngineState, FailureKind, record_failure
from gpuscale.model.pool import NodePool
from tests.engine.test_scaleup import A100, GPU_TOL, NOW, pending, pool, run, scale_ups

MODEL = "nvidia-tesla-a100"
A100_8G = pool("a100-8g", cpu="95690m", memory="630Gi", gpus=8, labels=A100, price=29.39, model=MODEL)
A100_4G = pool("a100-4g", cpu="47810m", memory="303Gi", gpus=4, labels=A100, price=14.69, model=MODEL)
A100_2G = pool("a100-2g", cpu="23870m", memory="148Gi", gpus=2, labels=A100, price=7.347, model=MODEL)
A100_1G = pool("a100-1g", cpu="11900m", memory="72Gi", gpus=1, labels=A100, price=3.673, model=MODEL)
SIZES = (A100_8G, A100_4G, A100_2G, A100_1G)


def a100_pod(name: str, gpus: int, cpu: str, memory: str) -> object:
    return pending(name, cpu=cpu, memory=memory, gpus=gpus, tolerations=(GPU_TOL,), node_selector=A100)


def burst() -> tuple[object, ...]:
    """Seven 1-GPU pods too big for a 1g node (13 CPU) and nine small ones: one 8g node takes the seven and one small
    pod; GPU-blind or not, packing all sixteen on 8g nodes scores less waste than nine 1g nodes for the small ones."""
    big = tuple(a100_pod(f"big-{k}", 1, "13", "8Gi") for k in range(7))
    return big + tuple(a100_pod(f"small-{k}", 1, "1", "4Gi") for k in range(9))


def test_small_gpu_pods_do_not_open_an_8g_node_of_their_own() -> None:
    plan = run(burst(), pools=(A100_8G, A100_1G))  # type: ignore[arg-type]
    assert scale_ups(plan) == {"a100-8g": 1, "a100-1g": 8}
    on_8g = next(s for s in plan.scale_up if s.pool == "a100-8g").pods
    assert len(on_8g) == 8 and sum(p.startswith("default/small-") for p in on_8g) == 1  # the free GPU is filled


def test_ca_least_waste_packs_them_on_8g_nodes() -> None:
    ca = preset_policy("ca-defaults")
    plan = run(burst(), pools=(A100_8G, A100_1G), policy=ca)  # type: ignore[arg-type]
    assert scale_ups(plan) == {"a100-8g": 2}
    counting = Policy(least_waste_counts_gpus=False)
    assert scale_ups(run(burst(), pools=(A100_8G, A100_1G), policy=counting)) == {"a100-8g": 2}  # type: ignore[arg-type]


def test_each_pod_gets_the_smallest_size_that_fits() -> None:
    pods = (a100_pod("one", 1, "8", "60Gi"), a100_pod("two", 2, "20", "120Gi"), a100_pod("four", 4, "40", "240Gi"),
            a100_pod("eight", 8, "80", "480Gi"))
    plan = run(pods, pools=SIZES)  # type: ignore[arg-type]
    assert scale_ups(plan) == {"a100-8g": 1, "a100-4g": 1, "a100-2g": 1, "a100-1g": 1}
    assert {s.pool: s.pods for s in plan.scale_up} == {
        "a100-8g": ("default/eight",), "a100-4g": ("default/four",), "a100-2g": ("default/two",),
        "a100-1g": ("default/one",)}


def test_a_1_gpu_pod_too_big_for_a_1g_node_takes_the_next_size() -> None:
    plan = run((a100_pod("wide", 1, "16", "60Gi"),), pools=SIZES)  # type: ignore[arg-type]
    assert scale_ups(plan) == {"a100-2g": 1}


def test_backed_off_1g_pool_gives_way_to_the_next_size() -> None:
    state = record_failure(EngineState(), "a100-1g", FailureKind.STOCKOUT, NOW - 10, Policy())
    plan = run((a100_pod("one", 1, "8", "60Gi"),), pools=SIZES, state=state)  # type: ignore[arg-type]
    assert scale_ups(plan) == {"a100-2g": 1}


def test_1g_pool_at_its_limit_takes_what_it_can_the_rest_goes_up_a_size() -> None:
    capped: NodePool = pool("a100-1g", cpu="11900m", memory="72Gi", gpus=1, labels=A100, price=3.673, model=MODEL,
                            max_size=1)
    pods = tuple(a100_pod(f"one-{k}", 1, "8", "60Gi") for k in range(3))
    plan = run(pods, pools=(A100_8G, A100_2G, capped))  # type: ignore[arg-type]
    assert scale_ups(plan) == {"a100-1g": 1, "a100-2g": 1}


SHAPES = ((1, "1", "4Gi"), (1, "8", "60Gi"), (1, "13", "8Gi"), (2, "4", "16Gi"), (2, "20", "140Gi"),
          (4, "30", "200Gi"), (4, "46", "300Gi"), (8, "80", "480Gi"))
"""(GPUs, CPU, memory): some fit the pool of their GPU count, some only a bigger one (13 CPU is too much for a 1g)."""


def _fits(shape: tuple[int, str, str], p: NodePool) -> bool:
    gpus, cpu, memory = shape
    gib = {"4Gi": 4, "8Gi": 8, "16Gi": 16, "60Gi": 60, "140Gi": 140, "200Gi": 200, "300Gi": 300, "480Gi": 480}
    alloc = {"a100-8g": (95.69, 630), "a100-4g": (47.81, 303), "a100-2g": (23.87, 148), "a100-1g": (11.9, 72)}
    have_cpu, have_mem = alloc[p.name]
    return gpus <= p.gpus_per_node and float(cpu) <= have_cpu and gib[memory] <= have_mem


ROOMY = tuple(replace(p, max_size=20) for p in SIZES)


@given(picks=st.lists(st.integers(0, len(SHAPES) - 1), min_size=1, max_size=20),
       backed_off=st.sets(st.sampled_from([p.name for p in SIZES[1:]])))
@settings(max_examples=150, deadline=None)
def test_no_pool_opens_nodes_only_for_pods_a_smaller_open_pool_takes(picks: list[int], backed_off: set[str]) -> None:
    """Every scale-up of a pool hosts at least one pod for which no smaller open pool fits; each pod lands in its
    smallest open fitting pool or, as a filler, on a bigger node opened anyway."""
    state = EngineState()
    for name in sorted(backed_off):
        state = record_failure(state, name, FailureKind.STOCKOUT, NOW - 10, Policy())
    open_pools = [p for p in ROOMY if p.name not in backed_off]
    pods = {f"default/p-{k}": SHAPES[i] for k, i in enumerate(picks)}
    plan = run(tuple(a100_pod(key.removeprefix("default/"), *shape) for key, shape in pods.items()),
               pools=ROOMY, state=state)  # type: ignore[arg-type]
    smallest = {key: min((p.gpus_per_node for p in open_pools if _fits(shape, p)), default=None)
                for key, shape in pods.items()}
    placed = {key: up for up in plan.scale_up for key in up.pods}
    for up in plan.scale_up:
        size = next(p.gpus_per_node for p in SIZES if p.name == up.pool)
        assert any(smallest[key] == size for key in up.pods), (up.pool, up.pods)
        assert all(smallest[key] is not None and smallest[key] <= size for key in up.pods)
    assert set(placed) == {key for key, size in smallest.items() if size is not None}
