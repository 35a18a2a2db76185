"""`gpuscale.model.node`: pool and zone come from well-known labels."""

from __future__ import annotations

import pytest

from gpuscale.model.node import LEGACY_ZONE_LABEL, POOL_LABEL, ZONE_LABEL
from tests.builders import make_node


@pytest.mark.parametrize(("labels", "pool"), [
    ({}, None),
    ({POOL_LABEL: "a100"}, "a100"),
    ({"cloud.google.com/gke-nodepool": "gke"}, "gke"),
    ({"eks.amazonaws.com/nodegroup": "eks"}, "eks"),
    ({"karpenter.sh/nodepool": "k"}, "k"),
    ({POOL_LABEL: "ours", "karpenter.sh/nodepool": "theirs"}, "ours"),  # gpuscale's own label wins
])
def test_pool_label(labels: dict[str, str], pool: str | None) -> None:
    assert make_node(labels=labels).pool == pool


@pytest.mark.parametrize(("labels", "zone"), [
    ({}, None),
    ({ZONE_LABEL: "z1"}, "z1"),
    ({LEGACY_ZONE_LABEL: "old"}, "old"),
    ({ZONE_LABEL: "z1", LEGACY_ZONE_LABEL: "old"}, "z1"),
])
def test_zone_label(labels: dict[str, str], zone: str | None) -> None:
    assert make_node(labels=labels).zone == zone


def test_nodes_hash_by_name() -> None:
    assert hash(make_node("a")) == hash(make_node("a", gpus=8))
