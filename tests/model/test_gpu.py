"""`gpuscale.model.gpu`: MIG tables and layouts, what a node advertises per sharing mode, and its labels read back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.model.errors import ConfigError, InputError
from gpuscale.model.gpu import (
    GPU_COUNT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_SHARING_STRATEGY_LABEL,
    MIG_CONFIG_LABEL,
    MIG_GPUS,
    MIG_STRATEGY_LABEL,
    GpuIdentity,
    GpuSharing,
    MigStrategy,
    SharingMode,
    advertised_resources,
    check_layout,
    gpu_identity,
    mig_gpu,
    mig_layout,
    operator_labels,
)
from gpuscale.model.resources import Resources

A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def mig(layout: str | None, strategy: MigStrategy = MigStrategy.MIXED) -> GpuSharing:
    return GpuSharing(mode=SharingMode.MIG, strategy=strategy, layout=layout)


def shared(replicas: int, mode: SharingMode = SharingMode.TIME_SLICING, rename: bool = False) -> GpuSharing:
    return GpuSharing(mode=mode, replicas=replicas, rename_by_default=rename)


# --- MIG profile tables (NVIDIA MIG user guide, "Supported MIG Profiles")


@pytest.mark.parametrize(("gpu", "table"), [
    ("A100-40GB", {"1g.5gb": (1, 1, 5, 7), "1g.5gb+me": (1, 1, 5, 1), "1g.10gb": (1, 2, 10, 4),
                   "2g.10gb": (2, 2, 10, 3), "3g.20gb": (3, 4, 20, 2), "4g.20gb": (4, 4, 20, 1),
                   "7g.40gb": (7, 8, 40, 1)}),
    ("A100-80GB", {"1g.10gb": (1, 1, 10, 7), "1g.10gb+me": (1, 1, 10, 1), "1g.20gb": (1, 2, 20, 4),
                   "2g.20gb": (2, 2, 20, 3), "3g.40gb": (3, 4, 40, 2), "4g.40gb": (4, 4, 40, 1),
                   "7g.80gb": (7, 8, 80, 1)}),
])
def test_profile_tables(gpu: str, table: dict[str, tuple[int, int, int, int]]) -> None:
    profiles = MIG_GPUS[gpu].profiles
    assert {n: (p.compute_slices, p.memory_slices, p.memory_gb, p.max_instances)
            for n, p in profiles.items()} == table
    assert MIG_GPUS["H100-80GB"].profiles == MIG_GPUS["A100-80GB"].profiles  # same names and shapes


def test_every_profile_alone_fits_its_gpu() -> None:
    for gpu in MIG_GPUS.values():
        for profile in gpu.profiles.values():
            assert profile.max_instances * profile.compute_slices <= gpu.compute_slices
            assert profile.max_instances * profile.memory_slices <= gpu.memory_slices


def test_media_extension_profiles_use_a_dot_in_the_resource_name() -> None:
    assert MIG_GPUS["A100-40GB"].profiles["1g.5gb+me"].resource == "nvidia.com/mig-1g.5gb.me"
    assert MIG_GPUS["A100-80GB"].profiles["3g.40gb"].resource == "nvidia.com/mig-3g.40gb"


@pytest.mark.parametrize(("product", "gpu"), [
    (A100_40, "A100-40GB"), ("NVIDIA-A100-PCIE-40GB", "A100-40GB"), ("nvidia-tesla-a100", "A100-40GB"),
    (A100_80, "A100-80GB"), ("NVIDIA-A100-80GB-PCIe", "A100-80GB"), ("nvidia-a100-80gb", "A100-80GB"),
    (H100, "H100-80GB"), ("NVIDIA-H100-PCIe", "H100-80GB"), ("nvidia-h100-80gb", "H100-80GB"),
    ("NVIDIA H100 80GB HBM3", "H100-80GB"),
])
def test_products_map_to_their_tables(product: str, gpu: str) -> None:
    assert mig_gpu(product).name == gpu


@pytest.mark.parametrize("product", ["Tesla-T4", "NVIDIA-H100-NVL", "NVIDIA-GH200-480GB", "NVIDIA-L4"])
def test_products_without_a_table_are_refused(product: str) -> None:
    with pytest.raises(ConfigError, match="no MIG profile table") as caught:
        mig_gpu(product)
    assert caught.value.where == "model"


# --- layouts (the GPU operator's default mig-parted config)


@pytest.mark.parametrize(("product", "name", "layout"), [
    (A100_40, "all-1g.5gb", {"1g.5gb": 7}),
    (A100_40, "all-1g.5gb.me", {"1g.5gb+me": 1}),
    (A100_40, "all-1g.10gb", {"1g.10gb": 4}),
    (A100_40, "all-2g.10gb", {"2g.10gb": 3}),
    (A100_40, "all-3g.20gb", {"3g.20gb": 2}),
    (A100_40, "all-7g.40gb", {"7g.40gb": 1}),
    (A100_40, "all-balanced", {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    (A100_80, "all-1g.10gb", {"1g.10gb": 7}),
    (A100_80, "all-1g.20gb", {"1g.20gb": 4}),
    (A100_80, "all-3g.40gb", {"3g.40gb": 2}),
    (A100_80, "all-7g.80gb", {"7g.80gb": 1}),
    (H100, "all-balanced", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    (H100, "all-disabled", {}),
    (H100, "all-enabled", {}),
])
def test_named_layouts(product: str, name: str, layout: dict[str, int]) -> None:
    assert mig_layout(product, name) == layout


def test_every_named_layout_fits() -> None:
    for gpu in MIG_GPUS.values():
        for name, layout in gpu.layouts.items():
            check_layout(gpu, layout, name)  # does not raise


@pytest.mark.parametrize(("product", "name", "match"), [
    (A100_40, "all-1g.20gb", r"unknown MIG layout 'all-1g.20gb' for A100-40GB \(known: .*all-1g.5gb"),
    (A100_80, "all-1g.5gb", "unknown MIG layout 'all-1g.5gb' for A100-80GB"),
    (A100_80, "my-layout", "unknown MIG layout"),
])
def test_unknown_layouts_are_clear_errors(product: str, name: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        mig_layout(product, name)
    assert caught.value.where == "sharing.layout"


@pytest.mark.parametrize(("layout", "match"), [
    ({"4g.20gb": 1, "7g.40gb": 1}, "needs 11 compute and 12 memory slices"),
    ({"3g.20gb": 2, "1g.5gb": 1}, "needs 7 compute and 9 memory slices"),
    ({"1g.10gb": 5}, r"5 × 1g.10gb on one A100-40GB \(0 to 4\)"),
    ({"1g.5gb+me": 2}, r"2 × 1g.5gb\+me"),
    ({"1g.20gb": 1}, "A100-40GB has no MIG profile '1g.20gb'"),
])
def test_impossible_layouts_raise(layout: dict[str, int], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_layout(mig_gpu(A100_40), layout)


def test_a_custom_layout_that_fits_is_accepted() -> None:
    check_layout(mig_gpu(A100_80), {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1})
    check_layout(mig_gpu(A100_80), {"1g.10gb+me": 1, "1g.10gb": 6})


# --- advertised resources per sharing mode


@pytest.mark.parametrize(("product", "gpus", "sharing", "expected"), [
    ("Tesla-T4", 1, GpuSharing(), {"nvidia.com/gpu": 1}),
    ("Tesla-T4", 1, shared(4), {"nvidia.com/gpu": 4}),
    ("Tesla-T4", 2, shared(4, rename=True), {"nvidia.com/gpu.shared": 8}),
    ("Tesla-T4", 4, shared(10, SharingMode.MPS), {"nvidia.com/gpu": 40}),
    (A100_40, 8, mig("all-1g.5gb", MigStrategy.SINGLE), {"nvidia.com/gpu": 56}),
    (A100_40, 8, mig("all-1g.5gb"), {"nvidia.com/mig-1g.5gb": 56}),
    (A100_40, 1, mig("all-1g.5gb.me"), {"nvidia.com/mig-1g.5gb.me": 1}),
    (A100_40, 2, mig("all-balanced"), {"nvidia.com/mig-1g.5gb": 4, "nvidia.com/mig-2g.10gb": 2,
                                       "nvidia.com/mig-3g.20gb": 2}),
    (A100_80, 8, mig("all-1g.10gb"), {"nvidia.com/mig-1g.10gb": 56}),
    (H100, 8, mig("all-3g.40gb", MigStrategy.SINGLE), {"nvidia.com/gpu": 16}),
])
def test_advertised_resources(product: str, gpus: int, sharing: GpuSharing, expected: dict[str, int]) -> None:
    assert advertised_resources(product, gpus, sharing) == Resources.of(expected)


def test_advertised_resources_keep_a_custom_resource_name() -> None:
    assert advertised_resources("MI300X", 8, resource="amd.com/gpu") == Resources.of({"amd.com/gpu": 8})


@pytest.mark.parametrize(("product", "sharing", "resource", "where", "match"), [
    ("Tesla-T4", shared(1), "nvidia.com/gpu", "sharing.replicas", "2 or more"),
    ("Tesla-T4", shared(4, SharingMode.MPS), "nvidia.com/mig-1g.5gb", "resource", "MPS shares whole"),
    ("Tesla-T4", mig("all-1g.5gb"), "nvidia.com/gpu", "model", "no MIG profile table"),
    (A100_40, GpuSharing(mode=SharingMode.MIG), "nvidia.com/gpu", "sharing.layout", "MIG needs a layout"),
    (A100_40, mig("all-disabled"), "nvidia.com/gpu", "sharing.layout", "has no MIG devices"),
    (A100_40, mig("all-enabled"), "nvidia.com/gpu", "sharing.layout", "has no MIG devices"),
    (A100_40, mig("all-balanced", MigStrategy.SINGLE), "nvidia.com/gpu", "sharing.strategy", "use strategy mixed"),
    (A100_40, mig("all-1g.5gb"), "amd.com/gpu", "resource", "NVIDIA device plugin"),
    (A100_40, GpuSharing(mode=SharingMode.MIG, layout="all-1g.5gb", replicas=2), "nvidia.com/gpu",
     "sharing.replicas", "not mig"),
    ("Tesla-T4", GpuSharing(rename_by_default=True), "nvidia.com/gpu", "sharing.rename_by_default", "not none"),
    ("Tesla-T4", GpuSharing(mode=SharingMode.MPS, replicas=2, layout="all-1g.5gb"), "nvidia.com/gpu",
     "sharing.layout", "not mps"),
])
def test_what_the_device_plugin_would_not_do_is_refused(product: str, sharing: GpuSharing, resource: str,
                                                         where: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        advertised_resources(product, 1, sharing, resource)
    assert caught.value.where == where


def test_zero_gpus_is_refused() -> None:
    with pytest.raises(ConfigError, match="1 or more GPUs"):
        advertised_resources("Tesla-T4", 0)


# --- labels: what GFD / the operator set, and reading them back


def test_labels_of_a_time_sliced_node() -> None:
    assert operator_labels("Tesla-T4", 1, shared(4)) == {
        GPU_PRODUCT_LABEL: "Tesla-T4-SHARED", GPU_COUNT_LABEL: "1", GPU_REPLICAS_LABEL: "4",
        GPU_SHARING_STRATEGY_LABEL: "time-slicing"}
    assert operator_labels("Tesla-T4", 1, shared(4, rename=True))[GPU_PRODUCT_LABEL] == "Tesla-T4"  # no SHARED
    assert operator_labels("Tesla-T4", 1, shared(4, SharingMode.MPS))["nvidia.com/mps.capable"] == "true"


def test_labels_of_mig_nodes() -> None:
    single = operator_labels(A100_40, 8, mig("all-1g.5gb", MigStrategy.SINGLE))
    assert single[GPU_PRODUCT_LABEL] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"  # GFD's own example
    assert single[GPU_COUNT_LABEL] == "56"
    assert (single[MIG_CONFIG_LABEL], single[MIG_STRATEGY_LABEL]) == ("all-1g.5gb", "single")
    mixed = operator_labels(A100_80, 8, mig("all-balanced"))
    assert (mixed[GPU_PRODUCT_LABEL], mixed[GPU_COUNT_LABEL]) == (A100_80, "8")
    assert mixed["nvidia.com/mig-3g.40gb.count"] == "8"
    assert mixed["nvidia.com/mig-1g.10gb.count"] == "16"
    assert mixed["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert (mixed[MIG_CONFIG_LABEL], mixed[MIG_STRATEGY_LABEL]) == ("all-balanced", "mixed")


@pytest.mark.parametrize(("labels", "identity"), [
    ({}, None),
    ({GPU_PRODUCT_LABEL: "Tesla-T4", GPU_COUNT_LABEL: "1", GPU_REPLICAS_LABEL: "1",
      GPU_SHARING_STRATEGY_LABEL: "none"}, GpuIdentity(model="Tesla-T4", count=1)),
    ({GPU_PRODUCT_LABEL: "Tesla-T4-SHARED", GPU_COUNT_LABEL: "2", GPU_REPLICAS_LABEL: "4",
      GPU_SHARING_STRATEGY_LABEL: "time-slicing"}, GpuIdentity(model="Tesla-T4", count=2, sharing=shared(4))),
    ({GPU_PRODUCT_LABEL: "Tesla-T4", GPU_COUNT_LABEL: "1", GPU_REPLICAS_LABEL: "8",
      GPU_SHARING_STRATEGY_LABEL: "mps"},
     GpuIdentity(model="Tesla-T4", count=1, sharing=shared(8, SharingMode.MPS, rename=True))),
    # GFD before the sharing-strategy label: replicas alone meant time-slicing
    ({GPU_PRODUCT_LABEL: "Tesla-T4-SHARED", GPU_COUNT_LABEL: "1", GPU_REPLICAS_LABEL: "4"},
     GpuIdentity(model="Tesla-T4", count=1, sharing=shared(4))),
    # the operator's default on a MIG-capable node: MIG off
    ({GPU_PRODUCT_LABEL: A100_40, GPU_COUNT_LABEL: "8", MIG_CONFIG_LABEL: "all-disabled",
      MIG_STRATEGY_LABEL: "single"}, GpuIdentity(model=A100_40, count=8)),
    # single: gpu.count counts MIG devices
    ({GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", GPU_COUNT_LABEL: "56", MIG_CONFIG_LABEL: "all-1g.5gb",
      MIG_STRATEGY_LABEL: "single"},
     GpuIdentity(model=A100_40, count=8, sharing=mig("all-1g.5gb", MigStrategy.SINGLE))),
    ({GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", GPU_COUNT_LABEL: "56", MIG_CONFIG_LABEL: "custom",
      MIG_STRATEGY_LABEL: "single"},
     GpuIdentity(model=A100_40, count=None, sharing=mig("custom", MigStrategy.SINGLE))),
    ({GPU_PRODUCT_LABEL: A100_80, GPU_COUNT_LABEL: "8", GPU_REPLICAS_LABEL: "0", MIG_STRATEGY_LABEL: "mixed",
      "nvidia.com/mig-1g.10gb.count": "56"}, GpuIdentity(model=A100_80, count=8, sharing=mig(None))),
])
def test_identity_from_labels(labels: dict[str, str], identity: GpuIdentity | None) -> None:
    assert gpu_identity(labels) == identity


@pytest.mark.parametrize(("labels", "field"), [
    ({GPU_PRODUCT_LABEL: "Tesla-T4", GPU_COUNT_LABEL: "two"}, "label nvidia.com/gpu.count"),
    ({GPU_PRODUCT_LABEL: "Tesla-T4", GPU_REPLICAS_LABEL: "-1"}, "label nvidia.com/gpu.replicas"),
    ({GPU_PRODUCT_LABEL: "Tesla-T4", GPU_SHARING_STRATEGY_LABEL: "vgpu"}, "label nvidia.com/gpu.sharing-strategy"),
])
def test_malformed_labels_name_the_node_and_label(labels: dict[str, str], field: str) -> None:
    with pytest.raises(InputError) as caught:
        gpu_identity(labels, obj="node gpu-7")
    assert (caught.value.obj, caught.value.field) == ("node gpu-7", field)


_MIG_CASES = [(p, name, s) for p in (A100_40, A100_80, H100) for name, layout in mig_gpu(p).layouts.items()
              for s in (MigStrategy.SINGLE, MigStrategy.MIXED) if s is MigStrategy.MIXED or len(layout) == 1]


@given(gpus=st.integers(1, 16), case=st.one_of(
    st.sampled_from(_MIG_CASES).map(lambda c: (c[0], mig(c[1], c[2]))),
    st.tuples(st.sampled_from(["Tesla-T4", "NVIDIA-L4", A100_80]),
              st.builds(shared, st.integers(2, 48), st.sampled_from([SharingMode.TIME_SLICING, SharingMode.MPS]),
                        st.booleans())),
    st.just(("Tesla-T4", GpuSharing())),
))
def test_labels_read_back_as_what_was_configured(gpus: int, case: tuple[str, GpuSharing]) -> None:
    product, sharing = case
    assert gpu_identity(operator_labels(product, gpus, sharing)) == GpuIdentity(model=product, count=gpus,
                                                                                 sharing=sharing)
